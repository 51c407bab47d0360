"""Weibo (m.weibo.cn) in the sandbox: a deterministic world model (the payloads: :mod:`.weibo_api`).

Reference: docs/sandbox.md, "weibo.py".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from .det import rng_for
from .media import thumbnail_size
from .video import DURATION as VIDEO_DURATION

__all__ = [
    "CST",
    "DEFAULT_USERS",
    "SHOWCASE_UID",
    "WEIBO_NOW",
    "WeiboPic",
    "WeiboPost",
    "WeiboUser",
    "WeiboVideo",
    "WeiboWorld",
    "build_weibo_world",
    "count_value",
    "format_created_at",
    "mid_to_bid",
]

CST = timezone(timedelta(hours=8))
#: The world's "now": the newest post of every timeline is a little older than this.
WEIBO_NOW = datetime(2026, 11, 28, 10, 0, 0, tzinfo=CST)
DEFAULT_USERS: tuple[int, ...] = (7365120894, 1669879400)
#: A timeline in every world beside the owners asked for (drawn from its own random stream, so nothing else
#: changes): one page of the media kinds beyond pictures and one video. Post 0 has three pictures, the first
#: and last Live Photos (``WeiboPost.live_pids``: the still and a motion clip); post 1 is a mixed post
#: (``mix_media_info``: one picture and two videos, each with its cover); post 2 is a video with its cover.
SHOWCASE_UID = 6000000001


# Weibo's mid → bid alphabet (digits, lower, upper), applied to 7-digit groups of the mid.
_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MID_EPOCH = 515483463  # mids are roughly (unix time - this) << 22, so newer posts have larger ids

_SENTENCES = [
    "今天天气不错，出门走走。",
    "新的一周，继续加油！",
    "刚看完一部电影，推荐给大家。",
    "这家店的咖啡真的很好喝。",
    "周末去爬山了，风景太美了。",
    "分享一首最近单曲循环的歌。",
    "工作再忙也要好好吃饭。",
    "夜跑五公里，打卡。",
    "读书笔记：慢慢来，比较快。",
    "今天的晚霞像一幅油画。",
    "感谢大家的支持，我们下次见。",
    "有没有人和我一样喜欢下雨天？",
    "记录一下生活中的小确幸。",
    "第一次尝试做蛋糕，居然成功了。",
    "地铁上看到一位老爷爷在读诗。",
    "新买的相机到了，试拍几张。",
]
_TOPICS = ["每日一善", "周末去哪儿", "读书打卡", "美食分享", "城市夜景", "摄影", "旅行日记"]
_EMOJI = [("[笑cry]", "xiaoku"), ("[doge]", "doge"), ("[心]", "xin"), ("[赞]", "zan"), ("[哈哈]", "haha")]
_NAMES = [
    "小鹿乱撞", "旅行的猫", "晚风与你", "科技前线", "吃货日记", "城市观察员", "摄影师阿杰", "读书会",
    "山间小路", "橘子汽水", "深夜食堂", "追光的人",
]
_SOURCES = ["iPhone 15 Pro Max", "微博 weibo.com", "HUAWEI Mate 60 Pro", "Redmi K70", "微博网页版", ""]
_REGIONS = ["北京", "上海", "广东", "浙江", "四川", "江苏"]
_DELETED_TEXT = (
    "抱歉，此微博已被作者删除。查看帮助：<a  href=\"https://m.weibo.cn/c/help/weibo/delete\" data-hide=\"\">"
    "<span class='url-icon'><img style='width: 1rem;height: 1rem' "
    "src='https://h5.sinaimg.cn/upload/2015/09/25/3/timeline_card_small_web_default.png'></span>"
    "<span class=\"surl-text\">网页链接</span></a>"
)


@dataclass(frozen=True)
class WeiboUser:
    """A Weibo account. ``followers_count`` is served as is (int or a string like ``"12.6万"``)."""

    id: int
    screen_name: str
    avatar_pid: str
    followers_count: int | str
    follow_count: int
    statuses_count: int
    verified: bool
    description: str


@dataclass(frozen=True)
class WeiboPic:
    """One picture of a post.

    ``width``/``height`` are the ``large`` variant's pixels; :attr:`thumb_size` is what ``orj360`` serves.
    ``content_pid`` is the pid whose bytes are served (``!= pid`` for a byte-identical duplicate). ``bad`` is
    ``None`` or the kind of broken body served for it: ``"html"``, ``"truncated"`` or ``"bomb"``.
    """

    pid: str
    ext: str
    width: int
    height: int
    content_pid: str
    bad: str | None = None

    @property
    def thumb_size(self) -> tuple[int, int]:
        """Pixel size of the ``orj360`` variant."""
        return thumbnail_size(self.width, self.height)

    def path(self, size: str = "large") -> str:
        """Server-relative URL path of this picture at ``size`` (``large`` or ``orj360``)."""
        return f"/media/weibo/{size}/{self.pid}.{self.ext}"

    def live_path(self) -> str:
        """Server-relative URL path of this picture's Live Photo motion clip (a real 360p MP4 of its own)."""
        return f"/media/weibo/live/{self.pid}.mp4"


