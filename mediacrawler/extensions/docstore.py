"""One JSON document per job key in a directory, written atomically: the file store of the high-water marks
(:mod:`.marks`) and the media retry sets (:mod:`.retries`), beside the checkpoints (docs/operations.md, "Incremental
sync and retries").

A subclass names its sub-directory of CHECKPOINT_DIR, the exception for an unusable file, and how a decoded document
becomes its object (:meth:`FileDocumentStore.parse`); documents have ``key`` and ``to_dict()``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from mediacrawler.checkpoints.model import check_key
from mediacrawler.fsutil import fsync_dir, write_atomic

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings


class Document(Protocol):
    key: str

    def to_dict(self) -> dict[str, Any]: ...


D = TypeVar("D", bound=Document)


class FileDocumentStore(Generic[D]):
    """Documents as ``<directory>/<key>.json``; ``from_settings``: ``CHECKPOINT_DIR/<subdir>``."""

    suffix = ".json"
    subdir: ClassVar[str]
    #: Raised by :meth:`load` for a file that exists but cannot be used.
    corrupt: ClassVar[type[Exception]]

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(Path(settings.get("CHECKPOINT_DIR") or "checkpoints") / cls.subdir)

    def parse(self, data: Any, *, key: str) -> D:
        """The document of decoded JSON ``data`` (raises :attr:`corrupt` when it is not one)."""
        raise NotImplementedError

    def path(self, key: str) -> Path:
        return self.directory / f"{check_key(key)}{self.suffix}"

    def location(self, key: str) -> str:
        return str(self.path(key))

    def load(self, key: str) -> D | None:
        try:
            raw = self.path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self.corrupt(f"unreadable: {e}") from None
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise self.corrupt(f"not JSON: {e}") from None
        return self.parse(data, key=key)

    def save(self, document: D) -> None:
        write_atomic(self.path(document.key),
                     json.dumps(document.to_dict(), ensure_ascii=False, indent=1).encode() + b"\n")

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        fsync_dir(self.directory)
        return True

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name[: -len(self.suffix)] for p in self.directory.glob(f"*{self.suffix}"))
