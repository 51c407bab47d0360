"""A Weibo timeline crawl with media off: ``scrapy crawl weibo`` against a plain Scrapy spider, paired in one run.

    .venv/bin/python benchmarks/bench_timeline.py                 # 100 pages x 20 posts, 3 rounds, ~1-2 minutes
    .venv/bin/python benchmarks/bench_timeline.py --rounds 5 --pages 100 --per-page 20

Starts the platform sandbox (one timeline of ``pages x per_page`` posts; a fifth of them long texts, each with one
``/statuses/extend`` request) and runs, per round and alternating the order:

- ``ours``: ``scrapy crawl weibo -a uid=…`` with the project's settings, media off (``MEDIA_ENABLED=0``): the
  checkpoint, its skip pipeline, normalize, dedupe, marks and retry sets on, JSON Lines to OUTPUT_DIR;
- ``plain``: :class:`PlainTimelineSpider` below, by ``scrapy runspider`` with Scrapy's own settings: the same listing
  and extend requests, the same pure parser (``mediacrawler.parsers.weibo``), posts yielded as dicts
  (``dataclasses.asdict``) to a JSON Lines feed (``-o``). What differs is everything around the parser.

Both with DOWNLOAD_DELAY 0, AutoThrottle off, CONCURRENT_REQUESTS 16, 4 per domain, LOG_LEVEL INFO. Measured per
run: the whole process wall (start to exit) and the in-process rate (items / Scrapy's ``elapsed_time_seconds``);
both outputs must hold every post of the timeline. Prints the medians, ``ours/plain`` as the ratio of the medians and
as the median of each round's pair (steadier on a loaded machine); target: at least 0.7.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import scrapy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mediacrawler.parsers import weibo as parser  # noqa: E402
from mediacrawler.items import Source  # noqa: E402
from mediacrawler.parsers._common import utc_now_iso  # noqa: E402

UID = 7365120894
COMMON = ["-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "CONCURRENT_REQUESTS=16",
          "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=4", "-s", "LOG_LEVEL=INFO", "-s", "FEED_EXPORT_ENCODING=utf-8",
          "-s", "LOGSTATS_INTERVAL=0"]


class PlainTimelineSpider(scrapy.Spider):
    """What a user would write by hand: listing pages one after the other, one extend request per long text."""

    name = "plain_timeline"

    def __init__(self, base: str, uid: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.uid = base.rstrip("/"), uid

    def page_url(self, page: int) -> str:
        query = {"containerid": parser.timeline_containerid(self.uid), "page": page}
        return f"{self.base}/api/container/getIndex?{urlencode(query)}"

    async def start(self) -> Any:
        yield scrapy.Request(self.page_url(1), cb_kwargs={"page_no": 1})

    def parse(self, response: Any, page_no: int) -> Iterator[Any]:
        source = Source(spider=self.name, job=f"weibo-uid-{self.uid}", page=page_no)
        now = utc_now_iso()
        page = parser.parse_index(json.loads(response.text), source=source, fetched_at=now)
        for post in page.posts:
            yield dataclasses.asdict(post)
        for post_id, mblog in page.incomplete.items():
            yield scrapy.Request(f"{self.base}/statuses/extend?{urlencode({'id': post_id})}", callback=self.extend,
                                 cb_kwargs={"mblog": mblog, "source": source}, dont_filter=True)
        if not page.is_last:
            yield scrapy.Request(self.page_url(page_no + 1), cb_kwargs={"page_no": page_no + 1})

    def extend(self, response: Any, mblog: dict[str, Any], source: Source) -> Iterator[Any]:
        long_text = parser.parse_long_text(json.loads(response.text))
        post = parser.parse_mblog(mblog, source=source, fetched_at=utc_now_iso(), long_text=long_text)
        yield dataclasses.asdict(post)


def _env(project: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for name in ("REDIS_URL", "CACHE_BACKEND", "CHECKPOINT_BACKEND", "SCRAPY_SETTINGS_MODULE"):
        env.pop(name, None)
    if project:
        env["SCRAPY_SETTINGS_MODULE"] = "mediacrawler.settings"
    return env


_STAT = re.compile(r"'(elapsed_time_seconds|item_scraped_count)': ([0-9.]+)")


def run(case: str, weibo_url: str, work: Path, expected: set[str]) -> dict[str, Any]:
    out = work / case
    if case == "ours":
        argv = [sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={UID}",
                "-s", f"WEIBO_BASE_URL={weibo_url}",
                "-s", "MEDIA_ENABLED=0", "-s", f"OUTPUT_DIR={out}", "-s", f"CHECKPOINT_DIR={out / 'checkpoints'}",
                "-s", f"FILES_STORE={out / 'files'}", *COMMON]
    else:
        argv = [sys.executable, "-m", "scrapy", "runspider", str(Path(__file__).resolve()), "-a", f"base={weibo_url}",
                "-a", f"uid={UID}", "-o", f"{out / 'plain.jsonl'}:jsonlines", *COMMON]
    out.mkdir(parents=True)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=out, env=_env(case == "ours"), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=600)
    wall = time.perf_counter() - started
    stats = {k: float(v) for k, v in _STAT.findall(done.stderr)}
    ids: list[str] = []
    for path in out.rglob("*.jsonl"):
        ids += [json.loads(line)["post_id"] for line in path.read_text("utf-8").splitlines()]
    if done.returncode != 0 or set(ids) != expected or len(ids) != len(expected):
        raise SystemExit(f"{case}: exit {done.returncode}, {len(ids)} records, {len(expected - set(ids))} posts "
                         f"missing\n{done.stderr[-3000:]}")
    return {"case": case, "wall_s": wall, "elapsed_s": stats["elapsed_time_seconds"],
            "items": int(stats["item_scraped_count"]),
            "rate": stats["item_scraped_count"] / stats["elapsed_time_seconds"]}


def main(argv: list[str] | None = None) -> int:
    from mediacrawler_sandbox.process import start_sandbox
    from mediacrawler_sandbox.world import build_world

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--per-page", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write every measurement here")
    opts = ap.parse_args(argv)
    world = build_world(weibo_users=(UID,), weibo_pages=opts.pages, weibo_per_page=opts.per_page)
    expected = {str(p.id) for p in world.weibo.timeline(UID)}
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, Scrapy {scrapy.__version__}, load {os.getloadavg()[0]:.2f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {opts.pages} pages x {opts.per_page} posts",
          flush=True)
    results: list[dict[str, Any]] = []
    with start_sandbox(weibo_users=(UID,), weibo_pages=opts.pages, weibo_per_page=opts.per_page) as sb, \
            tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp:
        for r in range(opts.rounds):
            # Alternate the order per round, so a neighbour's load does not always hit the same case.
            for case in ("ours", "plain") if r % 2 == 0 else ("plain", "ours"):
                res = run(case, sb.weibo_url, Path(tmp) / f"r{r}", expected)
                res["round"] = r
                results.append(res)
                print(f"  {case:5} round {r}: {res['items']} items, wall {res['wall_s']:.2f} s, in-process "
                      f"{res['elapsed_s']:.2f} s = {res['rate']:.0f} items/s", flush=True)
    med = {c: {k: statistics.median(x[k] for x in results if x["case"] == c) for k in ("wall_s", "rate")}
           for c in ("ours", "plain")}
    print("\n| case | wall (s) | items/s in process |\n|---|---|---|")
    for c in ("plain", "ours"):
        print(f"| {c} | {med[c]['wall_s']:.2f} | {med[c]['rate']:.0f} |")
    pairs = [({x["case"]: x for x in results if x["round"] == r}) for r in range(opts.rounds)]
    in_process = [p["ours"]["rate"] / p["plain"]["rate"] for p in pairs]
    by_wall = [p["plain"]["wall_s"] / p["ours"]["wall_s"] for p in pairs]
    print(f"ours/plain: {med['ours']['rate'] / med['plain']['rate']:.2f}x in process, "
          f"{med['plain']['wall_s'] / med['ours']['wall_s']:.2f}x by whole-process wall (ratio of the medians); "
          f"median of the rounds' pairs {statistics.median(in_process):.2f}x and {statistics.median(by_wall):.2f}x "
          f"(pairs: {', '.join(f'{x:.2f}' for x in in_process)}); target >= 0.7")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
