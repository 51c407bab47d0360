"""Item-level dedupe: drop a post already emitted (same platform and post_id) within ``DEDUPE_TTL``.

Seen posts live in the cache set ``dedup:{platform}`` (member: the post id), each entry expiring ``DEDUPE_TTL``
seconds after it was added, so a post comes back once its entry has expired and the set never outgrows the posts
seen within one TTL. Check and add are one atomic cache call (:meth:`~mediacrawler.cache.base.Cache.add_if_absent`):
with a shared Redis, two workers racing on one post emit it once.

When the cache stays unreachable past its retry budget, the post is **let through** unchecked and counted in
``dedupe/unavailable`` (with one WARNING per outage): a possible duplicate downstream is recoverable, a post lost to
an outage is not.

Stats: ``dedupe/accepted``, ``dedupe/dropped``, ``dedupe/unavailable``, ``dedupe/no_id`` (items without platform or
post_id, passed on untouched; normalize drops those).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.asyncio import is_asyncio_available
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

from mediacrawler.cache.base import CacheUnavailable, cache_from_crawler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_DEDUPE_TTL = 86400.0


def dedupe_key(platform: str) -> str:
    """The cache set holding the ids of *platform*'s posts already seen."""
    return f"dedup:{platform}"


class DedupePipeline:
    """Drops posts already seen within ``DEDUPE_TTL`` seconds (settings: ``DEDUPE_ENABLED``, ``DEDUPE_TTL``).

    ``DEDUPE_TTL = 0`` remembers posts for ever (until the set is deleted).
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        settings = crawler.settings
        if not settings.getbool("DEDUPE_ENABLED", True):
            raise NotConfigured("DEDUPE_ENABLED is off")
        ttl = settings.getfloat("DEDUPE_TTL", DEFAULT_DEDUPE_TTL)
        if ttl < 0:
            raise NotConfigured(f"DEDUPE_TTL must be >= 0 seconds (0: never forget), got {ttl!r}")
        self.ttl: float | None = ttl or None
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.cache = cache_from_crawler(crawler)
        self._outage_logged = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupePipeline:
        return cls(crawler)

    async def _call(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # redis-py is blocking, and on an outage the cache sleeps through its back-off: that must happen in a
        # worker thread, never on the reactor thread. We chose a thread over redis.asyncio because one synchronous
        # contract then serves both backends, the session store and non-reactor callers (CLI, tests, other
        # processes), and the process-wide pool is not tied to one event loop. The memory backend never blocks,
        # so it is called inline.
        if not self.cache.blocking:
            return func(*args, **kwargs)
        if is_asyncio_available():
            return await asyncio.to_thread(func, *args, **kwargs)
        return await maybe_deferred_to_future(deferToThread(func, *args, **kwargs))

    async def process_item(self, item: Any) -> Any:
        adapter = ItemAdapter(item)
        platform, post_id = adapter.get("platform"), adapter.get("post_id")
        if not platform or not post_id:
            self.stats.inc_value("dedupe/no_id")
            return item
        try:
            added = await self._call(self.cache.add_if_absent, dedupe_key(platform), str(post_id), ttl=self.ttl)
        except CacheUnavailable as exc:
            self.stats.inc_value("dedupe/unavailable")
            if not self._outage_logged:
                self._outage_logged = True
                logger.warning(
                    "dedupe: %s; letting posts through unchecked until it returns (counted in dedupe/unavailable)",
                    exc,
                )
            return item
        self._outage_logged = False
        if not added:
            self.stats.inc_value("dedupe/dropped")
            raise DropItem(f"duplicate post {platform}:{post_id}", log_level="DEBUG")
        self.stats.inc_value("dedupe/accepted")
        return item
