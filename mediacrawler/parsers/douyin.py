"""Douyin payloads to records: the share page's server data and the web detail API.

Pure functions: HTML text or decoded JSON in, :class:`~mediacrawler.items.Post` out (no Scrapy import). Shapes
handled (see tests/fixtures/douyin/ and docs/platforms.md, "Douyin"):

- The share page ``https://www.iesdouyin.com/share/video/{aweme_id}/`` (also ``/share/note/{id}/``): an HTML page
  whose ``<script>window._ROUTER_DATA = {…}</script>`` holds ``loaderData["video_(id)/page"]`` (or
  ``"note_(id)/page"``) ``.videoInfoRes`` = ``{"status_code":0,"item_list":[aweme],"filter_list":[…]}``. The
  value is JSON (``\\u002F`` and ``\\u003C`` escapes included): it is read with a JSON decoder from the ``=``
  on, never evaluated and never cut with a regular expression.
- The web detail API ``/aweme/v1/web/aweme/detail/?aweme_id=`` (with the user's cookie):
  ``{"status_code":0,"aweme_detail":{aweme}}``; ``status_code`` ≠ 0 or ``aweme_detail: null`` (with
  ``filter_detail``) for an item that cannot be shown.
- An aweme: ``aweme_id``, ``desc``, ``create_time`` (Unix seconds), ``aweme_type`` (68 and 2: image album),
  ``is_top`` (1: pinned by its author, ``extra.pinned``), ``author{uid,nickname,sec_uid}``,
  ``statistics{digg_count,comment_count,share_count,play_count}``,
  ``video{play_addr{uri,url_list},play_addr_h264,play_addr_265,bit_rate[{gear_name,quality_type,bit_rate,
  is_h265|is_bytevc1|codec_type|format,play_addr{url_list,url_key,width,height,data_size}}],width,height,
  duration (ms),cover|origin_cover{uri,url_list,width,height}}``, ``images[{uri,url_list,width,height,
  video?}]`` (``video``: a Live Photo's clip, a video object of its own),
  ``music{id,title,author,play_url{url_list},duration}``.

A video is one ``video`` asset whose ``renditions`` are its ``bit_rate[]`` files (``kind`` ``progressive``:
muxed MP4s), then ``play_addr_h264``/``play_addr_265`` when they are other files, ``play_addr`` when there are
none; each ``codec`` is what Douyin says of that file (:func:`stream_codec`: ``avc1``, ``hevc``, ``bytevc2`` or
``None``); the media path picks one by height and codec. The video is followed by its cover (:func:`_cover`). An
album is one ``image`` asset per picture, each Live Photo's clip (``images[].video``) right after its still, and
its background music as one ``audio`` asset. An item that is gone or filtered is a :class:`Post` with
``deleted=True`` and ``extra["unavailable"]`` saying why.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mediacrawler.items import Author, MediaAsset, Metrics, Post, Source
from mediacrawler.parsers._common import (
    PlatformError,
    as_int,
    as_list,
    as_obj,
    as_text,
    check_depth,
    clean_id,
    iso_from_timestamp,
)

__all__ = [
    "ALBUM_TYPES",
    "PLATFORM",
    "aweme_id",
    "aweme_id_from_url",
    "aweme_to_post",
    "classify_envelope",
    "parse_detail",
    "parse_share_page",
    "parse_target",
    "post_url",
    "router_data",
    "stream_codec",
    "unavailable_post",
]

PLATFORM = "douyin"
#: ``aweme_type`` values of image posts ("图文"): 2 (older albums) and 68.
ALBUM_TYPES = frozenset({2, 68, 150})
#: Renditions kept from one ``bit_rate[]`` (a real answer has 3 to 8); more is a broken or hostile answer.
MAX_RENDITIONS = 32
#: Pictures kept from one album (the app allows 35).
MAX_IMAGES = 100
#: URLs kept per ``url_list``.
MAX_URLS = 8
#: Longest share page read for its router data (a real one is about 150 kB).
MAX_PAGE_CHARS = 8 * 1024 * 1024

_AWEME_ID = re.compile(r"[0-9]{6,25}")
_ROUTER_RE = re.compile(r"window\._ROUTER_DATA\s*=\s*")
_PAGE_KEY_RE = re.compile(r"(?:video|note|slides)_\(id\)/page")
_SHORT_HOSTS = frozenset({"v.douyin.com", "v.iesdouyin.com"})
_WEB_HOSTS = frozenset({"www.douyin.com", "douyin.com", "m.douyin.com", "www.iesdouyin.com", "iesdouyin.com"})
_ID_PATH_RE = re.compile(r"/(?:share/)?(?:video|note|slides)/([0-9]{6,25})(?:/|$)")
_SHORT_PATH_RE = re.compile(r"/([0-9A-Za-z_-]{4,32})/?")


# -- small readers ------------------------------------------------------------------------------------------------


def _count(value: Any) -> int | None:
    number = as_int(value)
    return number if number is not None and number >= 0 else None


def _dimension(value: Any) -> int | None:
    number = as_int(value)
    return number if number is not None and 0 < number <= 16384 else None


def _valid_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not any(c.isspace() for c in url)


def _urls(url_list: Any) -> list[str]:
    """The usable URLs of a ``url_list`` (http(s) with a host), deduplicated, in order, at most MAX_URLS."""
    good = (u.strip() for u in as_list(url_list, MAX_URLS * 4) if isinstance(u, str))
    return list(dict.fromkeys(u for u in good if _valid_url(u)))[:MAX_URLS]


def aweme_id(value: Any) -> str | None:
    """An aweme id (digits, as Douyin writes them: a string or a large integer), else ``None``."""
    cleaned = clean_id(value)
    return cleaned if cleaned is not None and _AWEME_ID.fullmatch(cleaned) else None


def post_url(aweme: str, *, album: bool = False) -> str:
    """The canonical web URL of an aweme: ``https://www.douyin.com/video/{id}`` (``/note/{id}`` for albums)."""
    return f"https://www.douyin.com/{'note' if album else 'video'}/{aweme}"


