"""Resume end to end: real ``scrapy crawl weibo`` subprocesses against the sandbox, interrupted and started again.

The sandbox serves one user with 60 pages of 5 posts (300 posts, some with long text that needs a second request).
Interruptions land mid-crawl thanks to a latency fault; every wait polls a file or the request log with a deadline.
"Exactly once" is checked on the union of the JSON Lines outputs against the sandbox's own world model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from scrapy.utils.project import get_project_settings

from mediacrawler.checkpoints.model import Checkpoint
from mediacrawler.checkpoints.store import FileCheckpointStore
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES = 60
PER_PAGE = 5
LATENCY_MS = 40  # per Weibo API response while a test wants to interrupt mid-crawl
CRAWL_TIMEOUT = 90.0

EXTENSION = "mediacrawler.extensions.checkpoint.CheckpointExtension"
SKIP_PIPELINE = "mediacrawler.pipelines.checkpoint.CheckpointSkipPipeline"
STORAGE = "mediacrawler.feeds.SyncedFileFeedStorage"


sb = weibo_sandbox(UID, PAGES, PER_PAGE)


@pytest.fixture
def sandbox(sb: SandboxProcess) -> SandboxProcess:
    sb.reset()
    return sb


@pytest.fixture(scope="module")
def expected_ids() -> set[str]:
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE)
    ids = {str(p.id) for p in world.weibo.timeline(UID)}
    assert len(ids) == PAGES * PER_PAGE
    return ids


def _wiring() -> list[str]:
    """Our components, added to (never replacing) the project's own wiring, until settings.py carries them."""
    settings = get_project_settings()
    extensions = dict(settings.getdict("EXTENSIONS"))
    pipelines = dict(settings.getdict("ITEM_PIPELINES"))
    storages = dict(settings.getdict("FEED_STORAGES"))
    args = []
    if EXTENSION not in extensions:
        extensions[EXTENSION] = 500
        args += ["-s", f"EXTENSIONS={json.dumps(extensions)}"]
    if SKIP_PIPELINE not in pipelines:
        pipelines[SKIP_PIPELINE] = 50
        args += ["-s", f"ITEM_PIPELINES={json.dumps(pipelines)}"]
    if storages.get("") != STORAGE or storages.get("file") != STORAGE:
        storages.update({"": STORAGE, "file": STORAGE})
        args += ["-s", f"FEED_STORAGES={json.dumps(storages)}"]
    return args


class Crawl:
    """One ``scrapy crawl weibo`` subprocess; its log goes to a file in the test's directory."""

    count = 0

    def __init__(self, workdir: Path, sandbox: SandboxProcess, *args: str) -> None:
        Crawl.count += 1
        self.workdir = workdir
        self.log_path = workdir / f"crawl-{Crawl.count}.log"
        command = [
            sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={UID}",
            "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}",
            "-s", f"CHECKPOINT_DIR={workdir / 'checkpoints'}",
            "-s", f"OUTPUT_DIR={workdir / 'output'}",
            "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "MEDIA_ENABLED=0",
            "-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=0",
            *_wiring(), *args,
        ]
        env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
        env.pop("REDIS_URL", None)  # local cache: a fresh dedupe set per run, as for a user without Redis
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float = CRAWL_TIMEOUT) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"crawl did not end within {timeout}s:\n{self.log()[-3000:]}")
        self._log.close()
        return code

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def finished(self) -> int:
        code = self.wait()
        assert code == 0, self.log()[-3000:]
        return code


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 30.0, crawl: Crawl | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if crawl is not None and crawl.proc.poll() is not None:
            pytest.fail(f"crawl ended before {what}:\n{crawl.log()[-3000:]}")
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def checkpoint(workdir: Path) -> Checkpoint | None:
    return FileCheckpointStore(workdir / "checkpoints").load(KEY)


def watermark_at_least(workdir: Path, n: int) -> Callable[[], bool]:
    def check() -> bool:
        cp = checkpoint(workdir)
        return cp is not None and cp.watermark >= n
    return check


def post_ids(paths: Sequence[Path]) -> Counter[str]:
    """Post ids over every record of the given JSON Lines files (all lines must parse)."""
    ids: Counter[str] = Counter()
    for path in paths:
        if not path.exists():
            continue
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            record = json.loads(line)  # a torn line here is a failure: it must have been repaired
            assert record["source"]["job"] == KEY, f"{path}:{n}"
            ids[record["post_id"]] += 1
    return ids


def default_output(workdir: Path) -> Path:
    return workdir / "output" / "weibo" / f"{KEY}.jsonl"


