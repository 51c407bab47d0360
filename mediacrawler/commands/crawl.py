"""``scrapy crawl`` with spider arguments validated before the crawler starts.

Scrapy builds the spider inside the crawl, so an invalid ``-a`` value raised from ``__init__`` ends as a traceback and
exit status 1. Here the spider's own argument model checks ``-a`` while the options are processed, before any
crawler (or its log banner) exists: a bad value prints one line naming the argument and exits with status 2, and
nothing is crawled. So does a directory the crawl must write to (FILES_STORE, CHECKPOINT_DIR, OUTPUT_DIR) that
cannot be written. A run the platform refused (e.g. login required), with a listing page that failed for good, or
whose checkpoint could not be written exits with status 1.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.spiderloader import get_spider_loader

from mediacrawler.fsutil import writable_dir_problem
from mediacrawler.media.store import store_scheme
from mediacrawler.spiders._base import FATAL_CLOSE_REASONS, is_worker_mode, validate_args

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCrawlCommand):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        if len(args) != 1:
            return
        assert self.settings is not None
        try:
            spidercls = get_spider_loader(self.settings).load(args[0])
        except KeyError:
            self._fail(f"no spider named {args[0]!r} (see: scrapy list)")
        if is_worker_mode(spidercls, self.settings, opts.spargs):
            # No target with REDIS_URL: a worker; each job brings its own validated arguments.
            extra = sorted(k for k in opts.spargs if not k.startswith("_"))
            if extra:
                self._fail(f"{args[0]}: a worker takes its arguments from each job; drop -a {', '.join(extra)} "
                           f"(or give a target to crawl one job)")
            # Per-process checkpoints cannot follow a shared queue (docs/operations.md): off for workers.
            self.settings.set("CHECKPOINT_ENABLED", False, priority="cmdline")
            print(f"{args[0]}: worker mode: waiting for jobs in Redis (mediacrawler enqueue {args[0]} key=value…)",
                  file=sys.stderr)
            error = self._unwritable_dir()
        else:
            error = validate_args(spidercls, opts.spargs) or self._unwritable_dir()
        if error:
            self._fail(error)

    def _unwritable_dir(self) -> str | None:
        """A one-line error for the first directory this crawl writes to that cannot be written, else None."""
        assert self.settings is not None
        s = self.settings
        dirs = []
        if s.getbool("MEDIA_ENABLED") and store_scheme(str(s.get("FILES_STORE") or "files")) in ("", "file"):
            dirs.append(("FILES_STORE", str(s.get("FILES_STORE") or "files").removeprefix("file://")))
        if s.getbool("CHECKPOINT_ENABLED") and str(s.get("CHECKPOINT_BACKEND") or "file") == "file":
            dirs.append(("CHECKPOINT_DIR", str(s.get("CHECKPOINT_DIR") or "checkpoints")))
        if s.getbool("OUTPUT_ENABLED") and not s.getdict("FEEDS"):  # -o/-O or FEEDS replace the default output
            dirs.append(("OUTPUT_DIR", str(s.get("OUTPUT_DIR") or "output")))
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
        crawler = self._create_crawler(args[0])
        self.crawler_process.crawl(crawler, **opts.spargs)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1
            return
        reason = getattr(crawler.spider, "close_reason", None)
        if reason in FATAL_CLOSE_REASONS:
            print(f"error: {args[0]}: stopped: {reason}", file=sys.stderr)
            self.exitcode = 1
            return
        assert crawler.stats is not None
        if crawler.stats.get_value("checkpoint/write_errors"):
            print(f"error: {args[0]}: the checkpoint could not be written (see the log): the next run may "
                  f"fetch pages again", file=sys.stderr)
            self.exitcode = 1
        failed = getattr(crawler.spider, "pages_failed", 0)
        if failed:
            # The crawl went on past them, but the job is not complete: say so, and not with exit status 0.
            print(f"error: {args[0]}: {failed} listing page(s) failed for good (see the log); run the same "
                  f"command again to fetch them, the checkpoint keeps their place", file=sys.stderr)
            self.exitcode = 1
