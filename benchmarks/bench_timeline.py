"""A Weibo timeline crawl with media off: ``scrapy crawl weibo`` against a plain Scrapy spider, paired in one run.

    .venv/bin/python benchmarks/bench_timeline.py                 # 100 pages x 20 posts, 3 rounds, ~1-2 minutes
    .venv/bin/python benchmarks/bench_timeline.py --rounds 5 --pages 100 --per-page 20

Starts the platform sandbox (one timeline of ``pages x per_page`` posts; a fifth of them long texts, each with one
``/statuses/extend`` request) and runs, per round and alternating the order:

- ``ours``: ``scrapy crawl weibo -a uid=…`` with the project's settings, media off (``MEDIA_ENABLED=0``): the
  checkpoint, its skip pipeline, normalize, dedupe, marks and retry sets on, JSON Lines to OUTPUT_DIR;
- ``plain``: :class:`PlainTimelineSpider` below, by ``scrapy runspider`` with Scrapy's own settings: the same
  listing and extend requests, the same pure parser (``mediacrawler.parsers.weibo``), posts yielded as dicts
  (``dataclasses.asdict``) to a JSON Lines feed (``-o``). What differs is everything around the parser.

Both with DOWNLOAD_DELAY 0, AutoThrottle off, CONCURRENT_REQUESTS 16, 4 per domain, LOG_LEVEL INFO. Measured per
run: the whole process wall (start to exit), its CPU time (user + system, from the process's own rusage by
``os.wait4``), peak RSS, and the in-process rate (items / Scrapy's ``elapsed_time_seconds``); both outputs must
hold every post of the timeline. The headline is ``plain/ours`` by whole-process wall, as the median of each
round's pair (both cases run back to back in one round, in alternating order); target: at least 0.9x (issue #27).

    .venv/bin/python benchmarks/bench_timeline.py --profile /tmp/ours.prof   # one `ours` run under cProfile
    git archive 643ba31 | tar -x -C /tmp/base && .venv/bin/python benchmarks/bench_timeline.py --base /tmp/base

``--profile`` runs ``ours`` once as ``python -m cProfile -o PATH -m scrapy crawl weibo …`` and prints the top
functions by own time and by cumulative time (profiled times are slower than real ones: read the shares).
``--base DIR`` adds a third case per round, ``base``: the same crawl from another checkout (before/after a change).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import pstats
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


def _env(project: bool, root: Path = ROOT) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    for name in ("REDIS_URL", "CACHE_BACKEND", "CHECKPOINT_BACKEND", "SCRAPY_SETTINGS_MODULE"):
        env.pop(name, None)
    if project:
        env["SCRAPY_SETTINGS_MODULE"] = "mediacrawler.settings"
    return env


_STAT = re.compile(r"'(elapsed_time_seconds|item_scraped_count)': ([0-9.]+)")


def run(case: str, weibo_url: str, work: Path, expected: set[str], profile: Path | None = None,
        base: Path | None = None) -> dict[str, Any]:
    out = work / case
    if case in ("ours", "base"):
        prefix = ["-m", "cProfile", "-o", str(profile)] if profile else []
        argv = [sys.executable, *prefix, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={UID}",
                "-s", f"WEIBO_BASE_URL={weibo_url}",
                "-s", "MEDIA_ENABLED=0", "-s", f"OUTPUT_DIR={out}", "-s", f"CHECKPOINT_DIR={out / 'checkpoints'}",
                "-s", f"FILES_STORE={out / 'files'}", *COMMON]
    else:
        argv = [sys.executable, "-m", "scrapy", "runspider", str(Path(__file__).resolve()),
                "-a", f"base={weibo_url}", "-a", f"uid={UID}", "-o", f"{out / 'plain.jsonl'}:jsonlines", *COMMON]
    out.mkdir(parents=True)
    log = out / "stderr.log"
    with log.open("wb") as err:
        started = time.perf_counter()
        env = _env(case != "plain", base if case == "base" and base else ROOT)
        proc = subprocess.Popen(argv, cwd=out, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
        # The process's own rusage (not RUSAGE_CHILDREN, which the sandbox would join when it is reaped).
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait(timeout=30)
            raise
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = log.read_text("utf-8", errors="replace")
    stats = {k: float(v) for k, v in _STAT.findall(stderr)}
    ids: list[str] = []
    for path in out.rglob("*.jsonl"):
        ids += [json.loads(line)["post_id"] for line in path.read_text("utf-8").splitlines()]
    if proc.returncode != 0 or set(ids) != expected or len(ids) != len(expected):
        raise SystemExit(f"{case}: exit {proc.returncode}, {len(ids)} records, {len(expected - set(ids))} posts "
                         f"missing\n{stderr[-3000:]}")
    return {"case": case, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "user_s": usage.ru_utime,
            "sys_s": usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024, "elapsed_s": stats["elapsed_time_seconds"],
            "items": int(stats["item_scraped_count"]),
            "rate": stats["item_scraped_count"] / stats["elapsed_time_seconds"]}


def print_profile(path: Path, top: int = 25) -> None:
    """The profile's top functions by own time, then by cumulative time."""
    for key in ("tottime", "cumulative"):
        print(f"\n--- top {top} by {key} ---", flush=True)
        pstats.Stats(str(path)).sort_stats(key).print_stats(top)


