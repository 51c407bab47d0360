"""Credentials supplied by the user, added at download time and never stored on a request.

The spider's ``credential_env`` (``{PLATFORM}_COOKIE`` by default, e.g. ``WEIBO_COOKIE``; ``FACEBOOK_ACCESS_TOKEN``
for the Graph API) is read from the environment (or the setting of the same name), turned into headers by the
spider's ``credential_headers`` (a ``Cookie``, or ``Authorization: Bearer …``), and sent only with the spider's
API requests (``meta["mc_api"]``: listing pages, post details) and only to the platform's own API host (the host of ``{PLATFORM}_BASE_URL`` or the other ``*_URL`` roots of the spider). Media
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

from mediacrawler.config import setting

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

_MARK = "_mc_session_cookie"


class SessionCookieMiddleware:
    """Adds the user's platform cookie to API requests at download time (see module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        if not setting(crawler.settings, "SESSION_COOKIES_ENABLED"):
            raise NotConfigured("SESSION_COOKIES_ENABLED is off")
        self.crawler = crawler
        self._headers: dict[str, str] = {}
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
        name = getattr(spider, "credential_env", None) or f"{prefix}_COOKIE"
        secret = os.environ.get(name) or self.crawler.settings.get(name) or None
        if secret:
            make = getattr(spider, "credential_headers", None)
            self._headers = make(secret) if make is not None else {"Cookie": secret}
        for key, value in self.crawler.settings.items():
            if key.startswith(prefix + "_") and key.endswith("_URL") and isinstance(value, str) and value:
                host = urlsplit(value).netloc.lower()
                if host:
                    self._hosts.add(host)

    def process_request(self, request: Request) -> None:
        if not self._ready:
            self._setup()
        if (not self._headers or not request.meta.get("mc_api")
                or urlsplit(request.url).netloc.lower() not in self._hosts):
            return None
        added = []
        for name, secret in self._headers.items():
            existing = request.headers.get(name)
            # A Cookie header the request already has (CookiesMiddleware's) is joined; anything else is replaced.
            value = f"{existing.decode('latin-1')}; {secret}" if existing and name.lower() == "cookie" else secret
            request.headers[name] = value.encode("latin-1", "replace")
            added.append(name)
        request.meta[_MARK] = added
        return None

    def _strip(self, request: Request) -> None:
        for name in request.meta.pop(_MARK, None) or ():
            request.headers.pop(name, None)

    def process_response(self, request: Request, response: Response) -> Response:
        self._strip(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self._strip(request)
        return None
