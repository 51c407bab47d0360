"""Incremental sync: one high-water mark per source (spider + target = the job key), kept beside the checkpoints.

A mark is the newest post of a source known to be *completely* stored together with everything older: every
item of it left the pipelines (media included; a media asset that failed is kept in the job's retry set,
:mod:`mediacrawler.extensions.retries`, and comes back on its own). With the ``file`` backend it is
``CHECKPOINT_DIR/marks/<job>.json``, written atomically (:func:`mediacrawler.fsutil.write_atomic`)::

    {"schema": 1, "key": "weibo-uid-7365120894", "spider": "weibo",
     "post_id": "5012…", "created_at": "2026-11-28T01:55:00Z", "seq": 3, "updated_at": "2026-11-28T02:00:00Z"}

How it is used (:class:`MarkExtension`):

- ``spider_opened``: the mark is handed to the spider (``JobState.mark``) unless ``-a full=true``, an explicit
  ``-a start`` without ``-a incremental=true`` (logged), or a list of items (source kind ``items``: in the order
  given, not newest first; no mark is read or advanced for it). The spider then
  drops posts at or below it and stops paginating at the first page whose posts (pinned ones aside) are all at or
  below it (:meth:`mediacrawler.spiders._base.PlatformSpider._apply_mark`).
- Items that leave the pipelines stored (``item_scraped``; or dropped because they were stored before) are
  candidates; pinned posts and posts read outside the listing (retries) never are.
- ``spider_closed``: the mark advances to the newest candidate only when the run covered the source from its first
  page to where it ends for this run (the platform's last page, or the page at the mark), with reason
  ``finished``, no listing page failed and no item error. A run that started past page 1 (``-a start``, a resumed
  checkpoint), stopped at ``max_pages`` or was interrupted leaves the mark where it was: the next run walks down to
  the old mark again, and dedupe/the checkpoint drop what it already stored.

Workers (``REDIS_URL``, no target: one job after the other, each job's pages spread over every worker) keep the
marks in Redis, on the ``job_started``/``job_finished`` signals: at the start of a job each worker reads its mark
(and stops at it like a one-job crawl); at the end each worker puts the newest post it stored into the run's
candidate (``MARKS_REDIS_PREFIX`` + ``run-<token>:<job>``, kept :data:`CANDIDATE_TTL` seconds; the newer of two
is kept, atomically), and a worker that finds the job's shared checkpoint gone (cleared: the source completed with
no failed page and no item error) promotes the candidate to the mark. The last worker to end sees every
candidate. A run that did not start at page 1 has no candidate. This needs the Redis checkpoint store (workers'
default) and the Redis mark store (the default that follows it).

Settings: ``MARKS_ENABLED`` (default ``True``), ``MARKS_BACKEND`` (``file``: under ``CHECKPOINT_DIR``; ``redis``:
keys ``MARKS_REDIS_PREFIX<job>``, for processes that share no disk; or the import path of a store class with
``from_settings(settings)``; empty, the default: the kind of ``CHECKPOINT_BACKEND``). See docs/operations.md,
"Incremental sync and retries".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import NotConfigured

from mediacrawler import signals as mc_signals
from mediacrawler.checkpoints.model import check_key
from mediacrawler.checkpoints.store import store_from_settings
from mediacrawler.config import setting
from mediacrawler.distributed.docstore import RedisDocumentStore
from mediacrawler.extensions.docstore import (DocumentStore, FileDocumentStore, document_store_from_settings,
                                             quarantine_document)
from mediacrawler.jobstate import job_state
from mediacrawler.parsers._common import utc_now_iso
from mediacrawler.contracts import HighWaterMark, field_of, is_comment, is_record

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: Version of the mark document; another version is unreadable (ignored with a warning: a full walk follows).
SCHEMA_VERSION = 1

#: Short names accepted by ``MARKS_BACKEND``.
MARK_BACKENDS: dict[str, str] = {"file": "mediacrawler.extensions.marks.FileMarkStore",
                                 "redis": "mediacrawler.extensions.marks.RedisMarkStore"}
#: Seconds a worker run's mark candidate is kept in Redis (a run that never completes leaves one behind).
CANDIDATE_TTL = 7 * 86400


class MarkCorrupt(Exception):
    """A mark exists but cannot be used."""


@dataclass
class Mark:
    """One source's high-water mark (see the module docstring)."""

    key: str
    spider: str
    post_id: str
    created_at: str | None = None
    seq: int = 0
    updated_at: str | None = None

    def high_water(self) -> HighWaterMark:
        return HighWaterMark(post_id=self.post_id, created_at=self.created_at)

    def advanced_to(self, best: HighWaterMark, *, spider: str) -> Mark:
        """This mark moved to ``best`` (itself when ``best`` is at or below it)."""
        if self.high_water().covers(best.post_id, best.created_at):
            return self
        return Mark(key=self.key, spider=spider, post_id=best.post_id, created_at=best.created_at,
                    seq=self.seq + 1, updated_at=utc_now_iso())

    @classmethod
    def first(cls, key: str, best: HighWaterMark, *, spider: str) -> Mark:
        return cls(key=key, spider=spider, post_id=best.post_id, created_at=best.created_at, seq=1,
                   updated_at=utc_now_iso())

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, "key": self.key, "spider": self.spider, "post_id": self.post_id,
                "created_at": self.created_at, "seq": self.seq, "updated_at": self.updated_at}

    @classmethod
    def from_dict(cls, data: Any, *, key: str) -> Mark:
        try:
            if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
                raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r}")
            if data.get("key") != key:
                raise ValueError(f"key {data.get('key')!r} in the file of {key!r}")
            post_id, created_at = data["post_id"], data.get("created_at")
            if not isinstance(post_id, str) or not post_id or not isinstance(created_at, (str, type(None))):
                raise TypeError("post_id must be a string, created_at a string or null")
            return cls(key=key, spider=str(data["spider"]), post_id=post_id, created_at=created_at,
                       seq=int(data.get("seq") or 0), updated_at=data.get("updated_at"))
        except (KeyError, TypeError, ValueError) as e:
            raise MarkCorrupt(f"{type(e).__name__}: {e}") from None


