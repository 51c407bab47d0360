"""ShutdownGraceExtension: a graceful stop (first SIGTERM/SIGINT, e.g. scrapyd's cancel.json) ends within a bound.

Scrapy's first signal closes the spider gracefully: no new requests, but everything in flight runs to its end.
Media downloads bypass the scheduler and keep their own retries, so one stalled CDN connection holds the close for
DOWNLOAD_TIMEOUT x (RETRY_TIMES + 1) (four minutes with our defaults, measured). This extension gives the close
``SHUTDOWN_GRACE`` seconds, then stops the reactor as Scrapy's second signal does. Nothing is lost by that: the
checkpoint is saved after each completed page (never ahead of the flushed export), so the next run resumes from
it and fetches again what was in flight. See docs/operations.md, "Deploying on scrapyd".

The start of a graceful stop is read from ``crawler.engine.running``, which Scrapy clears as soon as
``engine.stop_async()`` begins (CloseSpider closes, such as ``closespider_timeout``, are not stops and keep their
own pace); there is no signal for it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

from mediacrawler.config import setting

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from twisted.internet.interfaces import IDelayedCall

logger = logging.getLogger(__name__)


class ShutdownGraceExtension:
    """Bounds a graceful stop to ``SHUTDOWN_GRACE`` seconds (0: no bound); see the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.grace = setting(crawler.settings, "SHUTDOWN_GRACE")
        if self.grace < 0:
            raise ValueError(f"SHUTDOWN_GRACE={self.grace!r}: expected a number >= 0 (0: no bound)")
        if self.grace == 0:
            raise NotConfigured("SHUTDOWN_GRACE is 0: a graceful stop waits for everything in flight")
        self.poll_interval = setting(crawler.settings, "SHUTDOWN_POLL_INTERVAL")
        if self.poll_interval <= 0:
            raise ValueError(f"SHUTDOWN_POLL_INTERVAL={self.poll_interval!r}: expected a number > 0")
        self.crawler = crawler
        self._watch: task.LoopingCall | None = None
        self._deadline: IDelayedCall | None = None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        self._watch = task.LoopingCall(self._check_stopping)
        self._watch.start(self.poll_interval, now=False)

    def _check_stopping(self) -> None:
        engine = self.crawler.engine
        if engine is None or engine.running or self._deadline is not None:
            return
        from twisted.internet import reactor

        self._stop_watch()
        logger.info("Graceful stop: in-flight requests have %.0f s to finish (SHUTDOWN_GRACE)", self.grace)
        self._deadline = reactor.callLater(self.grace, self._force_stop)  # type: ignore[attr-defined]

    def _force_stop(self) -> None:
        from twisted.internet import reactor

        assert self.crawler.stats is not None
        self.crawler.stats.set_value("shutdown/forced", True)
        logger.warning("Graceful stop took longer than SHUTDOWN_GRACE=%.0f s: stopping now; the checkpoint keeps "
                       "the last completed page, the next run fetches what was in flight again", self.grace)
        if reactor.running:  # type: ignore[attr-defined]
            reactor.stop()  # type: ignore[attr-defined]  # what Scrapy's second signal does

    def _stop_watch(self) -> None:
        if self._watch is not None and self._watch.running:
            self._watch.stop()
        self._watch = None

    def spider_closed(self, spider: Spider) -> None:
        self._stop_watch()
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
