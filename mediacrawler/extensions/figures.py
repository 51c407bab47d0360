"""The headline figures of a crawl (pages, posts, comments, media, bytes, errors) from its stats: the one mapping
of stats keys that the metrics endpoint (metrics.py), the progress line (progress.py) and the ``runs`` table
(runs.py, read by the jobs page) share. Kept apart from metrics.py so that the progress line and the runs table do
not import prometheus-client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The outcomes of an asset with a file in the store (the ``media`` figure).
MEDIA_STORED = ("downloaded", "uptodate", "deduplicated")


def number(stats: Mapping[str, Any], key: str) -> float:
    """The numeric stat ``key`` (0 when missing or not a number)."""
    value = stats.get(key, 0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def crawl_figures(stats: Mapping[str, Any], *, platform: str) -> dict[str, int]:
    """The figures of one crawl's *stats* (a plain dict copy): its ``records.store.RUN_COUNTS`` and the few the
    metric families add (``comments_dropped``, ``bytes_received``)."""
    # Scrapy counts every item; comments (-a comments) are counted apart (spiders/_threads.py).
    comments, comments_dropped = number(stats, "comments/scraped"), number(stats, "comments/dropped")
    figures = {
        "pages": number(stats, f"{platform}/pages"), "pages_failed": number(stats, f"{platform}/pages_failed"),
        "posts": number(stats, "item_scraped_count") - comments,
        "posts_dropped": number(stats, "item_dropped_count") - comments_dropped,
        "comments": comments, "comments_dropped": comments_dropped,
        "media": sum(number(stats, f"media/{status}") for status in MEDIA_STORED),
        "media_failed": number(stats, "media/failed"), "bytes": number(stats, "media/stored_bytes"),
        "bytes_received": number(stats, "media/response_bytes") + number(stats, "media/segments/response_bytes"),
        # ERROR lines of the crawl's log: what went wrong that no other figure counts (a spider exception…).
        "errors": number(stats, "log_count/ERROR"),
    }
    return {name: int(value) for name, value in figures.items()}
