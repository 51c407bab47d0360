"""XiaoHongShu (www.xiaohongshu.com) in the sandbox: a deterministic world of notes and the pages rendered from it.

Reference: docs/sandbox.md, "xhs.py".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .det import stable_hex, stable_int
from .video import DURATION as VIDEO_DURATION
from .video import RENDITIONS

__all__ = [
    "EMPTY_NOTE",
    "GONE_NOTE",
    "NOTE_COUNT",
    "PROFILE_NOTES",
    "USER_ID",
    "XhsImage",
    "XhsNote",
    "XhsWorld",
    "build_xhs_world",
    "js_literal",
    "note_page",
    "profile_page",
    "rate_limited_json",
    "rate_limited_page",
]

USER_ID = "5f0e1d2c3b4a596877665544"
USER_NAME = "沙盒小海豚"
NOTE_COUNT = 8
PROFILE_NOTES = 6
GONE_NOTE = "6560aaaaaaaaaaaaaaaaaaaa"
EMPTY_NOTE = "6560bbbbbbbbbbbbbbbbbbbb"
#: 2026-11-28T10:00:00Z in milliseconds: the newest note's time.
XHS_NOW_MS = 1_795_860_000_000
UNDEFINED = object()
_TITLES = ["周末去海边", "海浪的声音", "一杯咖啡的时间", "今日份晚霞"]
_COUNTS = ["1.2万", "10万+", "987", "3456", "2.5万", "12"]


@dataclass(frozen=True)
class XhsImage:
    """An image: ``n`` (served as ``/media/img/{n}.jpg``) and its real size."""

    n: int
    width: int
    height: int


@dataclass(frozen=True)
class XhsNote:
    """A note: ``kind`` is the site's ``type`` (``normal`` or ``video``); ``video_id`` names its video media."""

    id: str
    kind: str
    title: str
    desc: str
    time_ms: int
    xsec_token: str
    images: tuple[XhsImage, ...]
    liked: str
    collected: str
    comments: str
    shares: str
    video_id: str | None = None


@dataclass
class XhsWorld:
    """The notes the sandbox serves (see the module docstring)."""

    notes: dict[str, XhsNote] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    #: A note pinned to the top of the profile (``None``: none).
    pinned: str | None = None

    def user_notes(self) -> list[XhsNote]:
        """The user's notes, newest first."""
        return [self.notes[i] for i in self.order]


def _image(n: int) -> XhsImage:
    # Same formula as mediacrawler_sandbox.media.generic_image: the declared size is the served image's.
    return XhsImage(n=n, width=160 + stable_int("img-w", n, bits=7), height=160 + stable_int("img-h", n, bits=7))


def build_xhs_world(seed: int = 1) -> XhsWorld:
    """Build the world (same seed → equal worlds)."""
    world = XhsWorld()
    time_ms = XHS_NOW_MS
    for i in range(NOTE_COUNT):
        note_id = f"{time_ms // 1000:08x}" + stable_hex(seed, "xhs-note", i, length=16)
        kind = "video" if i % 4 == 1 else "normal"
        count = {0: 3, 1: 1, 2: 4, 3: 1}[i % 4]
        images = tuple(_image(90_000 + i * 10 + k) for k in range(count))
        token = "AB" + stable_hex(seed, "xsec", note_id, length=40) + "="
        note = XhsNote(
            id=note_id, kind=kind, title=f"{_TITLES[i % 4]} #{i + 1}", desc=f"第{i + 1}篇 #沙盒[话题]#\n今天也很好",
            time_ms=time_ms, xsec_token=token, images=images, liked=_COUNTS[i % 6], collected=_COUNTS[(i + 3) % 6],
            comments=_COUNTS[(i + 1) % 6], shares=str(i * 7),
            video_id=f"xhs{note_id[-10:]}" if kind == "video" else None)
        world.notes[note_id] = note
        world.order.append(note_id)
        time_ms -= (3600 + stable_int(seed, "xhs-gap", i, bits=12)) * 1000
    return world


# -- rendering ----------------------------------------------------------------------------------------------------


def js_literal(obj: Any) -> str:
    """``obj`` as the site's SSR writes it: JSON with bare ``undefined`` for :data:`UNDEFINED` and every ``/``
    escaped as ``\\u002F``."""
    def default(o: Any) -> Any:
        if o is UNDEFINED:
            return "__SANDBOX_UNDEFINED__"
        raise TypeError(f"not serializable: {o!r}")

    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=default)
    # Also keeps "</script>" in a value from closing the script element.
    return text.replace('"__SANDBOX_UNDEFINED__"', "undefined").replace("/", "\\u002F")


