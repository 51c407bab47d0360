"""RecordsPipeline: every post, author, media asset and comment upserted into the records database by its platform
id (docs/records.md, "Records database").

It runs before dedupe, so a post seen again still refreshes its counts, ``last_seen_at`` and ``metrics_history``;
a post the spider read again only for that (``-a refresh``, :data:`~mediacrawler.contracts.REFRESH_ONLY`) is
dropped right after its upsert: no media download, no feed line. The media results (hash, path, status) are
written when the post leaves the pipelines (``item_scraped``).

Writes go to one thread of their own (one writer per process; SQLite, network and fsync never on the reactor
thread), the records of one reactor turn in one transaction, and those that come while this pipeline's previous
transaction runs in the next one (each transaction costs a commit, whatever it holds). A write that fails is
logged and counted (``records/write_failed``); the post goes on to the feed all the same.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from mediacrawler import signals as mc_signals
from mediacrawler.config import setting
from mediacrawler.contracts import REFRESH_ONLY, walk_assets
from mediacrawler.items import as_plain
from mediacrawler.jobstate import job_state, new_run_id
from mediacrawler.parsers._common import utc_now_iso
from mediacrawler.records.rows import Rows, add_record
from mediacrawler.records.schema import SchemaTooNew
from mediacrawler.records.store import RecordStore, Written, open_store, records_uri, shown
from mediacrawler.scrub import scrub

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class RefreshedOnly(DropItem):
    """Dropped by the records pipeline: a post read again only to refresh its counts (``-a refresh``)."""


def seen_now() -> str:
    """Now in UTC to the microsecond: the ``first_seen_at``/``last_seen_at`` of a batch."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def records_problem(settings: Any) -> str | None:
    """One line when the records database of ``settings`` cannot be opened (unreachable, refused, made by a newer
    mediacrawler), else None; checked by the crawl command before any crawler exists. Blocking."""
    if not setting(settings, "RECORDS_ENABLED"):
        return None
    uri = records_uri(settings)
    try:
        store = open_store(uri, now=utc_now_iso(), connect_timeout=setting(settings, "RECORDS_CONNECT_TIMEOUT"))
    except SchemaTooNew as exc:
        return f"RECORDS_DB: {exc}"
    except Exception as exc:  # the drivers' errors (sqlite3.Error, psycopg.Error) and OSError
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return f"RECORDS_DB={shown(uri)} cannot be opened: {scrub(reason)}"
    store.close()
    return None


def _plain(item: Any) -> dict[str, Any]:
    """An item as plain dicts. ItemAdapter.asdict probes every nested value (1 ms for a Weibo repost with its
    pictures, docs/records.md "Export"); a dataclass item takes :func:`~mediacrawler.items.as_plain` (30 µs)."""
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        plain: dict[str, Any] = as_plain(item)
        return plain
    return ItemAdapter(item).asdict()


