"""Prometheus metrics of a crawl, read from the crawler's stats at scrape time (docs/operations.md, "Metrics").

With ``METRICS_PORT`` set, :class:`MetricsExtension` serves ``http://METRICS_HOST:METRICS_PORT/metrics`` from
prometheus-client's WSGI server in a daemon thread (started on ``engine_started``, stopped on ``spider_closed``
off the reactor thread). There are no counters of our own: :class:`StatsCollector` turns the crawler's stats
(the numbers ``Dumping Scrapy stats`` prints) into metric families each time Prometheus scrapes, so the endpoint and
the stats can never disagree. ``METRICS_TEXTFILE`` also writes the final figures to a file at close, in the text
format node-exporter's textfile collector reads.

Families (all labelled ``platform`` and ``job``; ``*_total`` are counters):

- ``mediacrawler_pages_total{status=parsed|failed}``: listing pages (``<platform>/pages``, ``…/pages_failed``)
- ``mediacrawler_posts_total{status=scraped|dropped}``: posts out of the pipelines (exported or dropped)
- ``mediacrawler_comments_total{status=scraped|dropped}``: comments and replies likewise (``-a comments``)
- ``mediacrawler_media_files_total{status=downloaded|uptodate|deduplicated|failed}``: media assets by outcome
- ``mediacrawler_media_bytes_total{status=stored|received}``: bytes written to the store / media bytes received
- ``mediacrawler_media_failures_total{reason}``: failed assets by reason (``media/failed/<reason>``)
- ``mediacrawler_dedupe_hits_total{kind=seen|claimed_elsewhere|checkpoint}``: posts dropped as already emitted
- ``mediacrawler_retries_total{reason}``: Scrapy retries by reason (``retry/reason_count/<reason>``)
- ``mediacrawler_rate_limit_waits_total{reason}``: back-offs on "slow down" answers (``<platform>/rate_limited/…``)
- ``mediacrawler_checkpoint_watermark`` and ``mediacrawler_checkpoint_lag_pages``: the watermark, and pages parsed
  in this run that it has not passed yet (parsed pages whose posts are still in the pipelines, or a failed page)
- ``mediacrawler_up``: 1 while the crawl runs (the textfile says 0)

With ``REDIS_URL`` set, the shared state of the crawl's spider too, read from Redis at scrape time
(:class:`DistributedCollector`, :mod:`mediacrawler.distributed.status`; the same figures on every worker, so
aggregate them with ``max``, not ``sum``):

- ``mediacrawler_queue_depth{platform,job}``: requests queued in the job's shared queue
- ``mediacrawler_leases{platform,job}``: requests leased by workers (in flight); ``mediacrawler_leases_expired``:
  leases past their deadline (their worker is likely dead; the next heartbeat puts them back)
- ``mediacrawler_shared_checkpoint_lag_pages{platform,job}``: pages past the shared checkpoint's watermark that
  are not complete yet
- ``mediacrawler_jobs_waiting{platform}``, ``mediacrawler_workers_live{platform}``: jobs not taken yet, workers
  whose heartbeat is current

Settings: ``METRICS_PORT`` (unset: off), ``METRICS_HOST`` (``127.0.0.1``), ``METRICS_TEXTFILE`` (unset: none).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import run_in_thread

from mediacrawler.config import setting
from mediacrawler.extensions.figures import crawl_figures, number
from mediacrawler.fsutil import write_atomic
from mediacrawler.jobstate import job_state

# prometheus-client (and, for the shared state, redis-py) are imported where metrics are made, never by a crawl
# with METRICS_PORT unset: Scrapy imports this module for every crawl (docs/benchmarks.md, "Start-up").
if TYPE_CHECKING:
    from typing import Self
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

PREFIX = "mediacrawler_"
MEDIA_STATUSES = ("downloaded", "uptodate", "deduplicated", "failed")
DEDUPE_KINDS = {"dedupe/dropped": "seen", "dedupe/claimed_elsewhere": "claimed_elsewhere",
                "checkpoint/skipped_stored": "checkpoint"}


def _by_suffix(stats: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """``{suffix: value}`` of the numeric stats named ``<prefix><suffix>`` (one level: no ``/`` in the suffix)."""
    return {key[len(prefix):]: number(stats, key) for key in stats
            if key.startswith(prefix) and "/" not in key[len(prefix):] and key != prefix}


def stats_to_metrics(stats: Mapping[str, Any], *, platform: str, job: str, running: bool = True,
                     checkpoint_base: int | None = None) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """The metric families for one crawl's *stats* (a plain dict copy). ``checkpoint_base`` is the watermark this
    run started from (the page before its first page); ``None``: the crawl keeps no checkpoint, no lag."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels = ["platform", "job"]
    ids = [platform, job]

    def counter(name: str, doc: str, extra: str | None, values: Mapping[str, float]) -> CounterMetricFamily:
        family = CounterMetricFamily(PREFIX + name, doc, labels=labels + ([extra] if extra else []))
        for value_label, value in sorted(values.items()):
            family.add_metric(ids + ([value_label] if extra else []), value)
        return family

    figures = crawl_figures(stats, platform=platform)
    yield counter("pages", "Listing pages by status", "status", {
        "parsed": figures["pages"], "failed": figures["pages_failed"]})
    yield counter("posts", "Posts out of the item pipelines by status", "status", {
        "scraped": figures["posts"], "dropped": figures["posts_dropped"]})
    yield counter("comments", "Comments and replies out of the item pipelines by status", "status", {
        "scraped": figures["comments"], "dropped": figures["comments_dropped"]})
    yield counter("media_files", "Media assets by outcome", "status",
                  {status: number(stats, f"media/{status}") for status in MEDIA_STATUSES})
    yield counter("media_bytes", "Media bytes written to the store (stored) or received from the network "
                  "(received)", "status", {"stored": figures["bytes"], "received": figures["bytes_received"]})
    yield counter("media_failures", "Failed media assets by reason", "reason", _by_suffix(stats, "media/failed/"))
    yield counter("dedupe_hits", "Posts dropped as already emitted, by kind", "kind",
                  {kind: number(stats, key) for key, kind in DEDUPE_KINDS.items()})
    yield counter("retries", "Requests retried, by reason", "reason", _by_suffix(stats, "retry/reason_count/"))
    yield counter("rate_limit_waits", "Back-offs on rate-limit answers, by reason", "reason",
                  _by_suffix(stats, f"{platform}/rate_limited/"))
    if checkpoint_base is not None:
        watermark = (int(number(stats, "checkpoint/watermark")) if "checkpoint/watermark" in stats
                     else checkpoint_base)
        # Pages this run parsed that the watermark has not passed yet: their posts are still in the pipelines, or a
        # page before them failed. Grows without bound when a page failed for good.
        lag = max(0.0, number(stats, f"{platform}/pages") - max(0, watermark - checkpoint_base))
        family = GaugeMetricFamily(PREFIX + "checkpoint_watermark", "Highest page whose posts are all stored",
                                   labels=labels)
        family.add_metric(ids, watermark)
        yield family
        family = GaugeMetricFamily(PREFIX + "checkpoint_lag_pages", "Pages parsed in this run that the checkpoint "
                                   "watermark has not passed yet", labels=labels)
        family.add_metric(ids, lag)
        yield family
    family = GaugeMetricFamily(PREFIX + "up", "1 while the crawl runs", labels=labels)
    family.add_metric(ids, 1.0 if running else 0.0)
    yield family


