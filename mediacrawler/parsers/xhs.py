"""XiaoHongShu (www.xiaohongshu.com) server-rendered pages to records.

Pure functions, no Scrapy import: HTML text (or a decoded JSON error body) in, :class:`~mediacrawler.items.Post` or
plain data out. Only signature-free routes: the note page and the profile page, both rendered on the server with
their data in ``window.__INITIAL_STATE__`` (see docs/platforms.md, "XiaoHongShu", and tests/fixtures/xhs/).

- ``window.__INITIAL_STATE__`` is a JavaScript object literal, not JSON: bare ``undefined`` values and ``\\u002F``
  escapes. :func:`initial_state` reads it with a real JavaScript-literal parser (chompjs), never ``eval``, and
  turns every ``undefined`` into ``None`` (chompjs 1.4.1 gives the string ``"undefined"``; a text field that really
  reads "undefined" becomes ``None`` too, which no record field needs).
- Note page ``/explore/{id}?xsec_token=…``: ``note.noteDetailMap[id].note`` → :func:`parse_note_page`. Images in
  their best available quality (``imageList[].infoList`` scene ``WB_DFT`` before ``urlDefault``, the ``WB_PRV``
  preview and ``urlPre`` as alternates); the video as ``MediaAsset.renditions`` from ``video.media.stream``
  (``h264[]`` first, then ``h265[]``; ``masterUrl`` with ``backupUrls``), for the media path to pick by height and
  codec. Counts such as ``"1.2万"`` and ``"10万+"`` as integers; ``time``/``lastUpdateTime`` are milliseconds.
- Older pages (2022–2023) hold the one note at ``note.note`` (no ``noteDetailMap``): read the same way.
- A note the page says is unavailable (``serverRequestInfo.state == "fail"`` or a non-zero ``errorCode``) is a
  record with ``deleted: true`` and ``extra.unavailable``. A page whose state holds no such note and says nothing
  of it raises ValueError: a failed page, retried next run, never a deleted post.
- Profile page ``/user/profile/{id}``: ``user.notes[0][]`` cards (``noteCard`` + ``xsecToken``) →
  :func:`parse_profile_page`. Later pages of a profile come from signed APIs this project does not use. A card
  carries no time, but a note id is a MongoDB ObjectId whose first 8 hex digits are its creation time in Unix
  seconds (:func:`note_id_time`): the high-water mark judges listed notes by it. A note its author pinned has
  ``interactInfo.sticky: true`` (:func:`card_pinned`; the record gets ``extra.pinned``).
- Rate limiting: HTTP 461, or code ``300012`` (a JSON body, or ``serverRequestInfo.errorCode`` in the state):
  :func:`classify_page`.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
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
    https_url,
    iso_from_timestamp,
    parse_count,
)

__all__ = [
    "NOTE_ID_RE",
    "ProfileNote",
    "card_pinned",
    "note_id_time",
    "ProfilePage",
    "classify_page",
    "initial_state",
    "note_ref",
    "user_ref",
    "note_url",
    "parse_note_page",
    "parse_profile_page",
    "post_from_card",
    "post_from_note",
    "post_from_read",
    "read_note_page",
    "video_renditions",
]

PLATFORM = "xhs"
SITE = "https://www.xiaohongshu.com"
#: A note id: 24 lowercase hex digits (a MongoDB ObjectId).
NOTE_ID_RE = re.compile(r"^[0-9a-f]{24}$")
#: A user id has the same shape.
USER_ID_RE = NOTE_ID_RE
#: Codes that mean "slow down": 300012 (IP at risk), 300013 (访问频次异常).
RATE_LIMIT_CODES = {300012, 300013}
#: Codes that mean "log in": -100 (登录已过期), -101 (未登录).
LOGIN_CODES = {-100, -101}
#: HTTP statuses XHS answers when it rate-limits (461 comes with a ``verifytype`` header).
RATE_LIMIT_STATUSES = {461}
#: Stream lists of ``video.media.stream`` read, in order of preference, with the codec family each carries.
STREAM_CODECS = (("h264", "avc1"), ("h265", "hevc"))
#: Entries read from any one list (a real note has a handful).
MAX_ENTRIES = 64
_STATE_MARK = "window.__INITIAL_STATE__"
#: Caps of a page state (a real note or profile page: ~300 KB, a few thousand objects).
MAX_STATE_BYTES = 8 * 1024 * 1024
MAX_STATE_OBJECTS = 200_000
_XSEC_RE = re.compile(r"^[A-Za-z0-9_=+/-]{1,256}$")
# Milliseconds between 2000 and 2100: anything else is not a time.
_MS_MIN, _MS_MAX = 946_684_800_000, 4_102_444_800_000
#: Seconds of 2013-01-01 (before XHS existed) and 2100: an id prefix outside them is no creation time.
_ID_TIME_MIN, _ID_TIME_MAX = 1_356_998_400, 4_102_444_800


# ------------------------------------------------------------------------------------------------ helpers


def _list(value: Any) -> list[Any]:
    return as_list(value, MAX_ENTRIES)


def _text(value: Any) -> str:
    return as_text(value).strip()


def _positive(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


def _undefined_to_none(value: Any) -> Any:
    """chompjs reads a bare ``undefined`` as the string ``"undefined"``: make it ``None``, everywhere."""
    if isinstance(value, dict):
        return {k: _undefined_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_undefined_to_none(v) for v in value]
    return None if value == "undefined" else value


def note_url(note_id: str) -> str:
    """The canonical page of a note (without its ``xsec_token``)."""
    return f"{SITE}/explore/{note_id}"


def note_ref(text: str) -> tuple[str, str | None, str | None]:
    """``(note id, xsec_token, xsec_source)`` of a note id or a note URL as copied from the browser
    (``https://www.xiaohongshu.com/explore/<id>?xsec_token=…&xsec_source=pc_feed``, also ``/discovery/item/<id>``
    and ``/user/profile/<user>/<id>``). Raises ValueError for anything else."""
    text = text.strip()
    if NOTE_ID_RE.match(text):
        return text, None, None
    parts = urlsplit(text)
    host = (parts.hostname or "").lower()
    on_site = host == "xiaohongshu.com" or host.endswith(".xiaohongshu.com")
    if parts.scheme not in ("http", "https") or not on_site:
        raise ValueError("must be a 24-hex-digit note id or a https://www.xiaohongshu.com/explore/<id> URL")
    segments = [s for s in parts.path.split("/") if s]
    note_id = segments[-1] if segments else ""
    if not NOTE_ID_RE.match(note_id) or not (
            segments[:1] == ["explore"] or segments[:2] == ["discovery", "item"]
            or (segments[:2] == ["user", "profile"] and len(segments) == 4)):
        raise ValueError("must be a 24-hex-digit note id or a https://www.xiaohongshu.com/explore/<id> URL")
    query = parse_qs(parts.query)
    token = (query.get("xsec_token") or [None])[0]
    source = (query.get("xsec_source") or [None])[0]
    if token is not None and not _XSEC_RE.match(token):
        raise ValueError("xsec_token of the note URL is malformed")
    if source is not None and not re.fullmatch(r"[A-Za-z0-9_]{1,32}", source):
        source = None
    return note_id, token, source


def user_ref(text: str) -> str:
    """The user id of a 24-hex-digit id or a ``https://www.xiaohongshu.com/user/profile/<id>`` URL. Raises
    ValueError for anything else."""
    text = text.strip()
    if USER_ID_RE.match(text):
        return text
    parts = urlsplit(text)
    host = (parts.hostname or "").lower()
    segments = [s for s in parts.path.split("/") if s]
    if (parts.scheme in ("http", "https") and (host == "xiaohongshu.com" or host.endswith(".xiaohongshu.com"))
            and len(segments) == 3 and segments[:2] == ["user", "profile"] and USER_ID_RE.match(segments[2])):
        return segments[2]
    raise ValueError("must be a 24-hex-digit user id or a https://www.xiaohongshu.com/user/profile/<id> URL")


# ------------------------------------------------------------------------------------------------ the state


class StateTooLarge(ValueError):
    """A page state past :data:`MAX_STATE_BYTES` or :data:`MAX_STATE_OBJECTS`: the page fails with this reason
    (it is not retried: the same page would come back)."""


def initial_state(html: str) -> dict[str, Any]:
    """``window.__INITIAL_STATE__`` of a page as plain data (``undefined`` → ``None``). Raises ValueError when the
    page carries none or it is not an object literal, :class:`StateTooLarge` when it is past the caps (checked
    before parsing: a state of millions of tiny objects costs ~60 bytes of memory per source byte to parse).

    The last page's state is kept: the platform errors middleware and the spider read the same page, and it is
    parsed once."""
    at = html.find(_STATE_MARK)
    if at < 0:
        raise ValueError("no window.__INITIAL_STATE__ in the page")
    eq = html.find("=", at + len(_STATE_MARK))
    if eq < 0:
        raise ValueError("no window.__INITIAL_STATE__ in the page")
    return _parsed_state(html[eq + 1:])


@functools.lru_cache(maxsize=1)
def _parsed_state(text: str) -> dict[str, Any]:
    if len(text) > MAX_STATE_BYTES:
        raise StateTooLarge(f"window.__INITIAL_STATE__ of {len(text)} characters, more than {MAX_STATE_BYTES}")
    objects = text.count("{") + text.count("[")  # an upper bound (brackets in strings count too): cheap, no parse
    if objects > MAX_STATE_OBJECTS:
        raise StateTooLarge(f"window.__INITIAL_STATE__ of {objects} objects, more than {MAX_STATE_OBJECTS}")
    try:
        # Before chompjs, which recurses: a state nested past MAX_DEPTH is refused with its reason.
        check_depth(text, 0)
    except ValueError as e:
        raise ValueError(f"window.__INITIAL_STATE__ is {e}") from None
    # Imported by the first XHS state read, not by every crawl (docs/benchmarks.md, "Start-up").
    import chompjs

    try:
        state = chompjs.parse_js_object(text)
    except ValueError as e:
        raise ValueError(f"window.__INITIAL_STATE__ is not a JavaScript object literal: {e}") from None
    if not isinstance(state, dict):
        raise ValueError("window.__INITIAL_STATE__ is not an object")
    return _undefined_to_none(state)


def _request_info(state: dict[str, Any], area: str) -> tuple[str, int | None, str]:
    info = as_obj(as_obj(state.get(area)).get("serverRequestInfo"))
    if info.get("__v_isRef") is True:
        # A state serialized in a browser after hydration keeps Vue's ref wrapper around the value.
        info = as_obj(info.get("_value"))
    return _text(info.get("state")), as_int(info.get("errorCode")), _text(info.get("errMsg"))


def classify_page(status: int, body: bytes) -> str:
    """What an answer of the site means for the platform errors middleware: ``rate_limited`` (HTTP 461, code
    300012/300013 in a JSON body or in the page state), ``login_required`` (code -100/-101 in a JSON body),
    ``invalid`` (a 200 that is neither JSON nor a page with a state: retried) or ``ok``."""
    if status in RATE_LIMIT_STATUSES:
        return "rate_limited"
    if status != 200:
        return "ok"
    head = body[:64].lstrip()
    if head.startswith(b"{"):
        try:
            payload = json.loads(body)
        except ValueError:
            return "invalid"
        code = as_int(as_obj(payload).get("code"))
        if code in RATE_LIMIT_CODES:
            return "rate_limited"
        if code in LOGIN_CODES:
            return "login_required"
        return "ok"
    try:
        state = initial_state(body.decode("utf-8", "replace"))
    except StateTooLarge:
        return "ok"  # the spider fails the page with the reason; a retry would bring the same page
    except ValueError:
        return "invalid"
    for area in ("note", "user"):
        if _request_info(state, area)[1] in RATE_LIMIT_CODES:
            return "rate_limited"
    return "ok"


# ------------------------------------------------------------------------------------------------ media


def _is_preview(scene: str) -> bool:
    """A preview variant (``WB_PRV`` on note pages, ``FD_PRV_WEBP`` on profile cards): small, never first."""
    return "PRV" in scene.upper().split("_")


def _image_asset(note_id: str, index: int, entry: dict[str, Any]) -> MediaAsset | None:
    """One ``imageList`` entry or card ``cover``: the ``WB_DFT`` scene (else ``urlDefault``, else ``url``, else any
    scene that is not a preview, e.g. a profile card's ``FD_WM_WEBP``) first, the previews (``*_PRV*``,
    ``urlPre``) last."""
    scenes: dict[str, str] = {}
    for info in _list(entry.get("infoList")):
        info = as_obj(info)
        scene, url = _text(info.get("imageScene")), https_url(info.get("url"))
        if scene and url and scene not in scenes:
            scenes[scene] = url
    candidates = [scenes.get("WB_DFT"), https_url(entry.get("urlDefault")), https_url(entry.get("url")),
                  *(u for s, u in scenes.items() if s != "WB_DFT" and not _is_preview(s)),
                  *(u for s, u in scenes.items() if _is_preview(s)), https_url(entry.get("urlPre"))]
    urls = list(dict.fromkeys(u for u in candidates if u))
    if not urls:
        return None
    width, height = as_int(entry.get("width")), as_int(entry.get("height"))
    return MediaAsset(kind="image", key=f"{note_id}:{index}", url=urls[0], alternates=urls[1:],
                      width=_positive(width), height=_positive(height))


def video_renditions(video: Any) -> list[dict[str, Any]]:
    """The progressive MP4 streams of ``note.video`` as ``MediaAsset.renditions`` (plain JSON; see
    ``media.renditions.manifest_from_renditions``): every ``h264[]`` entry, then every ``h265[]`` one, each with
    ``masterUrl`` as ``url`` and ``backupUrls`` as ``alternates``; entries without a usable URL are dropped."""
    stream = as_obj(as_obj(as_obj(video).get("media")).get("stream"))
    out: list[dict[str, Any]] = []
    for name, codec in STREAM_CODECS:
        for entry in _list(stream.get(name)):
            entry = as_obj(entry)
            backups = [https_url(u) for u in _list(entry.get("backupUrls"))]
            urls = list(dict.fromkeys(u for u in (https_url(entry.get("masterUrl")), *backups) if u))
            if not urls:
                continue
            width, height = as_int(entry.get("width")), as_int(entry.get("height"))
            fmt = _text(entry.get("format")).lower()
            fps = entry.get("fps")
            out.append({
                "kind": "progressive", "url": urls[0], "alternates": urls[1:],
                "width": _positive(width), "height": _positive(height),
                "codecs": None, "codec": codec,
                "bandwidth": as_int(entry.get("avgBitrate")) or as_int(entry.get("videoBitrate")),
                "frame_rate": float(fps) if isinstance(fps, (int, float)) and not isinstance(fps, bool)
                and 0 < fps < 1000 else None,
                "mime": "video/mp4" if fmt == "mp4" else None,
                "size": as_int(entry.get("size")) if (as_int(entry.get("size")) or 0) > 0 else None,
                "quality": None, "segment_base": None,  # streamType is shared by every entry of a list
            })
    return out


def _live_clip(note_id: str, index: int, entry: dict[str, Any], *, still: MediaAsset) -> MediaAsset | None:
    """The motion clip of a Live Photo (``imageList[].livePhoto`` with its own ``stream.h264``/``h265``), right
    after its still, which it names (``live_of``); ``None`` for a plain picture."""
    if entry.get("livePhoto") is not True:
        return None
    renditions = video_renditions({"media": {"stream": entry.get("stream")}})
    if not renditions:
        return None
    first = renditions[0]
    return MediaAsset(kind="video", key=f"live:{note_id}:{index}", url=first["url"],
                      alternates=list(first["alternates"]), width=first["width"], height=first["height"],
                      renditions=renditions, live_of=still.key)


def _video_duration(video: dict[str, Any], renditions: list[dict[str, Any]]) -> float | None:
    seconds = as_int(as_obj(video.get("capa")).get("duration")) or as_int(
        as_obj(as_obj(video.get("media")).get("video")).get("duration"))
    if seconds and 0 < seconds < 86_400:
        return float(seconds)
    stream = as_obj(as_obj(video.get("media")).get("stream"))
    for name, _ in STREAM_CODECS:
        for entry in _list(stream.get(name)):
            ms = as_int(as_obj(entry).get("duration"))
            if ms and 0 < ms < 86_400_000:
                return ms / 1000
    return None


# ------------------------------------------------------------------------------------------------ notes


def _unavailable(note_id: str, reason: str, *, source: Source | None, fetched_at: str | None) -> Post:
    return Post(platform=PLATFORM, post_id=note_id, url=note_url(note_id), author=None, created_at=None,
                source=source, fetched_at=fetched_at, deleted=True, extra={"unavailable": reason})


def _author(user: Any) -> Author | None:
    user = as_obj(user)
    uid = clean_id(user.get("userId") or user.get("user_id"))
    if uid is None:
        return None
    return Author(id=uid, name=_text(user.get("nickname") or user.get("nickName")) or None)


def _metrics(interact: Any) -> tuple[Metrics, int | None]:
    info = as_obj(interact)
    return (Metrics(likes=parse_count(info.get("likedCount")), comments=parse_count(info.get("commentCount")),
                    shares=parse_count(info.get("shareCount"))), parse_count(info.get("collectedCount")))


def post_from_note(note: dict[str, Any], *, note_id: str, source: Source | None = None,
                   fetched_at: str | None = None) -> Post:
    """One note object (``noteDetailMap[id].note``) as a :class:`Post`: images, video, counts, tags."""
    metrics, collected = _metrics(note.get("interactInfo"))
    kind = _text(note.get("type")) or None
    media: list[MediaAsset] = []
    video = as_obj(note.get("video"))
    for index, entry in enumerate(_list(note.get("imageList"))):
        asset = _image_asset(note_id, index, as_obj(entry))
        if asset is None:
            continue
        media.append(asset)
        if video and not index:
            asset.cover_of = f"video:{note_id}"  # a video note's first image is its cover
        clip = _live_clip(note_id, index, as_obj(entry), still=asset)
        if clip is not None:
            media.append(clip)
    extra: dict[str, Any] = {"type": kind}
    if video:
        renditions = video_renditions(video)
        if renditions:
            first = renditions[0]
            media.append(MediaAsset(kind="video", key=f"video:{note_id}", url=first["url"],
                                    alternates=list(first["alternates"]), width=first["width"],
                                    height=first["height"], duration=_video_duration(video, renditions),
                                    renditions=renditions))
        else:
            extra["video_unavailable"] = "no h264/h265 stream with a usable URL"
    title = _text(note.get("title"))
    if title:
        extra["title"] = title
    tags = [_text(as_obj(t).get("name")) for t in _list(note.get("tagList"))]
    if any(tags):
        extra["tags"] = [t for t in tags if t]
    if collected is not None:
        extra["collected"] = collected
    # Milliseconds, between 2000 and 2100.
    created, updated = (iso_from_timestamp(note.get(k), per_second=1000, low=_MS_MIN, high=_MS_MAX)
                        for k in ("time", "lastUpdateTime"))
    if updated:
        extra["updated_at"] = updated
    location = _text(note.get("ipLocation"))
    if location:
        extra["ip_location"] = location
    return Post(platform=PLATFORM, post_id=note_id, url=note_url(note_id), author=_author(note.get("user")),
                created_at=created, text=_text(note.get("desc")), metrics=metrics,
                media=media, source=source, fetched_at=fetched_at, extra=extra)


def read_note_page(html: str, *, note_id: str) -> dict[str, Any]:
    """What the note page ``/explore/{note_id}`` says, as plain JSON: ``{"note": {…}}`` (the raw note object) or
    ``{"unavailable": reason}``, the latter only when the page says the note cannot be shown
    (``serverRequestInfo.state == "fail"`` or a non-zero ``errorCode``). The note is read from
    ``note.noteDetailMap[id].note``, or from ``note.note`` in the older layout (2022–2023 pages). Raises
    :class:`PlatformError` (``rate_limited``) for code 300012 in the state and ValueError for a page the parser
    cannot read (no state, or a state that holds no such note and says nothing of it): a failed page, retried,
    never a deleted note."""
    state = initial_state(html)
    status, code, message = _request_info(state, "note")
    if code in RATE_LIMIT_CODES:
        raise PlatformError("rate_limited", message or "IP at risk", code=code)
    if status == "fail" or code not in (None, 0):
        reason = message or "the note cannot be shown"
        return {"unavailable": f"{reason} (code {code})" if code is not None else reason}
    area = as_obj(state.get("note"))
    details = area.get("noteDetailMap")
    note = as_obj(as_obj(as_obj(details).get(note_id)).get("note"))
    if details is None and clean_id(as_obj(area.get("note")).get("noteId")) == note_id:
        note = as_obj(area.get("note"))  # the older layout: one note at note.note
    if not note:
        raise ValueError(f"the page's state holds no note {note_id} (no noteDetailMap[id].note, no note.note) "
                         "and no failure: not a page this parser reads")
    if clean_id(note.get("noteId")) not in (None, note_id):
        raise ValueError(f"the page's state holds another note ({str(note.get('noteId'))[:30]!r})")
    return {"note": note}


def post_from_read(read: dict[str, Any], *, note_id: str, source: Source | None = None,
                   fetched_at: str | None = None) -> Post:
    """The :class:`Post` of what :func:`read_note_page` gave (``deleted`` with ``extra.unavailable`` for a note
    that is not there)."""
    note = read.get("note")
    if not isinstance(note, dict):
        return _unavailable(note_id, str(read.get("unavailable") or "the page carries no such note"),
                            source=source, fetched_at=fetched_at)
    return post_from_note(note, note_id=note_id, source=source, fetched_at=fetched_at)


def parse_note_page(html: str, *, note_id: str, source: Source | None = None,
                    fetched_at: str | None = None) -> Post:
    """The note page ``/explore/{note_id}`` as one :class:`Post`; an unavailable note is a post with ``deleted``
    and ``extra.unavailable``. Raises like :func:`read_note_page`."""
    return post_from_read(read_note_page(html, note_id=note_id), note_id=note_id, source=source,
                          fetched_at=fetched_at)


# ------------------------------------------------------------------------------------------------ profiles


def note_id_time(note_id: str) -> str | None:
    """When a note was created, from its id (an ObjectId: the first 8 hex digits are Unix seconds), in the
    records' one time format; ``None`` for an id that is not one or whose prefix is no plausible time."""
    if not NOTE_ID_RE.match(note_id):
        return None
    return iso_from_timestamp(int(note_id[:8], 16), low=_ID_TIME_MIN, high=_ID_TIME_MAX)


