"""``scrapy crawl`` with spider arguments validated before the crawler starts.

Scrapy builds the spider inside the crawl, so an invalid ``-a`` value raised from ``__init__`` ends as a traceback and
exit status 1. Here the spider's own argument model checks ``-a`` while the options are processed, before any
crawler (or its log banner) exists: a bad value prints one line naming the argument and exits with status 2, and
nothing is crawled. So does a directory the crawl must write to (FILES_STORE, CHECKPOINT_DIR, OUTPUT_DIR) that
cannot be written, a setting that does not fit its declaration in settings.py, and a REDIS_URL that is misspelt,
unreachable within REDIS_CONNECT_TIMEOUT or refuses the password (:func:`startup_problem`). A crawl that Redis
failed later (``redis_unavailable``, ``redis_auth_failed``, ``redis_data_lost``) exits 1
(:func:`redis_exit_status`). A run the platform refused (e.g. login required), with a listing page that failed for
good, whose checkpoint could not be written, with a spider exception, whose listing ended short of its end without
a reason (:func:`listing_outcome`), or that was stopped before it could close (a second SIGTERM/SIGINT, or
SHUTDOWN_GRACE ran out: the checkpoint keeps the last completed page) exits with status 1.

Given no target (``-a uid=…``), the crawl takes the targets of ``<PLATFORM>_TARGETS`` (``"<argument>:<value>"``
entries): one crawler per target, each its own job and checkpoint, run side by side in this process, with the
``-a`` values (``start=3``) applied to each. With no target and no such setting, ``REDIS_URL`` makes the crawl a
worker; with neither, one line says both ways and the exit status is 2. See docs/operations.md, "Incremental sync
and retries".
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.spiderloader import get_spider_loader

from mediacrawler.config import setting
from mediacrawler.fsutil import writable_dir_problem
from mediacrawler.jobstate import job_state
from mediacrawler.commands.options import startup_problem
from mediacrawler.commands.process_exit import collect_once_at_exit, freeze_once_started
from mediacrawler.library import default_library_dir
from mediacrawler.media.store import store_scheme
from mediacrawler.pipelines.records import records_problem
from mediacrawler.spiders._args import is_worker_mode, target_names, validate_args
from mediacrawler.spiders._base import FATAL_CLOSE_REASONS

if TYPE_CHECKING:
    import argparse

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings


def targets_setting(spidercls: type[Spider]) -> str:
    """The setting listing a spider's configured targets, e.g. ``WEIBO_TARGETS``."""
    return f"{str(getattr(spidercls, 'platform', spidercls.name)).upper()}_TARGETS"


def configured_targets(spidercls: type[Spider], settings: BaseSettings) -> list[dict[str, str]]:
    """The targets of ``<PLATFORM>_TARGETS`` as spider arguments (``"uid:7365120894"`` → ``{"uid": "7365120894"}``).

    The setting is a list, or on the command line a JSON list or comma-separated entries. ValueError names the
    entry that is not ``<argument>:<value>`` with one of the spider's target arguments."""
    name = targets_setting(spidercls)
    raw = settings.get(name) or []
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.lstrip().startswith("[") else [p for p in raw.split(",") if p.strip()]
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{name} must be a list of \"<argument>:<value>\" entries")
    allowed = target_names(spidercls)
    targets = []
    for entry in raw:
        key, sep, value = str(entry).partition(":")
        if not sep or key.strip() not in allowed or not value.strip():
            raise ValueError(f"{name} entry {entry!r}: expected <argument>:<value> with argument one of "
                             f"{', '.join(sorted(allowed))}")
        targets.append({key.strip(): value.strip()})
    return targets


#: Close reasons of a lost Redis: what happened and how to go on, for the one line of the exit status 1.
REDIS_CLOSE_REASONS = {
    "redis_unavailable": "Redis was unreachable for DISTRIBUTED_REDIS_GIVE_UP seconds; what this worker held comes "
                         "back to the queue when its leases expire, run the same command again once Redis is back",
    "redis_auth_failed": "Redis refused the credentials of REDIS_URL (password changed?); fix REDIS_URL and run the "
                         "same command again",
    "redis_data_lost": "Redis lost the job's data (restarted without persistence): the source was not completed and "
                       "its mark was not advanced; enable AOF (appendonly yes) and run the same command again",
}


def redis_exit_status(name: str, reason: object) -> int:
    """1 with one line on stderr when the crawl closed because Redis failed it (:data:`REDIS_CLOSE_REASONS`),
    else 0."""
    if reason not in REDIS_CLOSE_REASONS:
        return 0
    print(f"error: {name}: stopped: {reason}: {REDIS_CLOSE_REASONS[str(reason)]}", file=sys.stderr)
    return 1


