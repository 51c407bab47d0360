"""Downloader middleware: the shared rate budget (RATE_BUDGET) that every worker of a crawl obeys.

``RATE_BUDGET = {"weibo": "2/s", "bilibili": "1/s", "media": "20/s", "media:wx1.sinaimg.cn": "5/s"}``: before a
request is downloaded it asks the limiter (:mod:`mediacrawler.distributed.limiter`) for a slot and waits the time
it is told (one ``deferLater``, no polling). The key of a request:

- an API request (``meta["mc_api"]``): the spider's ``platform`` (``weibo``);
- a media request (the meta keys of :mod:`.media_slots`: pipeline asset, Range segment, video fragment; they come
  through ``engine.download_async`` and bypass the scheduler, but not the downloader middlewares):
  ``media:<host>``, with the rate of ``RATE_BUDGET["media:<host>"]``, else of ``RATE_BUDGET["media"]`` (each host
  its own budget at that rate);
- anything else, or a key without a rate: not limited.

With ``REDIS_URL`` the limiter is one Lua script in Redis (all workers share each budget, Redis's clock); without,
the same arithmetic in this process. A rate-limit answer (:mod:`.platform_errors` sends :data:`cool_down_requested`
with the back-off it chose, at least the ``Retry-After``) sets a cool-down on the platform's key: every worker
holds its requests of that platform until it ends. A request waiting here holds its downloader slot (so
CONCURRENT_REQUESTS also bounds how many wait) and, in a distributed crawl, its lease, which the scheduler's
heartbeat keeps renewing. If Redis cannot be reached, this worker falls back to the in-process limiter (its own
pace at the whole budget) until Redis answers again. See docs/operations.md, "A shared rate budget".
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import task, threads

from mediacrawler.config import setting
from mediacrawler.distributed.limiter import Limiter, LocalLimiter, Rate, RedisLimiter, parse_rate
from mediacrawler.middlewares.media_slots import MEDIA_META_KEYS

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Signal: a platform asked us to slow down. Arguments: ``key`` (the platform, e.g. ``weibo``), ``seconds``,
#: ``reason``. Sent by :mod:`.platform_errors`; the rate budget turns it into a shared cool-down.
cool_down_requested = object()

#: Seconds between two tries of Redis after it failed (meanwhile the in-process limiter paces this worker).
REDIS_RETRY_AFTER = 5.0


class RateBudgetMiddleware:
    """Waits for a slot of the request's budget before it is downloaded (see the module docstring).

    Settings: RATE_BUDGET, RATE_BUDGET_BURST, RATE_BUDGET_KEY_PREFIX, REDIS_URL.
    """

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        budget = setting(s, "RATE_BUDGET")
        if not budget:
            raise NotConfigured("RATE_BUDGET is empty: no shared rate budget")
        try:
            self.rates: dict[str, Rate] = {str(k): parse_rate(v) for k, v in budget.items()}
        except ValueError as e:
            raise ValueError(f"RATE_BUDGET={budget!r}: {e}") from None
        self.burst = setting(s, "RATE_BUDGET_BURST")
        if self.burst < 1:
            raise ValueError(f"RATE_BUDGET_BURST={self.burst!r}: expected an integer >= 1")
        self.crawler = crawler
        self.stats = crawler.stats
        self.local: LocalLimiter = LocalLimiter()
        self.shared: Limiter | None = None
        if setting(s, "REDIS_URL"):
            # redis-py only when the budget is shared (docs/benchmarks.md, "Start-up").
            from mediacrawler.distributed.connection import client_from_settings

            self.shared = RedisLimiter(client_from_settings(s), str(setting(s, "RATE_BUDGET_KEY_PREFIX")))
        self._redis_down_until = 0.0
        crawler.signals.connect(self.cool_down_requested, signal=cool_down_requested)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RateBudgetMiddleware:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        where = "shared in Redis" if self.shared is not None else "in this process"
        logger.info("Rate budget (%s): %s", where, ", ".join(f"{k} {v.count:g}/{v.period:g}s"
                                                             for k, v in sorted(self.rates.items())))

    # --- keys ------------------------------------------------------------------------------------------------

    def key_for(self, request: Request) -> tuple[str, Rate] | None:
        """The budget key and rate of ``request``; None when it is not limited."""
        meta = request.meta
        if any(k in meta for k in MEDIA_META_KEYS):
            key = "media:" + (urlparse_cached(request).hostname or "")
            rate = self.rates.get(key) or self.rates.get("media")
            return None if rate is None else (key, rate)
        if meta.get("mc_api"):
            key = str(getattr(self.crawler.spider, "platform", "") or "")
            rate = self.rates.get(key)
            return None if rate is None else (key, rate)
        return None

    # --- the limiter, Redis first --------------------------------------------------------------------------

    def _limiter(self) -> Limiter:
        if self.shared is not None and time.monotonic() >= self._redis_down_until:
            return self.shared
        return self.local

    async def _call(self, method: str, *args: Any) -> Any:
        limiter = self._limiter()
        if limiter is self.local:
            return getattr(limiter, method)(*args)
        import redis

        try:
            # One EVAL, O(1), in the reactor's thread pool: the reactor never waits on the network.
            result = await maybe_deferred_to_future(threads.deferToThread(getattr(limiter, method), *args))
        except redis.RedisError as e:
            if self._redis_down_until == 0.0 or time.monotonic() >= self._redis_down_until:
                logger.warning("rate budget: Redis unreachable (%s); pacing this worker alone for %.0f s", e,
                               REDIS_RETRY_AFTER)
            self._redis_down_until = time.monotonic() + REDIS_RETRY_AFTER
            assert self.stats is not None
            self.stats.inc_value("rate_budget/redis_errors")
            return getattr(self.local, method)(*args)
        return result

    # --- Scrapy hooks ----------------------------------------------------------------------------------------

    async def process_request(self, request: Request) -> None:
        found = self.key_for(request)
        if found is None:
            return None
        key, rate = found
        waited = 0.0
        for _ in range(10):  # bounded: each round is a real wait, re-asked only when a cool-down began meanwhile
            wait = float(await self._call("acquire", key, rate, self.burst))
            if wait <= 0:
                break
            await _sleep(wait)
            waited += wait
            if float(await self._call("cooling", key)) <= 0:
                break
        assert self.stats is not None
        self.stats.inc_value(f"rate_budget/requests/{key}")
        if waited > 0:
            self.stats.inc_value("rate_budget/waited")
            self.stats.inc_value("rate_budget/wait_seconds", round(waited, 3))
        return None

    def cool_down_requested(self, key: str, seconds: float, reason: str = "") -> None:
        """:data:`cool_down_requested`: a shared cool-down on ``key`` (only keys with a budget)."""
        if key not in self.rates or seconds <= 0:
            return
        assert self.stats is not None
        self.stats.inc_value("rate_budget/cool_downs")
        logger.info("rate budget: %s cools down for %.1f s (%s)", key, seconds, reason or "rate limited")
        limiter = self._limiter()
        if limiter is self.local:
            self.local.cool_down(key, seconds)
            return
        # Kept locally too: it still holds if Redis becomes unreachable and this worker falls back.
        self.local.cool_down(key, seconds)
        d = threads.deferToThread(limiter.cool_down, key, seconds)
        d.addErrback(lambda f: logger.warning("rate budget: could not share the cool-down of %s: %s", key,
                                              f.getErrorMessage()))


async def _sleep(seconds: float) -> None:
    from twisted.internet import reactor  # imported late: importing it installs a reactor

    await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))
