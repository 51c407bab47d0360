"""The ledger of a segmented download: what a ``.part`` spool file holds, saved beside it as ``.part.json``.

A large asset is fetched as HTTP Range segments written at their offsets into a spool file
(``FILES_STORE/spool/<sha256 of the asset key>.part``). The ledger next to it records which asset the spool belongs
to, which remote version it holds (total size, ETag, Last-Modified) and which segments are in, so that a new run
after a crash or a stop fetches only the missing segments (:mod:`mediacrawler.media.segments`).

The segment layout is fixed by three numbers kept in the ledger (``total``, ``first``, ``segment_size``): the
first segment is ``[0, first)`` (the probe request), the others are ``segment_size`` bytes each from ``first``
on. A later run with other settings keeps using the recorded layout, so segment numbers stay meaningful.

Saved by temp file + fsync + rename (+ fsync of the directory): a crash leaves the old ledger or the new one,
never half of one. A ledger that does not parse, or belongs to another key or layout version, is not trusted: the
spool starts over.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mediacrawler.fsutil import write_atomic

logger = logging.getLogger(__name__)

#: Bumped when the meaning of a field changes; other versions are discarded, never guessed at.
LEDGER_VERSION = 1
#: Suffix of a ledger file, appended to the spool file name.
LEDGER_SUFFIX = ".json"
# A ledger is a few KB even for 64 GiB files (segment numbers); anything bigger is not ours.
_MAX_LEDGER_BYTES = 4 * 1024 * 1024
T = TypeVar("T")


class LedgerError(ValueError):
    """A ledger file that cannot be trusted (unparseable, wrong version, inconsistent)."""


def plan_segments(*, total: int, first: int, segment_size: int) -> list[tuple[int, int]]:
    """The segments of a file of ``total`` bytes as ``(start, end)`` pairs, ``end`` exclusive.

    ``[0, first)`` and then ``segment_size`` bytes at a time; the last one may be shorter. An empty file has no
    segments.
    """
    if total < 0 or first < 1 or segment_size < 1:
        raise ValueError(f"bad segment layout: total={total} first={first} segment_size={segment_size}")
    if total == 0:
        return []
    segments = [(0, min(first, total))]
    start = segments[0][1]
    while start < total:
        end = min(start + segment_size, total)
        segments.append((start, end))
        start = end
    return segments


@dataclass(slots=True)
class Ledger:
    """What the spool of one asset holds (see the module docstring)."""

    key: str
    url: str
    total: int
    first: int
    segment_size: int
    etag: str | None = None
    last_modified: str | None = None
    done: set[int] = field(default_factory=set)
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    def segments(self) -> list[tuple[int, int]]:
        """The segment layout of this ledger (:func:`plan_segments`)."""
        return plan_segments(total=self.total, first=self.first, segment_size=self.segment_size)

    def missing(self) -> list[int]:
        """Numbers of the segments not yet in the spool, in file order."""
        return [i for i in range(len(self.segments())) if i not in self.done]

    def done_bytes(self) -> int:
        """Bytes of the spool known to be in place."""
        segments = self.segments()
        return sum(segments[i][1] - segments[i][0] for i in self.done)

    def contiguous_end(self) -> int:
        """End offset of the longest run of done segments from byte 0 (what can be hashed already)."""
        end = 0
        for i, (_start, stop) in enumerate(self.segments()):
            if i not in self.done:
                break
            end = stop
        return end

    @property
    def if_range(self) -> str | None:
        """The validator for ``If-Range``: a strong ETag, else Last-Modified, else ``None`` (RFC 9110 §13.1.5
        forbids weak ETags there)."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified or None

    def to_json(self) -> dict[str, Any]:
        """Plain data for the ``.part.json`` file (done segments as a sorted list)."""
        return {
            "version": LEDGER_VERSION,
            "key": self.key,
            "url": self.url,
            "total": self.total,
            "first": self.first,
            "segment_size": self.segment_size,
            "etag": self.etag,
            "last_modified": self.last_modified,
            "done": sorted(self.done),
            "created": self.created,
            "updated": self.updated,
        }

    @classmethod
    def from_json(cls, data: Any) -> Ledger:
        """Parse what :meth:`to_json` wrote; :class:`LedgerError` on anything else."""
        if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
            raise LedgerError(f"not a version {LEDGER_VERSION} ledger")
        try:
            ledger = cls(
                key=_typed(data, "key", str),
                url=_typed(data, "url", str),
                total=_typed(data, "total", int),
                first=_typed(data, "first", int),
                segment_size=_typed(data, "segment_size", int),
                etag=_optional_str(data, "etag"),
                last_modified=_optional_str(data, "last_modified"),
                done=set(_typed(data, "done", list)),
                created=float(data.get("created") or 0.0),
                updated=float(data.get("updated") or 0.0),
            )
            count = len(ledger.segments())
        except (TypeError, ValueError) as exc:
            raise LedgerError(str(exc)) from None
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in ledger.done):
            raise LedgerError("segment numbers outside the layout")
        return ledger