# -- targets ------------------------------------------------------------------------------------------------------


def aweme_id_from_url(url: str) -> str | None:
    """The aweme id in a Douyin page URL: ``/video/{id}``, ``/note/{id}``, ``/share/video/{id}/`` on any host
    (after a short link's redirect the host is the share host), or a ``modal_id``/``aweme_id`` query
    parameter (``https://www.douyin.com/discover?modal_id={id}``); ``None`` when there is none."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    match = _ID_PATH_RE.search(parts.path)
    if match:
        return match.group(1)
    query = parse_qs(parts.query)
    for name in ("modal_id", "aweme_id", "item_id"):
        for value in query.get(name, ()):
            if _AWEME_ID.fullmatch(value):
                return value
    return None


def parse_target(text: str) -> tuple[str, str]:
    """One ``-a aweme=`` value as ``("id", digits)`` or ``("short", code)`` (a ``v.douyin.com/{code}/`` link,
    resolved by its redirect). Accepts bare ids and ``https://www.douyin.com/video/{id}``,
    ``https://www.iesdouyin.com/share/video/{id}/`` and share texts' URLs. Raises ``ValueError`` otherwise."""
    value = text.strip()
    if _AWEME_ID.fullmatch(value):
        return "id", value
    if "://" not in value and value.split("/", 1)[0].lower() in (_SHORT_HOSTS | _WEB_HOSTS):
        value = "https://" + value
    try:
        parts = urlsplit(value)
        host = (parts.hostname or "").lower()
    except ValueError:
        raise ValueError(f"not a Douyin id or URL: {text[:80]!r}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"not a Douyin id or URL: {text[:80]!r}")
    if host in _SHORT_HOSTS:
        match = _SHORT_PATH_RE.fullmatch(parts.path)
        if match is None:
            raise ValueError(f"not a Douyin short link: {text[:80]!r}")
        return "short", match.group(1)
    if host in _WEB_HOSTS:
        found = aweme_id_from_url(value)
        if found is not None:
            return "id", found
    raise ValueError(f"not a Douyin id or URL: {text[:80]!r}")


# -- envelopes ----------------------------------------------------------------------------------------------------


def classify_envelope(payload: Any) -> str:
    """What a detail API answer is, for the platform errors middleware. Any ``status_code`` is answered (a
    non-zero one becomes the item's recorded reason, :func:`parse_detail`), so only a body that is not the API's
    document is ``invalid`` (retried)."""
    if not isinstance(payload, dict) or "status_code" not in payload:
        return "invalid"
    return "ok"


def _status_reason(payload: dict[str, Any]) -> str | None:
    code = as_int(payload.get("status_code"))
    if code is None:
        raise PlatformError("error", "no status_code in the answer")
    if code == 0:
        return None
    message = as_text(payload.get("status_msg")).strip()[:200]
    return f"status_code {code}" + (f": {message}" if message else "")


def _filter_reason(entry: Any) -> str:
    entry = as_obj(entry)
    reason = as_text(entry.get("filter_reason")).strip()[:80] or "filtered"
    detail = as_text(entry.get("detail_msg")).strip()[:200] or as_text(entry.get("notice")).strip()[:200]
    return f"filtered: {reason}" + (f" ({detail})" if detail else "")


# -- the share page -----------------------------------------------------------------------------------------------


def router_data(html: str) -> dict[str, Any]:
    """The object assigned to ``window._ROUTER_DATA`` in a share page. Raises ``ValueError`` when the page has
    none (a verification page, an error page) or it is not a JSON object."""
    if len(html) > MAX_PAGE_CHARS:
        raise ValueError(f"share page of {len(html)} characters, over the cap of {MAX_PAGE_CHARS}")
    match = _ROUTER_RE.search(html)
    if match is None:
        raise ValueError("no window._ROUTER_DATA in the page (not a share page: a verification or error page?)")
    try:
        # Before the decoder, which recurses: a state 100 000 levels deep is a failed page, not a RecursionError.
        check_depth(html, match.end())
    except ValueError as e:
        raise ValueError(f"window._ROUTER_DATA is {e}") from None
    try:
        value, _ = json.JSONDecoder().raw_decode(html, match.end())
    except json.JSONDecodeError as e:
        raise ValueError(f"window._ROUTER_DATA is not JSON: {e.msg} at {e.pos - match.end()}") from None
    if not isinstance(value, dict):
        raise ValueError("window._ROUTER_DATA is not an object")
    return value


def _video_info(data: dict[str, Any]) -> dict[str, Any]:
    loader = as_obj(data.get("loaderData"))
    for key, value in loader.items():
        if isinstance(key, str) and _PAGE_KEY_RE.fullmatch(key) and isinstance(value, dict):
            info = value.get("videoInfoRes")
            if isinstance(info, dict):
                return info
    raise ValueError("no loaderData[…_(id)/page].videoInfoRes in the router data")


def parse_share_page(html: str, *, aweme: str, source: Source | None = None,
                     fetched_at: str | None = None) -> Post:
    """The aweme ``aweme`` from its share page: a :class:`Post`, or one with ``deleted=True`` and
    ``extra["unavailable"]`` when the page says it is filtered (``filter_list``) or has no such item. Raises
    ``ValueError`` when the page is not a share page."""
    info = _video_info(router_data(html))
    reason = _status_reason(info)
    for entry in as_list(info.get("filter_list"), 100):
        if isinstance(entry, dict) and aweme_id(entry.get("aweme_id")) in (aweme, None):
            return unavailable_post(aweme, _filter_reason(entry), source=source, fetched_at=fetched_at)
    if reason is not None:
        return unavailable_post(aweme, reason, source=source, fetched_at=fetched_at)
    items = [i for i in as_list(info.get("item_list"), 100) if isinstance(i, dict)]
    item = next((i for i in items if aweme_id(i.get("aweme_id")) == aweme), None)
    if item is None:
        return unavailable_post(aweme, "not in the share page's item_list", source=source, fetched_at=fetched_at)
    post = aweme_to_post(item, source=source, fetched_at=fetched_at)
    post.extra["read_from"] = "share"
    return post


# -- the detail API -----------------------------------------------------------------------------------------------


def parse_detail(payload: Any, *, aweme: str, source: Source | None = None, fetched_at: str | None = None) -> Post:
    """The aweme ``aweme`` from a ``/aweme/v1/web/aweme/detail/`` answer; ``status_code`` ≠ 0, a null
    ``aweme_detail`` or a ``filter_detail`` make a record with ``deleted=True`` and the reason. Raises
    ``ValueError``/:class:`PlatformError` for a body that is not the API's answer."""
    if not isinstance(payload, dict):
        raise ValueError("detail answer is not a JSON object")
    reason = _status_reason(payload)
    if reason is not None:
        return unavailable_post(aweme, reason, source=source, fetched_at=fetched_at)
    if "aweme_detail" not in payload and "filter_detail" not in payload:
        # Another endpoint's answer (a listing, a search): refused, never recorded as a deleted aweme.
        raise ValueError("not a detail answer: no aweme_detail in it")
    detail = payload.get("aweme_detail")
    if not isinstance(detail, dict):
        filtered = payload.get("filter_detail")
        why = _filter_reason(filtered) if isinstance(filtered, dict) else "aweme_detail is null"
        return unavailable_post(aweme, why, source=source, fetched_at=fetched_at)
    if aweme_id(detail.get("aweme_id")) != aweme:
        raise ValueError(f"detail answer is about another aweme ({str(detail.get('aweme_id'))[:30]!r})")
    post = aweme_to_post(detail, source=source, fetched_at=fetched_at)
    post.extra["read_from"] = "detail"
    return post


# -- an aweme -----------------------------------------------------------------------------------------------------


def unavailable_post(aweme: str, reason: str, *, source: Source | None = None, fetched_at: str | None = None) -> Post:
    """The record of an aweme that cannot be read: ``deleted=True``, ``extra["unavailable"] = reason``."""
    return Post(platform=PLATFORM, post_id=aweme, url=post_url(aweme), author=None, created_at=None,
                source=source, fetched_at=fetched_at, deleted=True, extra={"unavailable": reason})


#: Codec names Douyin writes in a ``url_key`` (``{uri}_{codec}_{height}p_{bitrate}``), a ``codec_type`` or a
#: ``format``, as the records' labels. ByteVC1 is ByteDance's HEVC; ByteVC2 is its own VVC-class codec that no
#: standard decoder reads, so it keeps its own label (the media path ranks it after every codec it knows).
_CODEC_NAMES = {"h264": "avc1", "avc1": "avc1", "avc": "avc1", "h265": "hevc", "hevc": "hevc", "bytevc1": "hevc",
                "bytevc2": "bytevc2", "av1": "av01", "av01": "av01"}
#: ``is_bytevc1`` / ``is_h265`` values: 0 H.264, 1 ByteVC1 (HEVC), 2 ByteVC2 (both fields carry the same value).
_CODEC_FLAGS = {0: "avc1", 1: "hevc", 2: "bytevc2"}
_TOKEN_RE = re.compile(r"[a-z0-9]+")
#: The last number of a ``gear_name`` (``normal_1080_0``, ``adapt_540_1``, ``720_1_2``) is the codec flag.
_GEAR_CODEC_RE = re.compile(r"_([0-2])$")


def _named_codec(*texts: Any) -> str | None:
    for text in texts:
        for token in _TOKEN_RE.findall(as_text(text).lower()):
            if token in _CODEC_NAMES:
                return _CODEC_NAMES[token]
    return None


def stream_codec(entry: dict[str, Any], addr: dict[str, Any] | None = None) -> str | None:
    """The codec of one Douyin stream as the platform states it (docs/platforms.md, "Douyin"): the name in its
    ``url_key``, ``codec_type`` or ``format``, else the ``is_bytevc1``/``is_h265`` flag, else the codec number
    ending its ``gear_name``; ``None`` (unknown) when nothing says, never a guess."""
    addr = addr if addr is not None else as_obj(entry.get("play_addr"))
    named = _named_codec(addr.get("url_key"), entry.get("codec_type"), entry.get("format"))
    if named is not None:
        return named
    flags = {as_int(entry.get(k)) for k in ("is_bytevc1", "is_h265") if entry.get(k) is not None}
    flags.discard(None)
    if flags:
        # ByteVC2 streams say 2 in both fields; a stream that says 1 in either is HEVC, 0 in all is H.264.
        return _CODEC_FLAGS.get(max(f for f in flags if f is not None))
    gear = _GEAR_CODEC_RE.search(as_text(entry.get("gear_name")))
    return _CODEC_FLAGS[int(gear.group(1))] if gear else None


def _rendition(addr: Any, *, width: Any, height: Any, codec: str | None, bandwidth: Any = None,
               quality: Any = None, frame_rate: Any = None) -> dict[str, Any] | None:
    addr = as_obj(addr)
    urls = _urls(addr.get("url_list"))
    if not urls:
        return None
    fps = as_int(frame_rate)
    return {
        "kind": "progressive",
        "url": urls[0],
        "alternates": urls[1:],
        "width": _dimension(width),
        "height": _dimension(height),
        "codecs": None,
        "codec": codec,
        "bandwidth": _count(bandwidth) or None,
        "frame_rate": float(fps) if fps and 0 < fps <= 240 else None,
        "mime": "video/mp4",
        "size": _count(addr.get("data_size")) or None,
        "quality": _count(quality),
    }


#: Single-file addresses of a ``video`` offered besides ``bit_rate[]``, with the codec each is named for.
_NAMED_ADDRS = (("play_addr_h264", "avc1"), ("play_addr_265", "hevc"))


def video_renditions(video: dict[str, Any]) -> list[dict[str, Any]]:
    """The files of a ``video`` object as renditions: one per ``bit_rate[]`` entry with a URL (as listed), then
    ``play_addr_h264`` and ``play_addr_265`` when they are other files (not the same ``url_key`` or URL as one
    already listed: a ``uri`` names the video, not one file); ``play_addr`` only when there is nothing else (it
    is a copy of one of them). Codecs: :func:`stream_codec`."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(found: dict[str, Any] | None, key: str) -> None:
        if found is None:
            return
        names = {found["url"], *found["alternates"]} | ({key} if key else set())
        if names & seen:
            return
        seen.update(names)
        out.append(found)

    for entry in as_list(video.get("bit_rate"), MAX_RENDITIONS):
        if not isinstance(entry, dict):
            continue
        addr = as_obj(entry.get("play_addr"))
        add(_rendition(addr, width=addr.get("width"), height=addr.get("height"), codec=stream_codec(entry, addr),
                       bandwidth=entry.get("bit_rate"), quality=entry.get("quality_type"),
                       frame_rate=entry.get("FPS")), as_text(addr.get("url_key")))
    for name, named_codec in (*_NAMED_ADDRS, ("play_addr", None)):
        addr = as_obj(video.get(name))
        if not addr or (name == "play_addr" and out):
            continue
        # The plain play_addr says its codec in its url_key, or through the video's own flags.
        codec = _named_codec(addr.get("url_key")) or named_codec or stream_codec(video, addr)
        add(_rendition(addr, width=addr.get("width") or video.get("width"),
                       height=addr.get("height") or video.get("height"), codec=codec),
            as_text(addr.get("url_key")))
    return out


#: A ``~tplv-{template}`` suffix in a picture URL's path names a picture derived from the stored one (a crop or
#: a resize: ``~tplv-dy-cropcenter:323:430``, ``~tplv-dy-360p``); ``/obj/{uri}`` and ``~noop`` are the original.
_DERIVED_RE = re.compile(r"~tplv-")


def _picture_area(picture: dict[str, Any]) -> int:
    return (_dimension(picture.get("width")) or 0) * (_dimension(picture.get("height")) or 0)


def _cover(post_id: str, video: dict[str, Any]) -> MediaAsset | None:
    """A video's cover picture, key ``cover:{aweme id}``, ``cover_of`` its video's key: of ``video.cover`` and
    ``video.origin_cover`` the larger by its stated size (``cover`` on a tie), its ``url_list`` with the
    original-size entries first (a derived crop or resize only as a fallback); ``None`` when neither has a URL."""
    pictures = [as_obj(video.get(name)) for name in ("cover", "origin_cover")]
    pictures = [p for p in pictures if _urls(p.get("url_list"))]
    if not pictures:
        return None
    best = max(pictures, key=_picture_area)  # max keeps the first of equals: ``cover``
    urls = sorted(_urls(best.get("url_list")), key=lambda u: bool(_DERIVED_RE.search(urlsplit(u).path)))
    return MediaAsset(kind="image", key=f"cover:{post_id}", url=urls[0], alternates=urls[1:],
                      width=_dimension(best.get("width")), height=_dimension(best.get("height")),
                      cover_of=f"video:{post_id}")


def _live_clip(post_id: str, n: int, image: dict[str, Any], *, still: MediaAsset) -> MediaAsset | None:
    """The motion clip of an album picture that is a Live Photo (``images[].video``, a video object of its own
    with ``play_addr``/``bit_rate``), right after its still, which it names (``live_of``); key
    ``live:{aweme id}:{n}``. ``None`` for a plain picture or a clip without a usable file."""
    clip = as_obj(image.get("video"))
    renditions = video_renditions(clip) if clip else []
    if not renditions:
        return None
    first = renditions[0]
    duration_ms = _count(clip.get("duration"))
    return MediaAsset(kind="video", key=f"live:{post_id}:{n}", url=first["url"], alternates=[],
                      width=_dimension(clip.get("width")) or first["width"],
                      height=_dimension(clip.get("height")) or first["height"],
                      duration=duration_ms / 1000 if duration_ms else None, renditions=renditions,
                      live_of=still.key)


def aweme_to_post(aweme: dict[str, Any], *, source: Source | None = None, fetched_at: str | None = None) -> Post:
    """One aweme object (share page item or ``aweme_detail``) as a :class:`Post`. Raises ``ValueError`` when it
    has no valid ``aweme_id``."""
    post_id = aweme_id(aweme.get("aweme_id"))
    if post_id is None:
        raise ValueError(f"aweme without a valid aweme_id ({str(aweme.get('aweme_id'))[:30]!r})")
    author_raw = as_obj(aweme.get("author"))
    uid = clean_id(author_raw.get("uid"))
    author = Author(id=uid, name=as_text(author_raw.get("nickname")) or None) if uid else None
    stats = as_obj(aweme.get("statistics"))
    aweme_type = as_int(aweme.get("aweme_type"))
    images = [i for i in as_list(aweme.get("images"), MAX_IMAGES) if isinstance(i, dict)]
    album = bool(images) or aweme_type in ALBUM_TYPES
    video = as_obj(aweme.get("video"))
    media: list[MediaAsset] = []
    extra: dict[str, Any] = {"aweme_type": aweme_type}
    if aweme.get("is_top") in (1, True, "1"):
        # Pinned to the top of the author's list, out of time order (never a high-water mark, never a stop).
        extra["pinned"] = True
    sec_uid = as_text(author_raw.get("sec_uid"))
    if sec_uid and len(sec_uid) <= 100:
        extra["author_sec_uid"] = sec_uid
    duration_ms = _count(video.get("duration")) or _count(aweme.get("duration"))
    if album:
        for n, image in enumerate(images, start=1):
            urls = _urls(image.get("url_list"))
            if urls:
                still = MediaAsset(kind="image", key=f"{post_id}:{n}", url=urls[0], alternates=urls[1:],
                                   width=_dimension(image.get("width")), height=_dimension(image.get("height")))
                media.append(still)
                clip = _live_clip(post_id, n, image, still=still)
                if clip is not None:
                    media.append(clip)
        music = as_obj(aweme.get("music"))
        music_urls = _urls(as_obj(music.get("play_url")).get("url_list"))
        if music_urls:
            music_id = clean_id(music.get("id_str")) or clean_id(music.get("id")) or post_id
            seconds = _count(music.get("duration"))
            media.append(MediaAsset(kind="audio", key=f"music:{music_id}", url=music_urls[0],
                                    alternates=music_urls[1:], duration=float(seconds) if seconds else None))
            extra["music"] = {"id": music_id, "title": as_text(music.get("title"))[:200] or None,
                              "author": as_text(music.get("author"))[:200] or None}
    else:
        renditions = video_renditions(video)
        if renditions:
            best = renditions[0]
            media.append(MediaAsset(kind="video", key=f"video:{post_id}", url=best["url"],
                                    alternates=[], width=_dimension(video.get("width")),
                                    height=_dimension(video.get("height")),
                                    duration=duration_ms / 1000 if duration_ms else None, renditions=renditions))
        elif video:
            extra["video_unavailable"] = "no play_addr or bit_rate URL"
        # Kept even when the video has no file (``video_unavailable``), as Facebook's covers are.
        cover = _cover(post_id, video)
        if cover is not None:
            media.append(cover)
    return Post(
        platform=PLATFORM,
        post_id=post_id,
        url=post_url(post_id, album=album),
        author=author,
        created_at=iso_from_timestamp(aweme.get("create_time"), high=4_102_444_799),
        text=as_text(aweme.get("desc")),
        metrics=Metrics(likes=_count(stats.get("digg_count")), comments=_count(stats.get("comment_count")),
                        shares=_count(stats.get("share_count")), views=_count(stats.get("play_count")) or None),
        media=media,
        source=source,
        fetched_at=fetched_at,
        extra=extra,
    )
