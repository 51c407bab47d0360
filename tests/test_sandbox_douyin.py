"""The sandbox's Douyin mount over real HTTP: share pages with window._ROUTER_DATA, the detail API (cookie only),
short links that redirect, and real media at several heights (H.264 and HEVC) plus an album's pictures and MP3.

Answers are read with the crawler's own parser (:mod:`mediacrawler.parsers.douyin`), so these tests also prove
the sandbox speaks what the client understands; expectations come from the pure model
(:mod:`mediacrawler_sandbox.douyin`).
"""

from __future__ import annotations

import hashlib
import io
import json
import urllib.error
import urllib.request
from typing import Any

import av
import pytest
from PIL import Image

from mediacrawler.media.manifests import select
from mediacrawler.media.renditions import manifest_from_renditions
from mediacrawler.parsers import douyin as parser
from mediacrawler_sandbox import douyin, media, video
from mediacrawler_sandbox.process import SandboxProcess


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def fetch(url: str, headers: dict[str, str] | None = None, *, follow: bool = True) -> tuple[int, dict[str, str],
                                                                                            bytes]:
    """(status, headers, body) without raising on 3xx/4xx/5xx."""
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def dy(sandbox: SandboxProcess) -> SandboxProcess:
    sandbox.reset()
    return sandbox


def test_share_page_of_a_video_lists_h264_and_hevc_files_that_exist_at_their_heights(dy: SandboxProcess) -> None:
    aweme = douyin.VIDEO_AWEMES[0]
    status, headers, body = fetch(f"{dy.url}/douyin/share/video/{aweme}/")
    html = body.decode("utf-8")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "window._ROUTER_DATA = " in html and "\\u002F" in html and html.count("</script>") == 3
    post = parser.parse_share_page(html, aweme=aweme)
    assert post.text == douyin.AWEMES[aweme].desc  # "</script>" inside the description survived, escaped
    [asset, cover] = post.media
    # The cover: the world's picture for this aweme, at its stated size, naming the video.
    n = int(aweme[-3:])
    assert (cover.key, cover.cover_of) == (f"cover:{aweme}", f"video:{aweme}")
    status, headers, data = fetch(cover.url)
    assert status == 200 and data == media.generic_image(n) and headers["Content-Type"] == "image/jpeg"
    with Image.open(io.BytesIO(data)) as image:
        assert (cover.width, cover.height) == image.size
    assert asset.renditions is not None
    assert [(r["height"], r["codec"]) for r in asset.renditions] == [
        (720, "hevc"), (720, "avc1"), (480, "hevc"), (480, "avc1"), (360, "avc1")]
    catalog = video.video_catalog(aweme)
    for rendition in asset.renditions:
        status, _, data = fetch(rendition["url"])
        assert status == 200, rendition["url"]
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.video[0]
            assert (stream.codec_context.height, stream.codec_context.name) == (
                rendition["height"], "hevc" if rendition["codec"] == "hevc" else "h264")
            assert container.streams.audio
        if rendition["codec"] == "avc1":
            assert hashlib.sha256(data).hexdigest() == catalog.rendition(rendition["height"]).progressive_sha256
        status, _, again = fetch(rendition["alternates"][0])  # the backup CDN serves the same bytes
        assert status == 200 and again == data
    chosen = select(manifest_from_renditions(asset.renditions), max_height=480, codec_preference=["hevc"]).video
    assert (chosen.height, chosen.codec) == (480, "hevc")


def test_hevc_media_honour_range(dy: SandboxProcess) -> None:
    url = f"{dy.url}/douyin/media/hevc/{douyin.VIDEO_AWEMES[0]}/480p.mp4"
    full = douyin.hevc_file(douyin.VIDEO_AWEMES[0], "480p")
    assert full is not None
    status, headers, body = fetch(url, {"Range": "bytes=100-199"})
    assert status == 206 and body == full[100:200] and headers["Content-Range"] == f"bytes 100-199/{len(full)}"
    assert fetch(url, {"Range": f"bytes={len(full)}-"})[0] == 416
    assert fetch(f"{dy.url}/douyin/media/hevc/{douyin.VIDEO_AWEMES[0]}/360p.mp4")[0] == 404  # no HEVC at 360p


