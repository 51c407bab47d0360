"""Downloader middleware: media requests (CDNs) get per-host downloader slots ``media:<host>`` of their own, paced
by MEDIA_DOWNLOAD_DELAY and MEDIA_SLOT_CONCURRENCY instead of the API's DOWNLOAD_DELAY/AutoThrottle (docs/media.md,
"Pace of media requests"). A request that already names a ``download_slot`` is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from mediacrawler.compat import set_slot_pace
from mediacrawler.config import setting
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
        if not setting(settings, "MEDIA_SLOTS_ENABLED"):
            raise NotConfigured("MEDIA_SLOTS_ENABLED is off: media requests share the API slots and their delay")
        self.crawler = crawler
        self.delay = setting(settings, "MEDIA_DOWNLOAD_DELAY")
        self.concurrency = setting(settings, "MEDIA_SLOT_CONCURRENCY")
        if self.delay < 0 or self.concurrency < 1:
            if self.delay < 0:
                raise ValueError(f"MEDIA_DOWNLOAD_DELAY={self.delay!r}: expected a number >= 0")
            raise ValueError(f"MEDIA_SLOT_CONCURRENCY={self.concurrency!r}: expected an integer >= 1")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MediaSlotMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        meta = request.meta
        if meta.get("download_slot") is not None or not any(key in meta for key in MEDIA_META_KEYS):
            return
        slot = SLOT_PREFIX + (urlparse_cached(request).hostname or "")
        # Read by the downloader when it creates the slot (after the middlewares): this slot's own pace.
        set_slot_pace(self.crawler, slot, delay=self.delay, concurrency=self.concurrency)
        meta["download_slot"] = slot
        meta["autothrottle_dont_adjust_delay"] = True