def _typed(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise LedgerError(f"field {name!r} is not {kind.__name__}")
    return value


def _optional_str(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise LedgerError(f"field {name!r} is not a string")
    return value


def ledger_path(spool: str | os.PathLike[str]) -> Path:
    """The ledger file of a spool file: ``<spool>.json`` (``x.part`` → ``x.part.json``)."""
    path = Path(spool)
    return path.with_name(path.name + LEDGER_SUFFIX)


def read_ledger_json(path: str | os.PathLike[str], *, max_bytes: int = _MAX_LEDGER_BYTES) -> Any:
    """The decoded JSON of a ledger file; ``None`` when absent; ValueError when too large or not JSON (a ledger is
    a few KB even for a 64 GiB file: anything bigger is not ours)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        return None
    if len(raw) > max_bytes:
        raise ValueError("too large")
    return json.loads(raw)


def load_owned_ledger(path: str | os.PathLike[str], *, key: str, parse: Callable[[Any], T], what: str,
                      max_bytes: int = _MAX_LEDGER_BYTES) -> T | None:
    """The ledger at ``path`` (``parse`` builds it from the JSON) when it exists, parses and belongs to ``key``;
    ``None`` when absent or not trustworthy (a warning says why; the caller then starts over). Shared by the
    download ledger here and the video fragment ledger."""
    try:
        raw = read_ledger_json(path, max_bytes=max_bytes)
        if raw is None:
            return None
        ledger = parse(raw)
    except (ValueError, TypeError) as exc:  # LedgerError is a ValueError
        logger.warning("Ignoring unusable %s %s (%s)", what, path, exc)
        return None
    owner = getattr(ledger, "key", None)
    if owner != key:
        logger.warning("Ignoring %s %s: it belongs to %r, not %r", what, path, owner, key)
        return None
    return ledger


def load_ledger(path: str | os.PathLike[str], *, key: str) -> Ledger | None:
    """The download ledger at ``path`` if it exists and belongs to ``key`` (:func:`load_owned_ledger`)."""
    return load_owned_ledger(path, key=key, parse=Ledger.from_json, what="download ledger")


def save_ledger(path: str | os.PathLike[str], ledger: Ledger, *, fsync: bool = True) -> None:
    """Write ``ledger`` to ``path`` atomically (:func:`mediacrawler.fsutil.write_atomic`; with ``fsync`` off a
    crash of the machine, not of the process, may lose the newest save)."""
    ledger.updated = time.time()
    write_atomic(path, json.dumps(ledger.to_json(), separators=(",", ":")).encode("utf-8"), fsync=fsync)


def remove_spool(spool: str | os.PathLike[str]) -> None:
    """Delete a spool file and its ledger (the ledger first: a spool without a ledger is never resumed)."""
    for path in (ledger_path(spool), Path(spool)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
