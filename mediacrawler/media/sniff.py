"""Content sniffing: what a body *is*, from its first bytes (pure). Stored objects get their extension from here,
never from a URL, an id or a ``Content-Type`` (docs/media.md, "Layout").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Family = Literal["image", "video", "audio", "text", "unknown"]

#: How many leading bytes :func:`sniff` looks at; callers that stream a file read this much of its head.
SNIFF_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Sniffed:
    """The type of a body by its magic bytes: ``ext`` with its dot (empty when not media); ``family`` is
    ``image``/``video``/``audio``, ``text`` (HTML, JSON, XML) or ``unknown``."""

    mime: str
    ext: str
    family: Family

    @property
    def is_media(self) -> bool:
        return self.family in ("image", "video", "audio")


UNKNOWN = Sniffed("application/octet-stream", "", "unknown")

#: Every extension :func:`sniff` can return for media; the store accepts no other (so never ``.desktop``/``.lnk``).
MEDIA_EXTENSIONS = frozenset({
    ".jpg", ".png", ".gif", ".webp", ".bmp", ".tif", ".avif", ".heic", ".heif", ".mp4", ".mov", ".m4a", ".webm",
    ".mkv", ".ts", ".flv", ".avi", ".wav", ".ogg", ".flac", ".mp3", ".aac",
})

#: Documents stored beside media (subtitles, danmaku): accepted only for those kinds, after their checks
#: (media/integrity.py); :func:`sniff` never returns them.
DOCUMENT_EXTENSIONS = frozenset({".json", ".xml", ".srt"})

# ISO base media file brands (the four bytes after "ftyp"). Anything else with an ftyp box is still MP4-family
# video; these only refine the type.
_FTYP_BRANDS: dict[bytes, Sniffed] = {
    b"qt  ": Sniffed("video/quicktime", ".mov", "video"),
    b"M4A ": Sniffed("audio/mp4", ".m4a", "audio"),
    b"M4B ": Sniffed("audio/mp4", ".m4a", "audio"),
    b"dash": Sniffed("video/mp4", ".mp4", "video"),
    b"avif": Sniffed("image/avif", ".avif", "image"),
    b"avis": Sniffed("image/avif", ".avif", "image"),
    b"heic": Sniffed("image/heic", ".heic", "image"),
    b"heix": Sniffed("image/heic", ".heic", "image"),
    b"mif1": Sniffed("image/heif", ".heif", "image"),
    b"msf1": Sniffed("image/heif", ".heif", "image"),
}
_MP4 = Sniffed("video/mp4", ".mp4", "video")

# Document markers, matched case-insensitively after leading whitespace and a BOM: an error page, a JSON error
# envelope or an XML error document served in place of an image.
_HTML, _XML, _JSON = (Sniffed(mime, "", "text") for mime in ("text/html", "application/xml", "application/json"))
_TEXT_PREFIXES: tuple[tuple[bytes, Sniffed], ...] = (
    *((tag, _HTML) for tag in (b"<!doctype html", b"<html", b"<head", b"<body", b"<title", b"<script", b"<!--")),
    (b"<?xml", _XML), (b"{", _JSON), (b"[", _JSON),
)


def sniff(h: bytes) -> Sniffed:
    """The type of a body from its first bytes (at least 32; :data:`SNIFF_BYTES` is plenty): the media formats of
    :data:`MEDIA_EXTENSIONS`, HTML/XML/JSON (family ``text``), else :data:`UNKNOWN`."""
    if h.startswith(b"\xff\xd8\xff"):
        return Sniffed("image/jpeg", ".jpg", "image")
    if h.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("image/png", ".png", "image")
    if h.startswith((b"GIF87a", b"GIF89a")):
        return Sniffed("image/gif", ".gif", "image")
    if h[:4] == b"RIFF" and h[8:12] == b"WEBP":
        return Sniffed("image/webp", ".webp", "image")
    if h[:4] == b"RIFF" and h[8:12] == b"WAVE":
        return Sniffed("audio/wav", ".wav", "audio")
    if h[:4] == b"RIFF" and h[8:12] == b"AVI ":
        return Sniffed("video/x-msvideo", ".avi", "video")
    if h[4:8] == b"ftyp":
        return _FTYP_BRANDS.get(h[8:12], _MP4)
    # Fragmented MP4 segments and some encoders start with another top-level box.
    if h[4:8] in (b"styp", b"moof", b"moov", b"sidx"):
        return _MP4
    if h.startswith(b"\x1a\x45\xdf\xa3"):
        # EBML: the DocType element says which; default to Matroska.
        if b"webm" in h[:64]:
            return Sniffed("video/webm", ".webm", "video")
        return Sniffed("video/x-matroska", ".mkv", "video")
    # MPEG-TS: 188-byte packets, each starting with the sync byte 0x47; two or three packets in a row are a
    # reliable signature (a lone 0x47 is just the letter "G").
    if len(h) >= 376 and all(h[i * 188] == 0x47 for i in range(min(len(h) // 188, 3))):
        return Sniffed("video/mp2t", ".ts", "video")
    if h.startswith(b"FLV\x01"):
        return Sniffed("video/x-flv", ".flv", "video")
    if h.startswith(b"BM") and len(h) >= 26 and h[6:10] == b"\0\0\0\0":
        return Sniffed("image/bmp", ".bmp", "image")
    if h.startswith((b"II*\x00", b"MM\x00*")):
        return Sniffed("image/tiff", ".tif", "image")
    if h.startswith(b"OggS"):
        return Sniffed("audio/ogg", ".ogg", "audio")
    if h.startswith(b"fLaC"):
        return Sniffed("audio/flac", ".flac", "audio")
    if h.startswith(b"ID3") or (len(h) >= 2 and h[0] == 0xFF and h[1] & 0xE0 == 0xE0 and h[1] & 0x06 != 0):
        # An MPEG audio frame sync with a non-reserved layer; layer 0 ("reserved") is ADTS's marker below.
        return Sniffed("audio/mpeg", ".mp3", "audio")
    if len(h) >= 2 and h[0] == 0xFF and h[1] & 0xF6 == 0xF0:
        return Sniffed("audio/aac", ".aac", "audio")
    stripped = h[:512].lstrip(b"\xef\xbb\xbf").lstrip().lower()
    return next((sniffed for prefix, sniffed in _TEXT_PREFIXES if stripped.startswith(prefix)), UNKNOWN)
