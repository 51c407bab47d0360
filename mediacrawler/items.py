"""The record schema: one :class:`Post` per post and one :class:`Comment` per comment or reply, whatever the
platform.

Field-by-field documentation lives in ``docs/records.md``. Parsers build these dataclasses; pipelines read and
write them only through :class:`itemadapter.ItemAdapter`, so that a pipeline never depends on the concrete class.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Literal

MediaKind = Literal["image", "video", "audio", "subtitle", "danmaku"]
MediaStatus = Literal["downloaded", "uptodate", "deduplicated", "failed"]


@dataclass
class Author:
    """Who wrote a post. ``id`` is the platform's user id as a string."""

    id: str
    name: str | None = None


@dataclass
class Metrics:
    """Engagement counts as integers (``None`` when the platform did not say)."""

    likes: int | None = None
    comments: int | None = None
    shares: int | None = None
    views: int | None = None


@dataclass
class Source:
    """Where a record came from: the spider, the job key, and the page or cursor that listed it."""

    spider: str
    job: str
    page: int | None = None
    cursor: str | None = None


@dataclass
class MediaAsset:
    """One image, video, audio, subtitle or danmaku file attached to a post.

    ``key`` is a stable identity that survives signed or resized URLs (for Weibo the picture ``pid``), so the
    media store can recognise an asset it already holds before downloading it. ``url`` is the preferred source,
    ``alternates`` are other URLs for the same asset (other sizes, backup CDNs), best first.

    The fields after ``duration`` are results, filled by the media pipeline; a record that was never
    downloaded keeps them ``None``.
    """

    kind: MediaKind
    key: str
    url: str
    alternates: list[str] = field(default_factory=list)
    width: int | None = None
    height: int | None = None
    duration: float | None = None
    #: How ``url`` is to be read when it is not the file itself: ``"hls"`` (an m3u8), ``"dash"`` (an MPD).
    #: ``None``: the media pipeline decides from the response. Ignored when ``renditions`` is set.
    manifest: str | None = None
    #: Streams a platform API listed for this asset (e.g. Bilibili's playurl, read by ``parsers/bilibili.py``), as
    #: plain JSON: ``{"kind": "video"|"audio"|"progressive", "url", "alternates", "width", "height", "codecs",
    #: "bandwidth", "frame_rate", "mime", "size", "segment_base"}``. When set, the media pipeline selects among
    #: them by height and codec (no manifest is fetched).
    renditions: list[dict[str, Any]] | None = None
    #: A Live Photo's motion clip names the ``key`` of its still picture (both are stored, each once); ``None``
    #: for every other asset.
    live_of: str | None = None
    #: A video's cover picture names the ``key`` of its video (stored once, like any picture).
    cover_of: str | None = None
    #: A video's chapters, ``[{"start", "end", "title"}]`` in seconds (Bilibili's ``view_points`` with
    #: ``-a chapters=true``), written into the MP4 when the media pipeline assembles it; ``None``: none known.
    chapters: list[dict[str, Any]] | None = None
    # Results (media pipeline).
    sha256: str | None = None
    path: str | None = None
    size: int | None = None
    mime: str | None = None
    status: MediaStatus | None = None
    error: str | None = None
    # The rendition chosen from a manifest (height, codec, bitrate), set by the video path.
    rendition: dict[str, Any] | None = None
    #: Objects derived from this one and stored beside it, by extension: a subtitle's SRT from its cue JSON
    #: (``{"srt": {"sha256", "path", "size"}}``, docs/media.md "Documents"); ``None`` for other assets.
    derived: dict[str, dict[str, Any]] | None = None


@dataclass
class Post:
    """A normalized post.

    ``reposted`` holds the original of a repost as a nested :class:`Post`; when the original was deleted it is a
    ``Post`` with ``deleted=True`` and whatever the platform still said about it.
    """

    platform: str
    post_id: str
    url: str
    author: Author | None
    created_at: str | None
    text: str = ""
    text_html: str = ""
    metrics: Metrics = field(default_factory=Metrics)
    reposted: Post | None = None
    media: list[MediaAsset] = field(default_factory=list)
    source: Source | None = None
    fetched_at: str | None = None
    deleted: bool = False
    # Platform-specific extras worth keeping (e.g. Weibo ``bid``/``mid``, ``region``); plain JSON values only.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommentMetrics:
    """A comment's counts as integers (``None`` when the platform did not say): likes, and replies to it."""

    likes: int | None = None
    replies: int | None = None


@dataclass
class Comment:
    """A comment on a post, or a reply to a comment (docs/records.md, "Comments").

    ``parent_id`` is ``None`` for a top-level comment, else the comment replied to; ``root_id`` the top-level
    comment of its thread (itself for a top-level one). ``pinned``: shown first by the author or the platform.
    """

    platform: str
    comment_id: str
    post_id: str
    parent_id: str | None
    root_id: str
    author: Author | None
    text: str
    created_at: str | None
    metrics: CommentMetrics = field(default_factory=CommentMetrics)
    media: list[MediaAsset] = field(default_factory=list)
    pinned: bool = False
    deleted: bool = False
    source: Source | None = None
    fetched_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)



# --- Records as plain values ------------------------------------------------------------------------------------


@functools.cache
def field_names(cls: type) -> tuple[str, ...] | None:
    """The field names of dataclass *cls* in declaration order (``ItemAdapter``'s order); ``None``: not one."""
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def as_plain(value: Any) -> Any:
    """*value* with every dataclass a dict of its fields and every tuple a list, recursively: what
    ``dataclasses.asdict`` gives for a record, at a third of its cost (it deep-copies every leaf; records hold
    plain JSON values, which nobody mutates through the result). Other objects are returned as they are."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    # Scalars are told apart inline, not by a call each: most of a record's values are (a third of the cost).
    names = field_names(kind)
    if names is not None:
        out = {}
        for name in names:
            v = getattr(value, name)
            out[name] = v if type(v) in _SCALARS else as_plain(v)
        return out
    if kind is list or kind is tuple:
        return [v if type(v) in _SCALARS else as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: v if type(v) in _SCALARS else as_plain(v) for k, v in value.items()}
    return value