#: media_info fields → quality of the file they point at (``""`` when the field is empty for a video).
VIDEO_FIELDS = ("stream_url", "stream_url_hd", "mp4_720p_mp4", "mp4_hd_url", "mp4_sd_url")
_FIELD_QUALITY = {
    "stream_url": "sd",
    "stream_url_hd": "hd",
    "mp4_720p_mp4": "720",
    "mp4_hd_url": "hd",
    "mp4_sd_url": "sd",
}


@dataclass(frozen=True)
class WeiboVideo:
    """A video attached through ``page_info``.

    ``qualities`` lists the files that exist (``"720"``, ``"hd"``, ``"sd"``); media_info fields whose quality is
    missing are served as ``""``. Files are real H.264/AAC MP4s
    (see :func:`mediacrawler_sandbox.media.video_bytes`);
    each quality has its own resolution and each video id its own bytes.
    """

    id: str
    object_id: str
    qualities: tuple[str, ...]
    duration: float
    cover_pid: str
    title: str

    def path(self, quality: str) -> str:
        """Server-relative URL path of the file of ``quality``."""
        return f"/media/weibo/video/{self.id}_{quality}.mp4"

    def field_paths(self) -> dict[str, str]:
        """``{media_info field: path or ""}`` exactly as rendered (relative paths)."""
        return {
            name: (self.path(_FIELD_QUALITY[name]) if _FIELD_QUALITY[name] in self.qualities else "")
            for name in VIDEO_FIELDS
        }

    def best_path(self) -> str:
        """Path of the highest quality file (720 > hd > sd)."""
        for quality in ("720", "hd", "sd"):
            if quality in self.qualities:
                return self.path(quality)
        raise ValueError(f"video {self.id} has no files")


@dataclass(frozen=True)
class WeiboPost:
    """One mblog. See the module docstring for field meanings."""

    id: str
    bid: str
    user_id: int | None
    created_at: datetime | None
    text: str
    is_long_text: bool = False
    source: str = ""
    region: str = ""
    reposts_count: int | str = 0
    comments_count: int | str = 0
    attitudes_count: int | str = 0
    pics: tuple[WeiboPic, ...] = ()
    video: WeiboVideo | None = None
    webpage: dict[str, str] | None = None
    retweeted_id: str | None = None
    deleted: bool = False
    truncated: str = field(default="", repr=False)
    #: Pids of :attr:`pics` that are Live Photos (served with ``type: "livephoto"`` and a ``videoSrc`` clip).
    live_pids: tuple[str, ...] = ()
    #: Videos of a mixed post (served in ``mix_media_info.items`` after its pictures), each with a cover.
    mixed_videos: tuple[WeiboVideo, ...] = ()

    @property
    def mid(self) -> str:
        """Weibo's mid; the same digits as ``id``."""
        return self.id

    @property
    def is_repost(self) -> bool:
        """Whether this post nests a ``retweeted_status``."""
        return self.retweeted_id is not None

    def truncated_text(self) -> str:
        """The ``text`` the timeline serves: the full text, or for long posts a prefix + ``全文`` link."""
        return self.truncated if self.is_long_text else self.text

    def canonical_url(self) -> str | None:
        """``https://weibo.com/{uid}/{bid}`` (``None`` for a deleted original)."""
        return None if self.user_id is None else f"https://weibo.com/{self.user_id}/{self.bid}"


