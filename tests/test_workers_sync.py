"""Incremental sync and nothing left behind with workers (``REDIS_URL``, no target): two ``scrapy crawl weibo``
worker subprocesses take the job queued in Redis (as ``mediacrawler enqueue`` queues it) and share no disk but the
media store; the high-water mark and the retry set live in a real redis-server. The same stories as
tests/test_incremental.py and tests/test_retry.py: 3 new posts cost pages 1-2 and are all that is emitted; a video
that failed is stored by the next enqueue of the job, dedupe on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mediacrawler.extensions.marks import RedisMarkStore
from mediacrawler.extensions.retries import RedisRetryStore
from mediacrawler.records.store import open_store
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox
from mediacrawler_sandbox.world import build_world
from tests.sync_crawls import control, listing_requests, run_workers
from tests.test_retry import assert_stored_on_retry, video_post
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow


def only_records_db(directory: Path) -> bool:
    """Nothing in ``directory`` but the default SQLite records database (docs/records.md)."""
    allowed = {"records.sqlite3", "records.sqlite3-wal", "records.sqlite3-shm"}
    return {p.name for p in directory.iterdir()} <= allowed


UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES, PER_PAGE = 2, 10


sb = weibo_sandbox(UID, PAGES, PER_PAGE)


@pytest.fixture(scope="module")
def sb_one_page() -> Iterator[SandboxProcess]:
    """The timeline of tests/test_retry.py (one page), whose video post it knows."""
    with start_sandbox(weibo_users=(UID,), weibo_pages=1, weibo_per_page=PER_PAGE, startup_timeout=30) as proc:
        yield proc


def test_workers_read_and_move_the_mark_in_redis(tmp_path: Path, sb: SandboxProcess, redis_url: str) -> None:
    sb.reset()
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    old_ids = [p.id for p in world.timeline(UID)]
    marks = RedisMarkStore(redis.Redis.from_url(redis_url), "mediacrawler:marks:")

    first = run_workers(sb, tmp_path, redis_url, "run1", KEY, {"uid": str(UID)})
    assert sorted(r["post_id"] for r in first) == sorted(old_ids)
    mark = marks.load(KEY)
    # Each worker that ends after the checkpoint was cleared promotes the candidate as it stands: one or two
    # advances (seq), the last one to the newest post.
    assert mark is not None and mark.post_id == old_ids[0] and mark.seq in (1, 2)
    first_seq = mark.seq
    # Workers share no disk: checkpoint and mark in Redis (each has its own records database, the default).
    assert only_records_db(tmp_path / "checkpoints")
    # Each worker's run of the job is a row of the runs table (here one database for both), finished with it.
    store = open_store(str(tmp_path / "checkpoints" / "records.sqlite3"), now="2026-12-02T00:00:00Z")
    try:
        runs = store.table("runs")
        history = store.table("metrics_history")
    finally:
        store.close()
    # Each count is written under the run of the worker's job that read it.
    assert set(old_ids) <= {h["post_id"] for h in history}  # and the originals of reposts
    assert {h["run_id"] for h in history} <= {r["run_id"] for r in runs}
    assert 1 <= len(runs) <= 2 and len({r["worker"] for r in runs}) == len(runs) and all(r["worker"] for r in runs)
    assert {(r["job"], r["finish_reason"]) for r in runs} == {(KEY, "finished")}
    assert sum(r["posts"] for r in runs) == len(first) and all(r["finished_at"] for r in runs)

    sb.reset()
    new_ids = control(sb, "weibo/publish", {"uid": UID, "count": 3})["ids"]
    control(sb, "weibo/pin", {"uid": UID, "post_id": old_ids[-1]})  # an old post pinned first on page 1
    second = run_workers(sb, tmp_path, redis_url, "run2", KEY, {"uid": str(UID)})
    assert sorted(r["post_id"] for r in second) == sorted(new_ids)
    assert sorted(page for _, page in listing_requests(sb)) == [1, 2]  # page 2 is all below the mark: the end
    mark = marks.load(KEY)
    assert mark is not None and mark.post_id == new_ids[0] and mark.seq > first_seq  # never the pinned one
    assert marks.keys() == [KEY]  # the runs' candidates are not marks


def test_workers_keep_the_retry_set_in_redis_and_store_the_video_next_time(
        tmp_path: Path, sb_one_page: SandboxProcess, redis_url: str) -> None:
    """Two workers (no target, REDIS_URL) take the job from Redis: the failed video goes to the Redis retry set;
    the next enqueue of the job reads its post again first and stores the video, dedupe on."""
    post_id, paths = video_post()
    store = RedisRetryStore(redis.Redis.from_url(redis_url), "mediacrawler:retry:")
    sb = sb_one_page
    sb.reset()
    sb.set_faults(media_errors=[{"status": 404, "path": p} for p in sorted(paths)])
    first = {r["post_id"]: r for r in run_workers(sb, tmp_path, redis_url, "run1", KEY, {"uid": str(UID)})}
    assert len(first) == PER_PAGE
    (video,) = [m for m in first[post_id]["media"] if m["kind"] == "video"]
    assert video["status"] == "failed"
    retry_set = store.load(KEY)
    assert retry_set is not None and list(retry_set.assets) == [f"weibo/video/{video['key']}"]
    assert only_records_db(tmp_path / "checkpoints")  # nothing on the workers' disks but media, output, records

    sb.reset()
    again = run_workers(sb, tmp_path, redis_url, "run2", KEY, {"uid": str(UID)})
    assert_stored_on_retry(tmp_path, tmp_path / "run2" / "weibo" / "unused.jsonl", post_id, paths, sb, store,
                           found=again)
    show = [e for e in sb.requests() if e["path"].endswith("/statuses/show")]
    assert [e["query"] for e in show] == [f"id={post_id}"]  # read again once, by the worker that seeded the job
    assert [page for _, page in listing_requests(sb)] == [1]  # all below the mark the first run left
