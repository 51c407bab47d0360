"""What ``mediacrawler status`` and the metrics endpoint show of the shared state: per spider the jobs waiting and
the live workers (their heartbeats, ``<prefix>:<spider>:workers``), and per active job the requests queued and
leased, the workers holding leases, the leases already expired (their worker is likely dead) and the shared
checkpoint's lag (pages past its watermark not yet complete). Read-only: a few O(1)/O(n) reads per job."""

from __future__ import annotations

from typing import Any

import redis
from scrapy.settings import BaseSettings

from mediacrawler.config import setting
from mediacrawler.distributed.connection import client_from_settings, key_base, workers_key


def spider_names(server: redis.Redis, prefix: str) -> list[str]:
    """The spiders that have jobs or workers in Redis."""
    return sorted({k.decode().split(":")[-2] for pattern in (f"{prefix}:*:jobs", f"{prefix}:*:active",
                                                             f"{prefix}:*:workers")
                   for k in server.scan_iter(pattern, count=1000)})


def spider_state(server: redis.Redis, prefix: str, name: str, *, checkpoint_prefix: str) -> dict[str, Any]:
    """One spider's figures: ``jobs_waiting``, ``workers`` (live: heartbeat deadline not passed) and ``active``
    (job key -> ``queued``, ``leased``, ``expired_leases``, ``workers``, ``seen``, ``checkpoint_lag_pages``)."""
    sec, usec = server.time()
    now_ms = sec * 1000 + usec // 1000
    active = {}
    for job in sorted(k.decode() for k in server.hkeys(f"{prefix}:{name}:active")):
        base = key_base(prefix, name, job)
        owners = server.hvals(f"{base}:owner")
        active[job] = {
            "queued": server.zcard(f"{base}:q"),
            "leased": server.zcard(f"{base}:lease"),
            "expired_leases": server.zcount(f"{base}:lease", "-inf", now_ms),
            "workers": sorted({o.decode() for o in owners}),
            "seen": server.scard(f"{base}:seen"),
            # Pages past the shared checkpoint's watermark that are not complete yet (0 without one).
            "checkpoint_lag_pages": server.hlen(f"{checkpoint_prefix}{job}:pages"),
        }
    live = server.zrangebyscore(workers_key(prefix, name), now_ms, "+inf")
    return {"jobs_waiting": server.llen(f"{prefix}:{name}:jobs"), "workers": sorted(w.decode() for w in live),
            "active": active}


def distributed_status(settings: BaseSettings) -> dict[str, Any]:
    """A JSON-ready summary, one entry per spider that has jobs or workers in Redis."""
    server = client_from_settings(settings)
    prefix = str(setting(settings, "DISTRIBUTED_KEY_PREFIX")).rstrip(":")
    checkpoint_prefix = str(setting(settings, "CHECKPOINT_REDIS_PREFIX"))
    spiders = {name: spider_state(server, prefix, name, checkpoint_prefix=checkpoint_prefix)
               for name in spider_names(server, prefix)}
    return {"redis": str(setting(settings, "REDIS_URL")).split("@")[-1], "prefix": prefix, "spiders": spiders}
