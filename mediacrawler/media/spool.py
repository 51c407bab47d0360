"""Download spools: where bodies fetched in pieces wait until complete (docs/media.md, "Large files and video").
Their names, lock, ledger (one JSON envelope for Range segments and video fragments) and its background saver,
the sweep of stale spools, and the one Content-Range parser of the project (:func:`parse_content_range`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from mediacrawler.fsutil import remove_stray_temps, write_atomic

logger = logging.getLogger(__name__)

#: Bumped when the meaning of a ledger field changes; other versions are discarded, never guessed at.
LEDGER_VERSION = 1
LOCK_NAME = ".lock"
# A ledger is a few KB (segment numbers, fragment sizes); anything much bigger is not ours.
_MAX_LEDGER_BYTES = 16 * 1024 * 1024
_CONTENT_RANGE_RE = re.compile(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", re.IGNORECASE)
INIT = -1  #: the fragment index of a track's init section
T = TypeVar("T")


def parse_content_range(value: str | bytes | None) -> tuple[int, int, int | None] | None:
    """``"bytes 0-99/1000"`` → ``(0, 99, 1000)`` (end inclusive; total ``None`` for ``*``); ``None`` when absent
    or not a satisfied byte range (``bytes */1000`` included)."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    m = _CONTENT_RANGE_RE.fullmatch(value) if value else None
    if m is None:
        return None
    start, end = int(m.group(1)), int(m.group(2))
    total = None if m.group(3) == "*" else int(m.group(3))
    if end < start or (total is not None and end >= total):
        return None
    return start, end, total


