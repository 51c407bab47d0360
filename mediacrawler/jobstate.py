"""The state of one job as a spider walks it: one typed object, owned by the base spider (``spider.job_state``;
not ``spider.state``, which Scrapy's SpiderState extension keeps in JOBDIR), made afresh for each job, and read by
extensions, pipelines and commands through :func:`job_state` (docs/architecture.md, "Job state").

Nothing here imports another project module but :mod:`mediacrawler.contracts`, so any layer may import it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from mediacrawler.contracts import HighWaterMark, Resume


#: What a job walks (docs/architecture.md, "Sources"): a ``listing`` of pages (numbered, or by cursor), the
#: ``items`` a user gave (ids or URLs), or a ``thread`` (the comments of one post: cursor pages, then replies).
SourceKind = Literal["listing", "items", "thread"]


def new_run_id() -> str:
    """A new run's id: its start in UTC and a random suffix (``2026-12-03T10:16:26Z-1a2b3c4d``)."""
    return f"{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}-{uuid.uuid4().hex[:8]}"


@dataclass
class JobState:
    """What one job's run knows so far. The spider writes its flow (pages, failures, the end it reached); the
    checkpoint extension writes :attr:`resume`, the marks extension :attr:`mark`, the retries extension
    :attr:`retry_posts`; the crawl command reads the lot for its final line."""

    #: The job's key, e.g. ``weibo-uid-7365120894`` (checkpoints, marks, output files).
    job: str
    #: This run of the job: its row in the records database's ``runs`` and the ``run_id`` of the
    #: ``metrics_history`` rows it writes (docs/records.md).
    run_id: str = field(default_factory=new_run_id)
    #: What the job walks; ``items`` has its own fields below, and no pages.
    kind: SourceKind = "listing"
    #: ``-a start``, when given: it wins over the checkpoint's page (listings only).
    start: int | None = None
    #: Where the checkpoint says to continue (set on spider_opened, or job_started for a worker).
    resume: Resume | None = None
    #: True once the platform said the last page was reached (and that page was parsed).
    exhausted: bool = False
    pages_fetched: int = 0
    pages_failed: int = 0
    #: Listing pages failed one after the other (PLATFORM_MAX_FAILED_PAGES_IN_A_ROW ends the walk).
    failed_streak: int = 0
    #: Why each failed page failed: page → reason (scrubbed).
    failed_reasons: dict[int, str] = field(default_factory=dict)
    #: Whether running the same command again can help the pages that failed (not after a 404 at a wrong root);
    #: ``None``: no failure said.
    rerun_helps: bool | None = None
    #: The source's high-water mark (``None``: none, a list of items, or ``-a full=true``).
    mark: HighWaterMark | None = None
    #: True once a page was all at or below the mark (the run stopped paginating there).
    stopped_at_mark: bool = False
    #: Posts at or below the mark read again only to refresh their counts (``-a refresh``).
    refresh_ids: set[str] = field(default_factory=set)
    #: Comment threads walked completely by earlier runs (``-a comments``): post id → ``[id, created_at]`` of the
    #: newest top-level comment then; a walk of the thread ends there (set by the marks extension).
    thread_marks: dict[str, list[str | None]] = field(default_factory=dict)
    #: True once ``-a max_pages`` stopped the walk.
    stopped_at_max_pages: bool = False
    #: Posts with media that failed in earlier runs, read again first.
    retry_posts: list[str] = field(default_factory=list)
    #: Posts of :attr:`retry_posts` that could not be read again in this run: post id → why.
    retry_unreachable: dict[str, str] = field(default_factory=dict)
    #: Why the spider closed (``finished``, ``login_required``…); ``None`` while it runs.
    close_reason: str | None = None
    #: Listing pages requested and not yet parsed or failed: page → cursor (the spider's idle check).
    listing_pending: dict[int, str | None] = field(default_factory=dict)
    #: Why a pending page's request was dropped, when Scrapy said so (``request_dropped``).
    listing_dropped: dict[int, str] = field(default_factory=dict)
    #: Pages parsed or failed in this run. With JOBDIR a page's request can come out of the restored queue before
    #: (or after) the same request is made afresh, which the duplicate filter then drops: either way the page was
    #: answered, and is not pending.
    listing_answered: set[int] = field(default_factory=set)
    #: Cursors asked for in this run: cursor → its page (a repeated cursor ends a cursor listing).
    cursors_used: dict[str, int] = field(default_factory=dict)

    #: ``items``: the items requested, in the order given (their keys: an id, or ``short:<code>``…).
    items: list[str] = field(default_factory=list)
    #: ``items``: the items an earlier run completed (the checkpoint's ``done``): not requested again.
    items_done: set[str] = field(default_factory=set)
    #: ``items``: the items requested in this run, and the one in flight (they are walked one after the other).
    items_requested: set[str] = field(default_factory=set)
    item_pending: str | None = None
    #: ``items``: why each item that failed for good failed (scrubbed).
    items_failed: dict[str, str] = field(default_factory=dict)

    def first_page(self) -> tuple[int, str | None]:
        """The page (and cursor) this run starts at: ``-a start`` wins; else the checkpoint's page; else 1."""
        if self.start is not None:
            return self.start, None
        if self.resume is not None:
            return self.resume.page, self.resume.cursor
        return 1, None


def job_state(spider: Any) -> JobState | None:
    """The state of the job ``spider`` walks; ``None`` for a spider that is not a platform spider."""
    state = getattr(spider, "job_state", None)
    return state if isinstance(state, JobState) else None
