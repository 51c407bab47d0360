"""Bilibili in the sandbox: creators, search, video metadata and the ``playurl``/``view`` payloads, rendered from
:mod:`.video`.

Reference: docs/sandbox.md, "bilibili.py".
"""

from __future__ import annotations

import hashlib
import hmac
import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from . import durl
from .bilibili_ids import BVID_RE, BVIDS, aid_for, cid_for
from .det import stable_hex, stable_int
from .video import DURATION, RENDITIONS, video_catalog, video_package

__all__ = [
    "BAD_REQUEST",
    "BLOCKED",
    "BVIDS",
    "BVID_RE",
    "CREATORS",
    "DURL_BVID",
    "DURL_SEGMENTS",
    "MULTIPART_BVID",
    "MANY_PARTS_BVID",
    "NOT_FOUND",
    "RISK_CONTROL",
    "UNION_BVID",
    "UPLOADS",
    "WBI_IMG_KEY",
    "WBI_REJECTED",
    "WBI_SUB_KEY",
    "Upload",
    "aid_for",
    "arc_search_response",
    "cid_for",
    "creator_uploads",
    "nav_response",
    "parts_of",
    "playurl_response",
    "search_response",
    "view_response",
    "wbi_signature_ok",
]


RISK_CONTROL: dict[str, Any] = {"code": -352, "message": "风控校验失败", "ttl": 1,
                                "data": {"v_voucher": "voucher_00000000-0000-0000-0000-000000000000"}}
BLOCKED: dict[str, Any] = {"code": -412, "message": "请求被拦截", "ttl": 1, "data": None}
NOT_FOUND: dict[str, Any] = {"code": -404, "message": "啥都木有", "ttl": 1}
BAD_REQUEST: dict[str, Any] = {"code": -400, "message": "请求错误", "ttl": 1}
WBI_REJECTED: dict[str, Any] = {"code": -403, "message": "访问权限不足", "ttl": 1}

WBI_IMG_KEY = "7cd084941338484aae1ad9425b84077c"
WBI_SUB_KEY = "4932caff0ff746eab6f01bf08b70ac45"
# The documented permutation; written out here again so that the sandbox never trusts the crawler's own copy.
_MIXIN_TAB = (46, 47, 18, 2, 53, 8, 23, 32, 15, 50, 10, 31, 58, 3, 45, 35, 27, 43, 5, 49, 33, 9, 42, 19, 29, 28, 14,
              39, 12, 38, 41, 13, 37, 48, 7, 16, 24, 55, 40, 61, 26, 17, 0, 1, 60, 51, 30, 4, 22, 25, 54, 21, 56,
              59, 6, 63, 57, 62, 11, 36, 20, 34, 44, 52)

_QUALITY_NAMES = {64: "高清 720P", 32: "清晰 480P", 16: "流畅 360P"}
_QUALITY_FORMATS = {64: "flv720", 32: "flv480", 16: "mp4"}
_DEADLINE = 1_793_498_400  # a fixed far-future "deadline" query value (URLs are not really expiring)


def _known(bvid: str | None) -> bool:
    return bvid is not None and BVID_RE.fullmatch(bvid) is not None


# ------------------------------------------------------------------------------------------ creators


@dataclass(frozen=True)
class Upload:
    """A creator's upload: ``owner`` is the mid that owns it; ``listed_under`` every mid whose space lists it (a
    collaboration shows under each member); ``created`` unix seconds."""

    bvid: str
    owner: int
    title: str
    created: int
    parts: int = 1
    listed_under: tuple[int, ...] = ()

    @property
    def union(self) -> bool:
        return len(self.listed_under) > 1


CREATORS: dict[int, str] = {2: "碧诗", 3: "旅行的鱼", 4: "沙盒日常"}
MULTIPART_BVID = "BV1Up0002003"
UNION_BVID = "BV1Up0003001"
#: A video of 2,000 parts, listed under no creator (``-a bvid=`` only): the BILIBILI_MAX_PARTS bound.
MANY_PARTS_BVID = "BV1Up0009000"
#: mid 2's upload without DASH streams: its playurl is always a ``durl`` in this many segments.
DURL_BVID = "BV1Up0002006"
DURL_SEGMENTS = 3
_T0 = 1_790_000_000


