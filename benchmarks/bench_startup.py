"""Start-up of ``scrapy crawl weibo`` against an empty plain Scrapy spider, paired in one run (issue #27).

    .venv/bin/python benchmarks/bench_startup.py                  # 7 rounds, ~30 s
    .venv/bin/python benchmarks/bench_startup.py --rounds 11 --importtime 25

Starts the platform sandbox (one Weibo timeline page of 10 posts) and runs, per round and alternating the order,
each case as a fresh process:

- ``plain``: :class:`EmptySpider` below, by ``scrapy runspider`` with Scrapy's own settings (no project): one start
  request to the sandbox's first timeline page, nothing parsed;
- ``ours``: ``scrapy crawl weibo -a uid=…`` with the project's settings, media off (``MEDIA_ENABLED=0``), its own
  OUTPUT_DIR and CHECKPOINT_DIR: every extension, middleware and pipeline the project wires.

Both with DOWNLOAD_DELAY 0, AutoThrottle off, LOG_LEVEL INFO. Measured per run: **to the first request**, from
just before ``Popen`` to the moment the sandbox logged the run's first request (the sandbox's request log keeps
monotonic times since its start; its clock is placed on ours from ``/_sandbox/stats``'s uptime, read with the
smallest round trip), and the **whole process wall** (start to exit). Prints the medians and the median of each
round's difference ``ours - plain``; target: at most 0.3 s to the first request. ``--importtime N`` also runs each
once under ``python -X importtime`` and prints the N packages whose modules, imported by ours and not by plain, take
the most import time of their own (self time: a package is not charged for what it imports of Scrapy's).
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import scrapy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

UID = 7365120894
COMMON = ["-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "LOG_LEVEL=INFO",
          "-s", "LOGSTATS_INTERVAL=0"]


class EmptySpider(scrapy.Spider):
    """The least a Scrapy crawl does: one start request, its answer ignored."""

    name = "empty"

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url = url

    async def start(self) -> Any:
        yield scrapy.Request(self.url)

    def parse(self, response: Any) -> Iterator[Any]:
        yield from ()


def _env(root: Path | None) -> dict[str, str]:
    """The environment of a case: ``root`` is the checkout whose project ours runs (None: plain, no project)."""
    path = os.pathsep.join(filter(None, [str(root or ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    for name in ("REDIS_URL", "CACHE_BACKEND", "CHECKPOINT_BACKEND", "SCRAPY_SETTINGS_MODULE", "METRICS_PORT"):
        env.pop(name, None)
    if root is not None:
        env["SCRAPY_SETTINGS_MODULE"] = "mediacrawler.settings"
    return env


#: ``python -X importtime`` prints only imports made by the import statement: Scrapy imports components and spider
#: modules with ``importlib.import_module``, whose own time would go missing. Under --importtime, scrapy runs with
#: ``import_module`` going through ``__import__`` (same modules, same order).
IMPORTTIME = ["-X", "importtime", "-c", """
import importlib, sys
plain_import_module = importlib.import_module
def import_module(name, package=None):
    if package or name.startswith("."):
        return plain_import_module(name, package)
    __import__(name)
    return sys.modules[name]
