"""Bilibili (api.bilibili.com) payloads to records, and WBI request signing.

Pure functions: a decoded JSON payload in, :class:`~mediacrawler.parsers._common.Page`,
:class:`~mediacrawler.items.Post` or plain JSON out. Shapes handled (see docs/records.md and
tests/fixtures/bilibili/):

- Envelope ``{"code":0,"message":"0","ttl":1,"data":…}``; ``-352``/``-412`` risk control (back off), ``-101`` not
  logged in, ``-404``/``-403``/``62002``/``62004``/``62012`` gone or not visible: :func:`classify_envelope`.
- ``/x/web-interface/nav`` → ``data.wbi_img{img_url,sub_url}`` (also in the ``-101`` logged-out answer):
  :func:`wbi_keys`, :func:`mixin_key`, :func:`sign_params` (the openly documented WBI scheme).
- ``/x/space/wbi/arc/search?mid&pn&ps`` → ``data.list.vlist[]`` + ``data.page{pn,ps,count}``:
  :func:`parse_arc_search`. ``/x/web-interface/wbi/search/type?search_type=video`` → ``data.result[]`` +
  ``data.numPages``: :func:`parse_search`. Both list videos only: every video needs ``/view`` for its record, so
  they fill ``Page.incomplete`` (bvid → what the listing says) and never ``Page.posts``.
- ``/x/web-interface/view?bvid`` → one :class:`Post` per video, one video asset per part (``pages[]``/cid):
  :func:`parse_view`. The asset URLs are empty: the spider fills them from ``playurl``.
- ``/x/player/wbi/playurl?bvid&cid&fnval=16`` → ``data.dash.video[]/audio[]`` (camelCase and snake_case twins,
  backup URL lists) or ``data.durl[]`` (progressive MP4): :func:`parse_playurl`.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from mediacrawler.items import Author, MediaAsset, Metrics, Post, Source
from mediacrawler.parsers._common import (
    Page,
    PlatformError,
    as_int,
    as_list,
    as_obj,
    as_text,
    clean_id,
    html_to_text,
    https_url,
    is_http_url,
    iso_from_timestamp,
    load_json,
    parse_count,
)

__all__ = [
    "MIXIN_KEY_ENC_TAB",
    "classify_envelope",
    "duration_seconds",
    "inflate_danmaku",
    "mixin_key",
    "parse_arc_search",
    "parse_player",
    "parse_playurl",
    "parse_search",
    "parse_view",
    "playurl_duration",
    "raise_for_envelope",
    "sign_params",
    "subtitle_srt",
    "video_url",
    "wbi_keys",
]

PLATFORM = "bilibili"
RATE_LIMIT_CODES = {-352, -412}
LOGIN_CODES = {-101}
#: -404 啥都木有, -403 访问权限不足, 62002 稿件不可见, 62004 稿件审核中, 62012 仅UP主自己可见.
NOT_FOUND_CODES = {-404, -403, 62002, 62004, 62012}
#: The fixed permutation of the WBI scheme (img_key + sub_key → mixin key).
MIXIN_KEY_ENC_TAB: tuple[int, ...] = (
    46, 47, 18, 2, 53, 8, 23, 32, 15, 50, 10, 31, 58, 3, 45, 35, 27, 43, 5, 49, 33, 9, 42, 19, 29, 28, 14, 39, 12, 38,
    41, 13, 37, 48, 7, 16, 24, 55, 40, 61, 26, 17, 0, 1, 60, 51, 30, 4, 22, 25, 54, 21, 56, 59, 6, 63, 57, 62, 11, 36,
    20, 34, 44, 52,
)
#: ``codecid`` of a DASH video stream → codec family (the media path reads ``codecs`` first, then this).
CODECID_FAMILY = {7: "avc1", 12: "hevc", 13: "av01"}
#: Quality number (``qn``) → nominal height, for ``durl`` files (which carry no width/height).
QN_HEIGHT = {6: 240, 16: 360, 32: 480, 64: 720, 74: 720, 80: 1080, 112: 1080, 116: 1080, 120: 2160, 125: 2160,
             126: 2160, 127: 4320}
#: Stream entries kept from one playurl answer: a real one has about a dozen; more is a hostile or broken answer.
MAX_RENDITIONS = 64
_WBI_KEY_RE = re.compile(r"[0-9A-Za-z]{32}")
# Characters the site's JS strips from values before signing (encodeURIComponent leaves them unescaped).
_WBI_STRIP = str.maketrans("", "", "!'()*")
_LENGTH_RE = re.compile(r"\s*(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?\s*")


def video_url(bvid: str) -> str:
    """The canonical page of a video."""
    return f"https://www.bilibili.com/video/{bvid}"


# The public av ↔ BV mapping (bilibili-API-collect, docs/misc/bvid_desc.md): the aid with bit 51 set, XORed with a
# constant, written in base 58 over this alphabet, two pairs of its digits swapped, after "BV1".
_BV_ALPHABET = "FcwAPNKTMug3GV5Lj7EJnHpWsx4tb8haYeviqBz6rkCy12mUSDQX9RdoZf"
_BV_XOR = 23442827791579
_BV_MAX_AID = 1 << 51


def aid_to_bvid(aid: int) -> str:
    """The BV id of the video whose (old, numeric) av id is *aid*: ``aid_to_bvid(170001) == "BV17x411w7KC"``."""
    if not 0 < aid < _BV_MAX_AID:
        raise ValueError(f"av{aid}: not an av id (1 to 2**51 - 1)")
    value, digits = (_BV_MAX_AID | aid) ^ _BV_XOR, []
    for _ in range(9):
        value, digit = divmod(value, 58)
        digits.append(_BV_ALPHABET[digit])
    code = digits[::-1]  # most significant first
    code[0], code[6] = code[6], code[0]
    code[1], code[4] = code[4], code[1]
    return "BV1" + "".join(code)


# ----------------------------------------------------------------------------------------------- envelope


def _code(payload: Any) -> int | None:
    if not isinstance(payload, dict):
        return None
    code = payload.get("code")
    if isinstance(code, bool):
        return None
    try:
        return int(code)
    except (TypeError, ValueError):
        return None


def classify_envelope(payload: Any) -> str:
    """What an API answer is: ``ok``, ``rate_limited``, ``login_required``, ``not_found`` or ``error``."""
    code = _code(payload)
    if code == 0:
        return "ok"
    if code in RATE_LIMIT_CODES:
        return "rate_limited"
    if code in LOGIN_CODES:
        return "login_required"
    if code in NOT_FOUND_CODES:
        return "not_found"
    return "error"


def raise_for_envelope(payload: Any) -> str:
    """:func:`classify_envelope`, raising :class:`PlatformError` for every kind but ``ok``."""
    kind = classify_envelope(payload)
    if kind == "ok":
        return kind
    if isinstance(payload, dict):
        raise PlatformError(kind, str(payload.get("message") or kind), code=_code(payload))
    raise PlatformError(kind, "not a JSON object")


# ---------------------------------------------------------------------------------------------------- WBI


def _key_of(url: Any) -> str | None:
    """The key in a ``wbi_img`` URL: its file stem (``…/bfs/wbi/7cd0…077c.png`` → ``7cd0…077c``)."""
    if not isinstance(url, str):
        return None
    stem = urlsplit(url).path.rsplit("/", 1)[-1].split(".", 1)[0]
    return stem if _WBI_KEY_RE.fullmatch(stem) else None


def wbi_keys(nav_payload: Any) -> tuple[str, str]:
    """``(img_key, sub_key)`` from a ``/x/web-interface/nav`` answer. The logged-out answer (``-101``) carries
    them too, so only risk control and answers without usable keys raise :class:`PlatformError`."""
    if classify_envelope(nav_payload) == "rate_limited":
        raise_for_envelope(nav_payload)
    data = nav_payload.get("data") if isinstance(nav_payload, dict) else None
    img = data.get("wbi_img") if isinstance(data, dict) else None
    if not isinstance(img, dict):
        raise PlatformError("error", "nav answer without wbi_img", code=_code(nav_payload))
    img_key, sub_key = _key_of(img.get("img_url")), _key_of(img.get("sub_url"))
    if img_key is None or sub_key is None:
        raise PlatformError("error", "nav wbi_img URLs without 32-character keys", code=_code(nav_payload))
    return img_key, sub_key


def mixin_key(img_key: str, sub_key: str) -> str:
    """The WBI mixin key: ``img_key + sub_key`` permuted by :data:`MIXIN_KEY_ENC_TAB`, first 32 characters."""
    raw = img_key + sub_key
    if len(raw) != 64:
        raise ValueError("WBI keys must be 32 characters each")
    return "".join(raw[i] for i in MIXIN_KEY_ENC_TAB)[:32]


def sign_params(params: Mapping[str, Any], mixin_key: str, *, wts: int) -> dict[str, str]:
    """``params`` signed for a ``/wbi/`` route: values as strings with ``!'()*`` stripped, plus ``wts`` (unix
    seconds) and ``w_rid`` = md5(sorted urlencoded query + mixin key). Send exactly these values (the stripped
    ones): the server recomputes the digest from what it receives."""
    signed = {str(k): str(v).translate(_WBI_STRIP) for k, v in params.items() if k not in ("w_rid", "wts")}
    signed["wts"] = str(int(wts))
    ordered = dict(sorted(signed.items()))
    query = urlencode(ordered, quote_via=quote, safe="")
    ordered["w_rid"] = hashlib.md5((query + mixin_key).encode("utf-8")).hexdigest()
    return ordered


# ------------------------------------------------------------------------------------------------ helpers


def duration_seconds(value: Any) -> int | None:
    """A video length in seconds: ``"3:05"`` → 185, ``"104:52"`` (minutes past 60) → 6292, ``"1:02:03"`` → 3723,
    an integer as is; ``None`` when unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if math.isfinite(value) and value >= 0 else None
    if not isinstance(value, str):
        return None
    m = _LENGTH_RE.fullmatch(value)
    if not m:
        return None
    numbers = [int(g) for g in m.groups() if g is not None]
    seconds = 0
    for n in numbers:
        seconds = seconds * 60 + n
    return seconds


