"""Integrity checks on a downloaded body, before anything of it is stored.

Pure functions: bytes (plus the response facts that matter) in, a :class:`BodyCheck` out or a
:class:`MediaRejected` raised with a short machine-readable ``reason``. The pipeline records the reason on the
asset and counts it in stats (``media/failed/<reason>``).

Order matters for safety: the HTTP facts and magic bytes are checked first (cheap, and an HTML page never
reaches an image decoder); image dimensions are read from the header by our own parser and checked against the
pixel cap *before* Pillow is asked to decode anything, so a 50,000 x 50,000 PNG of a few kilobytes is rejected
without allocating its 7.5 GB of pixels.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO

from PIL import Image

from mediacrawler.media.sniff import Sniffed, sniff

#: Pillow's own default (``Image.MAX_IMAGE_PIXELS``), about 9459 x 9459; the MEDIA_MAX_IMAGE_PIXELS default.
DEFAULT_MAX_IMAGE_PIXELS = 89_478_485

#: HTTP statuses whose body is the whole file. A 206 counts only when its Content-Range covers the whole file.
ACCEPTED_STATUSES = (200, 206)

_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
# Bytes of a spooled image read for the sniff and our header parser (a JPEG's size can follow large APP segments;
# when it is not in here, Pillow's open() reads it, still before any pixel is decoded).
_IMAGE_HEAD_BYTES = 256 * 1024


class MediaRejected(Exception):
    """A body that must not be stored. ``reason`` is a short code (``not-media``, ``image-too-large``, …) used
    in records and stats keys; ``detail`` is for people."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class BodyCheck:
    """What the checks learned about an accepted body."""

    sniffed: Sniffed
    size: int
    width: int | None = None
    height: int | None = None


def check_http(*, status: int, body_size: int, content_length: str | None, content_range: str | None,
               flags: list[str] | tuple[str, ...] = ()) -> None:
    """Reject a response whose body is not known to be the whole file.

    ``content_length`` and ``content_range`` are the raw header values (or ``None``). Raises
    :class:`MediaRejected` with reason ``http-<status>``, ``partial-content``, ``dataloss`` or ``size-mismatch``.
    """
    if status not in ACCEPTED_STATUSES:
        raise MediaRejected(f"http-{status}")
    if "dataloss" in flags:
        # Only reachable with DOWNLOAD_FAIL_ON_DATALOSS=False; the body is known to be short.
        raise MediaRejected("dataloss", "the connection ended before the announced length")
    if status == 206:
        total = _content_range_total(content_range)
        if total is None or not (content_range or "").startswith(f"bytes 0-{total - 1}/"):
            raise MediaRejected("partial-content", f"Content-Range {content_range!r} is not the whole file")
        if body_size != total:
            raise MediaRejected("size-mismatch", f"{body_size} bytes received, Content-Range says {total}")
    if content_length is not None:
        try:
            expected = int(content_length.strip())
        except ValueError:
            raise MediaRejected("size-mismatch", f"unparseable Content-Length {content_length!r}") from None
        if expected != body_size:
            raise MediaRejected("size-mismatch", f"{body_size} bytes received, Content-Length says {expected}")
    if body_size == 0:
        raise MediaRejected("empty-body")


def _content_range_total(value: str | None) -> int | None:
    # "bytes 0-99/100" -> 100; "bytes 0-99/*" -> None.
    if not value or "/" not in value:
        return None
    try:
        return int(value.rsplit("/", 1)[1])
    except ValueError:
        return None


