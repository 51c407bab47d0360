"""Comment threads in the sandbox: one deterministic model, rendered as Weibo, Bilibili and the Graph API serve
them.

Reference: docs/sandbox.md, "comments.py".
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from .det import stable_int

__all__ = ["CommentWorld", "Thread", "ThreadComment", "bilibili_main", "bilibili_reply", "facebook_comments",
           "weibo_child", "weibo_hotflow"]

#: The threads' "now": every comment is older, but those published (``{"add": N}``).
COMMENTS_NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
_TEXTS = ["说得好", "哈哈哈哈", "太美了吧", "同意楼上", "学到了，谢谢分享", "第一次来，支持一下", "Nice one!",
          "这是哪里？", "期待下一期", "收藏了"]
_NAMES = ["路人甲", "小鱼干", "晚风", "Ana Lima", "橘子汽水", "追光的人"]
_WEIBO_PAGE, _WEIBO_CHILD_PAGE, _BILIBILI_PAGE = 20, 10, 20
_MAX_ID_BASE = 10**12


@dataclass
class ThreadComment:
    """One comment or reply: ``parent``/``root`` are ``None`` for a top-level one; ``picture`` a sandbox image
    number."""

    id: str
    text: str
    created: datetime
    author: tuple[str, str] | None
    likes: int
    parent: str | None = None
    root: str | None = None
    picture: int | None = None
    pinned: bool = False
    deleted: bool = False
    folded: bool = False
    replies: list[ThreadComment] = field(default_factory=list)


@dataclass
class Thread:
    """The comments of one post, newest first."""

    platform: str
    post_id: str
    comments: list[ThreadComment]

    def all(self) -> list[ThreadComment]:
        """Every comment and reply, each once."""
        return [x for c in self.comments for x in (c, *c.replies)]


class CommentWorld:
    """Every post's thread (see the module docstring); sizes and published comments live in the running sandbox."""

    def __init__(self, seed: int = 1) -> None:
        self.seed = seed
        self.sizes: dict[tuple[str, str], int] = {}
        self.published: dict[tuple[str, str], int] = {}
        #: ``{(platform, post id): page}``: the thread answers "closed" from that page on (Bilibili 12002).
        self.closed_from: dict[tuple[str, str], int] = {}
        #: ``(platform, top-level comment id)`` → its post, for reply routes that name only the comment.
        self.owners: dict[tuple[str, str], str] = {}

    def reset(self) -> None:
        """Forget sizes and published comments (``/_sandbox/reset``)."""
        self.sizes.clear()
        self.published.clear()
        self.closed_from.clear()

    def post_of(self, platform: str, comment_id: str) -> str | None:
        """The post of a top-level comment served before (``None`` for one never served)."""
        return self.owners.get((platform, comment_id))

    def close_from(self, platform: str, post_id: str, page: int) -> None:
        self.closed_from[(platform, str(post_id))] = max(1, int(page))

    def set_size(self, platform: str, post_id: str, size: int) -> None:
        self.sizes[(platform, str(post_id))] = max(0, min(int(size), 50_000))

    def publish(self, platform: str, post_id: str, count: int) -> list[str]:
        """``count`` new comments at the top of the thread; their ids, newest first."""
        key = (platform, str(post_id))
        self.published[key] = self.published.get(key, 0) + max(0, min(int(count), 1000))
        thread = self.thread(platform, post_id)
        return [c.id for c in thread.comments[:int(count)]]

    def thread(self, platform: str, post_id: str) -> Thread:
        post_id = str(post_id)
        key = (platform, post_id)
        base = self.sizes.get(key)
        if base is None:
            base = 0 if post_id.endswith("0") else stable_int("comments", platform, post_id, bits=16) % 13
        total = base + self.published.get(key, 0)
        start = 10**15 + stable_int("cid", platform, post_id, bits=40) * 10**4
        comments: list[ThreadComment] = []
        # Oldest first, so published comments (the newest) get the highest ids and leave the others unchanged.
        for n in range(total):
            cid = str(start + (n + 1) * 100)
            # 10 minutes apart; published comments come after the others without moving them (their times,
            # as their ids, stay what an earlier walk saw), past COMMENTS_NOW.
            created = COMMENTS_NOW - timedelta(minutes=10 * (base - n) + 1)
            name = _NAMES[stable_int("who", post_id, n, bits=8) % len(_NAMES)]
            comment = ThreadComment(
                id=cid, text=f"{_TEXTS[(n + int(post_id[-3:], 36)) % len(_TEXTS)]} #{n + 1}", created=created,
                author=(str(3_000_000 + stable_int("uid", name, bits=16)), name),
                likes=stable_int("likes", post_id, n, bits=10))
            if n == 0 and total >= 2:
                comment.pinned, comment.author = True, ("2", "作者")
            if n == 1:
                comment.picture = 900 + n + stable_int("pic", post_id, bits=8)
                comment.text += " 😍 [doge]"
            if n == 2:
                comment.deleted, comment.author, comment.text = True, None, ""
                comment.folded = platform == "bilibili"
            replies: list[ThreadComment] = []
            for r in range(stable_int("replies", post_id, n, bits=8) % 5):
                rid = str(int(cid) + r + 1)
                parent = replies[-1].id if r == 1 else cid
                replies.append(ThreadComment(
                    id=rid, text=f"回复 #{r + 1}", created=created + timedelta(minutes=r + 1),
                    author=(str(4_000_000 + r), _NAMES[r % len(_NAMES)]), likes=r, parent=parent, root=cid))
            comment.replies = replies
            comments.append(comment)
        comments.reverse()
        self.owners.update(((platform, c.id), post_id) for c in comments[:10_000])
        return Thread(platform=platform, post_id=post_id, comments=comments)

    def announced(self, thread: Thread) -> int:
        """The comment count the platform says (more than it serves, as platforms do)."""
        return len(thread.all()) + 3 if thread.comments else 0


