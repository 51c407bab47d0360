"""Benchmark: the media pipeline vs Scrapy's stock FilesPipeline on 2,000 photo-sized noise JPEGs.

Usage::

    .venv/bin/python benchmarks/bench_media_store.py [--images 2000] [--rounds 3] [--latency-ms 0,50] [--json F]

The photos are generated once with Pillow (random noise, 50-200 KiB each, the size of a timeline photo, not a
thumbnail) and cached under the temp directory. A small HTTP server (``--serve``, Twisted, its own process) serves
them as ``/img/{n}.jpg`` from memory, each answer delayed by ``--latency-ms`` (a CDN's round trip), and counts the
requests in flight. Per latency: one warm-up pair, then ``--rounds`` pairs (stock, ours), each crawl a fresh
process with a fresh FILES_STORE, one item per image yielded from a kick-off response. The stores are kept until
the benchmark ends (about 230 MiB a run), so that no run pays for the deletion of the one before it.

Stock runs with Scrapy's defaults (it keeps ~100 requests in flight to the one host, see docs/benchmarks.md). Ours
runs with the project's defaults (mediacrawler/settings.py: MEDIA_CONCURRENCY_PER_HOST, the media slots, SHA-256,
checks, fsync, SQLite index), minus the other item pipelines and extensions, in a process set up as ``scrapy crawl``
sets up its own (commands/process_exit.py: the start-up heap frozen out of the crawl's garbage collections).
Reported per run: the whole process's wall time (interpreter start-up, imports and teardown included: what a user
waits for), images/s in-process (spider opened -> last item scraped), CPU, most requests in flight; then per
latency the median of the pair-by-pair ratios, the headline by wall (stock wall / ours wall: above 1 we are
faster), the in-process one beside it. Target (issue
#27): at least 1.0 by wall at every latency (exit status 1 otherwise).

``--profile DIR``: our crawls also write a cProfile of the crawler process to DIR (``ours-<latency>-<round>.prof``;
profiling slows them, so their figures are not comparable to stock's).

``--run-one {stock,ours}`` and ``--serve DIR`` are the child modes used internally.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.0
#: Ratio of stored bytes to pixels of a noise JPEG at quality 85 is about 0.7; sides drawn to land in 50-200 KiB.
PHOTO_SIDES = (270, 540)
PHOTO_BYTES = (50 * 1024, 200 * 1024)


# --- the photos ---------------------------------------------------------------------------------------------------
def make_photos(count: int) -> Path:
    """``count`` noise JPEGs of 50-200 KiB as ``<n>.jpg`` in a cached directory (made once)."""
    from io import BytesIO

    from PIL import Image

    folder = Path(tempfile.gettempdir()) / f"mediacrawler-bench-photos-v1-{count}"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    for n in range(count):
        for _ in range(20):  # a few draws at most: the side is chosen for the size range
            side = rng.randint(*PHOTO_SIDES)
            buf = BytesIO()
            Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3)).save(buf, "JPEG", quality=85)
            if PHOTO_BYTES[0] <= buf.tell() <= PHOTO_BYTES[1]:
                break
        (folder / f"{n}.jpg").write_bytes(buf.getvalue())
    (folder / "done").write_text("ok")
    return folder


# --- the server ---------------------------------------------------------------------------------------------------
def serve(folder: str, latency_ms: int) -> None:
    """Serve ``folder``'s JPEGs as ``/img/{n}.jpg`` on 127.0.0.1 (port printed), each answer delayed; ``/_stats``
    gives (and resets) the most requests in flight and the count."""
    from twisted.internet import reactor
    from twisted.web import resource as web_resource
    from twisted.web import server

    bodies = {p.name: p.read_bytes() for p in Path(folder).glob("*.jpg")}
    state = {"in_flight": 0, "max_in_flight": 0, "requests": 0}

    class Photos(web_resource.Resource):
        isLeaf = True

        def render_GET(self, request: server.Request) -> bytes | int:
            path = request.path.decode()
            if path == "/_stats":
                out = json.dumps(state).encode()
                state.update(max_in_flight=state["in_flight"], requests=0)
                return out
            body = bodies.get(path.rsplit("/", 1)[-1]) if path.startswith("/img/") else None
            if body is None:
                request.setResponseCode(404)
                return b""
            state["requests"] += 1
            state["in_flight"] += 1
            state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])

            def finish() -> None:
                state["in_flight"] -= 1
                request.setHeader(b"Content-Type", b"image/jpeg")
                request.setHeader(b"Content-Length", str(len(body)).encode())
                request.write(body)
                request.finish()

            gone = request.notifyFinish()
            gone.addErrback(lambda _: None)
            reactor.callLater(latency_ms / 1000, finish)
            return server.NOT_DONE_YET

    port = reactor.listenTCP(0, server.Site(Photos()), interface="127.0.0.1", backlog=1024)
    print(port.getHost().port, flush=True)
    reactor.run()


def server_stats(base_url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{base_url}/_stats", timeout=10) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


# --- child: one crawl -----------------------------------------------------------------------------------------------
def ours_settings() -> dict[str, Any]:
    """The project's defaults for a media crawl: every setting of mediacrawler/settings.py except the other
    pipelines, extensions and add-ons (checkpoints, feeds, dedupe: not what is measured)."""
    from scrapy.settings import Settings

    import mediacrawler.settings as project

    s = Settings()
    s.setmodule(project, priority="project")
    values = {k: v for k, v in s.items() if k.isupper()}
    for name in ("ITEM_PIPELINES", "EXTENSIONS", "ADDONS", "SPIDER_MODULES", "NEWSPIDER_MODULE", "COMMANDS_MODULE"):
        values.pop(name, None)
    values["ITEM_PIPELINES"] = {"mediacrawler.pipelines.media.MediaStorePipeline": 300}
    return values


def stats_of(crawler: Any) -> dict[str, Any]:
    return crawler.stats.get_stats() if crawler.stats else {}


def run_one(kind: str, base_url: str, images: int, store: str, extra: dict[str, str],
            profile: str | None = None) -> dict[str, Any]:
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    from mediacrawler.commands.process_exit import collect_once_at_exit, freeze_once_started
    from mediacrawler.items import MediaAsset, Post

    marks: dict[str, float] = {}

    class BenchSpider(scrapy.Spider):
        name = "bench_media"

        async def start(self):  # type: ignore[override]
            # One kick-off response yields every item: items from a callback are processed CONCURRENT_ITEMS at a
            # time, while start() items trickle in one per engine loop.
            yield scrapy.Request(f"{base_url}/img/0.jpg", callback=self.parse, dont_filter=True)

        def parse(self, response):  # type: ignore[override]
            for n in range(images):
                url = f"{base_url}/img/{n}.jpg"
                if kind == "stock":
                    yield {"file_urls": [url], "files": []}
                else:
                    yield Post(platform="bench", post_id=str(n), url=url, author=None, created_at=None,
                               media=[MediaAsset(kind="image", key=f"img-{n}", url=url)])

    common = {"FILES_STORE": store, "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
              "USER_AGENT": "mediacrawler-bench"}
    if kind == "stock":
        settings = {**common, "ITEM_PIPELINES": {"scrapy.pipelines.files.FilesPipeline": 300}}
    else:
        settings = {**ours_settings(), **common, **extra}
    process = CrawlerProcess(settings, install_root_handler=True)
    crawler = process.create_crawler(BenchSpider)
    items = 0

    def spider_opened() -> None:
        marks["opened"] = time.perf_counter()
        marks["opened_at"] = time.time()

    def item_scraped() -> None:
        nonlocal items
        items += 1
        marks["last_item"] = time.perf_counter()
        marks["last_item_at"] = time.time()

    crawler.signals.connect(spider_opened, signal=signals.spider_opened)
    crawler.signals.connect(item_scraped, signal=signals.item_scraped)
    if kind == "ours":
        # The process as `scrapy crawl` sets it up (commands/crawl.py): the start-up heap frozen out of the
        # crawl's collections (4 of the oldest generation walked it, ~0.5 s of a 2,000-photo crawl here).
        freeze_once_started(crawler)
    process.crawl(crawler)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    main0 = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.runcall(process.start)
        profiler.dump_stats(profile)
    else:
        process.start()
    if kind == "ours" and stats_of(crawler).get("finish_reason") == "finished":
        collect_once_at_exit()  # as `scrapy crawl` after a clean close
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # any child process (reaped at close)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    main1 = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    stats = stats_of(crawler)
    seconds = marks.get("last_item", 0.0) - marks.get("opened", 0.0)
    return {
        "kind": kind,
        "items": items,
        "in_process_s": seconds,
        # Wall-clock instants, for the parent's start-up (its spawn -> spider opened) and teardown (last item ->
        # exit) figures.
        "opened_at": marks.get("opened_at", 0.0),
        "last_item_at": marks.get("last_item_at", 0.0),
        "images_per_s": images / seconds if seconds > 0 else 0.0,
        "failed": stats.get("media/failed", 0),
        # CPU seconds of the crawl (start-up excluded): whole process, and the reactor thread alone.
        "cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
        "reactor_cpu_s": main1.ru_utime + main1.ru_stime - main0.ru_utime - main0.ru_stime,
        "children_cpu_s": kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime,
        "downloaded": stats.get("media/downloaded", stats.get("file_status_count/downloaded", 0)),
    }


# --- parent: orchestration --------------------------------------------------------------------------------------
def child(kind: str, base_url: str, images: int, workdir: Path, sets: list[str],
          profile: str | None = None) -> dict[str, Any]:
    # Each run its own fresh store, deleted only when the whole benchmark ends: on ext4 without a journal (these
    # VMs) an inode freed less than ~30 s ago is skipped by the allocator after a read of its inode table block,
    # so deleting 2,000 files just before the next run made that run pay for them (docs/benchmarks.md, "Media
    # store", "Session 12").
    store = Path(tempfile.mkdtemp(prefix=f"store-{kind}-", dir=workdir))
    server_stats(base_url)  # reset the in-flight count
    started, started_at = time.perf_counter(), time.time()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, __file__, "--run-one", kind, "--base-url", base_url,
                          "--images", str(images), "--store", str(store),
                          *(a for kv in sets for a in ("--set", kv)),
                          *(("--profile-file", profile) if profile else ())],
                         cwd=workdir, env=env, capture_output=True, text=True, check=False, timeout=900)
    wall, ended_at = time.perf_counter() - started, time.time()
    if out.returncode != 0:
        raise RuntimeError(f"{kind} crawl failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["startup_s"] = result.pop("opened_at") - started_at
    result["teardown_s"] = ended_at - result.pop("last_item_at")
    result["max_in_flight"] = server_stats(base_url)["max_in_flight"]
    # Counted here, outside the crawl's wall: walking ours' objects/<ab>/<cd>/ tree with rglob took 0.36 s of the
    # crawler process's exit (stock's one flat directory, a few ms).
    result["stored_files"] = sum(1 for _, _, names in os.walk(store) for name in names if name.endswith(".jpg"))
    return result


def machine() -> dict[str, str]:
    import scrapy

    def sh(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return "?"

    return {"nproc": sh(["nproc"]), "loadavg": Path("/proc/loadavg").read_text().strip()
            if Path("/proc/loadavg").exists() else "?", "python": platform.python_version(),
            "scrapy": scrapy.__version__}


def bench_latency(latency_ms: int, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(folder), "--latency-ms", str(latency_ms)],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    base_url = f"http://127.0.0.1:{int(server.stdout.readline())}"
    runs: list[dict[str, Any]] = []
    try:
        workdir: Path = args.workdir
        print(f"latency {latency_ms} ms: warm-up pair (not counted)", flush=True)
        child("stock", base_url, args.images, workdir, args.set)
        child("ours", base_url, args.images, workdir, args.set)
        for r in range(args.rounds):
            for kind in ("stock", "ours"):
                profile = (str(Path(args.profile).absolute() / f"ours-{latency_ms}-{r}.prof")
                           if args.profile and kind == "ours" else None)
                res = child(kind, base_url, args.images, workdir, args.set, profile)
                res.update(round=r, latency_ms=latency_ms)
                runs.append(res)
                print(f"{latency_ms:3d} ms round {r} {kind:5s}: {res['images_per_s']:6.1f} images/s in-process, "
                      f"wall {res['wall_s']:.2f}s (start-up {res['startup_s']:.2f}s, teardown "
                      f"{res['teardown_s']:.2f}s), stored {res['stored_files']}, failed {res['failed']}, "
                      f"cpu {res['cpu_s']:.2f}s (reactor {res['reactor_cpu_s']:.2f}s, children "
                      f"{res['children_cpu_s']:.2f}s), "
                      f"in flight <= {res['max_in_flight']}", flush=True)
    finally:
        server.terminate()
        server.wait(10)
    pairs = list(zip(runs[0::2], runs[1::2], strict=True))
    wall_ratios = [s["wall_s"] / o["wall_s"] for s, o in pairs]
    ratios = [o["images_per_s"] / s["images_per_s"] for s, o in pairs]

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["kind"] == kind)

    summary = {"latency_ms": latency_ms, "wall_ratio_median": statistics.median(wall_ratios),
               "wall_ratios": wall_ratios, "ratio_median": statistics.median(ratios), "ratios": ratios,
               **{f"{kind}_{key}": med(kind, key) for kind in ("stock", "ours")
                  for key in ("images_per_s", "wall_s", "startup_s", "teardown_s", "cpu_s", "max_in_flight")}}
    print(f"{latency_ms} ms: by wall (whole process) stock {summary['stock_wall_s']:.2f}s, ours "
          f"{summary['ours_wall_s']:.2f}s (medians); ratio {summary['wall_ratio_median']:.2f} "
          f"(pairs: {', '.join(f'{r:.2f}' for r in wall_ratios)}); in-process {summary['ratio_median']:.2f} "
          f"(stock {summary['stock_images_per_s']:.1f}, ours {summary['ours_images_per_s']:.1f} images/s)",
          flush=True)
    return {"summary": summary, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="stock/ours pairs per latency (after a warm-up pair)")
    parser.add_argument("--latency-ms", default="0,50", help="comma-separated latencies to measure at")
    parser.add_argument("--json", help="write all figures to this file")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for our pipeline's crawl only (e.g. MEDIA_CONCURRENCY_PER_HOST=16)")
    parser.add_argument("--profile", metavar="DIR", help="write a cProfile of each of our crawls into DIR")
    parser.add_argument("--run-one", choices=("stock", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--profile-file", help=argparse.SUPPRESS)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, int(args.latency_ms))
        return 0
    if args.run_one:
        extra = dict(kv.split("=", 1) for kv in args.set)
        print(json.dumps(run_one(args.run_one, args.base_url, args.images, args.store, extra, args.profile_file)))
        return 0
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}", flush=True)
    folder = make_photos(args.images)
    sizes = [p.stat().st_size for p in folder.glob("*.jpg")]
    print(f"photos: {len(sizes)} noise JPEGs, {min(sizes) // 1024}-{max(sizes) // 1024} KiB "
          f"(median {statistics.median(sizes) / 1024:.0f} KiB) in {folder}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-media-") as tmp:
        args.workdir = Path(tmp)
        results = [bench_latency(int(ms), folder, args) for ms in args.latency_ms.split(",")]
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "results": results}, indent=2))
    return 0 if all(r["summary"]["wall_ratio_median"] >= TARGET for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
