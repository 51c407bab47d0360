"""The cache contract (per-entry set expiry, atomic claims) and the factory that picks a backend from
``CACHE_BACKEND``/``REDIS_URL``; the contract is in docs/architecture.md, "Cache".
"""

from __future__ import annotations

import json
import logging
import math
import weakref
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy.exceptions import NotConfigured

from mediacrawler.config import setting
from mediacrawler.contracts import backend_class

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: Short names accepted by ``CACHE_BACKEND``; anything else is taken as the import path of a :class:`Cache`.
CACHE_BACKENDS: dict[str, str] = {
    "memory": "mediacrawler.cache.memory.MemoryCache",
    "redis": "mediacrawler.cache.redis.RedisCache",
}

class CacheError(Exception):
    """Base class of the errors raised by a cache backend."""


class CacheUnavailable(CacheError):
    """The backend could not be reached within its retry budget (e.g. Redis is down).

    Callers decide what an outage means for them: the dedupe pipeline lets the item through and counts it.
    """


class WrongTypeError(CacheError, TypeError):
    """A string operation was used on a set key, or a set operation on a string key."""


def check_ttl(ttl: float | None) -> float | None:
    """Validate a TTL argument: ``None`` (no expiry) or a finite number of seconds > 0."""
    if ttl is None:
        return None
    ttl = float(ttl)
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ValueError(f"ttl must be a finite number of seconds > 0 or None, got {ttl!r}")
    return ttl


def to_bytes(value: str | bytes) -> bytes:
    """Values go in as ``str`` (stored as UTF-8) or ``bytes``; nothing else is silently converted."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"cache values are str or bytes, got {type(value).__name__}")


class Cache(ABC):
    """The contract of a cache backend: strings with TTLs and sets whose entries expire one by one.

    All methods are synchronous. :attr:`blocking` tells callers running on the reactor thread whether a call may
    wait on the network (then run it in a worker thread) or is safe to call inline.
    """

    #: True when calls may block on I/O; callers on the reactor thread must then call from a worker thread.
    blocking: ClassVar[bool] = False
    #: True when the state outlives this process and is seen by other processes (Redis); False when it dies with
    #: the process (memory). Callers that order a cache write after a local write (the dedupe commit after the
    #: feed is on disk) only need that ordering for a shared cache.
    shared: ClassVar[bool] = False

    def __init__(self, *, prefix: str = "") -> None:
        self.prefix = prefix

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: BaseSettings) -> Cache:
        """Build the backend from project settings (``CACHE_KEY_PREFIX``, ``REDIS_URL``, …)."""

    def key(self, key: str) -> str:
        """The stored (namespaced) name of *key*."""
        return self.prefix + key

    # --- Strings -------------------------------------------------------------------------------------------------
    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The value of *key*, or ``None`` when it does not exist or has expired."""

    @abstractmethod
    def set(self, key: str, value: str | bytes, ttl: float | None = None) -> None:
        """Store *value* under *key*, replacing any value and TTL it had; expire it after *ttl* seconds."""

    # --- Any key -------------------------------------------------------------------------------------------------
    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether *key* (string or set) exists and has not expired."""

    @abstractmethod
    def delete(self, key: str) -> bool:
        """Remove *key*; return whether it existed."""

    @abstractmethod
    def expire(self, key: str, ttl: float) -> bool:
        """Make *key* expire *ttl* seconds from now; return ``False`` when it does not exist."""

    @abstractmethod
    def ttl(self, key: str) -> float | None:
        """Seconds until *key* expires: ``None`` when it does not exist, :data:`math.inf` when it never does."""

    # --- Sets with per-entry expiry --------------------------------------------------------------------------------
    @abstractmethod
    def sadd(self, key: str, *members: str, ttl: float | None = None) -> int:
        """Add *members* that are absent (or expired), each to expire *ttl* seconds from now.

        Returns how many were added. Members already present and alive keep their original expiry.
        """

    @abstractmethod
    def sismember(self, key: str, member: str) -> bool:
        """Whether *member* is in the set and has not expired."""

    @abstractmethod
    def scard(self, key: str) -> int:
        """How many members of the set are alive."""

    def add_if_absent(self, key: str, member: str, ttl: float | None = None) -> bool:
        """Atomically add *member* unless it is present and alive; ``True`` when this call added it.

        This is the dedupe primitive: check and add are one step, so of several workers racing on one member
        exactly one is told it is new.
        """
        return self.sadd(key, member, ttl=ttl) == 1

    # --- Claims (owned keys) -------------------------------------------------------------------------------------
    @abstractmethod
    def claim(
        self, key: str, owner: str, ttl: float | None = None, *, unless_in: tuple[str, str] | None = None
    ) -> str | None:
        """Atomically claim *key* for *owner* unless someone holds it; return the owner after the call.

        When *key* is absent (or expired) it is set to *owner*, expiring after *ttl* seconds, and *owner* is
        returned. When it exists, nothing changes (its TTL is not extended) and its current owner is returned,
        which is *owner* itself when the caller already held it (a retry, or a claim left by an earlier run of the
        same owner). With ``unless_in=(set_key, member)``, a *member* alive in the set *set_key* means "already
        done": nothing is claimed and ``None`` is returned. The membership check and the claim are one atomic
        step, so a member added to the set between the two cannot slip through.

        Raises :exc:`WrongTypeError` when *key* holds a set or *set_key* a string.
        """

    @abstractmethod
    def release(self, key: str, owner: str) -> bool:
        """Atomically delete the claim *key* if *owner* holds it; return whether it was deleted.

        A claim held by someone else (or already gone) is left alone: ``False``.
        """

    # --- JSON helpers ----------------------------------------------------------------------------------------------
    def get_json(self, key: str) -> Any:
        """The JSON value stored under *key*, or ``None`` when it does not exist."""
        raw = self.get(key)
        return None if raw is None else json.loads(raw)

    def set_json(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store *value* as compact JSON under *key* (see :meth:`set`)."""
        self.set(key, json.dumps(value, separators=(",", ":"), ensure_ascii=False), ttl=ttl)

    def close(self) -> None:
        """Release what this instance holds (shared connection pools stay open for other components)."""


