"""What several layers share: request meta keys, exceptions that cross from downloader middlewares to spiders and
pipelines, failure reasons by exception type, the resume point, the one walk over a post's media assets, and what
pipelines may ask of extensions.

Nothing here imports another project module but compat.py (the lowest), so any layer may import it
(docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from itemadapter import ItemAdapter
from scrapy.exceptions import (CannotResolveHostError, DownloadCancelledError, DownloadConnectionRefusedError,
                               DownloadTimeoutError, DropItem, IgnoreRequest, NotConfigured, ResponseDataLossError)
from scrapy.utils.misc import load_object
from twisted.internet import defer
from twisted.internet import error as net
from twisted.web.client import ResponseFailed, ResponseNeverReceived
from twisted.web.http import PotentialDataLoss

from mediacrawler.compat import DataLoss, TunnelError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

# Request meta keys the media layers set and read.
#: The asset's identity on a media request (plain data: index key, kind, platform key; pipelines/media.py).
META_ASSET = "media_asset"
#: Set on an image request whose headers announced a body above MEDIA_SEGMENT_THRESHOLD.
META_LARGE = "media_large"
#: A segment request of a large file: ``{"key", "start", "end", "probe"}`` (media/segments.py).
META_SEGMENT = "media_segment"
#: A fragment or manifest request of a video: ``{"key", "track", "index"}`` (media/video.py).
META_VIDEO = "media_video"
#: A :class:`BodySink` for the ``206`` body of a segment request (never serialized: segment requests go to the
#: downloader directly, not through the scheduler; handlers.py, media/segments.py).
META_BODY_SINK = "media_body_sink"
#: A key of a post's ``extra`` set by the spider (``-a refresh``): the post was read again only to refresh its
#: counts in the records database, which drops it after the upsert (no media download, no feed line).
REFRESH_ONLY = "refresh_only"


@dataclass
class Resume:
    """Where a checkpoint says to continue: the page to fetch next and the cursor that fetches it."""

    page: int
    cursor: str | None = None
    #: Comment threads open when the run stopped: post id → its ``ThreadState`` as plain JSON (spiders/_threads.py).
    threads: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class HighWaterMark:
    """The newest post of a source known to be completely stored, with everything older (incremental sync; kept by
    extensions/marks.py). ``created_at`` is the post's ISO-8601 UTC time, when known."""

    post_id: str
    created_at: str | None = None

    def covers(self, post_id: str, created_at: str | None) -> bool:
        """Whether a post is at or below the mark: numeric ids (Weibo mids, Douyin aweme ids grow with time) compare
        as numbers; other ids by time (both in the parsers' one UTC format, so as text). Unknown: not covered."""
        if post_id == self.post_id:
            return True
        if post_id.isdigit() and self.post_id.isdigit():
            return int(post_id) <= int(self.post_id)
        if created_at and self.created_at:
            return created_at <= self.created_at
        return False


@functools.lru_cache(maxsize=256)
def _item_class(cls: type) -> bool:
    return ItemAdapter.is_item_class(cls)


def is_record(obj: Any) -> bool:
    """``itemadapter.is_item(obj)``, answered once per class (every adapter judges an object by its class)."""
    return not isinstance(obj, type) and _item_class(type(obj))


def field_of(item: Any, name: str) -> Any:
    """``ItemAdapter(item).get(name)`` (``None`` when *item* has no such field), without building an adapter for a
    dataclass record: the components beside the chain each read a few fields of every item (docs/benchmarks.md,
    "Weibo timeline"). *item* must be an item (``is_item``), as for ItemAdapter."""
    fields = getattr(type(item), "__dataclass_fields__", None)
    if fields is not None:
        return getattr(item, name) if name in fields else None
    return ItemAdapter(item).get(name)


def set_field(item: Any, name: str, value: Any) -> None:
    """``ItemAdapter(item)[name] = value`` (a KeyError for a field the item cannot hold), without building an
    adapter for a dataclass record (normalize writes several fields of every post and asset)."""
    fields = getattr(type(item), "__dataclass_fields__", None)
    if fields is not None and name in fields:
        setattr(item, name, value)
    else:
        ItemAdapter(item)[name] = value


@functools.lru_cache(maxsize=256)
def _dataclass_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def field_names_of(item: Any) -> tuple[str, ...]:
    """``ItemAdapter(item).field_names()`` for an item, without an adapter for a dataclass (its fields in
    declaration order, as ItemAdapter gives them)."""
    if hasattr(type(item), "__dataclass_fields__"):
        return _dataclass_names(type(item))
    return tuple(ItemAdapter(item).field_names())


def is_comment(item: Any) -> bool:
    """Whether a record is a comment (it has a ``comment_id``; docs/records.md, "Comment"), not a post: what keys
    on ``post_id`` (checkpoint pages, marks, retries, the skip pipeline) passes comments by."""
    return is_record(item) and bool(field_of(item, "comment_id"))


def asset_index_key(*, platform: str, kind: str, key: str) -> str:
    """The index key of an asset: ``<platform>/<kind>/<key>`` (a Weibo picture is ``weibo/image/<pid>``)."""
    return f"{platform}/{kind}/{key}"


def media_referer(settings: BaseSettings, *, platform: str) -> str | None:
    """The Referer to send with a platform's media requests: setting ``<PLATFORM>_MEDIA_REFERER`` or none."""
    return settings.get(f"{platform.upper()}_MEDIA_REFERER") or None


