"""The same sandbox HLS and DASH videos with yt-dlp and with our crawler, in one run.

    .venv/bin/pip install -r benchmarks/requirements.txt      # yt-dlp (once)
    apt-get update && apt-get install -y ffmpeg                # yt-dlp merges with ffmpeg (once)
    .venv/bin/python benchmarks/bench_video.py                 # 5 rounds, no added latency
    .venv/bin/python benchmarks/bench_video.py --latency-ms 50 --rounds 5

Starts the platform sandbox itself (``media_latency_ms`` = ``--latency-ms`` on every media response, a stand-in
for a CDN's round trip) and downloads, per stream (``--streams``; default the HLS master with A/V-muxed TS
variants, the HLS master with fMP4 video + separate audio, and the DASH ``$Number$`` MPD of one sandbox video;
4 s, 720p selected by both tools):

- ``yt-dlp`` — ``yt-dlp -N 4 --merge-output-format mp4 -o OUT URL`` (4 fragments in flight, like
  MEDIA_FRAGMENT_CONCURRENCY's default; separate video and audio merged by ffmpeg, TS remuxed to MP4 by ffmpeg);
- ``ours`` — a crawl of one post whose video asset is that URL (``scrapy runspider tests/spiders.py`` from an
  empty directory: Scrapy defaults + the media pipeline; MEDIA_FSYNC on as in the project settings), i.e.
  manifest → selection → fragments → remux (PyAV) → verify → content-addressed store + index.

Each case is a whole process timed from outside (interpreter start-up included; wall, and CPU as user+sys of the
process and its children), each round in a fresh work directory (our store would otherwise answer ``uptodate``);
the order of the tools alternates per round. Both tools run with compiled bytecode, as installed packages do: the
children get ``PYTHONPYCACHEPREFIX`` in the run's temporary directory (``PYTHONDONTWRITEBYTECODE`` dropped), filled
by one untimed run of each tool first; otherwise a checkout (ours) would compile its modules from source on every
run where yt-dlp's site-packages have theirs. ``--root DIR``: our crawl from another checkout (``git archive
<commit> mediacrawler tests | tar -x -C DIR``), to measure before and after on one machine. Every output is checked
with PyAV (H.264 720p + AAC, 4 s ±2 %). Prints medians (min-max) per stream and tool, the ratio ours/yt-dlp
(target ≤ 1.0), and a Markdown table for docs/benchmarks.md.
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
import urllib.request
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mediacrawler.items import MediaAsset, Post  # noqa: E402
from mediacrawler_sandbox import video  # noqa: E402
from mediacrawler_sandbox.process import start_sandbox  # noqa: E402

VIDEO_ID = "sbxvid001"
STREAMS = {"hls": "hls", "hls_fmp4": "hls", "dash": "dash"}  # video_urls() name → MediaAsset.manifest
TOOLS = ("yt-dlp", "ours")
YT_DLP = [str(Path(sys.executable).with_name("yt-dlp"))]


def missing_tools() -> list[str]:
    """Commands that install what is missing (empty when all is there)."""
    fixes = []
    if not Path(YT_DLP[0]).exists():
        fixes.append(f"{Path(sys.executable).parent / 'pip'} install -r {ROOT / 'benchmarks' / 'requirements.txt'}")
    if shutil.which("ffmpeg") is None:
        fixes.append("apt-get update && apt-get install -y ffmpeg")
    return fixes


def children_cpu() -> float:
    """User+sys seconds of every child this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_ytdlp_many(urls: list[str], workdir: Path) -> list[Path]:
    """One yt-dlp invocation for every URL (what a user does with a list of videos): start-up paid once."""
    command = [*YT_DLP, "-N", "4", "--no-cache-dir", "--no-progress", "--quiet", "--no-warnings",
               "--merge-output-format", "mp4", "-o", str(workdir / "out-%(autonumber)s.%(ext)s"), *urls]
    proc = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=300)
    outs = sorted(workdir.glob("out-*.mp4"))
    if proc.returncode != 0 or len(outs) != len(urls):
        raise RuntimeError(f"yt-dlp failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return outs


def run_ours_many(items: list[tuple[str, str]], workdir: Path, listing: str, settings: dict[str, str],
                  root: Path = ROOT) -> list[Path]:
    """One crawl of one post carrying every (url, manifest) as a video asset: start-up paid once."""
    assets = [MediaAsset(kind="video", key=f"bench-{i}-{manifest}", url=url, manifest=manifest)
              for i, (url, manifest) in enumerate(items)]
    posts = [Post(platform="sandbox", post_id="bench", url="https://example.invalid/bench", author=None,
                  created_at=None, media=assets)]
    (workdir / "posts.json").write_text(json.dumps([asdict(p) for p in posts]))
    command = [sys.executable, "-m", "scrapy", "runspider", str(root / "tests" / "spiders.py"),
               "-a", "posts=posts.json", "-a", f"listing={listing}", "-O", "items.jsonl",
               "-s", f"FILES_STORE={workdir / 'files'}", "-s", "LOG_LEVEL=WARNING"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    proc = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"crawl failed ({proc.returncode}): {proc.stderr[-2000:]}")
    media = json.loads((workdir / "items.jsonl").read_text().splitlines()[0])["media"]
    if any(a["status"] not in ("downloaded", "deduplicated") for a in media):  # equal remuxes are stored once
        raise RuntimeError(f"crawl stored not everything: {[(a['status'], a['error']) for a in media]}")
    return [workdir / "files" / a["path"] for a in media]


def run_ytdlp(url: str, workdir: Path) -> Path:
    return run_ytdlp_many([url], workdir)[0]


def run_ours(url: str, manifest: str, workdir: Path, listing: str, settings: dict[str, str],
             root: Path = ROOT) -> Path:
    return run_ours_many([(url, manifest)], workdir, listing, settings, root)[0]


def check_output(path: Path, *, height: int, duration: float) -> None:
    import av

    with av.open(str(path)) as container:
        kinds = {s.type: s.codec_context.name for s in container.streams}
        got = container.duration / 1e6
        h = container.streams.video[0].codec_context.height if container.streams.video else None
    if kinds != {"video": "h264", "audio": "aac"} or h != height or abs(got - duration) > 0.02 * duration:
        raise RuntimeError(f"{path}: streams {kinds}, height {h}, duration {got:.3f}")


def machine() -> str:
    free = subprocess.run(["free", "-h"], capture_output=True, text=True).stdout.strip().splitlines()
    mem = free[1].split()[1] if len(free) > 1 else "?"
    ffmpeg = subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    ytdlp = subprocess.run([*YT_DLP, "--version"], capture_output=True, text=True).stdout.strip()
    import scrapy

    return (f"nproc {os.cpu_count()}, RAM {mem}, {platform.platform()}, Python {platform.python_version()}, "
            f"Scrapy {scrapy.__version__}, yt-dlp {ytdlp}, {ffmpeg}, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency-ms", type=int, default=0, help="sandbox media_latency_ms (per response)")
    parser.add_argument("--streams", default=",".join(STREAMS), help=f"comma-separated, of {', '.join(STREAMS)}")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting for our crawl (repeatable)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="checkout whose mediacrawler and tests/spiders.py run as ours (default: this one)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    fixes = missing_tools()
    if fixes:
        print("bench_video needs yt-dlp and ffmpeg. Install them with:\n  " + "\n  ".join(fixes), file=sys.stderr)
        return 2
    streams = [s for s in args.streams.split(",") if s]
    settings = dict(s.split("=", 1) for s in args.set)
    catalog = video.video_catalog(VIDEO_ID)
    sandbox = start_sandbox(startup_timeout=30)
    times: dict[tuple[str, str], list[float]] = {(s, t): [] for s in streams for t in TOOLS}
    cpu: dict[tuple[str, str], list[float]] = {(s, t): [] for s in streams for t in TOOLS}
    batch: dict[str, list[float]] = {t: [] for t in TOOLS}
    try:
        urls = video.video_urls(sandbox.url, VIDEO_ID)
        urllib.request.urlopen(urls["hls"], timeout=30).read()  # the sandbox encodes the video on first use
        sandbox.set_faults(media_latency_ms=args.latency_ms)
        with tempfile.TemporaryDirectory(prefix="bench-video-") as tmp:
            # Every child from here on writes and reads its bytecode there (see the module docstring).
            os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            for tool in TOOLS:  # untimed: compiles both tools' bytecode into the cache
                workdir = Path(tmp) / f"warm-{tool}"
                workdir.mkdir()
                if tool == "yt-dlp":
                    run_ytdlp(urls[streams[0]], workdir)
                else:
                    run_ours(urls[streams[0]], STREAMS[streams[0]], workdir, sandbox.url + "/", settings, root)
                shutil.rmtree(workdir)
            for rnd in range(args.rounds):
                for stream in streams:
                    order = TOOLS if rnd % 2 == 0 else tuple(reversed(TOOLS))
                    for tool in order:
                        workdir = Path(tmp) / f"{rnd}-{stream}-{tool}"
                        workdir.mkdir()
                        cpu_before, started = children_cpu(), time.monotonic()
                        if tool == "yt-dlp":
                            out = run_ytdlp(urls[stream], workdir)
                        else:
                            out = run_ours(urls[stream], STREAMS[stream], workdir, sandbox.url + "/", settings,
                                           root)
                        elapsed, used = time.monotonic() - started, children_cpu() - cpu_before
                        check_output(out, height=720, duration=catalog.duration)
                        times[(stream, tool)].append(elapsed)
                        cpu[(stream, tool)].append(used)
                        print(f"round {rnd + 1} {stream:9s} {tool:7s} {elapsed:6.2f} s (CPU {used:5.2f} s)",
                              flush=True)
                        shutil.rmtree(workdir)
                # Every stream in one run of each tool: the same work, each tool's start-up paid once.
                for tool in (TOOLS if rnd % 2 == 0 else tuple(reversed(TOOLS))):
                    workdir = Path(tmp) / f"{rnd}-batch-{tool}"
                    workdir.mkdir()
                    started = time.monotonic()
                    if tool == "yt-dlp":
                        outs = run_ytdlp_many([urls[s] for s in streams], workdir)
                    else:
                        outs = run_ours_many([(urls[s], STREAMS[s]) for s in streams], workdir,
                                             sandbox.url + "/", settings, root)
                    elapsed = time.monotonic() - started
                    for out in outs:
                        check_output(out, height=720, duration=catalog.duration)
                    batch[tool].append(elapsed)
                    print(f"round {rnd + 1} one run   {tool:7s} {elapsed:6.2f} s", flush=True)
                    shutil.rmtree(workdir)
    finally:
        sandbox.stop()

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"

    print(f"\nMachine: {machine()}")
    print(f"Command: .venv/bin/python benchmarks/bench_video.py --rounds {args.rounds} --latency-ms "
          f"{args.latency_ms} --streams {','.join(streams)}" + "".join(f" --set {s}" for s in args.set)
          + ("" if root == ROOT else f" --root {root}"))
    print("\n| stream | yt-dlp -N 4 wall s, median (min-max) | ours wall s, median (min-max) | ours / yt-dlp "
          "(median of per-round ratios) |")
    print("|---|---|---|---|")
    for stream in streams:
        ours, theirs = times[(stream, "ours")], times[(stream, "yt-dlp")]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        print(f"| {stream} | {med(theirs)} | {med(ours)} | **{statistics.median(ratios):.2f}** "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    total_ours = [sum(times[(s, 'ours')][i] for s in streams) for i in range(args.rounds)]
    total_theirs = [sum(times[(s, 'yt-dlp')][i] for s in streams) for i in range(args.rounds)]
    ratio = statistics.median(a / b for a, b in zip(total_ours, total_theirs, strict=True))
    print(f"| all streams, one run each | {med(total_theirs)} | {med(total_ours)} | **{ratio:.2f}** |")
    one = statistics.median(a / b for a, b in zip(batch["ours"], batch["yt-dlp"], strict=True))
    print(f"| all streams in one run | {med(batch['yt-dlp'])} | {med(batch['ours'])} | **{one:.2f}** |")
    print("\n| stream | yt-dlp CPU s, median (min-max) | ours CPU s, median (min-max) |")
    print("|---|---|---|")
    for stream in streams:
        print(f"| {stream} | {med(cpu[(stream, 'yt-dlp')])} | {med(cpu[(stream, 'ours')])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
