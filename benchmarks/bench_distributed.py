"""Many workers on one Redis against a latency-bound sandbox: pages/s with 1, 2 and 4 workers, in one run.

    .venv/bin/python benchmarks/bench_distributed.py                     # defaults below, ~2-3 minutes
    .venv/bin/python benchmarks/bench_distributed.py --rounds 3 --json out.json

Starts the platform sandbox (``weibo_latency_ms`` = 200: every Weibo API answer takes 200 ms, a stand-in for a
remote platform's round trip) and a private redis-server, and runs per round, for each shape of job:

- ``local``: one ``scrapy crawl weibo -a uid=…`` without ``REDIS_URL`` (Scrapy's own scheduler; the baseline);
- ``redis-1``, ``redis-2``, ``redis-4``: 1, 2, 4 worker processes (``scrapy crawl weibo -s REDIS_URL=…``, no
  target) on a job queued with ``mediacrawler enqueue``.

Every crawl: CONCURRENT_REQUESTS=4 and CONCURRENT_REQUESTS_PER_DOMAIN=4 per process, DOWNLOAD_DELAY 0, AutoThrottle
off, media, dedupe, checkpoints and marks off (the queue is what is measured; each worker still exports its JSON
Lines). Pages/s = Weibo API answers (listing pages and the posts' follow-up requests) per second, from the
sandbox's request log (first start to last end; process start-up is not in it); every post of the job must be in
the outputs.

Two shapes of job, because a Weibo listing is sequential (page N's answer is what asks for page N+1):

- ``listing``: 10 posts a page, 2 of them long texts (one ``/statuses/extend`` request each): 3 requests a page,
  2 of which overlap. More workers cannot make a chain of pages faster;
- ``fanout``: 400 posts a page, 80 long texts: 81 requests a page, 80 of which can go to any worker at once (the
  follow-up requests of a post, as Bilibili's view/playurl or a post's media, are the work that spreads).

Prints pages/s per case (median over rounds), the ratios redis-2/redis-1, redis-4/redis-1 (targets 1.8 and 3.2)
and redis-1/local (target 0.8), and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mediacrawler_sandbox.process import SandboxProcess, start_sandbox  # noqa: E402
from mediacrawler_sandbox.world import build_world  # noqa: E402
from tests.plugins.redis_server import RedisServer  # noqa: E402

UID = 7365120894
SHAPES = {"listing": (10, 70), "fanout": (400, 5)}  # name -> (posts per page, pages)
CASES = ("local", "redis-1", "redis-2", "redis-4")
COMMON = [
    "-s", "CONCURRENT_REQUESTS=4", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=4", "-s", "DOWNLOAD_DELAY=0",
    "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "MEDIA_ENABLED=0", "-s", "DEDUPE_ENABLED=0",
    "-s", "CHECKPOINT_ENABLED=0",
    "-s", "MARKS_ENABLED=0", "-s", "RETRY_MEDIA_ENABLED=0", "-s", "LOG_LEVEL=INFO", "-s", "LOGSTATS_INTERVAL=0",
    "-s", "DISTRIBUTED_IDLE_CLOSE=1", "-s", "DISTRIBUTED_JOB_POLL=0.2",
]  # fmt: skip


def env() -> dict[str, str]:
    e = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings",
         "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    e.pop("REDIS_URL", None)
    return e


def crawl_processes(case: str, sb: SandboxProcess, redis_url: str, work: Path,
                    extra: list[str]) -> list[subprocess.Popen[bytes]]:
    base = [sys.executable, "-m", "scrapy", "crawl", "weibo", "-s", f"WEIBO_BASE_URL={sb.weibo_url}",
            "-s", f"OUTPUT_DIR={work / 'output'}", "-s", f"FILES_STORE={work / 'files'}", *COMMON, *extra]
    if case == "local":
        argvs = [[*base, "-a", f"uid={UID}"]]
    else:
        argvs = [[*base, "-s", f"REDIS_URL={redis_url}"] for _ in range(int(case.split("-")[1]))]
    procs = []
    for n, argv in enumerate(argvs):
        log = (work / f"{case}-{n}.log").open("wb")
        procs.append(subprocess.Popen(argv, cwd=work, env=env(), stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT))
        log.close()
    if case != "local":
        done = subprocess.run([sys.executable, "-m", "mediacrawler", "enqueue", "weibo", f"uid={UID}",
                               "--redis-url", redis_url], cwd=work, env=env(), capture_output=True, text=True,
                              timeout=60)
        if done.returncode != 0:
            raise SystemExit(f"enqueue failed: {done.stderr}")
    return procs


def run_case(case: str, shape: str, sb: SandboxProcess, redis: RedisServer, expected: set[str],
             extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-dist-{case}-") as tmp:
        work = Path(tmp)
        with redis.client() as client:
            client.flushdb()
        sb.reset()
        sb.set_faults(weibo_latency_ms=200)
        started = time.monotonic()
        procs = crawl_processes(case, sb, redis.url, work, extra)
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(600))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait(10))
        wall = time.monotonic() - started
        entries = [e for e in sb.requests() if e["path"].startswith("/weibo/")]
        ids: set[str] = set()
        records = 0
        for path in (work / "output").rglob("*.jsonl"):
            for line in path.read_text("utf-8").splitlines():
                ids.add(json.loads(line)["post_id"])
                records += 1
        if codes != [0] * len(procs) or ids != expected:
            logs = "\n".join(p.read_text("utf-8", "replace")[-2000:] for p in work.glob("*.log"))
            raise SystemExit(f"{shape}/{case}: exit codes {codes}, {len(expected - ids)} posts missing\n{logs}")
    span = max(e["ended"] for e in entries) - min(e["started"] for e in entries)
    return {"shape": shape, "case": case, "requests": len(entries), "span_s": round(span, 2),
            "pages_per_s": round(len(entries) / span, 2), "posts": len(ids), "records": records,
            "wall_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting for every crawl")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    opts = ap.parse_args(argv)
    extra = [a for kv in opts.set for a in ("-s", kv)]
    results: list[dict[str, Any]] = []
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; {when}", flush=True)
    with RedisServer() as redis:
        for shape in opts.shapes:
            per_page, pages = SHAPES[shape]
            world = build_world(weibo_users=(UID,), weibo_pages=pages, weibo_per_page=per_page)
            expected = {str(p.id) for p in world.weibo.timeline(UID)}
            sb = start_sandbox(weibo_users=(UID,), weibo_pages=pages, weibo_per_page=per_page, startup_timeout=30)
            try:
                for r in range(opts.rounds):
                    # Alternate the order per round, so a neighbour's load does not always hit the same case.
                    for case in CASES if r % 2 == 0 else tuple(reversed(CASES)):
                        res = run_case(case, shape, sb, redis, expected, extra)
                        res["round"] = r
                        results.append(res)
                        print(f"  {shape:8} {case:8} round {r}: {res['requests']} API answers in {res['span_s']} s"
                              f" = {res['pages_per_s']} pages/s ({res['posts']} posts, {res['records']} records,"
                              f" wall {res['wall_s']} s)", flush=True)
            finally:
                sb.stop()
    print("\n| job | posts/page, pages | local | 1 worker | 2 workers | 4 workers | 2w/1w | 4w/1w | 1w/local |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in opts.shapes:
        med = {c: statistics.median(x["pages_per_s"] for x in results if x["shape"] == shape and x["case"] == c)
               for c in CASES}
        per_page, pages = SHAPES[shape]
        one = med["redis-1"]
        print(f"| {shape} | {per_page}, {pages} | {med['local']:.1f} | {one:.1f} | {med['redis-2']:.1f} |"
              f" {med['redis-4']:.1f} | {med['redis-2'] / one:.2f} | {med['redis-4'] / one:.2f} |"
              f" {one / med['local']:.2f} |")
    print("targets: 2w/1w >= 1.8, 4w/1w >= 3.2, 1w/local >= 0.8")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
