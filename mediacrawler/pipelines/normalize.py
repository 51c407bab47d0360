"""NormalizePipeline: every record leaves it valid, canonical and in UTC, or is dropped with a reason (docs/records.md,
"Normalization").
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem

from mediacrawler.config import setting
from mediacrawler.media.urls import allowed_schemes, media_url_problem, shown_url
from mediacrawler.parsers._common import iso_utc, read_count, strip_url, utc_now_iso

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

REQUIRED = ("platform", "post_id", "url")
COMMENT_REQUIRED = ("platform", "comment_id", "post_id", "root_id")

def to_utc_iso(value: Any) -> str | None:
    """An ISO 8601 timestamp (any offset) as UTC with ``Z``; ``None`` for empty; ValueError when unreadable."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ValueError(f"not a timestamp: {value!r}")
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"timestamp without a timezone: {value!r}")
    return iso_utc(dt)


def canonical_url(url: Any) -> str:
    """An absolute http(s) URL without query or fragment; ValueError otherwise."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an absolute http(s) URL: {url!r}")
    return strip_url(url)


class NormalizePipeline:
    """Validates and normalizes post records (docs/records.md, "Normalization")."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.allowed_schemes = allowed_schemes(crawler.settings)
        self.max_url: int = setting(crawler.settings, "MEDIA_MAX_URL_LENGTH")
        self.url_shown: int = setting(crawler.settings, "MEDIA_URL_SHOWN")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NormalizePipeline:
        return cls(crawler)

    def _drop(self, reason: str, detail: str) -> DropItem:
        self.stats.inc_value(f"normalize/dropped/{reason}")
        return DropItem(f"not a valid post ({reason}): {detail}")

    def process_item(self, item: Any) -> Any:
        adapter = ItemAdapter(item)
        if adapter.get("comment_id"):
            return self._comment(item, adapter)
        missing = [f for f in REQUIRED if not adapter.get(f)]  # get: None for a field the item lacks
        if missing:
            raise self._drop("missing_field", f"missing {', '.join(missing)}")
        self._normalize(adapter, top=True)
        self.stats.inc_value("normalize/posts")
        return item

    def _comment(self, item: Any, adapter: ItemAdapter) -> Any:
        """A comment: its ids, times in UTC, counts and media checked as a post's (docs/records.md, "Comment")."""
        missing = [f for f in COMMENT_REQUIRED if not adapter.get(f)]
        if missing:
            raise self._drop("missing_field", f"comment: missing {', '.join(missing)}")
        try:
            adapter["created_at"] = to_utc_iso(adapter.get("created_at"))
            adapter["fetched_at"] = to_utc_iso(adapter.get("fetched_at")) or utc_now_iso()
        except ValueError as e:
            raise self._drop("invalid_field", str(e)) from None
        self._counts(adapter)
        for asset in adapter.get("media") or []:
            self._check_media(ItemAdapter(asset))
        self.stats.inc_value("normalize/comments")
        return item

    def _counts(self, adapter: ItemAdapter) -> None:
        metrics = adapter.get("metrics")
        if metrics is not None:
            m = ItemAdapter(metrics)
            for name in m.field_names():
                count, reason = read_count(m.get(name))
                if reason is not None and reason.startswith("count over"):
                    self.stats.inc_value("normalize/count_out_of_range")  # never a 300-digit number in a record
                m[name] = count

    def _normalize(self, adapter: ItemAdapter, *, top: bool) -> None:
        try:
            adapter["url"] = canonical_url(adapter["url"])
            adapter["created_at"] = to_utc_iso(adapter.get("created_at"))
            if top or adapter.get("fetched_at"):
                adapter["fetched_at"] = to_utc_iso(adapter.get("fetched_at")) or utc_now_iso()
        except ValueError as e:
            if top:
                raise self._drop("invalid_field", str(e)) from None
            raise
        adapter["post_id"] = str(adapter["post_id"])
        self._counts(adapter)
        for asset in adapter.get("media") or []:
            self._check_media(ItemAdapter(asset))
        reposted = adapter.get("reposted")
        if reposted is not None:
            try:
                self._normalize(ItemAdapter(reposted), top=False)
            except ValueError as e:
                # A broken original never costs us the repost itself: keep the repost, drop the bad nested part.
                logger.warning("normalize: dropping invalid reposted original of %s: %s", adapter["post_id"], e)
                adapter["reposted"] = None
                self.stats.inc_value("normalize/reposted_invalid")

    def _check_media(self, asset: ItemAdapter) -> None:
        """Mark an asset whose URL must not be requested as failed (the media pipeline's reasons and stats)."""
        url = asset.get("url")
        problem = media_url_problem(url, allowed_schemes=self.allowed_schemes, max_length=self.max_url)
        if problem is not None:
            if isinstance(url, str):
                # Never the password, nor a multi-KB data: URL, in the record, the log or a stat.
                asset["url"] = url = shown_url(url, self.url_shown)
            asset["status"] = "failed"
            asset["error"] = problem
            self.stats.inc_value("media/failed")
            self.stats.inc_value(f"media/failed/{problem}")
            logger.warning("Media asset %s failed: %s", url, problem)
        alternates = asset.get("alternates")
        kept = [u for u in (alternates or [])
                if media_url_problem(u, allowed_schemes=self.allowed_schemes, max_length=self.max_url) is None]
        if not isinstance(alternates, list) or len(kept) != len(alternates):  # else the same list: kept as it is
            asset["alternates"] = kept
