"""The in-memory cache backend: one process, a monotonic (injectable) clock; docs/architecture.md, "Cache".
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mediacrawler.cache.base import Cache, WrongTypeError, check_ttl, to_bytes
from mediacrawler.config import setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class _ExpiringSet:
    """Members with their own deadlines (``math.inf``: never), plus a heap of the finite deadlines."""

    __slots__ = ("deadlines", "heap", "latest")

    def __init__(self) -> None:
        self.deadlines: dict[str, float] = {}
        self.heap: list[tuple[float, str]] = []
        self.latest = -math.inf  # the largest finite deadline added since the set was last empty of them

    def purge(self, now: float) -> None:
        # A member's deadline never changes while it is alive (adds do not extend it) and members are only
        # removed here, so the heap holds exactly the live finite members: popping is enough, nothing goes stale.
        heap, deadlines = self.heap, self.deadlines
        while heap and heap[0][0] <= now:
            deadline, member = heapq.heappop(heap)
            if deadlines.get(member) == deadline:
                del deadlines[member]
        if not heap:
            self.latest = -math.inf

    def add(self, member: str, deadline: float, now: float) -> bool:
        current = self.deadlines.get(member)
        if current is not None and current > now:
            return False
        self.deadlines[member] = deadline
        if deadline != math.inf:
            heapq.heappush(self.heap, (deadline, member))
            self.latest = max(self.latest, deadline)
        return True

    def longest_deadline(self) -> float:
        # Members without a deadline are the ones missing from the heap. Otherwise the latest finite deadline is
        # still alive whenever any finite member is (it is the largest), so it needs no scan: O(1).
        if len(self.heap) < len(self.deadlines):
            return math.inf
        return self.latest


class MemoryCache(Cache):
    """The :class:`~mediacrawler.cache.base.Cache` contract in one process's memory.

    *clock* returns seconds on a monotonic scale; tests can inject a fake one to step time without sleeping.
    """

    blocking = False

    def __init__(self, *, prefix: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(prefix=prefix)
        self._clock = clock
        self._lock = threading.RLock()
        self._values: dict[str, bytes | _ExpiringSet] = {}
        self._deadlines: dict[str, float] = {}  # only keys that have a TTL
        self._key_heap: list[tuple[float, str]] = []

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MemoryCache:
        return cls(prefix=setting(settings, "CACHE_KEY_PREFIX"))

    # --- Internals (call with the lock held) -------------------------------------------------------------------
    def _sweep(self, now: float) -> None:
        heap, deadlines = self._key_heap, self._deadlines
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            if deadlines.get(key) == deadline:
                del deadlines[key]
                self._values.pop(key, None)
        # Renewing a TTL (a session used again) leaves the old deadline in the heap; rebuild once stale entries
        # outnumber live ones so the heap stays proportional to the keys that have a TTL.
        if len(heap) > 2 * len(deadlines) + 64:
            self._key_heap = [(deadline, key) for key, deadline in deadlines.items()]
            heapq.heapify(self._key_heap)

    def _set_deadline(self, key: str, deadline: float) -> None:
        if deadline == math.inf:
            self._deadlines.pop(key, None)
        else:
            self._deadlines[key] = deadline
            heapq.heappush(self._key_heap, (deadline, key))

    def _lookup(self, key: str, now: float) -> bytes | _ExpiringSet | None:
        self._sweep(now)
        return self._values.get(self.key(key))

    def _set_of(self, key: str, now: float) -> _ExpiringSet | None:
        value = self._lookup(key, now)
        if value is None:
            return None
        if not isinstance(value, _ExpiringSet):
            raise WrongTypeError(f"{key!r} holds a string, not a set")
        value.purge(now)
        return value

    # --- Strings -------------------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        with self._lock:
            value = self._lookup(key, self._clock())
            if isinstance(value, _ExpiringSet):
                raise WrongTypeError(f"{key!r} holds a set, not a string")
            return value

    def set(self, key: str, value: str | bytes, ttl: float | None = None) -> None:
        data, ttl = to_bytes(value), check_ttl(ttl)
        with self._lock:
            now = self._clock()
            self._sweep(now)
            stored = self.key(key)
            self._values[stored] = data
            self._set_deadline(stored, math.inf if ttl is None else now + ttl)

    # --- Any key -------------------------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        with self._lock:
            now = self._clock()
            value = self._lookup(key, now)
            if isinstance(value, _ExpiringSet):
                value.purge(now)
                return bool(value.deadlines)
            return value is not None

    def delete(self, key: str) -> bool:
        with self._lock:
            existed = self.exists(key)
            stored = self.key(key)
            self._values.pop(stored, None)
            self._deadlines.pop(stored, None)
            return existed

    def expire(self, key: str, ttl: float) -> bool:
        seconds = check_ttl(ttl)
        if seconds is None:
            raise ValueError("expire() needs a ttl; use set() without one to make a key permanent")
        with self._lock:
            if not self.exists(key):
                return False
            self._set_deadline(self.key(key), self._clock() + seconds)
            return True

    def ttl(self, key: str) -> float | None:
        with self._lock:
            if not self.exists(key):
                return None
            deadline = self._deadlines.get(self.key(key), math.inf)
            return deadline if deadline == math.inf else max(0.0, deadline - self._clock())

    # --- Sets ----------------------------------------------------------------------------------------------------
    def sadd(self, key: str, *members: str, ttl: float | None = None) -> int:
        if not members:
            raise ValueError("sadd() needs at least one member")
        ttl = check_ttl(ttl)
        with self._lock:
            now = self._clock()
            entries = self._set_of(key, now)
            stored = self.key(key)
            if entries is None:
                entries = _ExpiringSet()
                self._values[stored] = entries
            deadline = math.inf if ttl is None else now + ttl
            added = sum(entries.add(str(member), deadline, now) for member in members)
            # The key lives as long as its longest-lived entry, so an abandoned set is swept as a whole.
            self._set_deadline(stored, entries.longest_deadline())
            return added

    def sismember(self, key: str, member: str) -> bool:
        with self._lock:
            now = self._clock()
            entries = self._set_of(key, now)
            return entries is not None and entries.deadlines.get(str(member), -math.inf) > now

    def scard(self, key: str) -> int:
        with self._lock:
            entries = self._set_of(key, self._clock())
            return 0 if entries is None else len(entries.deadlines)

    # --- Claims --------------------------------------------------------------------------------------------------
    def claim(
        self, key: str, owner: str, ttl: float | None = None, *, unless_in: tuple[str, str] | None = None
    ) -> str | None:
        data, ttl = to_bytes(owner), check_ttl(ttl)
        with self._lock:  # one lock: the membership check and the claim are one step
            now = self._clock()
            if unless_in is not None:
                set_key, member = unless_in
                entries = self._set_of(set_key, now)
                if entries is not None and entries.deadlines.get(str(member), -math.inf) > now:
                    return None
            current = self._lookup(key, now)
            if isinstance(current, _ExpiringSet):
                raise WrongTypeError(f"{key!r} holds a set, not a claim")
            if current is not None:
                return current.decode("utf-8", "replace")
            stored = self.key(key)
            self._values[stored] = data
            self._set_deadline(stored, math.inf if ttl is None else now + ttl)
            return data.decode("utf-8", "replace")

    def release(self, key: str, owner: str) -> bool:
        data = to_bytes(owner)
        with self._lock:
            current = self._lookup(key, self._clock())
            if isinstance(current, _ExpiringSet):
                raise WrongTypeError(f"{key!r} holds a set, not a claim")
            if current != data:
                return False
            stored = self.key(key)
            self._values.pop(stored, None)
            self._deadlines.pop(stored, None)
            return True

    def __len__(self) -> int:
        """How many keys are stored, expired ones already swept (for tests of boundedness)."""
        with self._lock:
            self._sweep(self._clock())
            return len(self._values)
