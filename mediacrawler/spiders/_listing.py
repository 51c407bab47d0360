"""The ``listing`` source kind: pages by number or cursor, one after the other, the high-water mark,
``-a refresh``, and pages that fail for good (docs/architecture.md, "Sources"). A mixin of
:class:`~mediacrawler.spiders._base.PlatformSpider`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.python.failure import Failure

from mediacrawler import signals as mc_signals
from mediacrawler.config import setting
from mediacrawler.contracts import REFRESH_ONLY, PlatformRefused
from mediacrawler.items import Post, Source
from mediacrawler.media.urls import strip_userinfo
from mediacrawler.parsers._common import Page, iso_utc
from mediacrawler.scrub import scrub
from mediacrawler.spiders._chain import UNREADABLE_ANSWER
from mediacrawler.spiders._window import cut_page

if TYPE_CHECKING:
    from mediacrawler.spiders._base import PlatformSpider

logger = logging.getLogger("mediacrawler.spiders._base")  # one log channel for the spider flow, as before

#: Scheduler priority of listing requests and requested items (chain steps and media keep Scrapy's default 0).
LISTING_PRIORITY = 1
_SEEN_DUPLICATE = "request dropped by the scheduler as a duplicate of one already seen"


def is_pinned(post: Post) -> bool:
    """A post the platform pinned to the top of a listing (``extra["pinned"]``, set by the parsers): it is out of
    order, so it never stops pagination nor moves a high-water mark."""
    return bool(post.extra.get("pinned")) if isinstance(post.extra, dict) else False


class ListingWalk:
    """Walks a ``listing``: :meth:`listing_request` for page N, :meth:`parse_listing` for its answer, the next page
    (or the stop: last page, mark, ``-a max_pages``, a failed cursor page), and the idle check for lost pages."""

    def first_page(self: PlatformSpider) -> tuple[int, str | None]:
        """``-a start`` wins; else the checkpoint's page; else 1 (:meth:`JobState.first_page`)."""
        return self.job_state.first_page()

    def listing_request(self: PlatformSpider, page: int, cursor: str | None) -> Request:
        """The request for one listing page; plain-data meta only, callbacks by method name (JOBDIR-safe)."""
        if page not in self.job_state.listing_answered and not self.distributed:
            self.job_state.listing_pending[page] = cursor
        return Request(
            self.listing_url(page, cursor),
            callback=self.parse_listing,
            errback=self.listing_failed,
            headers=self.listing_headers() or None,
            meta={"mc_api": True, "mc_page": page, "mc_cursor": cursor},
            # Ahead of the pages' follow-up requests (chain steps): a listing walks one page after the other, so
            # the next page must not wait behind the last page's steps (with several workers the steps overlap,
            # the pages cannot: docs/benchmarks.md, "Many workers").
            priority=LISTING_PRIORITY,
        )

    def parse_listing(self: PlatformSpider, response: Response) -> Iterator[Any]:
        page_no: int = response.meta["mc_page"]
        cursor: str | None = response.meta.get("mc_cursor")
        self.job_state.listing_pending.pop(page_no, None)
        self.job_state.listing_answered.add(page_no)
        self.job_state.pages_fetched += 1
        source = self.source_for(response)
        self.job_state.listing_dropped.pop(page_no, None)
        try:
            page = self.parse_listing_payload(response, source)
        except UNREADABLE_ANSWER as e:
            # Unparseable listing: the page fails, the crawl goes on with the next page number.
            yield from self._page_failed(page_no, cursor, f"unparseable listing: {e}")
            yield from self.after_failed_page(page_no, cursor)
            return
        self.job_state.failed_streak = 0
        stats = self.crawler.stats
        assert stats is not None
        for reason, count in page.skipped.items():
            stats.inc_value(f"{self.platform}/skipped/{reason}", count)
        listed, waiting = list(page.posts), dict(page.incomplete)
        at_mark = self._apply_mark(page, page_no)
        # A window and the mark compose: whichever the walk reaches first stops it.
        before_since = self._apply_window(page, page_no)
        post_ids = [p.post_id for p in page.posts] + list(page.incomplete)
        self.crawler.signals.send_catch_log(
            signal=mc_signals.page_parsed,
            spider=self,
            page=page_no,
            cursor=cursor,
            next_cursor=page.next_cursor,
            post_ids=post_ids,
            # A page at the mark ends the part of the source this run covers: the checkpoint completes there.
            is_last=page.is_last or at_mark or before_since,
        )
        stats.inc_value(f"{self.platform}/pages")
        logger.debug("%s page %d: %d posts, last=%s", self.job, page_no, len(post_ids), page.is_last)
        if page.is_last:
            self.job_state.exhausted = True
            logger.info("%s: last page reached (page %d)", self.job, page_no)
        elif before_since:
            # The window's start is the end of this job's part of the source.
            self.job_state.exhausted = True
            logger.info("%s: page %d is all older than -a since; stopping there", self.job, page_no)
        elif at_mark:
            self.job_state.stopped_at_mark = True
            assert self.job_state.mark is not None
            logger.info("%s: page %d is all at or below the high-water mark (post %s); stopping there", self.job,
                        page_no, self.job_state.mark.post_id)
        else:
            # First: the next page is fetched while this page's posts go through the pipelines.
            yield from self._next_page(page_no, page.next_cursor)
        for post in page.posts:
            yield self.emit_post(post, source)
        yield from self.below_mark([p for p in listed if all(p is not kept for kept in page.posts)],
                                   {i: raw for i, raw in waiting.items() if i not in page.incomplete}, source)
        for post_id, raw in page.incomplete.items():
            yield self.start_chain(post_id, raw, source)

    def below_mark(self: PlatformSpider, posts: list[Post], waiting: dict[str, Any], source: Source
                   ) -> Iterator[Request]:
        """Requests for the listed posts at or below the mark (and those that would wait for a step), not emitted
        again (spiders/_threads.py: their comment threads)."""
        return iter(())

    def listed_time(self: PlatformSpider, raw: dict[str, Any]) -> str | None:
        """When a post still waiting for a step was published, as the listing says (ISO 8601 UTC, the parsers' one
        format), so the high-water mark can judge it before its chain runs; ``None`` when unknown (then only a
        numeric id can). Parsers that know it put it in the raw entry as ``created_at``."""
        value = raw.get("created_at") if isinstance(raw, dict) else None
        return value if isinstance(value, str) else None

    def _apply_mark(self: PlatformSpider, page: Page, page_no: int) -> bool:
        """Drop the posts of ``page`` at or below the high-water mark; whether the page is all at or below it.

        Pinned posts are out of order: they never make the page count as below the mark. A post still waiting for
        a step is judged by its id and :meth:`listed_time`."""
        mark = self.job_state.mark
        if mark is None:
            return False
        self._refresh_below_mark(page)
        # Posts read again for their counts (-a refresh) are kept, and keep the listing going past the mark.
        again = self.job_state.refresh_ids
        regular = [mark.covers(p.post_id, p.created_at) and p.post_id not in again
                   for p in page.posts if not is_pinned(p)]
        regular += [mark.covers(post_id, self.listed_time(raw)) and post_id not in again
                    for post_id, raw in page.incomplete.items()]
        kept = [p for p in page.posts if p.post_id in again or not mark.covers(p.post_id, p.created_at)]
        kept_incomplete = {i: raw for i, raw in page.incomplete.items()
                           if i in again or not mark.covers(i, self.listed_time(raw))}
        below = len(page.posts) + len(page.incomplete) - len(kept) - len(kept_incomplete)
        if below:
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("incremental/below_mark", below)
            logger.debug("%s page %d: %d posts at or below the mark", self.job, page_no, below)
        page.posts, page.incomplete = kept, kept_incomplete
        return bool(regular) and all(regular)

    def _apply_window(self: PlatformSpider, page: Page, page_no: int) -> bool:
        """Drop the posts of ``page`` outside the date window (their media is then never fetched); whether the
        page is entirely older than ``since`` (pinned posts never count; a post still waiting for a step is judged
        by :meth:`listed_time`; when that is unknown, pipelines/window.py judges the post its chain ends with)."""
        window = self.date_window()
        if window is None:
            return False
        kept, older = cut_page(window, [(p.created_at, is_pinned(p)) for p in page.posts]
                               + [(self.listed_time(raw), False) for raw in page.incomplete.values()])
        posts, incomplete = kept[:len(page.posts)], kept[len(page.posts):]
        outside = kept.count(False)
        if outside:
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("window/outside", outside)
            logger.debug("%s page %d: %d posts outside the date window", self.job, page_no, outside)
        page.posts = [p for p, keep in zip(page.posts, posts) if keep]
        page.incomplete = {i: raw for (i, raw), keep in zip(page.incomplete.items(), incomplete) if keep}
        return older and self.newest_first()

    def _refresh_below_mark(self: PlatformSpider, page: Page) -> None:
        """Flag the posts of ``page`` at or below the mark and published within ``-a refresh`` days: the records
        pipeline upserts their counts and drops them (:data:`~mediacrawler.contracts.REFRESH_ONLY`). A post still
        waiting for its steps is flagged when its chain ends."""
        days = getattr(self.args, "refresh", None)
        mark, again = self.job_state.mark, self.job_state.refresh_ids
        if not days or mark is None or not setting(self.settings, "RECORDS_ENABLED"):
            return
        horizon = iso_utc(datetime.now(UTC) - timedelta(days=days))
        for post in page.posts:
            if post.created_at and post.created_at >= horizon and mark.covers(post.post_id, post.created_at):
                post.extra[REFRESH_ONLY] = True
                again.add(post.post_id)
        for post_id, raw in page.incomplete.items():
            listed = self.listed_time(raw)
            if listed and listed >= horizon and mark.covers(post_id, listed):
                again.add(post_id)
        assert self.crawler.stats is not None
        flagged = sum(p.post_id in again for p in page.posts) + sum(i in again for i in page.incomplete)
        if flagged:
            self.crawler.stats.inc_value("incremental/refresh", flagged)

    def _next_page(self: PlatformSpider, page_no: int, next_cursor: str | None) -> Iterator[Request]:
        limit = setting(self.settings, "PLATFORM_MAX_FAILED_PAGES_IN_A_ROW")
        if self.job_state.failed_streak >= limit:
            # Pages past the real end can look like failures on some platforms; never walk on forever.
            logger.error("%s: %d pages in a row failed; stopping at page %d", self.job,
                         self.job_state.failed_streak, page_no)
            return
        # Distributed: consecutive pages land on different workers, so the count is the page number's distance
        # from the job's first page (the same figure as pages_fetched of a single process).
        fetched = page_no - self.first_page()[0] + 1 if self.distributed else self.job_state.pages_fetched
        if self.args.max_pages is not None and fetched >= self.args.max_pages:
            logger.info("%s: max_pages=%d reached at page %d", self.job, self.args.max_pages, page_no)
            self.job_state.stopped_at_max_pages = True
            return
        if self.pagination == "cursor":
            stop = self._cursor_stop(page_no, next_cursor)
            if stop is not None:
                # Fails here with the reason, not as a request for page 1 again or a silently dropped duplicate.
                yield from self._page_failed(page_no + 1, next_cursor, stop)
                return
            if next_cursor is not None:
                self.job_state.cursors_used.setdefault(next_cursor, page_no + 1)
        yield self.listing_request(page_no + 1, next_cursor)

    def _cursor_stop(self: PlatformSpider, page_no: int, next_cursor: str | None) -> str | None:
        """Why a cursor listing cannot go on after page ``page_no`` (not its last), or ``None`` when it can."""
        if next_cursor is None:
            return f"the listing stopped: page {page_no} is not the last but gave no usable cursor (none, or refused)"
        earlier = self.job_state.cursors_used.get(next_cursor)
        return None if earlier is None else (f"the listing stopped at a repeated cursor: page {page_no} gave "
                                             f"{next_cursor[:40]!r}, the cursor page {earlier} was asked for with")

    def listing_failed(self: PlatformSpider, failure: Failure) -> Iterator[Any]:
        request = failure.request  # type: ignore[attr-defined]
        page_no = request.meta.get("mc_page", 0)
        self.job_state.listing_pending.pop(page_no, None)
        self.job_state.listing_dropped.pop(page_no, None)
        self.job_state.listing_answered.add(page_no)
        self.job_state.pages_fetched += 1
        reason, rerun_helps = self.listing_failure_reason(failure)
        # The reason goes to the log, the checkpoint and the exit message: masked (mediacrawler/scrub.py).
        yield from self._page_failed(page_no, request.meta.get("mc_cursor"), scrub(reason), rerun_helps=rerun_helps)
        if failure.check(PlatformRefused):
            return  # the platform refused the job itself (login required): the spider is closing
        yield from self.after_failed_page(page_no, request.meta.get("mc_cursor"))

    def listing_failure_reason(self: PlatformSpider, failure: Failure) -> tuple[str, bool]:
        """What a failed listing request says in the log and the final line: the HTTP status and URL (no
        credential: those travel in headers, and a URL's userinfo is cut), and for a 404 the root setting to
        check, since a wrong root is the usual cause; the flag says whether running the same command again can
        help (not for that 404)."""
        response = getattr(failure.value, "response", None)
        if not failure.check(HttpError) or response is None:
            return failure.getErrorMessage(), True
        url = strip_userinfo(response.url)
        reason = f"HTTP {response.status} from {url}"
        if response.status != 404:
            return reason, True
        roots = {name: str(self.settings.get(name) or "").rstrip("/") for name in self.root_settings}
        root = next((name for name, value in roots.items() if value and url.startswith(value + "/")), None)
        where = f"{root} (the platform's root, now {self.settings.get(root)})" if root else "the platform's root"
        return f"{reason}; check {where} and the target's id", False

    def after_failed_page(self: PlatformSpider, page_no: int, cursor: str | None) -> Iterator[Request]:
        """What follows a listing page that failed for good: by default the next page number (the checkpoint
        keeps the failed one for the next run).

        A ``cursor`` listing cannot skip a page (only that page gives the next cursor): the run ends unfinished
        at that page, and the next run resumes there from the stored cursor.
        """
        if self.pagination == "cursor":
            logger.error("%s: page %d failed for good; a cursor listing cannot skip it, so the run stops here "
                         "(the next run resumes at page %d)", self.job, page_no, page_no)
            return iter(())
        return self._next_page(page_no, None)

    def request_dropped(self: PlatformSpider, request: Request, spider: Spider, **kwargs: Any) -> None:
        """``request_dropped``: the scheduler refused a request (the duplicate filter). A listing page redirected
        to a URL already fetched is lost (its reason is kept for :meth:`spider_idle`)."""
        page_no = request.meta.get("mc_page")
        state = self.job_state
        if spider is not self or request.callback != self.parse_listing or page_no not in state.listing_pending:
            return
        if request.meta.get("redirect_urls"):  # redirected to a URL already fetched (a 302 to itself)
            state.listing_dropped[page_no] = f"request dropped by the scheduler (duplicate of {request.url})"
        else:
            # A same request may answer for it: JOBDIR's restored queue, or an earlier run of that JOBDIR when this
            # one goes on past the page. Else by spider_idle it is lost (a repeated URL, a forced stop's JOBDIR).
            state.listing_dropped[page_no] = (
                f"{_SEEN_DUPLICATE} ({request.url}) and never answered: a repeated URL, or a JOBDIR kept from a "
                f"forced stop (run again without that JOBDIR)")

    def spider_idle(self: PlatformSpider, spider: Spider) -> None:
        """``spider_idle``: nothing is in flight, so a listing page still pending is lost: each is failed (the
        checkpoint keeps it, the exit status says so) and the crawl goes on past it as after any failed page."""
        state = self.job_state
        if spider is not self or state.close_reason is not None:
            return
        if state.item_pending is not None:
            # A requested item's request that reached neither callback nor errback (a middleware dropped it).
            item, state.item_pending = state.item_pending, None
            self._item_failed(item, "the request was dropped before it reached the spider")
            follow_items = list(self._next_item(item))
            assert self.crawler.engine is not None
            for request in follow_items:
                self.crawler.engine.crawl(request)
            if follow_items:
                raise DontCloseSpider
            return
        if not state.listing_pending:
            return
        past = max(state.listing_answered, default=0)
        lost = [(page_no, cursor) for page_no, cursor in sorted(state.listing_pending.items()) if not (
            page_no < past and state.listing_dropped.get(page_no, "").startswith(_SEEN_DUPLICATE))]
        state.listing_pending.clear()
        follow: list[Request] = []
        for page_no, cursor in lost:
            state.listing_answered.add(page_no)
            reason = state.listing_dropped.pop(page_no, "the request was dropped before it reached the spider")
            state.pages_fetched += 1
            self._page_failed(page_no, cursor, reason)
            follow.extend(self.after_failed_page(page_no, cursor))
        assert self.crawler.engine is not None
        for request in follow:
            self.crawler.engine.crawl(request)
        if follow:
            raise DontCloseSpider

    def _page_failed(self: PlatformSpider, page_no: int, cursor: str | None, reason: str, *,
                     rerun_helps: bool = True) -> Iterator[Any]:
        state = self.job_state
        state.failed_reasons.setdefault(page_no, reason)
        state.pages_failed += 1
        state.failed_streak += 1
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(f"{self.platform}/pages_failed")
        logger.error("%s: page %d failed for good: %s", self.job, page_no, reason)
        state.rerun_helps = bool(state.rerun_helps) or rerun_helps
        self.crawler.signals.send_catch_log(
            signal=mc_signals.page_failed, spider=self, page=page_no, cursor=cursor, reason=reason
        )
        return iter(())
