"""Unit tests of the media store's pure parts: sniffing, integrity checks, object paths.

Real bytes throughout: images are encoded with Pillow, bombs are real PNG/GIF/JPEG headers.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from mediacrawler.media.integrity import (
    MediaRejected,
    check_body,
    check_http,
    image_header_size,
)
from mediacrawler.media.sniff import sniff
from mediacrawler.media.store import StoreError, object_relpath, parse_object_relpath

SHA = "ab" * 32


def encode(fmt: str, size: tuple[int, int] = (64, 48), **kwargs: object) -> bytes:
    img = Image.effect_mandelbrot(size, (-2, -1.5, 1, 1.5), 50).convert("RGB")
    buf = io.BytesIO()
    img.save(buf, fmt, **kwargs)
    return buf.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int = 50_000, height: int = 50_000) -> bytes:
    """A PNG whose header declares width x height pixels, a few hundred bytes long."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 4096))
            + png_chunk(b"IEND", b""))


# --- sniff ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fmt", "mime", "ext"),
    [("JPEG", "image/jpeg", ".jpg"), ("PNG", "image/png", ".png"), ("GIF", "image/gif", ".gif"),
     ("WEBP", "image/webp", ".webp"), ("BMP", "image/bmp", ".bmp"), ("TIFF", "image/tiff", ".tif")],
)
def test_sniff_images_encoded_by_pillow(fmt: str, mime: str, ext: str) -> None:
    s = sniff(encode(fmt)[:4096])
    assert (s.mime, s.ext, s.family) == (mime, ext, "image")


def test_sniff_video_containers_encoded_by_pyav(tmp_path) -> None:
    av = pytest.importorskip("av")
    for container, mime, ext in (("mp4", "video/mp4", ".mp4"), ("matroska", "video/x-matroska", ".mkv"),
                                 ("webm", "video/webm", ".webm"), ("mpegts", "video/mp2t", ".ts")):
        path = tmp_path / f"v.{container}"
        codec = "libvpx" if container == "webm" else "mpeg4"
        with av.open(str(path), "w", format=container) as out:
            stream = out.add_stream(codec, rate=10)
            stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
            for i in range(3):
                frame = av.VideoFrame.from_image(Image.new("RGB", (32, 32), (i * 40, 0, 0)))
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        s = sniff(path.read_bytes()[:4096])
        assert (s.mime, s.ext, s.family) == (mime, ext, "video"), container


@pytest.mark.parametrize(
    "body",
    [b"<!DOCTYPE html><html><body>404</body></html>", b"  \n<html>", b"\xef\xbb\xbf<HTML>", b'{"ok":0}',
     b"[1,2]", b"<?xml version='1.0'?><Error/>", b"<!-- cache miss --><p>", b"", b"GIF8", b"G" * 300],
)
def test_sniff_documents_and_junk_are_not_media(body: bytes) -> None:
    assert not sniff(body).is_media


def test_sniff_extension_never_comes_from_anywhere_but_magic_bytes() -> None:
    # Whatever a server calls it, a JPEG is .jpg and an HTML page has no extension at all.
    assert sniff(encode("JPEG")).ext == ".jpg"
    assert sniff(b"<html>x.desktop</html>").ext == ""


# --- integrity --------------------------------------------------------------------------------------------------
def test_check_http_accepts_whole_bodies() -> None:
    check_http(status=200, body_size=10, content_length="10", content_range=None)
    check_http(status=200, body_size=10, content_length=None, content_range=None)
    check_http(status=206, body_size=10, content_length="10", content_range="bytes 0-9/10")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"status": 404}, "http-404"),
        ({"status": 302}, "http-302"),
        ({"status": 200, "content_length": "20"}, "size-mismatch"),
        ({"status": 200, "content_length": "ten"}, "size-mismatch"),
        ({"status": 206, "content_range": "bytes 5-9/10"}, "partial-content"),
        ({"status": 206, "content_range": "bytes 0-9/*"}, "partial-content"),
        ({"status": 206, "content_range": None}, "partial-content"),
        ({"status": 200, "flags": ["dataloss"]}, "dataloss"),
        ({"status": 200, "body_size": 0, "content_length": "0"}, "empty-body"),
    ],
)
def test_check_http_rejections(kwargs: dict, reason: str) -> None:
    args = {"body_size": 10, "content_length": None, "content_range": None, **kwargs}
    with pytest.raises(MediaRejected) as exc:
        check_http(**args)
    assert exc.value.reason == reason


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP"])
def test_header_size_matches_pillow(fmt: str) -> None:
    body = encode(fmt, (123, 45))
    assert image_header_size(body) == (123, 45)
    checked = check_body(body, kind="image")
    assert (checked.width, checked.height, checked.size) == (123, 45, len(body))


