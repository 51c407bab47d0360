"""The shared scheduler: scrapy-redis's Scheduler on the leased queue, with leases tracked until the work is done.

A request popped from Redis is leased to this worker (:mod:`.queue`). It is acknowledged (gone from Redis, its
fingerprint *seen*) when its callback or errback has ended, every request it yielded is in the queue and every item
it yielded has left the item pipelines (``item_scraped``/``item_dropped``/``item_error``). A retry or redirect of it
replaces it in the same script. While this worker lives a heartbeat renews its leases; any worker's heartbeat puts
expired leases (of dead workers) back in the queue, and keeps the worker in the spider's set of live workers
(``<prefix>:<spider>:workers``, read by ``mediacrawler status`` and the metrics). See docs/operations.md, "Many
workers on one Redis".

Redis round trips on the reactor thread: one script call per request enqueued (it must be durable before its
parent is acknowledged) and one per request popped, O(1) each. The heartbeat (renew, reap) runs in a thread.
While Redis cannot be reached, pops pause, pushes wait in a local backlog and acknowledgements are held (the
leases stay in Redis): a pause, not a loss. After ``DISTRIBUTED_REDIS_GIVE_UP`` seconds the spider closes with
reason ``redis_unavailable`` (what it held is leased in Redis and comes back when its leases expire). Redis
refusing the password (changed while crawling) closes it at once with ``redis_auth_failed``: waiting cannot fix it.

A one-job crawl writes a generation stamp (``<base>:generation``) when it opens and looks for it on every
heartbeat and before it declares the job finished: a Redis restarted without persistence comes back empty, which
would read as "nothing left to crawl". The stamp's absence closes the spider with ``redis_data_lost`` instead, so the checkpoint
keeps its place and the high-water mark does not advance (commands/crawl.py exits 1). A worker checks the stamp of
each job it serves, the one the job board wrote or found when it took the job (:data:`.jobs.job_started`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from inspect import isasyncgen, isawaitable
from typing import TYPE_CHECKING, Any, Self

import redis
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy_redis.scheduler import Scheduler
from twisted.internet import task, threads
from twisted.python.failure import Failure

from mediacrawler.compat import default_callback
from mediacrawler.config import setting
from mediacrawler.distributed.connection import (client_from_settings, is_auth_error, key_base, masked_url,
                                                 workers_key)
from mediacrawler.distributed.dupefilter import RedisDupeFilter, job_queue_of
from mediacrawler.distributed.jobs import job_finished, job_started
from mediacrawler.distributed.queue import SERVER_NOW, LeasedQueue, dead_key, stamp_generation
from mediacrawler.distributed.serializer import UnserializableRequest, request_from_json, request_to_json
from mediacrawler.feeds import sync_feeds
from mediacrawler.scrub import mask_url, scrub

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: meta key: the lease id of a popped request (a retry or redirect copy carries it: it replaces that lease).
LEASE_META = "mc_lease"
#: meta key: the lease id of the request whose callback yielded this one.
PARENT_META = "mc_parent"
#: meta key of the scheduler's own engine wake-ups (never stored, never downloaded).
KICK_META = "mc_distributed_kick"
#: Sent (no arguments) after the local feeds were flushed and before a batch of acknowledgements: a handler that
#: must put state in Redis before the requests are acknowledged (the shared checkpoint) does it then, and returns
#: ``False`` when it could not (the batch then waits for the next round).
acks_pending = object()

# A worker's heartbeat: it is live until now + ARGV[2] ms; workers past their deadline leave the set.
# KEYS: the spider's workers key. ARGV: worker id, ttl ms.
BEAT = SERVER_NOW + """
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return 1
"""


def worker_id() -> str:
    """A unique id for this process: host, pid and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class Lease:
    base: str
    ended: bool = False
    open: int = 0  # items in the pipelines and requests not yet enqueued, from this request's callback
    replaced: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class RedisDataLost(Exception):
    """The job's generation stamp is gone: Redis lost its data set (restarted without AOF, flushed)."""