def card_pinned(card: dict[str, Any]) -> bool:
    """Whether a profile card is a note its author pinned to the top (``interactInfo.sticky``; ``sticky`` on the
    card itself in older pages): out of time order, so it never stops pagination nor moves a high-water mark."""
    return any(value in (True, 1, "1", "true") for value in (as_obj(card.get("interactInfo")).get("sticky"),
                                                              card.get("sticky")))


@dataclass
class ProfileNote:
    """A note card of a profile page: its id, the ``xsecToken`` that opens its page, the card itself, whether it is
    pinned (:func:`card_pinned`) and when it was created as its id says (:func:`note_id_time`)."""

    note_id: str
    xsec_token: str | None
    card: dict[str, Any]
    pinned: bool = False
    listed_at: str | None = None


@dataclass
class ProfilePage:
    """What a profile page carries: the user and the first notes (later ones need signed APIs)."""

    user: Author | None
    notes: list[ProfileNote] = field(default_factory=list)
    has_more: bool = False
    unavailable: str | None = None


def parse_profile_page(html: str, *, user_id: str) -> ProfilePage:
    """The profile page ``/user/profile/{user_id}``: the user and the note cards of its first tab
    (``user.notes[0]``), in order, each once. Raises :class:`PlatformError` for code 300012."""
    state = initial_state(html)
    user_area = as_obj(state.get("user"))
    status, code, message = _request_info(state, "user")
    if code in RATE_LIMIT_CODES:
        raise PlatformError("rate_limited", message or "IP at risk", code=code)
    basic = as_obj(as_obj(user_area.get("userPageData")).get("basicInfo"))
    name = _text(basic.get("nickname")) or None
    page = ProfilePage(user=Author(id=user_id, name=name))
    if status == "fail":
        reason = message or "the user cannot be shown"
        page.unavailable = f"{reason} (code {code})" if code is not None else reason
        return page
    tabs = user_area.get("notes")
    cards = _list(tabs[0]) if isinstance(tabs, list) and tabs else []
    seen: set[str] = set()
    for raw in cards:
        raw = as_obj(raw)
        card = as_obj(raw.get("noteCard"))
        note_id = clean_id(raw.get("id") or card.get("noteId"))
        if note_id is None or not NOTE_ID_RE.match(note_id) or note_id in seen:
            continue
        seen.add(note_id)
        token = _text(raw.get("xsecToken") or card.get("xsecToken"))
        page.notes.append(ProfileNote(note_id=note_id, xsec_token=token if _XSEC_RE.match(token) else None,
                                      card=card, pinned=card_pinned(card), listed_at=note_id_time(note_id)))
    more = _list(user_area.get("noteQueries"))
    page.has_more = bool(more and as_obj(more[0]).get("hasMore"))
    return page


def post_from_card(card: dict[str, Any], *, note_id: str, source: Source | None = None,
                   fetched_at: str | None = None) -> Post:
    """A profile card as a (partial) :class:`Post`: title, author, likes and the cover image only."""
    metrics, _ = _metrics(card.get("interactInfo"))
    media: list[MediaAsset] = []
    cover = _image_asset(note_id, 0, as_obj(card.get("cover")))
    if cover is not None:
        media.append(cover)
    extra: dict[str, Any] = {"type": _text(card.get("type")) or None, "partial": "profile card"}
    title = _text(card.get("displayTitle"))
    if title:
        extra["title"] = title
    if card_pinned(card):
        extra["pinned"] = True
    return Post(platform=PLATFORM, post_id=note_id, url=note_url(note_id), author=_author(card.get("user")),
                created_at=None, metrics=metrics, media=media, source=source, fetched_at=fetched_at, extra=extra)