# ---------------------------------------------------------------------------------------------- listings


def _listing_entry(*, bvid: str, aid: Any, title: str, description: str, pic: Any, created: Any, length: Any,
                   author: Any, mid: Any, views: Any, comments: Any, union: Any) -> dict[str, Any]:
    return {
        "bvid": bvid,
        "aid": as_int(aid),
        "title": title,
        "description": description,
        "pic": https_url(pic),
        "created": as_int(created),
        "created_at": iso_from_timestamp(created),
        "length": duration_seconds(length),
        "author": as_text(author) or None,
        "mid": clean_id(mid),
        "views": parse_count(views),
        "comments": parse_count(comments),
        "is_union_video": bool(as_int(union)),
    }


def _collect(page: Page, entries: Any, build: Callable[[dict[str, Any], str], dict[str, Any]]) -> int:
    """Fill ``page.incomplete`` from ``entries`` with ``build(entry, bvid)``; returns how many entries there were."""
    items = entries if isinstance(entries, list) else []
    for entry in items:
        bvid = clean_id(entry.get("bvid")) if isinstance(entry, dict) else None
        if bvid is None:
            page.skipped["invalid_video"] = page.skipped.get("invalid_video", 0) + 1
            continue
        if bvid in page.incomplete:  # a pinned video listed again
            page.skipped["duplicate_on_page"] = page.skipped.get("duplicate_on_page", 0) + 1
            continue
        page.incomplete[bvid] = build(entry, bvid)
    return len(items)