def walk_assets(item: Any, *, with_status: bool = False) -> Iterator[tuple[str, ItemAdapter, str]]:
    """``(platform, asset, post id)`` for every media asset of a post and of the post it reposts, in a fixed order;
    ``with_status``: only the assets with a ``status`` (a media pipeline's result, or normalize's refusal), told
    before an adapter is built for each (media off, no asset has one).

    The one walk over a post's media: spiders, the media pipeline, the video path and the retry set all use it.
    """
    post: Any = item
    for _ in range(8):  # a post and its original; the cap guards cycles
        if post is None or not is_record(post):
            return
        platform = str(field_of(post, "platform") or "unknown")
        post_id = str(field_of(post, "post_id") or "")
        for media in field_of(post, "media") or []:
            if not with_status or field_of(media, "status") is not None:
                yield platform, ItemAdapter(media), post_id
        post = field_of(post, "reposted")


def asset_key_of(platform: str, asset: ItemAdapter) -> str:
    """The index key of ``asset`` (an ItemAdapter from :func:`walk_assets`)."""
    return asset_index_key(platform=platform, kind=str(asset.get("kind")), key=str(asset.get("key")))


class PlatformRefused(IgnoreRequest):
    """The platform refused the whole job (login required, token invalid); the spider is being closed."""


class RequestRefused(IgnoreRequest):
    """A request given up on purpose, with a short machine-readable ``reason`` (``too-large``,
    ``scheme-not-allowed``, …) that records and stats use (``media/failed/<reason>``); ``detail`` is for people
    and never holds a secret."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class BodyTooLarge(RequestRefused):
    """A response body, compressed or not, went past the limit of its kind of request while it was read or
    inflated (PLATFORM_API_MAXSIZE, MEDIA_MAXSIZE; middlewares/body_limits.py)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("too-large", detail)


class AlreadyStored(DropItem):
    """Dropped by the checkpoint's skip pipeline: an earlier, interrupted run of the same job stored the post."""


@runtime_checkable
class StoredBefore(Protocol):
    """The checkpoint extension as the skip pipeline sees it (pipelines/checkpoint.py)."""

    #: Set by the skip pipeline, so the extension knows the posts it reports are dropped.
    skip_pipeline: bool
    #: Ids of the posts an earlier run of this job stored past the watermark (empty: nothing to skip).
    skip_ids: frozenset[str]
    #: Ids of the comments of threads left open by that run, found in its export (empty: nothing to skip).
    skip_comment_ids: frozenset[str]

    def already_stored(self, post_id: str) -> bool: ...


@runtime_checkable
class PendingRetries(Protocol):
    """The media retry extension as the dedupe pipeline sees it (extensions/retries.py)."""

    def pending_post(self, post_id: str) -> bool: ...


class BodySink(Protocol):
    """Where the download handler puts the ``206`` body of a request carrying one under :data:`META_BODY_SINK`
    (handlers.py): ``Response.body`` is then empty and ``attached`` true. Reset before every attempt."""

    #: True once the handler put the current attempt's body here (false: read ``Response.body``).
    attached: bool

    def reset(self) -> None: ...

    def write(self, data: bytes) -> bool:
        """Append ``data``; false when it does not fit (the handler then cancels the download)."""
        ...


def backend_class(setting: str, name: str, backends: dict[str, str]) -> Any:
    """The class a backend setting names (``CHECKPOINT_BACKEND``, ``CACHE_BACKEND``…): one of *backends*' short
    names or an import path; NotConfigured when it names nothing importable."""
    try:
        return load_object(backends.get(name.lower(), name))
    except (ImportError, NameError, ValueError) as e:
        raise NotConfigured(f"{setting}={name!r} is neither one of {sorted(backends)} nor importable: {e}") from e


#: Failure reasons by exception type, first match wins (Scrapy 2.19 raises its own types; older paths Twisted's).
_REASONS: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    ((ResponseDataLossError, PotentialDataLoss, DataLoss), "dataloss"),
    ((DownloadTimeoutError, net.TimeoutError, defer.TimeoutError), "timeout"),
    ((DownloadCancelledError,), "too-large"),  # DOWNLOAD_MAXSIZE / MEDIA_MAXSIZE reached mid-body
    ((DownloadConnectionRefusedError, CannotResolveHostError, net.ConnectError, net.DNSLookupError,
      net.ConnectionLost, net.ConnectionDone, ResponseNeverReceived, TunnelError), "connection-error"),
)


def download_error_reason(exc: BaseException) -> str:
    """The reason code of an exception a download ended with, from its type: the reason of a RequestRefused,
    ``filtered`` (IgnoreRequest: offsite...), ``dataloss``, ``timeout``, ``too-large``, ``connection-error``, or
    ``download-error``. A ResponseFailed is judged by the failures it wraps."""
    if isinstance(exc, RequestRefused):
        return exc.reason  # refused on purpose, with its own reason (e.g. too-large: middlewares/body_limits.py)
    if isinstance(exc, IgnoreRequest):
        return "filtered"
    causes = [f.value for f in exc.reasons] if isinstance(exc, (ResponseFailed, ResponseNeverReceived)) else []
    for types, reason in _REASONS:
        if isinstance(exc, types) or any(isinstance(c, types) for c in causes):
            return reason
    return "connection-error" if isinstance(exc, ResponseFailed) else "download-error"
