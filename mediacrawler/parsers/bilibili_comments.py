"""Bilibili comment threads (replies) to records (docs/records.md, "Comments"; fixtures in
tests/fixtures/bilibili_comments/).

- ``/x/v2/reply/wbi/main?oid=<aid>&type=1&mode=3&pagination_str=…`` (WBI-signed): ``data.replies[]``, the next
  page's ``pagination_str`` from ``data.cursor.pagination_reply.next_offset``, the end from ``data.cursor.is_end``.
  Pinned replies (``data.top_replies[]`` and ``data.upper.top``) come on every page: they are read from the first
  page only (``first_page``), once, marked ``pinned``.
- ``/x/v2/reply/reply?oid=<aid>&type=1&root=<rpid>&pn=<n>&ps=<size>``: ``data.replies[]`` of one thread and
  ``data.page{num,size,count}`` (the last page when ``num * size >= count``). ``parent`` names the reply answered
  (the root for a direct reply).
- ``-404`` (the video is gone) and ``12002`` (comments closed) are the thread's ``closed`` reason, not an error;
  ``12061`` (closed by the uploader) too.
- ``content.pictures[]`` (``img_src``, ``img_width``, ``img_height``) are image assets ``reply:{rpid}:{n}``.
- A folded reply (``folder.is_folded``) is kept, with ``extra.folded``.
"""

from __future__ import annotations

import json
from typing import Any

from mediacrawler.items import Author, Comment, CommentMetrics, MediaAsset, Source
from mediacrawler.parsers._common import (
    CommentPage,
    PlatformError,
    as_int,
    as_obj,
    as_text,
    clean_id,
    https_url,
    iso_from_timestamp,
    parse_count,
)
from mediacrawler.parsers.bilibili import PLATFORM, _code, raise_for_envelope

#: Codes of a thread that cannot be read (gone, closed by the platform or the uploader): a reason, not an error.
CLOSED_CODES = {-404: "not-found", 12002: "comments-closed", 12061: "comments-closed-by-uploader"}
#: ``replies`` of a page are at most this many (Bilibili serves 20 a page).
_MAX_PER_PAGE = 200


def _pictures(rpid: str, content: dict[str, Any]) -> list[MediaAsset]:
    pictures = content.get("pictures")
    assets = []
    for n, picture in enumerate(pictures[:20] if isinstance(pictures, list) else []):
        picture = as_obj(picture)
        url = https_url(picture.get("img_src"))
        if url:
            assets.append(MediaAsset(kind="image", key=f"reply:{rpid}:{n}", url=url,
                                     width=as_int(picture.get("img_width")),
                                     height=as_int(picture.get("img_height"))))
    return assets


def parse_reply(raw: Any, *, post_id: str, source: Source | None = None, fetched_at: str | None = None,
                pinned: bool = False) -> Comment | None:
    """One reply object as a :class:`Comment`; ``None`` without a usable ``rpid``."""
    raw = as_obj(raw)
    rpid = clean_id(raw.get("rpid_str")) or clean_id(raw.get("rpid"))
    if rpid is None or rpid == "0":
        return None
    root = clean_id(raw.get("root_str")) or clean_id(raw.get("root"))
    parent = clean_id(raw.get("parent_str")) or clean_id(raw.get("parent"))
    top_level = root in (None, "0")
    member, content = as_obj(raw.get("member")), as_obj(raw.get("content"))
    author_id = clean_id(member.get("mid")) or clean_id(raw.get("mid"))
    if author_id == "0":  # a deleted reply keeps its place with mid 0 and no member
        author_id = None
    text = as_text(content.get("message"))
    extra: dict[str, Any] = {}
    location = as_text(as_obj(raw.get("reply_control")).get("location"))
    if location:
        extra["location"] = location  # "IP属地：北京"
    if as_obj(raw.get("folder")).get("is_folded") is True:
        extra["folded"] = True
    if as_obj(raw.get("up_action")).get("like") is True:
        extra["liked_by_author"] = True
    return Comment(
        platform=PLATFORM, comment_id=rpid, post_id=post_id,
        parent_id=None if top_level else (parent if parent not in (None, "0") else root),
        root_id=rpid if top_level else root,  # type: ignore[arg-type] (root is set when not top level)
        author=Author(id=author_id, name=as_text(member.get("uname")) or None) if author_id else None,
        text=text, created_at=iso_from_timestamp(raw.get("ctime")),
        metrics=CommentMetrics(likes=parse_count(raw.get("like")),
                               replies=parse_count(raw.get("rcount") if "rcount" in raw else raw.get("count"))),
        media=_pictures(rpid, content), pinned=pinned,
        deleted=author_id is None and not text, source=source, fetched_at=fetched_at, extra=extra,
    )



