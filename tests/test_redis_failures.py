"""Redis failing a running crawl (issue #21 points 2 and 3): a one-job crawl on a real redis-server restarted
without AOF mid-crawl exits 1 with ``redis_data_lost``, its high-water mark does not jump and its checkpoint keeps
its place, so the next run fetches the rest; a password changed while crawling closes it at once with
``redis_auth_failed`` (exit 1), never a DISTRIBUTED_REDIS_GIVE_UP wait. Real subprocesses, sandbox and
redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from tests.plugins.redis_server import RedisServer
from tests.sync_crawls import records
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

UID = 7365120894
PAGES, PER_PAGE = 40, 4
JOB = f"weibo-uid-{UID}"
BASE = f"mediacrawler:dist:weibo:{JOB}"

sb = weibo_sandbox(UID, PAGES, PER_PAGE)


def start_crawl(workdir: Path, sandbox: SandboxProcess, redis_url: str, run: str) -> tuple[subprocess.Popen[bytes],
                                                                                            Path]:
    log = workdir / f"{run}.log"
    argv = [sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={UID}",
            "-s", f"REDIS_URL={redis_url}", "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}",
            "-s", f"OUTPUT_DIR={workdir / run}", "-s", f"CHECKPOINT_DIR={workdir / 'checkpoints'}",
            "-s", f"FILES_STORE={workdir / 'files'}", "-s", "MEDIA_ENABLED=0", "-s", "DEDUPE_ENABLED=0",
            "-s", "CACHE_BACKEND=memory", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
            "-s", "CONCURRENT_REQUESTS=2", "-s", "DISTRIBUTED_HEARTBEAT=0.3", "-s", "DISTRIBUTED_ACK_INTERVAL=0.2",
            "-s", "DISTRIBUTED_LEASE_TTL=5", "-s", "LOG_LEVEL=INFO"]
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    for name in ("REDIS_URL", "CACHE_BACKEND", "CHECKPOINT_BACKEND"):
        env.pop(name, None)
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, log


def wait_exit(proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        pytest.fail(f"the crawl did not end within {timeout}s:\n{log.read_text('utf-8', 'replace')[-3000:]}")


def wait_for(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # bounded by the deadline
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def exported(workdir: Path, run: str) -> list[str]:
    return [str(r["post_id"]) for r in records(workdir / run / "weibo" / f"{JOB}.jsonl")]


def test_redis_restarted_without_aof_is_no_completed_source(
        sb: SandboxProcess, tmp_path: Path, redis_server_factory: Callable[..., RedisServer]) -> None:
    sb.reset()
    sb.set_faults(weibo_latency_ms=40)
    expected = [str(p.id) for p in build_world(weibo_users=(UID,), weibo_pages=PAGES,
                                               weibo_per_page=PER_PAGE).weibo.timeline(UID)]
    server = redis_server_factory(aof=False)
    proc, log = start_crawl(tmp_path, sb, server.url, "run1")
    try:
        client = server.client()
        wait_for(lambda: int(client.get(f"{BASE}:seq") or 0) >= 6, "6 requests queued", 60)
        server.stop()
        server.start()  # empty: nothing was persisted
        code = wait_exit(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        sb.set_faults(weibo_latency_ms=0)
    text = log.read_text("utf-8", "replace")
    first = exported(tmp_path, "run1")
    assert code == 1, text[-3000:]
    assert "redis_data_lost" in text and "Traceback" not in text, text[-3000:]
    assert 0 < len(first) < len(expected)
    # Not a completed source: no mark claims the newest post, the checkpoint keeps its place.
    marks = tmp_path / "checkpoints" / "marks" / f"{JOB}.json"
    assert not marks.exists() or json.loads(marks.read_text())["post_id"] != expected[0]
    assert (tmp_path / "checkpoints" / f"{JOB}.json").exists()

    proc, log = start_crawl(tmp_path, sb, server.url, "run2")
    code = wait_exit(proc, log)
    assert code == 0, log.read_text("utf-8", "replace")[-3000:]
    assert set(first) | set(exported(tmp_path, "run2")) == set(expected)
    assert not (tmp_path / "checkpoints" / f"{JOB}.json").exists()  # completed now
    # A resumed run leaves the mark where it was (extensions/marks.py): still none, so the next run walks it all.
    assert not marks.exists()


def test_password_set_while_crawling_exits_1_at_once(
        sb: SandboxProcess, tmp_path: Path, redis_server_factory: Callable[..., RedisServer]) -> None:
    sb.reset()
    sb.set_faults(weibo_latency_ms=40)
    server = redis_server_factory(aof=False)
    proc, log = start_crawl(tmp_path, sb, server.url, "run")
    try:
        client = server.client()
        wait_for(lambda: int(client.get(f"{BASE}:seq") or 0) >= 4, "4 requests queued", 60)
        client.config_set("requirepass", "n3w-Secret")
        client.connection_pool.disconnect()
        with redis.Redis(host="127.0.0.1", port=server.port, password="n3w-Secret") as admin:
            admin.client_kill_filter(_type="normal", skipme=True)  # every connection must authenticate again
        started = time.monotonic()
        code = wait_exit(proc, log, timeout=60)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        sb.set_faults(weibo_latency_ms=0)
    text = log.read_text("utf-8", "replace")
    assert code == 1, text[-3000:]
    assert "redis_auth_failed" in text, text[-3000:]
    assert took < 30  # not DISTRIBUTED_REDIS_GIVE_UP (600 s)
    assert "n3w-Secret" not in text


def test_a_worker_on_redis_restarted_without_aof_completes_no_job_and_moves_no_mark(
        sb: SandboxProcess, tmp_path: Path, redis_server_factory: Callable[..., RedisServer]) -> None:
    """Worker mode (jobs from the job board): the job's generation stamp is written when the worker takes it; an
    emptied Redis reads as neither a finished job nor one to seed again, and no high-water mark is written."""
    from tests.test_distributed_e2e import Worker, enqueue

    sb.reset()
    sb.set_faults(weibo_latency_ms=40)
    server = redis_server_factory(aof=False)
    enqueue(server.url, tmp_path)
    worker = Worker(tmp_path, sb, server.url, "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
                    "-s", "CONCURRENT_REQUESTS=2", "-s", "DISTRIBUTED_LEASE_TTL=5")
    try:
        client = server.client()
        wait_for(lambda: int(client.get(f"{BASE}:seq") or 0) >= 6, "6 requests queued", 60)
        assert client.get("mediacrawler:dist:weibo:generation")  # stamped when the worker took the job
        server.stop()
        server.start()  # empty: nothing was persisted
        code = worker.wait(90)
    finally:
        if worker.proc.poll() is None:
            worker.kill()
        sb.set_faults(weibo_latency_ms=0)
    text = worker.log()
    assert code == 1, text[-3000:]
    assert "redis_data_lost" in text and "Traceback" not in text, text[-3000:]
    assert f"job {JOB} finished" not in text and "high-water mark at post" not in text
    assert text.count(f"seeding job {JOB}") == 1, text[-3000:]  # never seeded again into the empty Redis
    # Nothing in the new Redis claims the job was covered: no mark.
    client = server.client()
    assert client.keys("mediacrawler:marks:*") == [], client.keys("*")