def check_body(body: bytes, *, kind: str, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> BodyCheck:
    """Check that ``body`` is media of the declared ``kind`` (``image``, ``video``, ``audio``) and, for an
    image, that it is within the pixel cap and decodes to the end.

    Raises :class:`MediaRejected` with reason ``not-media`` (HTML, JSON, XML or unknown bytes),
    ``kind-mismatch``, ``image-too-large`` or ``corrupt-image``.
    """
    sniffed = check_kind(body[:4096], kind=kind)
    if sniffed.family != "image":
        # Containers are checked by the video path (remux/probe); here the magic bytes are the check.
        return BodyCheck(sniffed=sniffed, size=len(body))
    width, height = check_image(body, sniffed=sniffed, max_image_pixels=max_image_pixels)
    return BodyCheck(sniffed=sniffed, size=len(body), width=width, height=height)


def check_kind(head: bytes, *, kind: str) -> Sniffed:
    """The magic-bytes half of :func:`check_body`: ``head`` (the first bytes) is media of the declared kind."""
    sniffed = sniff(head[:4096])
    if not sniffed.is_media:
        raise MediaRejected("not-media", f"body is {sniffed.mime}")
    if kind == "image" and sniffed.family != "image":
        raise MediaRejected("kind-mismatch", f"an image asset holds {sniffed.mime}")
    if kind in ("video", "audio") and sniffed.family == "image":
        raise MediaRejected("kind-mismatch", f"a {kind} asset holds {sniffed.mime}")
    return sniffed


def check_image_file(path: str | os.PathLike[str], *,
                     max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> BodyCheck:
    """:func:`check_body` for an image asset held in a file (one too large for memory, spooled in Range
    segments): same checks, same reasons, reading the file instead of a body."""
    with open(path, "rb") as f:
        head = f.read(_IMAGE_HEAD_BYTES)
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - 1024))
        tail = f.read()
    sniffed = check_kind(head, kind="image")
    width, height = _check_image(lambda: Image.open(path), head=head, tail=tail, sniffed=sniffed,
                                 max_image_pixels=max_image_pixels)
    return BodyCheck(sniffed=sniffed, size=size, width=width, height=height)


def check_image(body: bytes, *, sniffed: Sniffed, max_image_pixels: int) -> tuple[int, int]:
    """Return ``(width, height)`` of an image after checking the pixel cap and decoding it completely."""
    return _check_image(lambda: Image.open(BytesIO(body)), head=body, tail=body[-1024:], sniffed=sniffed,
                        max_image_pixels=max_image_pixels)


def _check_image(open_image: Callable[[], Image.Image], *, head: bytes, tail: bytes, sniffed: Sniffed,
                 max_image_pixels: int) -> tuple[int, int]:
    dims = image_header_size(head)
    if dims is not None:
        _check_pixels(*dims, max_image_pixels=max_image_pixels)
    try:
        # For formats our header parser does not know, Pillow's own bomb check runs inside open(); it raises
        # DecompressionBombError above twice its MAX_IMAGE_PIXELS (caught below) and the cap is applied again
        # right after. (No warnings.catch_warnings() here: it is process-global and this runs in threads.)
        with open_image() as img:
            width, height = img.size
            _check_pixels(width, height, max_image_pixels=max_image_pixels)
            if img.format == "JPEG":
                # Decode at 1/8 scale: every entropy-coded segment is still read (a truncated scan fails), at a
                # fraction of the cost of a full-size decode.
                img.draft(img.mode, (max(1, width // 8), max(1, height // 8)))
            img.load()
        if sniffed.mime == "image/png":
            # load() stops at the last IDAT; verify() walks every chunk's CRC up to IEND, but forgives a cut
            # inside IEND itself, so the complete IEND chunk is required as well.
            with open_image() as img:
                img.verify()
            if _PNG_IEND not in tail[-1024:]:
                raise MediaRejected("corrupt-image", "PNG without a complete IEND chunk (truncated)")
    except MediaRejected:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaRejected("image-too-large", str(exc)) from None
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, struct.error... for bad data.
        raise MediaRejected("corrupt-image", f"{type(exc).__name__}: {exc}") from None
    return width, height


def _check_pixels(width: int, height: int, *, max_image_pixels: int) -> None:
    if width <= 0 or height <= 0:
        raise MediaRejected("corrupt-image", f"impossible dimensions {width}x{height}")
    if width * height > max_image_pixels:
        raise MediaRejected("image-too-large",
                            f"{width}x{height} = {width * height} pixels exceeds the cap of {max_image_pixels}")


def image_header_size(data: bytes) -> tuple[int, int] | None:
    """Read ``(width, height)`` from the header of a PNG, GIF, JPEG or WebP without decoding; ``None`` when
    the format is not one of these or the header is cut short."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return w, h
        if data.startswith((b"GIF87a", b"GIF89a")):
            w, h = struct.unpack("<HH", data[6:10])
            return w, h
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


# Start-of-frame markers carry the dimensions; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if marker in _JPEG_SOF:
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        if marker == 0xDA:  # start of scan before any frame header: not a valid JPEG
            return None
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None
