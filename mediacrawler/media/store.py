"""The content-addressed media store: every object once, named by the SHA-256 of its bytes, under FILES_STORE as
``objects/<ab>/<cd>/<sha256><ext>`` (ext sniffed, never remote), with ``tmp/`` and ``quarantine/`` beside it.
Layout, publishing order and crash safety: docs/media.md, "Layout" and "Crash safety".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import hashlib
import itertools
import logging
import os
import re
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from mediacrawler.media.sniff import DOCUMENT_EXTENSIONS, MEDIA_EXTENSIONS, SNIFF_BYTES, sniff

logger = logging.getLogger(__name__)

OBJECTS_DIR = "objects"
TMP_DIR = "tmp"
QUARANTINE_DIR = "quarantine"

T = TypeVar("T")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_RELPATH_RE = re.compile(r"objects/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})((?:\.[a-z0-9]{1,5})?)")


class StoreError(Exception):
    """A path or object that the store refuses (outside the grammar, outside the root)."""


@dataclass(frozen=True, slots=True)
class Persisted:
    """Bytes in the store; ``created`` is False when the object was already there (content deduplication)."""

    sha256: str
    relpath: str
    size: int
    created: bool


def credit_first_twin(outcomes: list[Persisted | BaseException]) -> list[Persisted | BaseException]:
    """Report identical bodies of one group in order: the first ``created``, the rest not (which parallel link won
    is chance; the records must not depend on it). Rewrites ``outcomes`` in place."""
    first: dict[str, int] = {}
    for i, outcome in enumerate(outcomes):
        if not isinstance(outcome, Persisted):
            continue
        j = first.setdefault(outcome.relpath, i)
        if j != i and outcome.created:
            twin = outcomes[j]
            assert isinstance(twin, Persisted)
            outcomes[j] = dataclasses.replace(twin, created=True)
            outcomes[i] = dataclasses.replace(outcome, created=False)
    return outcomes


def object_relpath(*, sha256: str, ext: str) -> str:
    """``objects/<ab>/<cd>/<sha256><ext>``; :class:`StoreError` unless ``sha256`` is 64 lowercase hex digits and
    ``ext`` empty or a sniffed media extension (nothing else ever becomes a path)."""
    if not _SHA256_RE.fullmatch(sha256):
        raise StoreError(f"not a sha256 hex digest: {sha256!r}")
    if ext and ext not in MEDIA_EXTENSIONS | DOCUMENT_EXTENSIONS:
        raise StoreError(f"not an object extension: {ext!r}")
    return f"{OBJECTS_DIR}/{sha256[:2]}/{sha256[2:4]}/{sha256}{ext}"


def parse_object_relpath(relpath: str) -> tuple[str, str]:
    """``(sha256, ext)`` of an object path; :class:`StoreError` unless it is exactly what :func:`object_relpath`
    makes (``../``, absolute paths and encoded tricks never pass)."""
    m = _RELPATH_RE.fullmatch(relpath)
    if (not m or m.group(1) != m.group(3)[:2] or m.group(2) != m.group(3)[2:4]
            or (m.group(4) and m.group(4) not in MEDIA_EXTENSIONS | DOCUMENT_EXTENSIONS)):
        raise StoreError(f"not an object path: {relpath!r}")
    return m.group(3), m.group(4)


def hash_file(path: str | os.PathLike[str]) -> tuple[str, int]:
    """Stream a file through SHA-256; return ``(hex digest, size)``."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest(), f.tell()


def _fsync_dir(path: str | os.PathLike[str]) -> None:
    # A rename or link is durable only once the directory holding the new entry is synced.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: fdatasync where the platform has it (file data and size, not the mtime), fsync elsewhere.
_datasync = getattr(os, "fdatasync", os.fsync)


