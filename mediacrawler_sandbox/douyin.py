"""Douyin in the sandbox: a small deterministic world of awemes and the pages and answers rendered from it.

Reference: docs/sandbox.md, "douyin.py".
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .det import stable_int
from .media import generic_image
from .video import DURATION, FPS, RENDITIONS, encode_tone, paint_frame

__all__ = [
    "ALBUM_AWEME",
    "ALBUM_IMAGES",
    "ALBUM_LIVE_IMAGES",
    "BYTEVC2_AWEME",
    "AWEMES",
    "GONE_AWEME",
    "HEVC_HEIGHTS",
    "MUSIC_SECONDS",
    "NOT_FOUND_CODE",
    "SHORT_LINKS",
    "VIDEO_AWEMES",
    "Aweme",
    "album_image_numbers",
    "aweme_object",
    "detail_response",
    "hevc_file",
    "live_clip_id",
    "music_file",
    "router_json",
    "share_page",
    "short_link_target",
]

VIDEO_AWEMES: tuple[str, ...] = ("7300000000000000101", "7300000000000000102")
ALBUM_AWEME = "7300000000000000201"
#: A video whose ``bit_rate[]`` is ByteVC2 only, its H.264 file in ``play_addr_h264``.
BYTEVC2_AWEME = "7300000000000000103"
BYTEVC2_HEIGHTS: tuple[int, ...] = (720, 480)
GONE_AWEME = "7300000000000000404"
ALBUM_IMAGES = 3
#: Positions (from 1) of the album's pictures that are Live Photos, each with a motion clip of its own.
ALBUM_LIVE_IMAGES: tuple[int, ...] = (2,)
MUSIC_ID = "7200000000000000201"
MUSIC_SECONDS = 3
#: ``status_code`` of the detail API for an id the world does not have.
NOT_FOUND_CODE = 2053
HEVC_HEIGHTS: tuple[int, ...] = (720, 480)
SHORT_LINKS: dict[str, str] = {"iSbxV101": VIDEO_AWEMES[0], "iSbxA201": ALBUM_AWEME, "iSbxGone": GONE_AWEME}
_NOW = 1764400000  # 2025-11-29T07:06:40Z, the world's "now" (create times are before it)
_GONE_REASON = ("status_deleted", "因作品权限或已被删除，无法观看，去看看其他作品吧")


@dataclass(frozen=True)
class Aweme:
    """One item of the world."""

    aweme_id: str
    kind: str  # "video" | "album"
    desc: str
    create_time: int
    uid: str
    nickname: str


AWEMES: dict[str, Aweme] = {
    VIDEO_AWEMES[0]: Aweme(VIDEO_AWEMES[0], "video",
                           "沙盒视频一 #测试 </script><b>不是标签</b> a/b \\ \"q\"", _NOW - 3600, "93000000001", "沙盒作者"),
    VIDEO_AWEMES[1]: Aweme(VIDEO_AWEMES[1], "video", "沙盒视频二 😀", _NOW - 7200, "93000000001", "沙盒作者"),
    BYTEVC2_AWEME: Aweme(BYTEVC2_AWEME, "video", "沙盒视频三 ByteVC2", _NOW - 10800, "93000000001", "沙盒作者"),
    ALBUM_AWEME: Aweme(ALBUM_AWEME, "album", "三张图 + 背景音乐", _NOW - 86400, "93000000002",
                       "图文作者"),
}


def album_image_numbers(aweme_id: str) -> list[int]:
    """The ``/media/img/{n}.jpg`` numbers of an album's pictures, in order."""
    base = int(aweme_id[-3:]) * 1000
    return [base + i for i in range(1, ALBUM_IMAGES + 1)]


def live_clip_id(aweme_id: str, n: int) -> str:
    """The sandbox video id of the motion clip of picture ``n`` (from 1) of an album: its file is
    ``/media/progressive/{id}/360p.mp4`` (:func:`mediacrawler_sandbox.video.video_file`)."""
    return f"live{aweme_id}_{n}"


