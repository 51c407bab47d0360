"""Benchmark: the media store pipeline vs Scrapy's stock FilesPipeline on the same 2,000 sandbox images.

Usage::

    .venv/bin/python benchmarks/bench_media_store.py [--images 2000] [--rounds 3] [--json out.json]

It starts the sandbox (``python -m mediacrawler.sandbox --port 0``, through
:func:`mediacrawler.sandbox.process.start_sandbox`) once, then runs the two crawls alternately
(stock, ours, stock, ours, …), each in a fresh process with a fresh FILES_STORE, over the same
``/media/img/{n}.jpg`` URLs (one item per image, yielded from a kick-off response). Both crawls share every setting
except the pipeline; ours runs with its defaults (hashing, magic-byte and Pillow checks, fsync, SQLite index,
MEDIA_CONCURRENCY_PER_HOST). Reported per run: wall seconds of the whole process, images/s in-process (spider
opened → last item scraped), files stored; then the medians and the median of the pair-by-pair ratios
(ours / stock images/s in-process). The issue asks for a ratio of at least 0.8.

``--run-one {stock,ours}`` is the child mode used internally (prints one JSON line).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# --- child: one crawl -------------------------------------------------------------------------------------------
def run_one(kind: str, base_url: str, images: int, store: str, extra: dict[str, str]) -> dict[str, Any]:
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    from mediacrawler.items import MediaAsset, Post

    marks: dict[str, float] = {}

    class BenchSpider(scrapy.Spider):
        name = "bench_media"

        async def start(self):  # type: ignore[override]
            # One kick-off response yields every item, as in docs research (c): items from a callback are
            # processed CONCURRENT_ITEMS at a time, while start() items trickle in one per engine loop.
            yield scrapy.Request(f"{base_url}/media/img/0.jpg", callback=self.parse, dont_filter=True)

        def parse(self, response):  # type: ignore[override]
            for n in range(images):
                url = f"{base_url}/media/img/{n}.jpg"
                if kind == "stock":
                    yield {"file_urls": [url], "files": []}
                else:
                    yield Post(platform="bench", post_id=str(n), url=url, author=None, created_at=None,
                               media=[MediaAsset(kind="image", key=f"img-{n}", url=url)])

    pipeline = ("scrapy.pipelines.files.FilesPipeline" if kind == "stock"
                else "mediacrawler.pipelines.media.MediaStorePipeline")
    settings = {
        "ITEM_PIPELINES": {pipeline: 300},
        "FILES_STORE": store,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "USER_AGENT": "mediacrawler-bench",
        **(extra if kind == "ours" else {}),
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(BenchSpider)
    items = 0

    def spider_opened() -> None:
        marks["opened"] = time.perf_counter()

    def item_scraped() -> None:
        nonlocal items
        items += 1
        marks["last_item"] = time.perf_counter()

    crawler.signals.connect(spider_opened, signal=signals.spider_opened)
    crawler.signals.connect(item_scraped, signal=signals.item_scraped)
    process.crawl(crawler)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    main0 = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    process.start()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    main1 = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # ours: the store worker process (reaped at close)
    stats = crawler.stats.get_stats() if crawler.stats else {}
    seconds = marks.get("last_item", 0.0) - marks.get("opened", 0.0)
    stored = sum(1 for p in Path(store).rglob("*") if p.is_file() and p.suffix in (".jpg", ".jpeg"))
    return {
        "kind": kind,
        "items": items,
        "stored_files": stored,
        "in_process_s": seconds,
        "images_per_s": images / seconds if seconds > 0 else 0.0,
        "failed": stats.get("media/failed", 0),
        # CPU seconds of the crawl (start-up excluded): whole process, and the reactor thread alone.
        "cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
        "reactor_cpu_s": main1.ru_utime + main1.ru_stime - main0.ru_utime - main0.ru_stime,
        # CPU seconds of helper processes started by the crawl (our store worker), start-up included.
        "child_cpu_s": kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime,
        "downloaded": stats.get("media/downloaded", stats.get("file_status_count/downloaded", 0)),
    }


# --- parent: orchestration --------------------------------------------------------------------------------------
def child(kind: str, base_url: str, images: int, workdir: Path, sets: list[str]) -> dict[str, Any]:
    store = workdir / f"store-{kind}"
    shutil.rmtree(store, ignore_errors=True)
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, __file__, "--run-one", kind, "--base-url", base_url,
                          "--images", str(images), "--store", str(store),
                          *(a for kv in sets for a in ("--set", kv))],
                         cwd=workdir, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"{kind} crawl failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    shutil.rmtree(store, ignore_errors=True)
    return result


def machine() -> dict[str, str]:
    import scrapy

    def sh(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return "?"

    return {
        "nproc": sh(["nproc"]),
        "memory": sh(["free", "-h"]).splitlines()[1] if sh(["free", "-h"]) else "?",
        "cpu": next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                     if ln.startswith("model name")), "?") if Path("/proc/cpuinfo").exists() else "?",
        "python": platform.python_version(),
        "scrapy": scrapy.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="stock/ours pairs to run (after one warm-up pair)")
    parser.add_argument("--json", help="write all figures to this file")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for our pipeline's crawl only (e.g. MEDIA_CONCURRENCY_PER_HOST=16)")
    parser.add_argument("--run-one", choices=("stock", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        extra = dict(kv.split("=", 1) for kv in args.set)
        print(json.dumps(run_one(args.run_one, args.base_url, args.images, args.store, extra)))
        return 0

    info = machine()
    print(f"machine: {info}")
    from mediacrawler.sandbox.process import start_sandbox

    sandbox = start_sandbox(startup_timeout=60)
    base_url = sandbox.url
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-media-") as tmp:
            workdir = Path(tmp)
            print("warm-up pair (not counted)")
            child("stock", base_url, args.images, workdir, args.set)
            child("ours", base_url, args.images, workdir, args.set)
            for r in range(args.rounds):
                for kind in ("stock", "ours"):
                    res = child(kind, base_url, args.images, workdir, args.set)
                    res["round"] = r
                    runs.append(res)
                    print(f"round {r} {kind:5s}: {res['images_per_s']:7.1f} images/s in-process, "
                          f"wall {res['wall_s']:.2f}s, items {res['items']}, stored {res['stored_files']}, "
                          f"failed {res['failed']}, cpu {res['cpu_s']:.2f}s (reactor {res['reactor_cpu_s']:.2f}s, "
                          f"helper processes {res.get('child_cpu_s', 0.0):.2f}s)")
    finally:
        sandbox.stop()

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["kind"] == kind)

    ratios = [o["images_per_s"] / s["images_per_s"] for s, o in zip(runs[0::2], runs[1::2], strict=True)]
    summary = {
        "images": args.images,
        "rounds": args.rounds,
        "stock_images_per_s": med("stock", "images_per_s"),
        "ours_images_per_s": med("ours", "images_per_s"),
        "stock_wall_s": med("stock", "wall_s"),
        "ours_wall_s": med("ours", "wall_s"),
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
    }
    print(f"stock FilesPipeline: {summary['stock_images_per_s']:.1f} images/s (median), "
          f"wall {summary['stock_wall_s']:.2f}s")
    print(f"MediaStorePipeline:  {summary['ours_images_per_s']:.1f} images/s (median), "
          f"wall {summary['ours_wall_s']:.2f}s")
    print(f"ratio ours/stock: {summary['ratio_median']:.2f} (pairs: {', '.join(f'{r:.2f}' for r in ratios)})")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "summary": summary, "runs": runs}, indent=2))
    return 0 if summary["ratio_median"] >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