def _time_weibo(when: datetime) -> str:
    return when.astimezone(timezone(timedelta(hours=8))).strftime("%a %b %d %H:%M:%S +0800 %Y")


def _weibo_comment(c: ThreadComment, base: str) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "created_at": _time_weibo(c.created), "id": int(c.id), "idstr": c.id, "rootid": int(c.root or c.id),
        "rootidstr": c.root or c.id, "text": c.text, "disable_reply": 0, "mid": c.id, "readtimetype": "comment",
        "source": "来自上海", "like_count": c.likes, "isLikedByMblogAuthor": c.pinned,
        "user": None if c.author is None else {"id": int(c.author[0]), "screen_name": c.author[1]},
    }
    if c.root is None:
        raw["total_number"] = len(c.replies)
        raw["comments"] = [_weibo_comment(r, base) for r in c.replies[:2]] or False  # the preview Weibo shows
    if c.parent is not None and c.parent != c.root:
        raw["reply_id"] = int(c.parent)
        raw["reply_comment"] = {"id": int(c.parent), "text": "…"}
    if c.picture is not None:
        raw["pic"] = {"pid": f"cmt{c.picture}", "url": f"{base}/media/img/{c.picture}.jpg",
                      "large": {"url": f"{base}/media/img/{c.picture}.jpg"}}
    return raw


def _offset(max_id: str | None) -> int:
    """The offset a Weibo ``max_id`` stands for (``_MAX_ID_BASE`` + offset; absent or 0: the first page)."""
    try:
        return max(0, int(max_id or 0) - _MAX_ID_BASE)
    except ValueError:
        return 0


def weibo_hotflow(world: CommentWorld, post_id: str, *, max_id: str | None, base: str) -> dict[str, Any]:
    thread = world.thread("weibo", post_id)
    if not thread.comments:
        return {"ok": 0, "msg": "快来发表你的评论吧"}
    start = _offset(max_id)
    items = thread.comments[start:start + _WEIBO_PAGE]
    following = start + _WEIBO_PAGE
    more = following < len(thread.comments)
    return {"ok": 1, "data": {
        "data": [_weibo_comment(c, base) for c in items], "total_number": world.announced(thread),
        "max_id": _MAX_ID_BASE + following if more else 0,
        "max_id_type": 1 if more and following >= 2 * _WEIBO_PAGE else 0}}


def weibo_child(world: CommentWorld, post_id: str, cid: str, *, max_id: str | None, base: str) -> dict[str, Any]:
    thread = world.thread("weibo", post_id)
    root = next((c for c in thread.comments if c.id == cid), None)
    if root is None:
        return {"ok": 0, "msg": "该评论不存在"}
    start = _offset(max_id)
    following = start + _WEIBO_CHILD_PAGE
    more = following < len(root.replies)
    return {"ok": 1, "data": [_weibo_comment(r, base) for r in root.replies[start:following]],
            "total_number": len(root.replies), "max_id": _MAX_ID_BASE + following if more else 0, "max_id_type": 0,
            "rootComment": [_weibo_comment(root, base)]}


def _bilibili_reply(c: ThreadComment, aid: int, base: str) -> dict[str, Any]:
    mid = 0 if c.author is None else int(c.author[0])
    content: dict[str, Any] = {"message": c.text, "members": [], "jump_url": {}, "max_line": 6}
    if c.picture is not None:
        content["pictures"] = [{"img_src": f"{base}/media/img/{c.picture}.jpg", "img_width": 640,
                                "img_height": 480,
                                "img_size": 42.0}]
    root = int(c.root or 0)
    return {"rpid": int(c.id), "oid": aid, "type": 1, "mid": mid, "root": root, "parent": int(c.parent or 0),
            "count": len(c.replies), "rcount": len(c.replies), "state": 0, "ctime": int(c.created.timestamp()),
            "rpid_str": c.id, "root_str": str(root), "parent_str": str(c.parent or 0), "like": c.likes,
            "member": {} if c.author is None else {"mid": str(mid), "uname": c.author[1]}, "content": content,
            "replies": [], "up_action": {"like": c.pinned, "reply": False},
            "reply_control": {"location": "IP属地：上海"},
            "folder": {"has_folded": c.folded, "is_folded": c.folded, "rule": ""}}