class RedisScheduler(Scheduler):
    """``SCHEDULER`` with ``REDIS_URL`` (set by :class:`~mediacrawler.distributed.addon.DistributedAddon`)."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        if not setting(s, "REDIS_URL"):
            raise NotConfigured("RedisScheduler needs REDIS_URL")
        super().__init__(client_from_settings(s), persist=True, flush_on_start=False,
                         queue_cls="mediacrawler.distributed.queue.LeasedQueue")
        self.crawler = crawler
        self.stats = crawler.stats
        self.prefix = str(setting(s, "DISTRIBUTED_KEY_PREFIX"))
        self.lease_ms = int(setting(s, "DISTRIBUTED_LEASE_TTL") * 1000)
        self.heartbeat = setting(s, "DISTRIBUTED_HEARTBEAT")
        self.give_up = setting(s, "DISTRIBUTED_REDIS_GIVE_UP")
        self.worker = worker_id()
        self.held: dict[str, Lease] = {}
        self.backlog: deque[tuple[Request, str, str, str, bool, str | None, str | None]] = deque()
        self.unacked: deque[tuple[str, str]] = deque()
        self._queues: dict[str, LeasedQueue] = {}
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._tick: task.LoopingCall | None = None
        self._acker: task.LoopingCall | None = None
        self.ack_interval = setting(s, "DISTRIBUTED_ACK_INTERVAL")
        self._tick_running = False
        self._redis_url = masked_url(str(setting(s, "REDIS_URL")))  # for log lines: never the password
        #: (key, token) of this job's generation stamp; None: not stamped (a worker between jobs).
        self._generation: tuple[str, bytes] | None = None
        self._closing = False
        self._beat = self.server.register_script(BEAT)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # --- Scrapy's scheduler interface ------------------------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self.spider = spider
        df = self.crawler.settings.get("DUPEFILTER_CLASS")
        from scrapy.utils.misc import build_from_crawler, load_object

        self.df = build_from_crawler(load_object(df), self.crawler)
        if not isinstance(self.df, RedisDupeFilter):
            raise NotConfigured("RedisScheduler needs DUPEFILTER_CLASS = mediacrawler.distributed.dupefilter."
                                "RedisDupeFilter (or a subclass)")
        sig = self.crawler.signals
        sig.connect(self.item_done, signal=signals.item_scraped)
        sig.connect(self.item_done, signal=signals.item_dropped)
        sig.connect(self.item_done, signal=signals.item_error)
        sig.connect(self.spider_idle, signal=signals.spider_idle)
        self._tick = task.LoopingCall(self._heartbeat)
        self._tick.start(self.heartbeat, now=False)
        self._acker = task.LoopingCall(self._flush)
        self._acker.start(self.ack_interval, now=False)
        queue = self.queue_for_spider()
        if queue is not None:
            try:
                waiting = len(queue)
            except redis.RedisError:
                waiting = 0
            if waiting:
                logger.info("Resuming crawl (%d requests queued in Redis for %s)", waiting, queue.key)
            self._stamp(queue)
        # A worker: each job it serves has the stamp the job board wrote or found when it took the job.
        sig.connect(self.job_started, signal=job_started)
        sig.connect(self.job_finished, signal=job_finished)

    def _stamp(self, queue: LeasedQueue) -> None:
        """Write (or take over, when a run of this job left one) the job's generation stamp."""
        try:
            stamp = stamp_generation(self.server, f"{queue.key}:generation")
        except redis.RedisError as e:
            logger.warning("scheduler: could not stamp %s:generation (%s): a Redis losing its data goes "
                           "unnoticed", queue.key, e)
            return
        if stamp is not None:
            self._generation = stamp

    def job_started(self, spider: Spider, job: str, generation: tuple[str, bytes] | None = None) -> None:
        """Check the stamp the job board gave the job a worker now serves, on every heartbeat and before the job
        reads as finished."""
        self._generation = generation

    def job_finished(self, spider: Spider, job: str) -> None:
        self._generation = None  # the board's stamp stays: the next job checks it again

    def _check_generation(self) -> None:
        """RedisDataLost when the generation stamp is no longer the one this run wrote or found."""
        stamp = self._generation
        if stamp is not None and self.server.get(stamp[0]) != stamp[1]:
            raise RedisDataLost(stamp[0])

    def _close_for(self, reason: str, message: str, *args: Any) -> None:
        """Close the spider once with *reason* (a close reason of commands/crawl.py's REDIS_CLOSE_REASONS)."""
        if self._closing or self.crawler.engine is None:
            return
        self._closing = True
        logger.error(message, *args)
        assert self.stats is not None
        self.stats.set_value("distributed/close_reason", reason)
        deferred_from_coro(self.crawler.engine.close_spider_async(reason=reason))

    def _data_lost(self, key: str) -> None:
        self._generation = None
        self._close_for("redis_data_lost", "scheduler: %s is gone: Redis at %s lost this job's data (restarted "
                        "without persistence?); closing without completing the job", key, self._redis_url)

    def close(self, reason: str) -> None:
        """Hand back what this worker still holds (queued again at once); never delete shared state."""
        for loop in (self._tick, self._acker):
            if loop is not None and loop.running:
                loop.stop()
        self._retry_at = 0.0
        if reason == "redis_data_lost":
            self._drop_fragment()
            return
        self._flush()
        by_base: dict[str, list[str]] = {}
        for rid, lease in self.held.items():
            if not lease.extra.get("done"):
                by_base.setdefault(lease.base, []).append(rid)
        for base, rids in by_base.items():
            try:
                n = self._queue(base).release(self.worker, rids)
                logger.info("Released %d leased request(s) of %s back to the queue", n, base)
            except redis.RedisError as e:
                logger.warning("Could not release %d leased request(s) (%s); they return when their leases "
                               "expire", len(rids), e)
        spider = getattr(self, "spider", None)
        if spider is not None:
            try:
                self.server.zrem(workers_key(self.prefix, spider.name), self.worker)
            except redis.RedisError:
                pass  # its heartbeat deadline passes on its own

    def _drop_fragment(self) -> None:
        """After a data loss: what this run wrote into the emptied Redis is a fragment of the job (a few requests,
        a partial duplicate filter) that the next run would take for its queue; the checkpoint has the job's place,
        so the fragment goes, and nothing held is pushed or released into it."""
        self.backlog.clear()
        self.unacked.clear()
        self.held.clear()
        queue = self.queue_for_spider() if getattr(self, "spider", None) is not None else None
        if queue is None:
            return
        try:
            queue.clear()
            self.server.zrem(workers_key(self.prefix, self.spider.name), self.worker)
        except redis.RedisError as e:
            logger.warning("scheduler: could not delete what is left of %s (%s)", queue.key, e)

    def __len__(self) -> int:
        queue = self.queue_for_spider()
        if queue is None or self._paused():
            return len(self.backlog)
        try:
            return len(queue) + len(self.backlog)
        except redis.RedisError as e:
            self._lost(e)
            return len(self.backlog)

    def has_pending_requests(self) -> bool:
        # Acknowledgements waiting for their batch are not requests: spider_idle sends them before deciding.
        return bool(self.backlog) or len(self) > 0

    def enqueue_request(self, request: Request) -> bool:
        if request.meta.get(KICK_META):
            return True  # a wake-up of the engine (see _after_tick), not a request
        queue = self.queue_for_spider()
        parent = request.meta.pop(PARENT_META, None)
        replaces = request.meta.pop(LEASE_META, None)
        if queue is None:
            logger.error("No job to enqueue %s into (a worker yields requests only for the job it took)", request)
            return self._refused(parent)
        try:
            payload = request_to_json(request, self.spider)
        except UnserializableRequest as e:
            logger.error("Refused at enqueue: %s", e)
            assert self.stats is not None
            self.stats.inc_value("distributed/refused")
            return self._refused(parent)
        if replaces is not None and replaces not in self.held:
            replaces = None
        fp = self.df.fingerprint(request) if (not request.dont_filter or replaces) else ""
        entry = (request, queue.key, payload, fp, not request.dont_filter, replaces, parent)
        if self.backlog or self._paused():
            self.backlog.append(entry)
            return True
        return self._push(entry)

    def _refused(self, parent: str | None) -> bool:
        if parent is not None:
            self._close_one(parent)
        return False

    def next_request(self) -> Request | None:
        queue = self.queue_for_spider()
        if queue is None or self._paused() or self.backlog:
            return None
        try:
            got = queue.pop_payload(self.worker, self.lease_ms)
        except redis.RedisError as e:
            self._lost(e)
            return None
        self._reached()
        if got is None:
            return None
        rid, payload = got
        try:
            request = request_from_json(payload, self.spider)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # Not a request we stored (an injected payload, an undeclared callback, a foreign host, JSON nested too
            # deep): never executed; it moves to the dead-letter list with the reason (docs/operations.md).
            reason = f"{type(e).__name__}: {e}"
            logger.warning("Dead-lettered queue entry %s of %s: %s", rid, queue.key, reason)
            assert self.stats is not None
            self.stats.inc_value("distributed/undecodable")
            try:
                queue.bury(rid, reason, dead=dead_key(self.prefix, self.spider.name),
                           keep=setting(self.crawler.settings, "DISTRIBUTED_DEAD_MAX"))
            except redis.RedisError as lost:
                self._lost(lost)
            return None
        self.held[rid] = Lease(queue.key)
        request.meta[LEASE_META] = rid
        request.callback = self._wrap(rid, request.callback or default_callback(self.spider), errback=False)
        request.errback = self._wrap(rid, request.errback, errback=True)
        assert self.stats is not None
        self.stats.inc_value("scheduler/dequeued/redis")
        return request

    # --- Queues ----------------------------------------------------------------------------------------------

    def queue_for_spider(self) -> LeasedQueue | None:
        job = job_queue_of(self.spider)
        return None if job is None else self._queue(key_base(self.prefix, self.spider.name, job))

    def _queue(self, base: str) -> LeasedQueue:
        queue = self._queues.get(base)
        if queue is None:
            queue = self._queues[base] = LeasedQueue(self.server, self.spider, base)
        return queue

    def _push(self, entry: tuple[Request, str, str, str, bool, str | None, str | None]) -> bool:
        request, base, payload, fp, filtered, replaces, parent = entry
        try:
            rid = self._queue(base).push_payload(payload, score=-request.priority, fingerprint=fp,
                                                 filtered=filtered, replaces=replaces)
        except redis.RedisError as e:
            self._lost(e)
            self.backlog.appendleft(entry)
            return True
        self._reached()
        assert self.stats is not None
        if replaces is not None:
            self.held.pop(replaces, None)
        if parent is not None:
            self._close_one(parent)
        if rid is None:
            self.df.log(request, self.spider)
            return False
        self.stats.inc_value("scheduler/enqueued/redis")
        return True

    # --- Lease tracking --------------------------------------------------------------------------------------

    def _wrap(self, rid: str, func: Any, *, errback: bool) -> Any:
        def wrapper(result: Any, **kwargs: Any) -> Any:
            if func is None:  # no errback: Scrapy logs the failure as usual
                self._end(rid)
                assert isinstance(result, Failure)
                return result
            try:
                out = func(result, **kwargs)
            except BaseException:
                self._end(rid)
                raise
            if isinstance(out, Failure):
                self._end(rid)
                return out
            return self._count(rid, out)

        wrapper.__mc_original__ = func  # type: ignore[attr-defined]  # read by the serializer
        return wrapper

    def _count(self, rid: str, out: Any) -> Any:
        if out is None:
            self._end(rid)
            return None
        if isasyncgen(out) or isinstance(out, AsyncIterator):
            return self._count_async(rid, out)
        if isawaitable(out):
            return self._count_awaited(rid, out)
        return self._count_sync(rid, out)

    def _seen_output(self, rid: str, obj: Any) -> None:
        lease = self.held.get(rid)
        if lease is None or obj is None:
            return
        if isinstance(obj, Request):
            obj.meta.pop(LEASE_META, None)
            obj.meta[PARENT_META] = rid
        lease.open += 1

    def _count_sync(self, rid: str, out: Iterable[Any]) -> Iterable[Any]:
        try:
            for obj in out:
                self._seen_output(rid, obj)
                yield obj
        finally:
            self._end(rid)

    async def _count_async(self, rid: str, out: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for obj in out:
                self._seen_output(rid, obj)
                yield obj
        finally:
            self._end(rid)

    async def _count_awaited(self, rid: str, out: Any) -> AsyncIterator[Any]:
        try:
            result = await out
            if result is not None:
                for obj in [result] if isinstance(result, (Request, dict)) else result:
                    self._seen_output(rid, obj)
                    yield obj
        finally:
            self._end(rid)

    def _end(self, rid: str) -> None:
        lease = self.held.get(rid)
        if lease is not None:
            lease.ended = True
            self._maybe_ack(rid)

    def _close_one(self, rid: str) -> None:
        lease = self.held.get(rid)
        if lease is not None:
            lease.open -= 1
            self._maybe_ack(rid)

    def item_done(self, item: Any, response: Any = None, spider: Any = None, **kwargs: Any) -> None:
        """``item_scraped``/``item_dropped``/``item_error``: one item of a leased request left the pipelines."""
        request = getattr(response, "request", None)
        meta = getattr(request, "meta", None) or {}
        rid = meta.get(LEASE_META)
        if rid is not None:
            self._close_one(rid)

    def _maybe_ack(self, rid: str) -> None:
        lease = self.held.get(rid)
        if lease is None or not lease.ended or lease.open > 0 or lease.extra.get("done"):
            return
        # Acknowledged by _ack_ready, after the feeds are flushed (a SIGKILL then loses no exported record) and
        # after the requests it yielded are in Redis (the backlog goes first).
        lease.extra["done"] = True
        self.unacked.append((lease.base, rid))

    def _ack_ready(self) -> None:
        """Flush and fsync the local feeds, then acknowledge every finished request in one script call per job."""
        if not self.unacked or self.backlog or self._paused():
            return
        sync_feeds(self.crawler)
        results = self.crawler.signals.send_catch_log(signal=acks_pending)
        if any(result is False or isinstance(result, Failure) for _, result in results):
            return
        batch: dict[str, list[str]] = {}
        while self.unacked:
            base, rid = self.unacked.popleft()
            batch.setdefault(base, []).append(rid)
        for n, (base, rids) in enumerate(batch.items()):
            try:
                self._queue(base).ack(*rids)
            except redis.RedisError as e:
                self._lost(e)
                for later_base, later in list(batch.items())[n:]:
                    self.unacked.extend((later_base, r) for r in later)
                return
            for rid in rids:
                self.held.pop(rid, None)
            assert self.stats is not None
            self.stats.inc_value("distributed/acked", len(rids))

    # --- Outages, heartbeat, idle ----------------------------------------------------------------------------

    def _paused(self) -> bool:
        return self._down_since is not None and time.monotonic() < self._retry_at

    def _lost(self, error: Exception) -> None:
        now = time.monotonic()
        if is_auth_error(error):
            # Waiting cannot fix a password: close now. Paused like an outage meanwhile (pushes wait in the
            # backlog, the flush loops stop at the first refusal).
            self._down_since = self._down_since or now
            self._retry_at = now + 5.0
            self._close_for("redis_auth_failed", "scheduler: Redis at %s refused the credentials (%s); closing",
                            self._redis_url, error)
            return
        if self._down_since is None:
            self._down_since = now
            logger.warning("scheduler: lost Redis at %s (%s); requests pause until it answers again",
                           mask_url(self._redis_url), scrub(str(error)))
            assert self.stats is not None
            self.stats.inc_value("distributed/redis_outages")
        down = now - self._down_since
        self._retry_at = now + min(5.0, 0.25 * 2 ** min(int(down), 5))
        if down > self.give_up:
            self._close_for("redis_unavailable", "scheduler: Redis gone for %.0f s (DISTRIBUTED_REDIS_GIVE_UP); "
                            "closing", down)

    def _reached(self) -> None:
        if self._down_since is not None:
            logger.warning("scheduler: Redis at %s answers again after %.1f s; resuming",
                           mask_url(self._redis_url),
                           time.monotonic() - self._down_since)
            self._down_since = None

    def _flush(self) -> None:
        """Send the backlog (in order), then the acknowledgements."""
        while self.backlog:
            entry = self.backlog.popleft()
            self._push(entry)
            if self._down_since is not None:
                return
        self._ack_ready()

    def _heartbeat(self) -> None:
        if self._tick_running:
            return
        if self.backlog or self.unacked:
            self._down_since_retry()
            self._flush()
        queue = self.queue_for_spider()
        by_base: dict[str, list[str]] = {}
        for rid, lease in self.held.items():
            by_base.setdefault(lease.base, []).append(rid)
        if queue is not None:
            by_base.setdefault(queue.key, [])
        self._tick_running = True
        d = threads.deferToThread(self._renew_and_reap, by_base)
        d.addCallbacks(self._after_tick, self._tick_failed)

    def _down_since_retry(self) -> None:
        self._retry_at = 0.0

    def _renew_and_reap(self, by_base: dict[str, list[str]]) -> tuple[int, int]:
        reaped = queued = 0
        # Live for as long as a lease would be: a worker whose heartbeats stop is dead when its leases expire.
        self._beat(keys=[workers_key(self.prefix, self.spider.name)], args=[self.worker, self.lease_ms])
        self._check_generation()
        for base, rids in by_base.items():
            queue = self._queue(base)
            queue.renew(self.worker, self.lease_ms, rids)
            reaped += queue.reap()
            queued += len(queue)
        return reaped, queued

    def _after_tick(self, result: tuple[int, int]) -> None:
        reaped, queued = result
        self._tick_running = False
        self._reached()
        if reaped:
            logger.warning("Put %d request(s) with expired leases (dead workers) back in the queue", reaped)
            assert self.stats is not None
            self.stats.inc_value("distributed/reaped", reaped)
        if queued and self.crawler.engine is not None and self.spider is not None:
            # Scrapy's engine looks at an idle scheduler only every 5 s; handing it a request (accepted and
            # discarded by enqueue_request) is the public way to make it look now, so a waiting worker takes
            # work others (or the reaper) queued within one heartbeat.
            self.crawler.engine.crawl(Request("data:,", meta={KICK_META: True}, dont_filter=True))

    def _tick_failed(self, failure: Failure) -> None:
        self._tick_running = False
        if failure.check(RedisDataLost):
            self._data_lost(str(failure.value))
        elif failure.check(redis.RedisError):
            self._lost(failure.value)  # type: ignore[arg-type]
        else:
            logger.error("scheduler heartbeat failed: %s", failure.getErrorMessage())

    def spider_idle(self, spider: Spider) -> None:
        """Close only when this job has nothing queued or leased anywhere (then its keys are deleted)."""
        if self.backlog or self.unacked or self.held:
            self._retry_at = 0.0
            self._flush()
            if self.backlog or self.unacked or self.held:
                raise DontCloseSpider
        queue = self.queue_for_spider()
        if queue is None:
            return  # a worker between jobs: its start() decides (DISTRIBUTED_IDLE_CLOSE)
        try:
            # An empty queue in a Redis that lost its data is no finished job.
            self._check_generation()
            queue.reap()
            stamp = self._generation
            # The stamp is checked again in the same script: Redis may restart between two calls.
            finished = queue.finish(require_seeded=False, generation=stamp)
            if finished == 3 and stamp is not None:
                raise RedisDataLost(stamp[0])
        except RedisDataLost as e:
            self._data_lost(str(e))
            raise DontCloseSpider from None
        except redis.RedisError as e:
            self._lost(e)
            raise DontCloseSpider from None
        if not finished:
            raise DontCloseSpider
        stamp, self._generation = self._generation, None
        if stamp is not None and stamp[0] == f"{queue.key}:generation":  # a worker's (the board's) stays
            try:
                self.server.delete(stamp[0])  # the job is complete: its next run starts a new generation
            except redis.RedisError:
                pass  # left behind: the next run takes it over


async def in_thread(func: Any, *args: Any) -> Any:
    """Run a blocking call in the reactor's thread pool and await it."""
    return await maybe_deferred_to_future(threads.deferToThread(func, *args))


async def sleep(seconds: float) -> None:
    """Wait without blocking the reactor."""
    from twisted.internet import reactor

    await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))