class StatsCollector:
    """A prometheus-client collector over ``crawler.stats``: one source of truth, read at scrape time (a
    collector is any object with ``collect()``; no base class: this module imports no prometheus-client)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.platform = ""
        self.job = ""
        self.checkpoint_base: int | None = None
        self.running = False

    def describe(self) -> list[Any]:
        return []  # families depend on the stats (reasons); nothing to check at registration

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        if not self.platform or self.crawler.stats is None:
            return
        # Called from the HTTP server's thread while the reactor updates the stats: dict.copy() runs in C under the
        # GIL, so it is one consistent snapshot, and everything after reads the copy.
        stats = self.crawler.stats.get_stats().copy()
        yield from stats_to_metrics(stats, platform=self.platform, job=self.job, running=self.running,
                                    checkpoint_base=self.checkpoint_base)


def distributed_metrics(state: Mapping[str, Any], *, platform: str) -> Iterator[GaugeMetricFamily]:
    """The gauges of one spider's shared state (:func:`mediacrawler.distributed.status.spider_state`)."""
    from prometheus_client.core import GaugeMetricFamily

    per_job = {
        "queue_depth": ("Requests queued in the job's shared queue", "queued"),
        "leases": ("Requests leased by workers (in flight)", "leased"),
        "leases_expired": ("Leases past their deadline (their worker is likely dead)", "expired_leases"),
        "shared_checkpoint_lag_pages": ("Pages past the shared checkpoint's watermark not complete yet",
                                        "checkpoint_lag_pages"),
    }
    for name, (doc, field) in per_job.items():
        family = GaugeMetricFamily(PREFIX + name, doc, labels=["platform", "job"])
        for job, figures in sorted(state["active"].items()):
            family.add_metric([platform, job], float(figures[field]))
        yield family
    family = GaugeMetricFamily(PREFIX + "jobs_waiting", "Jobs enqueued and not taken by a worker yet",
                               labels=["platform"])
    family.add_metric([platform], float(state["jobs_waiting"]))
    yield family
    family = GaugeMetricFamily(PREFIX + "workers_live", "Workers whose heartbeat is current", labels=["platform"])
    family.add_metric([platform], float(len(state["workers"])))
    yield family