def bilibili_main(world: CommentWorld, bvid: str, aid: int, *, pagination: str | None, base: str,
                  mode: int = 3) -> dict[str, Any]:
    """One page of a video's replies (``12002`` from the page :meth:`CommentWorld.close_from` names on):
    ``mode=3`` hot first (most liked), ``mode=2`` newest first, as Bilibili orders them."""
    try:
        offset = json.loads(json.loads(pagination or "{}").get("offset") or "{}").get("data", {}).get("pn", 0)
    except (ValueError, AttributeError):
        offset = 0
    offset = offset if isinstance(offset, int) and offset >= 0 else 0
    if offset + 1 >= world.closed_from.get(("bilibili", bvid), 10**9):
        return {"code": 12002, "message": "评论区已关闭", "ttl": 1}
    thread = world.thread("bilibili", bvid)
    start = offset * _BILIBILI_PAGE
    pinned = next((c for c in thread.comments if c.pinned), None)
    others = [c for c in thread.comments if not c.pinned]  # newest first
    if mode != 2:
        others.sort(key=lambda c: (-c.likes, -int(c.id)))
    items = others[start:start + _BILIBILI_PAGE]
    more = start + _BILIBILI_PAGE < len(others)
    next_offset = json.dumps({"type": 1, "direction": 1, "data": {"pn": offset + 1}}, separators=(",", ":"))
    return {"code": 0, "message": "0", "ttl": 1, "data": {
        "cursor": {"is_begin": start == 0, "is_end": not more, "mode": 2 if mode == 2 else 3,
                   "all_count": world.announced(thread),
                   "pagination_reply": {"next_offset": next_offset} if more else {}},
        "replies": [_bilibili_reply(c, aid, base) for c in items], "top_replies": [],
        "upper": {"mid": 2, "top": None if pinned is None else _bilibili_reply(pinned, aid, base)}}}


def bilibili_reply(world: CommentWorld, bvid: str, aid: int, root: str, *, pn: int, ps: int,
                   base: str) -> dict[str, Any]:
    thread = world.thread("bilibili", bvid)
    top = next((c for c in thread.comments if c.id == root), None)
    if top is None:
        return {"code": 12022, "message": "已经被删除了", "ttl": 1}
    ps = max(1, min(ps, 20))
    items = top.replies[(pn - 1) * ps:pn * ps]
    return {"code": 0, "message": "0", "ttl": 1, "data": {
        "page": {"num": pn, "size": ps, "count": len(top.replies)},
        "replies": [_bilibili_reply(r, aid, base) for r in items], "root": _bilibili_reply(top, aid, base)}}


def _graph_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+0000")


def facebook_comments(world: CommentWorld, post_id: str, *, node: str, after: str | None, limit: int,
                      stream: bool, base: str) -> dict[str, Any]:
    """``/{node}/comments``: ``node`` is the post (``stream``: replies too, each naming its parent) or one of its
    comments, ``{post number}_{comment}`` as Graph writes comment ids (its replies)."""
    thread = world.thread("facebook", post_id)
    prefix = post_id.rsplit("_", 1)[-1]
    if node == post_id:
        listed = sorted(thread.all() if stream else thread.comments, key=lambda c: (c.created, c.id))
    else:
        listed = next((c.replies for c in thread.comments if f"{prefix}_{c.id}" == node), [])
    try:
        start = int(base64.urlsafe_b64decode(after.encode()).decode()) if after else 0
    except ValueError:
        start = 0
    limit = max(1, min(limit, 100))
    data = []
    for c in listed[start:start + limit]:
        raw: dict[str, Any] = {"id": f"{prefix}_{c.id}", "message": c.text, "created_time": _graph_time(c.created),
                               "like_count": c.likes, "comment_count": len(c.replies)}
        if c.author is not None:
            raw["from"] = {"name": c.author[1], "id": c.author[0]}
        if stream and c.parent is not None:
            raw["parent"] = {"id": f"{prefix}_{c.parent}"}
        if c.picture is not None:
            raw["attachment"] = {"type": "photo", "media": {"image": {"src": f"{base}/media/img/{c.picture}.jpg",
                                                                      "width": 640, "height": 480}}}
        data.append(raw)
    # ``after`` names the place after the last comment served, on the last page too (where a later walk starts).
    following = base64.urlsafe_b64encode(str(start + len(data)).encode()).decode()
    paging: dict[str, Any] = {"cursors": {"before": "MA==", "after": following}}
    if start + limit < len(listed):
        paging["next"] = f"{base}/facebook/v19.0/{node}/comments?limit={limit}&after={following}"
    return {"data": data, "paging": paging}
