"""The media index in Redis (``MEDIA_INDEX = "redis"``, or REDIS_URL set): one index shared by many workers, the
same :class:`~mediacrawler.media.index.MediaIndex` as the embedded SQLite one. Keys: docs/media.md, "The media
index".
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediacrawler.cache.redis import UNREACHABLE_ERRORS, get_redis, mask_url
from mediacrawler.config import default, setting
from mediacrawler.media.index import ObjectRecord, SourceRecord, canonical_media_url

if TYPE_CHECKING:
    import redis
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

# The back-off of a write while Redis is unreachable: first wait, doubling up to the cap (MEDIA_INDEX_OUTAGE_GRACE
# bounds the whole wait).
_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 2.0


class RedisMediaIndex:
    """Keys under ``prefix``, one MULTI/EXEC per record (never an asset without its object), nothing expires."""

    def __init__(self, client: redis.Redis, *, prefix: str = default("MEDIA_INDEX_REDIS_PREFIX"),
                 outage_grace: float = default("MEDIA_INDEX_OUTAGE_GRACE")) -> None:
        if outage_grace < 0:
            raise ValueError("MEDIA_INDEX_OUTAGE_GRACE must not be negative")
        self.client = client
        self.prefix = prefix
        self.outage_grace = outage_grace

    @classmethod
    def from_settings(cls, settings: BaseSettings, *, store_root: str | Path) -> RedisMediaIndex:
        """The index on REDIS_URL (the process-wide client of :mod:`mediacrawler.cache.redis`)."""
        return cls(get_redis(str(setting(settings, "REDIS_URL"))),
                   prefix=setting(settings, "MEDIA_INDEX_REDIS_PREFIX"),
                   outage_grace=setting(settings, "MEDIA_INDEX_OUTAGE_GRACE"))

    def __repr__(self) -> str:
        return f"RedisMediaIndex(prefix={self.prefix!r})"

    def _k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def _url_key(self, canonical: str) -> str:
        # URLs can be long and carry anything; their digest makes a bounded, inert key.
        return self._k("url", hashlib.sha1(canonical.encode()).hexdigest())  # noqa: S324 - a key, not a MAC

    def lookup(self, *, key: str | None, url: str | None) -> ObjectRecord | None:
        sha: bytes | None = None
        if key:
            sha = self.client.hget(self._k("asset", key), "sha256")
        if sha is None and url:
            sha = self.client.hget(self._url_key(canonical_media_url(url)), "sha256")
        return self.get(sha.decode()) if sha else None

    def record(self, *, obj: ObjectRecord, key: str | None, url: str | None, seen_at: float | None = None) -> None:
        now = time.time() if seen_at is None else seen_at
        fields: dict[str, Any] = {"path": obj.path, "size": obj.size, "last_seen": now}
        fields.update({name: getattr(obj, name) for name in ("mime", "width", "height")
                       if getattr(obj, name) is not None})
        pipe = self.client.pipeline(transaction=True)
        okey = self._k("obj", obj.sha256)
        pipe.hsetnx(okey, "first_seen", now)
        pipe.hset(okey, mapping=fields)
        pipe.sadd(self._k("objects"), obj.sha256)
        if key:
            akey = self._k("asset", key)
            pipe.hsetnx(akey, "first_seen", now)
            pipe.hset(akey, mapping={"sha256": obj.sha256, "url": url or "", "last_seen": now})
        if url:
            canonical = canonical_media_url(url)
            ukey = self._url_key(canonical)
            pipe.hsetnx(ukey, "first_seen", now)
            mapping: dict[str, Any] = {"url": canonical, "raw": url, "sha256": obj.sha256, "last_seen": now}
            if key:
                mapping["key"] = key
            pipe.hset(ukey, mapping=mapping)
            pipe.zadd(self._k("src", obj.sha256), {canonical: now})
        pipe.execute()

    def record_many(self, records: Iterable[tuple[ObjectRecord, str | None, str | None]], *,
                    seen_at: float | None = None) -> None:
        """One MULTI/EXEC per record; durable as far as the server's persistence (appendfsync) makes any write.

        (A worker thread: the committer's.) While Redis is unreachable the rows wait, with a bounded back-off,
        up to ``outage_grace`` seconds from the first failure: a blip pauses the commits instead of failing their
        assets. A record is idempotent (sets of fields, set and sorted-set adds), so one that timed out after it
        was applied is simply written again.
        """
        pending = list(records)
        down_since: float | None = None
        delay = _BACKOFF_FIRST
        for _ in range(10_000):  # bounded in count too; the deadline ends it first
            try:
                while pending:
                    obj, key, url = pending[0]
                    self.record(obj=obj, key=key, url=url, seen_at=seen_at)
                    pending.pop(0)
            except UNREACHABLE_ERRORS as exc:
                now = time.monotonic()
                if down_since is None:
                    down_since = now
                    logger.warning("Media index: Redis at %s unreachable (%s: %s); %d commits wait up to %.0fs",
                                   mask_url(self._url()), type(exc).__name__, exc, len(pending), self.outage_grace)
                if now + delay > down_since + self.outage_grace:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX)
                continue
            if down_since is not None:
                logger.info("Media index: Redis reachable again; commits resumed after %.1fs",
                            time.monotonic() - down_since)
            return
        raise RuntimeError("media index write: retry bound reached")

    def _url(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"

    def get(self, sha256: str) -> ObjectRecord | None:
        raw = self.client.hgetall(self._k("obj", sha256))
        if not raw:
            return None

        def opt(name: bytes, kind: type[Any]) -> Any:
            v = raw.get(name)
            return kind(v.decode()) if v not in (None, b"") else None

        return ObjectRecord(sha256=sha256, path=raw[b"path"].decode(), size=int(raw[b"size"]),
                            mime=opt(b"mime", str), width=opt(b"width", int), height=opt(b"height", int),
                            first_seen=opt(b"first_seen", float), last_seen=opt(b"last_seen", float))

    def iter_objects(self) -> Iterator[ObjectRecord]:
        for sha in self.client.sscan_iter(self._k("objects"), count=500):
            record = self.get(sha.decode())
            if record is not None:
                yield record

    def sources(self, sha256: str) -> list[SourceRecord]:
        found = []
        for canonical in self.client.zrevrange(self._k("src", sha256), 0, -1):
            raw, key = self.client.hmget(self._url_key(canonical.decode()), ["raw", "key"])
            found.append(SourceRecord(url=(raw or canonical).decode(), key=key.decode() if key else None))
        return found

    def close(self) -> None:
        pass  # the client belongs to the process-wide pool (mediacrawler.cache.redis.get_redis)
