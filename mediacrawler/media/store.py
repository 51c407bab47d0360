"""The content-addressed media store.

Every object lives once, named by the SHA-256 of its bytes, under the store root (``FILES_STORE``)::

    objects/<ab>/<cd>/<sha256><ext>     the objects; <ab><cd> are the first four hex digits of the hash
    tmp/                                files being written (``*.part``); never read as objects
    quarantine/                         objects that failed verification, moved aside by ``verify --repair``

The extension comes from the sniffed content (:mod:`mediacrawler.media.sniff`), never from a remote name. A path
inside the store is only ever built by :func:`object_relpath` from a hex digest and a sniffed extension, and every
relative path handed back in is checked against the same grammar (:func:`parse_object_relpath`), so no remote
string can steer a write outside the root.

Objects are published by temp file + fsync + link/rename: a crash leaves at most a ``*.part`` file under ``tmp/``
and never a partial file under ``objects/``. Publishing uses ``link()`` so that, when two writers race with the
same bytes, exactly one of them creates the object and the other learns that it was a duplicate.

Storage backends are chosen by URI scheme like Scrapy's ``FilesPipeline.STORE_SCHEMES``; only the local
filesystem exists today (:data:`STORE_SCHEMES`).
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import logging
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from mediacrawler.media.sniff import MEDIA_EXTENSIONS, SNIFF_BYTES, sniff

logger = logging.getLogger(__name__)

OBJECTS_DIR = "objects"
TMP_DIR = "tmp"
QUARANTINE_DIR = "quarantine"

_CHUNK = 1024 * 1024
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_RELPATH_RE = re.compile(r"objects/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})((?:\.[a-z0-9]{1,5})?)")


class StoreError(Exception):
    """A path or object that the store refuses (outside the grammar, outside the root)."""


@dataclass(frozen=True, slots=True)
class Persisted:
    """The outcome of putting bytes into the store. ``created`` is False when the object was already there
    (content deduplication)."""

    sha256: str
    relpath: str
    size: int
    created: bool


def object_relpath(*, sha256: str, ext: str) -> str:
    """The relative path of an object: ``objects/<ab>/<cd>/<sha256><ext>``.

    ``sha256`` must be 64 lowercase hex digits and ``ext`` empty or one of the extensions
    :func:`~mediacrawler.media.sniff.sniff` gives media; anything else raises :class:`StoreError`, so nothing
    but a digest and a sniffed extension ever becomes a path.
    """
    if not _SHA256_RE.fullmatch(sha256):
        raise StoreError(f"not a sha256 hex digest: {sha256!r}")
    if ext and ext not in MEDIA_EXTENSIONS:
        raise StoreError(f"not an object extension: {ext!r}")
    return f"{OBJECTS_DIR}/{sha256[:2]}/{sha256[2:4]}/{sha256}{ext}"


def parse_object_relpath(relpath: str) -> tuple[str, str]:
    """Return ``(sha256, ext)`` of an object path, or raise :class:`StoreError` when ``relpath`` is not exactly
    what :func:`object_relpath` makes (so ``../``, absolute paths and encoded tricks never pass)."""
    m = _RELPATH_RE.fullmatch(relpath)
    if (not m or m.group(1) != m.group(3)[:2] or m.group(2) != m.group(3)[2:4]
            or (m.group(4) and m.group(4) not in MEDIA_EXTENSIONS)):
        raise StoreError(f"not an object path: {relpath!r}")
    return m.group(3), m.group(4)


def hash_file(path: str | os.PathLike[str]) -> tuple[str, int]:
    """Stream a file through SHA-256; return ``(hex digest, size)``."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _fsync_dir(path: str | os.PathLike[str]) -> None:
    # A rename or link is durable only once the directory holding the new entry is synced.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ContentStore(Protocol):
    """What the media pipeline, ``verify`` and the large-file path need from a store."""

    def persist_bytes(self, data: bytes, *, ext: str, sha256: str | None = None) -> Persisted: ...

    def publish_file(self, path: str | os.PathLike[str], *, ext: str | None = None,
                     sha256: str | None = None) -> Persisted: ...

    def stat(self, relpath: str) -> int | None: ...

    def abspath(self, relpath: str) -> Path: ...

    def iter_objects(self) -> Iterator[str]: ...

    def quarantine(self, relpath: str) -> Path: ...


