"""Weibo (m.weibo.cn) payloads to records.

Pure functions: a decoded JSON payload in, :class:`~mediacrawler.parsers._common.Page` or
:class:`~mediacrawler.items.Post` out. Shapes handled (see docs/records.md and tests/fixtures/weibo/):

- ``/api/container/getIndex`` envelopes ``{"ok":1,"data":{"cardlistInfo":{…,"since_id"},"cards":[…]}}``; posts are
  ``card_type`` 9 cards (``mblog``), also nested in the ``card_group`` of ``card_type`` 11; every other card type is
  counted as skipped, never turned into a record.
- The end of a list, ``{"ok":0,"msg":"这里还没有内容","data":{"cards":[]}}``, is the end, not an error.
- Error envelopes: ``ok:0`` with ``errno`` 100005 (rate limited), ``ok:-100`` (login required), other ``ok:0``.
- ``/statuses/extend?id=`` → ``{"ok":1,"data":{"longTextContent":…}}`` for posts with ``isLongText``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from mediacrawler.items import Author, MediaAsset, Metrics, Post, Source
from mediacrawler.parsers._common import (
    Page,
    PlatformError,
    as_int,
    as_obj,
    as_text,
    clean_id,
    html_to_text,
    iso_utc,
    parse_count,
    relative_to_absolute,
)

PLATFORM = "weibo"
#: Weibo writes times in China Standard Time.
CST = timezone(timedelta(hours=8))
#: errno values that mean "slow down".
RATE_LIMIT_ERRNOS = {"100005", "20003"}
#: errno values of a post that is gone ("target weibo does not exist!").
_GONE_ERRNOS = {"20101"}
#: Video URL fields of ``page_info.media_info``, best first. Empty strings are common and skipped.
VIDEO_FIELDS = ("mp4_720p_mp4", "mp4_hd_url", "stream_url_hd", "mp4_sd_url", "stream_url")
POST_CARD = 9
GROUP_CARD = 11


def classify_envelope(payload: Any) -> str:
    """What a getIndex/extend answer is: ``ok``, ``end`` (the end of the list), ``rate_limited``,
    ``login_required`` or ``error``."""
    if not isinstance(payload, dict):
        return "error"
    ok = payload.get("ok")
    if ok == 1:
        return "ok"
    if ok == -100:
        return "login_required"
    errno = payload.get("errno")
    if errno is not None and str(errno) in RATE_LIMIT_ERRNOS:
        return "rate_limited"
    if ok == 0 and errno is None:
        data = payload.get("data")
        cards = data.get("cards") if isinstance(data, dict) else None
        if cards == [] or (data is None and payload.get("msg")):
            return "end"
    return "error"


def parse_show(payload: Any) -> dict[str, Any] | None:
    """The mblog of a ``/statuses/show?id=`` answer; ``None`` when the post does not exist (errno 20101 and the
    like). Raises :class:`PlatformError` for rate limits and login walls."""
    if classify_envelope(payload) != "ok":
        if isinstance(payload, dict) and payload.get("ok") == 0 and str(payload.get("errno")) in _GONE_ERRNOS:
            return None
        raise_for_envelope(payload)
        raise PlatformError("error", "unexpected /statuses/show answer")
    data = payload.get("data")
    if not isinstance(data, dict) or not data.get("id"):
        raise PlatformError("error", "/statuses/show answer without a post")
    return data


def raise_for_envelope(payload: Any) -> str:
    """:func:`classify_envelope`, raising :class:`PlatformError` for every error kind."""
    kind = classify_envelope(payload)
    if kind in ("ok", "end"):
        return kind
    msg = str(payload.get("msg") or payload.get("message") or kind) if isinstance(payload, dict) else "not a JSON object"
    code = payload.get("errno") if isinstance(payload, dict) else None
    raise PlatformError(kind, msg, code=code)


#: A date without its year ("06-27"), as m.weibo.cn writes one of this year.
_NO_YEAR = re.compile(r"\d{1,2}-\d{1,2}")
#: Weibo's mids count (unix time - this) << 22, so a mid says roughly when its post was written.
_MID_EPOCH = 515_483_463


def mid_time(mid: Any) -> datetime | None:
    """When the post of ``mid`` was written (to the second, from its top bits); ``None`` for a value that is not
    a mid of Weibo's years (2009 on, not in the future)."""
    n = clean_id(mid)
    if n is None or not n.isdigit() or len(n) > 19:
        return None
    seconds = (int(n) >> 22) + _MID_EPOCH
    if not 1_230_768_000 <= seconds <= datetime.now(UTC).timestamp() + 86_400:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def parse_created_at(value: Any, *, now: datetime | None = None,
                     unreadable: dict[str, str] | None = None) -> str | None:
    """``Sat Nov 28 10:00:00 +0800 2026``, a relative or partial form such as ``5分钟前`` or ``11-28`` (read against
    ``now``, the answer's own time; default: now), or ISO 8601 UTC (this parser's own output) as ISO 8601 UTC.

    ``None`` when absent or unreadable; with ``unreadable``, the reason and raw text are kept there under
    ``created_at`` (an impossible date such as ``02-30`` costs the date, never the post)."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    for fmt in ("%a %b %d %H:%M:%S %z %Y", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            dt = datetime.strptime(text, fmt)
        except ValueError:
            continue
        return iso_utc(dt if dt.tzinfo else dt.replace(tzinfo=UTC))
    try:
        relative = relative_to_absolute(text, now=now or datetime.now(UTC), tz=CST)
    except ValueError as e:
        reason = str(e)
    else:
        if relative is not None:
            return iso_utc(relative)
        reason = f"not a time: {text[:40]!r}"
    if unreadable is not None:
        unreadable["created_at"] = reason
    return None


def _url(value: Any) -> str:
    """A picture URL given as a string or as ``{"url": …}`` (Weibo writes both)."""
    return as_text(value) or as_text(as_obj(value).get("url"))


def _picture(pid: str, pic: dict[str, Any]) -> MediaAsset | None:
    """One picture of ``pics[]`` (m.weibo.cn: ``url`` the thumbnail, ``large``) or ``pic_infos`` (weibo.com:
    ``largest``, ``original``, ``mw2000``, ``large``, ``bmiddle``), at its best size first."""
    sizes = [_url(pic.get(f)) for f in ("largest", "original", "mw2000", "large", "bmiddle", "url", "thumbnail")]
    urls = [u for u in dict.fromkeys(sizes) if u]
    if not urls:
        return None
    geo = as_obj(as_obj(pic.get("large")).get("geo")) or as_obj(pic.get("largest")) or as_obj(pic.get("geo"))
    return MediaAsset(kind="image", key=f"weibo:{pid}", url=urls[0], alternates=urls[1:2],
                      width=as_int(geo.get("width")), height=as_int(geo.get("height")))


def _motion(pid: str, pic: dict[str, Any], still: MediaAsset, live_urls: list[str]) -> MediaAsset | None:
    """The motion clip of a Live Photo (``type: "livephoto"`` with ``videoSrc`` or ``video``, else the next URL of
    the post's ``live_photo`` list), linked to its still; a picture that plays as a video (``type: "video"``
    with ``videoSrc``, in mixed posts) is a video whose cover is the still."""
    kind = as_text(pic.get("type"))
    src = as_text(pic.get("videoSrc")) or as_text(pic.get("video_src")) or as_text(pic.get("video"))
    if kind == "livephoto":
        src = src or (live_urls.pop(0) if live_urls else "")
        return MediaAsset(kind="video", key=f"weibo:live:{pid}", url=src, live_of=still.key) if src else None
    if kind == "video" and src:
        still.cover_of = f"weibo:video:{pid}"
        return MediaAsset(kind="video", key=f"weibo:video:{pid}", url=src)
    return None


def _images(mblog: dict[str, Any]) -> list[MediaAsset]:
    """The pictures of a post in order, each Live Photo or picture video followed by its clip."""
    pics = mblog.get("pics")
    if isinstance(pics, list):
        entries = [(clean_id(p.get("pid")), p) for p in pics if isinstance(p, dict)]
    else:  # weibo.com: pic_ids in order, pic_infos by pid
        infos = as_obj(mblog.get("pic_infos") or mblog.get("pics"))
        ids = mblog.get("pic_ids") if isinstance(mblog.get("pic_ids"), list) else list(infos)
        entries = [(clean_id(pid), as_obj(infos.get(pid))) for pid in ids if isinstance(pid, str)]
    live_urls = [u for u in (mblog.get("live_photo") or []) if isinstance(u, str) and u] \
        if isinstance(mblog.get("live_photo"), list) else []
    assets: list[MediaAsset] = []
    for pid, pic in entries:
        still = _picture(pid, pic) if pid is not None else None
        if still is None:
            continue
        assets.append(still)
        clip = _motion(pid, pic, still, live_urls)  # type: ignore[arg-type] (pid is set when still is)
        if clip is not None:
            assets.append(clip)
    return assets


def _video_of(media_info: dict[str, Any], ident: str | None, page_pic: Any) -> list[MediaAsset]:
    """A video of ``media_info`` (its files best first) and its cover (``page_pic``), or nothing without a file."""
    urls = [u for u in dict.fromkeys(as_text(media_info.get(f)) for f in VIDEO_FIELDS) if u]
    if not urls or ident is None:
        return []
    video = MediaAsset(kind="video", key=f"weibo:video:{ident}", url=urls[0], alternates=urls[1:],
                       duration=_float_or_none(media_info.get("duration")))
    cover = _url(page_pic)
    if not cover:
        return [video]
    return [video, MediaAsset(kind="image", key=f"weibo:cover:{ident}", url=cover, cover_of=video.key)]


def _video(mblog: dict[str, Any]) -> list[MediaAsset]:
    """The video of ``page_info`` (with its cover), or none."""
    page_info = mblog.get("page_info")
    if not isinstance(page_info, dict) or page_info.get("type") != "video":
        return []
    media_info = as_obj(page_info.get("media_info"))
    # The key as it always was (``object_id`` is written like ``1034:5104…``): stored videos keep their identity.
    ident = (as_text(page_info.get("object_id")) or clean_id(media_info.get("media_id"))
             or clean_id(mblog.get("id")))
    return _video_of(media_info, ident, page_info.get("page_pic"))


def _mixed(mblog: dict[str, Any]) -> list[MediaAsset] | None:
    """Every picture and video of a mixed post (``mix_media_info.items``) in order; ``None`` for other posts."""
    items = as_obj(mblog.get("mix_media_info")).get("items")
    if not isinstance(items, list):
        return None
    assets: list[MediaAsset] = []
    for item in items:
        item = as_obj(item)
        data = as_obj(item.get("data"))
        if item.get("type") == "video":
            media_info = as_obj(data.get("media_info"))
            ident = (as_text(data.get("object_id")) or clean_id(media_info.get("media_id"))
                     or clean_id(item.get("id")))
            assets.extend(_video_of(media_info, ident, data.get("page_pic")))
        elif item.get("type") == "pic":
            pid = clean_id(item.get("id")) or clean_id(data.get("pic_id"))
            still = _picture(pid, data) if pid is not None else None
            if still is not None:
                assets.append(still)
                clip = _motion(pid, data, still, [])  # type: ignore[arg-type]
                if clip is not None:
                    assets.append(clip)
    return assets


def _views(mblog: dict[str, Any], unreadable: dict[str, str]) -> int | None:
    """Plays of a video post: ``page_info.play_count`` is written like ``"12.6万次播放"`` (or ``"3次观看"``)."""
    page_info = mblog.get("page_info")
    if not isinstance(page_info, dict) or page_info.get("type") != "video":
        return None
    raw = page_info.get("play_count")
    if isinstance(raw, str):
        raw = re.sub(r"\s*次?(?:播放|观看)\s*$", "", raw.strip())
    return parse_count(raw, field="views", unreadable=unreadable)


def _float_or_none(v: Any) -> float | None:
    try:
        f = float(v) if v not in (None, "") else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: float() of a 400-digit integer
        return None
    return f if f is not None and math.isfinite(f) else None


def _is_deleted(mblog: dict[str, Any]) -> bool:
    return mblog.get("user") is None or str(mblog.get("deleted", "0")) == "1"


def parse_mblog(
    mblog: dict[str, Any],
    *,
    source: Source | None = None,
    fetched_at: str | None = None,
    long_text: str | None = None,
    now: datetime | None = None,
    _depth: int = 0,
) -> Post:
    """One ``mblog`` as a :class:`Post`; ``long_text`` is the HTML from ``/statuses/extend`` when fetched.

    A repost's ``retweeted_status`` becomes ``Post.reposted``; Weibo nests one level (a repost of a repost shows
    the root original), so anything deeper is not followed."""
    post_id = clean_id(mblog.get("idstr")) or clean_id(mblog.get("id")) or clean_id(mblog.get("mid"))
    if post_id is None:
        raise ValueError("mblog without a usable id")
    user = mblog.get("user") if isinstance(mblog.get("user"), dict) else None
    author_id = clean_id(user.get("id")) if user else None
    author = Author(id=author_id, name=as_text(user.get("screen_name")) or None) if user and author_id else None
    bid = clean_id(mblog.get("bid"))
    if author and bid:
        url = f"https://weibo.com/{author.id}/{bid}"
    else:
        # Without its author (deleted originals) only the numeric detail URL identifies a post.
        url = f"https://m.weibo.cn/detail/{post_id}"
    text_html = long_text if long_text is not None else as_text(mblog.get("text"))
    deleted = _is_deleted(mblog)
    media: list[MediaAsset] = []
    if not deleted:
        # A mixed post lists its pictures and videos together, in order; other posts have pics and one video.
        mixed = _mixed(mblog)
        media = mixed if mixed is not None else [*_images(mblog), *_video(mblog)]
    reposted = None
    extra: dict[str, Any] = {}
    rt = mblog.get("retweeted_status")
    if isinstance(rt, dict) and _depth == 0:
        try:
            reposted = parse_mblog(rt, source=source, fetched_at=fetched_at, now=now, _depth=1)
        except (ValueError, TypeError, AttributeError, KeyError):
            # An original without a usable id (or of a shape we cannot read) costs the original, not the repost.
            extra["reposted"] = "unavailable"
    for key, value in (("mid", clean_id(mblog.get("mid"))), ("bid", bid),
                       ("source", as_text(mblog.get("source"))), ("region_name", as_text(mblog.get("region_name")))):
        if value:
            extra[key] = value
    if mblog.get("isLongText"):
        extra["long_text"] = "expanded" if long_text is not None else "truncated"
    if _depth == 0 and mblog.get("isTop") in (1, True, "1"):
        # Pinned to the top of the timeline, out of time order (never a high-water mark, never a stop).
        extra["pinned"] = True
    page_info = mblog.get("page_info")
    if isinstance(page_info, dict) and page_info.get("type") == "webpage" and page_info.get("page_url"):
        extra["link"] = page_info["page_url"]
    # Field name → why its value could not be read (docs/records.md, "extra.unreadable"): an odd value costs that
    # field, never the post.
    unreadable: dict[str, str] = {}
    raw_time = mblog.get("created_at")
    written = mid_time(mblog.get("mid") or post_id)
    if written is not None and isinstance(raw_time, str) and _NO_YEAR.fullmatch(raw_time.strip()):
        # "06-27" names no year: the mid says when the post was written (read years later, it is still 2019).
        now = written + timedelta(days=1)
    created_at = parse_created_at(raw_time, now=now, unreadable=unreadable)
    metrics = Metrics(
        likes=parse_count(mblog.get("attitudes_count"), field="likes", unreadable=unreadable),
        comments=parse_count(mblog.get("comments_count"), field="comments", unreadable=unreadable),
        shares=parse_count(mblog.get("reposts_count"), field="shares", unreadable=unreadable),
        views=_views(mblog, unreadable),
    )
    if unreadable:
        extra["unreadable"] = unreadable
    return Post(
        platform=PLATFORM,
        post_id=post_id,
        url=url,
        author=author,
        created_at=created_at,
        text=html_to_text(text_html),
        text_html=text_html,
        metrics=metrics,
        reposted=reposted,
        media=media,
        source=source,
        fetched_at=fetched_at,
        deleted=deleted,
        extra=extra,
    )


def iter_post_cards(cards: Any, skipped: dict[str, int]) -> list[dict[str, Any]]:
    """The ``mblog`` objects of a card list, in order, descending into ``card_group``; other cards are counted."""
    found: list[dict[str, Any]] = []
    for card in cards if isinstance(cards, list) else []:
        if not isinstance(card, dict):
            skipped["not_an_object"] = skipped.get("not_an_object", 0) + 1
            continue
        card_type = card.get("card_type")
        if card_type == POST_CARD and isinstance(card.get("mblog"), dict):
            found.append(card["mblog"])
        elif isinstance(card.get("card_group"), list):
            found.extend(iter_post_cards(card["card_group"], skipped))
        else:
            reason = f"card_type_{card_type}"
            skipped[reason] = skipped.get(reason, 0) + 1
    return found


def parse_index(
    payload: Any,
    *,
    source: Source | None = None,
    fetched_at: str | None = None,
    expand_long_text: bool = True,
    now: datetime | None = None,
) -> Page:
    """A ``getIndex`` answer (timeline or search) as a :class:`Page`.

    Posts with ``isLongText`` go to ``Page.incomplete`` (raw mblog by id) instead of ``Page.posts`` when
    ``expand_long_text`` is on, so the caller can fetch their full text first. Raises :class:`PlatformError` for
    error envelopes.
    """
    if raise_for_envelope(payload) == "end":
        return Page(is_last=True)
    data = as_obj(payload.get("data"))
    skipped: dict[str, int] = {}
    mblogs = iter_post_cards(data.get("cards"), skipped)
    page = Page(skipped=skipped)
    seen: set[str] = set()
    for mblog in mblogs:
        try:
            post = parse_mblog(mblog, source=source, fetched_at=fetched_at, now=now)
        except ValueError:  # no id: not a post
            skipped["invalid_mblog"] = skipped.get("invalid_mblog", 0) + 1
            continue
        except (TypeError, AttributeError, KeyError):
            # A shape this parser does not expect: counted apart (a stat to look at, maybe a parser bug), and it
            # never costs the page its other posts.
            skipped["malformed_mblog"] = skipped.get("malformed_mblog", 0) + 1
            continue
        if post.post_id in seen:  # the same post pinned and listed again on one page
            skipped["duplicate_on_page"] = skipped.get("duplicate_on_page", 0) + 1
            continue
        seen.add(post.post_id)
        if expand_long_text and mblog.get("isLongText"):
            # Its time resolved now, against this answer's time: the chain ends later, and the high-water mark
            # judges it by this (PlatformSpider.listed_time). An unreadable one stays as given, to be kept as such.
            page.incomplete[post.post_id] = {**mblog, "created_at": post.created_at or mblog.get("created_at")}
        else:
            page.posts.append(post)
    info = as_obj(data.get("cardlistInfo"))
    since_id = info.get("since_id")
    page.next_cursor = str(since_id) if since_id not in (None, "", 0, "0") else None
    # An ok page with no cards at all is as final as the ok:0 answer: there is nothing to page through.
    page.is_last = not data.get("cards")
    return page


def parse_long_text(payload: Any) -> str | None:
    """The full HTML of a long post from a ``/statuses/extend`` answer, ``None`` when absent."""
    if classify_envelope(payload) != "ok":
        return None
    data = payload.get("data")
    if not isinstance(data, dict):
        return None
    text = data.get("longTextContent")
    return text if isinstance(text, str) and text else None


def timeline_containerid(uid: str) -> str:
    """The containerid of a user's posts timeline."""
    return f"107603{uid}"


