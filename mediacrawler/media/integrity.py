"""Integrity checks on a downloaded body before anything of it is stored: bytes in, a :class:`BodyCheck` out or a
:class:`MediaRejected` with a short ``reason``. What each check catches, at what cost: docs/media.md, "Image
checks".
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import BinaryIO
from xml.etree import ElementTree

from PIL import Image

from mediacrawler.config import default
from mediacrawler.media.sniff import Sniffed, sniff
from mediacrawler.media.spool import parse_content_range

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

    def __reduce__(self) -> tuple[type[MediaRejected], tuple[str, str]]:
        return MediaRejected, (self.reason, self.detail)  # pickles intact (copies, failures sent elsewhere)


@dataclass(frozen=True, slots=True)
class BodyCheck:
    """What the checks learned about an accepted body."""

    sniffed: Sniffed
    size: int
    width: int | None = None
    height: int | None = None


def check_http(*, status: int, body_size: int, content_length: str | None, content_range: str | None,
               flags: list[str] | tuple[str, ...] = ()) -> None:
    """Reject a response whose body is not known to be the whole file (raw header values or ``None``):
    ``http-<status>``, ``partial-content``, ``dataloss``, ``size-mismatch``, ``empty-body``."""
    if status not in (200, 206):  # a 206 only when its Content-Range covers the whole file (below)
        raise MediaRejected(f"http-{status}")
    if "dataloss" in flags:
        # Only reachable with DOWNLOAD_FAIL_ON_DATALOSS=False; the body is known to be short.
        raise MediaRejected("dataloss", "the connection ended before the announced length")
    if status == 206:
        start, end, total = parse_content_range(content_range) or (None, None, None)
        if start != 0 or total is None or end != total - 1:
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


def check_body(body: bytes | str | os.PathLike[str], *, kind: str,
               max_image_pixels: int = default("MEDIA_MAX_IMAGE_PIXELS"),
               max_image_decode_bytes: int = default("MEDIA_MAX_IMAGE_DECODE_BYTES")) -> BodyCheck:
    """Check that ``body`` (the bytes, or a file holding them) is media of the declared ``kind`` (``image``,
    ``video``, ``audio``) and, for an image, the checks of docs/media.md, "Image checks": ``not-media``,
    ``kind-mismatch``, ``image-too-large``, ``corrupt-image``."""
    if kind in ("subtitle", "danmaku"):
        return check_document(body if isinstance(body, bytes) else Path(body).read_bytes(), kind=kind)
    if isinstance(body, bytes):
        head, tail, size = body, body[-1024:], len(body)
    else:
        with open(body, "rb") as f:
            head = f.read(_IMAGE_HEAD_BYTES)
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - 1024))
            tail = f.read()
    sniffed = sniff(head[:4096])
    if not sniffed.is_media:
        raise MediaRejected("not-media", f"body is {sniffed.mime}")
    if kind == "image" and sniffed.family != "image":
        raise MediaRejected("kind-mismatch", f"an image asset holds {sniffed.mime}")
    if kind in ("video", "audio") and sniffed.family == "image":
        raise MediaRejected("kind-mismatch", f"a {kind} asset holds {sniffed.mime}")
    if sniffed.family != "image":
        # Containers are checked by the video path (remux/probe); here the magic bytes are the check.
        return BodyCheck(sniffed=sniffed, size=size)
    width, height = _check_image(body, head=head, tail=tail, sniffed=sniffed, max_image_pixels=max_image_pixels,
                                 max_image_decode_bytes=max_image_decode_bytes)
    return BodyCheck(sniffed=sniffed, size=size, width=width, height=height)


_SRT_CUE = re.compile(rb"\A\d+\r?\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\r?\n")
_DOCUMENTS = {".json": Sniffed("application/json", ".json", "text"), ".xml": Sniffed("application/xml", ".xml", "text"),
              ".srt": Sniffed("application/x-subrip", ".srt", "text")}


def check_document(body: bytes, *, kind: str) -> BodyCheck:
    """A ``subtitle`` (cue JSON or SRT) or ``danmaku`` (XML) body that is well-formed UTF-8 of that format, else
    ``not-document`` (docs/media.md, "Documents"). XML with a DTD is refused (entity expansion)."""
    text = body.lstrip(b"\xef\xbb\xbf").lstrip()
    try:
        text.decode("utf-8")
        if kind == "danmaku":
            if b"<!DOCTYPE" in text[:4096].upper() or b"<!ENTITY" in text.upper():
                raise ValueError("XML with a DTD")
            ElementTree.fromstring(text)
            ext = ".xml"
        elif text.startswith((b"{", b"[")):
            json.loads(text)
            ext = ".json"
        elif _SRT_CUE.match(text):
            ext = ".srt"
        else:
            raise ValueError("neither cue JSON nor SRT")
    except (ValueError, ElementTree.ParseError, RecursionError) as exc:
        raise MediaRejected("not-document", f"a {kind} asset holds no well-formed document ({exc})") from None
    return BodyCheck(sniffed=_DOCUMENTS[ext], size=len(body))


# Pillow stores 8-bit single-band modes in 1 byte a pixel and I;16* in 2; every other mode (LA, RGB, I, F...) in 4.
_MODE_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}


def _check_image(source: bytes | str | os.PathLike[str], *, head: bytes, tail: bytes, sniffed: Sniffed,
                 max_image_pixels: int, max_image_decode_bytes: int) -> tuple[int, int]:
    """The image checks of :func:`check_body` on a body in memory or (a large image) in a file."""
    image = BytesIO(source) if isinstance(source, bytes) else source  # Image.open() seeks to 0 or opens the path
    dims = image_header_size(head)
    if dims is not None:
        _check_pixels(*dims, max_image_pixels=max_image_pixels)
    try:
        # For formats our header parser does not know, Pillow's own bomb check runs inside open(); it raises
        # DecompressionBombError above twice its MAX_IMAGE_PIXELS (caught below) and the cap is applied again
        # right after. (No warnings.catch_warnings() here: it is process-global and this runs in threads.)
        with Image.open(image) as img:
            width, height = img.size
            _check_pixels(width, height, max_image_pixels=max_image_pixels)
            if img.format == "JPEG":
                # A file (a large image) is decoded at 1/8 scale; that decode is what the budget counts.
                img.draft(img.mode, (max(1, width // 8), max(1, height // 8)))
            # open() read only the header: the size and mode say what load() would allocate (after draft()).
            need = img.size[0] * img.size[1] * _MODE_BYTES.get(img.mode, 4)
            streamed = need > max_image_decode_bytes
            if streamed and img.format != "PNG":
                raise MediaRejected(
                    "image-too-large", f"{img.format} {width}x{height} ({img.mode}) decodes to {need} bytes, over "
                    f"MEDIA_MAX_IMAGE_DECODE_BYTES = {max_image_decode_bytes} (raise it to accept this image)")
            if img.format == "JPEG" and isinstance(source, bytes) and not streamed:
                _check_jpeg_structure(source)  # a photo's decode, even at 1/8, is its largest cost: docs/media.md
            elif not streamed:
                img.load()
        if streamed:
            with BytesIO(source) if isinstance(source, bytes) else open(source, "rb") as f:
                check_png_stream(f)
        elif sniffed.mime == "image/png":
            # load() stops at the last IDAT; verify() walks every chunk's CRC up to IEND, but forgives a cut
            # inside IEND itself, so the complete IEND chunk is required as well.
            with Image.open(image) as img:
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


# --- PNG in bounded memory --------------------------------------------------------------------------------------
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Bytes read from the file, and inflated, per step: what the streamed check holds at a time (plus zlib's window).
_PNG_STEP = 64 * 1024
# Colour type -> (channels, allowed bit depths), from the PNG specification's IHDR table.
_PNG_COLOUR = {0: (1, (1, 2, 4, 8, 16)), 2: (3, (8, 16)), 3: (1, (1, 2, 4, 8)), 4: (2, (8, 16)), 6: (4, (8, 16))}
# Adam7 passes: first column, first row, column step, row step.
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _corrupt_png(detail: str) -> MediaRejected:
    return MediaRejected("corrupt-image", f"PNG {detail}")


class _PngRows:
    """The inflated IDAT stream checked as it comes: never longer than the rows of IHDR, every row's filter type
    0-4, and (in :meth:`finish`) a zlib stream that ended (its Adler-32 checked) with exactly those rows."""

    def __init__(self, ihdr: bytes) -> None:
        width, height, depth, colour, method, filtering, interlace = struct.unpack(">IIBBBBB", ihdr)
        channels, depths = _PNG_COLOUR.get(colour, (0, ()))
        if not (width and height and depth in depths and method == 0 and filtering == 0 and interlace in (0, 1)):
            raise _corrupt_png(f"IHDR {width}x{height}, bit depth {depth}, colour type {colour}, compression "
                               f"{method}, filter {filtering}, interlace {interlace} is not valid")
        self.width, self.height = width, height
        bits = channels * depth
        # Each (sub-)image row is a filter byte then ceil(columns x bits / 8) bytes; an empty Adam7 pass has none.
        self.segments: list[tuple[int, int, int]] = []  # (first byte, end, row length) of each pass
        pos = 0
        for x0, y0, dx, dy in _ADAM7 if interlace else ((0, 0, 1, 1),):
            columns, rows = -(-(width - x0) // dx), -(-(height - y0) // dy)
            if columns > 0 and rows > 0:
                stride = 1 + (columns * bits + 7) // 8
                self.segments.append((pos, pos + rows * stride, stride))
                pos += rows * stride
        self.expected = pos
        self.done = 0
        self.inflater = zlib.decompressobj()

    def feed(self, data: bytes) -> None:
        if self.inflater.eof:
            return  # bytes after the end of the zlib stream: decoders ignore them (and they are not kept)
        while True:
            try:
                out = self.inflater.decompress(data, _PNG_STEP)
            except zlib.error as exc:
                raise _corrupt_png(f"image data does not inflate ({exc})") from None
            start, end = self.done, self.done + len(out)
            if end > self.expected:
                raise _corrupt_png(f"image data longer than the {self.expected} bytes of its {self.width}x"
                                   f"{self.height} rows")
            for first, last, stride in self.segments:
                lo, hi = max(start, first), min(end, last)
                at = first + -(-(lo - first) // stride) * stride  # the first filter byte at or after lo
                if lo < hi and out[at - start:hi - start:stride].translate(None, b"\0\1\2\3\4"):
                    raise _corrupt_png("row with an unknown filter type")
            self.done = end
            data = self.inflater.unconsumed_tail
            # A full output step may leave output pending inside zlib even when all input is consumed.
            if self.inflater.eof or (not data and len(out) < _PNG_STEP):
                return

    def finish(self) -> None:
        if not self.inflater.eof:
            raise _corrupt_png(f"image data ends early: {self.done} of {self.expected} bytes, no end of stream")
        if self.done != self.expected:
            raise _corrupt_png(f"image data is {self.done} bytes, its {self.width}x{self.height} rows need "
                               f"{self.expected}")


def check_png_stream(f: BinaryIO) -> None:
    """Check a whole PNG read from ``f`` a step at a time, else ``corrupt-image``: chunk CRCs to a complete IEND,
    IDAT inflated to exactly its rows, each with a known filter type (docs/media.md, "Image checks")."""
    if f.read(8) != _PNG_SIGNATURE:
        raise _corrupt_png("signature missing")
    rows: _PngRows | None = None
    idat_seen, previous = False, b""  # IDAT chunks must be consecutive
    while True:
        head = f.read(8)
        if len(head) < 8:
            raise _corrupt_png("cut short before its IEND chunk (truncated)")
        length, kind = struct.unpack(">I4s", head)
        if length > 0x7FFFFFFF or not kind.isalpha():
            raise _corrupt_png(f"chunk header {head!r} is not valid")
        if (rows is None) != (kind == b"IHDR") or (kind == b"IHDR" and length != 13):
            raise _corrupt_png("does not start with one 13-byte IHDR chunk")
        if kind == b"IDAT" and idat_seen and previous != b"IDAT":
            raise _corrupt_png("IDAT chunks are not consecutive")
        idat_seen, previous = idat_seen or kind == b"IDAT", kind
        crc, left, ihdr = zlib.crc32(kind), length, b""
        while left:
            piece = f.read(min(left, _PNG_STEP))
            if not piece:
                raise _corrupt_png(f"cut short inside a {kind.decode()} chunk (truncated)")
            left -= len(piece)
            crc = zlib.crc32(piece, crc)
            if kind == b"IDAT":
                assert rows is not None
                rows.feed(piece)
            elif kind == b"IHDR":
                ihdr += piece
        stored = f.read(4)
        if len(stored) < 4 or struct.unpack(">I", stored)[0] != crc:
            raise _corrupt_png(f"CRC mismatch in a {kind.decode()} chunk")
        if kind == b"IHDR":
            rows = _PngRows(ihdr)
        elif kind == b"IEND":
            break
    assert rows is not None
    rows.finish()


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
        if data.startswith(_PNG_SIGNATURE) and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if data.startswith((b"GIF87a", b"GIF89a")):
            return struct.unpack("<HH", data[6:10])
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


# Start-of-frame markers carry the dimensions; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_headers(data: bytes) -> Iterator[tuple[int, int]]:
    """``(marker, offset)`` of each header segment of a JPEG, up to and including the first start of scan."""
    i, n = 2, len(data)
    while i + 4 <= n:  # each step moves on by at least one byte
        if data[i] != 0xFF:
            return
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        yield marker, i
        if marker == 0xDA:
            return
        i += 2 + struct.unpack(">H", data[i + 2:i + 4])[0]


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    for marker, i in _jpeg_headers(data):
        if marker in _JPEG_SOF:
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
    return None  # no frame header before the (first) start of scan


def _check_jpeg_structure(data: bytes) -> None:
    """A frame header, a scan and an EOI marker after it (a cut body has none: docs/media.md, "Image checks")."""
    frame = scan = None
    for marker, i in _jpeg_headers(data):
        frame = i if marker in _JPEG_SOF else frame
        scan = i if marker == 0xDA else scan
    # From the end: a whole JPEG ends with its EOI (or a few bytes after it), so rfind stops at once where find
    # walked the ~100 KiB of scan data byte by byte (its 2-byte search does not skip: ~1 ns a byte, more than the
    # body's SHA-256 on a noise photo). Same answer: an EOI at or after the scan exists or not.
    if frame is None or scan is None or data.rfind(b"\xff\xd9", scan) < 0:
        raise MediaRejected("corrupt-image", "JPEG without a frame, a scan or its end (truncated)")


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None
