"""Image checks bound their memory, not only their pixels (issue #16, point 9).

A 9400 x 9400 16-bit PNG is under the pixel cap but Pillow decodes it into 337 MiB of RGB. Above
MEDIA_MAX_IMAGE_DECODE_BYTES a PNG is checked by streaming (chunk CRCs, inflated length, filter bytes) instead;
other formats there are decoded at reduced scale (JPEG) or rejected as image-too-large. Peak memory is measured
on a child process (its VmHWM); images are real PNGs written chunk by chunk with zlib, or encoded by Pillow.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import struct
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Iterable
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

from mediacrawler.media.integrity import MediaRejected, check_body

from .test_media_units import encode

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
BIG = 9400  # 88.4 Mpx, under the default pixel cap of 89.5 Mpx
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def rows_of(width: int, height: int, depth: int, colour: int, interlace: int) -> Iterable[bytes]:
    """The filtered scanlines (filter byte 0, then a flat non-zero colour) of every row, pass after pass."""
    bpp = _CHANNELS[colour] * depth
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    for x0, y0, dx, dy in passes:
        pw, ph = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if pw <= 0 or ph <= 0:
            continue
        row = b"\0" + bytes([0x5A]) * (-(-pw * bpp // 8))
        for _ in range(ph):
            yield row


def make_png(width: int, height: int, *, depth: int = 16, colour: int = 2, interlace: int = 0,
             idat_size: int = 64 * 1024, palette: int = 0x5B) -> bytes:
    """A valid PNG of one flat colour, compressed row by row (never the whole raw image in memory)."""
    comp = zlib.compressobj(1)
    data = b"".join([*(comp.compress(r) for r in rows_of(width, height, depth, colour, interlace)), comp.flush()])
    out = [b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0,
                                                               interlace))]
    if colour == 3:
        out.append(chunk(b"PLTE", bytes(range(3 * palette))))
    out += [chunk(b"IDAT", data[i:i + idat_size]) for i in range(0, len(data), idat_size)]
    out.append(chunk(b"IEND", b""))
    return b"".join(out)


def chunks_of(png: bytes) -> list[tuple[int, bytes, bytes]]:
    """``(offset, type, data)`` of every chunk."""
    out, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        out.append((pos, png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return out


def replace_chunk(png: bytes, index: int, data: bytes, *, crc: int | None = None) -> bytes:
    """``png`` with chunk number ``index`` holding ``data`` (same length) and ``crc`` (default: the right one)."""
    pos, kind, old = chunks_of(png)[index]
    assert len(data) == len(old)
    crc = zlib.crc32(kind + data) if crc is None else crc
    return png[:pos + 8] + data + struct.pack(">I", crc) + png[pos + 12 + len(data):]


def reject_reason(body: bytes, **kw: int) -> str:
    with pytest.raises(MediaRejected) as exc:
        check_body(body, kind="image", **kw)
    return exc.value.reason


@pytest.fixture(scope="session")
def big_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big16.png"
    path.write_bytes(make_png(BIG, BIG, depth=16, colour=2))
    return path


def peak_rss_of_check(path: Path, extra: str = "") -> tuple[dict, int]:
    """Check ``path`` in a fresh interpreter: ``(outcome, peak RSS in bytes)``, the peak read from VmHWM."""
    code = textwrap.dedent(f"""
        import json, sys
        from mediacrawler.media.integrity import MediaRejected, check_body
        out = {{}}
        try:
            c = check_body(sys.argv[1], kind="image"{extra})
            out["file"] = [c.width, c.height]
            with open(sys.argv[1], "rb") as f:
                c = check_body(f.read(), kind="image"{extra})
            out["body"] = [c.width, c.height]
        except MediaRejected as exc:
            out["rejected"] = exc.reason
        with open("/proc/self/status") as f:
            out["hwm_kib"] = int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return out, out.pop("hwm_kib") * 1024


# --- (a) the big 16-bit PNG: valid, checked in bounded memory ----------------------------------------------------
def test_big_16bit_png_is_accepted_in_bounded_memory(big_png: Path) -> None:
    assert big_png.stat().st_size < 4 * MiB
    out, peak = peak_rss_of_check(big_png)
    assert out == {"file": [BIG, BIG], "body": [BIG, BIG]}
    # A full decode holds BIG * BIG * 4 bytes = 337 MiB of pixels; the streamed check holds a few chunks.
    assert peak < 200 * MiB, f"peak RSS {peak / MiB:.0f} MiB"