#: Where marks live: a file or Redis store (:class:`~mediacrawler.extensions.docstore.DocumentStore`).
MarkStore = DocumentStore[Mark]


class FileMarkStore(FileDocumentStore[Mark]):
    """Marks as ``<directory>/<key>.json`` files; ``from_settings``: ``CHECKPOINT_DIR/marks``."""

    subdir = "marks"
    document = Mark
    corrupt = MarkCorrupt


class RedisMarkStore(RedisDocumentStore[Mark]):
    """Marks as Redis strings ``MARKS_REDIS_PREFIX<job>`` (``MARKS_BACKEND = "redis"``; needs REDIS_URL)."""

    prefix_setting = "MARKS_REDIS_PREFIX"
    document = Mark
    corrupt = MarkCorrupt


@dataclass
class ThreadMarks:
    """The comment threads of one job walked completely (``-a comments``): post id → ``[id, created_at]`` of the
    thread's newest top-level comment then, and for oldest-first threads (Facebook) the cursor after the last
    page walked, ``[id, created_at, cursor]``. A re-run's walk of the thread ends at the comment, or starts at the
    cursor (spiders/_threads.py). File backend: ``CHECKPOINT_DIR/marks/comments/<job>.json``."""

    key: str
    spider: str
    threads: dict[str, list[str | None]]
    seq: int = 0
    updated_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, "key": self.key, "spider": self.spider, "threads": self.threads,
                "seq": self.seq, "updated_at": self.updated_at}

    @classmethod
    def from_dict(cls, data: Any, *, key: str) -> ThreadMarks:
        try:
            if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION or data.get("key") != key:
                raise ValueError("another schema or key")
            threads = {str(post): [str(m[0]), None if m[1] is None else str(m[1]),
                                   *[str(c) for c in m[2:3] if c]]
                       for post, m in dict(data["threads"]).items()}
            return cls(key=key, spider=str(data["spider"]), threads=threads, seq=int(data.get("seq") or 0),
                       updated_at=data.get("updated_at"))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise MarkCorrupt(f"{type(e).__name__}: {e}") from None


class FileThreadMarkStore(FileDocumentStore[ThreadMarks]):
    subdir = "marks/comments"
    document = ThreadMarks
    corrupt = MarkCorrupt


class RedisThreadMarkStore(RedisDocumentStore[ThreadMarks]):
    prefix_setting = "MARKS_COMMENTS_REDIS_PREFIX"
    document = ThreadMarks
    corrupt = MarkCorrupt


