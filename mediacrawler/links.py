"""Share links → the spider and arguments that crawl them (``mediacrawler get``; docs/platforms.md, "Links").

:func:`route` is pure: ``route("https://www.bilibili.com/video/BV1Sbx411A01")`` is ``("bilibili", {"bvid":
"BV1Sbx411A01"})``. A short link that only its redirect can name (``b23.tv``, ``xhslink.com``) routes to
:data:`SHORT_LINK` with the setting of its root and its path: the caller requests ``<root><path>`` and routes the
``Location`` it answers (commands/get.py, bounded). Douyin's short links (``v.douyin.com``) go to the Douyin
spider as they are: it follows them itself (``DOUYIN_SHORT_URL``). :class:`UnknownLink` names what is not known.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit

from mediacrawler.parsers import bilibili as bilibili_parser
from mediacrawler.parsers import douyin as douyin_parser
from mediacrawler.parsers import weibo as weibo_parser
from mediacrawler.parsers import xhs as xhs_parser

#: The "spider" of a short link that must be followed first; its arguments are ``root`` (the setting naming the
#: host's root, e.g. ``BILIBILI_SHORT_URL``) and ``path``.
SHORT_LINK = "short-link"
#: Short-link hosts → the setting of their root (so that tests and mirrors can point them elsewhere).
SHORT_HOSTS = {"b23.tv": "BILIBILI_SHORT_URL", "www.b23.tv": "BILIBILI_SHORT_URL",
               "bili2233.cn": "BILIBILI_SHORT_URL", "xhslink.com": "XHS_SHORT_URL",
               "www.xhslink.com": "XHS_SHORT_URL"}

_BVID = re.compile(r"BV[0-9A-Za-z]{10}")
_AVID = re.compile(r"[aA][vV][1-9][0-9]{0,15}")
_DIGITS = re.compile(r"[0-9]{1,20}")
_FB_NAME = re.compile(r"[0-9A-Za-z.]{1,100}")
#: Facebook paths that are not a page's name.
_FB_RESERVED = frozenset({"watch", "reel", "videos", "groups", "events", "profile.php", "story.php", "share",
                          "permalink.php", "photo.php", "photo", "login", "marketplace", "gaming", "hashtag"})


class Route(NamedTuple):
    """The spider (``weibo``, ``bilibili``…, or :data:`SHORT_LINK`) and its ``-a`` arguments."""

    spider: str
    args: dict[str, str]


class UnknownLink(ValueError):
    """A link no spider takes (the message names it)."""


def route(url: str) -> Route:
    """The spider and arguments that crawl ``url``; :class:`UnknownLink` when none does."""
    text = url.strip()
    try:
        parts = urlsplit(text if "://" in text else f"https://{text}")
        host = (parts.hostname or "").lower()
    except ValueError:
        raise UnknownLink(f"{text[:200]}: not a link") from None
    if parts.scheme not in ("http", "https") or not host:
        raise UnknownLink(f"{text[:200]}: not an http(s) link")
    segments = [s for s in parts.path.split("/") if s]
    query = parse_qs(parts.query)
    found = None
    if host in SHORT_HOSTS:
        found = Route(SHORT_LINK, {"root": SHORT_HOSTS[host], "path": parts.path or "/"}) if segments else None
    elif host.endswith("weibo.com") or host.endswith("weibo.cn"):
        found = _weibo(text, host, segments, query)
    elif host.endswith("bilibili.com"):
        found = _bilibili(host, segments, query)
    elif host.endswith("facebook.com") or host == "fb.com":
        found = _facebook(segments, query)
    elif host.endswith("xiaohongshu.com"):
        found = _xhs(text, segments)
    elif host.endswith("douyin.com"):
        try:
            douyin_parser.parse_target(text)
        except ValueError:
            found = None
        else:
            found = Route("douyin", {"aweme": text})
    if found is None:
        raise UnknownLink(f"{text[:200]}: not a link of a post, video, account or list mediacrawler knows")
    return found


def _weibo(text: str, host: str, segments: list[str], query: dict[str, list[str]]) -> Route | None:
    if host == "s.weibo.com" and query.get("q"):
        return Route("weibo", {"keyword": query["q"][0]})
    if len(segments) == 2 and segments[0] in ("u", "profile") and _DIGITS.fullmatch(segments[1]):
        return Route("weibo", {"uid": segments[1]})
    if len(segments) == 1 and _DIGITS.fullmatch(segments[0]) and host.endswith("weibo.com"):
        return Route("weibo", {"uid": segments[0]})
    try:
        return Route("weibo", {"post": weibo_parser.post_ref(text)})
    except ValueError:
        return None


def _bilibili(host: str, segments: list[str], query: dict[str, list[str]]) -> Route | None:
    if host == "search.bilibili.com" and query.get("keyword"):
        return Route("bilibili", {"keyword": query["keyword"][0]})
    if host == "space.bilibili.com" and segments and _DIGITS.fullmatch(segments[0]):
        mid, rest = segments[0], segments[1:]
        sid = (query.get("sid") or [""])[0]
        if rest[:1] == ["favlist"] and _DIGITS.fullmatch((query.get("fid") or [""])[0]):
            return Route("bilibili", {"fav": query["fid"][0]})
        if rest[:2] == ["channel", "collectiondetail"] and _DIGITS.fullmatch(sid):
            return Route("bilibili", {"season": f"{mid}:{sid}"})
        if rest[:2] == ["channel", "seriesdetail"] and _DIGITS.fullmatch(sid):
            return Route("bilibili", {"series": f"{mid}:{sid}"})
        if rest[:1] == ["lists"] and len(rest) == 2 and _DIGITS.fullmatch(rest[1]):
            kind = (query.get("type") or ["season"])[0]
            return Route("bilibili", {"series" if kind == "series" else "season": f"{mid}:{rest[1]}"})
        if rest in ([], ["video"], ["upload", "video"]):
            return Route("bilibili", {"mid": mid})
        return None
    if segments[:1] == ["video"] and len(segments) >= 2 and _BVID.fullmatch(segments[1]):
        return Route("bilibili", {"bvid": segments[1]})
    if segments[:1] == ["video"] and len(segments) >= 2 and _AVID.fullmatch(segments[1]):
        try:
            return Route("bilibili", {"bvid": bilibili_parser.aid_to_bvid(int(segments[1][2:]))})
        except ValueError:
            return None
    # www.bilibili.com/list/ml<id> and /medialist/detail/ml<id>: a favourites folder.
    last = segments[-1] if segments else ""
    if segments[:1] in (["list"], ["medialist"]) and last.startswith("ml") and _DIGITS.fullmatch(last[2:]):
        return Route("bilibili", {"fav": last[2:]})
    return None


def _facebook(segments: list[str], query: dict[str, list[str]]) -> Route | None:
    video = (query.get("v") or [""])[0]
    story, owner = (query.get("story_fbid") or [""])[0], (query.get("id") or [""])[0]
    if segments in (["permalink.php"], ["story.php"]) and _DIGITS.fullmatch(story) and _DIGITS.fullmatch(owner):
        return Route("facebook", {"post": f"{owner}_{story}"})
    if len(segments) == 3 and segments[1] == "posts" and _DIGITS.fullmatch(segments[0]) \
            and _DIGITS.fullmatch(segments[2]):
        return Route("facebook", {"post": f"{segments[0]}_{segments[2]}"})  # a pfbid… post id is not a Graph id
    if segments[:1] == ["watch"] and _DIGITS.fullmatch(video):
        return Route("facebook", {"video": video})
    if segments[:1] == ["reel"] and len(segments) == 2 and _DIGITS.fullmatch(segments[1]):
        return Route("facebook", {"video": segments[1]})
    if len(segments) >= 3 and segments[1] == "videos" and _DIGITS.fullmatch(segments[-1]):
        return Route("facebook", {"video": segments[-1]})  # /<page>/videos/<id> and /<page>/videos/<title>/<id>
    if segments == ["profile.php"] and _DIGITS.fullmatch((query.get("id") or [""])[0]):
        return Route("facebook", {"page": query["id"][0]})
    if len(segments) == 1 and segments[0] not in _FB_RESERVED and _FB_NAME.fullmatch(segments[0]):
        return Route("facebook", {"page": segments[0]})
    if len(segments) >= 2 and segments[0] == "pg" and _FB_NAME.fullmatch(segments[1]):
        return Route("facebook", {"page": segments[1]})  # /pg/<page>/posts and the like
    return None


def _xhs(text: str, segments: list[str]) -> Route | None:
    if len(segments) == 3 and segments[:2] == ["user", "profile"]:
        try:
            return Route("xhs", {"user": xhs_parser.user_ref(text)})
        except ValueError:
            return None
    try:
        xhs_parser.note_ref(text)
    except ValueError:
        return None
    return Route("xhs", {"note": text})
