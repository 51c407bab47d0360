"""One JSON document per job key in a Redis hash: the Redis store of the high-water marks and the media retry sets
(``MARKS_BACKEND``/``RETRY_MEDIA_BACKEND`` = ``redis``), for processes that share no disk.

The same interface as :class:`mediacrawler.extensions.docstore.FileDocumentStore` (``location``, ``load``,
``save``, ``delete``, ``keys``): one HASH per kind of document, the job key as field, the document as JSON, the
same text a file would hold. One HSET/HGET/HDEL per call, so a reader never sees half a document; Redis being
unreachable is an :class:`OSError`, as a disk error is for the file store. Keys::

    <MARKS_REDIS_KEY>         HASH  job -> mark JSON   (default mediacrawler:marks)
    <RETRY_MEDIA_REDIS_KEY>   HASH  job -> retry JSON  (default mediacrawler:retry)

A subclass names the setting holding its hash's key, the exception for an unusable document and its document
class (``key``, ``to_dict()``, ``from_dict(data, key=)``), as for the file store. See docs/operations.md, "Incremental sync and
retries".
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import redis
from scrapy.exceptions import NotConfigured

from mediacrawler.distributed.connection import client_from_settings

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings

D = TypeVar("D")


class DocumentCodec(Generic[D]):
    """A store's documents as JSON text and back: one decoding for the file and the Redis stores."""

    #: The class of the documents (its ``from_dict`` raises :attr:`corrupt` for data that is not one).
    document: ClassVar[type[Any]]
    #: Raised by ``load`` for a document that exists but cannot be used.
    corrupt: ClassVar[type[Exception]]

    def decode(self, raw: bytes, *, key: str) -> D:
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise self.corrupt(f"not JSON: {e}") from None
        parsed: D = self.document.from_dict(data, key=key)
        return parsed

    @staticmethod
    def encode(document: Any, *, indent: int | None = None) -> bytes:
        return json.dumps(document.to_dict(), ensure_ascii=False, indent=indent).encode()


class RedisDocumentStore(DocumentCodec[D]):
    """Documents as fields of one Redis hash; ``from_settings``: ``REDIS_URL`` and the hash named by
    :attr:`key_setting`."""

    #: The setting naming the hash (e.g. ``MARKS_REDIS_KEY``).
    key_setting: ClassVar[str]

    def __init__(self, server: redis.Redis, hash_key: str) -> None:
        self.server = server
        self.hash_key = hash_key

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        if not settings.get("REDIS_URL"):
            raise NotConfigured(f"{cls.__name__} needs REDIS_URL")
        return cls(client_from_settings(settings), str(settings.get(cls.key_setting)))

    def location(self, key: str) -> str:
        return f"redis:{self.hash_key}[{key}]"

    def load(self, key: str) -> D | None:
        try:
            raw = self.server.hget(self.hash_key, key)
        except redis.ResponseError as e:  # a key of another type
            raise self.corrupt(f"unreadable: {e}") from None
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e
        return None if raw is None else self.decode(raw, key=key)

    def save(self, document: D) -> None:
        doc: Any = document
        try:
            self.server.hset(self.hash_key, doc.key, self.encode(doc))
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e

    def delete(self, key: str) -> bool:
        try:
            return bool(self.server.hdel(self.hash_key, key))
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e

    def keys(self) -> list[str]:
        try:
            return sorted(k.decode() for k in self.server.hkeys(self.hash_key))
        except redis.RedisError as e:
            raise OSError(f"Redis: {e}") from e
