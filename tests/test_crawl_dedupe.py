"""Whole crawls with the dedupe pipeline on a real Redis: twice within the TTL, after the TTL, through an outage,
and killed mid-crawl then resumed.

Every crawl is a subprocess (a reactor runs once per process). The ``weibo`` tests run ``scrapy crawl weibo``
against the platform sandbox; the last test runs this module as a script, with a spider that yields posts from
``start()`` at a fixed pace (no HTTP), so the outage test has a variant that depends on nothing but Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Spider

from mediacrawler.items import Post

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


class PostsSpider(Spider):
    """Yields ``count`` posts with ids 1..count, ``delay`` seconds apart."""

    name = "dedupe_posts"

    def __init__(self, *args: Any, count: str = "10", delay: str = "0", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count, self.delay = int(count), float(delay)

    async def start(self) -> AsyncIterator[Any]:
        for n in range(1, self.count + 1):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield Post(
                platform="weibo", post_id=str(n), url=f"https://weibo.com/1/{n}", author=None, created_at=None
            )


def _main() -> None:
    from scrapy.crawler import CrawlerProcess

    parser = argparse.ArgumentParser()
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ttl", default="86400")
    parser.add_argument("--count", default="10")
    parser.add_argument("--delay", default="0")
    args = parser.parse_args()
    from tests.utils import project_settings_dict

    # The project's defaults of what the pipeline and its cache read (settings.py holds them), then this crawl's.
    defaults = {k: v for k, v in project_settings_dict().items() if k.startswith(("DEDUPE_", "CACHE_"))}
    process = CrawlerProcess(
        {
            **defaults,
            "ITEM_PIPELINES": {"mediacrawler.pipelines.dedupe.DedupePipeline": 200},
            "DEDUPE_ENABLED": True,
            "DEDUPE_TTL": args.ttl,
            "REDIS_URL": args.redis_url,
            "CACHE_RETRY_BACKOFF_BASE": 0.2,
            "CACHE_RETRY_BACKOFF_MAX": 1.0,
            "FEEDS": {args.out: {"format": "jsonlines", "overwrite": True}},
            "LOG_LEVEL": "INFO",
            "TELNETCONSOLE_ENABLED": False,
            "REMOTE_CONTROL_ENABLED": False,
        }
    )
    process.crawl(PostsSpider, count=args.count, delay=args.delay)
    process.start()


def crawl(redis_url: str, out: Path, **options: Any) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tests.test_crawl_dedupe", "--redis-url", redis_url, "--out", str(out)]
    for name, value in options.items():
        argv += [f"--{name}", str(value)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str], timeout: float = 120) -> str:
    """Wait for the crawl; return its log (stderr)."""
    _, log = process.communicate(timeout=timeout)
    assert process.returncode == 0, log
    assert "Traceback" not in log, log
    return log


def post_ids(out: Path) -> list[str]:
    """The exported post ids, sorted (the pipeline finishes items in whatever order its cache calls return)."""
    lines = out.read_text(encoding="utf-8").splitlines()
    return sorted((json.loads(line)["post_id"] for line in lines if line.strip()), key=int)


# --- scrapy crawl weibo against the sandbox -----------------------------------------------------------------------
WEIBO_UID = "7365120894"
WEIBO_POSTS = 50  # the default sandbox world: 5 pages of 10 posts per timeline


def crawl_weibo(sandbox: Any, redis_url: str, out: Path, *settings: str) -> subprocess.Popen[str]:
    workdir = out.parent / f"{out.stem}-work"
    argv = [
        sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={WEIBO_UID}",
        "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}",
        "-s", "DEDUPE_ENABLED=1",
        "-s", f"REDIS_URL={redis_url}",
        # Normalize then dedupe, as in settings.py; media is not under test here (and would download every file).
        "-s", "ITEM_PIPELINES=" + json.dumps({
            "mediacrawler.pipelines.normalize.NormalizePipeline": 100,
            "mediacrawler.pipelines.dedupe.DedupePipeline": 200,
        }),
        # Each run starts from page 1, whatever a checkpoint of an earlier run says.
        "-s", f"CHECKPOINT_DIR={workdir / 'checkpoints'}",
        "-s", f"FILES_STORE={workdir / 'files'}",
        "-s", "CACHE_RETRY_BACKOFF_BASE=0.2",
        "-s", "CACHE_RETRY_BACKOFF_MAX=1.0",
        *settings,
        "-O", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


FAST = ("-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0")  # the sandbox needs no politeness


def test_weibo_crawled_twice_within_ttl_emits_each_post_once(
    fresh_sandbox: Any, redis_url: str, tmp_path: Path
) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    log = finish(crawl_weibo(fresh_sandbox, redis_url, first, *FAST))
    assert f"'dedupe/accepted': {WEIBO_POSTS}" in log
    log = finish(crawl_weibo(fresh_sandbox, redis_url, second, *FAST))
    assert len(post_ids(first)) == len(set(post_ids(first))) == WEIBO_POSTS
    assert post_ids(second) == []
    assert f"'dedupe/dropped': {WEIBO_POSTS}" in log


def test_weibo_posts_are_emitted_again_after_a_2s_ttl(fresh_sandbox: Any, redis_url: str, tmp_path: Path) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    finish(crawl_weibo(fresh_sandbox, redis_url, first, *FAST, "-s", "DEDUPE_TTL=2"))
    time.sleep(2.5)  # the last entry was added before the first crawl ended: 0.5 s of margin
    finish(crawl_weibo(fresh_sandbox, redis_url, second, *FAST, "-s", "DEDUPE_TTL=2"))
    assert len(post_ids(first)) == WEIBO_POSTS
    assert post_ids(second) == post_ids(first)


def test_weibo_crawl_survives_a_redis_restart(
    fresh_sandbox: Any, redis_server_factory: Callable[[], Any], tmp_path: Path
) -> None:
    # With REDIS_URL the crawl's request queue lives in Redis too: a restart costs a pause, not data, when Redis
    # keeps an append-only file (docs/operations.md).
    server = redis_server_factory(aof=True)
    out = tmp_path / "out.jsonl"
    fresh_sandbox.set_faults(weibo_latency_ms=700)  # pages arrive slowly enough to stop Redis between two
    try:
        process = crawl_weibo(fresh_sandbox, server.url, out, *FAST)
        log = _restart_redis_during(process, server, after_entries=10)
    finally:
        fresh_sandbox.reset()
    ids = post_ids(out)
    assert len(ids) == len(set(ids)) == WEIBO_POSTS
    assert log.count("unreachable") == 1, log
    assert f"cache: Redis at {server.url} unreachable" in log
    assert "reachable again" in log
    assert "dedupe/unavailable" not in log


def _restart_redis_during(process: subprocess.Popen[str], server: Any, *, after_entries: int) -> str:
    """Once the crawl has added *after_entries* posts, stop Redis for 1.5 s; return the crawl's log."""
    try:
        with redis.Redis.from_url(server.url) as client:
            deadline = time.monotonic() + 60
            while client.zcard("mediacrawler:dedup:weibo") < after_entries:  # bounded wait
                assert time.monotonic() < deadline and process.poll() is None, "the crawl never got going"
                time.sleep(0.05)
        server.stop()
        time.sleep(1.5)
        assert process.poll() is None, "the crawl ended before Redis came back"
        server.start()
        return finish(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


# --- Killed mid-crawl, then the same command again -----------------------------------------------------------
class SlowStagePipeline:
    """Holds every item ``SLOW_STAGE_DELAY`` seconds after dedupe, as the media pipeline does while downloading."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    @classmethod
    def from_crawler(cls, crawler: Any) -> SlowStagePipeline:
        return cls(crawler.settings.getfloat("SLOW_STAGE_DELAY", 0.0))

    async def process_item(self, item: Any) -> Any:
        await asyncio.sleep(self.delay)
        return item


KILL_PAGES, KILL_PER_PAGE = 12, 5
KILL_JOB = f"weibo-uid-{WEIBO_UID}"
DEDUPE_PIPELINE = "mediacrawler.pipelines.dedupe.DedupePipeline"


class Run:
    """One ``scrapy crawl weibo`` subprocess of the kill test; its log goes to a file, every wait is bounded."""

    def __init__(self, workdir: Path, sandbox: Any, redis_url: str, out: Path) -> None:
        argv = [
            sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={WEIBO_UID}",
            "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}",
            "-s", f"REDIS_URL={redis_url}", "-s", "DEDUPE_ENABLED=1", "-s", "MEDIA_ENABLED=0",
            # The project's chain, plus a stage after dedupe that holds items as long as media downloads would.
            "-s", "ITEM_PIPELINES=" + json.dumps({
                "mediacrawler.pipelines.checkpoint.CheckpointSkipPipeline": 50,
                "mediacrawler.pipelines.normalize.NormalizePipeline": 100,
                DEDUPE_PIPELINE: 200,
                "tests.test_crawl_dedupe.SlowStagePipeline": 250,
            }),
            "-s", "SLOW_STAGE_DELAY=1.5",
            # The second run takes over what the killed one leased once its leases expire: short ones here.
            "-s", "DISTRIBUTED_LEASE_TTL=3", "-s", "DISTRIBUTED_HEARTBEAT=0.5",
            "-s", f"CHECKPOINT_DIR={workdir / 'checkpoints'}",  # shared by both runs: the second one resumes
            "-s", f"FILES_STORE={workdir / 'files'}",
            "-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=0",
            *FAST,
            "-o", str(out),
        ]  # fmt: skip
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": pythonpath, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
        self.log_path = out.with_suffix(".log")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def wait(self, timeout: float = 90.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"crawl did not end within {timeout}s:\n{self.log()[-3000:]}")

    def wait_until(self, predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc.poll() is not None:
                pytest.fail(f"crawl ended before {what}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s waiting for {what}:\n{self.log()[-3000:]}")
            time.sleep(0.02)


def _watermark(workdir: Path) -> int:
    from mediacrawler.checkpoints.model import CheckpointCorrupt
    from mediacrawler.checkpoints.store import FileCheckpointStore

    try:
        cp = FileCheckpointStore(workdir / "checkpoints").load(KILL_JOB)
    except CheckpointCorrupt:
        return 0
    return cp.watermark if cp is not None else 0


def _all_post_ids(paths: Sequence[Path]) -> Counter[str]:
    ids: Counter[str] = Counter()
    for path in paths:
        if path.exists():
            lines = path.read_text("utf-8").splitlines()
            ids.update(json.loads(line)["post_id"] for line in lines if line.strip())
    return ids


def test_sigkill_mid_crawl_then_same_command_emits_every_post_once(
    sandbox_factory: Callable[..., Any], redis_url: str, tmp_path: Path
) -> None:
    """Posts that passed dedupe but were not stored yet when the process died come again on resume: they must not
    be dropped as "seen" (the job's own claim lets them through), and nothing stored is emitted twice."""
    from mediacrawler_sandbox.world import build_weibo_world

    sandbox = sandbox_factory(weibo_users=(WEIBO_UID,), weibo_pages=KILL_PAGES, weibo_per_page=KILL_PER_PAGE)
    world = build_weibo_world(users=(int(WEIBO_UID),), pages=KILL_PAGES, per_page=KILL_PER_PAGE)
    expected = {str(p.id) for p in world.timeline(int(WEIBO_UID))}
    assert len(expected) == KILL_PAGES * KILL_PER_PAGE
    outputs = [tmp_path / "run1.jsonl", tmp_path / "run2.jsonl"]

    sandbox.set_faults(weibo_latency_ms=150)  # pages keep coming while the first ones wait in the slow stage
    first = Run(tmp_path, sandbox, redis_url, outputs[0])
    try:
        # Pages 1-2 stored: the posts of the pages after them are past dedupe, waiting in the slow stage.
        first.wait_until(lambda: _watermark(tmp_path) >= 2, "checkpoint watermark 2")
        first.proc.send_signal(signal.SIGKILL)
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    assert first.wait() == -signal.SIGKILL
    stored_first = _all_post_ids(outputs[:1])
    assert len(stored_first) < len(expected), "the kill came after the crawl had stored everything"

    sandbox.reset()
    second = Run(tmp_path, sandbox, redis_url, outputs[1])
    assert second.wait() == 0, second.log()[-3000:]
    log = second.log()
    assert "Traceback" not in log, log[-3000:]
    assert "resuming at page" in log

    ids = _all_post_ids(outputs)
    duplicated = sorted(i for i, c in ids.items() if c > 1)
    missing = sorted(expected - set(ids))
    assert not duplicated, f"{len(duplicated)} posts stored twice, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} posts lost (run 1 stored {len(stored_first)}), e.g. {missing[:5]}"
    assert set(ids) == expected
    with redis.Redis.from_url(redis_url) as client:
        assert client.zcard("mediacrawler:dedup:weibo") == len(expected)  # every post seen once stored
        # No claim left behind, except one the kill caught between "seen" and "release" in run 1's commit: such a
        # claim is inert (the seen check comes first) and expires with DEDUPE_CLAIM_TTL.
        left = [k.decode().rsplit(":", 1)[1] for k in client.keys("mediacrawler:dedup-claim:*")]
        assert all(client.zscore("mediacrawler:dedup:weibo", pid) is not None for pid in left), left
        assert set(left) <= set(_all_post_ids(outputs[:1])), left


# --- The outage again, without HTTP: a spider that yields posts at a fixed pace -------------------------------------
def test_crawl_survives_a_redis_restart(redis_server_factory: Callable[[], Any], tmp_path: Path) -> None:
    server = redis_server_factory()
    out = tmp_path / "out.jsonl"
    log = _restart_redis_during(crawl(server.url, out, count=30, delay=0.1), server, after_entries=5)
    assert post_ids(out) == [str(n) for n in range(1, 31)]  # nothing lost, nothing duplicated
    assert log.count("unreachable") == 1, log
    assert f"cache: Redis at {server.url} unreachable" in log
    assert "reachable again" in log
    assert "dedupe/unavailable" not in log


if __name__ == "__main__":
    _main()