def _live_clip(aweme_id: str, n: int, base: str) -> dict[str, Any]:
    """``images[].video`` of a Live Photo, as the web detail API lists it: ``play_addr`` and one ``bit_rate``
    file (the same ``url_key``), its size and duration."""
    spec = RENDITIONS[0]
    clip = live_clip_id(aweme_id, n)
    addr = {"uri": f"v0300fg10000{clip}",
            "url_list": _url_list(f"{base}/media/progressive/{clip}/{spec.name}.mp4"),
            "width": spec.width, "height": spec.height,
            "url_key": f"v0300fg10000{clip}_h264_{spec.height}p_300000"}
    return {"play_addr": addr, "width": spec.width, "height": spec.height, "duration": int(DURATION * 1000),
            "bit_rate": [{"gear_name": f"adapt_{spec.height}_0", "quality_type": 24, "bit_rate": 300_000,
                          "is_h265": 0, "is_bytevc1": 0, "FPS": FPS, "format": "mp4", "play_addr": dict(addr)}]}


def _cover(aweme_id: str, base: str) -> dict[str, Any]:
    n = int(aweme_id[-3:])
    width, height = _image_size(n)
    return {"uri": f"tos-cn-p-0015/sbxcover{n}", "url_list": _url_list(f"{base}/media/img/{n}.jpg"),
            "width": width, "height": height}


def router_json(obj: Any) -> str:
    """JSON as the share page embeds it: non-ASCII as is; ``/``, ``<``, ``>``, U+2028/9 escaped."""
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (body.replace("/", "\\u002F").replace("<", "\\u003C").replace(">", "\\u003E")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _url_list(url: str) -> list[str]:
    return [url, f"{url}?cdn=backup"]


def _statistics(aweme_id: str) -> dict[str, int]:
    n = stable_int("douyin-stats", aweme_id, bits=20)
    return {"digg_count": 1000 + n % 90000, "comment_count": n % 900, "share_count": n % 97, "play_count": 0,
            "collect_count": n % 51}


def _bit_rate(aweme_id: str, base: str) -> list[dict[str, Any]]:
    by_height = {r.height: r for r in RENDITIONS}
    out: list[dict[str, Any]] = []
    for height, hevc in ((720, True), (720, False), (480, True), (480, False), (360, False)):
        spec = by_height[height]
        url = (f"{base}/douyin/media/hevc/{aweme_id}/{spec.name}.mp4" if hevc
               else f"{base}/media/progressive/{aweme_id}/{spec.name}.mp4")
        gear = f"{'normal' if hevc else 'adapt'}_{height}_0"
        out.append({
            "gear_name": gear, "quality_type": (10 if hevc else 20) + RENDITIONS.index(spec),
            "bit_rate": 300_000 * (RENDITIONS.index(spec) + 1) - (50_000 if hevc else 0),
            "play_addr": {"uri": f"v0200fg10000{aweme_id}{gear}", "url_list": _url_list(url),
                          "width": spec.width, "height": spec.height, "url_key": f"{aweme_id}_{gear}"},
            "is_h265": int(hevc), "is_bytevc1": int(hevc), "HDR_type": "", "FPS": FPS, "format": "mp4",
        })
    return out


def _bytevc2_video(aweme_id: str, base: str) -> dict[str, Any]:
    by_height = {r.height: r for r in RENDITIONS}
    uri = f"v0d00fg10000{aweme_id}"
    bit_rate = []
    for n, height in enumerate(BYTEVC2_HEIGHTS, start=1):
        spec, rate = by_height[height], 400_000 - 100_000 * n
        url = f"{base}/douyin/media/bytevc2/{aweme_id}/{spec.name}.mp4"
        bit_rate.append({
            "gear_name": f"{height}_{n}_2", "quality_type": 14 + n, "bit_rate": rate, "format": "mp4",
            "play_addr": {"uri": uri, "url_list": _url_list(url),
                          "width": spec.width, "height": spec.height, "data_size": rate,
                          "url_key": f"{uri}_bytevc2_{height}p_{rate}"},
            "is_h265": 2, "is_bytevc1": 2, "HDR_type": "", "FPS": FPS, "video_extra": "{}",
        })
    top = by_height[720]
    h264 = {"uri": uri, "url_list": _url_list(f"{base}/media/progressive/{aweme_id}/{top.name}.mp4"),
            "width": top.width, "height": top.height, "url_key": f"{uri}_h264_720p_990524"}
    return {"play_addr": dict(h264), "play_addr_h264": h264, "bit_rate": bit_rate, "width": top.width,
            "height": top.height, "duration": int(DURATION * 1000), "is_h265": 0,
            "cover": _cover(aweme_id, base)}


def aweme_object(aweme_id: str, base: str) -> dict[str, Any] | None:
    """The aweme object (share page item and ``aweme_detail`` alike) of ``aweme_id`` with media on ``base``
    (the sandbox origin), or ``None`` when the world has no such item."""
    item = AWEMES.get(aweme_id)
    if item is None:
        return None
    obj: dict[str, Any] = {
        "aweme_id": item.aweme_id, "desc": item.desc, "create_time": item.create_time,
        "aweme_type": 68 if item.kind == "album" else 0,
        "author": {"uid": item.uid, "nickname": item.nickname, "sec_uid": f"MS4wLjABAAAA{item.uid}",
                   "avatar_thumb": {"url_list": _url_list(f"{base}/media/img/{int(item.uid) % 1000}.jpg")}},
        "statistics": _statistics(aweme_id),
        "share_url": f"https://www.iesdouyin.com/share/video/{aweme_id}/",
    }
    if item.kind == "video":
        top = RENDITIONS[-1]
        obj["video"] = {
            "play_addr": {"uri": f"v0200fg10000{aweme_id}",
                          "url_list": _url_list(f"{base}/media/progressive/{aweme_id}/{top.name}.mp4")},
            "cover": _cover(aweme_id, base),
            "width": top.width, "height": top.height, "ratio": top.name, "duration": int(DURATION * 1000),
            "bit_rate": _bit_rate(aweme_id, base),
        }
        if aweme_id == BYTEVC2_AWEME:
            obj["video"] = _bytevc2_video(aweme_id, base)
        obj["images"] = None
        obj["music"] = {"id": int(MUSIC_ID) - 1, "id_str": str(int(MUSIC_ID) - 1),
                        "title": "@沙盒作者创作的原声", "play_url": {"url_list": []}, "duration": int(DURATION)}
    else:
        obj["video"] = {"play_addr": {"uri": MUSIC_ID, "url_list": []}, "cover": {"url_list": []},
                        "width": 1080, "height": 1440, "duration": 0, "bit_rate": []}
        obj["images"] = [{"uri": f"tos-cn-i-0813/sbx{n}", "url_list": _url_list(f"{base}/media/img/{n}.jpg"),
                          "download_url_list": [], "width": w, "height": h}
                         for n in album_image_numbers(aweme_id) for w, h in [_image_size(n)]]
        for position in ALBUM_LIVE_IMAGES:
            obj["images"][position - 1]["video"] = _live_clip(aweme_id, position, base)
        obj["music"] = {"id": int(MUSIC_ID), "id_str": MUSIC_ID, "title": "轻快的歌", "author": "沙盒音乐人",
                        "play_url": {"uri": f"{base}/douyin/media/music/{MUSIC_ID}.mp3",
                                     "url_list": _url_list(f"{base}/douyin/media/music/{MUSIC_ID}.mp3")},
                        "duration": MUSIC_SECONDS}
    return obj


@lru_cache(maxsize=64)
def _image_size(n: int) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(generic_image(n))) as image:
        return image.size