@dataclass
class WeiboWorld:
    """The whole Weibo of one sandbox; see the module docstring."""

    seed: int
    pages: int
    per_page: int
    search_pages: int
    bad_media: bool
    timeline_uids: tuple[int, ...]
    users: dict[int, WeiboUser]
    timelines: dict[int, list[str]]
    posts: dict[str, WeiboPost]
    pics: dict[str, WeiboPic]
    videos: dict[str, WeiboVideo]
    duplicate_pids: dict[str, str]
    bad_pids: dict[str, str]
    search_pool: list[str]
    #: ``{uid: post id}``: the post shown pinned (``isTop: 1``) at the top of page 1 (control: ``weibo/pin``).
    pinned: dict[int, str] = field(default_factory=dict)
    #: ``{uid: [post id, …]}``: posts published at run time (control: ``weibo/publish``), newest first.
    published: dict[int, list[str]] = field(default_factory=dict)
    #: ``{post id: post as built}``: posts whose counts grew at run time (control: ``weibo/engage``).
    engaged: dict[str, WeiboPost] = field(default_factory=dict)

    def timeline(self, uid: int) -> list[WeiboPost]:
        """All posts of ``uid``'s timeline, newest first."""
        return [self.posts[pid] for pid in self.timelines[int(uid)]]

    def page(self, uid: int, page: int) -> list[WeiboPost]:
        """Posts on 1-based ``page`` of ``uid``'s timeline (empty past the last page)."""
        if page < 1:
            return []
        ids = self.timelines.get(int(uid), [])
        return [self.posts[i] for i in ids[(page - 1) * self.per_page : page * self.per_page]]

    def publish(self, uid: int, count: int) -> list[str]:
        """Publish ``count`` new posts at the top of ``uid``'s timeline (ids above every existing one, 1 to 3
        pictures each, served by the media site); returns their ids, newest first. Deterministic: the same
        calls on the same world give the same posts."""
        uid = int(uid)
        if uid not in self.timelines or not 1 <= count <= 100:
            raise ValueError(f"cannot publish {count} posts for {uid} (a timeline owner, 1 to 100 posts)")
        builder = _Builder(self.seed, self.bad_media)
        builder.used_ids = set(self.posts)
        rng = rng_for(self.seed, "weibo", "publish", uid, len(self.published.get(uid, [])))
        newest = self.posts[self.timelines[uid][0]].created_at if self.timelines[uid] else WEIBO_NOW
        when = newest or WEIBO_NOW
        new: list[str] = []
        for _ in range(count):
            when += timedelta(minutes=rng.randrange(5, 90))
            post_id = builder.new_id(rng, when)
            post = WeiboPost(
                id=post_id, bid=mid_to_bid(post_id), user_id=uid, created_at=when, text=builder.text(rng, 2),
                source=rng.choice(_SOURCES), region=rng.choice(_REGIONS), reposts_count=builder.count(rng),
                comments_count=builder.count(rng), attitudes_count=builder.count(rng),
                pics=builder.make_pics(rng, rng.randrange(1, 4)),
            )
            self.posts[post_id] = post
            new.insert(0, post_id)
        self.pics.update(builder.pics)
        self.timelines[uid][:0] = new
        self.published[uid] = new + self.published.get(uid, [])
        return new

    def pin(self, uid: int, post_id: str | None) -> None:
        """Show ``post_id`` pinned at the top of ``uid``'s page 1 (``None``: nothing pinned)."""
        uid = int(uid)
        if post_id is None:
            self.pinned.pop(uid, None)
            return
        if uid not in self.timelines or post_id not in self.timelines[uid]:
            raise ValueError(f"post {post_id} is not on the timeline of {uid}")
        self.pinned[uid] = post_id

    def engage(self, uid: int, *, likes: int = 0, comments: int = 0, reposts: int = 0) -> dict[str, list[int]]:
        """Add to the counts of every post of ``uid``'s timeline (engagement growing between two crawls); answers
        ``{post id: [reposts, comments, likes]}`` as now served, every count a plain number."""
        uid = int(uid)
        if uid not in self.timelines or min(likes, comments, reposts) < 0:
            raise ValueError(f"cannot engage {uid} (a timeline owner, counts >= 0)")
        now: dict[str, list[int]] = {}
        for post_id in self.timelines[uid]:
            post = self.posts[post_id]
            self.engaged.setdefault(post_id, post)
            post = replace(post, reposts_count=count_value(post.reposts_count) + reposts,
                           comments_count=count_value(post.comments_count) + comments,
                           attitudes_count=count_value(post.attitudes_count) + likes)
            self.posts[post_id] = post
            now[post_id] = [int(post.reposts_count), int(post.comments_count), int(post.attitudes_count)]
        return now

    def unpublish(self) -> None:
        """Back to the world as built: published posts and their pictures removed, nothing pinned, counts as
        built."""
        self.posts.update(self.engaged)
        self.engaged.clear()
        for uid, ids in self.published.items():
            gone = set(ids)
            self.timelines[uid] = [i for i in self.timelines[uid] if i not in gone]
            for post_id in ids:
                post = self.posts.pop(post_id, None)
                for pic in post.pics if post else ():
                    self.pics.pop(pic.pid, None)
        self.published.clear()
        self.pinned.clear()

    def page_count(self, uid: int) -> int:
        """Number of non-empty timeline pages of ``uid``."""
        n = len(self.timelines.get(int(uid), []))
        return -(-n // self.per_page)

    def since_id_of_page(self, uid: int, page: int) -> int:
        """``cardlistInfo.since_id`` served on ``page``: the id of its last post (the cursor for the next page)."""
        ids = self.timelines[int(uid)]
        return int(ids[min(page * self.per_page, len(ids)) - 1])

    def index_after_since_id(self, uid: int, since_id: int | str) -> int | None:
        """Timeline index of the first post a ``since_id`` request returns (``None`` if ``since_id`` is unknown).

        ``since_id`` is a post id; the answer is the ``per_page`` posts after it, so the ``since_id`` served on
        page N leads exactly to page N+1.
        """
        ids = self.timelines.get(int(uid), [])
        try:
            return ids.index(str(since_id)) + 1
        except ValueError:
            return None

    def retweeted(self, post: WeiboPost) -> WeiboPost | None:
        """The original nested in ``post`` (possibly a deleted placeholder), or ``None``."""
        return None if post.retweeted_id is None else self.posts[post.retweeted_id]

    def post_pics(self, post: WeiboPost, *, include_retweeted: bool = True) -> list[WeiboPic]:
        """Pictures of ``post`` and, by default, of its reposted original."""
        pics = list(post.pics)
        original = self.retweeted(post)
        if include_retweeted and original is not None:
            pics.extend(original.pics)
        return pics

    def post_videos(self, post: WeiboPost, *, include_retweeted: bool = True) -> list[WeiboVideo]:
        """Videos of ``post`` and, by default, of its reposted original."""
        videos = [post.video] if post.video else []
        original = self.retweeted(post)
        if include_retweeted and original is not None and original.video:
            videos.append(original.video)
        return videos

    def timeline_pids(self, uid: int, *, include_retweeted: bool = True) -> list[str]:
        """Distinct pids on ``uid``'s timeline in first-seen order (own pics, then reposted originals')."""
        seen: dict[str, None] = {}
        for post in self.timeline(uid):
            for pic in self.post_pics(post, include_retweeted=include_retweeted):
                seen.setdefault(pic.pid, None)
        return list(seen)

    def distinct_contents(self, pids: Iterable[str]) -> int:
        """How many distinct image byte-contents ``pids`` have (duplicates collapse; bad pics count apart)."""
        return len({self.pics[pid].content_pid for pid in pids})

    def search(self, keyword: str) -> list[WeiboPost]:
        """The posts a search for ``keyword`` returns, in order, over ``search_pages`` pages (deterministic)."""
        candidates = [pid for uid in self.timeline_uids for pid in self.timelines[uid]]
        candidates += [p.id for p in self.posts.values() if p.user_id is not None and p.id not in candidates]
        rng = rng_for(self.seed, "weibo", "search", keyword)
        rng.shuffle(candidates)
        return [self.posts[pid] for pid in candidates[: self.search_pages * self.per_page]]

    def search_page(self, keyword: str, page: int, tab: int = 1) -> list[WeiboPost]:
        """Posts on 1-based search ``page`` for ``keyword`` on search ``tab`` (:meth:`search_tab`)."""
        if page < 1:
            return []
        return self.search_tab(keyword, tab)[(page - 1) * self.per_page : page * self.per_page]

    def search_tab(self, keyword: str, tab: int = 1) -> list[WeiboPost]:
        """What tab ``100103type=<tab>`` lists: 1 (all) :meth:`search`; 61 (realtime) the same, newest first; 60
        (hot) most liked first; 64 (video) only posts with a video; 63 (picture) only posts with pictures."""
        found = self.search(keyword)
        if tab == 61:
            return sorted(found, key=lambda p: p.created_at or WEIBO_NOW, reverse=True)
        if tab == 60:
            return sorted(found, key=lambda p: (-count_value(p.attitudes_count), p.id))
        if tab == 64:
            return [p for p in found if p.video is not None]
        if tab == 63:
            return [p for p in found if p.pics]
        return found


# ----------------------------------------------------------------------------------------------------------
# Building the world
# ----------------------------------------------------------------------------------------------------------


def mid_to_bid(mid: str) -> str:
    """Weibo's mid → bid: base62 of 7-digit groups from the right, inner groups padded to 4 characters."""
    out: list[str] = []
    rest = str(mid)
    while rest:
        chunk, rest = rest[-7:], rest[:-7]
        value = int(chunk)
        encoded = ""
        while value:
            value, r = divmod(value, 62)
            encoded = _BASE62[r] + encoded
        encoded = encoded or "0"
        out.append(encoded.rjust(4, "0") if rest else encoded)
    return "".join(reversed(out))


def format_created_at(when: datetime) -> str:
    """``Sat Nov 28 10:00:00 +0800 2026`` (English names regardless of locale)."""
    days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    return (
        f"{days[when.weekday()]} {months[when.month - 1]} {when.day:02d} {when:%H:%M:%S} +0800 {when.year}"
    )


_COUNT_RE = re.compile(r"^(\d+(?:\.\d+)?)(万|亿)?(\+)?$")


def count_value(raw: int | str) -> int:
    """Numeric value of a served count: ``1234`` → 1234, ``"12.6万"`` → 126000, ``"100万+"`` → 1000000."""
    if isinstance(raw, int):
        return raw
    match = _COUNT_RE.match(raw.strip())
    if not match:
        raise ValueError(f"not a Weibo count: {raw!r}")
    unit = {"万": 10_000, "亿": 100_000_000}.get(match.group(2) or "", 1)
    return round(float(match.group(1)) * unit)


class _Builder:
    """Builds a :class:`WeiboWorld`; one instance per build, holds the id/pid registries."""

    def __init__(self, seed: int, bad_media: bool) -> None:
        self.seed = seed
        self.bad_media = bad_media
        self.posts: dict[str, WeiboPost] = {}
        self.pics: dict[str, WeiboPic] = {}
        self.videos: dict[str, WeiboVideo] = {}
        self.users: dict[int, WeiboUser] = {}
        self.used_ids: set[str] = set()
        self.duplicate_pids: dict[str, str] = {}
        self.bad_pids: dict[str, str] = {}

    # -- small generators -------------------------------------------------------------------------------

    def user(self, uid: int) -> WeiboUser:
        rng = rng_for(self.seed, "weibo", "user", uid)
        name = f"{rng.choice(_NAMES)}{uid % 1000:03d}"
        user = WeiboUser(
            id=uid,
            screen_name=name,
            avatar_pid=self.pid(rng, "avatar"),
            followers_count=self.count(rng, big=True),
            follow_count=rng.randrange(10, 2000),
            statuses_count=rng.randrange(100, 20000),
            verified=rng.random() < 0.4,
            description=rng.choice(_SENTENCES),
        )
        self.users[uid] = user
        return user

    @staticmethod
    def pid(rng: Any, kind: str = "") -> str:
        # Real pids look like "006AbCdEly1h5x7k8r9s2j30u0140wgu": 32 chars of [0-9a-z] with a type marker.
        alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
        head = "".join(rng.choice(alphabet) for _ in range(8))
        tail = "".join(rng.choice(alphabet) for _ in range(21))
        marker = {"avatar": "ly8", "cover": "gy1"}.get(kind, "ly1")
        return head + marker + tail

    @staticmethod
    def count(rng: Any, big: bool = False) -> int | str:
        roll = rng.random()
        if roll < 0.70:
            return rng.randrange(0, 100_000 if big else 5000)
        if roll < 0.80:
            return "1万+"
        if roll < 0.92:
            return f"{rng.randrange(10, 999) / 10:.1f}万"
        if roll < 0.97:
            return "100万+"
        return rng.randrange(10_000, 99_999)

    def new_id(self, rng: Any, when: datetime) -> str:
        while True:
            value = ((int(when.timestamp()) - _MID_EPOCH) << 22) + rng.randrange(1 << 22)
            candidate = str(value)
            if candidate not in self.used_ids:
                self.used_ids.add(candidate)
                return candidate

    def make_pic(self, rng: Any, ext: str = "jpg") -> WeiboPic:
        pid = self.pid(rng)
        width, height = rng.randrange(200, 401), rng.randrange(200, 401)
        pic = WeiboPic(pid=pid, ext=ext, width=width, height=height, content_pid=pid)
        self.pics[pid] = pic
        return pic

    def make_pics(self, rng: Any, n: int, *, alt_format: bool = False) -> tuple[WeiboPic, ...]:
        pics = [self.make_pic(rng) for _ in range(n)]
        if alt_format and pics:
            # One PNG or WebP among the JPEGs: the URL ends with the real format, as sinaimg does for them.
            pics[rng.randrange(len(pics))] = self.make_pic(rng, rng.choice(["png", "webp"]))
        return tuple(pics)

    def make_video(self, rng: Any, when: datetime, title: str) -> WeiboVideo:
        vid = str(((int(when.timestamp()) - _MID_EPOCH) << 22) + rng.randrange(1 << 22))
        qualities = rng.choice([("720", "hd", "sd"), ("hd", "sd"), ("720", "sd"), ("sd",), ("720", "hd", "sd")])
        video = WeiboVideo(
            id=vid,
            object_id=f"1034:{vid}",
            qualities=qualities,
            duration=VIDEO_DURATION,  # what /media/weibo/video/ serves (sandbox.video)
            cover_pid=self.pid(rng, "cover"),
            title=title,
        )
        self.videos[vid] = video
        return video

    def text(self, rng: Any, sentences: int) -> str:
        parts: list[str] = []
        for k in range(sentences):
            piece = rng.choice(_SENTENCES)
            roll = rng.random()
            if roll < 0.25:
                name = rng.choice(_NAMES)
                piece = f"<a href='/n/{name}'>@{name}</a> {piece}"
            elif roll < 0.45:
                alt, icon = rng.choice(_EMOJI)
                piece += (
                    f'<span class="url-icon"><img alt={alt} '
                    f'src="https://h5.sinaimg.cn/m/emoticon/icon/default/d_{icon}-1.png" '
                    f'style="width:1em; height:1em;" /></span>'
                )
            elif roll < 0.60:
                topic = rng.choice(_TOPICS)
                q = quote(f"#{topic}#", safe="")
                piece = (
                    f'<a  href="https://m.weibo.cn/search?containerid=231522type%3D1%26t%3D10%26q%3D{q}'
                    f'&extparam={q}&luicode=10000011" data-hide=""><span class="surl-text">#{topic}#</span></a>'
                    + piece
                )
            parts.append(piece)
            if k < sentences - 1 and rng.random() < 0.3:
                parts.append("<br />")
        return "".join(parts)

    @staticmethod
    def truncate(post_id: str, full: str) -> str:
        # Cut at a segment boundary (never inside a tag), like the server-side 140-character preview.
        pieces = re.split(r"(?<=[。！？])|(?=<br />)", full)
        out, visible = "", 0
        for piece in pieces:
            if visible >= 100:
                break
            out += piece
            visible += len(re.sub(r"<[^>]+>", "", piece))
        return f'{out}...<a href="/status/{post_id}">全文</a>'

    # -- posts ------------------------------------------------------------------------------------------

    def make_post(self, rng: Any, post_id: str, when: datetime, text: str, user_id: int,
                  **fields: Any) -> WeiboPost:
        """A post of the world, with where it was sent from and its counts drawn from *rng* (in this order: the
        world depends on it)."""
        post = WeiboPost(id=post_id, bid=mid_to_bid(post_id), user_id=user_id, created_at=when, text=text,
                         source=rng.choice(_SOURCES), region=rng.choice(_REGIONS), reposts_count=self.count(rng),
                         comments_count=self.count(rng), attitudes_count=self.count(rng), **fields)
        self.posts[post_id] = post
        return post

    def original(self, rng: Any, authors: Sequence[int], before: datetime) -> WeiboPost:
        when = before - timedelta(minutes=rng.randrange(30, 60 * 24 * 10))
        post_id = self.new_id(rng, when)
        roll = rng.random()
        pics: tuple[WeiboPic, ...] = ()
        video = None
        text = self.text(rng, rng.randrange(1, 4))
        if roll < 0.6:
            pics = self.make_pics(rng, rng.randrange(1, 5))
        elif roll < 0.8:
            video = self.make_video(rng, when, text[:20])
        return self.make_post(rng, post_id, when, text, rng.choice(list(authors)), pics=pics, video=video)

    def deleted(self, rng: Any, before: datetime) -> WeiboPost:
        when = before - timedelta(minutes=rng.randrange(30, 60 * 24 * 10))
        post_id = self.new_id(rng, when)
        post = WeiboPost(
            id=post_id, bid=mid_to_bid(post_id), user_id=None, created_at=None, text=_DELETED_TEXT, deleted=True
        )
        self.posts[post_id] = post
        return post

    def timeline(
        self,
        uid: int,
        n: int,
        authors: Sequence[int],
        originals: list[WeiboPost],
        *,
        first: bool,
    ) -> list[str]:
        rng = rng_for(self.seed, "weibo", "timeline", uid)
        when = WEIBO_NOW - timedelta(minutes=rng.randrange(5, 180))
        ids: list[str] = []
        earlier_pics: list[WeiboPic] = []
        for i in range(n):
            if i:
                when -= timedelta(minutes=rng.randrange(20, 60 * 48))
            post_id = self.new_id(rng, when)
            slot = i % 10
            text = self.text(rng, rng.randrange(1, 4))
            long_text = slot in (1, 9)
            if long_text:
                text = self.text(rng, rng.randrange(9, 14))
            pics: tuple[WeiboPic, ...] = ()
            video = webpage = None
            retweeted_id = None
            if slot in (0, 8):
                pics = self.make_pics(rng, rng.randrange(1, 10))
            elif slot == 1:
                pics = self.make_pics(rng, rng.randrange(0, 4))
            elif slot == 9:
                pics = self.make_pics(rng, rng.randrange(1, 4))
            elif slot == 4:
                pics = self.make_pics(rng, rng.randrange(2, 7), alt_format=True)
            elif slot == 2:
                video = self.make_video(rng, when, text[:20])
            elif slot == 6:
                webpage = self.webpage(rng)
            elif slot in (3, 7):
                text = rng.choice(["转发微博", "//<a href='/n/旅行的猫'>@旅行的猫</a>:说得好", "转发微博[doge]"])
                if slot == 7 and i % 20 == 7:
                    original = self.deleted(rng, when)
                else:
                    reusable = [o for o in originals if o.created_at and o.created_at < when]
                    if reusable and rng.random() < 0.3:
                        original = rng.choice(reusable)
                    else:
                        original = self.original(rng, authors, when)
                        originals.append(original)
                retweeted_id = original.id
            # Byte-identical duplicates under other pids, on the first owner's timeline only.
            if first and i in (8, 20, 34) and pics and earlier_pics:
                canonical = rng.choice(earlier_pics)
                dup_pid = self.pid(rng)
                dup = replace(canonical, pid=dup_pid, content_pid=canonical.content_pid)
                self.pics[dup_pid] = dup
                self.duplicate_pids[dup_pid] = canonical.pid
                pics = (dup, *pics[1:])
            earlier_pics.extend(p for p in pics if p.content_pid == p.pid)
            if first and self.bad_media and i in (0, 4, 9):
                pics = (*pics, self.bad_pic({0: "html", 4: "truncated", 9: "bomb"}[i], uid, i))
            self.make_post(rng, post_id, when, text, uid, is_long_text=long_text, pics=pics, video=video,
                           webpage=webpage, retweeted_id=retweeted_id,
                           truncated=self.truncate(post_id, text) if long_text else "")
            ids.append(post_id)
        return ids

    def showcase(self, uid: int) -> list[str]:
        """The :data:`SHOWCASE_UID` timeline (see there), newest first, from its own random stream."""
        rng = rng_for(self.seed, "weibo", "showcase", uid)
        ids = []
        for i in range(3):
            when = WEIBO_NOW - timedelta(hours=2 + 5 * i)
            post_id = self.new_id(rng, when)
            text = self.text(rng, 1)
            if i == 0:
                pics = self.make_pics(rng, 3)
                self.make_post(rng, post_id, when, text, uid, pics=pics, live_pids=(pics[0].pid, pics[2].pid))
            elif i == 1:
                videos = tuple(self.make_video(rng, when, text[:20]) for _ in range(2))
                self.make_post(rng, post_id, when, text, uid, pics=self.make_pics(rng, 1), mixed_videos=videos)
            else:
                self.make_post(rng, post_id, when, text, uid, video=self.make_video(rng, when, text[:20]))
            ids.append(post_id)
        return ids

    def bad_pic(self, kind: str, uid: int, index: int) -> WeiboPic:
        # Its own stream: the flag must not shift anything else the world draws.
        rng = rng_for(self.seed, "weibo", "bad", uid, index)
        pid = self.pid(rng)
        pic = WeiboPic(pid=pid, ext="png" if kind == "bomb" else "jpg", width=300, height=300,
                       content_pid=pid, bad=kind)
        self.pics[pid] = pic
        self.bad_pids[pid] = kind
        return pic

    def webpage(self, rng: Any) -> dict[str, str]:
        title = rng.choice(["一篇值得一读的长文", "官方公告", "活动报名链接", "开源项目主页"])
        return {
            "page_id": f"2315672541_{rng.randrange(10**9)}",
            "page_url": f"https://example.com/article/{rng.randrange(10**6)}",
            "page_title": title,
            "content1": title,
            "content2": rng.choice(_SENTENCES),
            "page_pic_pid": self.pid(rng, "cover"),
        }


def build_weibo_world(
    seed: int = 1,
    users: Sequence[int] = DEFAULT_USERS,
    pages: int = 5,
    per_page: int = 10,
    bad_media: bool = False,
    search_pages: int = 3,
) -> WeiboWorld:
    """Build the deterministic Weibo world; see the module docstring for its structure."""
    if pages < 0 or per_page < 1:
        raise ValueError("pages must be >= 0 and per_page >= 1")
    builder = _Builder(seed, bad_media)
    uids = tuple(int(u) for u in users)
    for uid in uids:
        builder.user(uid)
    rng = rng_for(seed, "weibo", "authors")
    authors: list[int] = []
    while len(authors) < 6:
        candidate = rng.randrange(1_000_000_000, 7_999_999_999)
        if candidate not in builder.users:
            builder.user(candidate)
            authors.append(candidate)
    originals: list[WeiboPost] = []
    timelines = {
        uid: builder.timeline(uid, pages * per_page, authors, originals, first=(k == 0))
        for k, uid in enumerate(uids)
    }
    # A few posts only reachable through search, from the other authors.
    pool_rng = rng_for(seed, "weibo", "search-pool")
    search_pool = [builder.original(pool_rng, authors, WEIBO_NOW).id for _ in range(2 * per_page)]
    if SHOWCASE_UID not in timelines:
        builder.user(SHOWCASE_UID)
        timelines[SHOWCASE_UID] = builder.showcase(SHOWCASE_UID)
    return WeiboWorld(
        seed=seed,
        pages=pages,
        per_page=per_page,
        search_pages=search_pages,
        bad_media=bad_media,
        timeline_uids=uids,
        users=builder.users,
        timelines=timelines,
        posts=builder.posts,
        pics=builder.pics,
        videos=builder.videos,
        duplicate_pids=builder.duplicate_pids,
        bad_pids=builder.bad_pids,
        search_pool=search_pool,
    )