class ContentAddressedStore:
    """Content-addressed objects on the local filesystem under ``basedir`` (see the module docstring).

    Also satisfies Scrapy's ``FilesStoreProtocol`` (``persist_file``/``stat_file``), so that ``FilesPipeline``
    can build it from ``FILES_STORE`` through ``STORE_SCHEMES``; the media pipeline itself uses the richer
    methods. ``fsync=False`` skips the fsyncs (tests and throwaway stores only: a crash may then leave an empty
    or short file under ``objects/``).
    """

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
        self._real_root = self.root.resolve()
        for d in (self.objects_dir, self.tmp_dir, self.quarantine_dir):
            self._check_inside(d)
        self._checked_dirs: set[str] = set()
        self._root = str(self.root)
        self._tmp = str(self.tmp_dir)
        self._seq = itertools.count()

    # --- paths ----------------------------------------------------------------------------------------------
    def _check_inside(self, path: Path) -> None:
        # A symlink planted in the store (objects/ab -> /etc) must not carry writes outside the root.
        real = path.resolve()
        if real != self._real_root and self._real_root not in real.parents:
            raise StoreError(f"{path} resolves outside the store root ({real})")

    def abspath(self, relpath: str) -> Path:
        """The absolute path of an object; ``relpath`` must be an object path (:func:`parse_object_relpath`)."""
        parse_object_relpath(relpath)
        return self.root.joinpath(*relpath.split("/"))

    def _object_dir(self, relpath: str) -> str:
        """The absolute path of ``relpath`` (built by :func:`object_relpath`) with its two directory levels
        created, symlinks refused."""
        final = os.path.join(self._root, relpath)
        leaf = os.path.dirname(final)
        top = os.path.dirname(leaf)
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
            if level is top:
                self._checked_dirs.add(top)
        return final

    def _temp_path(self, digest: str) -> str:
        # Unique per process, thread and call: no random names, no retry loop (cheaper than mkstemp).
        return os.path.join(self._tmp, f"{digest[:16]}.{os.getpid()}.{threading.get_ident()}.{next(self._seq)}.part")

    # --- reading --------------------------------------------------------------------------------------------
    def stat(self, relpath: str) -> int | None:
        """Size of the object at ``relpath``, or ``None`` when it is absent or not a regular file."""
        try:
            st = os.lstat(self.abspath(relpath))
        except FileNotFoundError:
            return None
        if not _is_regular(st.st_mode):
            return None
        return st.st_size

    def iter_objects(self) -> Iterator[str]:
        """Every file under ``objects/`` as a relative path with ``/`` separators, whatever its name (``verify``
        reports names outside the grammar as orphans)."""
        for dirpath, dirnames, filenames in os.walk(self.objects_dir):
            dirnames.sort()
            for name in sorted(filenames):
                full = Path(dirpath, name)
                yield full.relative_to(self.root).as_posix()

    # --- writing --------------------------------------------------------------------------------------------
    def persist_bytes(self, data: bytes, *, ext: str, sha256: str | None = None) -> Persisted:
        """Store ``data`` as an object with extension ``ext`` (from :func:`~mediacrawler.media.sniff.sniff`).

        ``sha256`` may be passed when the caller has just computed it from ``data``. An object that already
        exists with the right size is not written again (``created=False``).
        """
        digest = sha256 or hashlib.sha256(data).hexdigest()
        relpath = object_relpath(sha256=digest, ext=ext)
        final = self._object_dir(relpath)
        if self._existing_ok(final, len(data)):
            return Persisted(digest, relpath, len(data), created=False)
        tmp = self._temp_path(digest)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            created = self._link_into_place(tmp, final)
        finally:
            _unlink_quietly(tmp)
        return Persisted(digest, relpath, len(data), created=created)

    def publish_file(self, path: str | os.PathLike[str], *, ext: str | None = None,
                     sha256: str | None = None) -> Persisted:
        """Move an existing file (e.g. a spool assembled from Range segments) into the store.

        The file is hashed by streaming (unless the caller passes the ``sha256`` it computed while writing it),
        its extension sniffed from its head unless given, synced, and renamed (linked) into place; the source is
        gone afterwards in every case. A source on another filesystem is copied into ``tmp/`` first.
        """
        src = Path(path)
        if ext is None:
            with open(src, "rb") as f:
                ext = sniff(f.read(SNIFF_BYTES)).ext
        if sha256 is not None:
            digest, size = sha256, os.stat(src).st_size
        else:
            digest, size = hash_file(src)
        relpath = object_relpath(sha256=digest, ext=ext)
        final = self._object_dir(relpath)
        if self._existing_ok(final, size):
            _unlink_quietly(src)
            return Persisted(digest, relpath, size, created=False)
        if self.fsync:
            with open(src, "rb") as f:
                os.fsync(f.fileno())
        try:
            created = self._link_into_place(src, final)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            tmp = self._temp_path(digest)
            try:
                shutil.copyfile(src, tmp)
                if self.fsync:
                    with open(tmp, "rb") as f:
                        os.fsync(f.fileno())
                created = self._link_into_place(tmp, final)
            finally:
                _unlink_quietly(tmp)
        _unlink_quietly(src)
        return Persisted(digest, relpath, size, created=created)

    def _existing_ok(self, final: str, size: int) -> bool:
        try:
            st = os.lstat(final)
        except FileNotFoundError:
            return False
        if _is_regular(st.st_mode) and st.st_size == size:
            return True
        # Wrong size or not a regular file (a planted symlink): move it aside, the new bytes take its place.
        logger.warning("Replacing damaged object %s (size %s, expected %s)", final, st.st_size, size)
        self._move_to_quarantine(final)
        return False

    def _link_into_place(self, tmp: str | os.PathLike[str], final: str) -> bool:
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
        if self.fsync:
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
        """``FilesStoreProtocol`` entry point: ``path`` must be the object path of ``buf``'s content."""
        sha, ext = parse_object_relpath(path)
        data = buf.getvalue()
        if hashlib.sha256(data).hexdigest() != sha:
            raise StoreError(f"content does not match its path {path!r}")
        self.persist_bytes(data, ext=ext, sha256=sha)

    def stat_file(self, path: str, info: Any) -> dict[str, Any]:
        """``FilesStoreProtocol`` entry point: ``{}`` when absent, else the mtime and the sha256 (from the
        name) as ``checksum``."""
        try:
            sha, _ = parse_object_relpath(path)
            st = os.lstat(self.abspath(path))
        except (StoreError, FileNotFoundError):
            return {}
        return {"last_modified": st.st_mtime, "checksum": sha}


def _is_regular(mode: int) -> bool:
    return stat.S_ISREG(mode)


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


def store_from_uri(uri: str, *, fsync: bool = True) -> ContentAddressedStore:
    """Build the store for a FILES_STORE value; :class:`StoreError` for a scheme with no content store."""
    scheme = store_scheme(uri)
    try:
        cls = STORE_SCHEMES[scheme]
    except KeyError:
        raise StoreError(f"no content-addressed store for scheme {scheme!r} (FILES_STORE={uri!r})") from None
    return cls(uri, fsync=fsync)