@functools.cache
def libc_syncfs() -> Callable[[int], None] | None:
    """``syncfs(2)`` (``os`` has none) where it reports writeback errors, Linux >= 5.8; else None."""
    release = re.match(r"(\d+)\.(\d+)", os.uname().release) if sys.platform == "linux" else None
    if release is None or (int(release.group(1)), int(release.group(2))) < (5, 8):
        return None
    import ctypes  # only here: the store is imported by every crawl

    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int

    def syncfs(fd: int) -> None:
        # ctypes releases the GIL around the call.
        if fn(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")

    return syncfs


#: Filesystems whose ``syncfs`` makes data and names as durable as ``fsync`` does (journal committed, device cache
#: flushed); on any other (overlay, network, FUSE) the store syncs each file.
SYNCFS_FILESYSTEMS = frozenset({"ext4", "xfs", "btrfs", "tmpfs"})


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem holding ``path`` (Linux: the longest mount point above it in
    ``/proc/self/mountinfo``), or None when unknown."""
    target = os.path.realpath(path)
    best: tuple[int, str] | None = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields, _, rest = line.partition(" - ")
                parts = fields.split()
                if len(parts) < 5 or not rest:
                    continue
                # Spaces and the like in a mount point are octal escapes (\040).
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4])
                if (target == point or target.startswith(point.rstrip("/") + "/")) and (
                        best is None or len(point) >= best[0]):
                    best = (len(point), rest.split()[0])
    except OSError:
        return None
    return best[1] if best else None


class SyncGroup:
    """What one :meth:`ContentAddressedStore.publish` syncs with: ``syncfs(2)`` on a descriptor of the store's
    filesystem opened *before* the group's bodies are written (``syncfs`` reports the writeback errors since the
    descriptor was opened), or per-file syncs (``fd`` None: no syncfs here, or MEDIA_FSYNC off)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
#: Threads of the store's executor, the one pool of media/ for file work (checks, hashing, writes, syncs, links,
#: remux): one group's files, then its directories, are synced in parallel on them, since journaling filesystems
#: commit concurrent syncs together (ext4, benchmark VM: ~460 us per file synced alone, ~90 us with 8 in flight).
SYNC_THREADS = 8


@dataclass(slots=True, kw_only=True)
class Staged:
    """A body written to a ``tmp/*.part`` file by :meth:`ContentAddressedStore.stage`, open (``fd``), not synced;
    :meth:`ContentAddressedStore.publish` makes it an object. ``new_dirs``: directories created for it."""

    digest: str
    relpath: str
    size: int
    final: str
    tmp: str
    fd: int
    new_dirs: tuple[str, ...]


