"""The Redis cache backend (redis-py), shared by every worker on one ``REDIS_URL``: pools, Lua scripts, outages and
its known limit are in docs/architecture.md, "Cache".
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mediacrawler.cache.base import (
    Cache,
    CacheUnavailable,
    WrongTypeError,
    check_ttl,
    to_bytes,
)
from mediacrawler.config import setting
from mediacrawler.scrub import mask_url

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors that mean "Redis is not reachable right now" (BusyLoadingError, raised while a restarted server loads
#: its data, is a ConnectionError subclass).
UNREACHABLE_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)

# Client options of the shared pools. Short connect timeout: an unreachable host must fail fast enough for the
# back-off to be ours. redis-py's own retries are off so that every retry is counted and logged here.
_CLIENT_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 2.0,
    "socket_timeout": 10.0,
    "health_check_interval": 30,
    "retry": Retry(NoBackoff(), 0),
}


class _Registry:
    """Per-process state shared by every component: clients (pools) and outage trackers, keyed by URL."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.clients: dict[str, redis.Redis] = {}
        self.health: dict[str, _Health] = {}


_registry = _Registry()


def _reset_after_fork() -> None:
    # The child must not reuse the parent's sockets, nor a lock another parent thread may have held at fork time.
    global _registry
    _registry = _Registry()


os.register_at_fork(after_in_child=_reset_after_fork)


def _current_registry() -> _Registry:
    # register_at_fork covers os.fork(); the pid check also covers children made some other way.
    if _registry.pid != os.getpid():
        _reset_after_fork()
    return _registry


def get_redis(url: str) -> redis.Redis:
    """The process-wide client for *url*; every caller gets the same client and so the same connection pool."""
    registry = _current_registry()
    with registry.lock:
        client = registry.clients.get(url)
        if client is None:
            client = registry.clients[url] = redis.Redis.from_url(url, **_CLIENT_OPTIONS)
        return client


def _get_health(url: str) -> _Health:
    registry = _current_registry()
    with registry.lock:
        health = registry.health.get(url)
        if health is None:
            health = registry.health[url] = _Health(mask_url(url))
        return health


class _Health:
    """Tracks one Redis URL's outages so that each is logged once, whichever component hits it first."""

    def __init__(self, masked_url: str) -> None:
        self.masked_url = masked_url
        self.lock = threading.Lock()
        self.down_since: float | None = None
        self.exhausted = False  # a call already spent its whole retry budget during this outage

    def failed(self, exc: Exception, attempt: int, retry_times: int, delay: float) -> bool:
        """Record a failure; return whether the caller should sleep *delay* and retry."""
        with self.lock:
            retry = not self.exhausted and attempt < retry_times
            if self.down_since is None:
                self.down_since = time.monotonic()
                if retry:
                    logger.warning(
                        "cache: Redis at %s unreachable (%s), retrying in %.1fs", self.masked_url, exc, delay
                    )
                else:
                    logger.warning("cache: Redis at %s unreachable (%s), not retrying", self.masked_url, exc)
            self.exhausted = not retry
            return retry

    def succeeded(self) -> None:
        if self.down_since is None:  # the common case, no lock needed
            return
        with self.lock:
            if self.down_since is not None:
                logger.info(
                    "cache: Redis at %s reachable again after %.1fs",
                    self.masked_url,
                    time.monotonic() - self.down_since,
                )
                self.down_since, self.exhausted = None, False


# KEYS[1]: the set. ARGV[1]: TTL in ms or "" for none. ARGV[2..]: members. Returns how many were added.
_SADD_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local score = 'inf'
if ARGV[1] ~= '' then score = now + tonumber(ARGV[1]) end
local added = 0
for i = 2, #ARGV do
  added = added + redis.call('ZADD', KEYS[1], 'NX', score, ARGV[i])
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] == 'inf' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
return added
"""

# KEYS[1]: the set. ARGV[1]: the member. Returns 1 when present and alive.
_SISMEMBER_LUA = """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
if s == 'inf' then return 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) > now then return 1 end
return 0
"""

# KEYS[1]: any key. Returns 1 when it exists and, for a set, still has a live member.
_EXISTS_LUA = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return 0 end
if kind ~= 'zset' then return 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') > 0 then return 1 end
return 0
"""

# KEYS[1]: the set. Returns how many members are alive.
_SCARD_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""

# KEYS[1]: the claim; KEYS[2] (optional): a set. ARGV[1]: the owner. ARGV[2]: TTL in ms or "" for none.
# ARGV[3]: the member to look for in KEYS[2]. Returns nil when the member is alive in the set (nothing claimed),
# else the owner of the claim after the call. Redis 6.2 has no SET … NX GET, hence GET then SET inside one script.
_CLAIM_LUA = """
if #KEYS > 1 then
  local s = redis.call('ZSCORE', KEYS[2], ARGV[3])
  if s then
    if s == 'inf' then return false end
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if tonumber(s) > now then return false end
  end
end
local current = redis.call('GET', KEYS[1])
if current then return current end
if ARGV[2] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return ARGV[1]
"""

# KEYS[1]: the claim. ARGV[1]: the owner. Returns 1 when the claim was the owner's and is now deleted.
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


def _ms(ttl: float) -> int:
    # Round up so that a TTL never ends early; Redis needs at least 1 ms.
    return max(1, math.ceil(ttl * 1000))


