"""One JSON document per job key in Redis: the Redis store of the high-water marks and the media retry sets
(``MARKS_BACKEND``/``RETRY_MEDIA_BACKEND`` = ``redis``), for processes that share no disk.

The same interface as :class:`mediacrawler.extensions.docstore.FileDocumentStore` (``location``, ``load``,
``save``, ``update``, ``delete``, ``keys``): one string key per document, the same JSON text a file would hold, so
a reader never sees half a document. :meth:`RedisDocumentStore.update` is a read-modify-write under ``WATCH``
(optimistic: retried when another process wrote the document in between), so processes of one job that change one
document at once never lose each other's changes. Redis being unreachable is an :class:`OSError`, as a disk error
is for the file store. Keys::

    <MARKS_REDIS_PREFIX><job>          STRING  the job's mark   (default prefix mediacrawler:marks:)
    <RETRY_MEDIA_REDIS_PREFIX><job>    STRING  its retry set    (default prefix mediacrawler:retry:)

A subclass names the setting holding its prefix, the exception for an unusable document and its document class
(``key``, ``to_dict()``, ``from_dict(data, key=)``), as for the file store. See docs/operations.md, "Marks and
retry sets in Redis".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from scrapy.exceptions import NotConfigured

from mediacrawler.config import setting
from mediacrawler.fsutil import STATE_MAX_DEPTH, TooLarge, loads_bounded

# redis-py is imported by the Redis store's methods: the marks and retry extensions, which every crawl loads,
# define their Redis stores on this module, and a crawl without REDIS_URL never calls them (docs/benchmarks.md,
# "Start-up").
if TYPE_CHECKING:
    from typing import Self

    import redis
    from scrapy.settings import BaseSettings

D = TypeVar("D")

#: Tries of one :meth:`RedisDocumentStore.update` when other processes keep writing the same document.
UPDATE_TRIES = 20
#: Damaged copies of one document kept aside in Redis before quarantine refuses (the operator deletes them).
QUARANTINE_SLOTS = 100


class DocumentCodec(Generic[D]):
    """A store's documents as JSON text and back: one decoding for the file and the Redis stores."""

    #: The class of the documents (its ``from_dict`` raises :attr:`corrupt` for data that is not one).
    document: ClassVar[type[Any]]
    #: Raised by ``load`` for a document that exists but cannot be used.
    corrupt: ClassVar[type[Exception]]

    def decode(self, raw: bytes, *, key: str) -> D:
        try:
            data = loads_bounded(raw, max_depth=STATE_MAX_DEPTH)  # no RecursionError from a hostile document
        except TooLarge as e:
            raise self.corrupt(str(e)) from None
        except ValueError as e:
            raise self.corrupt(f"not JSON: {e}") from None
        parsed: D = self.document.from_dict(data, key=key)
        return parsed

    @staticmethod
    def encode(document: Any, *, indent: int | None = None) -> bytes:
        return json.dumps(document.to_dict(), ensure_ascii=False, indent=indent).encode()


class RedisDocumentStore(DocumentCodec[D]):
    """Documents as Redis strings ``<prefix><job>``; ``from_settings``: ``REDIS_URL`` and the prefix named by
    :attr:`prefix_setting`."""

    #: The setting naming the key prefix (e.g. ``MARKS_REDIS_PREFIX``).
    prefix_setting: ClassVar[str]

    def __init__(self, server: redis.Redis, prefix: str, *, ttl: int | None = None) -> None:
        self.server = server
        self.prefix = prefix
        #: Seconds a document lives after its last write (``None``: for ever).
        self.ttl = ttl

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        if not setting(settings, "REDIS_URL"):
            raise NotConfigured(f"{cls.__name__} needs REDIS_URL")
        from mediacrawler.distributed.connection import client_from_settings

        return cls(client_from_settings(settings), str(settings.get(cls.prefix_setting)))

    def _key(self, key: str) -> str:
        if not key or ":" in key or "*" in key:
            raise ValueError(f"not a job key: {key!r}")
        return f"{self.prefix}{key}"

    def location(self, key: str) -> str:
        return f"redis:{self._key(key)}"

    def load(self, key: str) -> D | None:
        import redis

        try:
            raw = self.server.get(self._key(key))
        except redis.ResponseError as e:  # a key of another type
            raise self.corrupt(f"unreadable: {e}") from None
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e
        return None if raw is None else self.decode(raw, key=key)

    def save(self, document: D) -> None:
        import redis

        doc: Any = document
        try:
            self.server.set(self._key(doc.key), self.encode(doc), ex=self.ttl)
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e

    def update(self, key: str, change: Callable[[D | None], D | None]) -> D | None:
        """Write ``change(current)`` in place of the document (``None``: delete it), atomically: when another
        process writes it in between, read it again and call ``change`` again. An unusable document reads as
        ``None``. Returns what was written."""
        import redis

        name = self._key(key)
        try:
            with self.server.pipeline(transaction=True) as pipe:
                for _ in range(UPDATE_TRIES):
                    try:
                        pipe.watch(name)
                        raw = pipe.get(name)
                        try:
                            current = None if raw is None else self.decode(raw, key=key)
                        except self.corrupt:
                            current = None
                        new = change(current)
                        pipe.multi()
                        if new is None:
                            pipe.delete(name)
                        else:
                            pipe.set(name, self.encode(new), ex=self.ttl)
                        pipe.execute()
                        return new
                    except redis.WatchError:
                        continue
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e
        raise OSError(f"Redis: {name} changed by others {UPDATE_TRIES} times in a row")

    def delete(self, key: str) -> bool:
        import redis

        try:
            return bool(self.server.delete(self._key(key)))
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e

    def quarantine(self, key: str) -> str | None:
        """Rename a damaged document aside (``<prefix><job>:corrupt``, ``:corrupt:2``… when taken; no TTL, kept
        for inspection), as a damaged checkpoint is; the new location, or None when there was none."""
        import redis

        name = self._key(key)
        try:
            for n in range(1, QUARANTINE_SLOTS + 1):
                target = f"{name}:corrupt" + (f":{n}" if n > 1 else "")
                if self.server.renamenx(name, target):
                    self.server.persist(target)
                    return f"redis:{target}"
        except redis.ResponseError:  # no such key (deleted meanwhile)
            return None
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e
        raise OSError(f"Redis: {name}: {QUARANTINE_SLOTS} damaged copies kept already; delete some")

    def set_aside(self) -> list[tuple[str, str]]:
        """``(key, location)`` of every document :meth:`quarantine` moved aside and nobody has deleted yet."""
        import redis

        try:
            found = [raw.decode() for raw in self.server.scan_iter(f"{self.prefix}*:corrupt*", count=1000)]
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e
        return sorted((n[len(self.prefix):].partition(":")[0], f"redis:{n}") for n in found)

    def keys(self) -> list[str]:
        import redis

        try:
            found = self.server.scan_iter(f"{self.prefix}*", count=1000)
            names = [raw.decode()[len(self.prefix):] for raw in found]
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e
        return sorted(n for n in names if n and ":" not in n)