def _build_uploads() -> dict[str, Upload]:
    uploads: list[Upload] = []
    cat_titles = ["猫咪日常", "Cat & 狗", "三集连载：猫的一天", "联合投稿", "小猫钓鱼", "旅行 vlog", "夜晚的猫",
                  "(测试) 标题!", "沙盒第九期", "沙盒第十期"]
    for i, title in enumerate(cat_titles, start=1):
        if i == 4:  # mid 2's fourth entry is mid 3's collaboration
            uploads.append(Upload(UNION_BVID, 3, "联合投稿：一起旅行", _T0 - 4 * 86_400, listed_under=(3, 2)))
            continue
        uploads.append(Upload(f"BV1Up0002{i:03d}", 2, title, _T0 - i * 86_400, parts=3 if i == 3 else 1,
                              listed_under=(2,)))
    for i in (2, 3):
        uploads.append(Upload(f"BV1Up0003{i:03d}", 3, f"旅行的鱼 第{i}站", _T0 - (10 + i) * 86_400, listed_under=(3,)))
    for i in range(1, 46):
        uploads.append(Upload(f"BV1Up0004{i:03d}", 4, f"沙盒日常 #{i}", _T0 - i * 3_600, listed_under=(4,)))
    uploads.append(Upload(MANY_PARTS_BVID, 4, "两千集", _T0 - 100 * 86_400, parts=2000))
    return {u.bvid: u for u in uploads}


#: Every creator upload by bvid.
UPLOADS: dict[str, Upload] = _build_uploads()


def bvid_of_aid(aid: int) -> str | None:
    """The advertised video (:data:`BVIDS`, :data:`UPLOADS`) whose ``aid`` is ``aid``; ``None`` for any other."""
    return next((b for b in (*BVIDS, *UPLOADS) if aid_for(b) == aid), None)


def creator_uploads(mid: int) -> list[Upload]:
    """What ``mid``'s space lists, newest first (``arc/search``'s default ``order=pubdate``)."""
    return sorted((u for u in UPLOADS.values() if mid in u.listed_under), key=lambda u: -u.created)


def parts_of(bvid: str) -> list[tuple[int, str]]:
    """``(cid, media id)`` of each part of ``bvid``: part 1 is the bvid's own video, part ``n`` the video
    ``{bvid}-p{n}`` (so that each cid has its own real media)."""
    upload = UPLOADS.get(bvid)
    n = upload.parts if upload else 1
    ids = [bvid, *(f"{bvid}-p{k}" for k in range(2, n + 1))]
    if bvid == MANY_PARTS_BVID:  # 2,000 distinct cids, one encoded video behind them all (encoding is slow)
        return [(cid_for(media_id), bvid) for media_id in ids]
    return [(cid_for(media_id), media_id) for media_id in ids]


def _length(seconds: int, *, pad: bool) -> str:
    """``MM:SS`` (arc/search: minutes past 60 stay minutes) or ``M:SS`` (search/type)."""
    minutes, secs = divmod(seconds, 60)
    return f"{minutes:02d}:{secs:02d}" if pad else f"{minutes}:{secs:02d}"


# ----------------------------------------------------------------------------------------------- WBI


_WBI_STRIP_RE = re.compile(r"[!'()*]")


def _mixin_key() -> str:
    raw = WBI_IMG_KEY + WBI_SUB_KEY
    return "".join(raw[i] for i in _MIXIN_TAB)[:32]


