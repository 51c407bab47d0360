"""Platform error envelopes as retries, back-off and clean stops.

Platforms answer "slow down" and "log in" in their own ways: Weibo with ``{"ok":0,"errno":"100005"}`` in a 200,
``{"ok":-100}``, or HTTP 418/432; Bilibili with ``code`` -352/-412 or HTTP 412; the Graph API with an HTTP 400 and
``{"error":{"code":190}}``. The spider reads the whole response (``spider.classify_response(response)`` →
``ok``/``end``/``rate_limited``/``login_required``/``not_found``/``error``/``invalid``, see
:class:`~mediacrawler.spiders._base.PlatformSpider`); this middleware only acts on the answer, for API requests
(``meta["mc_api"]``):

- not the document an API sends (``invalid``, e.g. HTML where JSON belongs): retried by RetryMiddleware's rules;

- rate limited (envelope, or an HTTP status in ``PLATFORM_RATE_LIMIT_HTTP_CODES``, or 429 with ``Retry-After``):
  retried through :func:`scrapy.downloadermiddlewares.retry.get_retry_request` after a growing, bounded back-off
  (``PLATFORM_BACKOFF_BASE`` doubled per attempt, at most ``PLATFORM_BACKOFF_MAX``, never less than a
  ``Retry-After``), at most ``PLATFORM_RATE_LIMIT_RETRIES`` times; then the request fails (the page fails, and a
  checkpoint keeps it);
- login required: the spider is closed with reason ``login_required`` and one clear log line — unless the request
  is marked ``meta["mc_optional"]`` (it serves one asset, not the job: re-reading a post for a fresh media URL),
  which then just fails with ``IgnoreRequest``;
- the end of a list passes through: it is the spider's last-page signal, not an error.

The back-off is carried as an absolute time in ``meta["mc_not_before"]`` (plain data, JOBDIR-safe) and waited for
in :meth:`process_request`, so the wait also holds back the request when it comes out of a resumed queue.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.task import deferLater

from mediacrawler.config import setting
from mediacrawler.contracts import PlatformRefused
from mediacrawler.middlewares.rate_budget import cool_down_requested
from mediacrawler.scrub import scrub

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


def backoff_delay(attempt: int, *, base: float, cap: float, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): ``base * 2**attempt``, at most ``cap``, and at
    least the server's ``Retry-After`` (itself capped)."""
    delay = min(cap, base * (2**attempt))
    if retry_after is not None:
        delay = max(delay, min(cap, retry_after))
    return delay


def parse_retry_after(value: bytes | None) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is rare on APIs and read as absent)."""
    if not value:
        return None
    try:
        return max(0.0, float(value.decode("latin-1").strip()))
    except ValueError:
        return None


class PlatformErrorsMiddleware:
    """Turns platform error envelopes into back-off retries and clean stops (see module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        if not setting(s, "PLATFORM_ERRORS_ENABLED"):
            raise NotConfigured("PLATFORM_ERRORS_ENABLED is off")
        self.crawler = crawler
        self.max_retries = setting(s, "PLATFORM_RATE_LIMIT_RETRIES")
        self.base = setting(s, "PLATFORM_BACKOFF_BASE")
        self.cap = setting(s, "PLATFORM_BACKOFF_MAX")
        self.rate_limit_codes = {int(c) for c in setting(s, "PLATFORM_RATE_LIMIT_HTTP_CODES")}
        if self.base < 0 or self.cap < self.base:
            raise ValueError(f"PLATFORM_BACKOFF_BASE={self.base!r}: expected a number >= 0 and <= PLATFORM_BACKOFF_MAX "
                             f"({self.cap!r})")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PlatformErrorsMiddleware:
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        not_before = request.meta.get("mc_not_before")
        if not_before:
            delay = float(not_before) - time.time()
            if delay > 0:
                from twisted.internet import reactor  # imported late: importing it installs a reactor

                await maybe_deferred_to_future(deferLater(reactor, delay, lambda: None))
        return None

    def process_response(self, request: Request, response: Response) -> Request | Response:
        if not request.meta.get("mc_api"):
            return response
        if response.status in self.rate_limit_codes:
            return self._retry_later(request, f"http_{response.status}", response)
        classify = getattr(self.crawler.spider, "classify_response", None)
        if classify is None:
            return response
        kind = classify(response)
        if kind == "invalid":
            retry = get_retry_request(request, spider=self.crawler.spider, reason="invalid_json")  # type: ignore[arg-type]
            return retry or response
        if kind == "rate_limited":
            return self._retry_later(request, "rate_limited", response)
        if kind == "login_required":
            if request.meta.get("mc_optional"):
                # One post behind a login wall (or a session that just expired) costs that asset, not the crawl:
                # the listing pages, which the job needs, still close it when they hit the wall.
                platform = getattr(self.crawler.spider, "platform", "platform")
                assert self.crawler.stats is not None
                self.crawler.stats.inc_value(f"{platform}/login_required/optional")
                raise IgnoreRequest(scrub(f"login required for {request.url}"))
            self._refuse(request, "login_required")
        return response

    def _retry_later(self, request: Request, reason: str, response: Response) -> Request | Response:
        assert self.crawler.stats is not None
        platform = getattr(self.crawler.spider, "platform", "platform")
        self.crawler.stats.inc_value(f"{platform}/rate_limited/{reason}")
        attempt = int(request.meta.get("retry_times", 0))
        retry = get_retry_request(
            request,
            spider=self.crawler.spider,  # type: ignore[arg-type]
            reason=reason,
            max_retry_times=self.max_retries,
        )
        if retry is None:
            logger.error("%s: still rate limited after %d retries, giving up %s", platform, attempt, request.url)
            raise IgnoreRequest(f"rate limited ({reason}) after {attempt} retries")
        delay = backoff_delay(
            attempt, base=self.base, cap=self.cap, retry_after=parse_retry_after(response.headers.get(b"Retry-After"))
        )
        retry.meta["mc_not_before"] = time.time() + delay
        # The shared rate budget (rate_budget.py, when RATE_BUDGET is set) holds every worker's requests of this
        # platform for as long: the platform slowed all of us down, not only this request.
        self.crawler.signals.send_catch_log(signal=cool_down_requested, key=platform, seconds=delay, reason=reason)
        logger.warning("%s: rate limited (%s) on %s; retry %d in %.1fs", platform, reason, request.url,
                       attempt + 1, delay)
        return retry

    def _refuse(self, request: Request, reason: str) -> None:
        spider = self.crawler.spider
        platform = getattr(spider, "platform", "platform")
        message_for = getattr(spider, "refusal_message", None)
        message = message_for(reason) if message_for is not None else f"login required: set {platform.upper()}_COOKIE"
        # The refusal travels on as the failure's text (page_failed reason, checkpoint, retry records).
        message = scrub(message)
        logger.error("%s: %s (the platform answered %s for %s)", platform, message, reason, request.url)
        assert self.crawler.engine is not None
        deferred_from_coro(self.crawler.engine.close_spider_async(reason=reason))
        raise PlatformRefused(f"{reason}: {message}")
