"""The Redis client of the distributed components (one pool per process, bounded timeouts)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis
from scrapy.settings import BaseSettings

from mediacrawler.config import setting


def client_from_settings(settings: BaseSettings) -> redis.Redis:
    """A client for ``REDIS_URL``; timeouts from ``DISTRIBUTED_SOCKET_TIMEOUT`` so a dead link fails fast."""
    timeout = setting(settings, "DISTRIBUTED_SOCKET_TIMEOUT")
    return redis.Redis.from_url(str(setting(settings, "REDIS_URL")), socket_timeout=timeout,
                                socket_connect_timeout=timeout, health_check_interval=30)


def key_base(prefix: str, spider: str, job: str) -> str:
    """The prefix of every key of one job's queue: ``<prefix>:<spider>:<job>``."""
    return f"{prefix.rstrip(':')}:{spider}:{job}"


def workers_key(prefix: str, spider: str) -> str:
    """The ZSET of a spider's live workers: worker id -> heartbeat deadline (ms, Redis server time)."""
    return f"{prefix.rstrip(':')}:{spider}:workers"


#: Schemes redis-py's ``from_url`` accepts.
REDIS_SCHEMES = ("redis", "rediss", "unix")


def masked_url(url: str) -> str:
    """*url* with its password replaced by ``***`` (the only form of REDIS_URL that goes into a message)."""
    # A tiny local parser on purpose: the credential scrubber (mediacrawler/scrub.py) may take this over.
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def redis_url_problem(url: str) -> str | None:
    """Why *url* is no REDIS_URL redis-py can use (one line, password masked), else None."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in REDIS_SCHEMES:
        return (f"REDIS_URL={masked_url(url)!r}: expected a URL starting with "
                f"{', '.join(s + '://' for s in REDIS_SCHEMES)} (e.g. redis://127.0.0.1:6379/0)")
    try:
        redis.connection.parse_url(url)
    except ValueError as exc:
        return f"REDIS_URL={masked_url(url)!r}: {exc}"
    return None


def is_auth_error(error: BaseException) -> bool:
    """Whether *error* is Redis refusing our credentials: waiting does not fix it (unlike an outage)."""
    if isinstance(error, redis.AuthenticationError):  # a ConnectionError subclass
        return True
    return isinstance(error, redis.ResponseError) and str(error).startswith(("NOAUTH", "WRONGPASS"))


def redis_connect_problem(settings: BaseSettings) -> str | None:
    """One line when ``REDIS_URL`` is set but Redis cannot be used now (misspelt, unreachable within
    ``REDIS_CONNECT_TIMEOUT``, or refusing our password); None when it answers or is unset. The start-up check of
    commands/crawl.py and status.py (docs/operations.md, "Exit status")."""
    url = setting(settings, "REDIS_URL")
    if not url:
        return None
    url = str(url)
    problem = redis_url_problem(url)
    if problem:
        return problem
    timeout = setting(settings, "REDIS_CONNECT_TIMEOUT")
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    except (redis.AuthenticationError, redis.ResponseError) as exc:
        if is_auth_error(exc):
            return f"REDIS_URL={masked_url(url)!r}: Redis refused the credentials (wrong or missing password)"
        return f"REDIS_URL={masked_url(url)!r}: {exc}"
    except (redis.RedisError, OSError) as exc:  # refused, timed out, or not a Redis server at all
        return (f"REDIS_URL={masked_url(url)!r}: cannot reach Redis within {timeout:g} s "
                f"(REDIS_CONNECT_TIMEOUT): {str(exc).replace(url, masked_url(url))}")
    finally:
        client.close()
    return None
