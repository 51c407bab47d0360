"""Nothing left behind: a video whose URLs fail for good in one crawl is stored by the next run of the same source,
and by ``mediacrawler retry``, with REDIS_URL set and dedupe on (the post is in the Redis seen set by then, and must
still go through). Real subprocesses, a real redis-server, the sandbox's media fault knobs. Each test runs with the
retry set in a file and in Redis (``CHECKPOINT_BACKEND=redis``: the retry set follows it, nothing on disk)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import redis

from mediacrawler.extensions.retries import FileRetryStore, RedisRetryStore, RetryStore
from mediacrawler.records.store import open_store
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from tests.sync_crawls import crawl_command, listing_requests, media_paths, records, run
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES, PER_PAGE = 1, 10


sb = weibo_sandbox(UID, PAGES, PER_PAGE)


@pytest.fixture(params=["file", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> tuple[tuple[str, ...], RetryStore]:
    """The ``-s`` settings of every command of the test, and the store where its retry set is expected."""
    if request.param == "file":
        return (), FileRetryStore(tmp_path / "checkpoints" / "retry")
    store = RedisRetryStore(redis.Redis.from_url(redis_url), "mediacrawler:retry:")
    return ("-s", "CHECKPOINT_BACKEND=redis"), store


def video_post() -> tuple[str, set[str]]:
    """The timeline post with its own video, and every path of that video's files."""
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    post = next(p for p in world.timeline(UID) if p.video is not None)
    assert post.video is not None
    return post.id, {post.video.path(q) for q in post.video.qualities}


def first_run_fails_the_video(sb: SandboxProcess, tmp_path: Path, redis_url: str,
                              backend: tuple[tuple[str, ...], RetryStore]) -> tuple[str, set[str], str]:
    """Crawl with every file of one video answering 404; the record says failed, the retry set holds it."""
    post_id, paths = video_post()
    settings, store = backend
    sb.reset()
    sb.set_faults(media_errors=[{"status": 404, "path": p} for p in sorted(paths)])
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", *settings, run="run1"), tmp_path,
                    redis_url=redis_url, name="run1")
    assert code == 0, log[-3000:]
    first = {r["post_id"]: r for r in records(tmp_path / "run1" / "weibo" / f"{KEY}.jsonl")}
    assert len(first) == PER_PAGE
    video = [m for m in first[post_id]["media"] if m["kind"] == "video"]
    assert len(video) == 1 and video[0]["status"] == "failed", video
    retry_set = store.load(KEY)
    assert retry_set is not None
    assert (tmp_path / "checkpoints" / "retry" / f"{KEY}.json").exists() is isinstance(store, FileRetryStore)
    retry = retry_set.to_dict()
    assert retry["args"] == {"uid": str(UID)}
    assert [(k, a["post_id"], a["reason"]) for k, a in retry["assets"].items()] == [
        (f"weibo/video/{video[0]['key']}", post_id, video[0]["error"].split(":")[0])]
    assert f"{KEY}: 1 media assets pending retry" in log
    # Dedupe on a real Redis: the post is seen, so without the retry set it would be dropped from now on.
    with redis.Redis.from_url(redis_url) as client:
        assert client.zscore("mediacrawler:dedup:weibo", post_id) is not None
    sb.reset()  # the video serves again
    return post_id, paths, video[0]["key"]


def assert_stored_on_retry(tmp_path: Path, records_path: Path, post_id: str, paths: set[str],
                           sb: SandboxProcess, store: RetryStore, found: list[dict] | None = None) -> None:
    again = records(records_path) if found is None else found
    assert [r["post_id"] for r in again] == [post_id]  # the post, read again; nothing else
    video = [m for m in again[0]["media"] if m["kind"] == "video"]
    assert len(video) == 1 and video[0]["status"] == "downloaded", video
    stored = tmp_path / "files" / video[0]["path"]
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == video[0]["sha256"]
    fetched = set(media_paths(sb))
    assert fetched and fetched <= paths  # only the video's files were downloaded
    assert store.load(KEY) is None and store.keys() == []  # nothing pending any more


def test_next_run_of_the_source_stores_the_failed_video(tmp_path: Path, sb: SandboxProcess, redis_url: str,
                                                        backend: tuple[tuple[str, ...], RetryStore]) -> None:
    post_id, paths, _ = first_run_fails_the_video(sb, tmp_path, redis_url, backend)
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", *backend[0], run="run2"), tmp_path,
                    redis_url=redis_url, name="run2")
    assert code == 0, log[-3000:]
    show = [e for e in sb.requests() if e["path"].endswith("/statuses/show")]
    assert [e["query"] for e in show] == [f"id={post_id}"]  # the post read again for fresh URLs
    assert [page for _, page in listing_requests(sb)] == [1]  # then the listing: all below the mark
    assert_stored_on_retry(tmp_path, tmp_path / "run2" / "weibo" / f"{KEY}.jsonl", post_id, paths, sb, backend[1])
    assert f"{KEY}: 0 media assets pending retry (1 stored on retry in this run)" in log
    assert "'dedupe/retry_pending': 1" in log


def test_mediacrawler_retry_stores_the_failed_video(tmp_path: Path, sb: SandboxProcess, redis_url: str,
                                                    backend: tuple[tuple[str, ...], RetryStore]) -> None:
    post_id, paths, _ = first_run_fails_the_video(sb, tmp_path, redis_url, backend)
    # The same -s settings as the crawl, the same OUTPUT_DIR: the job's file is the first run's. A records
    # database of its own (-s RECORDS_DB): the retry crawl writes there.
    database = tmp_path / "retry-records.sqlite3"
    command = [sys.executable, "-m", "mediacrawler", "retry", "--platform", "weibo",
               *crawl_command("weibo", sb, tmp_path, *backend[0], "-s", f"RECORDS_DB={database}", run="run1")[5:]]
    job_file = tmp_path / "run1" / "weibo" / f"{KEY}.jsonl"
    first = job_file.read_bytes()
    code, log = run(command, tmp_path, redis_url=redis_url, name="retry")
    assert code == 0, log[-3000:]
    assert f"{KEY}: retrying 1 media assets of 1 posts" in log and f"{KEY}: every media asset stored" in log
    assert listing_requests(sb) == []  # retry only: no listing page
    # Each record once: the job's file as the crawl left it, the post read again in the retry file only.
    assert job_file.read_bytes() == first
    ids = [r["post_id"] for r in records(job_file)]
    assert len(ids) == len(set(ids)) == PER_PAGE
    retried = sorted(job_file.parent.glob(f"{KEY}.retry-*.jsonl"))
    assert len(retried) == 1, sorted(job_file.parent.iterdir())
    assert f"{KEY}: records of the posts read again in {retried[0].resolve()}" in log, log[-3000:]
    assert_stored_on_retry(tmp_path, retried[0], post_id, paths, sb, backend[1])
    db = open_store(str(database), now="2026-12-02T00:00:00Z")
    try:
        assert [p["post_id"] for p in db.table("posts")] == [post_id]  # the post read again, in that database
        assert [m["status"] for m in db.table("media") if m["kind"] == "video"] == ["downloaded"]
    finally:
        db.close()

    code, log = run(command, tmp_path, redis_url=redis_url, name="retry-again")
    assert code == 0 and "no media pending retry for weibo" in log, log[-3000:]