def test_album_share_page_images_and_music(dy: SandboxProcess) -> None:
    status, _, body = fetch(f"{dy.url}/douyin/share/video/{douyin.ALBUM_AWEME}/")
    assert status == 200 and '"note_(id)\\u002Fpage"' in body.decode()
    post = parser.parse_share_page(body.decode("utf-8"), aweme=douyin.ALBUM_AWEME)
    # Picture 2 is a Live Photo: its clip follows it, naming it; the clip is a real 360p MP4 of its own.
    assert [(a.kind, a.live_of) for a in post.media] == [
        ("image", None), ("image", None), ("video", f"{douyin.ALBUM_AWEME}:2"), ("image", None), ("audio", None)]
    assert douyin.ALBUM_LIVE_IMAGES == (2,)
    clip = post.media[2]
    status, headers, data = fetch(clip.url)
    assert status == 200 and headers["Content-Type"] == "video/mp4"
    assert data == video.video_file(["progressive", douyin.live_clip_id(douyin.ALBUM_AWEME, 2), "360p.mp4"])[0]
    with av.open(io.BytesIO(data)) as container:
        assert container.streams.video[0].codec_context.height == 360 and container.streams.audio
    for asset in [a for a in post.media if a.kind == "image"]:
        status, headers, data = fetch(asset.url)
        assert status == 200 and data[:3] == b"\xff\xd8\xff" and headers["Content-Type"] == "image/jpeg"
    status, headers, data = fetch(post.media[-1].url)
    assert status == 200 and data[:3] == b"ID3" and headers["Content-Type"] == "audio/mpeg"
    with av.open(io.BytesIO(data)) as container:
        assert container.streams.audio and not container.streams.video
        assert container.duration / 1e6 == pytest.approx(douyin.MUSIC_SECONDS, abs=0.2)


def test_detail_api_needs_a_cookie_and_says_what_is_unavailable(dy: SandboxProcess) -> None:
    aweme = douyin.VIDEO_AWEMES[1]
    url = f"{dy.url}/douyin/aweme/v1/web/aweme/detail/?aweme_id={aweme}&aid=6383"
    status, _, body = fetch(url)
    assert status == 200 and body == b""  # no session: an empty body, as the real API answers
    status, _, body = fetch(url, {"Cookie": "sessionid=sbx"})
    payload = json.loads(body)
    assert status == 200 and payload["status_code"] == 0
    post = parser.parse_detail(payload, aweme=aweme)
    assert post.post_id == aweme and post.media[0].kind == "video" and post.extra["read_from"] == "detail"
    gone = parser.parse_detail(json.loads(fetch(url.replace(aweme, douyin.GONE_AWEME), {"Cookie": "x=1"})[2]),
                               aweme=douyin.GONE_AWEME)
    assert gone.deleted and "status_deleted" in gone.extra["unavailable"]
    unknown = "7300000000000099999"
    missing = parser.parse_detail(json.loads(fetch(url.replace(aweme, unknown), {"Cookie": "x=1"})[2]), aweme=unknown)
    assert missing.deleted and f"status_code {douyin.NOT_FOUND_CODE}" in missing.extra["unavailable"]
    logged = [r for r in dy.requests() if r["path"].endswith("/aweme/detail/")]
    assert [r["cookie"] for r in logged] == [False, True, True, True]  # presence only: never its value


def test_gone_item_share_page_has_a_filter_list(dy: SandboxProcess) -> None:
    body = fetch(f"{dy.url}/douyin/share/video/{douyin.GONE_AWEME}/")[2].decode("utf-8")
    post = parser.parse_share_page(body, aweme=douyin.GONE_AWEME)
    assert post.deleted and post.extra["unavailable"].startswith("filtered: status_deleted")


def test_short_links_redirect_to_the_share_page(dy: SandboxProcess) -> None:
    status, headers, _ = fetch(f"{dy.url}/douyin/v/iSbxV101/", follow=False)
    assert status == 302
    target = headers["Location"]
    assert target.startswith(f"{dy.url}/douyin/share/video/{douyin.VIDEO_AWEMES[0]}/?region=CN")
    assert parser.aweme_id_from_url(target) == douyin.VIDEO_AWEMES[0]
    status, _, body = fetch(f"{dy.url}/douyin/v/iSbxA201/")  # followed: the album's share page
    assert status == 200 and parser.parse_share_page(body.decode(), aweme=douyin.ALBUM_AWEME).media
    assert fetch(f"{dy.url}/douyin/v/nope1234/", follow=False)[0] == 404


def test_douyin_latency_knob_delays_this_mount_only(dy: SandboxProcess) -> None:
    import time

    dy.set_faults(douyin_latency_ms=400)
    started = time.monotonic()
    assert fetch(f"{dy.url}/douyin/share/video/{douyin.VIDEO_AWEMES[1]}/")[0] == 200
    assert time.monotonic() - started >= 0.4
    started = time.monotonic()
    assert fetch(f"{dy.url}/media/img/1.jpg")[0] == 200
    assert time.monotonic() - started < 0.4