importlib.import_module = import_module
from scrapy.cmdline import execute
execute(["scrapy", *sys.argv[1:]])
"""]


def argv_of(case: str, weibo_url: str, out: Path, *, importtime: bool = False) -> list[str]:
    """The command line of one case (``importtime``: under :data:`IMPORTTIME`)."""
    head = [sys.executable, *(IMPORTTIME if importtime else ["-m", "scrapy"])]
    if case == "ours":
        return [*head, "crawl", "weibo", "-a", f"uid={UID}", "-s", f"WEIBO_BASE_URL={weibo_url}",
                "-s", "MEDIA_ENABLED=0", "-s", f"OUTPUT_DIR={out / 'output'}",
                "-s", f"CHECKPOINT_DIR={out / 'checkpoints'}", "-s", f"FILES_STORE={out / 'files'}", *COMMON]
    query = urlencode({"containerid": f"107603{UID}", "page": 1})
    return [*head, "runspider", str(Path(__file__).resolve()),
            "-a", f"url={weibo_url}/api/container/getIndex?{query}", *COMMON]


class SandboxClock:
    """The sandbox's request-log times (seconds since its start) on this process's monotonic clock."""

    def __init__(self, sandbox: Any, samples: int = 15) -> None:
        best: tuple[float, float] | None = None
        for _ in range(samples):
            before = time.monotonic()
            uptime = float(sandbox.stats()["uptime"])
            after = time.monotonic()
            if best is None or after - before < best[0]:
                best = (after - before, (before + after) / 2 - uptime)
        assert best is not None
        self.rtt, self.t0 = best

    def at(self, started: float) -> float:
        return self.t0 + started


def run(case: str, sandbox: Any, clock: SandboxClock, work: Path, root: Path) -> dict[str, Any]:
    out = work / case
    out.mkdir(parents=True)
    sandbox.reset()
    argv = argv_of(case, sandbox.weibo_url, out)
    env = _env(root if case == "ours" else None)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=out, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    wall = time.monotonic() - started
    log = sandbox.requests()
    if done.returncode != 0 or not log:
        raise SystemExit(f"{case}: exit {done.returncode}, {len(log)} requests\n{done.stderr[-3000:]}")
    first = clock.at(min(entry["started"] for entry in log)) - started
    return {"case": case, "first_request_s": first, "wall_s": wall, "requests": len(log)}


def importtime(sandbox: Any, work: Path, top: int, root: Path) -> None:
    """Ours and plain once each under ``-X importtime``: what ours imports that plain does not, by self time
    summed per package (``mediacrawler.<subpackage>``, else the top-level package), the costliest first."""
    seen: dict[str, dict[str, int]] = {}
    for case in ("plain", "ours"):
        out = work / f"importtime-{case}"
        out.mkdir(parents=True)
        done = subprocess.run(argv_of(case, sandbox.weibo_url, out, importtime=True), cwd=out,
                              env=_env(root if case == "ours" else None), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
        own: dict[str, int] = {}
        for line in done.stderr.splitlines():
            if line.startswith("import time:") and "self [us]" not in line:
                head, _, name = line.rpartition("|")  # "import time: self | cumulative | name" (indented)
                own[name.strip()] = int(head.split("|")[0].partition(":")[2])
        seen[case] = own
    extra = {name: us for name, us in seen["ours"].items() if name not in seen["plain"]}
    packages: dict[str, list[int]] = {}
    for name, us in extra.items():
        parts = name.split(".")
        package = ".".join(parts[:2]) if parts[0] == "mediacrawler" else parts[0]
        packages.setdefault(package, []).append(us)
    total = sum(extra.values())
    print(f"\nunder -X importtime (one run each): ours imports {len(extra)} modules plain does not, "
          f"{total / 1000:.0f} ms of their own import time; the {top} costliest packages (ms, modules):")
    for package, times in sorted(packages.items(), key=lambda x: -sum(x[1]))[:top]:
        print(f"  {sum(times) / 1000:7.1f}  {len(times):4d}  {package}")


def main(argv: list[str] | None = None) -> int:
    from mediacrawler_sandbox.process import start_sandbox

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--importtime", type=int, default=0, metavar="N",
                    help="also print the N packages of ours' own imports that cost the most (-X importtime)")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the checkout whose mediacrawler ours runs (default: this one), e.g. an older commit's "
                         "`git archive` to compare before and after on the same machine")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    opts = ap.parse_args(argv)
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, Scrapy {scrapy.__version__}, load {os.getloadavg()[0]:.2f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; ours from {opts.root}", flush=True)
    results: list[dict[str, Any]] = []
    with start_sandbox(weibo_users=(UID,), weibo_pages=1, weibo_per_page=10) as sb, \
            tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        clock = SandboxClock(sb)
        # A warm-up pair first (page cache, .pyc files), not counted.
        for case in ("plain", "ours"):
            run(case, sb, clock, Path(tmp) / f"warm-{case}", opts.root)
        for r in range(opts.rounds):
            # Alternate the order per round, so a neighbour's load does not always hit the same case.
            for case in ("ours", "plain") if r % 2 == 0 else ("plain", "ours"):
                res = run(case, sb, clock, Path(tmp) / f"r{r}", opts.root)
                res["round"] = r
                results.append(res)
                print(f"  {case:5} round {r}: first request {res['first_request_s']:.3f} s, wall "
                      f"{res['wall_s']:.2f} s ({res['requests']} requests)", flush=True)
        if opts.importtime:
            importtime(sb, Path(tmp), opts.importtime, opts.root)
    print(f"\nclock offset read with a {clock.rtt * 1000:.2f} ms round trip; load {os.getloadavg()[0]:.2f}")
    med = {c: {k: statistics.median(x[k] for x in results if x["case"] == c)
               for k in ("first_request_s", "wall_s")} for c in ("ours", "plain")}
    print("\n| case | to the first request (s) | whole process wall (s) |\n|---|---|---|")
    for c in ("plain", "ours"):
        print(f"| {c} | {med[c]['first_request_s']:.3f} | {med[c]['wall_s']:.2f} |")
    pairs = [({x["case"]: x for x in results if x["round"] == r}) for r in range(opts.rounds)]
    first = [p["ours"]["first_request_s"] - p["plain"]["first_request_s"] for p in pairs]
    wall = [p["ours"]["wall_s"] - p["plain"]["wall_s"] for p in pairs]
    print(f"ours - plain: to the first request {statistics.median(first):+.3f} s (median of the pairs: "
          f"{', '.join(f'{x:+.2f}' for x in first)}), whole process {statistics.median(wall):+.2f} s "
          f"({', '.join(f'{x:+.2f}' for x in wall)}); target: first request <= +0.300 s")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