def listing_pages(sandbox: SandboxProcess) -> list[int]:
    """Pages of the listing requests in the sandbox log, in arrival order."""
    pages = []
    for entry in sandbox.requests():
        if entry["path"].endswith("/api/container/getIndex"):
            pages.append(int(parse_qs(entry["query"])["page"][0]))
    return pages


def first_request_page(sandbox: SandboxProcess) -> int:
    entries = sandbox.requests()
    assert entries, "no request reached the sandbox"
    assert entries[0]["path"].endswith("/api/container/getIndex"), entries[0]
    return int(parse_qs(entries[0]["query"])["page"][0])


def assert_exactly_once(ids: Counter[str], expected: set[str]) -> None:
    duplicated = sorted(i for i, c in ids.items() if c > 1)
    missing = sorted(expected - set(ids))
    extra = sorted(set(ids) - expected)
    assert not duplicated, f"{len(duplicated)} posts stored twice, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} posts missing, e.g. {missing[:5]}"
    assert not extra, f"unexpected posts {extra[:5]}"


# --- Interrupted and resumed -------------------------------------------------------------------------------------


def test_sigint_then_same_command_resumes_exactly_once(tmp_path: Path, sandbox: SandboxProcess,
                                                       expected_ids: set[str]) -> None:
    sandbox.set_faults(weibo_latency_ms=LATENCY_MS)
    first = Crawl(tmp_path, sandbox)
    wait_until(watermark_at_least(tmp_path, 10), "watermark 10", crawl=first)
    first.signal(signal.SIGINT)  # once: Scrapy's graceful shutdown
    first.wait()
    assert "Spider closed (shutdown)" in first.log()
    cp = checkpoint(tmp_path)
    assert cp is not None and 10 <= cp.watermark < PAGES, cp
    assert "checkpoint kept" in first.log()

    sandbox.reset()  # clean log, no latency
    second = Crawl(tmp_path, sandbox)
    second.finished()
    assert first_request_page(sandbox) == cp.watermark + 1
    assert min(listing_pages(sandbox)) == cp.watermark + 1
    resume_lines = [line for line in second.log().splitlines() if "resuming at page" in line]
    assert len(resume_lines) == 1 and f"page {cp.watermark + 1}" in resume_lines[0]
    assert_exactly_once(post_ids([default_output(tmp_path)]), expected_ids)
    assert checkpoint(tmp_path) is None  # the second run completed the source


def test_sigkill_twice_then_resume_loses_and_duplicates_nothing(tmp_path: Path, sandbox: SandboxProcess,
                                                                expected_ids: set[str]) -> None:
    # Separate output files per run: the union must still hold every post once, torn tails included.
    outputs = [tmp_path / f"run{n}.jsonl" for n in (1, 2, 3)]
    sandbox.set_faults(weibo_latency_ms=LATENCY_MS)
    watermarks = []
    for n, at in ((0, 12), (1, 30)):
        crawl = Crawl(tmp_path, sandbox, "-o", str(outputs[n]))
        wait_until(watermark_at_least(tmp_path, at), f"watermark {at}", crawl=crawl)
        # Land the kill at a varying point of the page cycle, not right after a checkpoint write.
        time.sleep(0.005 + 0.013 * n)
        crawl.signal(signal.SIGKILL)
        assert crawl.wait() == -signal.SIGKILL
        cp = checkpoint(tmp_path)
        assert cp is not None
        watermarks.append(cp.watermark)
    sandbox.reset()
    last = Crawl(tmp_path, sandbox, "-o", str(outputs[2]))
    last.finished()
    assert first_request_page(sandbox) == watermarks[-1] + 1
    assert_exactly_once(post_ids(outputs), expected_ids)
    assert checkpoint(tmp_path) is None


def test_jobdir_sigint_resume_exactly_once(tmp_path: Path, sandbox: SandboxProcess,
                                           expected_ids: set[str]) -> None:
    jobdir = tmp_path / "crawls" / "w1"
    sandbox.set_faults(weibo_latency_ms=LATENCY_MS)
    first = Crawl(tmp_path, sandbox, "-s", f"JOBDIR={jobdir}")
    wait_until(watermark_at_least(tmp_path, 10), "watermark 10", crawl=first)
    first.signal(signal.SIGINT)
    first.wait()
    assert "Spider closed (shutdown)" in first.log()
    assert (jobdir / "requests.queue").is_dir()
    cp = checkpoint(tmp_path)
    assert cp is not None

    sandbox.reset()
    second = Crawl(tmp_path, sandbox, "-s", f"JOBDIR={jobdir}")
    second.finished()
    assert "Resuming crawl" in second.log()  # Scrapy's own JOBDIR resume
    # The queue continues where it stopped: nothing under the watermark again, no page twice, none skipped.
    pages = listing_pages(sandbox)
    assert pages and min(pages) > cp.watermark, pages[:5]
    assert pages == list(range(pages[0], PAGES + 2)), pages
    assert_exactly_once(post_ids([default_output(tmp_path)]), expected_ids)