class _Writer:
    """The one writer of a database in this process (a thread and a store), shared by the crawlers of one process
    (`mediacrawler demo`, several targets of one `scrapy crawl`) that write to the same database."""

    def __init__(self, uri: str, connect_timeout: float) -> None:
        self.uri = uri
        self.pool = ThreadPool(minthreads=1, maxthreads=1, name="records")
        self.pool.start()
        from twisted.internet import reactor

        # A crawl stopped hard never reaches close_spider: the thread must not keep the process alive.
        reactor.addSystemEventTrigger("during", "shutdown", self.stop)  # type: ignore[attr-defined]
        self.users = 0
        self.store: RecordStore | None = None
        self.error: BaseException | None = None
        self._opened: Deferred[Any] = self.call(self._open, uri, connect_timeout)
        self._opened.addCallbacks(self._set_store, self._set_error)

    def _open(self, uri: str, connect_timeout: float) -> RecordStore:
        # Set here, in the writer's thread: the calls queued behind this one find it open, before the reactor
        # thread hears of it (a user that writes before awaiting ready() must not see it closed).
        self.store = open_store(uri, now=utc_now_iso(), connect_timeout=connect_timeout)
        return self.store

    def _set_store(self, store: RecordStore) -> None:
        self.store = store

    def _set_error(self, failure: Any) -> None:
        self.error = failure.value

    def ready(self) -> Deferred[None]:
        """Fires once the store is open (or failed to open: :attr:`error`), for each user that asks."""
        d: Deferred[None] = Deferred()
        self._opened.addBoth(lambda _: d.callback(None))
        return d

    def stop(self) -> None:
        if not self.pool.joined:
            self.pool.stop()

    def call(self, func: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        from twisted.internet import reactor

        return deferToThreadPool(reactor, self.pool, func, *args, **kwargs)  # type: ignore[arg-type]


#: uri → the writer of this process.
_WRITERS: dict[str, _Writer] = {}


def shared_writer(uri: str, connect_timeout: float) -> _Writer:
    """The writer of ``uri`` in this process (started on first use), with one more user: every component that
    writes the database (this pipeline, extensions/runs.py) takes it so, and gives it back with
    :func:`release_writer`."""
    writer = _WRITERS.get(uri)
    if writer is None:
        writer = _WRITERS[uri] = _Writer(uri, connect_timeout)
    writer.users += 1
    return writer


async def release_writer(writer: _Writer) -> None:
    """One user less; the last one closes the store (in its thread) and stops the thread."""
    writer.users -= 1
    if writer.users > 0:
        return
    if _WRITERS.get(writer.uri) is writer:
        del _WRITERS[writer.uri]
    if writer.store is not None:
        await maybe_deferred_to_future(writer.call(writer.store.close))
    writer.stop()


class RecordsPipeline:
    """Upserts records into ``RECORDS_DB`` (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "RECORDS_ENABLED"):
            raise NotConfigured("RECORDS_ENABLED is off")
        self.uri = records_uri(settings)
        self.batch_max: int = setting(settings, "RECORDS_BATCH_MAX")
        self.connect_timeout: float = setting(settings, "RECORDS_CONNECT_TIMEOUT")
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.crawler = crawler
        #: The run of a spider without a job state: one ``metrics_history`` row per post per run.
        self.run_id = new_run_id()
        self.writer: _Writer | None = None
        self._pending: list[tuple[Any, bool, str]] = []  # (item, media results only, run id)
        self._waiters: list[Deferred[None]] = []
        self._scheduled: Any = None
        self._writing: set[Deferred[Any]] = set()
        self._failure_logged = False
        mc_signals.forward_item_signals(crawler)
        crawler.signals.connect(self.item_scraped, signal=mc_signals.item_scraped_sync)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def open_spider(self, spider: Any = None) -> None:
        self.writer = writer = shared_writer(self.uri, self.connect_timeout)
        await maybe_deferred_to_future(writer.ready())
        if writer.error is not None:
            await self._release()
            raise writer.error
        # A worker's runs are its jobs, each with its own id (its row in ``runs``); none has begun yet.
        run = "" if getattr(self.crawler.spider, "worker_id", None) else f" (run {self._run_id()})"
        logger.info("Records database: %s%s", shown(self.uri), run)

    async def process_item(self, item: Any) -> Any:
        if not is_item(item):
            return item
        await maybe_deferred_to_future(self._enqueue(item, media_only=False))
        if (ItemAdapter(item).get("extra") or {}).get(REFRESH_ONLY):
            self.stats.inc_value("records/refreshed")
            raise RefreshedOnly(f"post {ItemAdapter(item).get('post_id')} refreshed in the records database",
                                log_level="DEBUG")
        return item

    def item_scraped(self, item: Any, spider: Any = None) -> None:
        # The media pipeline's results, once the post is through it; nobody waits for this write but the close.
        # Only assets with a status have any (media off: none but those normalize failed).
        if is_item(item) and next(walk_assets(item, with_status=True), None) is not None:
            self._enqueue(item, media_only=True)

    def _run_id(self) -> str:
        # The job's run (its row in ``runs``, extensions/runs.py), read when the item comes: a worker's next job
        # is another run.
        state = job_state(self.crawler.spider)
        return state.run_id if state is not None else self.run_id

    def _enqueue(self, item: Any, *, media_only: bool) -> Deferred[None]:
        self._pending.append((item, media_only, self._run_id()))
        waiter: Deferred[None] = Deferred()
        self._waiters.append(waiter)
        if self._scheduled is None and not self._writing:
            # On a later turn: every item of this turn goes in the same transaction. While a transaction of ours
            # runs, the items wait for it to end (_written), as they would behind it in the writer's queue.
            from twisted.internet import reactor

            self._scheduled = reactor.callLater(0, self._flush)  # type: ignore[attr-defined]
        return waiter

    def _flush(self) -> None:
        self._scheduled = None
        if self._writing:
            return  # _written flushes what came meanwhile
        entries, waiters = self._pending, self._waiters
        self._pending, self._waiters = [], []
        if not entries:
            return
        assert self.writer is not None
        d = self.writer.call(self._write, entries)
        self._writing.add(d)
        d.addBoth(self._written, d, waiters, len(entries))

    def _write(self, entries: list[tuple[Any, bool, str]]) -> Written:
        """Worker thread: the entries as rows, ``RECORDS_BATCH_MAX`` records of one run per transaction."""
        store = self.writer.store if self.writer is not None else None
        if store is None:
            raise RuntimeError("the records database is not open")
        total = Written()
        batches: list[tuple[str, list[tuple[Any, bool, str]]]] = []
        for entry in entries:  # in order; a new batch where the run changes (a worker's next job) or it is full
            if not batches or batches[-1][0] != entry[2] or len(batches[-1][1]) >= self.batch_max:
                batches.append((entry[2], []))
            batches[-1][1].append(entry)
        for run_id, batch in batches:
            rows = Rows()
            for item, media_only, _ in batch:
                record = _plain(item)
                if media_only:
                    scraped = Rows()
                    add_record(scraped, record)
                    for key, row in scraped.media.items():
                        if row["status"] is not None:
                            rows.media[key] = row
                else:
                    add_record(rows, record, with_results=False)
            written = store.write(rows, run_id=run_id, seen_at=seen_now())
            for name in ("posts", "media", "comments", "history"):
                setattr(total, name, getattr(total, name) + getattr(written, name))
        return total

    def _written(self, result: Any, d: Deferred[Any], waiters: list[Deferred[None]], count: int) -> None:
        self._writing.discard(d)
        if isinstance(result, Written):
            self._failure_logged = False
            for name in ("posts", "media", "comments", "history"):
                if getattr(result, name):
                    self.stats.inc_value(f"records/{name}", getattr(result, name))
        else:
            self.stats.inc_value("records/write_failed", count)
            if not self._failure_logged:
                self._failure_logged = True
                logger.error("records: cannot write %d records to %s: %s (counted in records/write_failed; the "
                             "feeds still get them)", count, shown(self.uri), result.getErrorMessage())
        if self._pending and self._scheduled is None:
            self._flush()  # what came while this transaction ran, in one
        for waiter in waiters:
            waiter.callback(None)

    async def close_spider(self, spider: Any = None) -> None:
        if self._scheduled is not None and self._scheduled.active():
            self._scheduled.cancel()
            self._scheduled = None
        while self._writing or self._pending:
            if not self._writing:
                self._flush()
            await maybe_deferred_to_future(DeferredList(list(self._writing)))
        await self._release()

    async def _release(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            await release_writer(writer)
