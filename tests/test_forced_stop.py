"""A forced stop is no success: ``scrapy crawl`` stopped by a second SIGTERM (or by SHUTDOWN_GRACE running out)
exits with status 1, at once, and the checkpoint still holds the last completed page; a graceful stop that ends by
itself exits 0. A real ``scrapy crawl`` subprocess against the sandbox, one picture of page 2 stalled."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest

from mediacrawler.checkpoints.store import FileCheckpointStore
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from tests.sync_crawls import ROOT, crawl_command
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES, PER_PAGE = 3, 5


sb = weibo_sandbox(UID, PAGES, PER_PAGE)


def stalled_picture() -> str:
    """The path of a picture of a page-2 post: while it stalls, page 2 never completes."""
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    pic = next(pic for post in world.page(UID, 2) for pic in post.pics)
    return urllib.parse.urlsplit(pic.path("large")).path


def wait_until(proc: subprocess.Popen[bytes], log: Path, predicate: Callable[[], bool], what: str,
               timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no {what}:\n{log.read_text('utf-8', 'replace')[-3000:]}")
        time.sleep(0.05)


def start_crawl(sb: SandboxProcess, workdir: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``scrapy crawl weibo`` of the sandbox's user in the background; (process, its log file)."""
    command = crawl_command("weibo", sb, workdir, "-a", f"uid={UID}", *args)
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    env.pop("REDIS_URL", None)
    log = workdir / "crawl.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, log


def watermark(workdir: Path) -> int | None:
    cp = FileCheckpointStore(workdir / "checkpoints").load(KEY)
    return None if cp is None else cp.watermark


@pytest.mark.parametrize("how", ["second-signal", "grace"])
def test_a_forced_stop_exits_non_zero_and_keeps_the_checkpoint(tmp_path: Path, sb: SandboxProcess,
                                                               how: str) -> None:
    stalled = stalled_picture()
    sb.reset()
    sb.set_faults(media_stall_paths={stalled: 100}, weibo_latency_ms=50)
    grace = "120" if how == "second-signal" else "1"
    proc, log = start_crawl(sb, tmp_path, "-s", f"SHUTDOWN_GRACE={grace}", "-s", "SHUTDOWN_POLL_INTERVAL=0.1")
    try:
        wait_until(proc, log, lambda: any(e["path"] == stalled for e in sb.requests())
                   and (watermark(tmp_path) or 0) >= 1, "stalled GET after page 1 completed")
        proc.send_signal(signal.SIGTERM)
        if how == "second-signal":
            wait_until(proc, log, lambda: "Closing spider (shutdown)" in log.read_text("utf-8", "replace"),
                       "graceful stop")
            proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    text = log.read_text("utf-8", "replace")
    assert code == 1, text[-3000:]
    assert "stopped before the crawl could close" in text
    if how == "second-signal":
        assert "Received SIGTERM twice, forcing unclean shutdown" in text and took < 10, (took, text[-3000:])
    else:
        assert "Graceful stop took longer than SHUTDOWN_GRACE=1 s" in text and took < 10, (took, text[-3000:])
    assert watermark(tmp_path) == 1  # still readable, still at the last completed page


def test_a_graceful_stop_that_ends_by_itself_exits_zero(tmp_path: Path, sb: SandboxProcess) -> None:
    sb.reset()
    sb.set_faults(weibo_latency_ms=300)
    proc, log = start_crawl(sb, tmp_path)
    try:
        wait_until(proc, log, lambda: (watermark(tmp_path) or 0) >= 1, "page 1 completed")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    text = log.read_text("utf-8", "replace")
    assert code == 0 and "Spider closed (shutdown)" in text, text[-3000:]
    assert (watermark(tmp_path) or 0) >= 1