# --- When the checkpoint is cleared or kept ----------------------------------------------------------------------


def test_finished_run_clears_pagecount_stop_keeps(tmp_path: Path, sandbox: SandboxProcess,
                                                  expected_ids: set[str]) -> None:
    (tmp_path / "stopped").mkdir()
    stopped = Crawl(tmp_path / "stopped", sandbox, "-s", "CLOSESPIDER_PAGECOUNT=10")
    stopped.finished()
    assert "closespider_pagecount" in stopped.log()
    cp = checkpoint(tmp_path / "stopped")
    assert cp is not None and 1 <= cp.watermark < PAGES

    (tmp_path / "full").mkdir()
    full = Crawl(tmp_path / "full", sandbox)
    full.finished()
    assert checkpoint(tmp_path / "full") is None
    assert not (tmp_path / "full" / "checkpoints" / f"{KEY}.json").exists()
    assert_exactly_once(post_ids([default_output(tmp_path / "full")]), expected_ids)


def test_a_page_failed_for_good_keeps_the_checkpoint_and_is_fetched_again(
    tmp_path: Path, sandbox: SandboxProcess, expected_ids: set[str]
) -> None:
    sandbox.set_faults(weibo_api=[{"kind": "5xx", "page": 7, "status": 503}])
    first = Crawl(tmp_path, sandbox)
    assert first.wait() == 1  # the crawl went on past page 7, but the job is not complete
    assert "page 7 failed for good" in first.log()
    assert "1 listing page(s) failed for good" in first.log()
    cp = checkpoint(tmp_path)
    assert cp is not None and cp.watermark == 6 and cp.failed_pages == [7]
    assert len(cp.stored_ids()) > 200  # everything after page 7 is stored and listed

    sandbox.reset()
    second = Crawl(tmp_path, sandbox)
    second.finished()
    assert first_request_page(sandbox) == 7
    assert "checkpoint/skipped_stored" in second.log()
    assert_exactly_once(post_ids([default_output(tmp_path)]), expected_ids)
    assert checkpoint(tmp_path) is None


# --- -a start, reset, corrupt checkpoints ------------------------------------------------------------------------


def test_start_argument_overrides_checkpoint(tmp_path: Path, sandbox: SandboxProcess) -> None:
    FileCheckpointStore(tmp_path / "checkpoints").save(
        Checkpoint(key=KEY, spider="weibo", watermark=19, next_page=20))
    crawl = Crawl(tmp_path, sandbox, "-a", "start=5", "-a", "max_pages=2")
    crawl.finished()
    assert listing_pages(sandbox) == [5, 6]
    cp = checkpoint(tmp_path)
    assert cp is not None and cp.next_page == 7


def test_reset_checkpoint_restarts_at_page_one(tmp_path: Path, sandbox: SandboxProcess) -> None:
    FileCheckpointStore(tmp_path / "checkpoints").save(
        Checkpoint(key=KEY, spider="weibo", watermark=19, next_page=20))
    crawl = Crawl(tmp_path, sandbox, "-a", "reset_checkpoint=true", "-a", "max_pages=1")
    crawl.finished()
    assert "checkpoint reset" in crawl.log()
    assert listing_pages(sandbox) == [1]


def test_truncated_checkpoint_is_moved_aside_with_a_warning(tmp_path: Path, sandbox: SandboxProcess) -> None:
    path = tmp_path / "checkpoints" / f"{KEY}.json"
    path.parent.mkdir()
    path.write_text('{"schema": 1, "key": "' + KEY + '", "watermark": 1', "utf-8")
    crawl = Crawl(tmp_path, sandbox, "-a", "max_pages=1")
    crawl.finished()
    warnings = [line for line in crawl.log().splitlines() if "WARNING" in line and "moved aside" in line]
    assert len(warnings) == 1, crawl.log()[-3000:]
    assert (path.parent / f"{KEY}.json.corrupt").exists()
    assert listing_pages(sandbox) == [1]
