"""Downloader middleware: media requests get a downloader slot of their own per host.

DOWNLOAD_DELAY and AutoThrottle pace the platforms' APIs. Media comes from CDNs, in many requests per asset (one
per image, one per Range segment of a large file, one per fragment of a video): at the API's pace (0.5 s a
request, more under AutoThrottle) a 1 GiB video in 16 MiB segments would spend half a minute just waiting between
its segments, and every picture of a timeline would queue behind the one before it.

A media request — one sent by the media pipeline, the large-file downloader or the video downloader, known by
their ``request.meta`` keys — goes to the downloader slot ``media:<host>`` instead of ``<host>``: paced by
MEDIA_DOWNLOAD_DELAY (default 0, no jitter), MEDIA_SLOT_CONCURRENCY requests at once, and AutoThrottle leaves its
delay alone (``autothrottle_dont_adjust_delay``). API requests keep their slots and their pace. The per-asset
bounds stay where they are: MEDIA_CONCURRENCY_PER_HOST assets per host in the pipeline, MEDIA_SEGMENT_CONCURRENCY
segments per file. A request that already names a ``download_slot`` is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from mediacrawler.contracts import META_ASSET, META_SEGMENT, META_VIDEO

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request

#: request.meta keys that mark a media request (pipeline asset, Range segment, video fragment or manifest).
MEDIA_META_KEYS = (META_ASSET, META_SEGMENT, META_VIDEO)
#: Prefix of the media slots' names (``media:<host>``).
SLOT_PREFIX = "media:"


class MediaSlotMiddleware:
    """Puts media requests into per-host ``media:<host>`` downloader slots (see the module docstring).

    Settings: MEDIA_SLOTS_ENABLED, MEDIA_DOWNLOAD_DELAY, MEDIA_SLOT_CONCURRENCY.
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("MEDIA_SLOTS_ENABLED", True):
            raise NotConfigured("MEDIA_SLOTS_ENABLED is off: media requests share the API slots and their delay")
        self.crawler = crawler
        self.delay = settings.getfloat("MEDIA_DOWNLOAD_DELAY", 0.0)
        self.concurrency = settings.getint("MEDIA_SLOT_CONCURRENCY", 16)
        if self.delay < 0 or self.concurrency < 1:
            raise NotConfigured("MEDIA_DOWNLOAD_DELAY must be >= 0 and MEDIA_SLOT_CONCURRENCY >= 1")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MediaSlotMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        meta = request.meta
        if meta.get("download_slot") is not None or not any(key in meta for key in MEDIA_META_KEYS):
            return
        slot = SLOT_PREFIX + (urlparse_cached(request).hostname or "")
        engine = self.crawler.engine
        if engine is not None:
            # Read by the downloader when it creates the slot (after the middlewares): this slot's own pace.
            engine.downloader.per_slot_settings.setdefault(
                slot, {"delay": self.delay, "concurrency": self.concurrency, "jitter": 0})
        meta["download_slot"] = slot
        meta["autothrottle_dont_adjust_delay"] = True