def _html(state: dict[str, Any], title: str) -> bytes:
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>" + title + " - 小红书</title>"
            "<script>window.__SETUP_SERVER_STATE__={\"__WEB_ID__\":\"sandbox\"}</script></head>"
            "<body><div id=\"app\"></div><script>window.__INITIAL_STATE__=" + js_literal(state) + "</script>"
            "<script src=\"/xhs/static/vendor.js\"></script></body></html>").encode("utf-8")


def _image_json(base: str, image: XhsImage) -> dict[str, Any]:
    sign = stable_hex("xhs-img", image.n, length=12)
    dft = f"{base}/media/img/{image.n}.jpg?sc=dft&sign={sign}"
    prv = f"{base}/media/img/{image.n}.jpg?sc=prv&sign={sign}"
    return {"fileId": "", "height": image.height, "width": image.width, "url": "", "traceId": "",
            "livePhoto": False,
            "infoList": [{"imageScene": "WB_PRV", "url": prv}, {"imageScene": "WB_DFT", "url": dft}],
            "urlPre": prv, "urlDefault": dft, "stream": {}}


def _video_json(base: str, video_id: str) -> dict[str, Any]:
    h264 = []
    for spec in reversed(RENDITIONS):  # the site lists the best stream first
        url = f"{base}/media/progressive/{video_id}/{spec.name}.mp4"
        h264.append({"masterUrl": f"{url}?sign={stable_hex('xhs-v', video_id, spec.name, length=10)}",
                     "backupUrls": [f"{url}?bak=1"], "width": spec.width, "height": spec.height,
                     "avgBitrate": spec.height * 2000, "videoBitrate": spec.height * 1800, "audioBitrate": 128_000,
                     "duration": int(VIDEO_DURATION * 1000), "fps": 25, "format": "mp4", "videoCodec": "h264",
                     "streamType": 259, "qualityType": "HD", "streamDesc": "WM_X264_MP4_WEB", "defaultStream": 0,
                     "hdrType": 0, "volume": 0, "rotate": 0, "audioCodec": "aac", "audioChannels": 2})
    return {"media": {"videoId": stable_int("xhs-vid", video_id, bits=60),
                      "video": {"bizName": 110, "bizId": str(stable_int("xhs-biz", video_id, bits=50)),
                                "duration": int(VIDEO_DURATION), "md5": "", "hdrType": 0, "drmType": 0,
                                "streamTypes": [259]},
                      "stream": {"h264": h264, "h265": [], "av1": [], "h266": []}},
            "image": {"firstFrameFileid": f"{video_id}_ff", "thumbnailFileid": UNDEFINED},
            "capa": {"duration": int(VIDEO_DURATION)}, "consumer": {"originVideoKey": f"pre_post/{video_id}"}}


def _user_json() -> dict[str, Any]:
    return {"userId": USER_ID, "nickname": USER_NAME, "avatar": "/media/img/1.jpg", "xsecToken": UNDEFINED}


def note_json(base: str, note: XhsNote) -> dict[str, Any]:
    """``noteDetailMap[id].note`` of a note."""
    return {
        "noteId": note.id, "type": note.kind, "title": note.title, "desc": note.desc, "time": note.time_ms,
        "lastUpdateTime": note.time_ms + 60_000, "ipLocation": "上海", "user": _user_json(),
        "interactInfo": {"followed": False, "relation": "none", "liked": False, "likedCount": note.liked,
                         "collected": False, "collectedCount": note.collected, "commentCount": note.comments,
                         "shareCount": note.shares},
        "imageList": [_image_json(base, image) for image in note.images],
        "tagList": [{"id": "5c0d" + stable_hex("tag", length=20), "name": "沙盒", "type": "topic"}],
        "atUserList": [], "shareInfo": {"unShare": False}, "xsecToken": note.xsec_token,
        "video": _video_json(base, note.video_id) if note.video_id else UNDEFINED,
    }


def _state(note_id: str | None, detail: dict[str, Any], request_info: dict[str, Any],
           user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "global": {"appSettings": {"notificationInterval": 30}, "serverTime": XHS_NOW_MS,
                   "firstVisitUrl": f"/explore/{note_id}" if note_id else "/", "easyAccessModalVisible": {}},
        "user": user or {"loggedIn": False, "activated": False, "userInfo": {"user_id": UNDEFINED}, "follow": [],
                         "userPageData": {}, "activeTab": {}, "notes": [[], [], [], []],
                         "isFetchingNotes": [False] * 4, "noteQueries": []},
        "note": {"prevRouteData": {}, "prevRoute": "Empty", "commentTarget": {}, "isImgFullscreen": False,
                 "gotoPage": "", "firstNoteId": note_id or "", "autoOpenNote": False, "topCommentId": "",
                 "noteDetailMap": detail, "serverRequestInfo": request_info, "volume": 1,
                 "recommendVideoMap": {}, "videoFeedType": "CreatorTab", "rate": 1,
                 "currentNoteId": note_id or UNDEFINED, "mediaWidth": 0, "noteHeight": 0},
        "feed": {"feeds": [], "isFetching": False, "currentChannel": UNDEFINED},
    }


