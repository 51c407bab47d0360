"""Worker mode: one process serves the jobs queued in Redis (``mediacrawler enqueue``), one after the other,
through the spider it drives (docs/operations.md, "Many workers on one Redis").

A worker is ``scrapy crawl <platform>`` with ``REDIS_URL`` and no target: its spider is built without a job, and
:class:`Worker` (run by the spider's ``start()``) takes jobs from the :class:`~.jobs.JobBoard`. For each job the
spider validates the job's arguments and builds its per-job state the way a one-job crawl builds it
(:meth:`JobSpider.take_job`); the first worker on a job yields the job's first requests
(:meth:`JobSpider.seed_requests`), the others serve the job's shared queue. A job ends when nothing of it is queued
or leased anywhere; :data:`~.jobs.job_started` and :data:`~.jobs.job_finished` frame it for the extensions.

This module is below the spiders (tests/test_layers.py): it knows the spider only through :class:`JobSpider`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Protocol

import redis
from scrapy import Request

from mediacrawler.config import setting
from mediacrawler.distributed import jobs
from mediacrawler.distributed.scheduler import in_thread, sleep

logger = logging.getLogger(__name__)


class JobSpider(Protocol):
    """What a worker drives: a platform spider (spiders/_base.py) built as a worker."""

    name: str
    crawler: Any
    #: This worker's id (also the owner of its dedupe claims).
    worker_id: str | None
    #: The key of the job being served (computed by the spider from the job's arguments).
    job: str
    #: Which job's shared queue this process serves (the distributed scheduler reads it); None: no job.
    job_queue: str | None

    def take_job(self, args: Mapping[str, str]) -> None:
        """Serve a job with these arguments: validate them and build the job's state as a one-job crawl does;
        ``ValueError`` (the one line that says why) when they are refused."""

    def seed_requests(self) -> Iterable[Request]:
        """The job's first requests: its posts with media pending retry, then its first listing page."""


class Worker:
    """Takes jobs from the job board and drives ``spider`` through them until none came for
    ``DISTRIBUTED_IDLE_CLOSE`` seconds (or Redis lost the jobs' data)."""

    def __init__(self, spider: JobSpider) -> None:
        self.spider = spider
        settings = spider.crawler.settings
        self.board = jobs.JobBoard(settings, spider.name, worker=str(spider.worker_id))
        self.idle_close = setting(settings, "DISTRIBUTED_IDLE_CLOSE")
        self.poll = setting(settings, "DISTRIBUTED_JOB_POLL")
        #: Set when Redis lost a job's data: the worker serves no further job.
        self.lost = False

    async def requests(self) -> AsyncIterator[Request]:
        """The requests of every job this worker seeds, as the spider's ``start()`` yields them."""
        spider = self.spider
        logger.info("%s: worker %s waiting for jobs (mediacrawler enqueue %s key=value…)", spider.name,
                    spider.worker_id, spider.name)
        idle_since = time.monotonic()
        while True:
            try:
                job = await in_thread(self.board.take)
            except redis.RedisError as e:
                logger.warning("%s: cannot read the job list (%s); retrying", spider.name, e)
                job = None
                idle_since = time.monotonic()  # an outage is not idleness
            if job is None:
                if time.monotonic() - idle_since >= self.idle_close:
                    logger.info("%s: no job for %.0f s; the worker closes", spider.name, self.idle_close)
                    return
                await sleep(self.poll)
                continue
            refused = self._adopt(job)
            if refused is not None:
                await in_thread(self.board.bury, job, refused)
                continue
            async for request in self._serve(job):
                yield request
            if self.lost:
                return
            idle_since = time.monotonic()

    def _adopt(self, job: jobs.Job) -> str | None:
        """Hand ``job`` to the spider (its per-job state built afresh); why not, when its arguments are refused."""
        spider = self.spider
        try:
            spider.take_job(job.args)
        except ValueError as e:
            return str(e)
        if spider.job != job.key:
            logger.warning("%s: job key %s computed as %s here", spider.name, job.key, spider.job)
        spider.job_queue = job.key  # the queue is the one the job was filed under
        logger.info("%s: worker %s serves job %s", spider.name, spider.worker_id, job.key)
        spider.crawler.signals.send_catch_log(signal=jobs.job_started, spider=spider, job=job.key,
                                              generation=job.generation)
        return None

    async def _serve(self, job: jobs.Job) -> AsyncIterator[Request]:
        """Seed ``job`` when this worker must, then wait until it is finished everywhere (or lost)."""
        spider = self.spider
        seed = job.seed
        while True:
            if seed:
                logger.info("%s: seeding job %s", spider.name, job.key)
                for request in spider.seed_requests():
                    yield request
                seed = False
            await sleep(self.poll)
            try:
                state = await in_thread(self.board.state, job, spider)
            except redis.RedisError:
                continue
            if state in ("done", "lost"):
                break
            seed = state == "seed"
        if state == "lost":
            # Neither finished nor failed: its data is gone. No job_finished (no mark moves); the scheduler finds
            # the stamp gone and closes the spider with redis_data_lost (exit status 1).
            logger.error("%s: job %s: its generation stamp is gone from Redis (restarted without persistence?); "
                         "the worker stops serving jobs", spider.name, job.key)
            self.lost = True
            return
        logger.info("%s: job %s finished", spider.name, job.key)
        spider.crawler.signals.send_catch_log(signal=jobs.job_finished, spider=spider, job=job.key)
        spider.job_queue = None
