"""Many workers on one Redis, end to end: real ``scrapy crawl weibo`` worker subprocesses (no target, REDIS_URL set),
a job queued with ``mediacrawler enqueue``, the sandbox over HTTP and a real redis-server.

The issue's figure is a job of 300 pages; these tests scale it down (150 pages of 4 posts, 30 ms per Weibo answer;
60 pages for the Redis restart) to stay within ~40 s, and turn the lease timings down (2 s leases, 0.3 s heartbeat)
so a dead worker's requests come back quickly. The kill test runs the whole chain: item dedupe (claims per worker),
media into one FILES_STORE every worker shares (with the Redis media index) and the job's checkpoint in Redis; the
Redis restart test leaves dedupe and media off. Two workers on two FILES_STORE directories sharing the Redis index
each store their own copy of every object.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mediacrawler.media.store import parse_object_relpath
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox
from mediacrawler_sandbox.world import build_world
from tests.plugins.redis_server import free_port, redis_server_binary
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
UID = 7365120894
PAGES, PER_PAGE = 150, 4
PREFIX = "mediacrawler:dist"
BASE = f"{PREFIX}:weibo:weibo-uid-{UID}"
CHECKPOINT = f"mediacrawler:checkpoint:weibo-uid-{UID}"
#: The whole chain on: per-worker dedupe claims, media (shared index in Redis), the checkpoint (Redis for workers).
FULL_CHAIN = ("-s", "MEDIA_ENABLED=1", "-s", "DEDUPE_ENABLED=1", "-s", "MEDIA_FSYNC=0")
#: Pages of the kill test's job: with media on (about 8 images and a video per page of 4 posts) 150 pages would
#: take minutes here.
#: The issue asks for a job of 300 pages; the suite runs 30 (seconds, not minutes). The full size, by hand:
#: DISTRIBUTED_E2E_PAGES=300 .venv/bin/python -m pytest tests/test_distributed_e2e.py -k killed  (3 min 18 s here)
MEDIA_PAGES = int(os.environ.get("DISTRIBUTED_E2E_PAGES", "30"))


sb = weibo_sandbox(UID, PAGES, PER_PAGE)


@pytest.fixture(scope="module")
def sb_media() -> Iterator[SandboxProcess]:
    """A sandbox whose timeline ends at MEDIA_PAGES: the job completes (its checkpoint can be cleared)."""
    with start_sandbox(weibo_users=(UID,), weibo_pages=MEDIA_PAGES, weibo_per_page=PER_PAGE, startup_timeout=30) as proc:
        yield proc


def expected_ids(pages: int, served: int = PAGES) -> set[str]:
    world = build_world(weibo_users=(UID,), weibo_pages=served, weibo_per_page=PER_PAGE)
    ids = [str(p.id) for p in world.weibo.timeline(UID)]
    assert len(ids) == served * PER_PAGE
    return set(ids[: pages * PER_PAGE])  # the timeline is served newest first, page by page


class Worker:
    """One ``scrapy crawl weibo -s REDIS_URL=…`` worker (no target); its log goes to a file."""

    count = 0

    def __init__(self, workdir: Path, sandbox: SandboxProcess, redis_url: str, *settings: str) -> None:
        Worker.count += 1
        self.log_path = workdir / f"worker-{Worker.count}.log"
        argv = [
            sys.executable, "-m", "scrapy", "crawl", "weibo",
            "-s", f"REDIS_URL={redis_url}", "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}",
            "-s", f"OUTPUT_DIR={workdir / 'output'}", "-s", f"FILES_STORE={workdir / 'files'}",
            "-s", "MEDIA_ENABLED=0", "-s", "DEDUPE_ENABLED=0",
            "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "CONCURRENT_REQUESTS=4",
            "-s", "DISTRIBUTED_LEASE_TTL=2", "-s", "DISTRIBUTED_HEARTBEAT=0.3", "-s", "DISTRIBUTED_ACK_INTERVAL=0.2",
            "-s", "DISTRIBUTED_IDLE_CLOSE=3", "-s", "DISTRIBUTED_JOB_POLL=0.2",
            "-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=0", *settings,
        ]  # fmt: skip
        env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        env.pop("REDIS_URL", None)
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"worker did not close within {timeout}s:\n{self.log()[-3000:]}")
        self._log.close()
        return code

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.wait(10) == -signal.SIGKILL


def enqueue(redis_url: str, workdir: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("REDIS_URL", None)
    done = subprocess.run([sys.executable, "-m", "mediacrawler", "enqueue", "weibo", f"uid={UID}", *args,
                           "--redis-url", redis_url], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"queued weibo-uid-{UID}" in done.stdout


def records(output_dir: Path) -> list[dict[str, Any]]:
    """Every record of the workers' output files in OUTPUT_DIR *output_dir* (a torn last line of a killed worker is
    not a record)."""
    found = []
    for path in sorted((output_dir / "weibo").glob("*.jsonl")):
        for line in path.read_text("utf-8").splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def outputs(workdir: Path) -> Counter[str]:
    """Post ids over every worker's output file."""
    return Counter(r["post_id"] for r in records(workdir / "output"))