def test_full_decode_of_the_big_png_is_what_the_budget_prevents(big_png: Path) -> None:
    # The control: with the budget raised above its decoded size, the same check does the full decode, and the
    # measured peak shows it (so the bound above is not an artefact of the measurement).
    out, peak = peak_rss_of_check(big_png, extra=", max_image_decode_bytes=1 << 40")
    assert out == {"file": [BIG, BIG], "body": [BIG, BIG]}
    assert peak > BIG * BIG * 4


# --- (b) corrupt big PNGs are rejected on the bounded path -------------------------------------------------------
def test_big_png_truncated_is_corrupt(big_png: Path, tmp_path: Path) -> None:
    body = big_png.read_bytes()
    for cut in (len(body) // 2, len(body) - 20, len(body) - 5):
        assert reject_reason(body[:cut]) == "corrupt-image", cut
        (tmp_path / "cut.png").write_bytes(body[:cut])
        with pytest.raises(MediaRejected) as exc:
            check_body(tmp_path / "cut.png", kind="image")
        assert exc.value.reason == "corrupt-image"


def test_big_png_with_a_corrupt_idat_byte_is_corrupt(big_png: Path, tmp_path: Path) -> None:
    body = big_png.read_bytes()
    idats = [i for i, (_, kind, _) in enumerate(chunks_of(body)) if kind == b"IDAT"]
    index = idats[len(idats) // 2]
    data = bytearray(chunks_of(body)[index][2])
    data[len(data) // 2] ^= 0x55
    # CRC recomputed: only the inflate (or the length/filter checks after it) can notice.
    assert reject_reason(replace_chunk(body, index, bytes(data))) == "corrupt-image"


def test_big_png_with_a_bad_crc_is_corrupt(big_png: Path, tmp_path: Path) -> None:
    body = big_png.read_bytes()
    idats = [i for i, (_, kind, _) in enumerate(chunks_of(body)) if kind == b"IDAT"]
    index = idats[len(idats) // 2]
    data = chunks_of(body)[index][2]
    # The data intact, its CRC wrong: only the chunk walk can notice.
    stale = replace_chunk(body, index, data, crc=zlib.crc32(b"IDAT" + data) ^ 1)
    with pytest.raises(MediaRejected) as exc:
        check_body(stale, kind="image")
    assert exc.value.reason == "corrupt-image" and "CRC" in exc.value.detail
    (tmp_path / "stale.png").write_bytes(stale)
    with pytest.raises(MediaRejected) as exc:
        check_body(tmp_path / "stale.png", kind="image")
    assert exc.value.reason == "corrupt-image" and "CRC" in exc.value.detail


# --- the streamed check agrees with Pillow on small PNGs (forced onto it with a budget of 0) ---------------------
PNG_SHAPES = [(depth, colour, interlace, w, h)
              for depth, colour in [(1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 2), (16, 2), (1, 3), (4, 3),
                                    (8, 3), (8, 4), (16, 4), (8, 6), (16, 6)]
              for interlace in (0, 1) for w, h in [(1, 1), (5, 3), (37, 29)]]


@pytest.mark.parametrize(("depth", "colour", "interlace", "w", "h"), PNG_SHAPES)
def test_streamed_png_check_accepts_what_pillow_decodes(depth: int, colour: int, interlace: int, w: int,
                                                        h: int) -> None:
    body = make_png(w, h, depth=depth, colour=colour, interlace=interlace, idat_size=7, palette=2)
    with Image.open(BytesIO(body)) as img:
        img.load()  # a valid PNG by Pillow's full decode
    full = check_body(body, kind="image")
    streamed = check_body(body, kind="image", max_image_decode_bytes=0)
    assert (streamed.width, streamed.height) == (full.width, full.height) == (w, h)
    # One row fewer (IHDR says h, the data holds h - 1 rows' worth, or a pass short): rejected.
    short = make_png(w, h + 1, depth=depth, colour=colour, interlace=interlace, palette=2)
    ihdr = bytearray(chunks_of(short)[0][2])
    ihdr[4:8] = struct.pack(">I", h + 2)
    assert reject_reason(replace_chunk(short, 0, bytes(ihdr)), max_image_decode_bytes=0) == "corrupt-image"
    # More data than the rows need: rejected too.
    ihdr[4:8] = struct.pack(">I", h)
    assert reject_reason(replace_chunk(short, 0, bytes(ihdr)), max_image_decode_bytes=0) == "corrupt-image"


def test_streamed_png_check_rejects_a_bad_filter_byte() -> None:
    w, h = 40, 30
    raw = bytearray(b"".join(rows_of(w, h, 8, 2, 0)))
    raw[(1 + 3 * w) * 17] = 5  # row 17's filter type: only 0-4 exist
    body = b"".join([b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)),
                     chunk(b"IDAT", zlib.compress(bytes(raw))), chunk(b"IEND", b"")])
    assert reject_reason(body) == "corrupt-image"  # Pillow's full decode
    assert reject_reason(body, max_image_decode_bytes=0) == "corrupt-image"


@pytest.mark.parametrize("cut", ["no-iend", "cut-in-iend", "idat-after-iend"])
def test_streamed_png_check_needs_the_whole_chunk_sequence(cut: str) -> None:
    body = make_png(50, 50, depth=8, colour=2, idat_size=100)
    if cut == "no-iend":
        body = body[:-12]
    elif cut == "cut-in-iend":
        body = body[:-3]
    else:
        body = body[:-12] + chunk(b"IEND", b"") + chunk(b"IDAT", b"x")
        # Bytes after IEND are ignored by decoders; a valid image stays valid.
        assert check_body(body, kind="image", max_image_decode_bytes=0).width == 50
        return
    assert reject_reason(body, max_image_decode_bytes=0) == "corrupt-image"


# --- other formats above the budget ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "BMP", "TIFF"])
def test_other_formats_above_the_budget_are_too_large_and_say_which_setting(fmt: str) -> None:
    body = encode(fmt, (200, 100))
    assert check_body(body, kind="image").width == 200  # within the default budget: decoded as before
    with pytest.raises(MediaRejected) as exc:
        check_body(body, kind="image", max_image_decode_bytes=200 * 100 - 1)
    assert exc.value.reason == "image-too-large" and "MEDIA_MAX_IMAGE_DECODE_BYTES" in exc.value.detail


def test_jpeg_budget_counts_the_eighth_scale_decode() -> None:
    body = encode("JPEG", (1600, 800))
    # Full size would be 1600 * 800 * 4 = 5 MB; the 1/8-scale decode is 200 * 100 * 4 = 80 kB.
    assert check_body(body, kind="image", max_image_decode_bytes=200 * 100 * 4).width == 1600
    assert reject_reason(body, max_image_decode_bytes=200 * 100 * 4 - 1) == "image-too-large"


def test_setting_default_and_committer_worker_pass_the_budget(tmp_path: Path) -> None:
    from mediacrawler import settings
    from mediacrawler.media.committer import BatchCommitter, CommitJob
    from mediacrawler.media.store import ContentAddressedStore

    assert settings.MEDIA_MAX_IMAGE_DECODE_BYTES == 128 * MiB
    assert inspect.signature(check_body).parameters["max_image_decode_bytes"].default == 128 * MiB
    gif = encode("GIF", (200, 100))
    committer = BatchCommitter(store=ContentAddressedStore(tmp_path / "files"), index=None,
                               max_image_pixels=settings.MEDIA_MAX_IMAGE_PIXELS, max_image_decode_bytes=1000,
                               max_batch=1, inline_bytes=settings.MEDIA_INLINE_CHECK_BYTES)

    async def commit() -> CommitJob:
        try:
            return await committer.commit(CommitJob(gif, kind="image", key="k", url="http://h/a.gif"))
        finally:
            await committer.close()
            committer.store.close()

    loop = asyncio.new_event_loop()  # not asyncio.run: it would unset the event loop of the installed reactor
    try:
        job = loop.run_until_complete(asyncio.wait_for(commit(), 30))
    finally:
        loop.close()
    assert getattr(job.error, "reason", None) == "image-too-large"  # the budget reaches the committer's round
