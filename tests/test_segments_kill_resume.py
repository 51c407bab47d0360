"""A crawl SIGKILLed in the middle of a segmented download, then run again: only the missing bytes cross the wire.

Both runs are real Scrapy processes (the driver of tests/test_media_segments.py) downloading from the sandbox
subprocess; what was transferred is measured at the sandbox (bytes handed to the socket per request, including
the partial bodies of requests in flight at the kill).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mediacrawler.media.spool import ledger_path, load_ledger, spool_path
from mediacrawler_sandbox.media import blob_sha256
from mediacrawler_sandbox.process import SandboxProcess
from tests.test_media_segments import ROOT, driver_command, sha256_file, spool_files

KiB = 1024
MiB = 1024 * KiB
pytestmark = pytest.mark.slow


def _media_bytes(sandbox: SandboxProcess, name: str) -> int:
    return sum(e["bytes"] for e in sandbox.requests() if e["path"] == f"/media/blob/{name}")


def test_sigkill_mid_download_then_resume(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size, name, segment, concurrency = 8 * MiB, "killed", 128 * KiB, 2
    url = f"{fresh_sandbox.url}/media/blob/{name}?size={size}"
    settings = {"MEDIA_SEGMENT_THRESHOLD": segment, "MEDIA_SEGMENT_SIZE": segment,
                "MEDIA_SEGMENT_CONCURRENCY": concurrency}
    store = tmp_path / "store"
    key = "test/video/killed"
    ledger_file = ledger_path(spool_path(spool_dir=store / "spool", key=key))

    # Run 1: slowed down (40 ms per request) so that the kill lands mid-file, after a few segments are in.
    fresh_sandbox.set_faults(media_latency_ms=40)
    out1 = tmp_path / "run1.json"
    proc = subprocess.Popen(driver_command(url=url, key=key, out=out1, store=store, settings=settings),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        done = 0
        while time.monotonic() < deadline and proc.poll() is None:
            ledger = load_ledger(ledger_file, key=key) if ledger_file.exists() else None
            done = len(ledger.done) if ledger else 0
            if done >= 12:
                break
            time.sleep(0.02)
        assert done >= 12, f"the download did not get far enough to be killed (done={done}, exit={proc.poll()})"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert not out1.exists(), "run 1 finished before the kill: nothing was tested"
    time.sleep(0.2)  # let the sandbox notice the dropped connections before reading its log
    run1_bytes = _media_bytes(fresh_sandbox, name)
    after_kill = load_ledger(ledger_file, key=key)
    assert after_kill is not None and 0 < after_kill.done_bytes() < size

    # A kill can also land while the ledger is being saved: its temp file stays behind (made sure of here).
    (ledger_file.parent / f".{ledger_file.name}.k1ll3d.tmp").write_bytes(b'{"version": 1')

    # Run 2: a new process; it finds the spool and its ledger and fetches only the rest.
    fresh_sandbox.reset()
    out2 = tmp_path / "run2.json"
    run = subprocess.run(driver_command(url=url, key=key, out=out2, store=store, settings=settings), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out2.exists(), run.stderr[-3000:]
    outcome = json.loads(out2.read_text())
    assert outcome["ok"], outcome
    assert sha256_file(store / outcome["persisted"]["relpath"]) == blob_sha256(name, size)
    run2_bytes = _media_bytes(fresh_sandbox, name)
    assert run2_bytes == size - after_kill.done_bytes()  # exactly the segments the ledger did not have
    assert outcome["result"]["resumed_bytes"] == after_kill.done_bytes()
    # Across both runs, what was transferred twice is at most the segments in flight at the kill.
    wasted = run1_bytes + run2_bytes - size
    assert 0 <= wasted <= concurrency * segment, (run1_bytes, run2_bytes, wasted)
    assert spool_files(tmp_path) == []  # no spool, no ledger, no stray temp file of a killed save


def test_sigkill_at_default_segments_full_speed_costs_at_most_the_segments_in_flight(
        fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    """Default MEDIA_SEGMENT_SIZE (8 MiB) and MEDIA_SEGMENT_CONCURRENCY (3), no throttling: what a kill may cost at
    any moment (bytes served minus bytes in the saved ledger) stays within size x concurrency, and so does what a
    kill a third of the way in costs across both runs."""
    size, name, segment, concurrency = 384 * MiB, "killfast", 8 * MiB, 3
    url = f"{fresh_sandbox.url}/media/blob/{name}?size={size}"
    store = tmp_path / "store"
    key = "test/video/killfast"
    ledger_file = ledger_path(spool_path(spool_dir=store / "spool", key=key))

    # Run 1 at full speed; sampled until a third has been served. Bytes served are read before the ledger, so a
    # save landing between the two reads can only make the measured exposure smaller, never larger.
    out1 = tmp_path / "run1.json"
    proc = subprocess.Popen(driver_command(url=url, key=key, out=out1, store=store), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    exposures: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + 30
        served = 0
        while time.monotonic() < deadline and proc.poll() is None and served < size // 3:
            served = fresh_sandbox.stats()["media_bytes_sent"]
            ledger = load_ledger(ledger_file, key=key) if ledger_file.exists() else None
            exposures.append((served, ledger.done_bytes() if ledger else 0))
        assert served >= size // 3, f"run 1 did not get a third of the way (served={served}, exit={proc.poll()})"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert not out1.exists(), "run 1 finished before the kill: nothing was tested"
    time.sleep(0.2)  # let the sandbox notice the dropped connections before reading its counters
    run1_bytes = fresh_sandbox.stats()["media_bytes_sent"]
    after_kill = load_ledger(ledger_file, key=key)
    assert after_kill is not None and 0 < after_kill.done_bytes() < size
    worst = max(served - saved for served, saved in exposures)
    assert len(exposures) > 10 and worst <= concurrency * segment, (worst / MiB, len(exposures))

    fresh_sandbox.reset()
    out2 = tmp_path / "run2.json"
    run = subprocess.run(driver_command(url=url, key=key, out=out2, store=store), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out2.exists(), run.stderr[-3000:]
    outcome = json.loads(out2.read_text())
    assert outcome["ok"], outcome
    assert outcome["persisted"]["sha256"] == blob_sha256(name, size)
    assert sha256_file(store / outcome["persisted"]["relpath"]) == blob_sha256(name, size)
    run2_bytes = fresh_sandbox.stats()["media_bytes_sent"]
    assert run2_bytes == size - after_kill.done_bytes()
    assert outcome["result"]["resumed_bytes"] == after_kill.done_bytes()
    wasted = run1_bytes + run2_bytes - size
    assert 0 <= wasted <= concurrency * segment, (run1_bytes, run2_bytes, wasted)
    assert spool_files(tmp_path) == []
