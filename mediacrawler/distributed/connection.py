"""The Redis client of the distributed components (one pool per process, bounded timeouts)."""

from __future__ import annotations

import redis
from scrapy.settings import BaseSettings


def client_from_settings(settings: BaseSettings) -> redis.Redis:
    """A client for ``REDIS_URL``; timeouts from ``DISTRIBUTED_SOCKET_TIMEOUT`` so a dead link fails fast."""
    timeout = settings.getfloat("DISTRIBUTED_SOCKET_TIMEOUT")
    return redis.Redis.from_url(str(settings.get("REDIS_URL")), socket_timeout=timeout,
                                socket_connect_timeout=timeout, health_check_interval=30)


def key_base(prefix: str, spider: str, job: str) -> str:
    """The prefix of every key of one job's queue: ``<prefix>:<spider>:<job>``."""
    return f"{prefix.rstrip(':')}:{spider}:{job}"


def workers_key(prefix: str, spider: str) -> str:
    """The ZSET of a spider's live workers: worker id -> heartbeat deadline (ms, Redis server time)."""
    return f"{prefix.rstrip(':')}:{spider}:workers"
