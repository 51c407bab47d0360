"""Transient runtime state behind one contract: in memory by default, in Redis when ``REDIS_URL`` is set.

See :mod:`mediacrawler.cache.base` for the contract, :mod:`mediacrawler.cache.session` for session records.
The backends are imported lazily by the factory, so importing this package never imports redis-py's pools.
"""

from mediacrawler.cache.base import (
    Cache,
    CacheError,
    CacheFactory,
    CacheUnavailable,
    WrongTypeError,
    cache_from_crawler,
    get_cache,
)
from mediacrawler.cache.session import SessionState, SessionStore

__all__ = [
    "Cache",
    "CacheError",
    "CacheFactory",
    "CacheUnavailable",
    "SessionState",
    "SessionStore",
    "WrongTypeError",
    "cache_from_crawler",
    "get_cache",
]