def parse_arc_search(payload: Any) -> Page:
    """A creator's videos (``/x/space/wbi/arc/search``) as a :class:`Page` whose ``incomplete`` maps bvid → what
    the listing says. ``is_last`` when ``pn * ps >= count`` or the list is empty; a page without readable paging
    is taken as the last (a guess that could loop forever is worse than a short crawl)."""
    raise_for_envelope(payload)
    data = as_obj(payload.get("data"))
    page = Page()
    # A collaboration (is_union_video) shows under every member's space with its owner's mid and name: kept as
    # listed, the record's author comes from /view.
    n = _collect(page, as_obj(data.get("list")).get("vlist"), lambda e, bvid: _listing_entry(
        bvid=bvid, aid=e.get("aid"), title=as_text(e.get("title")), description=as_text(e.get("description")),
        pic=e.get("pic"), created=e.get("created"), length=e.get("length"), author=e.get("author"),
        mid=e.get("mid"), views=e.get("play"), comments=e.get("comment"), union=e.get("is_union_video")))
    info = as_obj(data.get("page"))
    pn, ps, count = as_int(info.get("pn")), as_int(info.get("ps")), as_int(info.get("count"))
    page.is_last = n == 0 or None in (pn, ps, count) or pn * ps >= count  # type: ignore[operator]
    return page