def thread_mark_store_from_settings(settings: BaseSettings) -> DocumentStore[ThreadMarks]:
    """Thread marks beside the marks: the ``redis`` store when the marks are in Redis, else files."""
    redis_marks = isinstance(mark_store_from_settings(settings), RedisMarkStore)
    return (RedisThreadMarkStore if redis_marks else FileThreadMarkStore).from_settings(settings)


def mark_store_from_settings(settings: BaseSettings) -> MarkStore:
    """The store ``MARKS_BACKEND`` names; NotConfigured when it names nothing usable."""
    store: MarkStore = document_store_from_settings(settings, "MARKS_BACKEND", MARK_BACKENDS)
    return store


def _stored_post(item: Any) -> tuple[str, str | None, bool] | None:
    """(post_id, created_at, pinned) of a post listed by a page of the running job, else None."""
    if not is_record(item) or is_comment(item):
        return None
    source = field_of(item, "source")
    if not is_record(source) or field_of(source, "page") is None:
        return None  # read outside the listing (a retry): says nothing about the source's order
    post_id, created_at = field_of(item, "post_id"), field_of(item, "created_at")
    extra = field_of(item, "extra") or {}
    if not post_id:
        return None
    return str(post_id), (str(created_at) if created_at else None), bool(extra.get("pinned"))