class ContentAddressedStore:
    """Content-addressed objects on the local filesystem under ``basedir``. Also Scrapy's ``FilesStoreProtocol``
    (``persist_file``/``stat_file``), so FilesPipeline builds it from FILES_STORE. ``fsync=False``: no syncs
    (throwaway stores only: a crash may then leave an empty or short file under ``objects/``)."""

    def __init__(self, basedir: str | os.PathLike[str], *, fsync: bool = True) -> None:
        base = str(basedir)
        if "://" in base:
            base = base.split("://", 1)[1]
        self.root: Path = Path(base).absolute()
        self.fsync = fsync
        self.objects_dir = self.root / OBJECTS_DIR
        self.tmp_dir = self.root / TMP_DIR
        self.quarantine_dir = self.root / QUARANTINE_DIR
        for d in (self.objects_dir, self.tmp_dir, self.quarantine_dir):
            d.mkdir(parents=True, exist_ok=True)
            # A symlink planted in the store (objects -> /etc) must not carry writes outside the root.
            if self.root.resolve() not in d.resolve().parents:
                raise StoreError(f"{d} resolves outside the store root ({d.resolve()})")
        self._checked_dirs: set[str] = set()
        self._root = str(self.root)
        self._tmp = str(self.tmp_dir)
        self._seq = itertools.count()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._pid = os.getpid()
        self._syncfs: bool | None = None  # whether groups are synced by syncfs (decided at the first group)

    def close(self) -> None:
        """Stop the executor's threads (started by the first file work), after the work queued; the store stays
        usable (the next file work starts them again)."""
        with self._executor_lock:
            pool, self._executor = self._executor, None
        if pool is not None:
            pool.shutdown(wait=True)

    # --- the executor --------------------------------------------------------------------------------------------
    @property
    def executor(self) -> ThreadPoolExecutor:
        """The store's :data:`SYNC_THREADS` threads: every blocking file operation of media/ runs on them, awaited
        from the reactor's asyncio loop through :meth:`run` (docs/media.md, "Concurrency")."""
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="media-store")
            return self._executor

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the store's executor, awaited on the running asyncio loop."""
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    # --- paths ----------------------------------------------------------------------------------------------
    def abspath(self, relpath: str) -> Path:
        """The absolute path of an object; ``relpath`` must be an object path (:func:`parse_object_relpath`)."""
        parse_object_relpath(relpath)
        return self.root.joinpath(*relpath.split("/"))

    def _object_dir_created(self, relpath: str) -> tuple[str, tuple[str, ...]]:
        """The absolute path of ``relpath`` with its two directory levels created (symlinks refused), and the
        directories this call created (their parents need a sync too)."""
        final = os.path.join(self._root, relpath)
        leaf = os.path.dirname(final)
        top = os.path.dirname(leaf)
        created: tuple[str, ...] = ()
        # One level at a time, refusing symlinks: a link planted at objects/ab must not even get a directory
        # created through it. The 256 top levels are checked once per process; a leaf is checked when it
        # already existed (mkdir of a leaf inside a checked top level creates a plain directory).
        for level in (top, leaf):
            if level is top and top in self._checked_dirs:
                continue
            try:
                os.mkdir(level)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(level).st_mode):
                    raise StoreError(f"{level} is not a plain directory inside the store") from None
            else:
                created += (level,)
            if level is top:
                self._checked_dirs.add(top)
        return final, created

    def _temp_path(self, digest: str) -> str:
        # Unique per process, thread and call: no random names, no retry loop (cheaper than mkstemp).
        name = f"{digest[:16]}.{self._pid}.{threading.get_ident()}.{next(self._seq)}.part"
        return os.path.join(self._tmp, name)

    # --- reading --------------------------------------------------------------------------------------------
    def stat(self, relpath: str) -> int | None:
        """Size of the object at ``relpath``, or ``None`` when it is absent or not a regular file."""
        try:
            st = os.lstat(self.abspath(relpath))
        except FileNotFoundError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def iter_objects(self) -> Iterator[str]:
        """Every file under ``objects/`` as a relative path, whatever its name (``verify`` reports names outside
        the grammar as orphans)."""
        for dirpath, dirnames, filenames in os.walk(self.objects_dir):
            dirnames.sort()
            yield from (Path(dirpath, name).relative_to(self.root).as_posix() for name in sorted(filenames))

    # --- writing --------------------------------------------------------------------------------------------
    def persist_bytes(self, data: bytes, *, ext: str, sha256: str | None = None) -> Persisted:
        """Store ``data`` as an object with the sniffed ``ext`` (``sha256`` if the caller just computed it); one
        that exists with the right size is not written again (``created=False``)."""
        result = self.persist_many([(data, ext, sha256)])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def persist_many(self, bodies: Sequence[tuple[bytes, str, str | None]]) -> list[Persisted | BaseException]:
        """Store ``(data, ext, sha256 or None)`` bodies as one group (:meth:`stage` each, :meth:`publish` them
        together); per body, in order, a :class:`Persisted` or the exception that stopped it."""

        with self.sync_group() as group:
            return self.publish(self.map_parallel(lambda b: _caught(self.stage, b[0], ext=b[1], sha256=b[2]),
                                                  list(bodies)), sync=group)

    @contextlib.contextmanager
    def sync_group(self) -> Iterator[SyncGroup]:
        """The :class:`SyncGroup` to :meth:`stage` a group's bodies under and :meth:`publish` them with."""
        if self._syncfs is None:
            self._syncfs = (self.fsync and libc_syncfs() is not None
                            and filesystem_type(self._root) in SYNCFS_FILESYSTEMS)
        fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if self._syncfs else None
        try:
            yield SyncGroup(fd)
        finally:
            if fd is not None:
                os.close(fd)

    def stage(self, data: bytes, *, ext: str, sha256: str | None = None) -> Staged | Persisted:
        """First half of storing ``data``: name it and write it to a temp file under ``tmp/`` (no sync). A
        :class:`Persisted` (``created=False``) when the object is already stored with its size, else a
        :class:`Staged` to :meth:`publish` or :meth:`discard`."""
        digest = sha256 or hashlib.sha256(data).hexdigest()
        relpath = object_relpath(sha256=digest, ext=ext)
        final, new_dirs = self._object_dir_created(relpath)
        size = len(data)
        # In a directory created just now there is nothing to find.
        if not (new_dirs and new_dirs[-1] == os.path.dirname(final)) and self._existing_ok(final, size):
            return Persisted(digest, relpath, size, created=False)
        tmp = self._temp_path(digest)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        return Staged(digest=digest, relpath=relpath, size=size, final=final, tmp=tmp, fd=fd, new_dirs=new_dirs)

    def publish(self, group: Sequence[Staged | Persisted | BaseException], *,
                sync: SyncGroup | None = None) -> list[Persisted | BaseException]:
        """Second half, as one group: each :class:`Staged` body synced then linked, then each directory that
        gained an entry synced (an object whose sync failed becomes the error); the rest pass through. Every object
        reported is durable under its final name. With a ``sync`` group holding a descriptor (:meth:`sync_group`,
        entered before the bodies were staged): one ``syncfs`` for the data, the links, one ``syncfs`` for the
        names; else per file (:meth:`publish_one`, in parallel) and per directory."""
        outcomes: list[Any] = list(group)
        staged = [(i, st) for i, st in enumerate(outcomes) if isinstance(st, Staged)]
        if sync is not None and sync.fd is not None and self.fsync and staged:
            self._publish_syncfs(outcomes, staged, sync.fd)
            return credit_first_twin(outcomes)
        published = self.map_parallel(self.publish_one, [st for _, st in staged])
        for (i, _), outcome in zip(staged, published, strict=True):
            outcomes[i] = outcome
        dirs: dict[str, None] = {}
        for i, st in staged:
            if self.fsync and isinstance(outcomes[i], Persisted) and outcomes[i].created:
                dirs[os.path.dirname(st.final)] = None
                for d in st.new_dirs:  # a new directory is reachable once its parent is synced
                    dirs[os.path.dirname(d)] = None
        failed = dict(zip(dirs, self.map_parallel(lambda d: _caught(_fsync_dir, d), list(dirs)), strict=True))
        for i, st in staged:
            err = failed.get(os.path.dirname(st.final))
            if err is not None and isinstance(outcomes[i], Persisted):
                outcomes[i] = err
        return credit_first_twin(outcomes)

    def _publish_syncfs(self, outcomes: list[Any], staged: list[tuple[int, Staged]], fd: int) -> None:
        """:meth:`publish` by ``syncfs``: the same order as per file (data durable, then named, then the names
        durable), two syncs for the whole group; a failed sync fails every object it was to make durable."""
        syncfs = libc_syncfs()
        assert syncfs is not None
        try:
            syncfs(fd)  # every staged body's data (and every directory created for it)
        except OSError as exc:
            self.discard([st for _, st in staged])
            for i, _ in staged:
                outcomes[i] = exc
            return
        linked: list[int] = []
        for i, st in staged:
            fd_, st.fd = st.fd, -1
            try:
                os.close(fd_)
                created = self._link_into_place(st.tmp, st.final, sync=False)
                outcomes[i] = Persisted(st.digest, st.relpath, st.size, created=created)
                if created:
                    linked.append(i)
            except OSError as exc:
                outcomes[i] = exc
            finally:
                _unlink_quietly(st.tmp)
        if linked:
            try:
                syncfs(fd)  # the new names, and the temp names' removal
            except OSError as exc:
                for i in linked:
                    outcomes[i] = exc

    def publish_one(self, st: Staged) -> Persisted | BaseException:
        """Sync, close, link into place and unlink one staged body, in that order (the new name is durable once
        :meth:`publish` synced its directory)."""
        try:
            try:
                if self.fsync:
                    _datasync(st.fd)
            finally:
                fd, st.fd = st.fd, -1
                if fd >= 0:
                    os.close(fd)
            created = self._link_into_place(st.tmp, st.final, sync=False)
            return Persisted(st.digest, st.relpath, st.size, created=created)
        except OSError as exc:
            return exc
        finally:
            _unlink_quietly(st.tmp)

    def map_parallel(self, fn: Any, items: list[Any]) -> list[Any]:
        """``[fn(item) for item in items]`` on the executor's threads (one task per thread, not per item). Blocks:
        never from a coroutine; from a task of the executor only while fewer such tasks than threads wait (the
        committer's rounds, at most ROUNDS_IN_FLIGHT of SYNC_THREADS)."""
        if len(items) <= 1 or SYNC_THREADS <= 1:
            return [fn(item) for item in items]
        pool = self.executor
        k = min(SYNC_THREADS, len(items))
        out: list[Any] = [None] * len(items)
        parts = pool.map(lambda part: [fn(item) for item in part], [items[j::k] for j in range(k)])
        for j, part in enumerate(parts):
            out[j::k] = part
        return out

    def discard(self, staged: Sequence[Staged]) -> None:
        """Drop staged bodies that will not be published (their temp files)."""
        for st in staged:
            fd, st.fd = st.fd, -1
            if fd >= 0:
                os.close(fd)
            _unlink_quietly(st.tmp)

    def publish_file(self, path: str | os.PathLike[str], *, ext: str | None = None,
                     sha256: str | None = None) -> Persisted:
        """Move a file (e.g. an assembled spool) into the store: hashed by streaming unless ``sha256`` is given,
        ext sniffed unless given, synced, linked into place; the source is gone afterwards in every case (copied
        through ``tmp/`` from another filesystem)."""
        src = Path(path)
        if ext is None:
            with open(src, "rb") as f:
                ext = sniff(f.read(SNIFF_BYTES)).ext
        digest, size = (sha256, os.stat(src).st_size) if sha256 is not None else hash_file(src)
        relpath = object_relpath(sha256=digest, ext=ext)
        final = self._object_dir_created(relpath)[0]
        if self._existing_ok(final, size):
            _unlink_quietly(src)
            return Persisted(digest, relpath, size, created=False)
        try:
            created = self._link_into_place(self._synced(src), final)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            tmp = self._temp_path(digest)
            try:
                shutil.copyfile(src, tmp)
                created = self._link_into_place(self._synced(tmp), final)
            finally:
                _unlink_quietly(tmp)
        _unlink_quietly(src)
        return Persisted(digest, relpath, size, created=created)

    def _synced(self, path: str | os.PathLike[str]) -> str | os.PathLike[str]:
        """``path``, its data synced first (unless ``fsync`` is off)."""
        if self.fsync:
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        return path

    def _existing_ok(self, final: str, size: int) -> bool:
        try:
            st = os.lstat(final)
        except FileNotFoundError:
            return False
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            return True
        # Wrong size or not a regular file (a planted symlink): move it aside, the new bytes take its place.
        logger.warning("Replacing damaged object %s (size %s, expected %s)", final, st.st_size, size)
        self._move_to_quarantine(final)
        return False

    def _link_into_place(self, tmp: str | os.PathLike[str], final: str, *, sync: bool = True) -> bool:
        """Give ``tmp`` the name ``final`` atomically; False when another writer got there first."""
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as exc:
            # Filesystems without hard links: rename is atomic too, the race only costs the dedup count.
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            if os.path.exists(final):
                return False
            os.replace(tmp, final)
        if sync and self.fsync:
            _fsync_dir(os.path.dirname(final))
        return True

    def quarantine(self, relpath: str) -> Path:
        """Move the object at ``relpath`` into ``quarantine/``; return its new path."""
        return self._move_to_quarantine(self.abspath(relpath))

    def _move_to_quarantine(self, path: str | os.PathLike[str]) -> Path:
        dest = self.quarantine_dir / f"{os.path.basename(path)}.{time.time_ns()}"
        os.replace(path, dest)
        if self.fsync:
            _fsync_dir(os.path.dirname(path))
        return dest

    def sweep_tmp(self, *, older_than: float = 24 * 3600) -> int:
        """Delete ``tmp/*.part`` files older than ``older_than`` seconds (left by a crash); return how many."""
        cutoff = time.time() - older_than
        removed = 0
        for p in self.tmp_dir.glob("*.part"):
            try:
                if p.stat().st_mtime < cutoff:
                    p.unlink()
                    removed += 1
            except FileNotFoundError:
                pass
        return removed

    # --- Scrapy FilesStoreProtocol --------------------------------------------------------------------------
    def persist_file(self, path: str, buf: BytesIO, info: Any, meta: dict[str, Any] | None = None,
                     headers: dict[str, str] | None = None) -> None:
        """``FilesStoreProtocol``: ``path`` must be the object path of ``buf``'s content."""
        sha, ext = parse_object_relpath(path)
        data = buf.getvalue()
        if hashlib.sha256(data).hexdigest() != sha:
            raise StoreError(f"content does not match its path {path!r}")
        self.persist_bytes(data, ext=ext, sha256=sha)

    def stat_file(self, path: str, info: Any) -> dict[str, Any]:
        """``FilesStoreProtocol``: ``{}`` when absent, else the mtime and the sha256 (the name) as ``checksum``."""
        try:
            sha, _ = parse_object_relpath(path)
            st = os.lstat(self.abspath(path))
        except (StoreError, FileNotFoundError):
            return {}
        return {"last_modified": st.st_mtime, "checksum": sha}


def _caught(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, or the OSError or StoreError it raised (a group's outcomes are per body)."""
    try:
        return fn(*args, **kwargs)
    except (OSError, StoreError) as exc:
        return exc


def _unlink_quietly(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


#: Store classes by URI scheme of FILES_STORE (a plain path has scheme ""), as in ``FilesPipeline``.
STORE_SCHEMES: dict[str, type[ContentAddressedStore]] = {
    "": ContentAddressedStore,
    "file": ContentAddressedStore,
}


def store_scheme(uri: str) -> str:
    """The scheme of a FILES_STORE value as ``FilesPipeline`` sees it (absolute paths are ``file``)."""
    return "file" if Path(uri).is_absolute() else urlparse(uri).scheme
