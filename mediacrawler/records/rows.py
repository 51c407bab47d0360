"""A record as rows of the records database (docs/records.md, "Records database"): pure functions over the plain
dicts a record becomes (``ItemAdapter(item).asdict()``), no I/O.

One post gives an ``authors`` row (when it names its author), a ``posts`` row, and per media asset a ``media`` row
(the asset by its platform key) and a ``post_media`` row (its place in the post); the original of a repost gives
rows of its own. A comment gives a ``comments`` row, its author's row, and per picture a ``media`` row and a
``comment_media`` row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mediacrawler.contracts import REFRESH_ONLY

#: Keys of a record's ``extra`` that are instructions to the pipelines, never data: not stored.
PRIVATE_EXTRA = frozenset({REFRESH_ONLY})
#: The counts of a post, in the order of the ``posts`` and ``metrics_history`` columns.
POST_COUNTS = ("likes", "comments", "shares", "views")
#: The results of the media pipeline kept on a ``media`` row (a later sighting without them keeps the earlier).
MEDIA_RESULTS = ("sha256", "path", "size", "mime", "status", "error")


@dataclass
class Rows:
    """Rows of one batch, keyed by primary key: a later sighting in the batch replaces an earlier one."""

    authors: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    posts: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    media: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    post_media: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    comments: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    comment_media: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.posts) + len(self.media) + len(self.comments)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _extra(record: dict[str, Any]) -> str:
    extra = {k: v for k, v in (record.get("extra") or {}).items() if k not in PRIVATE_EXTRA}
    return _json(extra)


def _author(rows: Rows, platform: str, author: Any) -> str | None:
    if not isinstance(author, dict) or not author.get("id"):
        return None
    author_id = str(author["id"])
    rows.authors[(platform, author_id)] = {"platform": platform, "author_id": author_id,
                                           "name": author.get("name")}
    return author_id


def _put_media(rows: Rows, key: tuple[str, str, str], row: dict[str, Any]) -> None:
    # A sighting without results (before the media pipeline) never hides the results of one in the same batch.
    earlier = rows.media.get(key)
    if earlier is not None and row["status"] is None:
        row.update({name: earlier[name] for name in MEDIA_RESULTS})
    rows.media[key] = row


def _add_media(rows: Rows, platform: str, media: Any, *, with_results: bool) -> list[tuple[int, str, str]]:
    """The ``media`` rows of a post's or a comment's assets; ``(position, kind, key)`` of each, for its links."""
    placed = []
    for position, asset in enumerate(media or []):
        if not isinstance(asset, dict) or not asset.get("kind") or not asset.get("key"):
            continue
        kind, key = str(asset["kind"]), str(asset["key"])
        _put_media(rows, (platform, kind, key), {
            "platform": platform, "kind": kind, "key": key, "url": asset.get("url"),
            "width": asset.get("width"), "height": asset.get("height"), "duration": asset.get("duration"),
            "live_of": asset.get("live_of"), "cover_of": asset.get("cover_of"),
            "derived": None if asset.get("derived") is None else _json(asset["derived"]),
            **{name: asset.get(name) if with_results else None for name in MEDIA_RESULTS},
        })
        placed.append((position, kind, key))
    return placed


def add_post(rows: Rows, post: dict[str, Any], *, with_results: bool = True) -> None:
    """Add the rows of ``post`` (and of the post it reposts) to ``rows``. ``with_results=False``: the media rows
    carry no download results (the post has not been through the media pipeline yet)."""
    for _ in range(8):  # a post and its original; the cap guards cycles (as contracts.walk_assets)
        platform, post_id = str(post.get("platform") or ""), str(post.get("post_id") or "")
        if not platform or not post_id:
            return
        metrics = post.get("metrics") or {}
        source = post.get("source") or {}
        reposted = post.get("reposted")
        original_id = str(reposted.get("post_id") or "") or None if isinstance(reposted, dict) else None
        rows.posts[(platform, post_id)] = {
            "platform": platform, "post_id": post_id, "url": post.get("url"),
            "author_id": _author(rows, platform, post.get("author")),
            "created_at": post.get("created_at"), "text": post.get("text") or "",
            "text_html": post.get("text_html") or "",
            **{name: metrics.get(name) for name in POST_COUNTS},
            "reposted_id": original_id, "deleted": 1 if post.get("deleted") else 0,
            "spider": source.get("spider"), "job": source.get("job"), "fetched_at": post.get("fetched_at"),
            "extra": _extra(post),
        }
        for position, kind, key in _add_media(rows, platform, post.get("media"), with_results=with_results):
            rows.post_media[(platform, post_id, position)] = {
                "platform": platform, "post_id": post_id, "position": position, "kind": kind, "key": key}
        if not isinstance(reposted, dict):
            return
        post = reposted


def add_comment(rows: Rows, comment: dict[str, Any], *, with_results: bool = True) -> None:
    """Add the rows of ``comment`` (a comment or a reply) and of its pictures to ``rows``."""
    platform, comment_id = str(comment.get("platform") or ""), str(comment.get("comment_id") or "")
    if not platform or not comment_id:
        return
    metrics = comment.get("metrics") or {}
    source = comment.get("source") or {}
    rows.comments[(platform, comment_id)] = {
        "platform": platform, "comment_id": comment_id, "post_id": str(comment.get("post_id") or ""),
        "parent_id": comment.get("parent_id"), "root_id": comment.get("root_id"),
        "author_id": _author(rows, platform, comment.get("author")), "text": comment.get("text") or "",
        "created_at": comment.get("created_at"), "likes": metrics.get("likes"), "replies": metrics.get("replies"),
        "pinned": 1 if comment.get("pinned") else 0, "deleted": 1 if comment.get("deleted") else 0,
        "spider": source.get("spider"), "job": source.get("job"),
        "fetched_at": comment.get("fetched_at"), "extra": _extra(comment),
    }
    for position, kind, key in _add_media(rows, platform, comment.get("media"), with_results=with_results):
        rows.comment_media[(platform, comment_id, position)] = {
            "platform": platform, "comment_id": comment_id, "position": position, "kind": kind, "key": key}


def add_record(rows: Rows, record: dict[str, Any], *, with_results: bool = True) -> bool:
    """Add a post or a comment (told apart by ``comment_id``); False for anything else."""
    if record.get("comment_id"):
        add_comment(rows, record, with_results=with_results)
        return True
    if record.get("post_id"):
        add_post(rows, record, with_results=with_results)
        return True
    return False