#: The search tabs of m.weibo.cn and their ``100103type=`` numbers (综合, 实时, 热门, 视频, 图片).
SEARCH_TYPES = {"all": 1, "realtime": 61, "hot": 60, "video": 64, "picture": 63}


def search_containerid(keyword: str, search_type: str = "all") -> str:
    """The containerid of a keyword query on one tab of :data:`SEARCH_TYPES` (``all``, type 1, by default)."""
    return f"100103type={SEARCH_TYPES[search_type]}&q={keyword}"


_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_BID = re.compile(r"[0-9A-Za-z]{8,9}")
_MID = re.compile(r"[0-9]{10,20}")
#: The paths of a post's links: m.weibo.cn/detail/<mid>, m.weibo.cn/status/<mid|bid>, weibo.com/<uid>/<mid|bid>.
_POST_PATH = re.compile(r"/(?:detail|status|[0-9]{1,20})/([0-9A-Za-z]{8,20})/?")
_POST_HOSTS = ("weibo.com", "www.weibo.com", "m.weibo.cn", "weibo.cn")


def bid_to_mid(bid: str) -> str:
    """A post's bid (the base62 id of its weibo.com link) as its mid: groups of 4 characters from the right, each
    the base62 of 7 decimal digits (zero-padded but the first). ValueError for a character not in base62."""
    digits: list[str] = []
    rest = bid
    while rest:
        chunk, rest = rest[-4:], rest[:-4]
        value = 0
        for char in chunk:
            index = _BASE62.find(char)
            if index < 0:
                raise ValueError(f"{bid!r} is not a Weibo bid")
            value = value * 62 + index
        digits.append(str(value).rjust(7, "0") if rest else str(value))
    return "".join(reversed(digits)).lstrip("0") or "0"


def post_ref(text: str) -> str:
    """The mid named by ``text``: a mid, a bid, or a post's link (``m.weibo.cn/detail/<mid>``,
    ``m.weibo.cn/status/<bid>``, ``weibo.com/<uid>/<bid>``); ValueError naming what it is not."""
    value = text.strip()
    if "/" in value:
        from urllib.parse import urlsplit

        parts = urlsplit(value if "://" in value else f"https://{value}")
        match = _POST_PATH.fullmatch(parts.path)
        if (parts.hostname or "").lower() not in _POST_HOSTS or match is None:
            raise ValueError(f"{value[:80]!r} is not a Weibo post link (m.weibo.cn/detail/<mid>, "
                             f"m.weibo.cn/status/<bid>, weibo.com/<uid>/<bid>)")
        value = match.group(1)
    if _MID.fullmatch(value):
        return value
    if _BID.fullmatch(value):
        return bid_to_mid(value)
    raise ValueError(f"{value[:80]!r} is not a Weibo post id (a mid of digits, or a bid like NbqPs0Ab1)")
