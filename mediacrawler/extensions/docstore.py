"""One JSON document per job key in a directory, written atomically: the file store of the high-water marks
(:mod:`.marks`) and the media retry sets (:mod:`.retries`), beside the checkpoints (docs/operations.md, "Incremental
sync and retries").

A subclass names its sub-directory of CHECKPOINT_DIR, the exception for an unusable file, and its document class
(``key``, ``to_dict()``, ``from_dict(data, key=)``). The Redis store of the same documents, for processes that
share no disk, is :class:`mediacrawler.distributed.docstore.RedisDocumentStore`;
:func:`document_store_from_settings` picks one by a backend setting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from mediacrawler.checkpoints.model import check_key
from mediacrawler.contracts import backend_class
from mediacrawler.distributed.docstore import DocumentCodec
from scrapy.settings import Settings

from mediacrawler.config import setting
from mediacrawler.fsutil import TooLarge, fsync_dir, move_aside, read_bounded, write_atomic

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings


class Document(Protocol):
    key: str

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, data: Any, *, key: str) -> Document: ...


D = TypeVar("D", bound=Document)


class DocumentStore(Protocol[D]):
    """Where documents live (the shape of the checkpoint stores): the file store below, or the Redis one."""

    def location(self, key: str) -> str: ...

    def load(self, key: str) -> D | None: ...

    def save(self, document: D) -> None: ...

    def update(self, key: str, change: Callable[[D | None], D | None]) -> D | None: ...

    def delete(self, key: str) -> bool: ...

    def quarantine(self, key: str) -> str | None: ...

    def set_aside(self) -> list[tuple[str, str]]: ...

    def keys(self) -> list[str]: ...


class FileDocumentStore(DocumentCodec[D]):
    """Documents as ``<directory>/<key>.json``; ``from_settings``: ``CHECKPOINT_DIR/<subdir>``."""

    suffix = ".json"
    subdir: ClassVar[str]

    def __init__(self, directory: Path | str, *, max_bytes: int | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes: int = max_bytes if max_bytes is not None else setting(Settings(), "STATE_FILE_MAX_BYTES")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(Path(setting(settings, "CHECKPOINT_DIR")) / cls.subdir,
                   max_bytes=setting(settings, "STATE_FILE_MAX_BYTES"))

    def path(self, key: str) -> Path:
        return self.directory / f"{check_key(key)}{self.suffix}"

    def location(self, key: str) -> str:
        return str(self.path(key))

    def load(self, key: str) -> D | None:
        try:
            raw = read_bounded(self.path(key), self.max_bytes)  # never read whole: STATE_FILE_MAX_BYTES
        except FileNotFoundError:
            return None
        except TooLarge:
            raise self.corrupt(f"larger than {self.max_bytes} bytes (STATE_FILE_MAX_BYTES)") from None
        except OSError as e:
            raise self.corrupt(f"unreadable: {e}") from None
        return self.decode(raw, key=key)

    def save(self, document: D) -> None:
        write_atomic(self.path(document.key), self.encode(document, indent=1) + b"\n")

    def update(self, key: str, change: Callable[[D | None], D | None]) -> D | None:
        """Write ``change(current)`` in place of the document (``None``: delete it); an unusable document reads as
        ``None``. Returns what was written. Not atomic across processes (the Redis store's is): a job's files
        have one process at a time."""
        try:
            current = self.load(key)
        except self.corrupt:
            current = None
        new = change(current)
        if new is None:
            self.delete(key)
        else:
            self.save(new)
        return new

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        fsync_dir(self.directory)
        return True

    def quarantine(self, key: str) -> str | None:
        """Move a damaged document aside (``<key>.json.corrupt``, numbered if taken), as a damaged checkpoint is;
        the new path, or None when there was none."""
        moved = move_aside(self.path(key))
        return None if moved is None else str(moved)

    def set_aside(self) -> list[tuple[str, str]]:
        """``(key, location)`` of every document :meth:`quarantine` moved aside and nobody has deleted yet."""
        if not self.directory.is_dir():
            return []
        found = (p for p in self.directory.glob(f"*{self.suffix}.corrupt*") if p.is_file())
        return sorted((p.name.partition(self.suffix)[0], str(p)) for p in found)

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name[: -len(self.suffix)] for p in self.directory.glob(f"*{self.suffix}"))


def quarantine_document(store: DocumentStore[Any], key: str) -> str:
    """Move the damaged document of *key* aside (kept for inspection, out of the job's way); where it went, for the
    one WARNING that reports it. A store out of reach leaves it in place (``update`` reads it as absent)."""
    try:
        return store.quarantine(key) or "nowhere (it is gone already)"
    except OSError as e:
        return f"nowhere ({e})"


def document_store_from_settings(settings: BaseSettings, backend: str, backends: dict[str, str]) -> Any:
    """The store the backend setting ``backend`` names: a short name of ``backends`` (``file``, ``redis``) or the
    import path of a store class with ``from_settings(settings)``. Empty: the kind of ``CHECKPOINT_BACKEND``
    (``redis`` when the checkpoints are in Redis, as for workers; else ``file``), so these documents are kept
    with the checkpoints. NotConfigured when it names nothing usable."""
    name = str(setting(settings, backend) or "")
    if not name:
        name = "redis" if str(setting(settings, "CHECKPOINT_BACKEND") or "").lower() == "redis" else "file"
    return backend_class(backend, name, backends).from_settings(settings)
