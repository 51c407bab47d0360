"""Downloader middleware: media redirects are followed within a bound, and every hop is checked like the first URL.

CDNs redirect (a node moved, http to https), so the media pipeline lets RedirectMiddleware follow redirects
(MEDIA_ALLOW_REDIRECTS). A hop is a new URL from a server, though, and gets the checks the asset's own URL got
(:func:`~mediacrawler.media.urls.media_url_problem`): a scheme in MEDIA_ALLOWED_SCHEMES, a host, no
``user:password@``. For a media request (pipeline asset, Range segment, video fragment or manifest), a 3xx answer
is looked at *before* RedirectMiddleware builds (and logs, at DEBUG, with its URL) the next request: a refused
target, or one hop more than MEDIA_MAX_REDIRECTS, ends the download with
:class:`~mediacrawler.contracts.RequestRefused` (``scheme-not-allowed``, ``credentials-in-url``, ``invalid-url``,
``too-many-redirects``), which the pipeline records as the asset's reason. Each hop is checked once more when it
is sent, and gets the platform's media Referer back (RedirectMiddleware would send the redirecting URL instead).
Nothing here logs a target URL with its credentials.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from scrapy.utils.httpobj import urlparse_cached
from w3lib.url import safe_url_string

from mediacrawler.config import setting
from mediacrawler.contracts import META_ASSET, RequestRefused, media_referer
from mediacrawler.media.urls import allowed_schemes, media_url_problem, strip_userinfo
from mediacrawler.middlewares.media_slots import MEDIA_META_KEYS

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

logger = logging.getLogger(__name__)

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class MediaRedirectMiddleware:
    """Bounds and re-checks the redirect hops of media requests (see the module docstring).

    Settings: MEDIA_MAX_REDIRECTS, MEDIA_ALLOWED_SCHEMES.
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.max_redirects: int = setting(settings, "MEDIA_MAX_REDIRECTS")
        if self.max_redirects < 0:
            raise ValueError(f"MEDIA_MAX_REDIRECTS={self.max_redirects!r}: expected an integer >= 0")
        self.allowed_schemes = allowed_schemes(settings)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MediaRedirectMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        meta = request.meta
        if not any(key in meta for key in MEDIA_META_KEYS):
            return
        if "redirect_urls" not in meta:
            # RedirectMiddleware's own per-request bound, in case a 3xx gets past process_response.
            meta.setdefault("redirect_ttl", self.max_redirects)
            return
        self._refuse_if(media_url_problem(request.url, allowed_schemes=self.allowed_schemes), request)
        ident = meta.get(META_ASSET)
        if ident:
            referer = media_referer(self.crawler.settings, platform=str(ident.get("platform") or ""))
            if referer:
                request.headers["Referer"] = referer

    def process_response(self, request: Request, response: Response) -> Response:
        meta = request.meta
        if (response.status not in _REDIRECT_STATUSES or b"Location" not in response.headers
                or not any(key in meta for key in MEDIA_META_KEYS) or meta.get("dont_redirect")
                or meta.get("handle_httpstatus_all") or response.status in meta.get("handle_httpstatus_list", ())):
            return response  # not a redirect RedirectMiddleware would follow
        location = response.headers[b"Location"] or b""
        target = safe_url_string(location)
        if location.startswith(b"//"):
            target = urlparse_cached(request).scheme + "://" + target.lstrip("/")
        target = urljoin(request.url, target)
        self._refuse_if(media_url_problem(target, allowed_schemes=self.allowed_schemes), request, target=target)
        if len(meta.get("redirect_urls", ())) >= self.max_redirects:
            self._refuse_if("too-many-redirects", request, target=target)
        return response

    def _refuse_if(self, reason: str | None, request: Request, *, target: str | None = None) -> None:
        if reason is None:
            return
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(f"media/redirects/refused/{reason}")
        logger.debug("Media redirect refused (%s): %s -> %s", reason, strip_userinfo(request.url),
                     strip_userinfo(target or request.url))
        raise RequestRefused(reason)
