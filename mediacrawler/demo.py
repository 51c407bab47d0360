"""``mediacrawler demo``: the main job on the embedded default.

Starts the platform sandbox (``mediacrawler_sandbox``, docs/sandbox.md; a source checkout's dev install) on
127.0.0.1, crawls it with every spider (each platform's demo jobs), writes records to
``<out>/<spider>/<job>.jsonl`` and media to ``<out>/files``, logs to ``<out>/crawl.log``, and prints a short
summary; the stored files show under readable names in ``<out>/library``. No account and no network beyond
loopback. Run it twice: the second run appends no record and stores no new media ("0 new posts, 0 new media
files"); the first run's records stay (docs/operations.md, "Output files").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mediacrawler.config import setting

#: The demo jobs: (spider name, spider arguments). The sandbox's default world has these users.
DEMO_JOBS: list[tuple[str, dict[str, str]]] = [
    ("weibo", {"uid": "7365120894"}),
    ("weibo", {"uid": "1669879400", "comments": "all"}),  # with every comment and reply (spiders/_threads.py)
    ("weibo", {"uid": "6000000001"}),  # the showcase: Live Photos, a mixed post, covers (docs/sandbox.md)
    ("weibo", {"keyword": "猫"}),
    # With every Bilibili extra: subtitles (JSON + SRT), danmaku XML and chapters, written into each part's MP4;
    # one upload has no DASH, only a durl in 3 segments, joined (docs/sandbox.md, "bilibili.py").
    ("bilibili", {"mid": "2", "subtitles": "true", "danmaku": "true", "chapters": "true",
                  "comments": "all"}),
    ("facebook", {"page": "100000000000001", "comments": "all"}),
    ("xhs", {"user": "5f0e1d2c3b4a596877665544"}),
    ("douyin", {"aweme": "7300000000000000101,7300000000000000201,https://v.douyin.com/iSbxV101/"}),
]


def _settings(settings: Any, out: Path, sandbox_url: str, sandbox_token: str, log_level: str) -> Any:
    """The demo's settings over the command's: what ``-s`` gave (e.g. ``-s RECORDS_DB=postgresql://…``) wins."""
    from scrapy.settings import SETTINGS_PRIORITIES

    overrides = {
        "WEIBO_BASE_URL": f"{sandbox_url}/weibo",
        "BILIBILI_API_URL": f"{sandbox_url}/bilibili",
        "BILIBILI_COMMENT_URL": f"{sandbox_url}/bilibili/comment",
        "FACEBOOK_GRAPH_URL": f"{sandbox_url}/facebook/v19.0",
        "XHS_WEB_URL": f"{sandbox_url}/xhs",
        "DOUYIN_SHARE_URL": f"{sandbox_url}/douyin",
        "DOUYIN_WEB_URL": f"{sandbox_url}/douyin",
        "DOUYIN_SHORT_URL": f"{sandbox_url}/douyin/v",
        # The sandbox's own token (not a secret: it opens nothing but the sandbox). A real one comes from the
        # FACEBOOK_ACCESS_TOKEN environment variable and is never a setting.
        "FACEBOOK_ACCESS_TOKEN": sandbox_token,
        "OUTPUT_DIR": str(out),
        "FILES_STORE": str(out / "files"),
        "CHECKPOINT_DIR": str(out / "checkpoints"),
        # The sandbox is ours and local: no politeness delay needed. Real platforms keep the defaults.
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "LOG_FILE": str(out / "crawl.log"),
        "LOG_LEVEL": log_level,
        "LOG_FILE_APPEND": False,
    }
    for key, value in overrides.items():
        if (settings.getpriority(key) or 0) < SETTINGS_PRIORITIES["cmdline"]:
            settings.set(key, value, priority="cmdline")
    return settings


def _records(out: Path, *, comments: bool = False) -> tuple[int, set[tuple[str, str]]]:
    """Records in the demo's JSON Lines files of posts (or of comments) under *out* (one per line), and the
    (platform, post or comment id) pairs they hold."""
    count, ids = 0, set()
    field = "comment_id" if comments else "post_id"
    for path in out.glob("*/*.jsonl"):
        if path.name.endswith(".comments.jsonl") != comments:
            continue
        with path.open("rb") as f:
            for line in f:
                if line.strip():
                    count += 1
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        record = json.loads(line)
                        ids.add((str(record["platform"]), str(record[field])))
    return count, ids


def _summary_rows(crawlers: list[Any], elapsed: float) -> list[str]:
    rows = [f"{'job':<40} {'posts':>6} {'comments':>8} {'pages':>6} {'media':>6} {'new':>5} {'failed':>6} "
            f"{'MiB':>8} {'status':>10}"]
    totals = {"posts": 0, "comments": 0, "pages": 0, "media": 0, "new": 0, "failed": 0, "bytes": 0}
    for crawler in crawlers:
        stats = crawler.stats.get_stats()
        spider = crawler.spider
        platform = getattr(spider, "platform", spider.name)
        row = {
            "posts": stats.get("item_scraped_count", 0) - stats.get("comments/scraped", 0),
            "comments": stats.get("comments/scraped", 0),
            "pages": stats.get(f"{platform}/pages", 0),
            "media": sum(stats.get(f"media/{s}", 0) for s in ("downloaded", "deduplicated", "uptodate", "failed")),
            "new": stats.get("media/downloaded", 0),
            "failed": stats.get("media/failed", 0),
            "bytes": stats.get("downloader/response_bytes", 0),
        }
        for k in totals:
            totals[k] += row[k]
        rows.append(
            f"{spider.job:<40} {row['posts']:>6} {row['comments']:>8} {row['pages']:>6} {row['media']:>6} "
            f"{row['new']:>5} {row['failed']:>6} "
            f"{row['bytes'] / 2**20:>8.2f} {stats.get('finish_reason', '?'):>10}"
        )
    rows.append(
        f"{'total':<40} {totals['posts']:>6} {totals['comments']:>8} {totals['pages']:>6} {totals['media']:>6} "
        f"{totals['new']:>5} "
        f"{totals['failed']:>6} "
        f"{totals['bytes'] / 2**20:>8.2f} {elapsed:>9.1f}s"
    )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns 0 when every job finished and wrote its records."""
    parser = argparse.ArgumentParser(prog="mediacrawler demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo-output", help="output directory (default: demo-output)")
    parser.add_argument("--log-level", default="INFO", help="level of <out>/crawl.log (default: INFO)")

    from scrapy.crawler import AsyncCrawlerProcess

    from mediacrawler.commands.options import add_settings_option, checked_settings
    from mediacrawler.records.store import records_uri, shown

    parsed = checked_settings(add_settings_option(parser), argv)
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    # The sandbox is a test double, not part of the product: a source checkout's dev install brings it.
    try:
        from mediacrawler_sandbox.facebook import DEFAULT_TOKEN
        from mediacrawler_sandbox.process import start_sandbox
    except ModuleNotFoundError as exc:
        if exc.name != "mediacrawler_sandbox":
            raise
        print("mediacrawler demo: the sandbox (mediacrawler_sandbox) is not installed: run `make demo` from a "
              "source checkout of mediacrawler", file=sys.stderr)
        return 2

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    # Nothing of an earlier run is removed: the records are appended to, the marks stop each job where the last
    # run did, so a second run adds what is new (nothing, on the unchanged sandbox).
    before, known = _records(out)
    _, comments_known = _records(out, comments=True)
    started = time.monotonic()
    with start_sandbox() as sandbox:
        print(f"sandbox: {sandbox.url}  (the bundled platform double; all traffic stays on 127.0.0.1)")
        process = AsyncCrawlerProcess(_settings(settings, out, sandbox.url, DEFAULT_TOKEN, opts.log_level))
        crawlers = []
        for name, kwargs in DEMO_JOBS:
            crawler = process.create_crawler(name)
            crawlers.append(crawler)
            process.crawl(crawler, **kwargs)
        process.start()
    elapsed = time.monotonic() - started
    logging.shutdown()
    print("\n".join(_summary_rows(crawlers, elapsed)))
    now, ids = _records(out)
    _, comment_ids = _records(out, comments=True)
    new_media = sum(c.stats.get_value("media/downloaded", 0) for c in crawlers)
    # New: posts no earlier run recorded. A list of items (the Douyin job) is read again on every run, as asked;
    # its records come again, the same posts, and are said apart.
    again = (now - before) - len(ids - known)
    again_note = f" ({again} of them the same posts read again: a list of items is read on every run)" if again else ""
    print(f"this run: {len(ids - known)} new posts, {len(comment_ids - comments_known)} new comments, {new_media} "
          f"new media files; records: {before} before, {now} now{again_note}")
    objects = out / "files" / "objects"
    stored = [p for p in objects.rglob("*") if p.is_file()] if objects.exists() else []
    print(f"records: {out}/<spider>/<job>.jsonl (comments: <job>.comments.jsonl)   media: {len(stored)} files in "
          f"{objects}   log: {out / 'crawl.log'}")
    print(f"library: {out / 'library'}/<platform>/<author> (<id>)/<date> <post id>/ (the same files, readable names)")
    given = ("-s RECORDS_DB=…" if setting(settings, "RECORDS_DB")
             else f"-s CHECKPOINT_DIR={setting(settings, 'CHECKPOINT_DIR')}")
    print(f"records database: {shown(records_uri(settings))}   as a spreadsheet: mediacrawler export --format csv "
          f"{given} -s FILES_STORE={setting(settings, 'FILES_STORE')} --out posts.csv")
    failed = [c.spider.job for c in crawlers if c.stats.get_value("finish_reason") != "finished"]
    if failed:
        print(f"not finished: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
