"""What ``mediacrawler status`` shows of the shared state: jobs waiting and active, and per active job the requests
queued and leased, the workers holding leases and the leases already expired (their worker is likely dead)."""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings

from mediacrawler.distributed.connection import client_from_settings, key_base


def distributed_status(settings: BaseSettings) -> dict[str, Any]:
    """A JSON-ready summary, one entry per spider that has jobs in Redis (read-only: a few O(1)/O(n) reads)."""
    server = client_from_settings(settings)
    prefix = str(settings.get("DISTRIBUTED_KEY_PREFIX")).rstrip(":")
    sec, usec = server.time()
    now_ms = sec * 1000 + usec // 1000
    spiders: dict[str, Any] = {}
    names = {k.decode().split(":")[-2] for pattern in (f"{prefix}:*:jobs", f"{prefix}:*:active")
             for k in server.scan_iter(pattern, count=1000)}
    for name in sorted(names):
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
            }
        spiders[name] = {"jobs_waiting": server.llen(f"{prefix}:{name}:jobs"), "active": active}
    return {"redis": str(settings.get("REDIS_URL")).split("@")[-1], "prefix": prefix, "spiders": spiders}