def test_header_size_of_progressive_jpeg_and_lossless_webp() -> None:
    assert image_header_size(encode("JPEG", (77, 66), progressive=True)) == (77, 66)
    assert image_header_size(encode("WEBP", (77, 66), lossless=True)) == (77, 66)


def test_png_bomb_rejected_from_its_header_before_decoding() -> None:
    with pytest.raises(MediaRejected) as exc:
        check_body(png_bomb(), kind="image")
    assert exc.value.reason == "image-too-large"
    assert "50000x50000" in str(exc.value)


def test_gif_and_jpeg_with_huge_declared_dimensions_are_rejected() -> None:
    gif = bytearray(encode("GIF", (10, 10)))
    gif[6:10] = struct.pack("<HH", 65535, 65535)
    with pytest.raises(MediaRejected, match="image-too-large"):
        check_body(bytes(gif), kind="image")
    jpeg = bytearray(encode("JPEG", (10, 10)))
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    with pytest.raises(MediaRejected, match="image-too-large"):
        check_body(bytes(jpeg), kind="image")


def test_pixel_cap_is_a_parameter() -> None:
    body = encode("PNG", (100, 100))
    check_body(body, kind="image", max_image_pixels=10_000)
    with pytest.raises(MediaRejected, match="image-too-large"):
        check_body(body, kind="image", max_image_pixels=9_999)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP"])