def assets(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in recs:
        for post in (r, r.get("reposted") or {}):
            out.extend(post.get("media") or [])
    return out


def assert_each_object_stored_once(store: Path, recs: list[dict[str, Any]]) -> set[str]:
    """Every asset of *recs* is stored in *store* under its sha256, and *store* holds exactly those objects, each
    one file with the right hash and nothing half-written; returns the sha256s."""
    shas = set()
    for asset in assets(recs):
        assert asset["status"] in ("downloaded", "deduplicated", "uptodate"), asset
        path = store / asset["path"]
        assert path.is_file() and path.stat().st_size == asset["size"], asset
        assert parse_object_relpath(asset["path"])[0] == asset["sha256"]
        shas.add(asset["sha256"])
    files = [p for p in (store / "objects").rglob("*") if p.is_file()]
    stored = {parse_object_relpath(p.relative_to(store).as_posix())[0] for p in files}
    assert len(files) == len(stored) == len(shas) and stored == shas, "a stray or duplicated object in the store"
    for path in files:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == parse_object_relpath(
            path.relative_to(store).as_posix())[0]
    return shas


def wait_for(predicate: Callable[[], Any], what: str, timeout: float, workers: list[Worker]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}:\n" +
                        "\n".join(w.log()[-1500:] for w in workers))
        time.sleep(0.05)


def assert_all_json(client: redis.Redis) -> int:
    """Every stored request and job is JSON (no pickle); returns how many were checked."""
    n = 0
    for key in client.scan_iter(f"{PREFIX}:*"):
        kind = client.type(key)
        values = (client.hvals(key) if kind == b"hash" and key.endswith((b":req", b":active")) else
                  client.lrange(key, 0, -1) if kind == b"list" else [])
        for value in values:
            json.loads(value)
            n += 1
    return n


def in_flight_posts(client: redis.Redis, pid: int) -> int:
    """What the requests leased by worker ``pid`` can emit again: a listing page's posts, a chain step's post."""
    owned = [rid for rid, owner in client.hgetall(f"{BASE}:owner").items() if f"-{pid}-".encode() in owner]
    total = 0
    for payload in client.hmget(f"{BASE}:req", owned) if owned else []:
        if payload is not None:
            total += PER_PAGE if json.loads(payload)["callback"] == "parse_listing" else 1
    return total


