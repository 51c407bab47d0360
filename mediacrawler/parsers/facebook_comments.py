"""Graph API comment edges to records (docs/records.md, "Comments"; fixtures in tests/fixtures/facebook_comments/).

``GET /{post-id}/comments?filter=stream&order=chronological&fields=id,message,created_time,from,like_count,
comment_count,attachment,parent&after=…`` lists a post's comments, and with ``filter=stream`` their replies too
(each naming its ``parent``); ``GET /{comment-id}/comments`` lists the replies of one comment. Both answer
``{"data":[…],"paging":{"cursors":{"after"},"next"}}``; the next page is asked for with ``cursors.after`` (never
``paging.next``, which carries the token), and a page without ``paging.next`` is the last. ``from`` is left out
for people the token may not name: the comment is kept without an author. A comment's ``attachment`` photo (or a
sticker/animated image's ``media.image``) is an image asset ``comment:{id}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mediacrawler.items import Author, Comment, CommentMetrics, MediaAsset, Source
from mediacrawler.parsers._common import CommentPage, as_int, as_obj, as_text, clean_id, parse_count
from mediacrawler.parsers.facebook import (
    PLATFORM,
    _http_url,
    next_request_params,
    parse_created_time,
    raise_for_error,
)

#: The fields a comment walk asks for.
COMMENT_FIELDS = "id,message,created_time,from,like_count,comment_count,attachment,parent"


def _attachment(comment_id: str, value: Any) -> list[MediaAsset]:
    image = as_obj(as_obj(as_obj(value).get("media")).get("image"))
    url = _http_url(image.get("src"))
    if not url:
        return []
    return [MediaAsset(kind="image", key=f"comment:{comment_id}", url=url, width=as_int(image.get("width")),
                       height=as_int(image.get("height")))]


def parse_comments(payload: Any, *, post_id: str, root_id: str | None = None,
                   roots: Mapping[str, str] | None = None, source: Source | None = None,
                   fetched_at: str | None = None, secrets: Iterable[str] = ()) -> CommentPage:
    """One page of a comment edge. ``root_id``: the comment whose replies these are (``/{comment-id}/comments``);
    ``None`` for a post's own edge, where a reply's thread is found through ``roots`` (comment id → its root, of
    the pages before; this page's comments are added to it as they are read)."""
    raise_for_error(payload, 200, secrets=secrets)
    known: dict[str, str] = dict(roots or {})
    params = next_request_params(payload)  # None: no paging.next, the last page
    after = as_text(as_obj(as_obj(as_obj(payload).get("paging")).get("cursors")).get("after"))
    page = CommentPage(next_cursor=None if params is None else (params.get("after") or after or None))
    page.is_last = page.next_cursor is None
    data = as_obj(payload).get("data")
    if after and isinstance(data, list) and data and len(after) <= 512:
        page.end_cursor = after  # a page with no comments keeps the cursor it was asked with
    for raw in data if isinstance(data, list) else []:
        raw = as_obj(raw)
        comment_id = clean_id(raw.get("id"))
        if comment_id is None:
            page.skipped["no-id"] = page.skipped.get("no-id", 0) + 1
            continue
        parent = clean_id(as_obj(raw.get("parent")).get("id")) or root_id
        root = (known.get(parent, parent) if parent else comment_id)
        known[comment_id] = root
        author = as_obj(raw.get("from"))
        author_id = clean_id(author.get("id"))
        page.comments.append(Comment(
            platform=PLATFORM, comment_id=comment_id, post_id=post_id, parent_id=parent, root_id=root,
            author=Author(id=author_id, name=as_text(author.get("name")) or None) if author_id else None,
            text=as_text(raw.get("message")), created_at=parse_created_time(raw.get("created_time")),
            metrics=CommentMetrics(likes=parse_count(raw.get("like_count")),
                                   replies=parse_count(raw.get("comment_count"))),
            media=_attachment(comment_id, raw.get("attachment")), source=source, fetched_at=fetched_at,
        ))
    return page
