"""Real media bytes for the sandbox: deterministic images (Pillow), H.264/AAC MP4 (PyAV) and pseudo-random blobs.

Reference: docs/sandbox.md, "media.py".
"""

from __future__ import annotations

import hashlib
import io
import math
import random
import struct
import zlib
from collections.abc import Iterator
from functools import lru_cache

from .det import rng_for, stable_int
from .video import paint_frame

__all__ = [
    "BLOB_CHUNK",
    "CONTENT_TYPES",
    "blob_iter",
    "blob_read",
    "blob_sha256",
    "generic_image",
    "html_error_page",
    "image_bomb_png",
    "image_bytes",
    "thumbnail_size",
    "video_bytes",
    "VIDEO_QUALITIES",
]

CONTENT_TYPES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "webp": "image/webp",
    "gif": "image/gif",
    "mp4": "video/mp4",
}

#: Pixel size of each video quality (kept tiny: encoding all three takes well under a second).
VIDEO_QUALITIES: dict[str, tuple[int, int]] = {"720": (320, 240), "hd": (256, 192), "sd": (160, 120)}
VIDEO_SECONDS = 2
VIDEO_FPS = 25

#: Blob bytes are laid out in aligned chunks of this size; also the streaming write size.
BLOB_CHUNK = 64 * 1024
_BLOB_BLOCK = 1024 * 1024


