"""The progress line: one INFO line every ``LOGSTATS_INTERVAL`` seconds, in the style of Scrapy's LogStats.

::

    Crawled 6 pages (at 30 pages/min), scraped 27 posts (at 480 posts/min), 97 media files (at 582 files/min),
    1.2 MiB stored (at 7.2 MiB/min), 0 media failed

Pages are the platform's listing pages (``<platform>/pages``, not every HTTP response: media requests would drown
them), posts are the exported ones (``item_scraped_count``), media files the assets with a file in the store
(downloaded, up to date or deduplicated), MiB the bytes written to the store (``media/stored_bytes``). It replaces
``scrapy.extensions.logstats.LogStats`` (disabled in settings.py, so there is one line per interval) and keeps its
final ``responses_per_minute``/``items_per_minute`` stats. See docs/operations.md, "Metrics and status".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.extensions.logstats import LogStats

from mediacrawler.config import setting
from mediacrawler.extensions.figures import crawl_figures

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


class ProgressLogStats(LogStats):
    """Scrapy's LogStats with the crawl's own figures (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        interval = setting(crawler.settings, "LOGSTATS_INTERVAL")
        if not interval:
            raise NotConfigured("LOGSTATS_INTERVAL is 0")
        assert crawler.stats is not None
        super().__init__(crawler.stats, interval)
        self.crawler = crawler
        self._prev = (0, 0, 0, 0)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def log(self, spider: Spider) -> None:
        platform = getattr(spider, "platform", None) or spider.name
        figures = crawl_figures(self.stats.get_stats(), platform=str(platform))
        pages, posts, files, stored = (figures[n] for n in ("pages", "posts", "media", "bytes"))
        comments = figures["comments"]
        prev_pages, prev_posts, prev_files, prev_stored = self._prev
        self._prev = (pages, posts, files, stored)
        m = self.multiplier
        logger.info(
            "Crawled %d pages (at %d pages/min), scraped %d posts (at %d posts/min), %d media files "
            "(at %d files/min), %.1f MiB stored (at %.1f MiB/min), %d media failed%s",
            pages, (pages - prev_pages) * m, posts, (posts - prev_posts) * m, files, (files - prev_files) * m,
            stored / MIB, (stored - prev_stored) / MIB * m, figures["media_failed"],
            f", {comments} comments" if comments else "",
            extra={"spider": spider},
        )
