"""NormalizePipeline: every record leaves it valid, canonical and in UTC, or is dropped with a reason (docs/records.md,
"Normalization").
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem

from mediacrawler.config import setting
from mediacrawler.contracts import field_names_of, field_of, set_field
from mediacrawler.media.urls import allowed_schemes, media_url_problem, shown_url
from mediacrawler.parsers._common import iso_utc, read_count, strip_url, utc_now_iso

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

REQUIRED = ("platform", "post_id", "url")
#: A URL that media_url_problem always passes when its scheme is allowed: ``scheme://host[/?#rest]`` with a host
#: of letters, digits, dots and dashes only (no userinfo, no port) and printable ASCII after it (nothing urlsplit
#: strips). Most media URLs are so; any other goes through media_url_problem (tests/test_pipeline_normalize.py
#: compares the two answers).
_PLAIN_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://[A-Za-z0-9.\-]+(?:[/?#][!-~]*)?\Z")
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


#: A post URL that canonical_url gives back as ``scheme://host/path`` lower-casing only scheme and host: the same
#: shape as _PLAIN_URL, without a query or a fragment (most post URLs); any other is split.
_PLAIN_PAGE = re.compile(r'([A-Za-z][A-Za-z0-9+.\-]*)://([A-Za-z0-9.\-]+)(/[!"$->@-~]*)?\Z')


def canonical_url(url: Any) -> str:
    """An absolute http(s) URL without query or fragment; ValueError otherwise."""
    m = _PLAIN_PAGE.match(url) if isinstance(url, str) else None
    if m is not None and (scheme := m.group(1).lower()) in ("http", "https"):
        return f"{scheme}://{m.group(2).lower()}{m.group(3) or '/'}"
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

    # Every record is read and written through contracts.field_of/set_field: ItemAdapter's semantics without an
    # adapter built per post, metrics and asset (docs/benchmarks.md, "Weibo timeline").
    def process_item(self, item: Any) -> Any:
        if field_of(item, "comment_id"):
            return self._comment(item)
        missing = [f for f in REQUIRED if not field_of(item, f)]  # None for a field the item lacks
        if missing:
            raise self._drop("missing_field", f"missing {', '.join(missing)}")
        self._normalize(item, top=True)
        self.stats.inc_value("normalize/posts")
        return item

    def _comment(self, item: Any) -> Any:
        """A comment: its ids, times in UTC, counts and media checked as a post's (docs/records.md, "Comment")."""
        missing = [f for f in COMMENT_REQUIRED if not field_of(item, f)]
        if missing:
            raise self._drop("missing_field", f"comment: missing {', '.join(missing)}")
        try:
            set_field(item, "created_at", to_utc_iso(field_of(item, "created_at")))
            set_field(item, "fetched_at", to_utc_iso(field_of(item, "fetched_at")) or utc_now_iso())
        except ValueError as e:
            raise self._drop("invalid_field", str(e)) from None
        self._counts(item)
        for asset in field_of(item, "media") or []:
            self._check_media(asset)
        self.stats.inc_value("normalize/comments")
        return item

    def _counts(self, item: Any) -> None:
        metrics = field_of(item, "metrics")
        if metrics is not None:
            for name in field_names_of(metrics):
                count, reason = read_count(field_of(metrics, name))
                if reason is not None and reason.startswith("count over"):
                    self.stats.inc_value("normalize/count_out_of_range")  # never a 300-digit number in a record
                set_field(metrics, name, count)

    def _normalize(self, item: Any, *, top: bool) -> None:
        try:
            set_field(item, "url", canonical_url(_required(item, "url")))
            set_field(item, "created_at", to_utc_iso(field_of(item, "created_at")))
            if top or field_of(item, "fetched_at"):
                set_field(item, "fetched_at", to_utc_iso(field_of(item, "fetched_at")) or utc_now_iso())
        except ValueError as e:
            if top:
                raise self._drop("invalid_field", str(e)) from None
            raise
        post_id = _required(item, "post_id")
        if type(post_id) is not str:
            set_field(item, "post_id", str(post_id))
        self._counts(item)
        for asset in field_of(item, "media") or []:
            self._check_media(asset)
        reposted = field_of(item, "reposted")
        if reposted is not None:
            try:
                self._normalize(reposted, top=False)
            except ValueError as e:
                # A broken original never costs us the repost itself: keep the repost, drop the bad nested part.
                logger.warning("normalize: dropping invalid reposted original of %s: %s",
                               field_of(item, "post_id"), e)
                set_field(item, "reposted", None)
                self.stats.inc_value("normalize/reposted_invalid")

    def _check_media(self, asset: Any) -> None:
        """Mark an asset whose URL must not be requested as failed (the media pipeline's reasons and stats)."""
        url = field_of(asset, "url")
        problem = self.url_problem(url)
        if problem is not None:
            if isinstance(url, str):
                # Never the password, nor a multi-KB data: URL, in the record, the log or a stat.
                set_field(asset, "url", url := shown_url(url, self.url_shown))
            set_field(asset, "status", "failed")
            set_field(asset, "error", problem)
            self.stats.inc_value("media/failed")
            self.stats.inc_value(f"media/failed/{problem}")
            logger.warning("Media asset %s failed: %s", url, problem)
        alternates = field_of(asset, "alternates")
        kept = [u for u in (alternates or []) if self.url_problem(u) is None]
        if not isinstance(alternates, list) or len(kept) != len(alternates):  # else the same list: kept as it is
            set_field(asset, "alternates", kept)


    def url_problem(self, url: Any) -> str | None:
        """``media_url_problem(url)`` with this crawl's settings; a plain URL (:data:`_PLAIN_URL`) answered without
        splitting it (two to four URLs per asset: 2-4 urlsplit calls of ~3 us each per asset)."""
        if type(url) is str and len(url) <= self.max_url:
            m = _PLAIN_URL.match(url)
            if m is not None and m.group(1).lower() in self.allowed_schemes:
                return None
        return media_url_problem(url, allowed_schemes=self.allowed_schemes, max_length=self.max_url)


def _required(item: Any, name: str) -> Any:
    """``ItemAdapter(item)[name]``: a KeyError for a field the item lacks."""
    if name in getattr(type(item), "__dataclass_fields__", ()):
        return getattr(item, name)
    return ItemAdapter(item)[name]
