"""RunsExtension: one row per crawl run in the records database's ``runs`` table, whoever started the crawl
(``scrapy crawl``, ``mediacrawler get``, scrapyd, a worker, the web page), so the jobs page knows every job's last
run and the progress of one still running (docs/records.md, "Records database"; docs/web.md, "Jobs").

The row is inserted on ``spider_opened``, written again every ``RUNS_INTERVAL`` seconds with the figures so far
(:func:`~mediacrawler.extensions.figures.crawl_figures`: the counters of the metrics endpoint) and on
``spider_closed`` with the close reason. A worker (``REDIS_URL``, no target) writes one row per job it serves,
from ``job_started`` to ``job_finished``, with the figures of that job only. A killed crawl leaves its row without
``finished_at``: readers take a row not written for a few intervals as stopped (web/jobs.py).

Writes go through the records pipeline's writer thread (:func:`~mediacrawler.pipelines.records.shared_writer`),
never on the reactor thread; a tick while the last write is still on its way is skipped. A write that fails is
logged once and counted (``runs/write_failed``); the crawl goes on. The row holds the spider, job key, host, worker
id, pid, times and figures: no setting, no argument value (the job key and the reason pass through the scrubber).
Off (``NotConfigured``) when ``RECORDS_ENABLED`` is off.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import LoopingCall

from mediacrawler import signals as mc_signals
from mediacrawler.config import setting
from mediacrawler.extensions.figures import crawl_figures
from mediacrawler.jobstate import job_state, new_run_id
from mediacrawler.pipelines.records import release_writer, seen_now, shared_writer
from mediacrawler.records.store import RUN_COUNTS, records_uri, shown
from mediacrawler.scrub import scrub

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

    from mediacrawler.pipelines.records import _Writer

logger = logging.getLogger(__name__)

#: The close reason of a worker's job that ended without ``job_finished`` (its data was lost in Redis).
JOB_LOST = "job_lost"


class RunsExtension:
    """Keeps this crawl's row of the ``runs`` table current (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "RECORDS_ENABLED"):
            raise NotConfigured("RECORDS_ENABLED is off: no records database to keep the runs in")
        self.interval: float = setting(settings, "RUNS_INTERVAL")
        self.uri = records_uri(settings)
        self.connect_timeout: float = setting(settings, "RECORDS_CONNECT_TIMEOUT")
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.host = socket.gethostname()
        self.writer: _Writer | None = None
        self.platform = ""
        #: The row of the run in progress, without its figures and times of writing; None: no run open.
        self.run: dict[str, Any] | None = None
        #: The figures when the run began (a worker's job starts with the counters of the jobs before it).
        self.baseline: dict[str, int] = {}
        self.task: LoopingCall | None = None
        self._writing: set[Deferred[Any]] = set()
        self._failure_logged = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.job_started, signal=mc_signals.job_started)
        crawler.signals.connect(self.job_finished, signal=mc_signals.job_finished)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        self.writer = shared_writer(self.uri, self.connect_timeout)
        self.platform = str(getattr(spider, "platform", None) or spider.name)
        if not getattr(spider, "worker_id", None):  # a worker's rows begin with each job (job_started)
            state = job_state(spider)
            self._begin(spider, state.job if state is not None and state.job else spider.name, baseline=False)
        self.task = LoopingCall(self._tick)
        self.task.start(self.interval, now=False)

    def job_started(self, spider: Spider, job: str) -> None:
        if self.run is not None:
            self._end(JOB_LOST)
        self._begin(spider, job, baseline=True)

    def job_finished(self, spider: Spider, job: str) -> None:
        if self.run is not None:
            self._end("finished")

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.task is not None and self.task.running:
            self.task.stop()
        if self.run is not None:
            self._end(reason)
        if self._writing:
            await maybe_deferred_to_future(DeferredList(list(self._writing)))
        writer, self.writer = self.writer, None
        if writer is not None:
            await release_writer(writer)

    # --- The row ----------------------------------------------------------------------------------------------
    def _begin(self, spider: Spider, job: str, *, baseline: bool) -> None:
        worker = getattr(spider, "worker_id", None)
        state = job_state(spider)
        self.run = {"run_id": state.run_id if state is not None else new_run_id(), "spider": spider.name,
                    "job": scrub(job), "host": self.host, "worker": str(worker) if worker else None,
                    "pid": os.getpid(), "started_at": seen_now(), "update_interval": self.interval}
        self.baseline = self._figures() if baseline else {}
        self._write(None)

    def _end(self, reason: str) -> None:
        self._write(scrub(str(reason)))
        self.run = None

    def _figures(self) -> dict[str, int]:
        # A copy first: the stats are a plain dict the reactor thread (this one) alone changes.
        return crawl_figures(self.stats.get_stats().copy(), platform=self.platform)

    def _tick(self) -> None:
        if self.run is not None and not self._writing:
            self._write(None)

    def _write(self, reason: str | None) -> None:
        assert self.run is not None and self.writer is not None
        now = seen_now()
        figures = self._figures()
        row = {**self.run, "updated_at": now, "finished_at": now if reason is not None else None,
               "finish_reason": reason,
               **{name: max(0, figures[name] - self.baseline.get(name, 0)) for name in RUN_COUNTS}}
        writer = self.writer
        d = writer.call(self._write_row, writer, row)
        self._writing.add(d)
        d.addBoth(self._written, d)

    @staticmethod
    def _write_row(writer: _Writer, row: dict[str, Any]) -> None:
        """Writer thread: the row upserted (the store was opened by the writer's first call)."""
        if writer.store is None:
            raise RuntimeError("the records database is not open")
        writer.store.write_run(row)

    def _written(self, result: Any, d: Deferred[Any]) -> None:
        self._writing.discard(d)
        if result is None:
            self._failure_logged = False
            return
        self.stats.inc_value("runs/write_failed")
        if not self._failure_logged:
            self._failure_logged = True
            logger.error("runs: cannot write this run's row to %s: %s (counted in runs/write_failed)",
                         shown(self.uri), scrub(result.getErrorMessage()))