def parse_search(payload: Any) -> Page:
    """A keyword search (``/x/web-interface/wbi/search/type?search_type=video``) as a :class:`Page` like
    :func:`parse_arc_search`: titles lose their ``<em class="keyword">`` markup, protocol-relative covers get
    ``https:``. ``is_last`` when ``page >= numPages`` or there are no results."""
    raise_for_envelope(payload)
    data = as_obj(payload.get("data"))
    page = Page()
    results = data.get("result")
    videos = [r for r in results if isinstance(r, dict) and r.get("type", "video") == "video"] \
        if isinstance(results, list) else []
    if isinstance(results, list) and len(videos) < len(results):
        page.skipped["not_a_video"] = len(results) - len(videos)
    n = _collect(page, videos, lambda e, bvid: _listing_entry(
        bvid=bvid, aid=e.get("aid", e.get("id")), title=html_to_text(as_text(e.get("title"))),
        description=html_to_text(as_text(e.get("description"))), pic=e.get("pic"), created=e.get("pubdate"),
        length=e.get("duration"), author=e.get("author"), mid=e.get("mid"), views=e.get("play"),
        comments=e.get("review"), union=e.get("is_union_video")))
    current, pages = as_int(data.get("page")), as_int(data.get("numPages"))
    page.is_last = n == 0 or current is None or pages is None or current >= pages
    return page


def _archives(page: Page, entries: Any) -> int:
    """Fill ``page.incomplete`` from a collection's or series' ``archives[]`` (same fields in both)."""
    return _collect(page, entries, lambda e, bvid: _listing_entry(
        bvid=bvid, aid=e.get("aid"), title=as_text(e.get("title")), description="", pic=e.get("pic"),
        created=e.get("pubdate"), length=e.get("duration"), author=None, mid=None,
        views=as_obj(e.get("stat")).get("view"), comments=None, union=None))


def parse_fav_list(payload: Any) -> Page:
    """A favourites folder (``/x/v3/fav/resource/list?media_id=&pn=&ps=``), like :func:`parse_arc_search`:
    ``data.medias[]`` (entries of another type than a video, ``type`` ≠ 2, are skipped as ``not_a_video``),
    ``is_last`` unless ``data.has_more``."""
    raise_for_envelope(payload)
    data = as_obj(payload.get("data"))
    page = Page()
    medias = data.get("medias")
    videos = [m for m in medias if isinstance(m, dict) and as_int(m.get("type", 2)) == 2] \
        if isinstance(medias, list) else []
    if isinstance(medias, list) and len(videos) < len(medias):
        page.skipped["not_a_video"] = len(medias) - len(videos)
    n = _collect(page, videos, lambda e, bvid: _listing_entry(
        bvid=bvid, aid=e.get("id"), title=as_text(e.get("title")), description=as_text(e.get("intro")),
        pic=e.get("cover"), created=e.get("pubtime"), length=e.get("duration"),
        author=as_obj(e.get("upper")).get("name"), mid=as_obj(e.get("upper")).get("mid"),
        views=as_obj(e.get("cnt_info")).get("play"), comments=None, union=None))
    page.is_last = (n == 0 and not videos) or data.get("has_more") is not True
    return page


