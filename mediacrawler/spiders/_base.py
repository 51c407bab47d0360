"""The base of every platform spider: typed arguments, the first page, pagination, chains of steps, page signals,
incremental marks, retried posts and fresh media URLs (docs/architecture.md, "Platform contract").
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, ClassVar, Literal
from weakref import WeakKeyDictionary

from itemadapter import ItemAdapter, is_item
from pydantic import ValidationError
from scrapy import Request, Spider, signals
from scrapy.http import Response

from mediacrawler import signals as mc_signals
from mediacrawler.config import setting
from mediacrawler.contracts import AlreadyStored
from mediacrawler.items import Post, Source
from mediacrawler.jobstate import JobState, SourceKind
from mediacrawler.parsers._common import Page, utc_now_iso
from mediacrawler.pipelines.dedupe import ClaimedElsewhere, DuplicatePost
from mediacrawler.spiders._args import (WORKER_KWARG, SpiderParams, format_validation_error, is_distributed,
                                       is_worker_mode, target_names)
from mediacrawler.spiders._chain import Chain, ChainWalk, Step
from mediacrawler.spiders._items import ItemsWalk
from mediacrawler.spiders._listing import ListingWalk
from mediacrawler.spiders._reread import PostRereads
from mediacrawler.spiders._window import DateWindow, window_suffix, zone_named

logger = logging.getLogger(__name__)

#: Close reasons that mean the platform refused the job; the crawl command exits non-zero on them.
FATAL_CLOSE_REASONS = frozenset({"login_required", "platform_error"})

#: Each API answer's body decoded once: the platform errors middleware (classify_response) and the callback both
#: read it (a 40 KB listing page takes 0.2-0.4 ms to decode). Gone with the response.
_PAYLOADS: WeakKeyDictionary[Response, Any] = WeakKeyDictionary()


class PlatformSpider(ListingWalk, ItemsWalk, ChainWalk, PostRereads, Spider):
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
    #: Whether :meth:`remember_media` keeps anything (MEDIA_ENABLED, read in :meth:`from_crawler`).
    remembers_media: bool = True
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
    #: The argument that lists the items a job requests, comma-separated (``"bvid"``, ``"post"``): given, the job's
    #: source is ``items`` (:meth:`source_kind`, :meth:`requested_items`); ``None``: listings only.
    items_arg: ClassVar[str | None] = None
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
            # No target: a worker, built without a job; each job brings its own arguments (take_job). The
            # distributed package (redis-py) is imported by workers only.
            from mediacrawler.distributed.scheduler import worker_id

            kwargs[WORKER_KWARG] = worker_id()
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.distributed = is_distributed(crawler.settings)
        # Media off: nothing downloads, so nothing asks for a fresh media URL (remember_media keeps no posts).
        spider.remembers_media = bool(setting(crawler.settings, "MEDIA_ENABLED"))
        crawler.signals.connect(spider.request_dropped, signal=signals.request_dropped)
        crawler.signals.connect(spider.spider_idle, signal=signals.spider_idle)
        mc_signals.forward_item_signals(crawler)
        crawler.signals.connect(spider.item_dropped, signal=mc_signals.item_dropped_sync)
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
            zone = zone_named(str(setting(self.settings, "TIME_ZONE")).strip() or self.time_zone)
            self._window_of = (key, DateWindow.of(*key, zone))
        return self._window_of[1]

    def source_kind(self) -> SourceKind:
        """What this job walks (docs/architecture.md, "Sources"): ``listing`` (pages: :meth:`listing_url`,
        :meth:`parse_listing_payload`) or ``items`` (the ones the user gave: :meth:`requested_items`,
        :meth:`item_url`, :meth:`parse_item_payload`; in the order given, no page numbers, no high-water mark).
        By default ``items`` when the argument :attr:`items_arg` names was given."""
        return "items" if self.items_arg and getattr(self.args, self.items_arg, None) is not None else "listing"

    def requested_items(self) -> list[str]:
        """The keys of the items an ``items`` job requested, in the order given (ids, or ``short:<code>``…); by
        default the comma-separated values of :attr:`items_arg`, as validated."""
        value = getattr(self.args, self.items_arg, None) if self.items_arg else None
        return str(value).split(",") if value else []

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
            payload = self.payload(response)
        except ValueError:
            return "invalid"
        return str(classify(payload))

    def payload(self, response: Response) -> Any:
        """``json.loads(response.body)``, decoded once per response (classify_response and the callback share
        it; the callback may change it, it is the last to read it). ValueError when the body is no JSON."""
        try:
            return _PAYLOADS[response]
        except KeyError:
            payload = _PAYLOADS[response] = json.loads(response.body)
            return payload

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

    async def start(self) -> AsyncIterator[Any]:
        if self.worker_id:
            from mediacrawler.distributed.worker import Worker

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

    def source_for(self, response_or_request: Response | Request) -> Source:
        meta = response_or_request.meta
        return Source(spider=self.name, job=self.job, page=meta.get("mc_page"), cursor=meta.get("mc_cursor"))

    # --- Counts kept current: -a refresh (docs/records.md, "Counts kept current") ------------------------------

    # --- Requested items (source kind ``items``; docs/architecture.md, "Sources") -------------------------------

    # --- Media left behind by earlier runs (docs/operations.md, "Incremental sync and retries") --------------

    # --- Posts that need more than the listing (chains of steps) ---------------------------------------------

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

    def document_bodies(self, *, kind: str, body: bytes) -> tuple[bytes, dict[str, bytes]]:
        """The body to store for a ``subtitle``/``danmaku`` asset as downloaded, and the objects derived from it by
        extension (a subtitle's SRT); ``ValueError`` refuses it. Called by the media pipeline (docs/media.md,
        "Documents"); platforms with document assets override it."""
        return body, {}

    def closed(self, reason: str) -> None:
        self.job_state.close_reason = reason

    def now_iso(self) -> str:
        return utc_now_iso()