_OK = {"state": "success", "errorCode": 0, "errMsg": ""}


def _detail_entry(note: dict[str, Any]) -> dict[str, Any]:
    return {"comments": {"list": [], "cursor": "", "hasMore": True, "loading": False, "firstRequestFinish": False},
            "currentTime": XHS_NOW_MS, "note": note}


def note_page(world: XhsWorld, note_id: str, *, base: str, xsec_token: str | None) -> bytes:
    """The HTML of ``/explore/{note_id}``; ``base`` is the sandbox origin (media URLs point back at it)."""
    note = world.notes.get(note_id)
    if note_id == EMPTY_NOTE:
        return _html(_state(note_id, {note_id: _detail_entry({})}, _OK), "小红书")
    if note is None or (xsec_token is not None and xsec_token != note.xsec_token):
        fail = {"state": "fail", "errorCode": -510001, "errMsg": "当前笔记暂时无法浏览"}
        return _html(_state(note_id, {}, fail), "小红书")
    return _html(_state(note_id, {note_id: _detail_entry(note_json(base, note))}, _OK), note.title)


def profile_page(world: XhsWorld, user_id: str, *, base: str) -> bytes:
    """The HTML of ``/user/profile/{user_id}``: the first :data:`PROFILE_NOTES` note cards, ``hasMore`` true."""
    if user_id != USER_ID:
        user = {"loggedIn": False, "userPageData": {}, "notes": [[], [], [], []], "noteQueries": [],
                "serverRequestInfo": {"state": "fail", "errorCode": -510001, "errMsg": "用户不存在"}}
        return _html(_state(None, {}, _OK, user), "小红书")
    cards = []
    notes = world.user_notes()
    if world.pinned in world.notes:
        notes = [world.notes[world.pinned]] + [n for n in notes if n.id != world.pinned]
    for index, note in enumerate(notes[:PROFILE_NOTES]):
        cover = _image_json(base, note.images[0])
        cards.append({"id": note.id, "index": index, "exposed": False, "ssrRendered": True,
                      "xsecToken": note.xsec_token,
                      "noteCard": {"type": note.kind, "displayTitle": note.title, "noteId": note.id,
                                   "xsecToken": note.xsec_token, "cover": cover,
                                   "user": {**_user_json(), "nickName": USER_NAME},
                                   "interactInfo": {"liked": False, "likedCount": note.liked,
                                                    "sticky": note.id == world.pinned}}})
    user = {"loggedIn": False, "activated": False, "userInfo": {"user_id": UNDEFINED}, "follow": [],
            "userPageData": {"basicInfo": {"nickname": USER_NAME, "desc": "沙盒里的生活", "gender": 1,
                                           "ipLocation": "上海", "redId": "95270001", "imageb": UNDEFINED},
                             "interactions": [{"type": "fans", "name": "粉丝", "count": "3.4万"}]},
            "activeTab": {"key": 0, "index": 0, "query": "note", "label": "笔记"},
            "notes": [cards, [], [], []], "isFetchingNotes": [False] * 4,
            "noteQueries": [{"num": 30, "cursor": cards[-1]["id"] if cards else "", "userId": USER_ID,
                             "hasMore": len(world.order) > PROFILE_NOTES}],
            "serverRequestInfo": _OK}
    return _html(_state(None, {}, _OK, user), USER_NAME)


def rate_limited_page(note_id: str | None) -> bytes:
    """A page whose state says code 300012 (IP at risk)."""
    fail = {"state": "fail", "errorCode": 300012, "errMsg": "IP存在风险，请切换可靠网络环境后重试"}
    return _html(_state(note_id, {}, fail), "小红书")


def rate_limited_json() -> bytes:
    """The JSON body of a code 300012 answer (also the body of an HTTP 461)."""
    return json.dumps({"code": 300012, "success": False, "msg": "IP存在风险，请切换可靠网络环境后重试",
                       "data": {}}, ensure_ascii=False).encode("utf-8")


def short_link_target(world: XhsWorld, code: str) -> str | None:
    """Where ``xhslink.com/a/<code>`` redirects: code ``n<i>`` is the ``i``-th note of the user (0-based) on the
    real site's share URL, with its ``xsec_token``; any other code ``None`` (404)."""
    if not (code.startswith("n") and code[1:].isdigit() and int(code[1:]) < len(world.order)):
        return None
    note = world.notes[world.order[int(code[1:])]]
    return (f"https://www.xiaohongshu.com/discovery/item/{note.id}?app_platform=ios&xsec_token={note.xsec_token}"
            f"&xsec_source=app_share&type=normal")
