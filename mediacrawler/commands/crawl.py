"""``scrapy crawl`` with spider arguments validated before the crawler starts.

Scrapy builds the spider inside the crawl, so an invalid ``-a`` value raised from ``__init__`` ends as a traceback and
exit status 1. Here the spider's own argument model checks ``-a`` first: a bad value prints one line naming the
argument and exits with status 2 (usage error), and nothing is crawled. A run the platform refused (e.g. login
required) exits with status 1.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError

from mediacrawler.spiders._base import FATAL_CLOSE_REASONS, validate_args

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCrawlCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            super().run(args, opts)
            return
        assert self.crawler_process
        try:
            spidercls = self.crawler_process.spider_loader.load(args[0])
        except KeyError:
            raise UsageError(f"no spider named {args[0]!r} (see: scrapy list)", print_help=False) from None
        error = validate_args(spidercls, opts.spargs)
        if error:
            print(f"error: {error}", file=sys.stderr)
            self.exitcode = 2
            return
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
