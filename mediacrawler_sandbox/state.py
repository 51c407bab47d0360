"""Mutable run-time state of a sandbox: the request log, the counters and the fault knobs.

Pure Python (the server mutates it from the reactor thread only). The control endpoints under ``/_sandbox/``
expose it; requests to those endpoints are never logged or counted, so a test's own polling does not show up.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

from .faults import FaultState
from .world import World

__all__ = ["RequestLog", "SandboxState"]


class RequestLog:
    """Every platform/media request since the last reset, in arrival order.

    Entries are plain dicts filled in while the response goes out::

        {"seq": 1, "method": "GET", "path": "/media/blob/a", "query": "size=10",
         "range": "bytes=0-9" | None, "if_range": None, "referer": None, "cookie": False,
         "user_agent": "Scrapy/…", "client_port": 40312, "status": 206 | None, "bytes": 10, "finished": True,
         "aborted": False, "started": 0.0123, "ended": 0.0150}

    ``bytes`` counts body bytes handed to the socket (after a cut, only what was sent); ``aborted`` marks a
    response whose connection ended before it finished (a cut, or the client going away); times are seconds since
    the sandbox started (monotonic).
    """

    def __init__(self, maxlen: int = 500_000) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self.seq = 0

    def start(self, **fields: Any) -> dict[str, Any]:
        """Append and return a new entry (the caller keeps updating it)."""
        self.seq += 1
        entry = {"seq": self.seq, "status": None, "bytes": 0, "finished": False, "aborted": False, **fields}
        self.entries.append(entry)
        return entry

    def clear(self) -> None:
        """Forget every entry (sequence numbers restart)."""
        self.entries.clear()
        self.seq = 0


class SignedUrls:
    """Tokens of signed media URLs (the ``weibo_video_url_uses`` and ``bilibili_stream_url_uses`` knobs): issued
    per render, counted per GET. Keyed by URL path, so Weibo's and Bilibili's files never share a counter."""

    def __init__(self) -> None:
        self.issued: Counter[str] = Counter()
        self.uses: Counter[tuple[str, int]] = Counter()

    def issue(self, path: str) -> int:
        """A fresh token for ``path`` (1, 2, … per path)."""
        self.issued[path] += 1
        return self.issued[path]

    def admit(self, path: str, token: str | None, *, limit: int, count: bool) -> bool:
        """Whether ``token`` may fetch ``path`` now (a known token used fewer than ``limit`` times); a GET
        (``count``) uses it up by one."""
        if token is None or not token.isdigit() or not 1 <= int(token) <= self.issued[path]:
            return False
        key = (path, int(token))
        if self.uses[key] >= limit:
            return False
        if count:
            self.uses[key] += 1
        return True

    def clear(self) -> None:
        self.issued.clear()
        self.uses.clear()


class SandboxState:
    """World, faults, request log and counters of one running sandbox."""

    def __init__(self, world: World, *, initial_faults: dict[str, Any] | None = None) -> None:
        self.world = world
        self.faults = FaultState(world.seed, initial_faults)
        self.log = RequestLog()
        self.t0 = time.monotonic()
        self.counters: Counter[str] = Counter()
        self.by_status: Counter[int] = Counter()
        self.lifetime: Counter[str] = Counter()
        self.in_flight = 0
        self.signed = SignedUrls()

    def now(self) -> float:
        """Seconds since start, for log timestamps."""
        return round(time.monotonic() - self.t0, 6)

    def reset(self) -> None:
        """``POST /_sandbox/reset``: clear the log and counters, restore the start-up faults."""
        self.log.clear()
        self.counters.clear()
        self.by_status.clear()
        self.signed.clear()
        self.faults.reset()

    def count(self, key: str, amount: int = 1) -> None:
        """Bump a counter both since-reset and for the lifetime of the process."""
        self.counters[key] += amount
        self.lifetime[key] += amount

    def stats(self) -> dict[str, Any]:
        """``GET /_sandbox/stats``: totals since the last reset, plus lifetime totals."""
        keys = ("requests", "api_requests", "media_requests", "bytes_sent", "media_bytes_sent", "cuts", "stalls",
                "faults")
        return {
            **{k: self.counters[k] for k in keys},
            "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
            "in_flight": self.in_flight,
            "lifetime": {k: self.lifetime[k] for k in keys},
            "uptime": self.now(),
        }
