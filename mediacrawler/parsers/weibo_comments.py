"""Weibo (m.weibo.cn) comment threads to records (docs/records.md, "Comments"; fixtures in
tests/fixtures/weibo_comments/).

- ``/comments/hotflow?id=<mid>&mid=<mid>&max_id=…&max_id_type=…``: ``{"ok":1,"data":{"data":[comment…],
  "max_id":N,"max_id_type":0|1,"total_number":N}}``. The next page is asked for with the answer's ``max_id`` and
  ``max_id_type``; ``max_id`` 0 is the end. A post without comments answers ``{"ok":0,"msg":"快来发表你的评论吧"}``.
  Each comment previews a few of its replies (``comments``); those are read in full from the reply thread, so the
  preview is not turned into records (``total_number`` says how many replies there are).
- ``/comments/hotFlowChild?cid=<comment id>&max_id=…&max_id_type=0``: ``{"ok":1,"data":[reply…],"max_id":N,
  "total_number":N,"rootComment":[…]}``; a reply to a reply names it in ``reply_id`` / ``reply_comment``.
- A comment's picture (``pic``) is an image asset ``weibo:{pid}``, like a post's.

The cursor handed back is ``"<max_id>:<max_id_type>"`` (plain text, so a checkpoint can keep it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mediacrawler.items import Author, Comment, CommentMetrics, MediaAsset, Source
from mediacrawler.parsers._common import CommentPage, as_obj, as_text, clean_id, html_to_text, parse_count
from mediacrawler.parsers.weibo import PLATFORM, parse_created_at, raise_for_envelope

def comment_cursor(max_id: Any, max_id_type: Any) -> str | None:
    """The cursor of the next page, ``None`` at the end (``max_id`` 0 or absent)."""
    n, kind = clean_id(max_id), clean_id(max_id_type)
    if n is None or not n.isdigit() or int(n) == 0:
        return None
    return f"{int(n)}:{kind if kind is not None and kind.isdigit() else '0'}"


def split_cursor(cursor: str | None) -> tuple[str, str]:
    """``(max_id, max_id_type)`` of a cursor from :func:`comment_cursor` (``("0", "0")`` for the first page)."""
    max_id, _, max_id_type = (cursor or "0:0").partition(":")
    return max_id or "0", max_id_type or "0"


def _picture(raw: Any) -> list[MediaAsset]:
    pic = as_obj(raw)
    pid = clean_id(pic.get("pid"))
    urls = [u for u in dict.fromkeys((as_text(as_obj(pic.get("large")).get("url")), as_text(pic.get("url")))) if u]
    if pid is None or not urls:
        return []
    geo = as_obj(as_obj(pic.get("large")).get("geo"))
    return [MediaAsset(kind="image", key=f"weibo:{pid}", url=urls[0], alternates=urls[1:],
                       width=parse_count(geo.get("width")), height=parse_count(geo.get("height")))]


def parse_comment(raw: dict[str, Any], *, post_id: str, root_id: str | None, source: Source | None,
                  fetched_at: str | None, now: datetime | None = None) -> Comment | None:
    """One comment (``root_id`` ``None``) or reply (``root_id`` its thread's top comment) as a :class:`Comment`;
    ``None`` without a usable id."""
    comment_id = clean_id(raw.get("idstr")) or clean_id(raw.get("id"))
    if comment_id is None:
        return None
    user = as_obj(raw.get("user"))
    author_id = clean_id(user.get("id"))
    text_html = as_text(raw.get("text"))
    parent = None
    if root_id is not None:
        # A reply to a reply names the one it answers; else it answers the thread's top comment.
        parent = (clean_id(raw.get("reply_id")) or clean_id(as_obj(raw.get("reply_comment")).get("id"))
                  or root_id)
    replies = raw.get("total_number") if root_id is None else None
    extra: dict[str, Any] = {}
    if as_text(raw.get("source")):
        extra["source"] = as_text(raw["source"])  # "来自北京": where it was written from
    if raw.get("isLikedByMblogAuthor") is True:
        extra["liked_by_author"] = True
    return Comment(
        platform=PLATFORM, comment_id=comment_id, post_id=post_id, parent_id=parent,
        root_id=root_id or comment_id,
        author=Author(id=author_id, name=as_text(user.get("screen_name")) or None) if author_id else None,
        text=html_to_text(text_html), created_at=parse_created_at(raw.get("created_at"), now=now),
        metrics=CommentMetrics(likes=parse_count(raw.get("like_count") if "like_count" in raw
                                                 else raw.get("like_counts")),
                               replies=parse_count(replies)),
        media=_picture(raw.get("pic")),
        pinned=raw.get("is_top") in (1, True) or as_text(raw.get("tag")) == "置顶",
        deleted=author_id is None and not text_html.strip(),
        source=source, fetched_at=fetched_at, extra=extra,
    )


def _page(items: Any, envelope: dict[str, Any], *, post_id: str, root_id: str | None, source: Source | None,
          fetched_at: str | None, now: datetime | None) -> CommentPage:
    page = CommentPage(next_cursor=comment_cursor(envelope.get("max_id"), envelope.get("max_id_type")))
    page.is_last = page.next_cursor is None
    for raw in items if isinstance(items, list) else []:
        comment = parse_comment(as_obj(raw), post_id=post_id, root_id=root_id, source=source,
                                fetched_at=fetched_at, now=now) if isinstance(raw, dict) else None
        if comment is None:
            page.skipped["no-id"] = page.skipped.get("no-id", 0) + 1
        else:
            page.comments.append(comment)
    return page


def _nothing_here(payload: Any) -> bool:
    """True for the ``ok:0`` answer of a thread with nothing in it (``{"ok":0,"msg":"快来发表你的评论吧"}``);
    raises :class:`PlatformError` for error envelopes (rate limits, login walls)."""
    return raise_for_envelope(payload) == "end"


def parse_hotflow(payload: Any, *, post_id: str, source: Source | None = None, fetched_at: str | None = None,
                  now: datetime | None = None) -> CommentPage:
    """One page of a post's top-level comments."""
    if _nothing_here(payload):
        return CommentPage(is_last=True)
    data = as_obj(as_obj(payload).get("data"))
    return _page(data.get("data"), data, post_id=post_id, root_id=None, source=source, fetched_at=fetched_at,
                 now=now)


def parse_hotflow_child(payload: Any, *, post_id: str, root_id: str, source: Source | None = None,
                        fetched_at: str | None = None, now: datetime | None = None) -> CommentPage:
    """One page of the replies to the top-level comment ``root_id``."""
    if _nothing_here(payload):
        return CommentPage(is_last=True)
    body = as_obj(payload)
    items = body.get("data")
    envelope = body if isinstance(items, list) else as_obj(items)
    if not isinstance(items, list):
        items = envelope.get("data")
    return _page(items, envelope, post_id=post_id, root_id=root_id, source=source, fetched_at=fetched_at, now=now)