def wbi_signature_ok(params: Mapping[str, str]) -> bool:
    """Whether ``params`` (the decoded query, first value per name) carry a valid ``w_rid`` for the keys served
    in nav. ``wts`` is required; its age is not checked (a sandbox clock would only make tests flaky)."""
    w_rid, wts = params.get("w_rid"), params.get("wts")
    if not w_rid or not wts or not wts.isdigit():
        return False
    pairs = sorted((k, v) for k, v in params.items() if k != "w_rid")
    query = "&".join(f"{quote(k, safe='')}={quote(_WBI_STRIP_RE.sub('', v), safe='')}" for k, v in pairs)
    expected = hashlib.md5((query + _mixin_key()).encode("utf-8")).hexdigest()
    return hmac.compare_digest(expected, w_rid.lower())


def _urls(base: str, media_id: str, name: str, *, mirrors: tuple[str, ...] = ("bak",)) -> tuple[str, list[str]]:
    """The primary (``cos``) URL of a stream file and its backups on ``mirrors`` (same bytes, own ``os=``)."""
    sig = stable_hex("bili-upsig", media_id, name, length=32)
    query = (f"?deadline={_DEADLINE}&gen=playurlv2&os=cos&oi=0&platform=pc&upsig={sig}"
             "&uparams=deadline,gen,os&mid=0")
    primary = f"{base}/media/bili/cos/{media_id}/{name}{query}"
    backups = [f"{base}/media/bili/{m}/{media_id}/{name}{query.replace('os=cos', f'os={m}')}" for m in mirrors]
    return primary, backups


def playurl_response(bvid: str | None, cid: int | None, *, fnval: int = 16, qn: int | None = None,
                     base: str, durl_segments: int = 0) -> dict[str, Any]:
    """The body of ``/x/player/wbi/playurl`` for ``bvid``/``cid`` with media URLs on ``base`` (the sandbox origin).
    Encodes the video on first use. ``durl_segments`` N ≥ 1 (the ``bilibili_durl_segments`` knob): a ``durl``
    answer whatever ``fnval`` asks, the file in N segments (:mod:`.durl`) when N > 1; :data:`DURL_BVID` answers
    so (in :data:`DURL_SEGMENTS`) when the knob is off."""
    if not _known(bvid):
        return dict(NOT_FOUND)
    assert bvid is not None
    media_id = dict(parts_of(bvid)).get(cid)  # type: ignore[arg-type]
    if media_id is None:  # not a cid of this video
        return dict(NOT_FOUND)
    # Creator uploads list a second backup mirror, as real answers often do; the first videos keep one.
    mirrors = ("bak", "ali") if bvid in UPLOADS else ("bak",)
    catalog = video_catalog(media_id)
    package = video_package(media_id)
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
    if bvid == DURL_BVID and not durl_segments:  # a video without DASH streams
        durl_segments = DURL_SEGMENTS
    if fnval & 16 and not durl_segments:
        video = []
        for info in sorted(catalog.video, key=lambda r: -r.height):
            track = package.tracks[info.name]
            primary, backup = _urls(base, media_id, f"{cid}-1-{info.bili_stream_id}.m4s", mirrors=mirrors)
            video.append(_stream(
                stream_id=info.qn, primary=primary, backup=backup, bandwidth=info.average_bandwidth,
                mime="video/mp4", codecs=info.codecs, width=info.width, height=info.height,
                frame_rate=f"{info.frame_rate:g}", init=track.init_range, index=track.index_range, codecid=7,
            ))
        audio_track = package.tracks["audio"]
        primary, backup = _urls(base, media_id, f"{cid}-1-{catalog.audio.bili_id}.m4s", mirrors=mirrors)
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
        primary, backup = _urls(base, media_id, f"{cid}-1-{quality}.mp4", mirrors=mirrors)
        data["format"] = "mp4"
        data["durl"] = [{"order": 1, "length": round(catalog.duration * 1000), "size": info.progressive_size,
                         "ahead": "", "vhead": "", "url": primary, "backup_url": backup}]
        if durl_segments > 1:
            data["durl"] = []
            for k, (body, length) in enumerate(durl.durl_segments(media_id, info.name, durl_segments), start=1):
                primary, backup = _urls(base, media_id, durl.segment_name(cid, quality, k, durl_segments),
                                        mirrors=mirrors)
                data["durl"].append({"order": k, "length": length, "size": len(body), "ahead": "", "vhead": "",
                                     "url": primary, "backup_url": backup})
    return {"code": 0, "message": "0", "ttl": 1, "data": data}


