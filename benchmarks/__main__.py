"""``python -m benchmarks`` (``make bench``): run every benchmark script in turn and print its figures.

Each script measures ours against a baseline in the same run (stock Scrapy, curl, yt-dlp) and prints ratios;
results are recorded by hand in docs/benchmarks.md with the command and the machine. Pass script names to run a
subset: ``python -m benchmarks bench_media_store``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if s.stem in argv]
    failed = []
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        started = time.monotonic()
        # Each benchmark in its own process: peak RSS and start-up are part of what some of them measure.
        rc = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"=== {script.stem}: exit {rc} in {time.monotonic() - started:.0f}s ===", flush=True)
        if rc:
            failed.append(script.stem)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
