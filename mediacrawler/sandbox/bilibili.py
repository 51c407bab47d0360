"""Bilibili in the sandbox: video metadata and the ``playurl``/``view`` payloads, rendered from :mod:`.video`.

Pure (no Twisted): tests import it to compute what the sandbox serves. Every bvid matching :data:`BVID_RE`
(``BV1`` + 9 base58-ish characters) is a video whose media is :func:`mediacrawler.sandbox.video.video_package`
of the bvid itself; ``aid``/``cid``/title/stats derive from the bvid. :data:`BVIDS` are the ones the sandbox
advertises. A bvid that does not match answers ``-404``, as does a ``cid`` that is not the video's.

Payloads
========
:func:`playurl_response` — ``/x/player/wbi/playurl?bvid=&cid=&fnval=16``: ``data.dash.video[]`` (one AVC stream
per height, highest first; ``id`` is the quality number ``qn``: 64 720P, 32 480P, 16 360P) and
``data.dash.audio[]`` (id 30280), each a single-file fMP4 with a real ``sidx`` (``SegmentBase`` ranges), ``baseUrl`` on the ``cos``
mirror and one ``backupUrl`` on ``bak`` (same bytes). Without ``fnval & 16``: ``data.durl[]`` with one progressive
MP4 of quality ``qn`` (default 64). No HEVC/AV1 entries: the sandbox has no HEVC encoder it could honestly label.

:func:`view_response` — ``/x/web-interface/view?bvid=``: ``data{bvid,aid,cid,title,desc,pic,pubdate,duration,
owner{mid,name,face},stat{…},pages[{cid,page,part,duration,dimension}]}``.

:func:`nav_response` — ``/x/web-interface/nav`` (logged out): ``code -101`` with ``data.wbi_img`` (the WBI keys).

Errors: :data:`RISK_CONTROL` (``-352``), :data:`BLOCKED` (``-412``), :data:`NOT_FOUND` (``-404``).
"""

from __future__ import annotations

import re
from typing import Any

from .det import stable_hex, stable_int

__all__ = [
    "BLOCKED",
    "BVIDS",
    "BVID_RE",
    "NOT_FOUND",
    "RISK_CONTROL",
    "aid_for",
    "cid_for",
    "nav_response",
    "playurl_response",
    "view_response",
]

BVID_RE = re.compile(r"BV1[0-9A-Za-z]{9}")
BVIDS: tuple[str, ...] = ("BV1Sbx411A01", "BV1Sbx411A02", "BV1Sbx411A03")

RISK_CONTROL: dict[str, Any] = {"code": -352, "message": "风控校验失败", "ttl": 1,
                                "data": {"v_voucher": "voucher_00000000-0000-0000-0000-000000000000"}}
BLOCKED: dict[str, Any] = {"code": -412, "message": "请求被拦截", "ttl": 1, "data": None}
NOT_FOUND: dict[str, Any] = {"code": -404, "message": "啥都木有", "ttl": 1}

_QUALITY_NAMES = {64: "高清 720P", 32: "清晰 480P", 16: "流畅 360P"}
_QUALITY_FORMATS = {64: "flv720", 32: "flv480", 16: "mp4"}
_DEADLINE = 1_793_498_400  # a fixed far-future "deadline" query value (URLs are not really expiring)


def aid_for(bvid: str) -> int:
    """The numeric ``aid`` of ``bvid`` (stable)."""
    return 100_000_000 + stable_int("bili-aid", bvid, bits=40) % 900_000_000


def cid_for(bvid: str) -> int:
    """The ``cid`` of ``bvid``'s only page (stable)."""
    return 10_000_000 + stable_int("bili-cid", bvid, bits=40) % 90_000_000


def _known(bvid: str | None) -> bool:
    return bvid is not None and BVID_RE.fullmatch(bvid) is not None


def _urls(base: str, bvid: str, name: str) -> tuple[str, str]:
    sig = stable_hex("bili-upsig", bvid, name, length=32)
    query = (f"?deadline={_DEADLINE}&gen=playurlv2&os=cos&oi=0&platform=pc&upsig={sig}"
             "&uparams=deadline,gen,os&mid=0")
    primary = f"{base}/media/bili/cos/{bvid}/{name}{query}"
    backup = f"{base}/media/bili/bak/{bvid}/{name}{query.replace('os=cos', 'os=bak')}"
    return primary, backup


