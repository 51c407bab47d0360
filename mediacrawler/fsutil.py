"""Durable file publication shared by the checkpoint, the download ledger and the content store.

One rule everywhere: write a temp file in the target's directory, fsync it, rename it over the target, fsync the
directory. A reader (or the next run after a kill at any instant) then sees the previous complete file or the new
complete file, never a mix, and after a power loss the rename itself is on disk.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


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