class DistributedCollector:
    """The shared state of one spider in Redis, read at scrape time (a few reads per active job)."""

    def __init__(self, crawler: Crawler) -> None:
        from mediacrawler.distributed.connection import client_from_settings

        settings = crawler.settings
        self.server = client_from_settings(settings)
        self.prefix = str(setting(settings, "DISTRIBUTED_KEY_PREFIX")).rstrip(":")
        self.checkpoint_prefix = str(setting(settings, "CHECKPOINT_REDIS_PREFIX"))
        self.spider = ""

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self.spider:
            return
        import redis

        from mediacrawler.distributed.status import spider_state

        try:
            state = spider_state(self.server, self.prefix, self.spider, checkpoint_prefix=self.checkpoint_prefix)
        except redis.RedisError as e:
            # A scrape must not fail the crawl's other metrics: these families are missing from this one.
            logger.debug("Metrics: shared state not read from Redis: %s", e)
            return
        yield from distributed_metrics(state, platform=self.spider)


class MetricsExtension:
    """Serves the crawl's stats as Prometheus metrics (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        port = setting(settings, "METRICS_PORT")
        if port in (None, ""):
            raise NotConfigured("METRICS_PORT is not set")
        try:
            self.port = int(port)
        except (TypeError, ValueError):
            raise ValueError(f"METRICS_PORT={port!r}: expected an integer >= 0 and <= 65535") from None
        if not 0 <= self.port <= 65535:
            raise ValueError(f"METRICS_PORT={port!r}: expected an integer >= 0 and <= 65535")
        self.host: str = setting(settings, "METRICS_HOST")
        self.textfile: str | None = setting(settings, "METRICS_TEXTFILE") or None
        from prometheus_client import CollectorRegistry

        self.crawler = crawler
        self.collector = StatsCollector(crawler)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.distributed: DistributedCollector | None = None
        if setting(settings, "REDIS_URL") and setting(settings, "DISTRIBUTED_ENABLED"):
            self.distributed = DistributedCollector(crawler)
            self.registry.register(self.distributed)
        self.server: WSGIServer | None = None
        self.thread: threading.Thread | None = None
        crawler.signals.connect(self.engine_started, signal=signals.engine_started)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def url(self) -> str | None:
        if self.server is None:
            return None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/metrics"

    def engine_started(self) -> None:
        from prometheus_client import start_http_server

        try:
            self.server, self.thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as e:
            # The crawl matters more than its metrics: say so once, loudly, and go on without them.
            logger.error("Metrics endpoint not started: cannot listen on %s:%s: %s", self.host, self.port, e)
            assert self.crawler.stats is not None
            self.crawler.stats.set_value("metrics/error", str(e))
            return
        # With METRICS_PORT=0 the system picks the port: this line is how a scraper (or a test) finds it.
        logger.info("Metrics endpoint at %s", self.url)

    def spider_opened(self, spider: Spider) -> None:
        platform = getattr(spider, "platform", None) or spider.name
        self.collector.platform = str(platform)
        state = job_state(spider)
        self.collector.job = str(state.job if state is not None else spider.name)
        if self.distributed is not None:
            self.distributed.spider = spider.name
        if setting(self.crawler.settings, "CHECKPOINT_ENABLED") and state is not None:
            # The checkpoint extension (earlier in EXTENSIONS) has set the job's resume point by now.
            self.collector.checkpoint_base = state.first_page()[0] - 1
        self.collector.running = True

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        self.collector.running = False
        server, self.server = self.server, None
        # The textfile's fsync and the server's shutdown() (it waits up to 0.5 s for the serve loop to notice) run
        # in a thread, never on the reactor.
        await run_in_thread(self._close, server)

    def _close(self, server: WSGIServer | None) -> None:
        if self.textfile:
            from prometheus_client import generate_latest

            try:
                write_atomic(self.textfile, generate_latest(self.registry))
            except OSError as e:
                logger.error("Cannot write METRICS_TEXTFILE %s: %s", self.textfile, e)
            else:
                logger.info("Final metrics written to %s", self.textfile)
        if server is not None:
            server.shutdown()
            server.server_close()