class RedisCache(Cache):
    """The :class:`~mediacrawler.cache.base.Cache` contract on a Redis server.

    *retry_times* retries follow a failed call, sleeping ``backoff_base * 2**n`` seconds (at most *backoff_max*)
    before retry ``n + 1``.
    """

    blocking = True
    shared = True

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "",
        retry_times: int = 0,
        backoff_base: float = 0.0,
        backoff_max: float = 0.0,
    ) -> None:
        super().__init__(prefix=prefix)
        if retry_times < 0 or backoff_base < 0 or backoff_max < 0:
            raise ValueError("retry_times, backoff_base and backoff_max must be >= 0")
        self.url = url
        self.masked_url = mask_url(url)
        self.retry_times = retry_times
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.client = get_redis(url)
        self._health = _get_health(url)
        self._sadd = self.client.register_script(_SADD_LUA)
        self._sismember = self.client.register_script(_SISMEMBER_LUA)
        self._exists = self.client.register_script(_EXISTS_LUA)
        self._scard = self.client.register_script(_SCARD_LUA)
        self._claim = self.client.register_script(_CLAIM_LUA)
        self._release = self.client.register_script(_RELEASE_LUA)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RedisCache:
        from scrapy.exceptions import NotConfigured

        url = setting(settings, "REDIS_URL")
        if not url:
            raise NotConfigured("CACHE_BACKEND is 'redis' but REDIS_URL is not set")
        return cls(
            url,
            prefix=setting(settings, "CACHE_KEY_PREFIX"),
            retry_times=setting(settings, "CACHE_RETRY_TIMES"),
            backoff_base=setting(settings, "CACHE_RETRY_BACKOFF_BASE"),
            backoff_max=setting(settings, "CACHE_RETRY_BACKOFF_MAX"),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.masked_url!r}, prefix={self.prefix!r})"

    def _call(self, op: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                result = op()
            except redis.AuthenticationError as exc:
                # A ConnectionError subclass, but waiting does not fix a wrong password: fail without retrying.
                raise CacheUnavailable(f"cache: Redis at {self.masked_url} refused our credentials") from exc
            except UNREACHABLE_ERRORS as exc:
                delay = min(self.backoff_max, self.backoff_base * 2**attempt)
                if not self._health.failed(exc, attempt, self.retry_times, delay):
                    raise CacheUnavailable(f"cache: Redis at {self.masked_url} unreachable ({exc})") from exc
                logger.debug("cache: Redis call failed (%s), retry %d in %.1fs", exc, attempt + 1, delay)
                time.sleep(delay)
                attempt += 1
            except redis.ResponseError as exc:
                # Inside a script the server wraps the message ("… @user_script:2: WRONGTYPE …").
                if "WRONGTYPE" in str(exc):
                    raise WrongTypeError(str(exc)) from exc
                raise
            else:
                self._health.succeeded()
                return result

    # --- Strings -------------------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        return self._call(lambda: self.client.get(self.key(key)))  # type: ignore[return-value]

    def set(self, key: str, value: str | bytes, ttl: float | None = None) -> None:
        data, ttl = to_bytes(value), check_ttl(ttl)
        px = None if ttl is None else _ms(ttl)
        self._call(lambda: self.client.set(self.key(key), data, px=px))

    # --- Any key -------------------------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return bool(self._call(lambda: self._exists(keys=[self.key(key)])))

    def delete(self, key: str) -> bool:
        # A set whose members all expired but were not purged yet counts as absent, as in exists().
        existed = self.exists(key)
        self._call(lambda: self.client.delete(self.key(key)))
        return existed

    def expire(self, key: str, ttl: float) -> bool:
        seconds = check_ttl(ttl)
        if seconds is None:
            raise ValueError("expire() needs a ttl; use set() without one to make a key permanent")
        if not self.exists(key):
            return False
        return bool(self._call(lambda: self.client.pexpire(self.key(key), _ms(seconds))))

    def ttl(self, key: str) -> float | None:
        if not self.exists(key):
            return None
        ms = int(self._call(lambda: self.client.pttl(self.key(key))))  # type: ignore[arg-type]
        if ms == -2:
            return None
        return math.inf if ms == -1 else ms / 1000

    # --- Sets ----------------------------------------------------------------------------------------------------
    def sadd(self, key: str, *members: str, ttl: float | None = None) -> int:
        if not members:
            raise ValueError("sadd() needs at least one member")
        ttl = check_ttl(ttl)
        args = ["" if ttl is None else str(_ms(ttl)), *(str(m) for m in members)]
        return int(self._call(lambda: self._sadd(keys=[self.key(key)], args=args)))

    def sismember(self, key: str, member: str) -> bool:
        return bool(self._call(lambda: self._sismember(keys=[self.key(key)], args=[str(member)])))

    def scard(self, key: str) -> int:
        return int(self._call(lambda: self._scard(keys=[self.key(key)])))

    # --- Claims --------------------------------------------------------------------------------------------------
    def claim(
        self, key: str, owner: str, ttl: float | None = None, *, unless_in: tuple[str, str] | None = None
    ) -> str | None:
        data, ttl = to_bytes(owner), check_ttl(ttl)
        keys = [self.key(key)]
        args: list[str | bytes] = [data, "" if ttl is None else str(_ms(ttl))]
        if unless_in is not None:
            keys.append(self.key(unless_in[0]))
            args.append(str(unless_in[1]))
        result = self._call(lambda: self._claim(keys=keys, args=args))
        if result is None:
            return None
        return bytes(result).decode("utf-8", "replace")  # type: ignore[arg-type]

    def release(self, key: str, owner: str) -> bool:
        data = to_bytes(owner)
        return bool(self._call(lambda: self._release(keys=[self.key(key)], args=[data])))