def _stream(*, stream_id: int, primary: str, backup: list[str], bandwidth: int, mime: str, codecs: str, width: int,
            height: int, frame_rate: str, init: tuple[int, int], index: tuple[int, int],
            codecid: int) -> dict[str, Any]:
    segment_base = {"Initialization": f"{init[0]}-{init[1]}", "indexRange": f"{index[0]}-{index[1]}"}
    return {
        "id": stream_id,
        "baseUrl": primary,
        "base_url": primary,
        "backupUrl": backup,
        "backup_url": list(backup),
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


def _meta(bvid: str) -> dict[str, Any]:
    """What every route says about ``bvid``: owner, title, pubdate, stats (derived from the bvid, or the
    creator catalog for :data:`UPLOADS`)."""
    n = stable_int("bili-meta", bvid, bits=32)
    upload = UPLOADS.get(bvid)
    if upload is not None:
        owner_mid, owner_name, title, pubdate = upload.owner, CREATORS[upload.owner], upload.title, upload.created
    else:
        owner_mid = 1_000_000 + n % 9_000_000
        owner_name, title, pubdate = f"sandbox_up_{owner_mid}", f"沙盒测试视频 {bvid}", 1_790_000_000 + n % 3_000_000
    return {"n": n, "owner_mid": owner_mid, "owner_name": owner_name, "title": title, "pubdate": pubdate,
            "stat": {"aid": aid_for(bvid), "view": n % 1_000_000, "danmaku": n % 977, "reply": n % 311,
                     "favorite": n % 5003, "coin": n % 2011, "share": n % 97, "like": n % 20011, "his_rank": 0,
                     "now_rank": 0}}


def _pic(base: str, bvid: str) -> str:
    return f"{base}/media/img/{stable_int('bili-meta', bvid, bits=32) % 1000}.jpg"


def view_response(bvid: str | None, *, base: str) -> dict[str, Any]:
    """The body of ``/x/web-interface/view?bvid=`` (no encoding needed: heights and duration are fixed)."""
    if not _known(bvid):
        return dict(BAD_REQUEST) if bvid is None else dict(NOT_FOUND)
    assert bvid is not None
    meta = _meta(bvid)
    n = meta["n"]
    parts = parts_of(bvid)
    top = RENDITIONS[-1]
    duration = round(DURATION)
    dimension = {"width": top.width, "height": top.height, "rotate": 0}
    pages = [{"cid": cid, "page": i, "from": "vupload", "part": f"P{i} {bvid}", "duration": duration, "vid": "",
              "weblink": "", "dimension": dict(dimension)} for i, (cid, _) in enumerate(parts, start=1)]
    return {
        "code": 0,
        "message": "0",
        "ttl": 1,
        "data": {
            "bvid": bvid,
            "aid": aid_for(bvid),
            "videos": len(pages),
            "tid": 17,
            "tname": "单机游戏",
            "copyright": 1,
            "pic": _pic(base, bvid),
            "title": meta["title"],
            "pubdate": meta["pubdate"],
            "ctime": meta["pubdate"] - 60,
            "desc": f"sandbox video {bvid}: 4 s of H.264/AAC in three heights" + (
                f", {len(pages)} parts" if len(pages) > 1 else ""),
            "state": 0,
            "duration": duration * len(pages),
            "owner": {"mid": meta["owner_mid"], "name": meta["owner_name"],
                      "face": f"{base}/media/img/{n % 997}.jpg"},
            "stat": meta["stat"],
            "cid": parts[0][0],
            "dimension": dimension,
            "pages": pages,
        },
    }


def arc_search_response(mid: int | None, *, pn: int | None, ps: int | None, base: str) -> dict[str, Any]:
    """The body of ``/x/space/wbi/arc/search?mid=&pn=&ps=``: ``mid``'s uploads, newest first."""
    pn, ps = pn or 1, ps or 30
    if mid is None or pn < 1 or not 1 <= ps <= 50:
        return dict(BAD_REQUEST)
    if mid not in CREATORS:
        return dict(NOT_FOUND)
    uploads = creator_uploads(mid)
    vlist = []
    for u in uploads[(pn - 1) * ps: pn * ps]:
        meta = _meta(u.bvid)
        vlist.append({
            "comment": meta["stat"]["reply"], "typeid": 17, "play": meta["stat"]["view"], "pic": _pic(base, u.bvid),
            "subtitle": "", "description": f"sandbox video {u.bvid}", "copyright": "1", "title": u.title,
            "review": 0, "author": CREATORS[u.owner], "mid": u.owner, "created": u.created,
            "length": _length(round(DURATION) * u.parts, pad=True), "video_review": meta["stat"]["danmaku"],
            "aid": aid_for(u.bvid), "bvid": u.bvid, "hide_click": False, "is_pay": 0,
            "is_union_video": int(u.union), "is_steins_gate": 0, "is_live_playback": 0, "is_lesson_video": 0,
            "meta": None, "is_avoided": 0, "season_id": 0, "attribute": 16793984, "is_charging_arc": False,
            "vt": 0, "enable_vt": 0, "vt_display": "", "playback_position": 0,
        })
    return {"code": 0, "message": "0", "ttl": 1, "data": {
        "list": {"slist": [], "tlist": {"17": {"tid": 17, "count": len(uploads), "name": "单机游戏"}}, "vlist": vlist},
        "page": {"pn": pn, "ps": ps, "count": len(uploads)},
        "episodic_button": {"text": "播放全部", "uri": f"//www.bilibili.com/medialist/play/{mid}?from=space"},
        "is_risk": False, "gaia_res_type": 0, "gaia_data": None}}


def _highlight(title: str, keyword: str) -> str:
    """``title`` as search/type writes it: HTML-escaped, every match of ``keyword`` in ``<em class="keyword">``."""
    if not keyword:
        return html.escape(title, quote=False)
    pieces = re.split(f"({re.escape(keyword)})", title, flags=re.I)
    return "".join(f'<em class="keyword">{html.escape(p, quote=False)}</em>' if i % 2 else html.escape(p, quote=False)
                   for i, p in enumerate(pieces))


#: ``order=`` values of search/type (``totalrank``, the default, is newest first here, like ``pubdate``).
SEARCH_ORDERS = ("totalrank", "pubdate", "click", "stow")


def search_hits(keyword: str, *, order: str | None = None, begin_s: int | None = None,
                end_s: int | None = None) -> list[Upload]:
    """The uploads search/type finds for ``keyword``: titles matched case-insensitively, published within
    ``[begin_s, end_s]`` (both inclusive, as ``pubtime_begin_s``/``pubtime_end_s``), newest first, or with
    ``order=click``/``stow`` most played/favourited first."""
    hits = [u for u in UPLOADS.values() if keyword.lower() in u.title.lower()
            and (begin_s is None or u.created >= begin_s) and (end_s is None or u.created <= end_s)]
    if order in ("click", "stow"):
        field = "view" if order == "click" else "favorite"
        return sorted(hits, key=lambda u: (-_meta(u.bvid)["stat"][field], u.bvid))
    return sorted(hits, key=lambda u: -u.created)


def search_response(keyword: str | None, *, search_type: str | None, page: int | None, page_size: int | None,
                    base: str, order: str | None = None, begin_s: int | None = None,
                    end_s: int | None = None, cap: int = 1000) -> dict[str, Any]:
    """The body of ``/x/web-interface/wbi/search/type?search_type=video&keyword=&page=[&order=]
    [&pubtime_begin_s=&pubtime_end_s=]`` over :data:`UPLOADS` (:func:`search_hits`), at most ``cap`` of them (the
    first ones: Bilibili answers no more than 1,000 results to one query)."""
    page, size = page or 1, page_size or 20
    if (not keyword or search_type != "video" or page < 1 or not 1 <= size <= 50
            or (order is not None and order not in SEARCH_ORDERS)):
        return dict(BAD_REQUEST)
    hits = search_hits(keyword, order=order, begin_s=begin_s, end_s=end_s)[:cap]
    pages = -(-len(hits) // size)
    data: dict[str, Any] = {"seid": str(stable_int("bili-seid", keyword, bits=60)), "page": page, "pagesize": size,
                            "numResults": len(hits), "numPages": pages, "suggest_keyword": "", "rqt_type": "search",
                            "cost_time": {"total": "0.01"}, "exp_list": {}, "egg_hit": 0, "show_column": 0,
                            "in_black_key": 0, "in_white_key": 0}
    if hits:
        results = []
        for u in hits[(page - 1) * size: page * size]:
            meta = _meta(u.bvid)
            aid = aid_for(u.bvid)
            results.append({
                "type": "video", "id": aid, "author": CREATORS[u.owner], "mid": u.owner, "typeid": "17",
                "typename": "单机游戏", "arcurl": f"http://www.bilibili.com/video/av{aid}", "aid": aid,
                "bvid": u.bvid, "title": _highlight(u.title, keyword), "description": f"sandbox video {u.bvid}",
                "arcrank": "0",
                # Protocol-relative, as search answers write covers (here on the sandbox origin).
                "pic": _pic(base, u.bvid).split(":", 1)[1], "play": meta["stat"]["view"],
                "video_review": meta["stat"]["danmaku"], "favorites": meta["stat"]["favorite"], "tag": "沙盒",
                "review": meta["stat"]["reply"], "pubdate": u.created, "senddate": u.created + 5,
                "duration": _length(round(DURATION) * u.parts, pad=False), "badgepay": False,
                "hit_columns": ["title"], "view_type": "", "is_pay": 0, "is_union_video": int(u.union),
                "rec_tags": None, "new_rec_tags": [], "rank_score": 100, "like": meta["stat"]["like"],
                "upic": f"{base}/media/img/{meta['n'] % 997}.jpg", "corner": "", "cover": "", "desc": "", "url": "",
                "rec_reason": "", "danmaku": meta["stat"]["danmaku"], "biz_data": None, "is_charge_video": 0,
            })
        data["result"] = results
    return {"code": 0, "message": "0", "ttl": 1, "data": data}


def nav_response() -> dict[str, Any]:
    """``/x/web-interface/nav`` for a logged-out client: ``-101`` plus the WBI key images, as Bilibili answers."""
    return {
        "code": -101,
        "message": "账号未登录",
        "ttl": 1,
        "data": {
            "isLogin": False,
            "wbi_img": {
                "img_url": f"https://i0.hdslb.com/bfs/wbi/{WBI_IMG_KEY}.png",
                "sub_url": f"https://i0.hdslb.com/bfs/wbi/{WBI_SUB_KEY}.png",
            },
        },
    }


def short_link_target(code: str) -> str | None:
    """Where ``b23.tv/<code>`` redirects: ``sbx<n>`` the ``n``-th video of :data:`BVIDS` (0-based) on the real
    site; ``hop<n>`` another short link (``b23.tv/sbx<n>``), ``loop`` itself for ever; other codes ``None``."""
    if code.startswith("sbx") and code[3:].isdigit() and int(code[3:]) < len(BVIDS):
        return f"https://www.bilibili.com/video/{BVIDS[int(code[3:])]}?share_source=copy_web&share_medium=android"
    if code.startswith("hop") and code[3:].isdigit():
        return f"https://b23.tv/sbx{code[3:]}"
    return "https://b23.tv/loop" if code == "loop" else None