def _video_info(aweme_id: str, base: str) -> dict[str, Any]:
    item = aweme_object(aweme_id, base)
    filters: list[dict[str, Any]] = []
    if aweme_id == GONE_AWEME:
        filters.append({"aweme_id": aweme_id, "filter_reason": _GONE_REASON[0], "detail_msg": _GONE_REASON[1],
                        "notice": ""})
    return {"status_code": 0, "item_list": [item] if item else [], "filter_list": filters,
            "extra": {"now": _NOW * 1000, "logid": f"2025112915{aweme_id[-6:]}"}}


def share_page(aweme_id: str, base: str) -> str:
    """The HTML of ``/share/video/{aweme_id}/`` (see the module docstring)."""
    item = AWEMES.get(aweme_id)
    route = "note_(id)/page" if item is not None and item.kind == "album" else "video_(id)/page"
    data = {"loaderData": {"$": {"deviceInfo": {"isMobile": False}}, route: {
        "videoInfoRes": _video_info(aweme_id, base), "isSpider": False, "logId": "sandbox"}}, "errors": None}
    return ("<!DOCTYPE html><html lang=\"zh-CN\"><head><meta charset=\"utf-8\"><title>抖音</title>"
            "<script>window.__pace_f = [];</script></head><body><div id=\"root\"></div>"
            f"<script>window._ROUTER_DATA = {router_json(data)}</script>"
            "<script src=\"/douyin/static/main.js\" defer></script></body></html>\n")


