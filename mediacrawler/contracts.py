"""What several layers share: request meta keys, exceptions that cross from downloader middlewares to spiders and
pipelines, the resume point, and the one walk over a post's media assets.

Nothing here imports another project module, so any layer may import it (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy.exceptions import IgnoreRequest

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


@dataclass
class Resume:
    """Where a checkpoint says to continue: the page to fetch next and the cursor that fetches it."""

    page: int
    cursor: str | None = None


def asset_index_key(*, platform: str, kind: str, key: str) -> str:
    """The index key of an asset: ``<platform>/<kind>/<key>`` (a Weibo picture is ``weibo/image/<pid>``)."""
    return f"{platform}/{kind}/{key}"


def media_referer(settings: BaseSettings, *, platform: str) -> str | None:
    """The Referer to send with a platform's media requests: setting ``<PLATFORM>_MEDIA_REFERER`` or none."""
    return settings.get(f"{platform.upper()}_MEDIA_REFERER") or None


def walk_assets(item: Any) -> Iterator[tuple[str, ItemAdapter, str]]:
    """``(platform, asset, post id)`` for every media asset of a post and of the post it reposts, in a fixed order.

    The one walk over a post's media: spiders, the media pipeline, the video path and the retry set all use it.
    """
    post: Any = item
    for _ in range(8):  # a post and its original; the cap guards cycles
        if post is None or not is_item(post):
            return
        adapter = ItemAdapter(post)
        platform = str(adapter.get("platform") or "unknown")
        post_id = str(adapter.get("post_id") or "")
        for media in adapter.get("media") or []:
            yield platform, ItemAdapter(media), post_id
        post = adapter.get("reposted")


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
