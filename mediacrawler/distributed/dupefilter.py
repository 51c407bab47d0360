"""The shared duplicate filter: Scrapy's own request fingerprinter, "seen" only once a request was acknowledged.

scrapy-redis marks a fingerprint seen when the request is enqueued, so a request lost with its worker stays "seen"
for good. Here a fingerprint is *pending* while its request is queued or leased and *seen* once it is acknowledged
(:mod:`.queue`); both filter duplicates, and the check and the enqueue are one Lua script (the scheduler calls
:meth:`RedisDupeFilter.fingerprint` and lets the queue decide). :meth:`request_seen` answers the same question for
code that uses the filter alone. ``close`` never deletes anything: the state is shared by every worker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request, Spider
from scrapy.exceptions import NotConfigured
from scrapy_redis.dupefilter import RFPDupeFilter

from mediacrawler.config import setting
from mediacrawler.distributed.connection import client_from_settings, key_base

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class RedisDupeFilter(RFPDupeFilter):
    """``DUPEFILTER_CLASS`` with ``REDIS_URL``: fingerprints by ``crawler.request_fingerprinter``."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "REDIS_URL"):
            raise NotConfigured("RedisDupeFilter needs REDIS_URL")
        self.crawler = crawler
        self.prefix = str(setting(settings, "DISTRIBUTED_KEY_PREFIX"))
        super().__init__(client_from_settings(settings), key=f"{self.prefix}:unbound", debug=settings.getbool(
            "DUPEFILTER_DEBUG"))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def fingerprint(self, request: Request) -> str:
        """Scrapy's fingerprint of ``request`` (the project's ``REQUEST_FINGERPRINTER_*``), as hex."""
        assert self.crawler.request_fingerprinter is not None
        return self.crawler.request_fingerprinter.fingerprint(request).hex()

    request_fingerprint = fingerprint  # scrapy-redis's name

    def base_for(self, spider: Spider) -> str | None:
        job = job_queue_of(spider)
        return None if job is None else key_base(self.prefix, spider.name, job)

    def request_seen(self, request: Request) -> bool:
        spider = self.crawler.spider
        base = self.base_for(spider) if spider is not None else None
        if base is None:
            return False
        fp = self.fingerprint(request)
        return bool(self.server.sismember(f"{base}:seen", fp) or self.server.hexists(f"{base}:pending", fp))

    def close(self, reason: str = "") -> None:
        """Nothing to do: the filter is shared; a finished job's keys are deleted by the queue's ``finish``."""

    def clear(self) -> None:
        """Never flush shared state from a worker."""

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request}, extra={"spider": spider})
        elif self.logdupes:
            logger.debug("Filtered duplicate request %(request)s (further duplicates are not logged; see "
                         "DUPEFILTER_DEBUG)", {"request": request}, extra={"spider": spider})
            self.logdupes = False
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("dupefilter/filtered")


_NO_ATTR: Any = object()


def job_queue_of(spider: Spider) -> str | None:
    """Which job's queue ``spider`` serves: its ``job_queue`` attribute (None: no job yet, e.g. a worker waiting for
    one), else the spider's name (spiders that are not platform spiders)."""
    job = getattr(spider, "job_queue", _NO_ATTR)
    return spider.name if job is _NO_ATTR else job