class Command(ScrapyCrawlCommand):
    #: Spider arguments of each configured target (``<PLATFORM>_TARGETS``); empty: one crawl of ``-a`` alone.
    targets: list[dict[str, str]] = []

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        assert self.settings is not None
        error = startup_problem(self.settings)
        if error:
            self._fail(error)
        if len(args) != 1:
            return
        try:
            spidercls = get_spider_loader(self.settings).load(args[0])
        except KeyError:
            self._fail(f"no spider named {args[0]!r} (see: scrapy list)")
        names = target_names(spidercls)
        given = any(k in names for k in opts.spargs)
        try:
            self.targets = [] if given else configured_targets(spidercls, self.settings)
        except ValueError as e:
            self._fail(f"{args[0]}: {e}")
        if self.targets:
            for target in self.targets:
                error = validate_args(spidercls, {**opts.spargs, **target})
                if error:
                    self._fail(f"{error} (from {targets_setting(spidercls)})")
            error = self._unwritable_dir()
        elif names and not given and not is_worker_mode(spidercls, self.settings, opts.spargs):
            # Neither a target nor REDIS_URL: say every way to give one (the model's own message first).
            error = validate_args(spidercls, opts.spargs)
            if error:
                self._fail(f"{error}; or list targets in {targets_setting(spidercls)} (e.g. "
                           f"{targets_setting(spidercls)}=[\"{sorted(names)[-1]}:…\"]), or set REDIS_URL to run "
                           f"as a worker taking jobs from Redis")
            error = self._unwritable_dir()
        elif is_worker_mode(spidercls, self.settings, opts.spargs):
            # No target with REDIS_URL: a worker; each job brings its own validated arguments.
            extra = sorted(k for k in opts.spargs if not k.startswith("_"))
            if extra:
                self._fail(f"{args[0]}: a worker takes its arguments from each job; drop -a {', '.join(extra)} "
                           f"(or give a target to crawl one job)")
            # A per-process checkpoint cannot follow a shared queue: workers share each job's checkpoint in Redis
            # (docs/operations.md, "Many workers on one Redis"). An explicit -s CHECKPOINT_BACKEND of another kind
            # turns checkpoints off for the worker, as a file checkpoint per worker would say nothing true.
            if (self.settings.getpriority("CHECKPOINT_BACKEND") or 0) < SETTINGS_PRIORITIES["cmdline"]:
                self.settings.set("CHECKPOINT_BACKEND", "redis", priority="cmdline")
            elif str(setting(self.settings, "CHECKPOINT_BACKEND")).lower() != "redis":
                self.settings.set("CHECKPOINT_ENABLED", False, priority="cmdline")
            print(f"{args[0]}: worker mode: waiting for jobs in Redis (mediacrawler enqueue {args[0]} key=value…)",
                  file=sys.stderr)
            error = self._unwritable_dir()
        else:
            error = validate_args(spidercls, opts.spargs) or self._unwritable_dir()
        if error:
            self._fail(error)
        error = records_problem(self.settings)
        if error:
            self._fail(error)

    def _unwritable_dir(self) -> str | None:
        """A one-line error for the first directory this crawl writes to that cannot be written, else None."""
        assert self.settings is not None
        s = self.settings
        dirs = []
        if setting(s, "MEDIA_ENABLED") and store_scheme(str(setting(s, "FILES_STORE"))) in ("", "file"):
            dirs.append(("FILES_STORE", str(setting(s, "FILES_STORE")).removeprefix("file://")))
            if setting(s, "LIBRARY_ENABLED"):
                library = str(setting(s, "LIBRARY_DIR")).removeprefix("file://")
                dirs.append(("LIBRARY_DIR", library or default_library_dir(str(setting(s, "FILES_STORE")))))
        if setting(s, "CHECKPOINT_ENABLED") and str(setting(s, "CHECKPOINT_BACKEND")) == "file":
            dirs.append(("CHECKPOINT_DIR", str(setting(s, "CHECKPOINT_DIR"))))
        if setting(s, "OUTPUT_ENABLED") and not s.getdict("FEEDS"):  # -o/-O or FEEDS replace the default output
            dirs.append(("OUTPUT_DIR", str(setting(s, "OUTPUT_DIR"))))
        for name, path in dirs:
            problem = writable_dir_problem(path)
            if problem is not None:
                return f"{name}={path} cannot be written: {problem}"
        return None

    @staticmethod
    def _fail(message: str) -> None:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            super().run(args, opts)
            return
        assert self.crawler_process
        runs: list[tuple[Crawler, dict[str, Any]]] = []
        for target in self.targets or [{}]:
            # One crawler per configured target, side by side (as `mediacrawler demo` runs its jobs): each is its
            # own job, with its own checkpoint, mark and output file.
            runs.append((self.crawler_process.create_crawler(args[0]), {**opts.spargs, **target}))
        for crawler, kwargs in runs:
            freeze_once_started(crawler)
            self.crawler_process.crawl(crawler, **kwargs)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1
            return
        for crawler, _ in runs:
            state = job_state(crawler.spider)
            name = (state.job if state is not None else args[0]) if self.targets else args[0]
            self.exitcode = max(self.exitcode, self._exit_status(name, crawler))
        if not any(self._stopped_by_force(crawler) for crawler, _ in runs):
            collect_once_at_exit()  # every crawler closed its feeds, checkpoint and store

    @staticmethod
    def _stopped_by_force(crawler: Crawler) -> bool:
        """The reactor stopped before the spider closed (a second signal, SHUTDOWN_GRACE)."""
        assert crawler.stats is not None
        return bool(crawler.stats.get_value("shutdown/forced") or crawler.stats.get_value("finish_reason") is None)

    @staticmethod
    def _exit_status(name: str, crawler: Crawler) -> int:
        assert crawler.stats is not None
        if Command._stopped_by_force(crawler):
            # The reactor was stopped before the spider closed (Scrapy's "forcing unclean shutdown", or our
            # SHUTDOWN_GRACE): what was in flight is lost for this run, so this is no success.
            print(f"error: {name}: stopped before the crawl could close (second signal or SHUTDOWN_GRACE); the "
                  f"checkpoint keeps the last completed page, run the same command again to go on",
                  file=sys.stderr)
            return 1
        spider = crawler.spider
        state = job_state(spider)
        reason = state.close_reason if state is not None else None
        if redis_exit_status(name, reason):
            return 1
        if reason in FATAL_CLOSE_REASONS:
            # The last line a user reads names what to do (the credential variable), not only the reason.
            refusal = getattr(spider, "refusal_message", None)
            print(f"error: {name}: stopped ({reason}): {refusal(reason) if refusal else reason}", file=sys.stderr)
            return 1
        status = 0
        if crawler.stats.get_value("checkpoint/write_errors"):
            print(f"error: {name}: the checkpoint could not be written (see the log): the next run may "
                  f"fetch pages again", file=sys.stderr)
            status = 1
        for line in listing_outcome(name, crawler):
            print(f"error: {line}", file=sys.stderr)
            status = 1
        return status