def parse_season_archives(payload: Any) -> Page:
    """A collection (``/x/polymer/web-space/seasons_archives_list?mid=&season_id=&page_num=&page_size=``):
    ``data.archives[]``; ``is_last`` when ``page_num * page_size >= total`` (unreadable paging: the last)."""
    return _paged_archives(payload, num="page_num", size="page_size")


def parse_series_archives(payload: Any) -> Page:
    """A series (``/x/series/archives?mid=&series_id=&pn=&ps=``): ``data.archives[]``, ``data.page{num, size,
    total}``, read like :func:`parse_season_archives`."""
    return _paged_archives(payload, num="num", size="size")


def _paged_archives(payload: Any, *, num: str, size: str) -> Page:
    """``data.archives[]`` with ``data.page{<num>, <size>, total}``: the last page when it is empty, its paging is
    unreadable, or ``num * size >= total``."""
    raise_for_envelope(payload)
    data = as_obj(payload.get("data"))
    page = Page()
    n = _archives(page, data.get("archives"))
    info = as_obj(data.get("page"))
    at, per, total = as_int(info.get(num)), as_int(info.get(size)), as_int(info.get("total"))
    page.is_last = n == 0 or at is None or per is None or total is None or at * per >= total
    return page


# -------------------------------------------------------------------------------------------------- view


