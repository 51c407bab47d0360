"""DateWindowPipeline: drops the posts outside the job's ``-a since``/``-a until`` window that only a chain step
could date (a listing's dated posts are cut by the spider before any step runs: spiders/_window.py). Before the
media pipeline, so their media is never fetched (docs/platforms.md, "Date windows")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy.exceptions import DropItem

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class OutsideWindow(DropItem):
    """A post published outside the job's date window."""


class DateWindowPipeline:
    """Drops posts whose ``created_at`` is outside the spider's :meth:`date_window` (unknown times are kept)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        assert crawler.stats is not None
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_item(self, item: Any) -> Any:
        window_of = getattr(self.crawler.spider, "date_window", None)
        window = window_of() if window_of is not None else None
        if window is None or not is_item(item):
            return item
        adapter = ItemAdapter(item)
        created_at = adapter.get("created_at")
        if window.admits(created_at if isinstance(created_at, str) else None):
            return item
        self.stats.inc_value("window/outside")
        # A post asked for by id (-a bvid=…) is named at INFO: a requested item is never dropped silently.
        kind = getattr(self.crawler.spider, "source_kind", None)
        level = "INFO" if kind is not None and kind() == "items" else "DEBUG"
        raise OutsideWindow(f"post {adapter.get('post_id')} (published {created_at}) is outside the date window "
                            f"(-a since/-a until); not emitted", log_level=level)