def test_three_workers_one_killed_three_times_lose_nothing(sb_media: SandboxProcess, redis_url: str,
                                                           tmp_path: Path) -> None:
    sb = sb_media
    sb.reset()
    sb.set_faults(weibo_latency_ms=30)
    expected = expected_ids(MEDIA_PAGES, MEDIA_PAGES)
    rng = random.Random(os.environ.get("DISTRIBUTED_E2E_SEED", "14"))
    client = redis.Redis.from_url(redis_url)
    workers = [Worker(tmp_path, sb, redis_url, *FULL_CHAIN) for _ in range(3)]
    started = time.monotonic()
    try:
        enqueue(redis_url, tmp_path)
        wait_for(lambda: client.exists(f"{BASE}:seeded"), "the job to be seeded", 30, workers)
        bound, checked, watermarks = 0, 0, []
        for _ in range(3):
            time.sleep(rng.uniform(0.8, 2.0))
            checked += assert_all_json(client)
            assert client.hexists(f"{PREFIX}:weibo:active", f"weibo-uid-{UID}"), "the job ended before the kill"
            # The job's checkpoint lives in Redis while it runs, its watermark moving as pages complete.
            assert client.exists(CHECKPOINT), "no shared checkpoint while the job runs"
            watermarks.append(int(client.hget(CHECKPOINT, "watermark") or -1))
            # The worker holding the most leases right now (the one whose death costs most).
            owners = Counter(o.decode().split("-")[-2] for o in client.hvals(f"{BASE}:owner"))
            live = [w for w in workers if w.proc.poll() is None]
            victim = max(live, key=lambda w: owners.get(str(w.proc.pid), 0))
            victim.kill()
            bound += in_flight_posts(client, victim.proc.pid)
            workers[workers.index(victim)] = Worker(tmp_path, sb, redis_url, *FULL_CHAIN)
        codes = [w.wait(max(60, 3 * MEDIA_PAGES)) for w in workers]
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
        sb.reset()
    assert codes == [0, 0, 0], "\n".join(w.log()[-2000:] for w in workers)
    assert checked > 0
    ids = outputs(tmp_path)
    missing = expected - set(ids)
    assert not missing, f"{len(missing)} posts missing, e.g. {sorted(missing)[:5]}"
    assert set(ids) == expected
    duplicates = sum(c - 1 for c in ids.values())
    assert duplicates <= bound, f"{duplicates} duplicates, more than the {bound} posts in flight at the kills"
    # The job finished: its keys are gone, nothing is queued, leased or active; no worker deleted it early.
    assert client.keys(f"{BASE}:*") == [] and client.hlen(f"{PREFIX}:weibo:active") == 0
    logs = "".join(w.log() for w in workers)
    assert "Traceback" not in logs
    # The checkpoint was shared and moving (never backwards), and was cleared once, at the end, by one worker.
    assert watermarks == sorted(watermarks) and watermarks[0] >= 0, watermarks
    assert client.keys("mediacrawler:checkpoint:*") == []
    assert logs.count("source completed; shared checkpoint cleared") == 1
    # Media of posts a dead worker held were downloaded by whoever took its leases over: every asset of the union
    # of the outputs is in the one shared store, each object once.
    shas = assert_each_object_stored_once(tmp_path / "files", records(tmp_path / "output"))
    assert len(shas) > MEDIA_PAGES
    print(f"3 kills: {duplicates} duplicates (bound {bound}); {len(shas)} objects; watermarks at the kills "
          f"{watermarks}; {time.monotonic() - started:.1f}s")


def test_two_workers_on_separate_disks_store_their_own_copies(sb_media: SandboxProcess, redis_url: str,
                                                               tmp_path: Path) -> None:
    """Item 5: one Redis media index, two FILES_STORE directories (two machines' disks). The second worker finds
    every asset in the index (the first stored it) but not on its disk: it downloads and stores its own copy; no
    asset is "uptodate" without a local object."""
    sb_media.reset()
    client = redis.Redis.from_url(redis_url)
    runs: dict[str, tuple[list[dict[str, Any]], set[str], int]] = {}
    for name, job_args in (("a", ()), ("b", ("reset_checkpoint=true",))):
        store, out = tmp_path / f"files-{name}", tmp_path / f"output-{name}"
        worker = Worker(tmp_path, sb_media, redis_url, "-s", "MEDIA_ENABLED=1", "-s", "MEDIA_FSYNC=0",
                        "-s", f"FILES_STORE={store}", "-s", f"OUTPUT_DIR={out}")
        try:
            enqueue(redis_url, tmp_path, "max_pages=4", *job_args)
            assert worker.wait(60) == 0, worker.log()[-3000:]
        finally:
            if worker.proc.poll() is None:
                worker.proc.kill()
        recs = records(out)
        media_requests = sum(1 for e in sb_media.requests() if e["path"].startswith("/media/"))
        sb_media.reset()
        runs[name] = (recs, assert_each_object_stored_once(store, recs), media_requests)
        assert "Traceback" not in worker.log()
    (recs_a, shas_a, fetched_a), (recs_b, shas_b, fetched_b) = runs["a"], runs["b"]
    assert len(recs_a) == len(recs_b) == 4 * PER_PAGE and len(shas_a) > 4
    assert client.scard("mediacrawler:media:objects") >= len(shas_a)  # the index is the shared one
    # Same posts, same objects, each in its own store: the second worker downloaded them again (no asset taken as
    # stored because the index knew it).
    assert shas_b == shas_a and fetched_b >= len(shas_b) and fetched_a >= len(shas_a)
    assert not [a for a in assets(recs_b) if a["status"] == "uptodate" and not (tmp_path / "files-b" / a["path"])
                .is_file()]


