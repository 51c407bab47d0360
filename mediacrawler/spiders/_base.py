"""The base of every platform spider: typed arguments, the first page, pagination, chains of steps, page signals,
incremental marks, retried posts and fresh media URLs (docs/architecture.md, "Platform contract").
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from itemadapter import ItemAdapter, is_item
from pydantic import ValidationError
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.python.failure import Failure

from mediacrawler import signals as mc_signals
from mediacrawler.config import setting
from mediacrawler.contracts import REFRESH_ONLY, AlreadyStored, PlatformRefused, asset_key_of, walk_assets
from mediacrawler.distributed.scheduler import worker_id
from mediacrawler.distributed.worker import Worker
from mediacrawler.items import Post, Source
from mediacrawler.jobstate import JobState, SourceKind
from mediacrawler.media.urls import strip_userinfo
from mediacrawler.parsers._common import Page, PlatformError, iso_utc, utc_now_iso
from mediacrawler.pipelines.dedupe import ClaimedElsewhere, DuplicatePost
from mediacrawler.scrub import scrub
from mediacrawler.spiders._args import (WORKER_KWARG, SpiderParams, format_validation_error, is_distributed,
                                       is_worker_mode, target_names)
from mediacrawler.spiders._window import DateWindow, cut_page, window_suffix, zone_named
from mediacrawler.spiders._chain import Chain, Step

logger = logging.getLogger(__name__)

#: Track suffixes of the keys the video downloader passes to refresh_media_url.
_TRACKS = frozenset({"video", "audio"})


def _same_file(post: Post, *, index_key: str, url: str) -> str | None:
    """The URL in ``post`` (or its original) of asset ``index_key`` with the same path as ``url``."""
    path = urlsplit(url).path
    for platform, asset, _ in walk_assets(post):
        if asset_key_of(platform, asset) == index_key:
            for candidate in (asset["url"], *asset["alternates"]):
                if urlsplit(candidate).path == path:
                    return candidate
    return None


#: What a parser may raise for an answer it cannot read: the page or step fails with the reason, the crawl goes on.
UNREADABLE_ANSWER = (PlatformError, ValueError, TypeError, KeyError, OverflowError, RecursionError)


_SEEN_DUPLICATE = "request dropped by the scheduler as a duplicate of one already seen"
#: Close reasons that mean the platform refused the job; the crawl command exits non-zero on them.
FATAL_CLOSE_REASONS = frozenset({"login_required", "platform_error"})


#: Scheduler priority of listing requests (chain steps and media keep Scrapy's default 0).
LISTING_PRIORITY = 1


def is_pinned(post: Post) -> bool:
    """A post the platform pinned to the top of a listing (``extra["pinned"]``, set by the parsers): it is out of
    order, so it never stops pagination nor moves a high-water mark."""
    return bool(post.extra.get("pinned")) if isinstance(post.extra, dict) else False


class PlatformSpider(Spider):
    """Base class of the platform spiders. Subclasses set ``name``, ``platform``, ``params_model`` and implement
    :meth:`job_key`, :meth:`listing_url` and :meth:`parse_listing_payload`."""

    platform: ClassVar[str]
    params_model: ClassVar[type[SpiderParams]]
    #: ``page``: listing pages are numbered (the URL of page N is known without page N-1). ``cursor``: each page
    #: gives the cursor of the next one, so a page that failed for good ends the run there (never skipped).
    pagination: Literal["page", "cursor"] = "page"
    #: The environment variable (or setting) holding the user's credential for the API, e.g. ``WEIBO_COOKIE``;
    #: ``None``: ``<PLATFORM>_COOKIE``. Sent as :meth:`credential_headers` says, at download time only.
    credential_env: ClassVar[str | None] = None
    #: The settings naming this platform's roots (``WEIBO_BASE_URL``…): a listing answering HTTP 404 names the one
    #: its URL starts with, since a wrong root is the usual cause and running again would not help.
    root_settings: ClassVar[tuple[str, ...]] = ()
    #: The zone ``-a since``/``-a until`` are read in when TIME_ZONE is empty (spiders/_window.py).
    time_zone: ClassVar[str] = "Asia/Shanghai"
    args: Any  # set by Args (spiders/_args.py) before our __init__ runs; for a worker, by take_job
    #: How many media assets' posts are remembered for :meth:`refresh_media_url` (least recent forgotten first;
    #: an asset is downloaded shortly after its post is emitted).
    media_posts_remembered: ClassVar[int] = 20_000
    #: True when requests go through the shared Redis queue (set in :meth:`from_crawler`): the queue, not this
    #: process, answers for every request, so pending listing pages are not tracked here.
    distributed: bool = False
    #: Worker mode: the id of this worker, which takes its jobs from Redis (distributed/worker.py); None: a crawl
    #: of the job its arguments name.
    worker_id: str | None = None
    #: Which job's shared queue this process serves (the distributed scheduler reads it); None: no job yet.
    job_queue: str | None
    #: The methods a request in the shared queue may name as callback or errback (checked when it is decoded:
    #: someone who can write to Redis must not make a worker call any other method; docs/operations.md).
    queue_callbacks: ClassVar[frozenset[str]] = frozenset({
        "parse_listing", "listing_failed", "parse_item", "item_failed", "parse_retry_post", "retry_post_failed",
        "parse_chain_step", "chain_step_failed",
    })
    #: The class of this platform's chain state (spiders/_chain.py): what its steps keep, as typed fields.
    chain_type: ClassVar[type[Chain]] = Chain

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.worker_id = kwargs.pop(WORKER_KWARG, None)
        for key in self.params_model.model_fields:
            kwargs.pop(key, None)
        super().__init__(*args, **kwargs)
        #: media asset index key → id of the post it belongs to (see :meth:`remember_media`).
        self._media_posts: OrderedDict[str, str] = OrderedDict()
        if self.worker_id is None:
            self.setup_job()
        else:
            # No job until the worker takes one (take_job): its own name keys its output file until then.
            self.job_state = JobState(job=f"{self.name}-worker-{self.worker_id}")
            #: Which job's shared queue this process serves (the distributed scheduler reads it); None: none yet.
            self.job_queue: str | None = None

    def setup_job(self) -> None:
        """Build this job's state from ``self.args``: run by ``__init__`` for a crawl of one job, and for every job
        a worker takes (:meth:`take_job`), so both start a job the same way. Platforms whose state derives from
        their arguments (note references, targets…) extend it: their own state first, then ``super()``."""
        #: The state of the job walked (mediacrawler/jobstate.py), made afresh for each job.
        self.job_state = self.new_state(self.windowed_job_key())
        self.job_queue = self.job

    def new_state(self, job: str) -> JobState:
        """A fresh :class:`JobState` for job ``job`` (``self.args`` already set)."""
        kind = self.source_kind()
        return JobState(job=job, kind=kind, start=getattr(self.args, "start", None),
                        items=list(self.requested_items()) if kind == "items" else [])

    @property
    def job(self) -> str:
        """The key of the job this spider walks (:attr:`JobState.job`)."""
        return self.job_state.job

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop(WORKER_KWARG, None)  # never from the user
        if is_worker_mode(cls, crawler.settings, kwargs):
            # No target: a worker, built without a job; each job brings its own arguments (take_job).
            kwargs[WORKER_KWARG] = worker_id()
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.distributed = is_distributed(crawler.settings)
        crawler.signals.connect(spider.request_dropped, signal=signals.request_dropped)
        crawler.signals.connect(spider.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(spider.item_dropped, signal=signals.item_dropped)
        return spider

    # --- What a platform provides ----------------------------------------------------------------------------

    def job_key(self) -> str:
        """A stable, file-name-safe key for this job, e.g. ``weibo-uid-7365120894`` (checkpoints, output files)."""
        raise NotImplementedError

    def windowed_job_key(self) -> str:
        """:meth:`job_key` with the date window, if any (a windowed job has its own checkpoint and mark)."""
        return self.job_key() + window_suffix(self.args.since, self.args.until)

    def date_window(self) -> DateWindow | None:
        """The window of ``-a since``/``-a until`` in UTC (``None``: none), read in TIME_ZONE or
        :attr:`time_zone`."""
        key = (self.args.since, self.args.until)
        if getattr(self, "_window_of", (None,))[0] != key:
            zone = zone_named(str(self.settings.get("TIME_ZONE") or "").strip() or self.time_zone)
            self._window_of = (key, DateWindow.of(*key, zone))
        return self._window_of[1]

    def source_kind(self) -> SourceKind:
        """What this job walks (docs/architecture.md, "Sources"): ``listing`` (pages: :meth:`listing_url`,
        :meth:`parse_listing_payload`) or ``items`` (the ones the user gave: :meth:`requested_items`,
        :meth:`item_url`, :meth:`parse_item_payload`; in the order given, no page numbers, no high-water mark)."""
        return "listing"

    def requested_items(self) -> list[str]:
        """The keys of the items an ``items`` job requested, in the order given (ids, or ``short:<code>``…)."""
        return []

    def item_url(self, item: str) -> str:
        """The URL that fetches requested item ``item``."""
        raise NotImplementedError

    def parse_item_payload(self, response: Response, source: Source, item: str) -> Page:
        """Parse the answer for requested item ``item`` into a :class:`Page` of its posts (raises PlatformError or
        ValueError); ``Page.is_last`` is not read: the list ends with its last item."""
        raise NotImplementedError

    def newest_first(self) -> bool:
        """Whether the listing is newest first, so that a page all older than ``-a since`` ends the walk (the items
        of an ``items`` job are in the order given, a search by relevance in none: neither stops there)."""
        return self.source_kind() == "listing"

    def target_args(self) -> dict[str, str]:
        """The arguments that name this job's target (e.g. ``{"uid": "7365120894"}``), as ``-a`` would give them."""
        return {name: str(value) for name in sorted(target_names(type(self)))
                if (value := getattr(self.args, name, None)) is not None}

    def listing_url(self, page: int, cursor: str | None) -> str:
        """The URL of listing page ``page`` (``cursor`` is what the previous page gave, when known)."""
        raise NotImplementedError

    def parse_listing_payload(self, response: Response, source: Source) -> Page:
        """Parse one listing response into a :class:`Page` (raises PlatformError or ValueError)."""
        raise NotImplementedError

    def next_step(self, chain: Any) -> Step | None:
        """The next request a post listed in ``Page.incomplete`` needs, or ``None`` when it is complete.

        ``chain`` is a :attr:`chain_type`: ``post_id``, ``raw`` (what the listing gave), ``step`` (the name of the
        step last sent) and the platform's own fields (what :meth:`parse_step` kept so far)."""
        return None

    def parse_step(self, response: Response, chain: Any) -> None:
        """Keep what the answer to step ``chain.step`` says in the chain's fields (plain JSON values); raise
        PlatformError or ValueError when it says nothing usable (the chain then ends, marked)."""

    def post_from_chain(self, chain: Any, source: Source, *, missing: str | None) -> Post:
        """The post of a finished chain. ``missing`` says which step failed for good and why (``None``: none did);
        the post is emitted all the same, with whatever the platform has it record about what is missing."""
        raise NotImplementedError

    def classify_response(self, response: Response) -> str:
        """What an API answer means, for the platform errors middleware: ``ok``, ``end``, ``rate_limited``,
        ``login_required``, ``not_found``, ``error``, or ``invalid`` (not the document an API sends: retried).

        By default: non-200 answers are left to HTTP handling (``ok``), a 200 body is JSON read by the platform's
        ``classify_envelope(payload)``. Platforms whose errors come with other statuses, or whose pages are HTML,
        override this."""
        classify = getattr(self, "classify_envelope", None)
        if classify is None or response.status != 200:
            return "ok"
        try:
            payload = json.loads(response.body)
        except ValueError:
            return "invalid"
        return str(classify(payload))

    def refusal_message(self, reason: str) -> str:
        """The one line that says why the platform refused the job and what to do (never the credential)."""
        env = self.credential_env or f"{self.platform.upper()}_COOKIE"
        if reason != "login_required":
            return f"{reason}: check {env}"
        return f"login required: {env} {self.credential_state()}"

    def credential_state(self) -> str:
        """How the user's credential stands, in the words of a refusal: not given, or given and refused."""
        env = self.credential_env or f"{self.platform.upper()}_COOKIE"
        if os.environ.get(env) or self.settings.get(env):
            return f"was refused (invalid, expired or lacking a permission): set a fresh one in {env}"
        return f"is not set: set the environment variable {env}"

    def credential_headers(self, secret: str) -> dict[str, str]:
        """The headers that carry the user's credential (``Cookie`` by default; a Graph API token is
        ``Authorization: Bearer``). Added at download time, removed before the request is stored or retried."""
        return {"Cookie": secret}

    def listing_headers(self) -> dict[str, str]:
        """Extra headers for listing requests (never credentials: those are added at download time)."""
        return {}

    def post_request(self, post_id: str) -> Request | None:
        """A request that fetches post ``post_id`` afresh (for :meth:`refresh_media_url`); ``None``: the platform
        cannot. Mark it ``meta["mc_api"]`` (session cookie, rate limits) and ``meta["mc_optional"]`` (a login
        wall on it fails this asset instead of closing the spider)."""
        return None

    def parse_post_payload(self, response: Response, source: Source) -> Post | None:
        """Parse the answer to :meth:`post_request` (raises PlatformError or ValueError; ``None``: no such
        post)."""
        return None

    # --- Flow ------------------------------------------------------------------------------------------------

    def first_page(self) -> tuple[int, str | None]:
        """``-a start`` wins; else the checkpoint's page; else 1 (:meth:`JobState.first_page`)."""
        return self.job_state.first_page()

    async def start(self) -> AsyncIterator[Any]:
        if self.worker_id:
            async for request in Worker(self).requests():
                yield request
            return
        for request in self.retry_requests():
            yield request
        if self.args.retry_only:
            logger.info("%s: retry only: %d posts to read again, no listing", self.job,
                        len(self.job_state.retry_posts))
            return
        for request in self.first_requests():
            yield request

    def first_requests(self) -> Iterator[Request]:
        """The first request of the job's source: its first listing page, or its first requested item not done."""
        if self.job_state.kind == "items":
            yield from self._next_item(None)
            return
        page, cursor = self.first_page()
        if self.args.start is not None:
            logger.info("%s: starting at page %d (-a start)", self.job, page)
        elif self.job_state.resume is None:
            logger.info("%s: starting at page 1", self.job)
        yield self.listing_request(page, cursor)

    def listing_request(self, page: int, cursor: str | None) -> Request:
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

    def source_for(self, response_or_request: Response | Request) -> Source:
        meta = response_or_request.meta
        return Source(spider=self.name, job=self.job, page=meta.get("mc_page"), cursor=meta.get("mc_cursor"))

    def parse_listing(self, response: Response) -> Iterator[Any]:
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
            yield self.remember_media(post)
        for post_id, raw in page.incomplete.items():
            yield self.start_chain(post_id, raw, source)

    def listed_time(self, raw: dict[str, Any]) -> str | None:
        """When a post still waiting for a step was published, as the listing says (ISO 8601 UTC, the parsers' one
        format), so the high-water mark can judge it before its chain runs; ``None`` when unknown (then only a
        numeric id can). Parsers that know it put it in the raw entry as ``created_at``."""
        value = raw.get("created_at") if isinstance(raw, dict) else None
        return value if isinstance(value, str) else None

    def _apply_mark(self, page: Page, page_no: int) -> bool:
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

    def _apply_window(self, page: Page, page_no: int) -> bool:
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

    # --- Counts kept current: -a refresh (docs/records.md, "Counts kept current") ------------------------------

    def _refresh_below_mark(self, page: Page) -> None:
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

    # --- Requested items (source kind ``items``; docs/architecture.md, "Sources") -------------------------------

    def item_request(self, item: str) -> Request:
        """The request for requested item ``item``. Never filtered as a duplicate: two entries may name one URL
        (a short link and its target), and a requested item must be answered or failed, never dropped."""
        state = self.job_state
        state.items_requested.add(item)
        if not self.distributed:  # distributed: another worker may answer it (the queue answers for it)
            state.item_pending = item
        return Request(self.item_url(item), callback=self.parse_item, errback=self.item_failed,
                       headers=self.listing_headers() or None, dont_filter=True,
                       meta={"mc_api": True, "mc_item": item}, priority=LISTING_PRIORITY)

    def _next_item(self, after: str | None) -> Iterator[Request]:
        """The request for the first item after ``after`` (``None``: from the start) neither done by an earlier
        run nor requested in this one; none left: the list is walked to its end (``exhausted``)."""
        state = self.job_state
        index = state.items.index(after) + 1 if after in state.items else 0
        rest = [i for i in state.items[index:] if i not in state.items_done and i not in state.items_requested]
        if after is None and state.items_done:
            logger.info("%s: %d of %d items done by an earlier run (checkpoint); %d left", self.job,
                        len(state.items_done & set(state.items)), len(state.items), len(rest))
        if not rest:
            state.exhausted = True
            return
        yield self.item_request(rest[0])

    def parse_item(self, response: Response) -> Iterator[Any]:
        item: str = response.meta["mc_item"]
        state = self.job_state
        if state.item_pending == item:
            state.item_pending = None
        source = self.source_for(response)
        try:
            page = self.parse_item_payload(response, source, item)
        except UNREADABLE_ANSWER as e:
            self._item_failed(item, f"unparseable answer: {e}")
            yield from self._next_item(item)
            return
        stats = self.crawler.stats
        assert stats is not None
        for reason, count in page.skipped.items():
            stats.inc_value(f"{self.platform}/skipped/{reason}", count)
        self.crawler.signals.send_catch_log(signal=mc_signals.requested_item_parsed, spider=self, item=item,
                                            post_ids=[p.post_id for p in page.posts] + list(page.incomplete))
        stats.inc_value(f"{self.platform}/items")
        # First: the next item is fetched while this one's posts go through the pipelines.
        yield from self._next_item(item)
        for post in page.posts:
            yield self.remember_media(post)
        for post_id, raw in page.incomplete.items():
            yield self.start_chain(post_id, raw, source)

    def item_failed(self, failure: Failure) -> Iterator[Any]:
        request = failure.request  # type: ignore[attr-defined]
        item: str = request.meta["mc_item"]
        if self.job_state.item_pending == item:
            self.job_state.item_pending = None
        reason, rerun_helps = self.listing_failure_reason(failure)
        self._item_failed(item, scrub(reason), rerun_helps=rerun_helps)
        if failure.check(PlatformRefused):
            return iter(())  # the platform refused the job itself (login required): the spider is closing
        return self._next_item(item)

    def _item_failed(self, item: str, reason: str, *, rerun_helps: bool = True) -> None:
        state = self.job_state
        state.items_failed.setdefault(item, reason)
        state.rerun_helps = bool(state.rerun_helps) or rerun_helps
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(f"{self.platform}/items_failed")
        logger.error("%s: item %s failed for good: %s", self.job, item, reason)
        self.crawler.signals.send_catch_log(signal=mc_signals.requested_item_failed, spider=self, item=item,
                                            reason=reason)

    # --- Media left behind by earlier runs (docs/operations.md, "Incremental sync and retries") --------------

    def retry_requests(self) -> Iterator[Request]:
        """A fresh read of every post in :attr:`JobState.retry_posts` (as :meth:`refresh_media_url` reads one)."""
        for post_id in self.job_state.retry_posts:
            request = self.post_request(post_id)
            if request is None:
                self.job_state.retry_unreachable[post_id] = f"{self.name} cannot read one post again"
                continue
            yield request.replace(callback=self.parse_retry_post, errback=self.retry_post_failed,
                                  meta={**request.meta, "mc_retry_post": post_id})

    def parse_retry_post(self, response: Response) -> Iterator[Post]:
        post_id: str = response.meta["mc_retry_post"]
        try:
            post = self.parse_post_payload(response, self.source_for(response))
        except UNREADABLE_ANSWER as e:
            self.job_state.retry_unreachable[post_id] = f"unreadable: {e}"
            return
        if post is None:
            self.job_state.retry_unreachable[post_id] = "the post is gone"
            return
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("retry/posts_read")
        yield self.remember_media(post)

    def retry_post_failed(self, failure: Failure) -> Iterator[Any]:
        request = failure.request  # type: ignore[attr-defined]
        self.job_state.retry_unreachable[request.meta["mc_retry_post"]] = scrub(failure.getErrorMessage())
        return iter(())

    # --- Posts that need more than the listing (chains of steps) ---------------------------------------------

    def start_chain(self, post_id: str, raw: dict[str, Any], source: Source) -> Request | Post:
        """The first request of the chain that completes ``post_id``, or the post itself when none is needed."""
        chain = self.chain_type(post_id=post_id, raw=raw, refresh=post_id in self.job_state.refresh_ids)
        return self._advance_chain(chain, source)

    def _advance_chain(self, chain: Chain, source: Source, *, missing: str | None = None) -> Request | Post:
        step = None if missing is not None else self.next_step(chain)
        if step is None:
            if missing is not None:
                assert self.crawler.stats is not None
                self.crawler.stats.inc_value(f"{self.platform}/incomplete_posts")
                logger.warning("%s: post %s is emitted without %s", self.job, chain.post_id, missing)
            post = self.post_from_chain(chain, source, missing=missing)
            if chain.refresh:
                post.extra[REFRESH_ONLY] = True
            return self.remember_media(post)
        chain.step = step.name
        # dont_filter: a step's URL may repeat (the same detail for two posts), and a request the duplicate filter
        # dropped would reach neither callback nor errback, leaving the post (and its page) unfinished for good.
        return Request(step.url, callback=self.parse_chain_step, errback=self.chain_step_failed,
                       headers=step.headers or None, dont_filter=True,
                       meta={"mc_api": True, "mc_page": source.page, "mc_cursor": source.cursor,
                             "mc_chain": chain.to_json()})

    def parse_chain_step(self, response: Response) -> Iterator[Request | Post]:
        chain = self.chain_type.from_json(response.meta["mc_chain"])
        source = self.source_for(response)
        try:
            self.parse_step(response, chain)
        except UNREADABLE_ANSWER as e:
            yield self._advance_chain(chain, source, missing=f"{chain.step}: {e}")
            return
        yield self._advance_chain(chain, source)

    def chain_step_failed(self, failure: Failure) -> Iterator[Request | Post]:
        request = failure.request  # type: ignore[attr-defined]
        chain = self.chain_type.from_json(request.meta["mc_chain"])
        # Even when the platform refused the job (the spider is closing), the post the page announced is emitted.
        yield self._advance_chain(chain, self.source_for(request),
                                  missing=f"{chain.step}: {scrub(failure.getErrorMessage())}")

    def _next_page(self, page_no: int, next_cursor: str | None) -> Iterator[Request]:
        limit = self.settings.getint("PLATFORM_MAX_FAILED_PAGES_IN_A_ROW")
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

    def _cursor_stop(self, page_no: int, next_cursor: str | None) -> str | None:
        """Why a cursor listing cannot go on after page ``page_no`` (not its last), or ``None`` when it can."""
        if next_cursor is None:
            return f"the listing stopped: page {page_no} is not the last but gave no usable cursor (none, or refused)"
        earlier = self.job_state.cursors_used.get(next_cursor)
        return None if earlier is None else (f"the listing stopped at a repeated cursor: page {page_no} gave "
                                             f"{next_cursor[:40]!r}, the cursor page {earlier} was asked for with")

    def listing_failed(self, failure: Failure) -> Iterator[Any]:
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

    def listing_failure_reason(self, failure: Failure) -> tuple[str, bool]:
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

    def after_failed_page(self, page_no: int, cursor: str | None) -> Iterator[Request]:
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

    def item_dropped(self, item: Any, spider: Spider, exception: BaseException, **kwargs: Any) -> None:
        """``item_dropped``: a requested item of a list is never dropped silently; one INFO line names it."""
        if spider is not self or self.job_state.kind != "items" or not is_item(item):
            return
        adapter = ItemAdapter(item)
        source = adapter.get("source")
        if not is_item(source) or ItemAdapter(source).get("job") != self.job:
            return
        if isinstance(exception, (AlreadyStored, DuplicatePost)):
            logger.info("%s: %s %s is already stored (emitted before); not emitted again", self.job,
                        self.platform, adapter.get("post_id"))
        elif isinstance(exception, ClaimedElsewhere):
            logger.info("%s: %s %s is being emitted by another job; not emitted by this one", self.job,
                        self.platform, adapter.get("post_id"))

    def request_dropped(self, request: Request, spider: Spider, **kwargs: Any) -> None:
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

    def spider_idle(self, spider: Spider) -> None:
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

    def _page_failed(self, page_no: int, cursor: str | None, reason: str, *, rerun_helps: bool = True
                     ) -> Iterator[Any]:
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

    # --- Worker mode (distributed/worker.py; docs/operations.md, "Many workers on one Redis") -----------------

    def take_job(self, args: Mapping[str, str]) -> None:
        """Serve a job a worker took: ``args`` validated with the argument model, as a crawl of one job validates
        its ``-a`` (``ValueError``: the one-line refusal), then the job's state built by :meth:`setup_job`."""
        try:
            self.args = self.params_model(**args)
        except ValidationError as e:
            raise ValueError(format_validation_error(self.name, e)) from None
        self.setup_job()

    def seed_requests(self) -> Iterator[Request]:
        """A job's first requests: its posts with media pending retry, then its first listing page or item."""
        yield from self.retry_requests()
        yield from self.first_requests()

    # --- Expired media URLs ----------------------------------------------------------------------------------

    def remember_media(self, post: Post) -> Post:
        """Note the post each media asset of ``post`` (and of the post it reposts) belongs to; returns ``post``.

        Platform spiders call it for every post they emit that neither :meth:`parse_listing` nor a chain did."""
        for platform, asset, post_id in walk_assets(post):
            key = asset_key_of(platform, asset)
            self._media_posts[key] = post_id
            self._media_posts.move_to_end(key)
        while len(self._media_posts) > self.media_posts_remembered:
            self._media_posts.popitem(last=False)
        return post

    def document_bodies(self, *, kind: str, body: bytes) -> tuple[bytes, dict[str, bytes]]:
        """The body to store for a ``subtitle``/``danmaku`` asset as downloaded, and the objects derived from it by
        extension (a subtitle's SRT); ``ValueError`` refuses it. Called by the media pipeline (docs/media.md,
        "Documents"); platforms with document assets override it."""
        return body, {}

    async def refresh_media_url(self, *, key: str, url: str) -> str | None:
        """A fresh URL for media asset ``key`` whose ``url`` stopped working (403/410, an expired signature), or
        ``None``.

        Called by the large-file downloader (:mod:`mediacrawler.media.segments`), which keeps the segments it
        already has. ``key`` is the asset's index key, possibly with ``#<track>``. The post is read again with
        :meth:`post_request` (an API request: the session cookie, rate limits and back-off apply), and the URL
        returned is the one of the same file (same path) in the fresh post: never another rendition.
        """
        # The video downloader keys each track of an asset as "<index key>#<track>".
        base, _, track = key.rpartition("#")
        index_key = base if base and track in _TRACKS else key
        stats = self.crawler.stats
        assert stats is not None
        post_id = self._media_posts.get(index_key)
        if post_id is None:
            logger.warning("%s: no post known for %s (not from this run, or forgotten); it cannot be re-resolved",
                           self.job, index_key)
            stats.inc_value(f"{self.platform}/media_refresh/unknown")
            return None
        request = self.post_request(post_id)
        if request is None or self.crawler.engine is None:
            return None
        stats.inc_value(f"{self.platform}/media_refresh/requests")
        try:
            response = await self.crawler.engine.download_async(request)
            if response.status != 200:
                raise PlatformError("error", f"HTTP {response.status}")
            fresh = self.parse_post_payload(response, self.source_for(request))
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot re-resolve": the asset fails alone
            logger.warning("%s: could not read post %s again for a fresh URL of %s: %s", self.job, post_id,
                           index_key, exc)
            stats.inc_value(f"{self.platform}/media_refresh/failed")
            return None
        if fresh is None:
            logger.warning("%s: post %s is gone; %s cannot be re-resolved", self.job, post_id, index_key)
            stats.inc_value(f"{self.platform}/media_refresh/failed")
            return None
        self.remember_media(fresh)
        found = _same_file(fresh, index_key=index_key, url=url)
        stats.inc_value(f"{self.platform}/media_refresh/{'resolved' if found else 'failed'}")
        if found is None:
            logger.warning("%s: post %s no longer has the file of %s", self.job, post_id, index_key)
        return found

    def closed(self, reason: str) -> None:
        self.job_state.close_reason = reason

    def now_iso(self) -> str:
        return utc_now_iso()