def test_truncated_images_are_rejected(fmt: str) -> None:
    body = encode(fmt, (200, 150))
    for cut in (len(body) // 2, len(body) - 3):
        with pytest.raises(MediaRejected) as exc:
            check_body(body[:cut], kind="image")
        assert exc.value.reason == "corrupt-image", (fmt, cut)


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
def test_jpeg_structure_check_rejects_every_cut_and_allows_trailing_bytes(progressive: bool) -> None:
    # Photos are checked by structure, not decoded (docs/media.md, "Image checks"): a cut anywhere after the first
    # start of scan leaves no EOI after it; bytes after EOI are ignored, as decoders ignore them.
    body = encode("JPEG", (160, 120), progressive=progressive, restart_marker_blocks=4)
    scan = body.index(b"\xff\xda")
    for cut in range(scan, len(body) - 1, max(1, (len(body) - scan) // 97)):
        with pytest.raises(MediaRejected) as exc:
            check_body(body[:cut], kind="image")
        assert exc.value.reason == "corrupt-image", cut
    assert check_body(body + b"\xff\xd8 trailing", kind="image").width == 160
    without_frame = body.replace(b"\xff\xc0", b"\xff\xfe", 1).replace(b"\xff\xc2", b"\xff\xfe", 1)
    with pytest.raises(MediaRejected, match="corrupt-image"):
        check_body(without_frame, kind="image")


def test_html_served_as_jpeg_is_not_media() -> None:
    with pytest.raises(MediaRejected) as exc:
        check_body(b"<!DOCTYPE html><html><title>Error</title></html>", kind="image")
    assert exc.value.reason == "not-media"
    assert "text/html" in str(exc.value)


def test_kind_mismatch() -> None:
    with pytest.raises(MediaRejected, match="kind-mismatch"):
        check_body(encode("JPEG"), kind="video")


# --- object paths -----------------------------------------------------------------------------------------------
def test_object_relpath_layout() -> None:
    assert object_relpath(sha256=SHA, ext=".jpg") == f"objects/ab/ab/{SHA}.jpg"
    assert parse_object_relpath(f"objects/ab/ab/{SHA}.jpg") == (SHA, ".jpg")
    assert parse_object_relpath(f"objects/ab/ab/{SHA}") == (SHA, "")


HOSTILE_NAMES = [
    "../x", "..\\x", "/etc/x", "C:\\x", "%2e%2e%2f", "%252e%252e", "a\0b", "\u2025/", "\uff0e\uff0e\uff0f",
    "x" * 300, "CON", "x. ", ".desktop", ".lnk", "../../x", "/abs", f"../{SHA}", f"objects/ab/ab/{SHA}/../../x",
    f"objects/ab/cd/{SHA}.jpg", f"objects/ab/ab/{SHA}.JPG", f"objects/ab/ab/{SHA}.desktop1",
    f"/objects/ab/ab/{SHA}.jpg", f"objects/ab/ab/{SHA}.jpg/", f"objects//ab/ab/{SHA}.jpg",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_never_become_object_paths(name: str) -> None:
    with pytest.raises(StoreError):
        parse_object_relpath(name)
    with pytest.raises(StoreError):
        object_relpath(sha256=name, ext=".jpg")
    with pytest.raises(StoreError):
        object_relpath(sha256=SHA, ext=name)


# --- the same checks on a file (large images spooled in Range segments) ------------------------------------------
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_check_body_of_a_file_agrees_with_bytes(tmp_path: Path, fmt: str) -> None:
    body = encode(fmt, (120, 90))
    path = tmp_path / "spool.part"
    path.write_bytes(body)
    from_file, from_body = check_body(path, kind="image"), check_body(body, kind="image")
    assert from_file == from_body and (from_file.width, from_file.height, from_file.size) == (120, 90, len(body))


@pytest.mark.parametrize(("body", "reason"), [
    (encode("PNG", (120, 90))[:-300], "corrupt-image"),  # cut
    (png_bomb(), "image-too-large"),
    (b"<!doctype html><html>not a picture</html>", "not-media"),
    (b"\x1aE\xdf\xa3" + bytes(64), "kind-mismatch"),  # a Matroska/WebM head declared as an image
], ids=["truncated", "bomb", "html", "video"])
def test_check_body_of_a_file_rejects_like_bytes(tmp_path: Path, body: bytes, reason: str) -> None:
    path = tmp_path / "spool.part"
    path.write_bytes(body)
    with pytest.raises(MediaRejected) as exc:
        check_body(path, kind="image")
    assert exc.value.reason == reason


# --- documents (subtitle, danmaku): docs/media.md "Documents" ----------------------------------------------------
@pytest.mark.parametrize(("body", "kind", "ext"), [
    (b'{"body": [{"from": 0, "to": 1, "content": "x"}]}', "subtitle", ".json"),
    (b"\xef\xbb\xbf1\n00:00:00,000 --> 00:00:01,000\nx\n", "subtitle", ".srt"),
    ('<?xml version="1.0" encoding="UTF-8"?><i><d p="0,1">喵</d></i>'.encode(), "danmaku", ".xml"),
])
def test_check_body_accepts_well_formed_documents(body: bytes, kind: str, ext: str) -> None:
    checked = check_body(body, kind=kind)
    assert checked.sniffed.ext == ext and checked.size == len(body)
    assert object_relpath(sha256=SHA, ext=ext).endswith(ext)


@pytest.mark.parametrize(("body", "kind"), [
    (b'{"body": [', "subtitle"),                       # cut short
    (b"<html><body>403</body></html>", "subtitle"),   # an error page
    (b"\x89PNG\r\n\x1a\n", "subtitle"),
    (b"<i><d>unclosed</i>", "danmaku"),
    (b'<?xml version="1.0"?><!DOCTYPE i [<!ENTITY a "aaaa">]><i>&a;</i>', "danmaku"),  # entity expansion
    (b'{"a": 1}', "danmaku"),
    (b"\xff\xfe<\x00i\x00>\x00", "danmaku"),          # not UTF-8
])
def test_check_body_refuses_broken_documents(body: bytes, kind: str) -> None:
    with pytest.raises(MediaRejected) as exc:
        check_body(body, kind=kind)
    assert exc.value.reason == "not-document"


def test_a_document_extension_is_never_an_image_or_video_asset() -> None:
    # sniff never returns a document extension: a JSON body declared as an image stays refused.
    with pytest.raises(MediaRejected, match="not-media"):
        check_body(b'{"body": []}', kind="image")