def listing_outcome(name: str, crawler: Crawler) -> list[str]:
    """What is wrong with how a closed crawl covered its source, one line each (empty: nothing; any line means
    exit status 1): spider exceptions (``spider_exceptions/*``: a callback raised, its answer's posts may be
    lost), listing pages that failed for good or vanished (dropped as duplicates, a refused or repeated cursor:
    the spider fails those with a reason), and a source that ended short of its end without a reason (neither the
    platform's last page, nor the high-water mark, ``-a max_pages``, a failure or another close reason)."""
    assert crawler.stats is not None
    stats = crawler.stats.get_stats()
    spider = crawler.spider
    state = job_state(spider)
    lines = []
    kinds = sorted(k.removeprefix("spider_exceptions/") for k in stats
                   if k.startswith("spider_exceptions/") and k != "spider_exceptions/count")
    if kinds:
        count = stats.get("spider_exceptions/count") or sum(int(stats[f"spider_exceptions/{k}"]) for k in kinds)
        lines.append(f"{name}: {count} spider exception(s) ({', '.join(kinds)}; see the tracebacks in the log): "
                     f"what those answers held may be missing; run the same command again, the checkpoint keeps "
                     f"the place of every page not completed")
    if state is not None and state.items_failed:
        reasons = state.items_failed
        first = next(iter(reasons))
        advice = ("fix that, then run the same command again" if state.rerun_helps is False
                  else "run the same command again to fetch them, the checkpoint keeps which items are done")
        lines.append(f"{name}: {len(reasons)} of {len(state.items)} item(s) failed for good (the first, {first}: "
                     f"{reasons[first]}; see the log); {advice}")
        return lines
    failed = state.pages_failed if state is not None else 0
    if state is not None and failed:
        # The crawl went on past them, but the job is not complete: say so, and not with exit status 0.
        # The first failure says what happened (its HTTP status and URL); re-running is advised only where it
        # can help (not after a 404 at a wrong root: the reason names the setting to check).
        reasons = state.failed_reasons
        first = f"the first at page {min(reasons)}: {reasons[min(reasons)]}; " if reasons else ""
        hopeless = state.rerun_helps is False  # None: not known (no failure said so)
        advice = ("fix that, then run the same command again" if hopeless
                  else "run the same command again to fetch them, the checkpoint keeps their place")
        lines.append(f"{name}: {failed} listing page(s) failed for good ({first}see the log); {advice}")
    elif (stats.get("finish_reason") == "finished" and state is not None
          and not (state.exhausted or state.stopped_at_mark or state.stopped_at_max_pages
                   or spider.distributed or spider.worker_id or spider.args.retry_only)):
        lines.append(f"{name}: the listing ended after {state.pages_fetched} page(s) without the platform's "
                     f"end-of-list signal, a failure or a stop (see the log): the source may not be complete; run "
                     f"the same command again, the checkpoint keeps its place")
    return lines