def _closed(payload: Any) -> str | None:
    """The ``closed`` reason of an answer whose code says the thread cannot be read; raises for other errors."""
    code = _code(payload)
    if code in CLOSED_CODES:
        return CLOSED_CODES[code]
    raise_for_envelope(payload)
    return None


def _add(page: CommentPage, seen: set[str], raw: Any, **kwargs: Any) -> None:
    comment = parse_reply(raw, **kwargs)
    if comment is None:
        page.skipped["no-id"] = page.skipped.get("no-id", 0) + 1
    elif comment.comment_id not in seen:  # a pinned reply may be listed among the others too
        seen.add(comment.comment_id)
        page.comments.append(comment)


def parse_main(payload: Any, *, post_id: str, first_page: bool, source: Source | None = None,
               fetched_at: str | None = None) -> CommentPage:
    """One page of a video's top-level replies; pinned ones first, on the first page only."""
    closed = _closed(payload)
    if closed is not None:
        return CommentPage(is_last=True, closed=closed)
    data = as_obj(as_obj(payload).get("data"))
    cursor = as_obj(data.get("cursor"))
    offset = as_text(as_obj(cursor.get("pagination_reply")).get("next_offset"))
    page = CommentPage(is_last=cursor.get("is_end") is True or not offset)
    page.next_cursor = None if page.is_last else offset
    seen: set[str] = set()
    options = {"post_id": post_id, "source": source, "fetched_at": fetched_at}
    top = data.get("top_replies")
    for raw in [as_obj(data.get("upper")).get("top"), *(top if isinstance(top, list) else [])]:
        if not isinstance(raw, dict):
            continue
        if first_page:
            _add(page, seen, raw, pinned=True, **options)
        elif (rpid := clean_id(raw.get("rpid"))) is not None:
            seen.add(rpid)  # emitted with the first page: never again, nor among the others
    replies = data.get("replies")
    for raw in replies[:_MAX_PER_PAGE] if isinstance(replies, list) else []:
        _add(page, seen, raw, **options)
    return page


def pagination_str(cursor: str | None) -> str:
    """The ``pagination_str`` query value for the page after ``cursor`` (the previous page's ``next_offset``;
    ``None`` asks for the first page)."""
    return json.dumps({"offset": cursor or ""}, ensure_ascii=False, separators=(",", ":"))


def parse_thread(payload: Any, *, post_id: str, root_id: str, source: Source | None = None,
                 fetched_at: str | None = None) -> CommentPage:
    """One page of the replies of ``root_id`` (``/x/v2/reply/reply``); the next cursor is the next page number."""
    closed = _closed(payload)
    if closed is not None:
        return CommentPage(is_last=True, closed=closed)
    data = as_obj(as_obj(payload).get("data"))
    info = as_obj(data.get("page"))
    num, size, count = as_int(info.get("num")) or 1, as_int(info.get("size")) or 0, as_int(info.get("count")) or 0
    replies = data.get("replies")
    items = replies[:_MAX_PER_PAGE] if isinstance(replies, list) else []
    page = CommentPage(is_last=not items or size <= 0 or num * size >= count)
    page.next_cursor = None if page.is_last else str(num + 1)
    seen: set[str] = set()
    for raw in items:
        _add(page, seen, raw, post_id=post_id, source=source, fetched_at=fetched_at)
    if any(c.root_id != root_id for c in page.comments):
        raise PlatformError("error", f"replies of another thread than {root_id}")
    return page
