"""CheckpointExtension: one resume checkpoint per job, whose page watermark advances only when a page's posts are
really stored. The document and its stores are :mod:`mediacrawler.checkpoints`; how the watermark moves, the shared
(Redis) mode and the settings are in docs/architecture.md, "Checkpoints", and docs/operations.md, "Checkpoints".
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import load_object
from scrapy.utils.reactor import CallLaterOnce
from twisted.internet.task import LoopingCall

from mediacrawler import signals as mc_signals
from mediacrawler.checkpoints.model import Checkpoint, CheckpointCorrupt, check_key
from mediacrawler.checkpoints.store import FileCheckpointStore, scan_feed_tail, store_from_settings
from mediacrawler.config import setting
from mediacrawler.contracts import AlreadyStored, Resume, field_of, is_comment, is_record
from mediacrawler.feeds import SyncedFileFeedStorage, feed_opened, sync_feeds
from mediacrawler.jobstate import job_state
from mediacrawler.parsers._common import utc_now_iso

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)


@dataclass
class _PageState:
    cursor: str | None
    next_cursor: str | None
    pending: Counter[str]
    is_last: bool = False
    failed: bool = False

    @property
    def done(self) -> bool:
        # As `not +self.pending` (no count above 0), without building a Counter for every post that leaves.
        return not self.failed and not any(n > 0 for n in self.pending.values())


#: One page of a comment thread as the checkpoint follows it: the state that fetches it, its comments not yet out
#: of the pipelines, and those out.
_ThreadPage = tuple[dict[str, Any] | None, Counter[str], set[str]]


def _source_of(item: Any) -> tuple[str | None, int | None, str | None]:
    """(job, page, post_id) of an item, ``None`` parts when the item does not say."""
    if not is_record(item) or is_comment(item):
        return None, None, None
    source = field_of(item, "source")
    if source is None:
        return None, None, None
    if is_record(source):
        job, page = field_of(source, "job"), field_of(source, "page")
    else:
        job, page = source.get("job"), source.get("page")
    post_id = field_of(item, "post_id")
    return job, (page if isinstance(page, int) else None), (str(post_id) if post_id else None)


class CheckpointExtension:
    """Keeps one resume checkpoint per job (docs/architecture.md, "Checkpoints")."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "CHECKPOINT_ENABLED"):
            raise NotConfigured("CHECKPOINT_ENABLED is off")
        self.store = store_from_settings(settings)
        self.crawler = crawler
        assert crawler.stats is not None
        self.stats: StatsCollector = crawler.stats
        self.sync = setting(settings, "CHECKPOINT_SYNC_FEEDS")
        self.checkpoint: Checkpoint | None = None  # the state of the running job; None: not a checkpointed spider
        self.skip_ids: frozenset[str] = frozenset()
        self.skip_comment_ids: frozenset[str] = frozenset()
        self.skip_pipeline = False
        self._pages: dict[int, _PageState] = {}
        #: Open comment threads: post id → ``[state, comments not yet out, comments out]`` per page read, oldest
        #: first; the first with comments not yet out is the thread's resume point (``Checkpoint.threads``).
        self._threads: dict[str, list[_ThreadPage]] = {}
        self._stored: dict[int, set[str]] = {}
        #: ``items`` jobs: the items requested, the posts each answered item still has in the pipelines, and the
        #: item each such post belongs to.
        self._requested: list[str] = []
        self._items: dict[str, Counter[str]] = {}
        self._post_items: dict[str, str] = {}
        self._dirty = False
        self._watermark_stat: int | None = None  # the value of stat checkpoint/watermark
        # Writes are coalesced (CHECKPOINT_WRITE_INTERVAL) and happen after every item_scraped handler of the turn
        # (the feed exporter's included) has run, so the flush before the write covers every item it counts.
        self._commit_later = CallLaterOnce(self.commit)
        # Each write costs three fsyncs (feeds, file, directory); a kill loses at most this much progress, which the
        # next run recognises in the feed's tail anyway.
        self.write_interval = setting(settings, "CHECKPOINT_WRITE_INTERVAL")
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.page_parsed, signal=mc_signals.page_parsed)
        crawler.signals.connect(self.page_failed, signal=mc_signals.page_failed)
        crawler.signals.connect(self.requested_item_parsed, signal=mc_signals.requested_item_parsed)
        crawler.signals.connect(self.requested_item_failed, signal=mc_signals.requested_item_failed)
        mc_signals.forward_item_signals(crawler)
        crawler.signals.connect(self.item_scraped, signal=mc_signals.item_scraped_sync)
        crawler.signals.connect(self.item_dropped, signal=mc_signals.item_dropped_sync)
        crawler.signals.connect(self.item_error, signal=mc_signals.item_error_sync)
        crawler.signals.connect(self.thread_progress, signal=mc_signals.thread_progress)
        #: Shared mode (a Redis store): events waiting for the next batch, and the run they belong to.
        self.shared = bool(getattr(self.store, "shared", False))
        self._events: list[dict[str, Any]] = []
        self._token: str | None = None
        self._flusher: LoopingCall | None = None
        self._outage = False
        if self.shared:
            self.interval = setting(settings, "CHECKPOINT_REDIS_INTERVAL")
            store: Any = self.store
            crawler.signals.connect(self.job_started, signal=store.job_started)
            crawler.signals.connect(self.job_finished, signal=store.job_finished)
            crawler.signals.connect(self.acks_pending, signal=store.acks_pending)
        elif self.sync:
            crawler.signals.connect(self.feed_opened, signal=feed_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # --- Start ---------------------------------------------------------------------------------------------------

    def spider_opened(self, spider: Spider) -> None:
        state = job_state(spider)
        key = state.job if state is not None else None
        args = getattr(spider, "args", None)
        # A worker has no arguments until it takes a job (distributed/worker.py).
        if not key or state is None or (args is None and not getattr(spider, "worker_id", None)):
            logger.debug("checkpoint: %s is not a platform spider; no checkpoint", spider.name)
            return
        if self.shared:
            self._flusher = LoopingCall(self._flush_shared)
            self._flusher.start(self.interval, now=False)
            if getattr(spider, "worker_id", None):
                return  # a worker opens each job's checkpoint on job_started
            if state.kind == "items":
                logger.info("%s: a list of items keeps no shared checkpoint (the shared dedupe cache answers for "
                            "the items stored)", key)
                return
            # A one-job crawl: several processes may share its queue; one whose queue is seeded joins the run.
            store: Any = self.store
            try:
                joined = bool(getattr(spider, "distributed", False) and store.queue_seeded(spider.name, key))
            except Exception:  # noqa: BLE001 - Redis unreachable: _open_shared says so
                joined = False
            self._open_shared(spider, check_key(key), token=None, join=joined)
            return
        key = check_key(key)
        if isinstance(self.store, FileCheckpointStore):
            self.store.remove_stale_temps(key)
        if state.kind == "items":
            self._open_items(spider, key, args)
            return
        old = self._load(key, args, start_at="page 1")
        if old is not None and old.kind != "listing":
            logger.info("%s: checkpoint %s is not a listing's; not resumed", key, self.store.location(key))
            old = None
        if old is not None and old.last_page is not None and old.watermark >= old.last_page:
            # A complete run's checkpoint (left by a version that wrote it back after clearing it): the source was
            # covered, so this run starts where any run after a complete one does (page 1, or -a start).
            self.store.delete(key)
            logger.info("%s: checkpoint %s is of a completed run (page %d of %d); deleted, not resumed", key,
                        self.store.location(key), old.watermark, old.last_page)
            old = None
        start = getattr(args, "start", None)
        cp = Checkpoint(key=key, spider=spider.name, seq=old.seq if old else 0)
        if start is not None:
            # An explicit start wins; from here on the checkpoint tracks this run, pages before it are not ours.
            cp.watermark, cp.next_page = start - 1, start
            if old is not None:
                logger.info("%s: -a start=%d overrides the checkpoint (which said page %d)", key, start,
                            old.next_page)
        elif old is not None:
            cp.watermark, cp.next_page, cp.next_cursor = old.watermark, old.next_page, old.next_cursor
            # last_page is not carried over: only this run's own end-of-list signal may clear the checkpoint.
            cp.failed_pages = list(old.failed_pages)
            stored = {page: set(ids) for page, ids in old.stored.items()}
            comments = {i for entry in old.threads.values() for i in entry["stored"]}
            # Records exported after the last checkpoint write, before the process died: stored all the same.
            for mark in old.feeds:
                for page, ids in scan_feed_tail(mark, key, comments=comments).items():
                    stored.setdefault(page, set()).update(ids)
            self._stored = {page: ids for page, ids in stored.items() if page > cp.watermark}
            self.skip_ids = frozenset(i for ids in stored.values() for i in ids)
            self.skip_comment_ids = frozenset(comments)
            cp.threads = dict(old.threads)  # open until their posts are stored, in this run or a later one
            state.resume = Resume(page=cp.next_page, cursor=cp.next_cursor,
                                  threads={post: entry["state"] for post, entry in old.threads.items()})
            if old.threads:
                logger.info("%s: %d comment threads resume at their stored cursors", key, len(old.threads))
            logger.info(
                "%s: resuming at page %d%s from checkpoint %s (pages up to %d done; %d posts of later pages "
                "already stored)", key, cp.next_page, f" (cursor {cp.next_cursor})" if cp.next_cursor else "",
                self.store.location(key), cp.watermark, len(self.skip_ids),
            )
            self.stats.set_value("checkpoint/resumed_at", cp.next_page)
            if self.skip_ids and not self.skip_pipeline:
                logger.warning("%s: CheckpointSkipPipeline is not in ITEM_PIPELINES; the %d posts already stored "
                               "will be emitted again", key, len(self.skip_ids))
        self.checkpoint = cp
        self._check_feeds(key)
        if old is not None and start is None:
            # Write the absorbed ids now: the feed marks they came from are replaced by this run's.
            self._dirty = True
            self.commit()

    def _load(self, key: str, args: Any, *, start_at: str) -> Checkpoint | None:
        """The job's checkpoint (``None``: none, reset with ``-a reset_checkpoint``, or unusable: moved aside)."""
        if getattr(args, "reset_checkpoint", False):
            if self.store.delete(key):
                logger.info("%s: checkpoint reset (%s deleted)", key, self.store.location(key))
            self.stats.set_value("checkpoint/reset", True)
            return None
        try:
            return self.store.load(key)
        except CheckpointCorrupt as e:
            moved = self.store.quarantine(key)
            logger.warning("%s: checkpoint %s is unusable (%s); moved aside to %s, starting from %s",
                           key, self.store.location(key), e, moved, start_at)
            self.stats.inc_value("checkpoint/corrupt")
            return None

    def _open_items(self, spider: Spider, key: str, args: Any) -> None:
        """An ``items`` job: its checkpoint says which requested items are done; only the others are fetched."""
        state = job_state(spider)
        assert state is not None
        self._requested = list(state.items)
        old = self._load(key, args, start_at="the first item")
        if old is not None and old.kind != "items":
            # Left by a version that walked a list as pages: its page numbers say nothing of which item is done.
            logger.info("%s: checkpoint %s is not an items checkpoint; not resumed", key, self.store.location(key))
            old = None
        done = [i for i in old.done if i in set(self._requested)] if old is not None else []
        if old is not None and set(self._requested) <= set(done):
            self.store.delete(key)  # a completed list's (its clearing failed): a run after it starts afresh
            logger.info("%s: checkpoint %s is of a completed run; deleted, not resumed", key,
                        self.store.location(key))
            old, done = None, []
        self.checkpoint = Checkpoint(key=key, spider=spider.name, kind="items", seq=old.seq if old else 0,
                                     done=done)
        state.items_done = set(done)
        if old is not None:
            # The threads of items not done yet resume at their stored cursors, as a listing's do.
            self.checkpoint.threads = dict(old.threads)
            comments = {i for entry in old.threads.values() for i in entry["stored"]}
            for mark in old.feeds:  # comments exported after the last checkpoint write: stored all the same
                scan_feed_tail(mark, key, comments=comments)
            self.skip_comment_ids = frozenset(comments)
            state.resume = Resume(page=1, threads={post: entry["state"] for post, entry in old.threads.items()})
            if old.threads:
                logger.info("%s: %d comment threads resume at their stored cursors", key, len(old.threads))
            total = len(self._requested)
            logger.info("%s: resuming from checkpoint %s: %d of %d items done, the other %d are fetched", key,
                        self.store.location(key), len(done), total, total - len(done))
            self.stats.set_value("checkpoint/items_done_before", len(done))
        self._check_feeds(key)

    def _check_feeds(self, key: str) -> None:
        if not self.sync:
            return
        storages = self.crawler.settings.getwithbase("FEED_STORAGES")
        for uri, options in self.crawler.settings.getdict("FEEDS").items():
            # The feed exporter's own lookup: the URI scheme, local files for anything it does not know.
            path = storages.get(urlparse(str(uri)).scheme) or storages.get("file")
            cls = load_object(path) if path else None
            if not (isinstance(cls, type) and issubclass(cls, SyncedFileFeedStorage)) or (options or {}).get(
                "postprocessing"
            ):
                logger.warning(
                    "%s: feed %s is not a synced local file: after a hard kill the checkpoint may count records "
                    "that never reached it (FEED_STORAGES: mediacrawler.feeds.SyncedFileFeedStorage)",
                    key, uri,
                )

    # --- Progress ------------------------------------------------------------------------------------------------

    def page_parsed(self, spider: Spider, page: int, cursor: str | None, next_cursor: str | None,
                    post_ids: Sequence[str], is_last: bool) -> None:
        cp = self.checkpoint
        if cp is None:
            return
        if self.shared:
            self._events.append({"t": "a", "p": page, "ids": [str(i) for i in post_ids], "c": next_cursor,
                                 "l": int(is_last)})
            return
        if page <= cp.watermark:
            logger.debug("%s: page %d parsed again, already under the watermark %d", cp.key, page, cp.watermark)
            return
        self._pages[page] = _PageState(cursor, next_cursor, Counter(str(i) for i in post_ids), is_last)
        if is_last:
            cp.last_page = page
        self._changed()

    def page_failed(self, spider: Spider, page: int, cursor: str | None, reason: str) -> None:
        cp = self.checkpoint
        if cp is None or page <= cp.watermark:
            return
        if self.shared:
            self._events.append({"t": "f", "p": page})
            logger.info("%s: page %d failed; the shared checkpoint stays before it", cp.key, page)
            return
        state = self._pages.setdefault(page, _PageState(cursor, None, Counter()))
        state.failed = True
        if page not in cp.failed_pages:
            cp.failed_pages.append(page)
        logger.info("%s: page %d failed; the checkpoint stays before it (next run fetches it again)", cp.key, page)
        self._changed()

    def requested_item_parsed(self, spider: Spider, item: str, post_ids: Sequence[str]) -> None:
        cp = self.checkpoint
        if cp is None or cp.kind != "items":
            return
        pending = Counter(str(i) for i in post_ids)
        self._items[item] = pending
        for post_id in pending:
            self._post_items[post_id] = item
        self._changed()

    def requested_item_failed(self, spider: Spider, item: str, reason: str) -> None:
        cp = self.checkpoint
        if cp is None or cp.kind != "items":
            return
        self._items.pop(item, None)
        if item not in cp.failed_items:
            cp.failed_items.append(item)
        logger.info("%s: item %s failed; the checkpoint keeps it undone (the next run fetches it again)", cp.key,
                    item)
        self._changed()

    def item_scraped(self, item: Any, spider: Spider) -> None:
        self._item_left(item, stored=True)

    def item_dropped(self, item: Any, spider: Spider, exception: BaseException) -> None:
        # A post dropped because an earlier run stored it is still stored: keep it in the list past the watermark.
        self._item_left(item, stored=isinstance(exception, AlreadyStored))

    def item_error(self, item: Any, spider: Spider, failure: Any) -> None:
        # A pipeline error is not a reason to lose the post: its page stays before the watermark, so it is retried.
        self._item_left(item, stored=False, failed=True)

    def feed_opened(self, path: str, size: int) -> None:
        # Write now, with the new file's mark, before the exporter writes to it: its buffer can spill records to
        # disk before the next regular write, and a kill then must still let the next run find them.
        if self.checkpoint is None:
            return
        self._dirty = True
        self.commit()

    def thread_progress(self, spider: Spider, post_id: str, state: dict[str, Any] | None, comment_ids: list[str],
                        done: bool, **kwargs: Any) -> None:
        """A thread read a page (or ended): its resume point moves once the comments before it are out."""
        if self.checkpoint is None:
            return
        self._threads.setdefault(post_id, []).append((state, Counter(comment_ids), set()))
        self._thread_moved(post_id)

    def _comment_left(self, item: Any) -> None:
        adapter = ItemAdapter(item)
        comment_id, queue = str(adapter.get("comment_id")), self._threads.get(str(adapter.get("post_id")))
        for _, pending, out in queue or ():
            if pending[comment_id] > 0:
                pending[comment_id] -= 1
                out.add(comment_id)  # out of the pipelines (stored, or dropped for good): never emitted again
                self._thread_moved(str(adapter.get("post_id")))
                return

    def _thread_moved(self, post_id: str) -> None:
        cp = self.checkpoint
        assert cp is not None
        queue = self._threads[post_id]
        while len(queue) > 1 and not +queue[0][1]:
            queue.pop(0)
        state, _, out = queue[0]
        self._thread_entry(post_id, None if state is None else {"state": state, "stored": sorted(out)})

    def _thread_entry(self, post_id: str, entry: dict[str, Any] | None) -> None:
        cp = self.checkpoint
        assert cp is not None
        if self.shared:
            # As JSON text: the script stores it as it comes (its JSON library would write an empty list as {}).
            self._events.append({"t": "th", "id": post_id, "e": None if entry is None else json.dumps(entry)})
            return
        if entry is None:
            cp.threads.pop(post_id, None)
        else:
            cp.threads[post_id] = entry
        self._dirty = True
        self._commit_later.schedule(self.write_interval)

    def _item_left(self, item: Any, *, stored: bool, failed: bool = False) -> None:
        cp = self.checkpoint
        if cp is None:
            return
        if is_comment(item):
            self._comment_left(item)
            return
        job, page, post_id = _source_of(item)
        if not failed and post_id and (post_id in cp.threads or post_id in self._threads):
            # A thread's post is emitted when the thread ended: once it left the pipelines (stored, or dropped as
            # stored before), the thread is closed; after an item error its final state stays, for the next run.
            self._threads.pop(post_id, None)
            self._thread_entry(post_id, None)
        if job != cp.key or post_id is None:
            return
        if cp.kind == "items":
            self._requested_post_left(post_id, failed=failed)
            return
        if page is None:
            return
        if self.shared:
            self._events.append({"t": "d", "p": page, "id": post_id, "s": int(stored), "f": int(failed)})
            return
        state = self._pages.get(page)
        if state is None:
            return  # under the watermark, or a page this run never opened
        if state.pending[post_id] > 0:
            state.pending[post_id] -= 1
        else:
            logger.debug("%s: post %s of page %d was not announced by page_parsed", cp.key, post_id, page)
        if stored:
            self._stored.setdefault(page, set()).add(post_id)
        if failed:
            state.failed = True
            if page not in cp.failed_pages:
                cp.failed_pages.append(page)
        self._changed()

    def _requested_post_left(self, post_id: str, *, failed: bool) -> None:
        cp = self.checkpoint
        assert cp is not None
        item = self._post_items.get(post_id)
        pending = self._items.get(item) if item is not None else None
        if item is None or pending is None:
            return  # a post of no item answered in this run (a retried post)
        if pending[post_id] > 0:
            pending[post_id] -= 1
        if failed:
            # A pipeline error: the item stays undone, so the next run fetches it again.
            del self._items[item]
            if item not in cp.failed_items:
                cp.failed_items.append(item)
        self._changed()

    def already_stored(self, post_id: str) -> bool:
        """Whether an earlier, interrupted run of this job stored *post_id* (the skip pipeline asks)."""
        return post_id in self.skip_ids

    def _changed(self) -> None:
        self._advance()
        self._dirty = True
        self._commit_later.schedule(self.write_interval)

    def _advance(self) -> None:
        cp = self.checkpoint
        assert cp is not None
        if cp.kind == "items":
            for item, pending in list(self._items.items()):
                if not +pending:  # answered, and every post it announced is out of the pipelines
                    del self._items[item]
                    if item not in cp.done:
                        cp.done.append(item)
            self.stats.set_value("checkpoint/items_done", len(cp.done))
            return
        moved = False
        while (state := self._pages.get(cp.watermark + 1)) is not None and state.done:
            page = cp.watermark + 1
            cp.watermark, cp.next_page, cp.next_cursor = page, page + 1, state.next_cursor
            del self._pages[page]
            with contextlib.suppress(ValueError):
                cp.failed_pages.remove(page)
            moved = True
        if moved:  # only a move brings stored pages under the watermark
            for page in [p for p in self._stored if p <= cp.watermark]:
                del self._stored[page]
        if cp.watermark != self._watermark_stat:  # a stats call per post costs more than the rest of this
            self.stats.set_value("checkpoint/watermark", cp.watermark)
            self._watermark_stat = cp.watermark

    # --- Writing -------------------------------------------------------------------------------------------------

    def commit(self) -> None:
        """Write the checkpoint if it changed: feeds first (flush + fsync), then the checkpoint, atomically."""
        cp = self.checkpoint
        if cp is None or not self._dirty:
            return
        self._dirty = False
        cp.feeds = sync_feeds(self.crawler) if self.sync else []
        cp.stored = {page: sorted(ids) for page, ids in self._stored.items()}
        cp.seq += 1
        cp.updated_at = utc_now_iso()
        try:
            self.store.save(cp)
        except OSError as e:
            # The previous checkpoint stays in place (atomic write); it is behind, which is safe.
            logger.error("%s: cannot write checkpoint %s: %s", cp.key, self.store.location(cp.key), e)
            self.stats.inc_value("checkpoint/write_errors")
            self._dirty = True
            return
        self.stats.inc_value("checkpoint/writes")

    def completed(self) -> bool:
        """The source is done: its last page was reached and every page up to it is stored (``items``: every item
        requested is done)."""
        cp = self.checkpoint
        if cp is not None and cp.kind == "items":
            return set(self._requested) <= set(cp.done)
        return cp is not None and cp.last_page is not None and cp.watermark >= cp.last_page

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.shared:
            if self._flusher is not None and self._flusher.running:
                self._flusher.stop()
            if self.checkpoint is not None:
                # A worker's job in progress is not finished here (job_finished says when it is).
                self._end_shared(clear=reason == "finished" and not getattr(spider, "worker_id", None))
            return
        cp = self.checkpoint
        if cp is None:
            return
        self._commit_later.cancel()
        if reason == "finished" and self.completed():
            # The export must hold every record on disk before the checkpoint goes: a kill between the two
            # would otherwise lose the last records with nothing left to say so.
            try:
                if self.sync:
                    sync_feeds(self.crawler)
                self.store.delete(cp.key)
            except OSError as e:
                # Kept, and behind: the next run re-fetches what this one stored and dedupe drops the repeats.
                logger.error("%s: cannot clear checkpoint %s: %s", cp.key, self.store.location(cp.key), e)
                self.stats.inc_value("checkpoint/write_errors")
                return
            self.stats.set_value("checkpoint/cleared", True)
            if cp.kind == "items":
                logger.info("%s: source completed (all %d items done); checkpoint cleared", cp.key, len(cp.done))
            else:
                logger.info("%s: source completed (last page %d stored); checkpoint cleared", cp.key, cp.last_page)
            # The job's state ends here: a feed opened later (an empty export is created at close) must not
            # write the cleared checkpoint back, which would make the next run resume past page 1.
            self.checkpoint = None
            return
        self._dirty = True
        self.commit()
        self.checkpoint = None
        why = f"closed: {reason}"
        if cp.kind == "items":
            left = len(set(self._requested) - set(cp.done))
            logger.info("%s: checkpoint kept: %d of %d items done (%s); the next run fetches the other %d", cp.key,
                        len(cp.done), len(self._requested), why if reason != "finished" else
                        f"{len(cp.failed_items)} failed", left)
            return
        if reason == "finished":
            why = (f"page {min(cp.failed_pages)} failed" if cp.failed_pages else
                   "the last page was not reached" if cp.last_page is None else "not every page was stored")
        logger.info("%s: checkpoint kept at page %d (%s); the next run resumes at page %d",
                    cp.key, cp.watermark, why, cp.next_page)

    # --- Shared mode: a Redis store, many workers of one job (mediacrawler.distributed.checkpoint) ---------------
    # Its Redis calls are blocking and run on the reactor thread: one at the start and one at the end of a job, and
    # one per batch of events (CHECKPOINT_REDIS_INTERVAL, or the scheduler's acknowledgement round, which is
    # itself one blocking call), never one per item.

    def job_started(self, spider: Spider, job: str) -> None:
        """A worker starts serving *job*: start or join the run of its shared checkpoint (resume from it)."""
        self.checkpoint, self._token, self._events, self.skip_ids = None, None, [], frozenset()
        self._threads, self.skip_comment_ids = {}, frozenset()
        store: Any = self.store
        try:
            token = store.run_token(spider.name, job)
        except Exception as e:  # noqa: BLE001 - Redis unreachable: the job runs, without a checkpoint
            logger.warning("%s: cannot reach the shared checkpoint (%s); this worker keeps none for the job",
                           job, e)
            return
        if token is None:
            return  # finished meanwhile by another worker: opening a run now would undo the end of the last one
        state = job_state(spider)
        if state is not None and state.kind == "items":
            logger.info("%s: a list of items keeps no shared checkpoint (the shared dedupe cache answers for the "
                        "items stored)", job)
            return
        self._open_shared(spider, check_key(job), token=token, join=False)

    def job_finished(self, spider: Spider, job: str) -> None:
        """*job* has nothing queued or leased anywhere: send the last events; clear the checkpoint if complete."""
        if self.checkpoint is not None and self.checkpoint.key == job:
            self._end_shared(clear=True)

    def acks_pending(self) -> bool:
        """The scheduler is about to acknowledge requests (feeds already synced): their events go first."""
        return self._flush_shared()

    def _open_shared(self, spider: Spider, key: str, *, token: str | None, join: bool) -> None:
        args: Any = getattr(spider, "args", None)
        store: Any = self.store
        start = getattr(args, "start", None)
        try:
            try:
                started, self._token = store.open_run(key, spider=spider.name, token=token, join=join, start=start,
                                                      reset=bool(getattr(args, "reset_checkpoint", False)),
                                                      now=utc_now_iso())
                cp = store.load(key)
            except CheckpointCorrupt as e:
                logger.warning("%s: checkpoint %s is unusable (%s); moved aside to %s, starting from page 1",
                               key, store.location(key), e, store.quarantine(key))
                self.stats.inc_value("checkpoint/corrupt")
                started, self._token = store.open_run(key, spider=spider.name, token=token, start=start,
                                                      now=utc_now_iso())
                cp = store.load(key)
            page, cursor = store.start_of_run(key)
        except Exception as e:  # noqa: BLE001 - Redis unreachable: the job runs, without a checkpoint
            logger.warning("%s: cannot open the shared checkpoint (%s); no checkpoint for this run", key, e)
            self._token = None
            return
        self.checkpoint = cp or Checkpoint(key=key, spider=spider.name)
        threads = self.checkpoint.threads
        comments = {i for entry in threads.values() for i in entry["stored"]}
        # Records this host exported after its last batch of events reached Redis, before the process died: stored
        # all the same. Their posts are sent as stored now (the marks they came from move on with this run's
        # first batch); a comment among them is skipped when its page comes again.
        tail: dict[int, set[str]] = {}
        try:
            marks = store.feed_marks(key, socket.gethostname())
        except Exception as e:  # noqa: BLE001 - Redis unreachable again: at worst a duplicate record
            logger.warning("%s: cannot read the shared checkpoint's feed marks (%s)", key, e)
            marks = []
        for mark in marks:
            for tail_page, ids in scan_feed_tail(mark, key, comments=comments).items():
                tail.setdefault(tail_page, set()).update(ids)
        self._events.extend({"t": "d", "p": tail_page, "id": post_id, "s": 1}
                            for tail_page, ids in tail.items() for post_id in sorted(ids))
        self.skip_ids = frozenset(self.checkpoint.stored_ids()).union(*tail.values())
        self.skip_comment_ids = frozenset(comments)
        if page > 1 or cursor or threads:
            if (state := job_state(spider)) is not None:
                state.resume = Resume(page=page, cursor=cursor,
                                      threads={post: entry["state"] for post, entry in threads.items()})
            self.stats.set_value("checkpoint/resumed_at", page)
        logger.info("%s: %s the run of shared checkpoint %s at page %d%s (%d posts of later pages already stored)",
                    key, "started" if started else "joined", store.location(key), page,
                    f" (cursor {cursor})" if cursor else "", len(self.skip_ids))

    def _flush_shared(self) -> bool:
        """Send the waiting events in one script call, after the feeds (flush + fsync), with the marks the feeds
        reached; False when Redis failed."""
        cp, events = self.checkpoint, self._events
        if cp is None or self._token is None or not events:
            return True
        # Before the scheduler's acknowledgements it synced the feeds already: this finds nothing left to write.
        marks = sync_feeds(self.crawler) if self.sync else []
        self._events = []
        store: Any = self.store
        host = socket.gethostname()
        sent = events + [{"t": "fm", "id": f"{host}:{m.path}", "n": m.size} for m in marks if m.line_format]
        try:
            watermark = store.apply(cp.key, self._token, sent, now=utc_now_iso())
        except Exception as e:  # noqa: BLE001 - kept and sent again (events are idempotent)
            self._events[:0] = events
            self.stats.inc_value("checkpoint/redis_errors")
            if not self._outage:
                self._outage = True
                logger.warning("%s: cannot update the shared checkpoint (%s); %d events wait for Redis",
                               cp.key, e, len(self._events))
            return False
        self._outage = False
        self.stats.inc_value("checkpoint/writes")
        if watermark >= 0:
            cp.watermark, cp.next_page = watermark, watermark + 1
            self.stats.set_value("checkpoint/watermark", watermark)
            self._watermark_stat = watermark
        else:
            logger.debug("%s: the shared checkpoint's run is over (cleared or restarted); %d events dropped",
                         cp.key, len(events))
        return True

    def _end_shared(self, *, clear: bool) -> None:
        cp = self.checkpoint
        assert cp is not None
        store: Any = self.store
        flushed = self._flush_shared()
        self.checkpoint = None
        if not clear or not flushed or self._token is None:
            logger.info("%s: shared checkpoint kept at page %d", cp.key, cp.watermark)
            return
        try:
            result = store.clear(cp.key, self._token)
        except Exception as e:  # noqa: BLE001 - kept: the next run re-fetches what this one stored
            logger.error("%s: cannot clear the shared checkpoint: %s", cp.key, e)
            return
        if result == 1:
            self.stats.set_value("checkpoint/cleared", True)
            logger.info("%s: source completed; shared checkpoint cleared", cp.key)
        elif result == 0:
            logger.info("%s: shared checkpoint kept (the last page was not reached or not every page was stored)",
                        cp.key)
        else:
            logger.info("%s: shared checkpoint already cleared (or taken by a newer run)", cp.key)
