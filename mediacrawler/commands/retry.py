"""``mediacrawler retry [--platform P]``: a retry-only crawl of every job whose retry set holds media
(docs/operations.md, "Incremental sync and retries"). Its records go to a file of their own,
``<job>.retry-<time>.jsonl`` beside the job's ``<job>.jsonl``: the job's file is never rewritten (a crawl of the
job may be appending to it) and gets no second copy of a record."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scrapy.crawler import AsyncCrawlerProcess
from scrapy.exceptions import NotConfigured
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.spiderloader import get_spider_loader

from mediacrawler.commands.options import add_settings_option, checked_settings, missing_dir
from mediacrawler.config import setting
from mediacrawler.extensions.retries import FileRetryStore, RetryCorrupt, RetrySet, retry_store_from_settings
from mediacrawler.feeds import sync_feeds
from mediacrawler.spiders._args import validate_args


def main(argv: Sequence[str] | None = None) -> int:
    """``mediacrawler retry [--platform P] [-s NAME=VALUE …]``: a retry-only crawl of every job with pending media.

    Exit 0: nothing pending (any more); 1: assets still pending or a crawl failed; 2: usage."""
    parser = argparse.ArgumentParser(prog="mediacrawler retry",
                                     description="Retry the media assets that failed in earlier crawls.")
    parser.add_argument("--platform", help="only the jobs of this spider, e.g. weibo")
    add_settings_option(parser)
    parsed = checked_settings(parser, argv, redis=True)
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    # A retry-only crawl walks no listing page: it has no checkpoint to keep.
    settings.set("CHECKPOINT_ENABLED", False, priority="cmdline")
    if (settings.getpriority("OUTPUT_FILE") or 0) < SETTINGS_PRIORITIES["cmdline"]:
        settings.set("OUTPUT_FILE", setting(settings, "RETRY_OUTPUT_FILE"), priority="cmdline")
    try:
        store = retry_store_from_settings(settings)
    except NotConfigured as e:
        print(f"mediacrawler retry: {e}", file=sys.stderr)
        return 2
    if isinstance(store, FileRetryStore):
        missing = missing_dir(setting(settings, "CHECKPOINT_DIR"), setting="CHECKPOINT_DIR")
        if missing:
            print(f"mediacrawler retry: no retry sets: {missing}", file=sys.stderr)
            return 0
    loader = get_spider_loader(settings)
    jobs: list[RetrySet] = []
    status = 0
    for key in store.keys():
        try:
            found = store.load(key)
        except (RetryCorrupt, ValueError, OSError) as e:
            print(f"{key}: unreadable retry set: {e}", file=sys.stderr)
            status = 1
            continue
        if found is not None and found.assets and (opts.platform is None or found.spider == opts.platform):
            jobs.append(found)
    if not jobs:
        print("no media pending retry" + (f" for {opts.platform}" if opts.platform else ""))
        return status
    process = AsyncCrawlerProcess(settings)
    crawlers = []
    for job in jobs:
        try:
            spidercls = loader.load(job.spider)
        except KeyError:
            print(f"{job.key}: no spider named {job.spider!r}", file=sys.stderr)
            status = 1
            continue
        kwargs = {**job.args, "retry_only": "true"}
        error = validate_args(spidercls, kwargs)
        if error:
            print(f"{job.key}: {error}", file=sys.stderr)
            status = 1
            continue
        print(f"{job.key}: retrying {len(job.assets)} media assets of {len(job.post_ids())} posts")
        crawler = process.create_crawler(spidercls)
        process.crawl(crawler, **kwargs)
        crawlers.append((job.key, crawler))
    if crawlers:
        process.start()
    for key, crawler in crawlers:
        pending = crawler.stats.get_value("retry/pending") if crawler.stats else None
        if pending is None or pending:
            print(f"{key}: {'?' if pending is None else pending} media assets still pending", file=sys.stderr)
            status = 1
        else:
            print(f"{key}: every media asset stored")
        for feed in sync_feeds(crawler):
            print(f"{key}: records of the posts read again in {feed.path}")
    return status
