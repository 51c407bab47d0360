"""Stored objects served by their SHA-256 (docs/web.md, "Files"): ``/files/<sha256>`` from ``FILES_STORE``, with
HTTP Range (206; 416 past the end) by Starlette's ``FileResponse``, and ``/files/<sha256>.vtt``, a stored SRT
subtitle as WebVTT made on the fly.

A name is 64 lowercase hex digits or nothing is looked up; the file is found under the store's own layout
(``objects/<ab>/<cd>/<sha256><ext>``) and its real path must lie inside the store (a symlink planted in the store
that leads out of it is refused): no id, key or name from a platform ever becomes part of a path.
"""

from __future__ import annotations

import mimetypes
import os
import re
from pathlib import Path

from mediacrawler.media.store import OBJECTS_DIR

SHA256_RE = re.compile(r"[0-9a-f]{64}")
#: A stored SRT larger than this is not converted (subtitles are small; this bounds the work of one request).
MAX_SUBTITLE_BYTES = 4 * 1024 * 1024
_TIMING = re.compile(r"(\d{1,2}:\d{2}:\d{2}),(\d{3})")


def _inside(path: str, root: str) -> bool:
    base = root.rstrip(os.sep) + os.sep
    return path.startswith(base)


def object_path(store_root: str | os.PathLike[str], sha256: str) -> Path | None:
    """The stored file of ``sha256`` (whatever its extension), or None: not a SHA-256, not stored, or a path
    that leads out of the store."""
    if not SHA256_RE.fullmatch(sha256):
        return None
    root = os.path.realpath(store_root)
    folder = Path(root, OBJECTS_DIR, sha256[:2], sha256[2:4])
    try:
        names = [n for n in os.listdir(folder) if n == sha256 or (n.startswith(sha256 + ".") and "/" not in n)]
    except OSError:
        return None
    for name in sorted(names):
        real = os.path.realpath(folder / name)
        if _inside(real, root) and os.path.isfile(real):
            return Path(real)
    return None


def media_type(path: Path, stored_mime: str | None) -> str:
    """The type the store sniffed (from the records database), else the one its extension says."""
    if stored_mime:
        return stored_mime
    if path.suffix == ".srt":
        return "application/x-subrip"
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def srt_to_vtt(srt: str) -> str:
    """SubRip as WebVTT: a ``WEBVTT`` header, ``,`` → ``.`` in cue timings, cue numbers kept as cue ids, and the
    cue text escaped (``<``, ``&`` start markup in WebVTT; a subtitle is shown as written)."""
    lines = srt.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out = ["WEBVTT", ""]
    for line in lines:
        if "-->" in line:
            line = _TIMING.sub(r"\1.\2", line)
        else:
            line = line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"