def thumbnail_size(width: int, height: int, max_side: int = 120) -> tuple[int, int]:
    """Size of a thumbnail variant (``orj360`` and friends): fit into ``max_side`` keeping the aspect ratio."""
    scale = min(1.0, max_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


@lru_cache(maxsize=8192)
def image_bytes(key: str, fmt: str, width: int, height: int) -> bytes:
    """Encode a deterministic ``width``×``height`` image for ``key`` as ``fmt`` (``jpg``, ``png`` or ``webp``).

    The background colour, the shapes and a strip of per-key noise all come from ``key``, so two keys never
    produce the same bytes, while the same key always does (Pillow's encoders are deterministic).
    """
    from PIL import Image, ImageDraw

    rng = random.Random(f"image:{key}")
    background = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    image = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randrange(3, 8)):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1, y1 = min(width - 1, x0 + rng.randrange(10, width)), min(height - 1, y0 + rng.randrange(10, height))
        colour = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            draw.rectangle((x0, y0, x1, y1), fill=colour)  # type: ignore[arg-type]
        else:
            draw.ellipse((x0, y0, x1, y1), fill=colour)  # type: ignore[arg-type]
    # A noise strip keyed by the digest: keeps contents distinct even if the shapes happened to coincide.
    noise = hashlib.blake2b(key.encode("utf-8"), digest_size=64).digest()
    for i, byte in enumerate(noise):
        x = (i * 5) % width
        draw.rectangle((x, 0, min(width - 1, x + 4), min(height - 1, 4)), fill=(byte, 255 - byte, byte // 2))
    out = io.BytesIO()
    if fmt in ("jpg", "jpeg"):
        image.save(out, "JPEG", quality=85)
    elif fmt == "png":
        image.save(out, "PNG")
    elif fmt == "webp":
        image.save(out, "WEBP", quality=80)
    else:
        raise ValueError(f"unsupported image format {fmt!r}")
    return out.getvalue()


#: Largest side of a /media/big/ image (a noise PNG is about 3 × side² bytes: 4096 → 48 MiB).
MAX_BIG_SIDE = 4096


@lru_cache(maxsize=16)
def big_image(name: str, side: int) -> bytes:
    """``/media/big/{name}.png?side=N``: an N×N PNG of deterministic noise, so it barely compresses and is large
    in bytes (about 3·N² + a little): the large-image path of the media pipeline. ``side`` ≤ :data:`MAX_BIG_SIDE`."""
    from PIL import Image

    if not 1 <= side <= MAX_BIG_SIDE:
        raise ValueError(f"side {side} out of 1..{MAX_BIG_SIDE}")
    stream = hashlib.shake_256(f"big:{name}".encode()).digest(side * side * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), stream).save(out, "PNG", compress_level=1)
    return out.getvalue()


def generic_image(n: int) -> bytes:
    """``/media/img/{n}.jpg``: image number ``n``; distinct contents per ``n``, 160–320 px a side."""
    width = 160 + stable_int("img-w", n, bits=7)
    height = 160 + stable_int("img-h", n, bits=7)
    return image_bytes(f"img:{n}", "jpg", width, height)


def html_error_page() -> bytes:
    """The body a broken CDN edge sends instead of an image (served with ``Content-Type: image/jpeg``)."""
    return (
        b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>403 Forbidden</title></head>\n"
        b"<body><h1>403 Forbidden</h1><p>You don't have permission to access this resource.</p>\n"
        b"<hr><address>sinaimg edge (sandbox)</address></body></html>\n"
    )


@lru_cache(maxsize=1)
def image_bomb_png(width: int = 50_000, height: int = 50_000, rows: int = 64) -> bytes:
    """A small valid-looking PNG whose IHDR declares ``width``×``height`` (a decompression bomb).

    Only ``rows`` rows of grey pixels follow (zlib packs them into a few KB); decoders that trust the header
    would allocate ``width * height`` bytes. Pillow refuses it with ``DecompressionBombError``.
    """

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale, no interlace
    raw = (b"\x00" + b"\x80" * width) * rows  # filter byte 0 + one row of mid-grey
    idat = zlib.compress(raw, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@lru_cache(maxsize=4)
def _video_template(quality: str) -> bytes:
    """Encode the 2 s H.264 + AAC clip of ``quality`` once (≈0.1 s each)."""
    import av

    width, height = VIDEO_QUALITIES[quality]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        video = out.add_stream("libx264", rate=VIDEO_FPS, options={"preset": "ultrafast"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.codec_context.thread_count = 1  # frame threading could reorder decisions; one thread is exact
        audio = out.add_stream("aac", rate=44100)
        audio.layout = "mono"  # type: ignore[union-attr]
        for i in range(VIDEO_SECONDS * VIDEO_FPS):
            x = i * width // 60
            frame = paint_frame(width, height, (20 + i * 4 % 200, 60, 140),
                                [(x, height // 3, x + width // 8, height // 3 + height // 6, (250, 220, 40))])
            frame.pts = i
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode():
            out.mux(packet)
        rate, n = 44100, 1024
        for start in range(0, rate * VIDEO_SECONDS, n):
            samples = [0.2 * math.sin(2 * math.pi * 440 * (start + k) / rate) for k in range(n)]
            frame = av.AudioFrame(format="fltp", layout="mono", samples=n)
            frame.planes[0].update(struct.pack(f"<{n}f", *samples))
            frame.sample_rate, frame.pts = rate, start
            for packet in audio.encode(frame):
                out.mux(packet)
        for packet in audio.encode():
            out.mux(packet)
    return buf.getvalue()


@lru_cache(maxsize=256)
def video_bytes(video_id: str, quality: str = "720") -> bytes:
    """The MP4 of ``video_id`` at ``quality`` (``720``, ``hd`` or ``sd``): the quality's clip remuxed with the id
    in its ``comment`` metadata, so that every (id, quality) has distinct bytes without re-encoding."""
    import av

    if quality not in VIDEO_QUALITIES:
        raise KeyError(quality)
    out_buf = io.BytesIO()
    with av.open(io.BytesIO(_video_template(quality))) as src, av.open(out_buf, mode="w", format="mp4") as out:
        out.metadata["comment"] = f"sandbox video {video_id} {quality}"
        mapping = {s.index: out.add_stream_from_template(s) for s in src.streams}
        for packet in src.demux():
            if packet.dts is None:  # the demuxer's flush packets
                continue
            packet.stream = mapping[packet.stream.index]
            out.mux(packet)
    return out_buf.getvalue()


@lru_cache(maxsize=8)
def _blob_block(name: str, generation: int) -> bytes:
    return rng_for(0, "blob", name, generation).randbytes(_BLOB_BLOCK + BLOB_CHUNK)


def _blob_chunk(name: str, generation: int, index: int) -> bytes:
    # Chunk i is a window of a 1 MiB random block at a per-chunk offset: cheap (a memcpy), never periodic in a
    # way that matters for hashing, and any chunk can be produced without its predecessors (Range requests).
    offset = stable_int("blob", name, generation, index, bits=32) % _BLOB_BLOCK
    return _blob_block(name, generation)[offset : offset + BLOB_CHUNK]


def blob_iter(name: str, start: int, length: int, generation: int = 0) -> Iterator[bytes]:
    """Yield ``length`` bytes of blob ``name`` from ``start``, in pieces of at most :data:`BLOB_CHUNK`.

    A blob's bytes depend on its name and ``generation`` (the sandbox's ETag generation), not on its size: a blob
    of size N is the first N bytes of the infinite stream of ``name``.
    """
    end = start + length
    pos = start
    while pos < end:
        index, within = divmod(pos, BLOB_CHUNK)
        piece = _blob_chunk(name, generation, index)[within : within + (end - pos)]
        yield piece
        pos += len(piece)


def blob_read(name: str, start: int, length: int, generation: int = 0) -> bytes:
    """``length`` bytes of blob ``name`` from ``start`` (use :func:`blob_iter` for large ranges)."""
    return b"".join(blob_iter(name, start, length, generation))


def blob_sha256(name: str, size: int, generation: int = 0) -> str:
    """Hex sha256 of the whole blob ``name`` of ``size`` bytes, computed in chunks."""
    digest = hashlib.sha256()
    for piece in blob_iter(name, 0, size, generation):
        digest.update(piece)
    return digest.hexdigest()
