"""Credentials supplied by the user, added at download time and never stored on a request.

``{PLATFORM}_COOKIE`` (e.g. ``WEIBO_COOKIE``) is read from the environment (or the setting of the same name) and
sent only with the spider's API requests (``meta["mc_api"]``: listing pages, post details) and only to the
platform's own API host (the host of ``{PLATFORM}_BASE_URL`` or the other ``*_URL`` roots of the spider). Media
requests never carry it, even to that host: a CDN needs no login, and a signed media URL must not become a way to
send the user's session elsewhere. The header is put on the request in :meth:`process_request`, just before the
download, and taken off again in :meth:`process_response`/:meth:`process_exception`, before the retry middleware
copies the request back into the scheduler: so a cookie never reaches JOBDIR, the Redis queue, logs or items.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import NotConfigured

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

_MARK = "_mc_session_cookie"


class SessionCookieMiddleware:
    """Adds the user's platform cookie to API requests at download time (see module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        if not crawler.settings.getbool("SESSION_COOKIES_ENABLED", True):
            raise NotConfigured("SESSION_COOKIES_ENABLED is off")
        self.crawler = crawler
        self._cookie: str | None = None
        self._hosts: set[str] = set()
        self._ready = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SessionCookieMiddleware:
        return cls(crawler)

    def _setup(self) -> None:
        self._ready = True
        spider = self.crawler.spider
        platform = getattr(spider, "platform", None)
        if not platform:
            return
        prefix = platform.upper()
        name = f"{prefix}_COOKIE"
        self._cookie = os.environ.get(name) or self.crawler.settings.get(name) or None
        for key, value in self.crawler.settings.items():
            if key.startswith(prefix + "_") and key.endswith("_URL") and isinstance(value, str) and value:
                host = urlsplit(value).netloc.lower()
                if host:
                    self._hosts.add(host)

    def process_request(self, request: Request) -> None:
        if not self._ready:
            self._setup()
        if (not self._cookie or not request.meta.get("mc_api")
                or urlsplit(request.url).netloc.lower() not in self._hosts):
            return None
        existing = request.headers.get(b"Cookie")
        value = self._cookie if not existing else f"{existing.decode('latin-1')}; {self._cookie}"
        request.headers[b"Cookie"] = value.encode("latin-1", "replace")
        request.meta[_MARK] = True
        return None

    def _strip(self, request: Request) -> None:
        if request.meta.pop(_MARK, False):
            request.headers.pop(b"Cookie", None)

    def process_response(self, request: Request, response: Response) -> Response:
        self._strip(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self._strip(request)
        return None