def playurl_response(bvid: str | None, cid: int | None, *, fnval: int = 16, qn: int | None = None,
                     base: str) -> dict[str, Any]:
    """The body of ``/x/player/wbi/playurl`` for ``bvid``/``cid`` with media URLs on ``base`` (the sandbox origin).
    Encodes the video on first use."""
    from .video import RENDITIONS, video_catalog, video_package

    if not _known(bvid) or cid != cid_for(bvid):  # type: ignore[arg-type]
        return dict(NOT_FOUND)
    assert bvid is not None
    catalog = video_catalog(bvid)
    package = video_package(bvid)
    qualities = sorted((r.qn for r in RENDITIONS), reverse=True)
    quality = qn if qn in qualities else qualities[0]
    data: dict[str, Any] = {
        "from": "local",
        "result": "suee",
        "message": "",
        "quality": quality,
        "format": _QUALITY_FORMATS[quality],
        "timelength": round(catalog.duration * 1000),
        "accept_format": ",".join(_QUALITY_FORMATS[q] for q in qualities),
        "accept_description": [_QUALITY_NAMES[q] for q in qualities],
        "accept_quality": qualities,
        "video_codecid": 7,
        "seek_param": "start",
        "seek_type": "offset",
        "support_formats": [
            {"quality": q, "format": _QUALITY_FORMATS[q], "new_description": _QUALITY_NAMES[q].split()[-1],
             "display_desc": _QUALITY_NAMES[q].split()[-1], "superscript": "", "codecs": ["avc1"]}
            for q in qualities
        ],
        "high_format": None,
        "last_play_time": 0,
        "last_play_cid": 0,
    }
    if fnval & 16:
        video = []
        for info in sorted(catalog.video, key=lambda r: -r.height):
            track = package.tracks[info.name]
            primary, backup = _urls(base, bvid, f"{cid}-1-{info.bili_stream_id}.m4s")
            video.append(_stream(
                stream_id=info.qn, primary=primary, backup=backup, bandwidth=info.average_bandwidth,
                mime="video/mp4", codecs=info.codecs, width=info.width, height=info.height,
                frame_rate=f"{info.frame_rate:g}", init=track.init_range, index=track.index_range, codecid=7,
            ))
        audio_track = package.tracks["audio"]
        primary, backup = _urls(base, bvid, f"{cid}-1-{catalog.audio.bili_id}.m4s")
        audio = [_stream(
            stream_id=catalog.audio.bili_id, primary=primary, backup=backup, bandwidth=catalog.audio.bandwidth,
            mime="audio/mp4", codecs=catalog.audio.codecs, width=0, height=0, frame_rate="",
            init=audio_track.init_range, index=audio_track.index_range, codecid=0,
        )]
        data["dash"] = {
            "duration": round(catalog.duration),
            "minBufferTime": 1.5,
            "min_buffer_time": 1.5,
            "video": video,
            "audio": audio,
            "dolby": {"type": 0, "audio": None},
            "flac": None,
        }
    else:
        info = next(r for r in catalog.video if r.qn == quality)
        primary, backup = _urls(base, bvid, f"{cid}-1-{quality}.mp4")
        data["format"] = "mp4"
        data["durl"] = [{"order": 1, "length": round(catalog.duration * 1000), "size": info.progressive_size,
                         "ahead": "", "vhead": "", "url": primary, "backup_url": [backup]}]
    return {"code": 0, "message": "0", "ttl": 1, "data": data}


def _stream(*, stream_id: int, primary: str, backup: str, bandwidth: int, mime: str, codecs: str, width: int,
            height: int, frame_rate: str, init: tuple[int, int], index: tuple[int, int],
            codecid: int) -> dict[str, Any]:
    segment_base = {"Initialization": f"{init[0]}-{init[1]}", "indexRange": f"{index[0]}-{index[1]}"}
    return {
        "id": stream_id,
        "baseUrl": primary,
        "base_url": primary,
        "backupUrl": [backup],
        "backup_url": [backup],
        "bandwidth": bandwidth,
        "mimeType": mime,
        "mime_type": mime,
        "codecs": codecs,
        "width": width,
        "height": height,
        "frameRate": frame_rate,
        "frame_rate": frame_rate,
        "sar": "1:1" if width else "",
        "startWithSap": 1,
        "start_with_sap": 1,
        "SegmentBase": segment_base,
        "segment_base": {"initialization": segment_base["Initialization"],
                         "index_range": segment_base["indexRange"]},
        "codecid": codecid,
    }


def view_response(bvid: str | None, *, base: str) -> dict[str, Any]:
    """The body of ``/x/web-interface/view?bvid=`` (no encoding needed: heights and duration are fixed)."""
    from .video import DURATION, RENDITIONS

    if not _known(bvid):
        return {"code": -400, "message": "请求错误", "ttl": 1} if bvid is None else dict(NOT_FOUND)
    assert bvid is not None
    n = stable_int("bili-meta", bvid, bits=32)
    cid = cid_for(bvid)
    top = RENDITIONS[-1]
    owner_mid = 1_000_000 + n % 9_000_000
    pubdate = 1_790_000_000 + n % 3_000_000
    duration = round(DURATION)
    return {
        "code": 0,
        "message": "0",
        "ttl": 1,
        "data": {
            "bvid": bvid,
            "aid": aid_for(bvid),
            "videos": 1,
            "tid": 17,
            "tname": "单机游戏",
            "copyright": 1,
            "pic": f"{base}/media/img/{n % 1000}.jpg",
            "title": f"沙盒测试视频 {bvid}",
            "pubdate": pubdate,
            "ctime": pubdate - 60,
            "desc": f"sandbox video {bvid}: 4 s of H.264/AAC in three heights",
            "state": 0,
            "duration": duration,
            "owner": {"mid": owner_mid, "name": f"sandbox_up_{owner_mid}",
                      "face": f"{base}/media/img/{n % 997}.jpg"},
            "stat": {"aid": aid_for(bvid), "view": n % 1_000_000, "danmaku": n % 977, "reply": n % 311,
                     "favorite": n % 5003, "coin": n % 2011, "share": n % 97, "like": n % 20011, "his_rank": 0,
                     "now_rank": 0},
            "cid": cid,
            "dimension": {"width": top.width, "height": top.height, "rotate": 0},
            "pages": [{"cid": cid, "page": 1, "from": "vupload", "part": f"P1 {bvid}", "duration": duration,
                       "vid": "", "weblink": "", "dimension": {"width": top.width, "height": top.height,
                                                              "rotate": 0}}],
        },
    }


def nav_response() -> dict[str, Any]:
    """``/x/web-interface/nav`` for a logged-out client: ``-101`` plus the WBI key images, as Bilibili answers."""
    return {
        "code": -101,
        "message": "账号未登录",
        "ttl": 1,
        "data": {
            "isLogin": False,
            "wbi_img": {
                "img_url": "https://i0.hdslb.com/bfs/wbi/7cd084941338484aae1ad9425b84077c.png",
                "sub_url": "https://i0.hdslb.com/bfs/wbi/4932caff0ff746eab6f01bf08b70ac45.png",
            },
        },
    }