# --- names and locks -----------------------------------------------------------------------------------------
def _hashed(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def spool_path(*, spool_dir: str | os.PathLike[str], key: str) -> Path:
    """The spool file of an asset: ``<spool_dir>/<sha256 of key>.part`` (no remote string in the name)."""
    return Path(spool_dir) / f"{_hashed(key)}.part"


def video_dir_for(spool_dir: str | os.PathLike[str], *, key: str) -> Path:
    """The fragment directory of a video: ``<spool_dir>/<sha256 of key>.video``."""
    return Path(spool_dir) / f"{_hashed(key)}.video"


def spool_dir_for(files_store: str | os.PathLike[str]) -> Path:
    """``<FILES_STORE>/spool`` for a local FILES_STORE value (``file://`` URIs included)."""
    base = str(files_store)
    if "://" in base:
        base = base.split("://", 1)[1]
    return Path(base).absolute() / "spool"


def ledger_path(spool: str | os.PathLike[str]) -> Path:
    """The ledger of a spool file: ``x.part`` → ``x.part.json``."""
    path = Path(spool)
    return path.with_name(path.name + ".json")


def lock_path(path: Path) -> int | None:
    """Open (create, never truncate) ``path`` and take its exclusive ``flock``; the fd, or ``None`` when another
    holder has it; tried again when a holder moved or deleted the file meanwhile (an orphan inode)."""
    for _ in range(3):  # bounded: the path replaced under us twice in a row is given up on
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            opened, current = os.fstat(fd), os.stat(path)
            if (opened.st_dev, opened.st_ino) == (current.st_dev, current.st_ino):
                return fd
        except (BlockingIOError, FileNotFoundError):
            pass
        os.close(fd)
    return None


# --- ledgers ---------------------------------------------------------------------------------------------------
def plan_segments(*, total: int, first: int, segment_size: int) -> list[tuple[int, int]]:
    """``[0, first)`` and then ``segment_size`` bytes at a time, as ``(start, end)`` pairs, ``end`` exclusive."""
    if total < 0 or first < 1 or segment_size < 1:
        raise ValueError(f"bad segment layout: total={total} first={first} segment_size={segment_size}")
    starts = [0, *range(first, total, segment_size)] if total else []
    return [(s, min(total, first if i == 0 else s + segment_size)) for i, s in enumerate(starts)]


class LedgerError(ValueError):
    """A ledger file that cannot be trusted (unparseable, wrong version, inconsistent)."""


def _field(data: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise LedgerError(f"field {name!r} is not {kind}")
    return value


@dataclass(slots=True)
class Ledger:
    """What the Range spool of one asset holds: its remote version and the segments in place."""

    key: str
    url: str
    total: int
    first: int
    segment_size: int
    etag: str | None = None
    last_modified: str | None = None
    done: set[int] = field(default_factory=set)

    def segments(self) -> list[tuple[int, int]]:
        return plan_segments(total=self.total, first=self.first, segment_size=self.segment_size)

    def missing(self) -> list[int]:
        return [i for i in range(len(self.segments())) if i not in self.done]

    def done_bytes(self) -> int:
        return sum(end - start for i, (start, end) in enumerate(self.segments()) if i in self.done)

    def contiguous_end(self) -> int:
        """End of the run of done segments from byte 0 (what can be hashed already)."""
        end = 0
        for i, (_start, stop) in enumerate(self.segments()):
            if i not in self.done:
                break
            end = stop
        return end

    @property
    def if_range(self) -> str | None:
        """A strong ETag, else Last-Modified (RFC 9110 §13.1.5 forbids weak ETags in If-Range)."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified or None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "done": sorted(self.done)}

    @classmethod
    def from_json(cls, data: Any) -> Ledger:
        _check_version(data)
        json_types = {"str": str, "int": int, "str | None": (str, type(None)), "set[int]": list}
        try:
            ledger = cls(**{f.name: _field(data, f.name, json_types[f.type]) for f in fields(cls)})
            ledger.done = set(ledger.done)
            count = len(ledger.segments())
        except (TypeError, ValueError) as exc:
            raise LedgerError(str(exc)) from None
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in ledger.done):
            raise LedgerError("segment numbers outside the layout")
        return ledger


@dataclass(slots=True)
class FragmentLedger:
    """Which fragments of a video are on disk: ``done[track][index] = size``; ``fingerprint`` of the selection."""

    key: str
    fingerprint: str
    done: dict[str, dict[int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "fingerprint": self.fingerprint,
                "done": {t: {str(i): s for i, s in sorted(d.items())} for t, d in sorted(self.done.items())}}

    @classmethod
    def from_json(cls, data: Any) -> FragmentLedger:
        _check_version(data)
        done = _field(data, "done", dict)
        try:
            parsed = {str(t): {int(i): int(s) for i, s in entries.items()} for t, entries in done.items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise LedgerError(f"bad fragment entries: {exc}") from None
        if any(s <= 0 or i < INIT for d in parsed.values() for i, s in d.items()):
            raise LedgerError("bad fragment index or size")
        return cls(key=_field(data, "key", str), fingerprint=_field(data, "fingerprint", str), done=parsed)


def _check_version(data: Any) -> None:
    if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
        raise LedgerError(f"not a version {LEDGER_VERSION} ledger")


def save_ledger(path: str | os.PathLike[str], ledger: Ledger | FragmentLedger, *, fsync: bool = True) -> None:
    """(Store executor.) Write a ledger atomically (temp + fsync + rename + directory fsync)."""
    data = {"version": LEDGER_VERSION, **ledger.to_json(), "updated": time.time()}
    write_atomic(path, json.dumps(data, separators=(",", ":")).encode("utf-8"), fsync=fsync)


def load_ledger(path: str | os.PathLike[str], *, key: str,
                parse: Callable[[Any], T] = Ledger.from_json) -> T | None:  # type: ignore[assignment]
    """The ledger at ``path`` when it exists, parses (``parse``) and belongs to ``key``; ``None`` otherwise (a
    warning says why; the caller starts over)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_LEDGER_BYTES + 1)
    except FileNotFoundError:
        return None
    try:
        if len(raw) > _MAX_LEDGER_BYTES:
            raise LedgerError("too large")
        ledger = parse(json.loads(raw))
    except (ValueError, TypeError) as exc:  # LedgerError and JSONDecodeError are ValueErrors
        logger.warning("Ignoring unusable ledger %s (%s)", path, exc)
        return None
    owner = getattr(ledger, "key", None)
    if owner != key:
        logger.warning("Ignoring ledger %s: it belongs to %r, not %r", path, owner, key)
        return None
    return ledger


#: ``run(fn, *args)``: a blocking call on the store's executor, awaited (ContentAddressedStore.run).
Runner = Callable[..., Awaitable[Any]]


class CoalescingSaver:
    """Saves a ledger in the background, one save in flight, the next taking the newest state (``snapshot()`` on
    the loop, ``save`` through ``run``, the store's executor); :meth:`saved` waits for the generation
    :meth:`request` returned."""

    def __init__(self, *, snapshot: Callable[[], Any], save: Callable[[Any], None], run: Runner) -> None:
        self._snapshot = snapshot
        self._save = save
        self._run_blocking = run
        self.requested = self.done = 0
        self._running = False
        self._error: BaseException | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps only weak references to tasks

    def request(self) -> int:
        self.requested += 1
        if not self._running:
            self._running = True
            self._task = asyncio.get_running_loop().create_task(self._run())  # never fails: errors go to waiters
        return self.requested

    async def saved(self, generation: int) -> None:
        """Wait until the state of ``generation`` is saved (raises the error of a failed save)."""
        if self.done >= generation:
            return
        if self._error is not None and not self._running:
            raise self._error
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((generation, waiter))
        await waiter

    async def flush(self) -> None:
        """Wait until the newest state is saved (raises a save error)."""
        await self.saved(self.requested)

    async def _run(self) -> None:
        try:
            while self.done < self.requested:  # bounded: each pass saves every request made before it
                generation = self.requested  # read with the snapshot, on the loop
                try:
                    await self._run_blocking(self._save, self._snapshot())
                except BaseException as exc:
                    self._error = exc
                    break
                self._error, self.done = None, generation
                self._wake()
        finally:
            self._running = False
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for generation, waiter in waiters:
            if waiter.done():  # its coroutine was cancelled
                continue
            if self.done >= generation:
                waiter.set_result(None)
            elif self._error is not None:
                waiter.set_exception(self._error)
            else:
                self._waiters.append((generation, waiter))


async def gather_all(coros: Iterable[Awaitable[None]]) -> None:
    """Run coroutines concurrently until all have ended, then raise the first error."""
    for outcome in await asyncio.gather(*coros, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome


async def drain(items: Sequence[T], work: Callable[[T], Awaitable[None]], *, workers: int) -> list[BaseException]:
    """``work(item)`` for ``items`` in order, ``workers`` at a time; once one fails no other starts. Returns the
    errors, the first failure first."""
    queue = list(reversed(items))
    errors: list[BaseException] = []

    async def worker() -> None:
        while queue and not errors:  # bounded by the queue: every pass pops one item
            item = queue.pop()
            try:
                await work(item)
            except BaseException as exc:
                errors.append(exc)

    await gather_all(worker() for _ in range(min(workers, len(items))))
    return errors


# --- cleaning up -----------------------------------------------------------------------------------------------
def remove_spool(spool: str | os.PathLike[str]) -> None:
    """Delete a spool file and its ledger (the ledger first: a spool without a ledger is never resumed)."""
    for path in (ledger_path(spool), Path(spool)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def sweep_spool(spool_dir: str | os.PathLike[str], *, older_than: float) -> int:
    """Delete what no download will come back for, untouched for ``older_than`` seconds: Range spools with their
    ledgers, video directories, completed spools (``*.done``) a crash kept from being published, and stray temp
    files. Locked spools and directories (in use) are skipped. Returns how many went."""
    root = Path(spool_dir)
    if not root.is_dir():
        return 0
    cutoff = time.time() - older_than
    removed = 0
    for path in [*root.glob("*.part.*.done"), *root.glob(".*.tmp")]:
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
    for path in [*root.glob("*.part"), *root.glob("*.video")]:
        video = path.suffix == ".video"
        try:  # before the lock file may be created
            touched = (path if video else ledger_path(path)).stat().st_mtime
        except FileNotFoundError:
            touched = 0.0
        fd = lock_path(path / LOCK_NAME) if video else lock_path(path)
        if fd is None:
            continue
        try:
            newest = max(os.fstat(fd).st_mtime if not video else 0.0, touched)
            if newest < cutoff:
                if video:
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    remove_spool(path)
                    remove_stray_temps(ledger_path(path))
                removed += 1
        finally:
            os.close(fd)
    if removed:
        logger.info("Swept %d stale download spools from %s", removed, root)
    return removed
