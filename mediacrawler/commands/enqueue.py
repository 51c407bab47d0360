"""``mediacrawler enqueue <platform> key=value…``: validate a job with the spider's own arguments and queue it in
Redis for the workers (docs/operations.md, "Many workers on one Redis")."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import redis
from scrapy.spiderloader import get_spider_loader

from mediacrawler.commands.options import add_settings_option, checked_settings
from mediacrawler.config import setting
from mediacrawler.distributed.jobs import JobBoard
from mediacrawler.jobstate import job_state
from mediacrawler.scrub import mask_url, scrub
from mediacrawler.spiders._args import WORKER_KWARG, validate_args


def main(argv: Sequence[str] | None = None) -> int:
    """``mediacrawler enqueue <platform> key=value…``: validate a job and queue it for the workers."""
    parser = argparse.ArgumentParser(
        prog="mediacrawler enqueue",
        description="Queue a crawl job for the workers (scrapy crawl <platform> -s REDIS_URL=… with no target).")
    parser.add_argument("platform", help="spider name, e.g. weibo")
    parser.add_argument("args", nargs="*", metavar="key=value", help="spider arguments, as with -a")
    parser.add_argument("--redis-url", help="Redis to queue into (default: REDIS_URL)")
    add_settings_option(parser)
    parsed = checked_settings(parser, argv, redis=True, options={"redis_url": "REDIS_URL"})
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    if not setting(settings, "REDIS_URL"):
        print("error: set REDIS_URL (or --redis-url): jobs are queued in Redis", file=sys.stderr)
        return 2
    kwargs: dict[str, str] = {}
    for pair in opts.args:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            print(f"error: {pair!r} is not key=value", file=sys.stderr)
            return 2
        kwargs[name] = value
    try:
        spidercls = get_spider_loader(settings).load(opts.platform)
    except KeyError:
        print(f"error: no spider named {opts.platform!r} (see: scrapy list)", file=sys.stderr)
        return 2
    error = validate_args(spidercls, kwargs)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # Built as a crawl of this job builds its spider (never as a worker, whatever the arguments say).
    state = job_state(spidercls(**{k: v for k, v in kwargs.items() if k != WORKER_KWARG}))
    key = (state.job if state is not None else None) or opts.platform
    try:
        queued = JobBoard(settings, spidercls.name, worker="enqueue").enqueue(key, kwargs)
    except redis.RedisError as e:
        print(f"error: Redis at {mask_url(str(setting(settings, 'REDIS_URL')))}: {scrub(str(e))}", file=sys.stderr)
        return 1
    if not queued:
        print(f"{key}: already queued or running; not queued again", file=sys.stderr)
        return 1
    print(f"queued {key} (workers: scrapy crawl {spidercls.name} -s REDIS_URL=…)")
    return 0
