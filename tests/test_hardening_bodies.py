"""Hostile servers, end to end: bodies that inflate past their limit, listing pages that never reach the spider.

Each test runs a real crawl in a subprocess against the sandbox's ``/hostile`` mount (gzip bombs, redirect loops)
and checks what a user would: the exit status, the records, the log, and the crawl's peak memory (read from the
kernel's own accounting of the finished child, ``ru_maxrss``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import MediaAsset, Post

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894
#: Peak RSS a crawl may reach while hostile bodies are thrown at it (issue #16: "the bombs: under 400 MiB").
BOMB_RSS_LIMIT_KIB = 400 * 1024

# Runs a command and reports its peak RSS (KiB) on the last line of stderr: the kernel's maximum resident set of the
# waited-for children of this small wrapper, i.e. of the crawl (and of any helper process it started).
PEAK_RSS = textwrap.dedent(
    """
    import resource, subprocess, sys
    proc = subprocess.run(sys.argv[1:])
    print("peak_rss_kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
    sys.exit(proc.returncode)
    """
)

MEDIA_RUNNER = textwrap.dedent(
    """
    import json, sys
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings
    import mediacrawler.settings
    from mediacrawler.items import MediaAsset, Post

    config = json.load(open(sys.argv[1]))
    settings = Settings()
    settings.setmodule(mediacrawler.settings, priority="project")  # the project's settings, as `scrapy crawl` has
    settings.update(config["settings"], priority="cmdline")

    class HostileMediaSpider(scrapy.Spider):
        name = "hostile_media"

        async def start(self):
            # The posts come from a listing's callback, so the crawl closes once they are processed (not at the
            # engine's next 5 s heartbeat).
            yield scrapy.Request(config["listing"], callback=self.parse_listing, dont_filter=True,
                                 meta={"handle_httpstatus_all": True})

        def parse_listing(self, response):
            for d in config["posts"]:
                d = dict(d, media=[MediaAsset(**m) for m in d["media"]], reposted=None, author=None, source=None)
                d.pop("metrics")
                yield Post(**d)

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(HostileMediaSpider)
    process.crawl(crawler)
    process.start()
    json.dump(crawler.stats.get_stats(), open(config["stats_path"], "w"), default=str)
    """
)


def peak_rss_kib(stderr: str) -> int:
    last = [line for line in stderr.splitlines() if line.startswith("peak_rss_kib ")][-1]
    return int(last.split()[1])


def crawl_weibo(tmp_path: Path, base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl weibo`` as a user runs it (cwd = the project), under the peak-RSS wrapper."""
    (tmp_path / "peak.py").write_text(PEAK_RSS)
    cmd = [
        sys.executable, str(tmp_path / "peak.py"), sys.executable, "-m", "scrapy", "crawl", "weibo", *args,
        "-s", f"WEIBO_BASE_URL={base_url}", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
        "-s", "MEDIA_ENABLED=0", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
        "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-s", "RETRY_TIMES=1", "-O", str(tmp_path / "out.jsonl"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "WEIBO_COOKIE"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def test_an_api_answer_that_inflates_past_its_limit_fails_its_page_in_bounded_memory(sandbox: Any,
                                                                                    tmp_path: Path) -> None:
    # 600 MiB of valid JSON (a page with no cards, padded with spaces) in about 600 KiB of gzip.
    proc = crawl_weibo(tmp_path, f"{sandbox.url}/hostile/gzip/600/weibo", "-a", f"uid={UID}")
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "listing page(s) failed" in proc.stderr and "Traceback" not in proc.stderr
    assert "page 1 failed for good: too-large" in log
    assert "Traceback" not in log
    assert peak_rss_kib(proc.stderr) < BOMB_RSS_LIMIT_KIB
    # The page is kept for the next run: nothing was marked done.
    checkpoint = json.loads((tmp_path / "checkpoints" / f"weibo-uid-{UID}.json").read_text())
    assert checkpoint["watermark"] == 0 and 1 in checkpoint["failed_pages"]


def test_a_listing_page_redirected_to_itself_fails_and_the_exit_status_says_so(sandbox: Any,
                                                                               tmp_path: Path) -> None:
    # Every listing URL answers 302 to itself: the redirect is a duplicate, which the scheduler drops without a
    # callback or errback. Each page must still end as failed; after three in a row the spider stops.
    sandbox.reset()
    proc = crawl_weibo(tmp_path, f"{sandbox.url}/hostile/loop/weibo", "-a", f"uid={UID}")
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "3 listing page(s) failed" in proc.stderr
    for page in (1, 2, 3):
        assert f"page {page} failed for good: request dropped by the scheduler (duplicate of" in log
    assert "3 pages in a row failed; stopping at page 3" in log
    assert "Traceback" not in log
    loop_requests = [r for r in sandbox.requests() if r["path"].startswith("/hostile/loop/")]
    assert len(loop_requests) == 3  # one per page: nothing retried for ever


def test_media_bodies_that_inflate_past_the_limit_fail_with_a_reason_in_bounded_memory(sandbox: Any,
                                                                                     tmp_path: Path) -> None:
    # Four "images" of about 1 MiB on the wire, each inflating to 1 GiB, beside one good picture.
    good = f"{sandbox.url}/media/img/7.jpg"
    bombs = [f"{sandbox.url}/hostile/gzip/1024/bomb{i}.png" for i in range(4)]
    post = Post(platform="weibo", post_id="1", url="https://weibo.com/1/a", author=None, created_at=None,
                media=[MediaAsset(kind="image", key=f"b{i}", url=u) for i, u in enumerate(bombs)]
                + [MediaAsset(kind="image", key="good", url=good)])
    feed = tmp_path / "items.jsonl"
    settings = {
        "ITEM_PIPELINES": {"mediacrawler.pipelines.media.MediaStorePipeline": 300}, "EXTENSIONS": {}, "ADDONS": {},
        "FILES_STORE": str(tmp_path / "files"), "FEEDS": {str(feed): {"format": "jsonlines"}},
        "LOG_FILE": str(tmp_path / "crawl.log"), "DOWNLOAD_DELAY": 0, "AUTOTHROTTLE_ENABLED": False,
        "RETRY_TIMES": 0}
    config = {"posts": [asdict(post)], "settings": settings, "stats_path": str(tmp_path / "stats.json"),
              "listing": f"{sandbox.url}/"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "runner.py").write_text(MEDIA_RUNNER)
    (tmp_path / "peak.py").write_text(PEAK_RSS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    proc = subprocess.run([sys.executable, "peak.py", sys.executable, "runner.py", "config.json"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [record] = [json.loads(line) for line in feed.read_text().splitlines()]
    by_key = {a["key"]: a for a in record["media"]}
    for i in range(4):
        assert by_key[f"b{i}"]["status"] == "failed"
        assert by_key[f"b{i}"]["error"].startswith("too-large")
    assert by_key["good"]["status"] == "downloaded"
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["media/failed/too-large"] == 4
    assert peak_rss_kib(proc.stderr) < BOMB_RSS_LIMIT_KIB
