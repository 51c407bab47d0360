"""Durable file publication shared by the checkpoint, the download ledger and the content store.

One rule everywhere: write a temp file in the target's directory, fsync it, rename it over the target, fsync the
directory. A reader (or the next run after a kill at any instant) then sees the previous complete file or the new
complete file, never a mix, and after a power loss the rename itself is on disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so that a rename, link or new entry in it survives a crash."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms without directory fds (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True) -> None:
    """Publish ``data`` at ``path`` atomically (see module docstring).

    Without ``fsync`` the rename is still atomic for other processes, but a crash of the machine (not of the
    process) may lose the newest write.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(target.parent)


def unlink_synced(path: str | os.PathLike[str]) -> bool:
    """Remove ``path`` and fsync its directory, so the removal survives a crash; False when it was not there."""
    target = Path(path)
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(target.parent)
    return True


def move_aside(path: str | os.PathLike[str]) -> Path | None:
    """Rename a damaged state file to ``<name>.corrupt`` (``.corrupt.2``… when taken), kept for inspection; the
    new path, or None when there is no such file. Durable (the directory is synced)."""
    path = Path(path)
    target = path.with_name(path.name + ".corrupt")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt.{n}")
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return None
    fsync_dir(path.parent)
    return target


def remove_stray_temps(path: str | os.PathLike[str]) -> int:
    """Delete the temp files :func:`write_atomic` left beside ``path`` when a process was killed mid-write;
    returns how many. Only for a caller that owns ``path`` exclusively (e.g. holds the lock of the download it
    belongs to): another writer's temp file in flight would be deleted too."""
    target = Path(path)
    removed = 0
    try:
        names = os.listdir(target.parent)
    except OSError:  # no directory, or not readable: nothing to clean, and never a reason to fail the caller
        return 0
    prefix = f".{target.name}."
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(target.parent / name)
                removed += 1
    return removed


#: Alignment of an ``O_DIRECT`` write's buffer address, file offset and length (a page: what every Linux
#: filesystem that takes ``O_DIRECT`` accepts, whatever its logical block size).
DIRECT_ALIGN = 4096


def open_direct(path: str | os.PathLike[str]) -> int | None:
    """A write-only ``O_DIRECT`` descriptor of the existing file ``path`` (writes bypass the page cache: see
    docs/media.md, "Spool writes"), or ``None`` where the platform or filesystem refuses ``O_DIRECT``."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:  # pragma: no cover - not Linux
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC | flag)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise


def write_direct(fd: int, data: memoryview, offset: int) -> int:
    """``pwrite`` the longest :data:`DIRECT_ALIGN`-multiple prefix of ``data`` (whose address the caller has
    aligned) at ``offset`` through the ``O_DIRECT`` descriptor ``fd``; how many bytes went (0 when ``offset`` is
    unaligned, or when the filesystem refused this write with ``EINVAL``: the caller writes the rest buffered)."""
    if offset % DIRECT_ALIGN:
        return 0
    end = len(data) - len(data) % DIRECT_ALIGN
    done = 0
    while done < end:  # bounded: each pass writes at least one byte, or stops
        try:
            written = os.pwrite(fd, data[done:end], offset + done)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            break
        if written <= 0 or written % DIRECT_ALIGN:
            done += max(written, 0)
            break
        done += written
    return done


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes available to this user on the filesystem of ``path`` (``None`` when it cannot tell)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def writable_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why files cannot be created in directory ``path`` (created if missing), or ``None`` when they can.

    Tried for real (a temp file made and removed), so a read-only mount, a full disk or a file in the way all
    show here, before a crawl depends on the directory."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


#: How deeply a state document (checkpoint, mark, retry set) may nest; real ones nest 4 deep at most.
STATE_MAX_DEPTH = 64


class TooLarge(ValueError):
    """Input past a size, line or depth bound (the message names the bound)."""


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of ``path``, read in one bounded read: :class:`TooLarge` when it holds more than ``max_bytes``.

    Never trusts ``st_size`` alone (``/dev/zero``, a FIFO, a file growing under us): at most ``max_bytes + 1``
    bytes are read, so memory stays bounded whatever the file is."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(f"{os.fspath(path)} is larger than {max_bytes} bytes")
    return data


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKETS = re.compile(rb"[\[\]{}]")


def json_depth(text: str | bytes) -> int:
    """How deeply arrays and objects nest in the JSON ``text``, counted without decoding it (so a hostile
    100,000-deep document cannot raise RecursionError in :func:`json.loads`); brackets inside strings are
    skipped."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    depth = deepest = 0
    for m in _JSON_BRACKETS.finditer(_JSON_STRING.sub(b'""', data)):
        if m.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def loads_bounded(text: str | bytes, *, max_depth: int, max_bytes: int | None = None) -> Any:
    """:func:`json.loads` of ``text`` after checking its size and nesting: :class:`TooLarge` past a bound,
    ``ValueError`` for text that is not JSON."""
    if max_bytes is not None and len(text) > max_bytes:
        raise TooLarge(f"{len(text)} bytes of JSON, more than {max_bytes}")
    depth = json_depth(text)
    if depth > max_depth:
        raise TooLarge(f"JSON nested {depth} deep, more than {max_depth}")
    return json.loads(text)
