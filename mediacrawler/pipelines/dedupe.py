"""Item-level dedupe: drop a post already emitted (same platform and post_id) within ``DEDUPE_TTL``; a post in
flight is claimed by the job emitting it. The life of a post, the keys, outages and stats are in
docs/architecture.md, "Dedupe".
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from scrapy import signals
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.asyncio import is_asyncio_available
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread

from mediacrawler.cache.base import CacheUnavailable, cache_from_crawler
from mediacrawler.config import setting
from mediacrawler.contracts import AlreadyStored, PendingRetries, field_of, is_record
from mediacrawler.feeds import sync_feeds
from mediacrawler.jobstate import job_state

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

T = TypeVar("T")

PostKey = tuple[str, str]  # (platform, post_id)


def dedupe_key(platform: str) -> str:
    """The cache set holding the ids of *platform*'s posts already seen (emitted)."""
    return f"dedup:{platform}"


def claim_key(platform: str, post_id: str) -> str:
    """The cache key holding the owner (job key) of a post in flight."""
    return f"dedup-claim:{platform}:{post_id}"


def alive_key(worker: str) -> str:
    """The cache key a distributed worker keeps alive while it lives (its claims are taken over once gone)."""
    return f"dedup-alive:{worker}"


class DuplicatePost(DropItem):
    """Dropped by the dedupe pipeline: the post was already emitted (or is in flight in this run)."""


class ClaimedElsewhere(DropItem):
    """Dropped by the dedupe pipeline: another job holds the post's claim (it is emitting it)."""


def _post_key(item: Any) -> PostKey | None:
    """(platform, post_id) of a post; (``<platform>-comments``, comment_id) of a comment: each kind has its own
    set of ids seen (``dedup:weibo``, ``dedup:weibo-comments``)."""
    if not is_record(item):
        return None
    platform, post_id = field_of(item, "platform"), field_of(item, "post_id")
    comment_id = field_of(item, "comment_id")
    if comment_id and platform:
        return f"{platform}-comments", str(comment_id)
    if not platform or not post_id:
        return None
    return str(platform), str(post_id)


class _Batch:
    """Posts to commit in one go, and whoever waits for that commit (futures or Deferreds)."""

    __slots__ = ("posts", "task", "waiters")

    def __init__(self) -> None:
        self.posts: dict[PostKey, bool] = {}  # post → whether it was in flight through this pipeline
        self.waiters: list[Any] = []
        self.task: Any = None


