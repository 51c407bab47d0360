"""The shared rate budget: a GCRA limiter per key (a platform, a media host), in Redis or in this process.

GCRA (the generic cell rate algorithm) keeps one number per key, the *theoretical arrival time* ``tat``. A budget
of ``n`` requests per ``period`` seconds has an emission interval ``T = period / n`` and a burst tolerance
``tau = T * (burst - 1)``. Asking for a slot *reserves* one: the slot starts at
``s = max(now, tat - tau, cool_until)`` and ``tat`` becomes ``max(tat, s) + T``; the caller waits ``s - now``. So N
acquisitions at rate r, asked at once, are told to wait 0, 1/r, …, (N-1)/r: nobody polls, everybody waits exactly
once. A cool-down (``cool_down(key, seconds)``: a Retry-After, a rate-limit answer) moves ``cool_until`` forward
for every worker; a request that reserved its slot before the cool-down looks once more after its wait
(:meth:`Limiter.cooling`) and then asks again.

:class:`RedisLimiter` runs that arithmetic in one Lua script (one ``EVAL`` per request, O(1), Redis's clock for
every worker); :class:`LocalLimiter` is the same arithmetic (:func:`gcra`) in this process, for crawls without
``REDIS_URL``. See docs/operations.md, "A shared rate budget".
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import redis  # only to annotate RedisLimiter: parse_rate and LocalLimiter serve crawls without Redis

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)?\s*(ms|s|sec|second|m|min|minute|h|hour)\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
         "h": 3600.0, "hour": 3600.0}


@dataclass(frozen=True)
class Rate:
    """``count`` requests per ``period`` seconds."""

    count: float
    period: float

    @property
    def interval_ms(self) -> float:
        """The emission interval T in milliseconds."""
        return self.period * 1000.0 / self.count


def parse_rate(text: str) -> Rate:
    """``"2/s"``, ``"10/s"``, ``"30/min"``, ``"1/5s"``, ``"0.5/s"`` → :class:`Rate`; ValueError otherwise."""
    m = _RATE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a rate like '2/s', '30/min' or '1/5s'")
    count, multiple, unit = float(m.group(1)), float(m.group(2) or 1), m.group(3)
    period = multiple * _UNIT[unit]
    if count <= 0 or period <= 0:
        raise ValueError(f"{text!r}: the count and the period must be positive")
    return Rate(count, period)


def gcra(now_ms: float, tat_ms: float, cool_ms: float, interval_ms: float, tau_ms: float) -> tuple[float, float]:
    """One reservation: ``(wait_ms, new_tat_ms)``. The Lua script of :class:`RedisLimiter` is this function."""
    start = max(now_ms, tat_ms - tau_ms, cool_ms)
    return start - now_ms, max(tat_ms, start) + interval_ms


class Limiter(Protocol):
    """What the rate budget middleware asks (blocking calls: run them off the reactor thread)."""

    def acquire(self, key: str, rate: Rate, burst: int) -> float:
        """Reserve the next slot of ``key``; seconds to wait before sending."""
        ...

    def cooling(self, key: str) -> float:
        """Seconds left of ``key``'s cool-down (0 when none)."""
        ...

    def cool_down(self, key: str, seconds: float) -> None:
        """Nobody starts a request of ``key`` for ``seconds`` (an earlier, longer cool-down stays)."""
        ...


class LocalLimiter:
    """:func:`gcra` in this process (thread-safe): the budget of one crawler, without Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tat: dict[str, float] = {}
        self._cool: dict[str, float] = {}

    @staticmethod
    def _now_ms() -> float:
        return time.monotonic() * 1000.0

    def acquire(self, key: str, rate: Rate, burst: int = 1) -> float:
        interval = rate.interval_ms
        with self._lock:
            wait, self._tat[key] = gcra(self._now_ms(), self._tat.get(key, 0.0), self._cool.get(key, 0.0),
                                        interval, interval * (burst - 1))
        return wait / 1000.0

    def cooling(self, key: str) -> float:
        with self._lock:
            return max(0.0, self._cool.get(key, 0.0) - self._now_ms()) / 1000.0

    def cool_down(self, key: str, seconds: float) -> None:
        with self._lock:
            self._cool[key] = max(self._cool.get(key, 0.0), self._now_ms() + seconds * 1000.0)


# KEYS: tat, cool. ARGV: interval ms, tau ms. Returns the wait in ms (an integer: Lua numbers go back as integers).
# Redis's own clock, so workers on several machines need no synchronised clocks. The keys expire once idle.
ACQUIRE = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval, tau = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local cool = tonumber(redis.call('GET', KEYS[2]) or '0')
local start = math.max(now, tat - tau, cool)
local new_tat = math.max(tat, start) + interval
redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX', math.ceil(new_tat - now + tau) + 1000)
return math.ceil(start - now)
"""

# KEYS: cool. ARGV: seconds (ms). Sets the cool-down's end to now + ms unless a later end is set.
COOL_DOWN = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ms = tonumber(ARGV[1])
local cool = tonumber(redis.call('GET', KEYS[1]) or '0')
if now + ms > cool then
  redis.call('SET', KEYS[1], string.format('%.3f', now + ms), 'PX', math.ceil(ms) + 1000)
end
return 1
"""

# KEYS: cool. Returns the cool-down's remaining ms (0 when none).
COOLING = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cool = tonumber(redis.call('GET', KEYS[1]) or '0')
return math.max(0, math.ceil(cool - now))
"""


class RedisLimiter:
    """:func:`gcra` in Redis, one script call per acquisition: every worker on this Redis shares the budget.

    Keys: ``<prefix>:<key>:tat`` and ``<prefix>:<key>:cool`` (strings: ms of Redis time; they expire when idle).
    """

    def __init__(self, server: redis.Redis, prefix: str) -> None:
        self.server = server
        self.prefix = prefix.rstrip(":")
        self._acquire = server.register_script(ACQUIRE)
        self._cool_down = server.register_script(COOL_DOWN)
        self._cooling = server.register_script(COOLING)

    def _keys(self, key: str) -> list[str]:
        return [f"{self.prefix}:{key}:tat", f"{self.prefix}:{key}:cool"]

    def acquire(self, key: str, rate: Rate, burst: int = 1) -> float:
        interval = rate.interval_ms
        return int(self._acquire(keys=self._keys(key), args=[interval, interval * (burst - 1)])) / 1000.0

    def cooling(self, key: str) -> float:
        return int(self._cooling(keys=self._keys(key)[1:])) / 1000.0

    def cool_down(self, key: str, seconds: float) -> None:
        self._cool_down(keys=self._keys(key)[1:], args=[max(0.0, seconds) * 1000.0])