def get_cache(settings: BaseSettings | None = None, *, cache_type: str | None = None) -> Cache:
    """Build the cache backend the settings ask for.

    ``CACHE_BACKEND`` (or *cache_type*) is ``memory``, ``redis`` or the import path of a :class:`Cache`
    subclass. When it is not given, the backend is ``redis`` if ``REDIS_URL`` is set and ``memory`` otherwise.
    Without *settings*, the project settings are used (``get_cache(cache_type="redis")`` as in the seed).
    """
    if settings is None:
        from scrapy.utils.project import get_project_settings

        settings = get_project_settings()
    name = (cache_type or setting(settings, "CACHE_BACKEND")
            or ("redis" if setting(settings, "REDIS_URL") else "memory"))
    cls = backend_class("CACHE_BACKEND", str(name), CACHE_BACKENDS)
    if not (isinstance(cls, type) and issubclass(cls, Cache)):
        raise NotConfigured(f"CACHE_BACKEND={name!r} does not name a mediacrawler.cache.Cache subclass")
    cache = cls.from_settings(settings)
    logger.debug("cache: using %s", type(cache).__name__)
    return cache


class CacheFactory:
    """The seed's spelling of the factory: ``CacheFactory.get_cache(cache_type="redis")``."""

    get_cache = staticmethod(get_cache)


# One cache per crawler, so that every component of a crawl (pipelines, middlewares, extensions) sees the same
# state even with the in-memory backend. Weak keys: a finished crawler takes its cache with it.
_crawler_caches: weakref.WeakKeyDictionary[Crawler, Cache] = weakref.WeakKeyDictionary()


def cache_from_crawler(crawler: Crawler) -> Cache:
    """The cache shared by every component of *crawler*, built from its settings on first use."""
    cache = _crawler_caches.get(crawler)
    if cache is None:
        cache = _crawler_caches[crawler] = get_cache(crawler.settings)
    return cache