class DedupePipeline:
    """Drops posts already emitted within ``DEDUPE_TTL`` seconds, or being emitted by another job
    (docs/architecture.md, "Dedupe").

    ``DEDUPE_TTL = 0`` remembers posts for ever (until the set is deleted).
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        settings = crawler.settings
        if not setting(settings, "DEDUPE_ENABLED"):
            raise NotConfigured("DEDUPE_ENABLED is off")
        ttl = setting(settings, "DEDUPE_TTL")
        if ttl < 0:
            raise ValueError(f"DEDUPE_TTL={ttl!r}: expected a number of seconds >= 0 (0: never forget)")
        self.ttl: float | None = ttl or None
        claim_ttl = setting(settings, "DEDUPE_CLAIM_TTL")
        if not claim_ttl > 0:
            raise ValueError(f"DEDUPE_CLAIM_TTL={claim_ttl!r}: expected a number of seconds > 0")
        self.claim_ttl = claim_ttl
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.cache = cache_from_crawler(crawler)
        #: The owner written into claims: the job key. None until the first item (the spider exists by then).
        self.owner: str | None = None
        #: The retry extension, when on: it says which posts still have media to retry.
        self.retries = crawler.get_extension(PendingRetries)  # type: ignore[type-abstract]
        # Posts this run let through and that have not left the pipelines yet, with the item that carries each.
        self._in_flight: dict[PostKey, Any] = {}
        self._batch: _Batch | None = None
        self._outage_logged = False
        self._commit_outage_logged = False
        # Scrapy's own signals: these handlers wait for their batch of commits (the item is done after it).
        crawler.signals.connect(self.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(self.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(self.item_error, signal=signals.item_error)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        #: On the shared queue: this worker's id (the owner is ``<job>@<worker>``) and its liveness beat.
        self.worker: str | None = None
        self._beat: LoopingCall | None = None
        self.heartbeat = setting(settings, "DISTRIBUTED_HEARTBEAT")
        if setting(settings, "REDIS_URL") and setting(settings, "DISTRIBUTED_ENABLED") and self.heartbeat > 0:
            self.alive_ttl = setting(settings, "DISTRIBUTED_LEASE_TTL") - self.heartbeat
            if not self.alive_ttl > self.heartbeat:
                raise ValueError(f"DISTRIBUTED_LEASE_TTL={self.alive_ttl + self.heartbeat!r}: expected > 2 x "
                                 f"DISTRIBUTED_HEARTBEAT ({self.heartbeat!r})")
            crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupePipeline:
        return cls(crawler)

    def _owner(self) -> str:
        if self.worker is not None:
            # Read per call: a worker serves one job after another (a new job state with each).
            return f"{self._job() or 'mediacrawler'}@{self.worker}"
        if self.owner is None:
            self.owner = self._job() or "mediacrawler"
        return self.owner

    def _job(self) -> str | None:
        """The key of the job the crawl's spider walks, else the spider's name (``None``: no spider yet)."""
        spider = getattr(self.crawler, "spider", None)
        state = job_state(spider)
        return state.job if state is not None else getattr(spider, "name", None)

    # --- Workers of one job on the shared queue ------------------------------------------------------------------
    def spider_opened(self, spider: Any) -> None:
        self.worker = str(getattr(spider, "worker_id", None) or
                          f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        if self.cache.shared:
            self._beat = LoopingCall(self._beat_once)
            self._beat.start(self.heartbeat, now=True)

    def _beat_once(self) -> Any:
        assert self.worker is not None
        d = deferToThread(self.cache.set, alive_key(self.worker), "1", ttl=self.alive_ttl)
        d.addErrback(lambda f: logger.debug("dedupe: liveness beat failed: %s", f.getErrorMessage()))
        return d

    def _claim(self, key: str, owner: str, seen: tuple[str, str] | None) -> str | None:
        """Claim *key*; a claim of this job held by a worker no longer alive is taken over (worker thread)."""
        holder = self.cache.claim(key, owner, ttl=self.claim_ttl, unless_in=seen)
        if holder is None or holder == owner or self.worker is None:
            return holder
        job, sep, worker = holder.rpartition("@")
        if not sep or job != owner.rpartition("@")[0] or self.cache.exists(alive_key(worker)):
            return holder
        # Its worker died before the post was stored: the lease takeover re-emits it, and one of us emits it.
        if self.cache.release(key, holder):
            self.stats.inc_value("dedupe/claim_taken_over")
        return self.cache.claim(key, owner, ttl=self.claim_ttl, unless_in=seen)

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

    # --- In: check and claim -------------------------------------------------------------------------------------
    async def process_item(self, item: Any) -> Any:
        found = _post_key(item)
        if found is None:
            self.stats.inc_value("dedupe/no_id")
            return item
        key: PostKey = found
        platform, post_id = key
        if key in self._in_flight:
            self.stats.inc_value("dedupe/dropped")
            raise DuplicatePost(f"duplicate post {platform}:{post_id} (in flight in this run)", log_level="DEBUG")
        owner = self._owner()
        self._in_flight[key] = item  # reserved before the await: a second copy arriving meanwhile is dropped
        seen: tuple[str, str] | None = (dedupe_key(key[0]), key[1])
        if self.retries is not None and not platform.endswith("-comments") and self.retries.pending_post(key[1]):
            seen = None  # media of it failed before: never dropped as seen until they are stored
            self.stats.inc_value("dedupe/retry_pending")
        try:
            holder = await self._call(self._claim, claim_key(*key), owner, seen)
        except CacheUnavailable as exc:
            self.stats.inc_value("dedupe/unavailable")
            if not self._outage_logged:
                self._outage_logged = True
                logger.warning(
                    "dedupe: %s; letting posts through unchecked until it returns (counted in dedupe/unavailable)",
                    exc,
                )
            return item  # stays in flight: committed when scraped, if the cache is back by then
        except BaseException:
            self._in_flight.pop(key, None)
            raise
        self._outage_logged = False
        if holder is None:
            self._in_flight.pop(key, None)
            self.stats.inc_value("dedupe/dropped")
            raise DuplicatePost(f"duplicate post {platform}:{post_id}", log_level="DEBUG")
        if holder != owner:
            self._in_flight.pop(key, None)
            self.stats.inc_value("dedupe/claimed_elsewhere")
            raise ClaimedElsewhere(f"post {platform}:{post_id} is being emitted by job {holder}",
                                   log_level="DEBUG")
        self.stats.inc_value("dedupe/accepted")
        return item

    # --- Out: commit on success, release on failure --------------------------------------------------------------
    async def item_scraped(self, item: Any, spider: Any = None) -> None:
        key = _post_key(item)
        if key is not None:
            await self._commit(key, in_flight=True)

    async def item_dropped(self, item: Any, spider: Any = None, exception: BaseException | None = None) -> None:
        if isinstance(exception, (DuplicatePost, ClaimedElsewhere)):
            return  # our own drop: nothing claimed
        key = _post_key(item)
        if key is None:
            return
        if isinstance(exception, AlreadyStored):
            # Dropped before this pipeline because an interrupted earlier run of this job stored it: that run
            # emitted it, so it is seen (and the stale claim of that run is released).
            await self._commit(key, in_flight=False)
            return
        await self._release(key, item)

    async def item_error(self, item: Any, spider: Any = None, failure: Any = None) -> None:
        key = _post_key(item)
        if key is not None:
            await self._release(key, item)

    async def spider_closed(self, spider: Any = None, reason: str | None = None) -> None:
        # Every item has left the pipelines by now; a post still listed was carried out of them by another object
        # than the one this pipeline passed (a later pipeline replaced it before dropping it): release it too.
        for key, item in list(self._in_flight.items()):
            await self._release(key, item)
        if self._beat is not None and self._beat.running:
            self._beat.stop()
            assert self.worker is not None
            try:
                await self._call(self.cache.delete, alive_key(self.worker))
            except CacheUnavailable:
                pass  # it expires on its own

    async def _release(self, key: PostKey, item: Any) -> None:
        # Only the copy this pipeline passed holds the claim; another copy of the post, dropped before it got
        # here, must not release it.
        if self._in_flight.get(key) is not item:
            return
        try:
            released = await self._call(self.cache.release, claim_key(*key), self._owner())
        except CacheUnavailable as exc:
            self.stats.inc_value("dedupe/release_unavailable")
            logger.debug("dedupe: cannot release the claim of %s:%s (%s); it expires on its own", *key, exc)
        else:
            if released:
                self.stats.inc_value("dedupe/released")
        finally:
            if self._in_flight.get(key) is item:
                del self._in_flight[key]

    async def _commit(self, key: PostKey, *, in_flight: bool) -> None:
        """Add *key* to the next batch of commits and return once that batch is done."""
        batch = self._batch
        if batch is None:
            batch = self._batch = _Batch()
            self._schedule(batch)
        batch.posts[key] = batch.posts.get(key, False) or in_flight
        if is_asyncio_available():
            waiter: Any = asyncio.get_running_loop().create_future()
            batch.waiters.append(waiter)
            await waiter
        else:
            d: Deferred[None] = Deferred()
            batch.waiters.append(d)
            await d

    def _schedule(self, batch: _Batch) -> None:
        # The batch runs on a later turn of the loop, after every item_scraped handler already started in this
        # one (the feed exporter's included): what it flushes holds every post it commits.
        if is_asyncio_available():
            batch.task = asyncio.get_running_loop().create_task(self._flush(batch))
        else:
            from twisted.internet import reactor

            call_later = reactor.callLater  # type: ignore[attr-defined]
            batch.task = call_later(0, lambda: deferred_from_coro(self._flush(batch)))

    async def _flush(self, batch: _Batch) -> None:
        if self._batch is batch:
            self._batch = None
        posts = list(batch.posts)
        try:
            if self.cache.shared:
                # The export first: a post the cache calls seen must be on disk (a memory cache dies with the
                # process, so the order only matters for a shared one).
                sync_feeds(self.crawler)
            await self._call(self._commit_posts, posts)
        except CacheUnavailable as exc:
            self.stats.inc_value("dedupe/commit_unavailable", len(posts))
            if not self._commit_outage_logged:
                self._commit_outage_logged = True
                logger.warning(
                    "dedupe: %s; posts emitted meanwhile are not marked seen "
                    "(counted in dedupe/commit_unavailable)",
                    exc,
                )
        except Exception:
            # A feed that cannot be synced (or a cache error): better a possible duplicate later than a post
            # marked seen that is not stored. The claims stay and expire on their own.
            self.stats.inc_value("dedupe/commit_failed", len(posts))
            logger.exception("dedupe: cannot commit %d posts as seen", len(posts))
        else:
            self._commit_outage_logged = False
            self.stats.inc_value("dedupe/committed", len(posts))
        finally:
            for key, in_flight in batch.posts.items():
                if in_flight:
                    self._in_flight.pop(key, None)
            for waiter in batch.waiters:
                if isinstance(waiter, Deferred):
                    if not waiter.called:
                        waiter.callback(None)
                elif not waiter.done():
                    waiter.set_result(None)

    def _commit_posts(self, posts: Iterable[PostKey]) -> None:
        """Seen first, then the claims released (runs in a worker thread for a blocking cache)."""
        by_platform: dict[str, list[str]] = {}
        for platform, post_id in posts:
            by_platform.setdefault(platform, []).append(post_id)
        for platform, ids in by_platform.items():
            self.cache.sadd(dedupe_key(platform), *ids, ttl=self.ttl)
        owner = self._owner()
        for platform, ids in by_platform.items():
            for post_id in ids:
                self.cache.release(claim_key(platform, post_id), owner)