class MarkExtension:
    """Reads the job's high-water mark at start and advances it at a complete end (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "MARKS_ENABLED"):
            raise NotConfigured("MARKS_ENABLED is off")
        self.store = mark_store_from_settings(settings)
        self.crawler = crawler
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.old: Mark | None = None
        self.key: str | None = None
        #: The newest stored candidate of this run.
        self.best: HighWaterMark | None = None
        self.item_errors = 0
        #: Comment threads (``-a comments``): their store, the marks read at start, those of threads walked
        #: completely in this run (post id → ``[id, created_at]``), and posts with a comment failed in pipelines.
        self.thread_store = thread_mark_store_from_settings(settings)
        self.threads: ThreadMarks | None = None
        self.thread_candidates: dict[str, list[str | None]] = {}
        self.thread_errors: set[str] = set()
        #: Workers: the run token of the job served (``None``: no candidate is kept for it), and the shared
        #: checkpoint store that says whether the job completed (set on the first job).
        self.token: str | None = None
        self.checkpoints: Any = None
        crawler.signals.connect(self.job_started, signal=mc_signals.job_started)
        crawler.signals.connect(self.job_finished, signal=mc_signals.job_finished)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        mc_signals.forward_item_signals(crawler)
        crawler.signals.connect(self.item_scraped, signal=mc_signals.item_scraped_sync)
        crawler.signals.connect(self.item_dropped, signal=mc_signals.item_dropped_sync)
        crawler.signals.connect(self.item_error, signal=mc_signals.item_error_sync)
        crawler.signals.connect(self.thread_progress, signal=mc_signals.thread_progress)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        state = job_state(spider)
        if getattr(spider, "worker_id", None) or state is None or not state.job:
            return  # not a platform spider, or a worker (marks per job: job_started)
        self._open(spider, check_key(state.job))

    def _open(self, spider: Spider, key: str) -> None:
        """Read the mark of job ``key`` and hand it to the spider (unless ``-a full=true``)."""
        self.key, self.old, self.best, self.item_errors = key, None, None, 0
        self._open_threads(spider, key)
        state = job_state(spider)
        if state is not None and state.kind == "items":
            # A list is in the order given, not newest first: a mark would stop it at the first old item and
            # drop the rest unread. Each item is read; dedupe reports the ones already stored.
            logger.info("%s: a list of items: every item is read (a high-water mark applies to listings only)", key)
            self.key = None
            return
        try:
            self.old = self.store.load(self.key)
        except MarkCorrupt as e:
            # Kept for inspection, out of the way: the run's complete end writes a fresh mark in its place.
            logger.warning("%s: high-water mark %s is unusable (%s); moved aside to %s, every page is walked",
                           self.key, self.store.location(self.key), e, quarantine_document(self.store, self.key))
            self.stats.inc_value("incremental/mark_corrupt")
        except OSError as e:
            logger.warning("%s: high-water mark %s is unusable (%s); every page is walked", self.key,
                           self.store.location(self.key), e)
            self.stats.inc_value("incremental/mark_corrupt")
        if self.old is None:
            return
        args: Any = getattr(spider, "args", None)
        if getattr(args, "full", False):
            logger.info("%s: -a full=true: walking every page (the high-water mark is post %s)", self.key,
                        self.old.post_id)
            return
        start = getattr(args, "start", None)
        if start is not None and not getattr(args, "incremental", False):
            # An explicit start is what the user asked for: the mark would silently end it at the first old page.
            logger.info("%s: -a start=%d: the high-water mark (post %s) does not apply to an explicit start; "
                        "walking on from page %d (add -a incremental=true to stop at it)", self.key, start,
                        self.old.post_id, start)
            return
        if start is not None:
            logger.info("%s: -a start=%d -a incremental=true: stopping at the high-water mark (post %s)", self.key,
                        start, self.old.post_id)
        if (state := job_state(spider)) is not None:
            state.mark = self.old.high_water()
        self.stats.set_value("incremental/mark", self.old.post_id)
        logger.info("%s: incremental: posts up to %s (%s) are stored; stopping at the first page below it",
                    self.key, self.old.post_id, self.old.created_at or "time unknown")

    # --- Comment threads (-a comments) ---------------------------------------------------------------------------

    def _open_threads(self, spider: Spider, key: str) -> None:
        self.threads, self.thread_candidates, self.thread_errors = None, {}, set()
        args: Any = getattr(spider, "args", None)
        if getattr(args, "comments", None) is None:
            return
        state = job_state(spider)
        if state is None:
            return
        try:
            self.threads = self.thread_store.load(key)
        except (MarkCorrupt, OSError) as e:
            logger.warning("%s: comment-thread marks %s are unusable (%s); every thread is walked whole", key,
                           self.thread_store.location(key), e)
        if self.threads is not None and not getattr(args, "full", False):
            state.thread_marks = dict(self.threads.threads)
            logger.info("%s: incremental: %d comment threads are walked down to their marks", key,
                        len(self.threads.threads))

    def thread_progress(self, spider: Spider, post_id: str, done: bool, mark: list[str | None] | None,
                        **kwargs: Any) -> None:
        if done and mark is not None:
            self.thread_candidates[post_id] = list(mark)

    def _save_threads(self, spider: Spider, key: str) -> None:
        """The marks of threads walked completely whose comments all left the pipelines stored."""
        found = {post: mark for post, mark in self.thread_candidates.items() if post not in self.thread_errors}
        old = self.threads.threads if self.threads is not None else {}
        if not found or all(old.get(post) == mark for post, mark in found.items()):
            return
        seq = self.threads.seq + 1 if self.threads is not None else 1
        marks = ThreadMarks(key=key, spider=spider.name, threads={**old, **found}, seq=seq,
                            updated_at=utc_now_iso())
        try:
            self.thread_store.save(marks)
        except OSError as e:
            logger.error("%s: cannot write the comment-thread marks %s: %s", key, self.thread_store.location(key),
                         e)
            return
        logger.info("%s: comment-thread marks of %d threads advanced", key, len(found))

    # --- Workers: one job after the other, its pages spread over every worker -----------------------------------

    def job_started(self, spider: Spider, job: str) -> None:
        """A worker starts serving *job*: read its mark, and note the run (the shared checkpoint opened it)."""
        self.key, self.token = None, None
        if not isinstance(self.store, RedisMarkStore):
            return  # a mark on this worker's disk would say nothing about the job
        if self.checkpoints is None:
            settings = self.crawler.settings
            store = store_from_settings(settings) if setting(settings, "CHECKPOINT_ENABLED") else None
            if not hasattr(store, "run_token"):
                logger.warning("Workers advance no high-water mark without the Redis checkpoint store "
                               "(CHECKPOINT_BACKEND=redis): it is what says a job completed")
            self.checkpoints = store or False
        self._open(spider, check_key(job))
        state = job_state(spider)
        if not self.checkpoints or state is None or state.first_page()[0] != 1:
            return  # the run did not start at page 1: it can complete only the part after it, no mark
        try:
            self.token = self.checkpoints.run_token(spider.name, job)
        except Exception as e:  # noqa: BLE001 - Redis unreachable: this worker keeps no candidate for the job
            logger.warning("%s: cannot read the job's run (%s); this worker will not move the mark", job, e)

    def job_finished(self, spider: Spider, job: str) -> None:
        """*job* is done everywhere: add this worker's newest stored post to the run's candidate; promote it to
        the mark when the job's shared checkpoint is gone (the source completed)."""
        key, token, best = self.key, self.token, self.best
        self.key, self.token, self.best = None, None, None
        if key != job or token is None or not isinstance(self.store, RedisMarkStore):
            return
        candidates = RedisMarkStore(self.store.server, f"{self.store.prefix}run-{token}:", ttl=CANDIDATE_TTL)
        name = spider.name
        try:
            if best is not None:
                candidates.update(key, lambda cur: cur.advanced_to(best, spider=name) if cur
                                  else Mark.first(key, best, spider=name))
            if self.checkpoints.load(key) is not None:
                return  # not complete (yet): a worker ending later, or the next complete run, moves it
            candidate = candidates.load(key)
            if candidate is None:
                logger.info("%s: nothing newer than the high-water mark", key)
                return
            high = candidate.high_water()
            mark = self.store.update(key, lambda cur: cur.advanced_to(high, spider=name) if cur
                                     else Mark.first(key, high, spider=name))
        except Exception as e:  # noqa: BLE001 - Redis: the next complete run moves the mark
            logger.error("%s: cannot advance the high-water mark: %s", key, e)
            self.stats.inc_value("incremental/mark_write_errors")
            return
        if mark is not None and mark.post_id == candidate.post_id:
            self.stats.set_value("incremental/mark_advanced", mark.post_id)
            logger.info("%s: high-water mark at post %s (%s)", key, mark.post_id,
                        mark.created_at or "time unknown")

    def item_scraped(self, item: Any, spider: Spider) -> None:
        self._candidate(item)

    def item_dropped(self, item: Any, spider: Spider, exception: BaseException) -> None:
        # Dropped as stored before (dedupe's duplicate, the checkpoint's "already stored"): still stored.
        from mediacrawler.contracts import AlreadyStored
        from mediacrawler.pipelines.dedupe import DuplicatePost

        if isinstance(exception, (AlreadyStored, DuplicatePost)):
            self._candidate(item)

    def item_error(self, item: Any, spider: Spider, failure: Any) -> None:
        if is_comment(item):
            self.thread_errors.add(str(ItemAdapter(item).get("post_id")))
        if _stored_post(item) is not None:
            self.item_errors += 1

    def _candidate(self, item: Any) -> None:
        if self.key is None or (found := _stored_post(item)) is None:
            return
        post_id, created_at, pinned = found
        if pinned:
            return
        if self.best is None or not self.best.covers(post_id, created_at):
            self.best = HighWaterMark(post_id=post_id, created_at=created_at)

    def covered_whole_run(self, spider: Spider, reason: str) -> str | None:
        """``None`` when this run covered its part of the source completely, else why not."""
        if reason != "finished":
            return f"closed: {reason}"
        if getattr(spider.args, "retry_only", False):  # type: ignore[attr-defined]
            return "retry only"
        state = job_state(spider)
        if state is None:
            return "not a platform spider"
        if state.first_page()[0] != 1:
            return "the run did not start at page 1"
        if state.pages_failed:
            return "a listing page failed"
        if self.item_errors:
            return "an item failed in the pipelines"
        if not (state.exhausted or state.stopped_at_mark):
            return "neither the last page nor the mark was reached"
        return None

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if reason == "finished" and getattr(spider, "job", None) and not getattr(spider, "worker_id", None):
            self._save_threads(spider, check_key(spider.job))  # type: ignore[attr-defined]
        if self.key is None or getattr(spider, "worker_id", None):
            return  # a worker's job ends on job_finished
        why_not = self.covered_whole_run(spider, reason)
        best = self.best
        if why_not is not None:
            if best is not None:
                logger.info("%s: high-water mark not advanced (%s)", self.key, why_not)
            return
        old = self.old
        if best is None or (old is not None and old.high_water().covers(best.post_id, best.created_at)):
            logger.info("%s: nothing newer than the high-water mark%s", self.key,
                        f" (post {old.post_id})" if old else "")
            return
        mark = old.advanced_to(best, spider=spider.name) if old else Mark.first(self.key, best, spider=spider.name)
        try:
            self.store.save(mark)
        except OSError as e:
            logger.error("%s: cannot write the high-water mark %s: %s", self.key, self.store.location(self.key), e)
            self.stats.inc_value("incremental/mark_write_errors")
            return
        self.stats.set_value("incremental/mark_advanced", mark.post_id)
        logger.info("%s: high-water mark advanced to post %s (%s)", self.key, mark.post_id,
                    mark.created_at or "time unknown")