def detail_response(aweme_id: str | None, base: str) -> dict[str, Any]:
    """The ``/aweme/v1/web/aweme/detail/`` answer for ``aweme_id`` (with a cookie)."""
    if aweme_id == GONE_AWEME:
        return {"status_code": 0, "aweme_detail": None, "filter_detail": {
            "aweme_id": aweme_id, "filter_reason": _GONE_REASON[0], "detail_msg": _GONE_REASON[1]}}
    item = aweme_object(aweme_id, base) if aweme_id else None
    if item is None:
        return {"status_code": NOT_FOUND_CODE, "status_msg": "作品不存在", "aweme_detail": None}
    return {"status_code": 0, "aweme_detail": item, "log_pb": {"impr_id": "sandbox"}}


def short_link_target(code: str, base: str) -> str | None:
    """Where ``/v/{code}/`` redirects: the share page on ``base`` (with the tracking query Douyin adds)."""
    aweme_id = SHORT_LINKS.get(code)
    if aweme_id is None:
        return None
    kind = "note" if aweme_id in AWEMES and AWEMES[aweme_id].kind == "album" else "video"
    return f"{base}/douyin/share/{kind}/{aweme_id}/?region=CN&mid={MUSIC_ID}&u_code=sbx&did=1&with_sec_did=1"


# --- media ------------------------------------------------------------------------------------------------------

@lru_cache(maxsize=8)
def hevc_file(aweme_id: str, name: str) -> bytes | None:
    """``/douyin/media/hevc/{aweme}/{name}.mp4``: a faststart MP4 of HEVC (libx265, a keyframe a second) and
    AAC, :data:`DURATION` seconds, for a video of the world at a height of :data:`HEVC_HEIGHTS`; else ``None``."""
    spec = next((r for r in RENDITIONS if r.name == name and r.height in HEVC_HEIGHTS), None)
    item = AWEMES.get(aweme_id)
    if spec is None or item is None or item.kind != "video":
        return None
    import av

    w, h = spec.width, spec.height
    rng = stable_int("douyin-hevc-colours", aweme_id, bits=48)
    background = ((rng >> 40) & 0xFF, (rng >> 32) & 0xFF, (rng >> 24) & 0xFF)
    box = (255 - background[0], (rng >> 16) & 0xFF, (rng >> 8) & 0xFF)
    total = int(FPS * DURATION)
    fd, path = tempfile.mkstemp(prefix="sandbox-hevc-", suffix=".mp4")
    os.close(fd)
    try:
        with av.open(path, "w", format="mp4", options={"movflags": "+faststart"}) as out:
            vstream = out.add_stream("libx265", rate=FPS, options={
                "preset": "ultrafast", "crf": "34",
                "x265-params": f"keyint={FPS}:min-keyint={FPS}:bframes=0:log-level=error:pools=none:frame-threads=1",
            })
            vstream.width, vstream.height, vstream.pix_fmt = w, h, "yuv420p"
            vstream.codec_context.thread_count = 1
            astream = out.add_stream("aac", rate=48000)
            astream.layout = "stereo"  # type: ignore[union-attr]
            for i in range(total):
                x = i * (w - w // 8) // total
                frame = paint_frame(w, h, background, [(x, h // 3, x + w // 8, h // 3 + h // 6, box)])
                frame.pts = i
                out.mux(vstream.encode(frame))
            out.mux(vstream.encode())
            encode_tone(out, astream, frames=int(DURATION * 48000) // 1024, frame_samples=1024, rate=48000, period=120)
        with open(path, "rb") as fh:
            return fh.read()
    finally:
        os.unlink(path)


@lru_cache(maxsize=4)
def music_file(music_id: str) -> bytes | None:
    """``/douyin/media/music/{music_id}.mp3``: :data:`MUSIC_SECONDS` s of a stereo tone as MP3 (libmp3lame,
    ID3v2 header), for the world's music id; else ``None``."""
    if music_id != MUSIC_ID:
        return None
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp3") as out:
        stream = out.add_stream("libmp3lame", rate=44100)
        stream.layout = "stereo"  # type: ignore[union-attr]
        stream.bit_rate = 128_000
        encode_tone(out, stream, frames=int(MUSIC_SECONDS * 44100) // 1152, frame_samples=1152, rate=44100,
                    period=100)
    return buf.getvalue()