class AofRedis:
    """A private redis-server with AOF (appendfsync everysec), as docs/operations.md asks; stop/start on one port."""

    def __init__(self, directory: Path) -> None:
        self.port, self.directory = free_port(), directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(self.directory),
             "--protected-mode", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        with redis.Redis(port=self.port, socket_connect_timeout=1) as c:
            while True:  # bounded by the deadline
                try:
                    if c.ping():
                        return
                except redis.ConnectionError:
                    assert time.monotonic() < deadline, "redis-server did not start"
                    time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # a clean shutdown fsyncs the AOF
            self.proc.wait(10)
            self.proc = None


def test_redis_restarted_mid_crawl_costs_a_pause_not_data(sb: SandboxProcess, tmp_path: Path) -> None:
    sb.reset()
    sb.set_faults(weibo_latency_ms=30)
    pages = 60
    expected = expected_ids(pages)
    server = AofRedis(tmp_path)
    server.start()
    workers: list[Worker] = []
    try:
        client = redis.Redis.from_url(server.url)
        workers = [Worker(tmp_path, sb, server.url, "-s", "DISTRIBUTED_LEASE_TTL=10", "-s", "CACHE_BACKEND=memory",
                          "-s", f"DISTRIBUTED_KEY_PREFIX={PREFIX}") for _ in range(2)]
        _enqueue_job(client, pages)
        wait_for(lambda: int(client.get(f"{BASE}:seq") or 0) >= 15, "15 requests queued", 30, workers)
        server.stop()
        time.sleep(2.0)
        assert all(w.proc.poll() is None for w in workers), "a worker died with Redis"
        server.start()
        codes = [w.wait(60) for w in workers]
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
        server.stop()
        sb.reset()
    assert codes == [0, 0], "\n".join(w.log()[-2000:] for w in workers)
    ids = outputs(tmp_path)
    missing = expected - set(ids)
    assert not missing, f"{len(missing)} posts missing, e.g. {sorted(missing)[:5]}"
    assert set(ids) == expected
    logs = "".join(w.log() for w in workers)
    assert "lost Redis" in logs and "answers again" in logs
    assert "Traceback" not in logs


def _enqueue_job(client: redis.Redis, pages: int) -> None:
    """``mediacrawler enqueue weibo uid=… max_pages=…`` through the command (validated there)."""
    url = f"redis://127.0.0.1:{client.connection_pool.connection_kwargs['port']}/0"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "mediacrawler", "enqueue", "weibo", f"uid={UID}",
                           f"max_pages={pages}", "--redis-url", url], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def test_malformed_jobs_ahead_of_a_good_one_are_dead_lettered_and_the_good_job_runs(
        sb: SandboxProcess, redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"key": "weibo-uid-1", "args": {"uid": "1"}}))  # no spider
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"key": "weibo-uid-2", "spider": "weibo", "args": ["2"]}))
    enqueue(redis_url, tmp_path, "max_pages=3")
    worker = Worker(tmp_path, sb, redis_url)
    code = worker.wait(120)
    log = worker.log()
    assert code == 0, log[-3000:]
    assert {r["post_id"] for r in records(tmp_path / "output")} == expected_ids(3)
    letters = [json.loads(v) for v in client.lrange(f"{PREFIX}:weibo:dead", 0, -1)]
    assert [d["job"] for d in letters] == ["weibo-uid-1", "weibo-uid-2"]
    assert log.count("dead-lettered to mediacrawler:dist:weibo:dead") == 2
    assert client.hlen(f"{PREFIX}:weibo:active") == 0
