"""One large file over loopback: curl vs Scrapy's stock FilesPipeline vs our segmented download, in one run.

    .venv/bin/python benchmarks/bench_large_file.py                  # 1 GiB, 3 rounds
    .venv/bin/python benchmarks/bench_large_file.py --size 268435456 --rounds 1

Starts the platform sandbox itself and downloads ``/media/blob/bench?size=N`` with

- ``curl``       — ``curl -sS -o FILE URL`` (the floor for "download to a file"; no hash);
- ``stock``      — ``scrapy`` with ``FilesPipeline`` (``FILES_STORE`` in the work dir, one item), which buffers
                   the whole body in memory, MD5s it and writes it;
- ``ours``       — :class:`mediacrawler.media.segments.SegmentedDownloader` with the MEDIA_SEGMENT_* defaults and
                   MEDIA_FSYNC on: Range segments into a spool, SHA-256 overlapped with the transfer, published
                   into the content-addressed store by rename;
- ``ours-nofsync`` — the same with MEDIA_FSYNC off (curl and the stock pipeline do not fsync either);
- ``curl-https`` — ``curl -sSk URL | tee FILE | sha256sum`` from a second sandbox serving HTTPS (a self-signed
                   certificate made at start with ``cryptography``): download, write and hash, as ours does;
- ``ours-https`` — ``ours`` from that HTTPS sandbox;
- ``scrapy-empty`` — a plain Scrapy process whose spider makes no request: the framework's own floor (start-up and
                   teardown), against which no Scrapy-based download can beat it (only with --cases);
- ``curl-sha``   — ``curl -sS URL | tee FILE | sha256sum`` over plain HTTP: curl with the SHA-256 a
                   content-addressed store needs (only with --cases);
- ``py-floor``   — a Python process with no framework and no third-party import: one socket, ``recv_into`` a 1 MiB
                   buffer, ``hashlib.sha256``, ``os.write``, one ``fsync`` at the end: the floor of any Python
                   downloader that hashes and syncs what it stores (``py-floor-nofsync``: without the fsync; only
                   with --cases).

Each case is a whole process timed from outside (start-up included) with GNU ``/usr/bin/time`` (wall, peak RSS
of the largest process). Cases run interleaved (A B C D, A B C D, …) after ``sync`` so that write-back of one run
does not land in the next; medians with (min-max) and ratios per round are printed, then a Markdown table for
docs/benchmarks.md. Every stored file is checked against the sandbox's SHA-256 of the blob.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MiB = 1024 * 1024
CASES = ("curl", "stock", "ours", "ours-nofsync", "curl-https", "ours-https")
#: Run only when asked for (--cases); the base-* ones with --base.
BASE_CASES = ("base", "base-nofsync", "base-https")
EXTRA_CASES = ("scrapy-empty", "curl-sha", "py-floor", "py-floor-nofsync")


# --- child processes (run as: bench_large_file.py --child stock|ours URL WORKDIR) ----------------------------
def _child_settings(workdir: Path) -> dict[str, Any]:
    return {
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "FILES_STORE": str(workdir / "store"),
        # --set NAME=VALUE of the harness (e.g. MEDIA_SEGMENT_SIZE), passed through the environment.
        **json.loads(os.environ.get("BENCH_LARGE_FILE_SETTINGS") or "{}"),
    }


def _child_stock(url: str, workdir: Path) -> None:
    from scrapy import Spider
    from scrapy.crawler import CrawlerProcess

    class StockSpider(Spider):
        name = "bench_stock"

        async def start(self) -> AsyncIterator[Any]:
            yield {"file_urls": [url]}

    settings = {**_child_settings(workdir), "ITEM_PIPELINES": {"scrapy.pipelines.files.FilesPipeline": 1}}
    process = CrawlerProcess(settings)
    process.crawl(StockSpider)
    process.start()
    files = [p for p in (workdir / "store").rglob("*") if p.is_file()]
    _report(workdir, files[0] if files else None)


def _child_empty(workdir: Path) -> None:
    from scrapy import Spider
    from scrapy.crawler import CrawlerProcess

    class EmptySpider(Spider):
        name = "bench_empty"

        async def start(self) -> AsyncIterator[Any]:
            return
            yield

    process = CrawlerProcess(_child_settings(workdir))
    process.crawl(EmptySpider)
    process.start()
    _report(workdir, None)


def _child_floor(url: str, workdir: Path, fsync: bool) -> None:
    """GET ``url`` over one socket into ``workdir/blob.bin``, SHA-256 on the way, ``fsync`` at the end: no framework,
    no third-party code, no error handling beyond the status line (a plain ``Content-Length`` answer only)."""
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    target = workdir / "blob.bin"
    t0 = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=60) as sock:
        sock.sendall(f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     f"Connection: close\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit("py-floor: the connection closed before the headers ended")
            head += chunk
        status, _, rest = head.partition(b"\r\n\r\n")
        if not status.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"py-floor: {status.splitlines()[0]!r}")
        digest = hashlib.sha256(rest)
        buf = bytearray(MiB)  # 1 MiB: with 4 MiB reads the same copies took ~3x the system CPU here
        view = memoryview(buf)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, rest)
            while n := sock.recv_into(view):
                digest.update(view[:n])
                pending = view[:n]
                while pending:
                    pending = pending[os.write(fd, pending):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    _report(workdir, target, download_s=round(time.monotonic() - t0, 3))


def _child_ours(url: str, workdir: Path, fsync: bool) -> None:
    from scrapy import Spider
    from scrapy.crawler import CrawlerProcess

    from mediacrawler.media.segments import SegmentedDownloader
    from mediacrawler.media.store import ContentAddressedStore

    stored: list[Path] = []
    phases: dict[str, float] = {}

    class OursSpider(Spider):
        name = "bench_ours"

        async def start(self) -> AsyncIterator[Any]:
            store = ContentAddressedStore(workdir / "store", fsync=fsync)
            downloader = SegmentedDownloader(self.crawler, store=store)
            t0 = time.monotonic()
            result = await downloader.download(url, key="bench/blob/1")
            t1 = time.monotonic()
            persisted = await downloader.publish(result)
            phases.update(download_s=round(t1 - t0, 3), publish_s=round(time.monotonic() - t1, 3))
            stored.append(store.abspath(persisted.relpath))
            return
            yield

    from scrapy.settings import Settings

    # The project's settings (MEDIA_* defaults, middlewares), as in a real crawl.
    settings = Settings()
    settings.setmodule("mediacrawler.settings", priority="project")
    settings.update({**_child_settings(workdir), "MEDIA_FSYNC": fsync, "ADDONS": {}, "ITEM_PIPELINES": {},
                     "EXTENSIONS": {}})
    process = CrawlerProcess(settings)
    process.crawl(OursSpider)
    process.start()
    _report(workdir, stored[0] if stored else None, **phases)


def _report(workdir: Path, path: Path | None, **phases: float) -> None:
    (workdir / "result.json").write_text(json.dumps({"path": str(path) if path else None, "phases": phases}))


# --- the harness --------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


def _timed(command: list[str], *, log: Path) -> tuple[float, float, float]:
    """Run ``command`` under GNU time; return (wall seconds, peak RSS MiB, CPU seconds: user + system of it and
    its children; on a loaded machine the CPU figure moves less than the wall)."""
    timing = log.with_suffix(".time")
    with open(log, "wb") as out:
        subprocess.run(["/usr/bin/time", "-o", str(timing), "-f", "%e %M %U %S", *command], stdout=out,
                       stderr=subprocess.STDOUT, check=True, timeout=600)
    wall, rss_kib, user, system = timing.read_text().split()[-4:]
    return float(wall), int(rss_kib) / 1024, float(user) + float(system)


def _prewarm(workdir: Path, size: int) -> None:
    """Write and delete ``size`` bytes of scratch file, so that the case about to start finds that much freshly
    freed page cache, whatever ran before it.

    On a VM with free page reporting (virtio-balloon; the machine of docs/benchmarks.md has it) memory freed more
    than ~2 s ago has been handed back to the host, and writing a file into it costs a host fault per page: 1 GiB
    took 1.7-2.9 s instead of 0.25 s. Without this, a case that starts writing at once (curl) gets the pages the
    previous case just freed, and one that starts a Python process first gets cold pages.
    """
    scratch = workdir / "prewarm.bin"
    block = b"\0" * (8 * MiB)
    with open(scratch, "wb") as f:
        for _ in range(size // len(block) + 1):
            f.write(block)
    scratch.unlink()


def run_case(case: str, *, url: str, workdir: Path, prewarm: int = 0, settle: float = 0.0,
             base: Path | None = None) -> tuple[float, float, Path | None, dict[str, float]]:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    os.sync()  # write-back of the previous case must not be charged to this one
    time.sleep(settle)
    if prewarm:
        _prewarm(workdir, prewarm)
    log = workdir.parent / f"{case}.log"
    if case == "curl":
        target = workdir / "blob.bin"
        wall, rss, cpu = _timed(["curl", "-sS", "-o", str(target), url], log=log)
        return wall, rss, target, {"cpu_s": cpu}
    if case in ("curl-https", "curl-sha"):
        target = workdir / "blob.bin"
        wall, rss, cpu = _timed(["sh", "-c", 'curl -sSk "$0" | tee "$1" | sha256sum', url, str(target)], log=log)
        return wall, rss, target, {"cpu_s": cpu}
    # base-*: the same child from another checkout (--base), for an A/B of the code in one run.
    script = (base / "benchmarks" / Path(__file__).name) if case.startswith("base") and base else Path(__file__)
    mode = {"stock": ["stock"], "scrapy-empty": ["empty"], "ours": ["ours", "1"], "ours-nofsync": ["ours", "0"],
            "py-floor": ["floor", "1"], "py-floor-nofsync": ["floor", "0"],
            "ours-https": ["ours", "1"],
            "base": ["ours", "1"], "base-nofsync": ["ours", "0"], "base-https": ["ours", "1"]}[case]
    wall, rss, cpu = _timed([sys.executable, str(script.resolve()), "--child", *mode, url, str(workdir)], log=log)
    result = json.loads((workdir / "result.json").read_text())
    if case == "scrapy-empty":
        return wall, rss, None, {"cpu_s": cpu}
    if not result["path"]:
        raise SystemExit(f"{case}: no file stored; see {log}")
    return wall, rss, Path(result["path"]), {**(result.get("phases") or {}), "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024 * MiB, help="bytes (default 1 GiB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--workdir", default=None, help="default: a temporary directory (removed at the end)")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait before each case (with --no-prewarm: every case starts on cold memory)")
    parser.add_argument("--no-prewarm", action="store_true",
                        help="do not write and delete a scratch file of --size bytes before each case")
    parser.add_argument("--base", default=None, metavar="DIR",
                        help="another checkout (e.g. `git archive HEAD~1 | tar -x -C DIR`) whose child the cases "
                             "base, base-nofsync and base-https run, for an A/B of the code in one run")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a Scrapy setting for the Scrapy cases (repeatable), e.g. MEDIA_SEGMENT_SIZE=4194304")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.set:
        os.environ["BENCH_LARGE_FILE_SETTINGS"] = json.dumps(dict(pair.split("=", 1) for pair in args.set))
    if args.child:
        kind, *rest = args.child
        if kind == "stock":
            _child_stock(rest[0], Path(rest[1]))
        elif kind == "empty":
            _child_empty(Path(rest[1]))
        elif kind == "floor":
            _child_floor(rest[1], Path(rest[2]), rest[0] == "1")
        else:
            _child_ours(rest[1], Path(rest[2]), rest[0] == "1")
        return

    from mediacrawler_sandbox.media import blob_sha256
    from mediacrawler_sandbox.process import start_sandbox
    from mediacrawler_sandbox.tls import self_signed_pem

    cases = [c for c in args.cases.split(",") if c]
    base = Path(args.workdir or tempfile.mkdtemp(prefix="bench-large-"))
    expected = blob_sha256("bench", args.size)
    # Per case and round: (process wall s, peak RSS MiB, transfer s). Transfer is the time from the first request
    # to the file published in the store, as the child measures it (Scrapy's ~0.7 s start-up excluded: a crawl
    # pays it once, not per file); for curl and the stock pipeline it is the process wall time.
    figures: dict[str, list[tuple[float, float, float, float]]] = {c: [] for c in cases}
    base.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        urls = {}
        for scheme, extra in (("http", ()), ("https", ("--tls-pem", str(self_signed_pem(base))))):
            if any(c.endswith("-https") == (scheme == "https") for c in cases):
                sandbox = stack.enter_context(start_sandbox(extra_args=extra))
                urls[scheme] = f"{sandbox.url}/media/blob/bench?size={args.size}"
        for round_no in range(1, args.rounds + 1):
            for case in cases:
                url = urls["https" if case.endswith("-https") else "http"]
                wall, rss, path, phases = run_case(case, url=url, workdir=base / case,
                                                   prewarm=0 if args.no_prewarm or case == "scrapy-empty" else args.size * 3 // 2,
                                                   settle=args.settle,
                                                   base=Path(args.base) if args.base else None)
                if path is not None:  # scrapy-empty stores nothing
                    digest = _sha256(path)
                    if digest != expected or path.stat().st_size != args.size:
                        raise SystemExit(f"{case}: stored file differs from the source ({digest} != {expected})")
                cpu = phases.pop("cpu_s")
                transfer = round(sum(phases.values()), 3) if phases else wall
                figures[case].append((wall, rss, transfer, cpu))
                print(f"round {round_no} {case:>13}: {wall:6.2f} s  {rss:7.1f} MiB  "
                      f"{args.size / MiB / wall:7.1f} MiB/s  CPU {cpu:5.2f} s  {phases or ''}", flush=True)
                shutil.rmtree(base / case)
    if not args.workdir:
        shutil.rmtree(base, ignore_errors=True)

    def med(case: str, i: int) -> str:
        values = [f[i] for f in figures[case]]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print()
    machine = f"{platform.node()}: {os.cpu_count()} CPU, Python {platform.python_version()}, {platform.platform()}"
    print(f"Machine: {machine}; size {args.size} bytes; {args.rounds} rounds")
    print(f"Load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print("| case | process wall s, median (min-max) | transfer s | CPU s (user + sys) | peak RSS MiB "
          "| transfer MiB/s (median) |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        transfer = statistics.median(f[2] for f in figures[case])
        print(f"| {case} | {med(case, 0)} | {med(case, 2)} | {med(case, 3)} | {med(case, 1)} "
              f"| {args.size / MiB / transfer:.0f} |")

    def paired(a: str, b: str, i: int, j: int) -> str:
        ratios = [x[i] / y[j] for x, y in zip(figures[a], figures[b], strict=True)]
        return f"median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"

    if "curl" in figures:
        print()
        for case in cases:
            if case == "curl":
                continue
            print(f"throughput {case} / curl, transfer (paired by round): {paired('curl', case, 0, 2)}; "
                  f"whole process: {paired('curl', case, 0, 0)}")
    if "curl-https" in figures and "ours-https" in figures:
        print(f"HTTPS: ours / (curl -k | tee | sha256sum), whole process (paired): "
              f"{paired('ours-https', 'curl-https', 0, 0)}; transfer: {paired('ours-https', 'curl-https', 2, 0)}")
    if "stock" in figures:
        for case in ("ours", "ours-nofsync"):
            if case in figures:
                print(f"speed-up {case} vs stock FilesPipeline, whole process (paired): "
                      f"{paired('stock', case, 0, 0)}")


if __name__ == "__main__":
    main()
