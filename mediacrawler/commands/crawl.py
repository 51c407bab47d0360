"""``scrapy crawl`` with spider arguments validated before the crawler starts.

Scrapy builds the spider inside the crawl, so an invalid ``-a`` value raised from ``__init__`` ends as a traceback and
exit status 1. Here the spider's own argument model checks ``-a`` while the options are processed, before any
crawler (or its log banner) exists: a bad value prints one line naming the argument and exits with status 2, and
nothing is crawled. A run the platform refused (e.g. login required) exits with status 1.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.spiderloader import get_spider_loader

from mediacrawler.spiders._base import FATAL_CLOSE_REASONS, validate_args

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
        error = validate_args(spidercls, opts.spargs)
        if error:
            self._fail(error)

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
        failed = getattr(crawler.spider, "pages_failed", 0)
        if failed:
            # The crawl went on past them, but the job is not complete: say so, and not with exit status 0.
            print(f"error: {args[0]}: {failed} listing page(s) failed for good (see the log); run the same "
                  f"command again to fetch them, the checkpoint keeps their place", file=sys.stderr)
            self.exitcode = 1
