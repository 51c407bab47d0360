"""Where checkpoints live: the store protocol, the file store, the backend lookup, and the scan of a feed's tail
for records written after the last checkpoint (docs/architecture.md, "Checkpoints")."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from scrapy.settings import Settings

from mediacrawler.checkpoints.model import KEY_RE, Checkpoint, CheckpointCorrupt, check_key
from mediacrawler.config import setting
from mediacrawler.contracts import backend_class
from mediacrawler.feeds import FeedMark, repair_torn_tail
from mediacrawler.fsutil import (STATE_MAX_DEPTH, TooLarge, loads_bounded, move_aside, read_bounded,
                                 remove_stray_temps, unlink_synced, write_atomic)

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: Short names accepted by ``CHECKPOINT_BACKEND``.
CHECKPOINT_BACKENDS: dict[str, str] = {
    "file": "mediacrawler.checkpoints.store.FileCheckpointStore",
    "redis": "mediacrawler.distributed.checkpoint.RedisCheckpointStore",
}


def write_json_atomic(path: Path | str, data: Any) -> None:
    """Publish *data* as JSON at *path* with :func:`mediacrawler.fsutil.write_atomic` (temp, fsync, rename, fsync
    of the directory): a reader sees the previous complete file or the new one, never a mix."""
    write_atomic(path, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8") + b"\n")


class CheckpointStore(Protocol):
    """Where checkpoints live. Every method takes or returns whole checkpoints; ``save`` is atomic."""

    def location(self, key: str) -> str: ...

    def load(self, key: str) -> Checkpoint | None: ...

    def save(self, checkpoint: Checkpoint) -> None: ...

    def delete(self, key: str) -> bool: ...

    def quarantine(self, key: str) -> str | None: ...

    def keys(self) -> list[str]: ...


class FileCheckpointStore:
    """Checkpoints as ``<directory>/<key>.json`` files (``CHECKPOINT_BACKEND = "file"``)."""

    suffix = ".json"

    def __init__(self, directory: Path | str, *, max_bytes: int | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes: int = max_bytes if max_bytes is not None else setting(Settings(), "STATE_FILE_MAX_BYTES")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(setting(settings, "CHECKPOINT_DIR"), max_bytes=setting(settings, "STATE_FILE_MAX_BYTES"))

    def path(self, key: str) -> Path:
        return self.directory / f"{check_key(key)}{self.suffix}"

    def location(self, key: str) -> str:
        return str(self.path(key))

    def load(self, key: str) -> Checkpoint | None:
        """The checkpoint of *key*, ``None`` when there is none; CheckpointCorrupt when it cannot be used (also
        when it is larger than ``STATE_FILE_MAX_BYTES`` or nests deeper than a checkpoint can: never read whole,
        never a RecursionError)."""
        path = self.path(key)
        try:
            raw = read_bounded(path, self.max_bytes)
        except FileNotFoundError:
            return None
        except TooLarge:
            raise CheckpointCorrupt(f"larger than {self.max_bytes} bytes (STATE_FILE_MAX_BYTES)") from None
        except OSError as e:
            raise CheckpointCorrupt(f"unreadable: {e}") from None
        try:
            data = loads_bounded(raw.decode("utf-8"), max_depth=STATE_MAX_DEPTH)
        except TooLarge as e:
            raise CheckpointCorrupt(str(e)) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointCorrupt(f"not JSON ({len(raw)} bytes): {e}") from None
        return Checkpoint.from_dict(data, key=key)

    def save(self, checkpoint: Checkpoint) -> None:
        write_json_atomic(self.path(checkpoint.key), checkpoint.to_dict())

    def delete(self, key: str) -> bool:
        return unlink_synced(self.path(key))

    def quarantine(self, key: str) -> str | None:
        """Move an unusable checkpoint aside (``<key>.json.corrupt``, numbered if taken); returns the new name."""
        moved = move_aside(self.path(key))
        return None if moved is None else str(moved)

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        names = (p.name[: -len(self.suffix)] for p in self.directory.glob(f"*{self.suffix}"))
        return sorted(key for key in names if KEY_RE.match(key))

    def remove_stale_temps(self, key: str) -> None:
        """Delete temp files a killed writer of *key* left behind (they are never read)."""
        remove_stray_temps(self.path(key))


def store_from_settings(settings: BaseSettings) -> CheckpointStore:
    """The store ``CHECKPOINT_BACKEND`` names; NotConfigured when it names nothing usable."""
    name = str(setting(settings, "CHECKPOINT_BACKEND"))
    cls = backend_class("CHECKPOINT_BACKEND", name, CHECKPOINT_BACKENDS)
    store: CheckpointStore = cls.from_settings(settings)
    return store


def scan_feed_tail(mark: FeedMark, key: str, *, comments: set[str] | None = None) -> dict[int, set[str]]:
    """Post ids of job *key* in a JSON Lines feed after ``mark.size``: records exported after the last checkpoint.

    A hard kill can come after records reached the file and before the checkpoint that counts them; those records
    are stored all the same and must not be emitted again. A torn last line is cut first (it was never complete).
    Comments of the job (records with a ``comment_id``) go to ``comments`` when given, never among the posts.
    A file shorter than the mark was rewritten since; it is read whole.
    """
    path = Path(mark.path)
    found: dict[int, set[str]] = {}
    try:
        repair_torn_tail(path)
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(mark.size if mark.size <= size else 0)
            for line in f:
                try:
                    record = json.loads(line)
                    source = record.get("source") or {}
                    if source.get("job") != key or not record.get("post_id"):
                        continue
                    if record.get("comment_id"):
                        if comments is not None:
                            comments.add(str(record["comment_id"]))
                        continue
                    page = int(source.get("page") or 0)
                except (ValueError, TypeError, AttributeError):
                    continue  # not one of our records
                found.setdefault(page, set()).add(str(record["post_id"]))
    except FileNotFoundError:
        return {}
    except OSError as e:
        logger.warning("checkpoint: cannot read feed %s to recognise stored posts: %s", path, e)
    return found
