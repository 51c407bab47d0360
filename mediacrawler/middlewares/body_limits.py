"""Downloader middleware: every response body is bounded while it is read or inflated, by kind of request.

Scrapy bounds a body by ``download_maxsize`` twice: the download handler cancels a body that grows past it, and
``HttpCompressionMiddleware`` stops inflating a compressed body there. With one global DOWNLOAD_MAXSIZE (1 GiB) a
server that gzips anyway (media requests ask for ``Accept-Encoding: identity``; nothing obliges a server to obey)
can hand a 2 MiB body that inflates to 1 GiB. This middleware takes the place of ``HttpCompressionMiddleware``
(same position, same behaviour) and sets ``download_maxsize`` per kind of request unless the request already
carries one (Range segments and manifests set their own):

- API requests (``meta["mc_api"]``: listing pages, post JSON, SSR pages): PLATFORM_API_MAXSIZE;
- media requests (pipeline assets, video fragments): MEDIA_MAXSIZE.

A body over its limit, on the wire or inflated, fails that request with :class:`~mediacrawler.contracts.BodyTooLarge`
(reason ``too-large``): a listing page fails for good (the checkpoint keeps it), a media asset is recorded as failed.
See docs/operations.md, "Limits".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import IgnoreRequest, NotConfigured

from mediacrawler.config import setting
from mediacrawler.contracts import BodyTooLarge

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

#: request.meta keys that mark a media request (pipeline asset, Range segment, video fragment or manifest); the
#: values of pipelines.media.META_ASSET, media.segments.META_SEGMENT and media.video.META_VIDEO.
MEDIA_META_KEYS = ("media_asset", "media_segment", "media_video")


class BodyLimitsMiddleware(HttpCompressionMiddleware):
    """HttpCompressionMiddleware with a ``download_maxsize`` per kind of request (see the module docstring).

    Settings: PLATFORM_API_MAXSIZE, MEDIA_MAXSIZE (bytes; 0 = DOWNLOAD_MAXSIZE), COMPRESSION_ENABLED.
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler=crawler)
        settings = crawler.settings
        self.api_maxsize = setting(settings, "PLATFORM_API_MAXSIZE")
        self.media_maxsize = setting(settings, "MEDIA_MAXSIZE")
        if self.api_maxsize < 0 or self.media_maxsize < 0:
            name, value = (("PLATFORM_API_MAXSIZE", self.api_maxsize) if self.api_maxsize < 0
                           else ("MEDIA_MAXSIZE", self.media_maxsize))
            raise ValueError(f"{name}={value!r}: expected an integer >= 0")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BodyLimitsMiddleware:
        if not crawler.settings.getbool("COMPRESSION_ENABLED"):
            raise NotConfigured("COMPRESSION_ENABLED is off")
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        meta = request.meta
        if "download_maxsize" not in meta:
            if meta.get("mc_api"):
                limit = self.api_maxsize
            elif any(key in meta for key in MEDIA_META_KEYS):
                limit = self.media_maxsize
            else:
                limit = 0
            if limit:
                meta["download_maxsize"] = limit
                # Scrapy warns at DOWNLOAD_WARNSIZE (32 MiB); below the limit that warning says nothing new.
                meta.setdefault("download_warnsize", 0)
        super().process_request(request)
        return None

    def process_response(self, request: Request, response: Response) -> Request | Response:
        try:
            return super().process_response(request, response)
        except IgnoreRequest as exc:
            # The only IgnoreRequest of HttpCompressionMiddleware: the inflated body passed download_maxsize.
            limit = request.meta.get("download_maxsize")
            raise BodyTooLarge(f"{len(response.body)} bytes compressed inflate past the limit of {limit} bytes "
                               f"({'PLATFORM_API_MAXSIZE' if request.meta.get('mc_api') else 'MEDIA_MAXSIZE'})"
                               ) from exc