def main(argv: list[str] | None = None) -> int:
    from mediacrawler_sandbox.process import start_sandbox
    from mediacrawler_sandbox.world import build_world

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--per-page", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--base", type=Path, help="also run `scrapy crawl weibo` from this checkout of another commit "
                    "(`git archive <commit> | tar -x -C DIR`) in each round, as case `base`")
    ap.add_argument("--profile", type=Path,
                    help="run `ours` once under cProfile, write the profile here and print its top")
    opts = ap.parse_args(argv)
    world = build_world(weibo_users=(UID,), weibo_pages=opts.pages, weibo_per_page=opts.per_page)
    expected = {str(p.id) for p in world.weibo.timeline(UID)}
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, Scrapy {scrapy.__version__}, load {os.getloadavg()[0]:.2f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {opts.pages} pages x {opts.per_page} posts",
          flush=True)
    results: list[dict[str, Any]] = []
    cases = ("ours", "plain", "base") if opts.base else ("ours", "plain")
    with start_sandbox(weibo_users=(UID,), weibo_pages=opts.pages, weibo_per_page=opts.per_page) as sb, \
            tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp:
        if opts.profile:
            res = run("ours", sb.weibo_url, Path(tmp) / "profile", expected, profile=opts.profile.resolve())
            print(f"  ours under cProfile: {res['items']} items, wall {res['wall_s']:.2f} s, "
                  f"CPU {res['cpu_s']:.2f} s", flush=True)
            print_profile(opts.profile)
            return 0
        for r in range(opts.rounds):
            # Alternate the order per round, so a neighbour's load does not always hit the same case.
            for case in cases if r % 2 == 0 else cases[::-1]:
                res = run(case, sb.weibo_url, Path(tmp) / f"r{r}", expected, base=opts.base)
                res["round"] = r
                res["load"] = os.getloadavg()[0]
                results.append(res)
                print(f"  {case:5} round {r}: {res['items']} items, wall {res['wall_s']:.2f} s, "
                      f"CPU {res['cpu_s']:.2f} s (user {res['user_s']:.2f}), RSS {res['rss_mib']:.0f} MiB, "
                      f"in-process {res['elapsed_s']:.2f} s = {res['rate']:.0f} items/s, load {res['load']:.2f}",
                      flush=True)
    keys = ("wall_s", "cpu_s", "rss_mib", "rate")
    med = {c: {k: statistics.median(x[k] for x in results if x["case"] == c) for k in keys}
           for c in cases}
    print("\n| case | wall (s) | CPU (s) | peak RSS (MiB) | items/s in process |\n|---|---|---|---|---|")
    for c in sorted(cases, key=("plain", "base", "ours").index):
        m = med[c]
        print(f"| {c} | {m['wall_s']:.2f} | {m['cpu_s']:.2f} | {m['rss_mib']:.0f} | {m['rate']:.0f} |")
    pairs = [({x["case"]: x for x in results if x["round"] == r}) for r in range(opts.rounds)]
    by_wall = [p["plain"]["wall_s"] / p["ours"]["wall_s"] for p in pairs]
    by_cpu = [p["plain"]["cpu_s"] / p["ours"]["cpu_s"] for p in pairs]
    in_process = [p["ours"]["rate"] / p["plain"]["rate"] for p in pairs]
    print(f"plain/ours by whole-process wall: {statistics.median(by_wall):.2f}x (median of the rounds' pairs: "
          f"{', '.join(f'{x:.2f}' for x in by_wall)}; ratio of the medians "
          f"{med['plain']['wall_s'] / med['ours']['wall_s']:.2f}x); target >= 0.9x")
    print(f"  by CPU time {statistics.median(by_cpu):.2f}x (pairs {', '.join(f'{x:.2f}' for x in by_cpu)}); "
          f"in process {statistics.median(in_process):.2f}x (pairs {', '.join(f'{x:.2f}' for x in in_process)}); "
          f"load {min(x['load'] for x in results):.2f}-{max(x['load'] for x in results):.2f}")
    if opts.base:
        base_wall = [p["base"]["wall_s"] / p["ours"]["wall_s"] for p in pairs]
        base_cpu = [p["base"]["cpu_s"] / p["ours"]["cpu_s"] for p in pairs]
        print(f"base/ours (--base {opts.base}): {statistics.median(base_wall):.2f}x by wall (pairs "
              f"{', '.join(f'{x:.2f}' for x in base_wall)}), {statistics.median(base_cpu):.2f}x by CPU time")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0

if __name__ == "__main__":
    sys.exit(main())