def _parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts (``pages[]``) of a video as ``{cid, page, part, duration, width, height}``; a view without
    ``pages`` is one part: its own ``cid``."""
    raw = data.get("pages")
    if not isinstance(raw, list) or not raw:
        raw = [{"cid": data.get("cid"), "page": 1, "part": "", "duration": data.get("duration"),
                "dimension": data.get("dimension")}]
    parts: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in raw:
        if not isinstance(entry, dict):
            continue
        cid = clean_id(entry.get("cid"))
        if cid is None or cid in seen:
            continue
        seen.add(cid)
        dim = as_obj(entry.get("dimension"))
        width, height = as_int(dim.get("width")), as_int(dim.get("height"))
        if as_int(dim.get("rotate")) == 1:  # a portrait upload stored sideways: the player swaps them
            width, height = height, width
        parts.append({"cid": cid, "page": as_int(entry.get("page")), "part": as_text(entry.get("part")),
                      "duration": duration_seconds(entry.get("duration")), "width": width or None,
                      "height": height or None})
    return parts


def parse_view(payload: Any, *, source: Source | None = None, fetched_at: str | None = None,
               max_parts: int | None = None) -> Post:
    """A ``/x/web-interface/view`` answer as a :class:`Post`: the cover as an image asset (``cover:{bvid}``, its
    ``cover_of`` the first part's key) and
    one video asset per part (``{bvid}:{cid}``, ``url`` and ``renditions`` empty until the spider has the part's
    playurl: :func:`parse_playurl`). Raises :class:`PlatformError` for error envelopes (``not_found`` for gone videos).

    With ``max_parts``, only the first parts are kept; ``extra["parts_total"]`` and ``extra["parts_cut"]`` then say
    how many the video has and how many were left out."""
    raise_for_envelope(payload)
    data = as_obj(payload.get("data"))
    bvid = clean_id(data.get("bvid"))
    if bvid is None:
        raise PlatformError("error", "view answer without a bvid")
    owner = as_obj(data.get("owner"))
    owner_id = clean_id(owner.get("mid"))
    stat = as_obj(data.get("stat"))
    parts = _parts(data)
    total = len(parts)
    if max_parts is not None and total > max_parts:
        parts = parts[:max_parts]
    media: list[MediaAsset] = []
    cover = https_url(data.get("pic"))
    if cover:
        # The cover is the whole post's, shown on its first part: it names that part's video (docs/records.md).
        first = f"{bvid}:{parts[0]['cid']}" if parts else None
        media.append(MediaAsset(kind="image", key=f"cover:{bvid}", url=cover, cover_of=first))
    for part in parts:
        media.append(MediaAsset(kind="video", key=f"{bvid}:{part['cid']}", url="",
                                duration=None if part["duration"] is None else float(part["duration"]),
                                width=part["width"], height=part["height"]))
    desc = as_text(data.get("desc"))
    return Post(
        platform=PLATFORM,
        post_id=bvid,
        url=video_url(bvid),
        author=Author(id=owner_id, name=as_text(owner.get("name")) or None) if owner_id else None,
        created_at=iso_from_timestamp(data.get("pubdate")),
        # "-" is what the site stores for "no description".
        text="" if desc.strip() == "-" else desc,
        metrics=Metrics(likes=parse_count(stat.get("like")), comments=parse_count(stat.get("reply")),
                        shares=parse_count(stat.get("share")), views=parse_count(stat.get("view"))),
        media=media,
        source=source,
        fetched_at=fetched_at,
        extra={"title": as_text(data.get("title")), "aid": as_int(data.get("aid")),
               "parts": [{k: p[k] for k in ("cid", "page", "part", "duration")} for p in parts],
               **({"parts_total": total, "parts_cut": total - len(parts)} if total > len(parts) else {})},
    )


# ----------------------------------------------------------------------------------------------- playurl


def _data_of(payload: Any) -> dict[str, Any]:
    """The ``data`` of a playurl envelope (or the bare data object, as in ``window.__playinfo__``)."""
    if isinstance(payload, dict) and "code" in payload:
        raise_for_envelope(payload)
        data = payload.get("data")
        if not isinstance(data, dict):
            raise PlatformError("error", "playurl answer without data", code=_code(payload))
        return data
    if isinstance(payload, dict):
        return payload
    raise PlatformError("error", "not a JSON object")


def _twin(entry: dict[str, Any], camel: str, snake: str) -> Any:
    value = entry.get(camel)
    return value if value not in (None, "", []) else entry.get(snake)


def _urls(primary: Any, backups: Any) -> tuple[str, list[str]] | None:
    """``(url, alternates)``: valid http(s) URLs only, deduplicated; a bad primary is replaced by the first good
    backup. ``None`` when none is usable."""
    candidates = [primary, *(backups[:MAX_RENDITIONS] if isinstance(backups, list) else [backups])]
    good = list(dict.fromkeys(u.strip() for u in candidates if isinstance(u, str) and is_http_url(u.strip())))
    return (good[0], good[1:]) if good else None


def _frame_rate(value: Any) -> float | None:
    if isinstance(value, str) and "/" in value:  # "30000/1001"
        num, _, den = value.partition("/")
        try:
            return round(float(num) / float(den), 3) if float(den) else None
        except ValueError:
            return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def _dash_entry(entry: dict[str, Any], kind: str) -> dict[str, Any] | None:
    urls = _urls(_twin(entry, "baseUrl", "base_url"), _twin(entry, "backupUrl", "backup_url"))
    if urls is None:
        return None
    seg = as_obj(entry.get("segment_base")) or as_obj(entry.get("SegmentBase"))
    init = as_text(seg.get("initialization") or seg.get("Initialization"))
    index = as_text(seg.get("index_range") or seg.get("indexRange"))
    codecid = as_int(entry.get("codecid"))
    return {
        "kind": kind,
        "url": urls[0],
        "alternates": urls[1],
        "width": as_int(entry.get("width")) or None,
        "height": as_int(entry.get("height")) or None,
        "codecs": as_text(entry.get("codecs")) or None,
        "codec": CODECID_FAMILY.get(codecid) if kind == "video" and codecid is not None else None,
        "codecid": codecid,
        "bandwidth": as_int(entry.get("bandwidth")),
        "frame_rate": _frame_rate(_twin(entry, "frameRate", "frame_rate")),
        "mime": as_text(_twin(entry, "mimeType", "mime_type")) or None,
        "size": None,
        "quality": as_int(entry.get("id")),
        "segment_base": {"initialization": init, "index_range": index} if init and index else None,
    }


def parse_playurl(payload: Any) -> list[dict[str, Any]]:
    """The renditions of a ``/x/player/wbi/playurl`` answer as plain JSON (``MediaAsset.renditions``, read by
    ``media.renditions.manifest_from_renditions``), best first as listed: DASH video and audio streams (``kind``
    ``video``/``audio``; ``codec`` from ``codecid`` for the streams without ``codecs``), or ``durl`` progressive
    files (``kind`` ``progressive`` with ``size``, ``height`` from the quality number). Both spellings of twin fields are read; URLs that are not http(s) with a host are dropped; at most
    :data:`MAX_RENDITIONS` entries. Raises :class:`PlatformError` for error envelopes."""
    data = _data_of(payload)
    out: list[dict[str, Any]] = []
    dash = as_obj(data.get("dash"))
    # dash.dolby / dash.flac (premium-only E-AC-3 and FLAC tracks) are left out: the media path picks the audio with
    # the highest bandwidth, and those are neither what a logged-out user gets nor what an MP4 of AAC holds.
    for kind, entries in (("video", dash.get("video")), ("audio", dash.get("audio"))):
        for entry in entries[:MAX_RENDITIONS] if isinstance(entries, list) else []:
            if len(out) >= MAX_RENDITIONS:
                return out
            rendition = _dash_entry(entry, kind) if isinstance(entry, dict) else None
            if rendition is not None:
                out.append(rendition)
    out.extend(_durl(data, room=MAX_RENDITIONS - len(out)))
    return out


def _durl(data: dict[str, Any], *, room: int) -> list[dict[str, Any]]:
    """``data.durl[]``: the files of ONE rendition (quality ``data.quality``), played in ``order``. One entry is a
    progressive file; several are the segments of it, one rendition with ``segments`` (``url``, ``alternates``,
    ``size``, ``length`` in ms each), to be joined, never alternatives. A segment without a usable URL makes the
    rendition unusable (a part of a video is not the video): then none."""
    durl = data.get("durl")
    fmt = as_text(data.get("format"))
    mime = "video/x-flv" if fmt.startswith("flv") else "video/mp4" if fmt.startswith("mp4") else None
    entries = [e for e in durl[:MAX_RENDITIONS] if isinstance(e, dict)] if isinstance(durl, list) else []
    if not entries or room < 1:
        return []
    entries.sort(key=lambda e: as_int(e.get("order")) or 0)  # stable: unnumbered ones keep their place
    segments = []
    for entry in entries:
        urls = _urls(entry.get("url"), _twin(entry, "backup_url", "backupUrl"))
        if urls is None:
            return []
        segments.append({"url": urls[0], "alternates": urls[1], "size": as_int(entry.get("size")),
                         "length": as_int(entry.get("length"))})
    quality = as_int(data.get("quality"))
    sizes = [seg["size"] for seg in segments]
    rendition = {"kind": "progressive", "url": segments[0]["url"], "alternates": segments[0]["alternates"],
                 "width": None, "height": QN_HEIGHT.get(quality) if quality is not None else None, "codecs": None,
                 "codec": None, "codecid": None, "bandwidth": None, "frame_rate": None, "mime": mime,
                 "size": sum(sizes) if all(isinstance(n, int) for n in sizes) else None, "quality": quality,
                 "segment_base": None}
    if len(segments) > 1:
        rendition["segments"] = segments
    return [rendition]


def playurl_duration(payload: Any) -> float | None:
    """The length of a playurl answer in seconds (``timelength`` is milliseconds; ``dash.duration`` seconds)."""
    data = _data_of(payload)
    ms = as_int(data.get("timelength"))
    if ms and ms > 0:
        return ms / 1000
    seconds = as_int(as_obj(data.get("dash")).get("duration"))
    return float(seconds) if seconds and seconds > 0 else None


def post_from_listing(entry: dict[str, Any], *, source: Source | None = None, fetched_at: str | None = None) -> Post:
    """The record of a video known only from a listing entry (``Page.incomplete`` of :func:`parse_arc_search` or
    :func:`parse_search`): when its ``/view`` is gone (``-404``, ``62002``) or failed, the record keeps what the
    listing said, without media."""
    bvid = str(entry["bvid"])
    mid = clean_id(entry.get("mid"))
    return Post(
        platform=PLATFORM,
        post_id=bvid,
        url=video_url(bvid),
        author=Author(id=mid, name=as_text(entry.get("author")) or None) if mid else None,
        created_at=entry.get("created_at") if isinstance(entry.get("created_at"), str) else None,
        text=as_text(entry.get("description")),
        metrics=Metrics(views=as_int(entry.get("views")), comments=as_int(entry.get("comments"))),
        source=source,
        fetched_at=fetched_at,
        extra={"title": as_text(entry.get("title")), "aid": as_int(entry.get("aid"))},
    )


# ------------------------------------------------------------------------- subtitles, chapters, danmaku
#: Subtitle tracks and chapters kept per part (a video has a handful; the caps bound a hostile answer).
MAX_SUBTITLES = 16
MAX_CHAPTERS = 500


def parse_player(payload: Any, *, scheme: str = "https") -> dict[str, Any]:
    """A ``/x/player/wbi/v2?aid=&cid=`` answer: ``{"subtitles": [{"lan", "lan_doc", "url"}], "chapters": [{"from",
    "to", "content"}]}`` (``data.subtitle.subtitles[]``, ``data.view_points[]``). A protocol-relative subtitle URL
    (``//aisubtitle.hdslb.com/…``) takes ``scheme``. Raises :class:`PlatformError` for error envelopes."""
    raise_for_envelope(payload)
    data = as_obj(payload.get("data"))
    subtitles = []
    for entry in as_list(as_obj(data.get("subtitle")).get("subtitles"), MAX_SUBTITLES):
        entry = as_obj(entry)
        raw = as_text(entry.get("subtitle_url")).strip()
        url = https_url(raw) if not raw.startswith("//") else (f"{scheme}:{raw}" if is_http_url(f"{scheme}:{raw}")
                                                              else "")
        lan = clean_id(entry.get("lan"))
        if url and lan and re.fullmatch(r"[A-Za-z0-9_-]{1,32}", lan):
            subtitles.append({"lan": lan, "lan_doc": as_text(entry.get("lan_doc")) or None, "url": url})
    chapters = []
    for point in as_list(data.get("view_points"), MAX_CHAPTERS):
        point = as_obj(point)
        start, end = as_int(point.get("from")), as_int(point.get("to"))
        if start is not None and end is not None and 0 <= start <= end:
            chapters.append({"from": start, "to": end, "content": as_text(point.get("content"))})
    return {"subtitles": subtitles, "chapters": chapters}


def _srt_time(seconds: float) -> str:
    ms = max(0, round(seconds * 1000))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def subtitle_srt(body: bytes | str) -> bytes:
    """Bilibili's subtitle JSON (``body[]`` of ``{"from", "to", "content"}`` in seconds) as SRT, UTF-8, cues in
    the order given. ``ValueError`` for a body that is not that JSON or has no cue."""
    payload = load_json(body)
    cues = []
    for cue in as_list(as_obj(payload).get("body"), 100_000):
        cue = as_obj(cue)
        start, end = cue.get("from"), cue.get("to")
        text = as_text(cue.get("content")).replace("\r\n", "\n").strip()
        if not isinstance(start, int | float) or not isinstance(end, int | float) or not text or end < start:
            continue
        # A blank line ends an SRT cue: one inside the text would split it.
        text = re.sub(r"\n\s*\n", "\n", text)
        cues.append(f"{len(cues) + 1}\n{_srt_time(float(start))} --> {_srt_time(float(end))}\n{text}\n")
    if not cues:
        raise ValueError("subtitle JSON without a cue")
    return "\n".join(cues).encode("utf-8")


def inflate_danmaku(body: bytes, *, max_bytes: int) -> bytes:
    """The XML of ``comment.bilibili.com/<cid>.xml``: raw-deflate compressed when the answer had no
    ``Content-Encoding`` (else already inflated), at most ``max_bytes`` inflated; ``ValueError`` otherwise."""
    if body.lstrip(b"\xef\xbb\xbf").lstrip().startswith(b"<"):
        xml = body
    else:
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        try:
            xml = inflater.decompress(body, max_bytes + 1)
        except zlib.error as exc:
            raise ValueError(f"danmaku body is neither XML nor raw deflate ({exc})") from None
    if len(xml) > max_bytes:
        raise ValueError(f"danmaku XML over {max_bytes} bytes (BILIBILI_DANMAKU_MAX_BYTES)")
    return xml
