"""The shared checkpoint's Lua scripts (mediacrawler/distributed/checkpoint.py) on a real redis-server.

Two store instances with their own connections play two workers of one job: what one announces, the other may
finish; the watermark moves only when every page up to it has all its posts out.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import redis

from mediacrawler.distributed.checkpoint import RedisCheckpointStore
from mediacrawler.checkpoints.model import Checkpoint
from mediacrawler.pipelines.dedupe import alive_key

KEY = "weibo-uid-42"
NOW = "2026-11-30T00:00:00Z"


def stores(url: str) -> tuple[RedisCheckpointStore, RedisCheckpointStore]:
    return (RedisCheckpointStore(redis.Redis.from_url(url), "t:cp:"),
            RedisCheckpointStore(redis.Redis.from_url(url), "t:cp:"))


def announce(page: int, ids: list[str], cursor: str | None = None, last: bool = False) -> dict:
    return {"t": "a", "p": page, "ids": ids, "c": cursor, "l": int(last)}


def done(page: int, post_id: str, stored: bool = True) -> dict:
    return {"t": "d", "p": page, "id": post_id, "s": int(stored), "f": 0}


def test_pages_finished_out_of_order_by_two_workers_advance_when_the_gaps_fill(redis_url: str) -> None:
    a, b = stores(redis_url)
    started, token = a.open_run(KEY, spider="weibo", token="run-1", now=NOW)
    assert started
    assert b.open_run(KEY, spider="weibo", token="run-1", now=NOW) == (False, "run-1")  # joins
    # Worker A parses pages 1 and 3, worker B pages 2 and 4 (cursors name what fetches the next page).
    assert a.apply(KEY, token, [announce(1, ["p1a", "p1b"], "c2"), announce(3, ["p3a"], "c4")], now=NOW) == 0
    assert b.apply(KEY, token, [announce(2, ["p2a", "p2b"], "c3"), announce(4, ["p4a"], None, last=True)],
                   now=NOW) == 0
    # Pages 3 and 4 finish first: nothing moves, page 1 is not done.
    assert a.apply(KEY, token, [done(3, "p3a")], now=NOW) == 0
    assert b.apply(KEY, token, [done(4, "p4a")], now=NOW) == 0
    assert a.apply(KEY, token, [done(1, "p1a")], now=NOW) == 0
    assert b.apply(KEY, token, [done(1, "p1b", stored=False)], now=NOW) == 1  # page 1 complete; page 2 is the gap
    cp = a.load(KEY)
    assert cp is not None and (cp.watermark, cp.next_page, cp.next_cursor) == (1, 2, "c2")
    assert cp.stored == {3: ["p3a"], 4: ["p4a"]} and cp.last_page == 4
    assert a.clear(KEY, token) == 0  # not complete: kept
    assert b.apply(KEY, token, [done(2, "p2a")], now=NOW) == 1
    # The gap fills: the watermark runs over every complete page, to the last one.
    assert a.apply(KEY, token, [done(2, "p2b")], now=NOW) == 4
    cp = b.load(KEY)
    assert cp is not None and (cp.watermark, cp.next_page, cp.stored) == (4, 5, {})
    assert cp.seq == 8 and cp.updated_at == NOW
    assert b.clear(KEY, token) == 1
    assert a.clear(KEY, token) == -1  # already cleared, by the other worker
    assert a.load(KEY) is None
    # A late batch of a cleared run changes nothing (and brings nothing back).
    assert a.apply(KEY, token, [done(2, "p2b")], now=NOW) == -1
    assert a.load(KEY) is None and a.keys() == []


def test_a_failed_page_stops_the_watermark_until_a_new_run(redis_url: str) -> None:
    a, b = stores(redis_url)
    _, token = a.open_run(KEY, spider="weibo", token="run-1", now=NOW)
    a.apply(KEY, token, [announce(1, ["x"], None), done(1, "x"), announce(2, ["y"]),
                         announce(3, ["z"], last=True)], now=NOW)
    assert b.apply(KEY, token, [{"t": "f", "p": 2}, done(3, "z")], now=NOW) == 1
    assert a.apply(KEY, token, [done(2, "y")], now=NOW) == 1  # its posts left, but the page failed
    cp = a.load(KEY)
    assert cp is not None and cp.failed_pages == [2] and cp.watermark == 1 and cp.last_page == 3
    assert a.clear(KEY, token) == 0
    # The next enqueue of the job is a new run: it starts after the watermark, forgets the failure and the last
    # page, and keeps the ids of posts already stored past the watermark (they count as done when re-announced).
    started, token2 = b.open_run(KEY, spider="weibo", token="run-2", now=NOW)
    assert started and token2 == "run-2"
    assert b.start_of_run(KEY) == (2, None)
    cp = b.load(KEY)
    assert cp is not None and cp.failed_pages == [] and cp.last_page is None
    assert cp.stored == {2: ["y"], 3: ["z"]}
    assert a.apply(KEY, token, [done(2, "y")], now=NOW) == -1  # the old run's late events are refused
    assert b.apply(KEY, token2, [announce(2, ["y"], "c3"), announce(3, ["z"], last=True)], now=NOW) == 3
    assert b.clear(KEY, token2) == 1


def test_a_new_run_never_resumes_a_completed_run_whose_clear_never_came(redis_url: str) -> None:
    a, b = stores(redis_url)
    _, token = a.open_run(KEY, spider="weibo", token="run-1", now=NOW)
    # Page 2 is the page at the high-water mark: announced as the last one; the run ends without its clear.
    assert a.apply(KEY, token, [announce(1, ["x"], "c2"), done(1, "x"), announce(2, [], "c3", last=True)],
                   now=NOW) == 2
    started, _ = b.open_run(KEY, spider="weibo", token="run-2", now=NOW)
    assert started and b.start_of_run(KEY) == (1, None)  # page 1 again, not page 3
    cp = b.load(KEY)
    assert cp is not None and (cp.watermark, cp.next_page, cp.stored, cp.last_page) == (0, 1, {}, None)
    assert b.clear(KEY, "run-2") == 0
    b.delete(KEY)


def test_takeover_repeats_and_early_items_are_idempotent(redis_url: str) -> None:
    a, b = stores(redis_url)
    _, token = a.open_run(KEY, spider="weibo", token="run-1", now=NOW)
    # An item's event can reach Redis before its page's announcement (another worker's batch).
    assert b.apply(KEY, token, [done(1, "p1")], now=NOW) == 0
    # Worker A announces page 1 and emits one of its two posts, then dies; B takes the lease over and emits both
    # again (one a duplicate): the page completes exactly when both posts are out, not at two "done" events.
    assert a.apply(KEY, token, [announce(1, ["p1", "p2", "p3"], "c2", last=True)], now=NOW) == 0
    assert a.apply(KEY, token, [done(1, "p2")], now=NOW) == 0
    assert b.apply(KEY, token, [announce(1, ["p1", "p2", "p3"], "c2", last=True), done(1, "p2", stored=False),
                                done(1, "p1")], now=NOW) == 0
    cp = b.load(KEY)
    assert cp is not None and cp.stored == {1: ["p1", "p2"]}
    # The same batch sent twice (a reply lost after the script ran) changes nothing.
    for _ in range(2):
        assert b.apply(KEY, token, [done(1, "p3")], now=NOW) == 1
    assert b.clear(KEY, token) == 1


def test_start_reset_join_and_the_document(redis_url: str) -> None:
    a, b = stores(redis_url)
    a.save(Checkpoint(key=KEY, spider="weibo", watermark=5, next_page=6, next_cursor="c6", stored={7: ["s7"]},
                      seq=3, updated_at=NOW))
    assert a.keys() == [KEY] and a.location(KEY) == f"redis:t:cp:{KEY}"
    cp = a.load(KEY)
    assert cp is not None and cp.to_dict() == {
        "schema": 1, "key": KEY, "spider": "weibo", "watermark": 5, "next": {"page": 6, "cursor": "c6"},
        "stored": {"7": ["s7"]}, "failed_pages": [], "last_page": None, "feeds": [], "seq": 3, "updated_at": NOW}
    # A one-job crawl joining a seeded queue joins whatever run is open; a new token starts a new run.
    assert a.open_run(KEY, spider="weibo", token=None, now=NOW)[0]
    assert a.start_of_run(KEY) == (6, "c6")
    assert b.open_run(KEY, spider="weibo", token=None, join=True, now=NOW)[0] is False
    # -a start wins over the checkpoint (only for the call that starts the run).
    assert b.open_run(KEY, spider="weibo", token="run-s", start=3, now=NOW) == (True, "run-s")
    assert b.start_of_run(KEY) == (3, None) and b.load(KEY).stored == {}  # type: ignore[union-attr]
    # -a reset_checkpoint forgets it all.
    a.apply(KEY, "run-s", [announce(3, ["q"]), done(3, "q")], now=NOW)
    assert b.open_run(KEY, spider="weibo", token="run-r", reset=True, now=NOW) == (True, "run-r")
    cp = b.load(KEY)
    assert cp is not None and (cp.watermark, cp.seq) == (0, 0)
    assert b.delete(KEY) and not b.delete(KEY)


# --- Dedupe claims owned per worker (pipelines/dedupe.py) --------------------------------------------------------


def _worker_pipeline(redis_url: str, worker: str) -> Any:
    """The dedupe pipeline of one worker of job KEY on the shared cache (its spider_opened done by hand)."""
    from scrapy.utils.misc import build_from_crawler

    from mediacrawler.pipelines.dedupe import DedupePipeline
    from tests.test_pipeline_dedupe import dedupe_crawler

    crawler = dedupe_crawler(REDIS_URL=redis_url, DISTRIBUTED_HEARTBEAT=0.3, DISTRIBUTED_LEASE_TTL=2.0)
    from mediacrawler.jobstate import JobState

    crawler.spider = SimpleNamespace(job_state=JobState(job=KEY), name="weibo", worker_id=worker)
    pipeline = build_from_crawler(DedupePipeline, crawler)
    pipeline.worker = worker
    pipeline.cache.set(alive_key(worker), "1", ttl=pipeline.alive_ttl)  # what its beat does
    return pipeline


def test_claims_are_per_worker_and_a_dead_workers_claim_is_taken_over_once(redis_url: str) -> None:
    from tests.test_pipeline_dedupe import emit, post, run

    a, b, c = (_worker_pipeline(redis_url, w) for w in ("wa", "wb", "wc"))
    assert a.alive_ttl == pytest.approx(1.7)
    item = post("4979000000000007")
    assert run(a, item) is item  # A claims the post and holds it (its download is in flight)
    assert a.cache.get("dedup-claim:weibo:4979000000000007") == f"{KEY}@wa".encode()
    assert run(b, post("4979000000000007")) is None  # same job, other live worker: not emitted twice
    assert b.stats.get_value("dedupe/claimed_elsewhere") == 1
    # A dies (its liveness key expires): the lease takeover re-emits the post on B and C; exactly one emits it.
    a.cache.delete(alive_key("wa"))
    results = [emit(b, post("4979000000000007")), emit(c, post("4979000000000007"))]
    assert sum(r is not None for r in results) == 1
    assert (b.stats.get_value("dedupe/claim_taken_over") or 0) + (c.stats.get_value("dedupe/claim_taken_over")
                                                                   or 0) == 1
    assert emit(c, post("4979000000000007")) is None  # committed: seen for everyone


def test_checkpoints_and_status_commands_read_the_redis_store(redis_url: str) -> None:
    import json
    import os
    import subprocess
    import sys

    a, _ = stores(redis_url)
    store = RedisCheckpointStore(redis.Redis.from_url(redis_url), "mediacrawler:checkpoint:")
    _, token = store.open_run(KEY, spider="weibo", token="run-1", now=NOW)
    store.apply(KEY, token, [announce(1, ["x"], "c2"), done(1, "x"), announce(2, ["y", "z"]), done(2, "y"),
                             {"t": "f", "p": 3}], now=NOW)
    env = {**os.environ, "REDIS_URL": redis_url, "CHECKPOINT_BACKEND": "redis",
           "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mediacrawler", *argv], env=env, capture_output=True,
                              text=True, timeout=60)

    shown = run("checkpoints", "show", KEY)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert (doc["watermark"], doc["next"], doc["stored"], doc["failed_pages"]) == (
        1, {"page": 2, "cursor": "c2"}, {"2": ["y"]}, [3])
    status = run("status", "--json")
    assert status.returncode == 0, status.stderr
    (entry,) = json.loads(status.stdout)["checkpoints"]
    assert entry["job"] == KEY and entry["watermark"] == 1
    assert entry["location"] == f"redis:mediacrawler:checkpoint:{KEY}"
    assert run("checkpoints", "reset", KEY).returncode == 0
    assert store.load(KEY) is None and a.load(KEY) is None


# --- The extension's shared mode (extensions/checkpoint.py) on fake crawlers -------------------------------------


def test_two_processes_of_one_job_share_the_checkpoint_through_the_extension(redis_url: str,
                                                                            tmp_path: Any) -> None:
    from mediacrawler.contracts import Resume
    from tests.test_extension_checkpoint import make, parsed, scraped

    job = "weibo-uid-7365120894"
    settings = {"REDIS_URL": redis_url, "CHECKPOINT_BACKEND": "redis", "CHECKPOINT_REDIS_PREFIX": "t:cp:",
                "CHECKPOINT_REDIS_INTERVAL": 60.0, "DISTRIBUTED_KEY_PREFIX": "t:dist",
                "CHECKPOINT_SYNC_FEEDS": False, "DISTRIBUTED_SOCKET_TIMEOUT": 5.0}
    client = redis.Redis.from_url(redis_url)
    store = RedisCheckpointStore(client, "t:cp:")
    one, spider_one = make(tmp_path, settings)
    assert one.shared
    one.spider_opened(spider_one)  # the first process: its queue is not seeded yet, it starts the run
    client.set(f"t:dist:weibo:{job}:seeded", "1")
    two, spider_two = make(tmp_path, settings)
    two.spider_opened(spider_two)  # the second joins it
    try:
        parsed(one, spider_one, 1, ["a", "b"], next_cursor="c2")
        scraped(one, spider_one, 1, "a")
        assert one.acks_pending() and store.load(job).watermark == 0  # type: ignore[union-attr]
        scraped(two, spider_two, 1, "b")  # page 1's last post leaves on the other process
        parsed(two, spider_two, 2, ["c"])
        assert two.acks_pending() and two.checkpoint.watermark == 1  # type: ignore[union-attr]
        cp = store.load(job)
        assert cp is not None and (cp.watermark, cp.next_cursor, cp.last_page) == (1, "c2", None)
    finally:
        one.spider_closed(spider_one, "shutdown")
        two.spider_closed(spider_two, "finished")  # not complete (page 2 pending, no last page): kept
    assert store.load(job) is not None and two.stats.get_value("checkpoint/cleared") is None
    # The next run (a new queue) resumes after the watermark, knowing nothing of the old run's page states.
    client.delete(f"t:dist:weibo:{job}:seeded")
    three, spider_three = make(tmp_path, settings)
    three.spider_opened(spider_three)
    assert spider_three.job_state.resume == Resume(page=2, cursor="c2")
    parsed(three, spider_three, 2, ["c"], is_last=True)
    scraped(three, spider_three, 2, "c")
    three.spider_closed(spider_three, "finished")
    assert store.load(job) is None and three.stats.get_value("checkpoint/cleared") is True


def test_open_comment_threads_are_kept_across_runs_and_go_with_the_checkpoint(redis_url: str) -> None:
    import json

    a, b = stores(redis_url)
    _, token = a.open_run(KEY, spider="weibo", token="run-1", now=NOW)
    state = {"post_id": "p1", "thread_id": "p1", "cursor": "100:1", "roots": [], "known": {}, "fetched": 20}
    entry = {"state": state, "stored": ["c1", "c2"]}
    a.apply(KEY, token, [announce(1, ["p1", "p2"], "c2"), done(1, "p2"),
                         {"t": "th", "id": "p1", "e": json.dumps(entry)},
                         {"t": "th", "id": "p9", "e": json.dumps(entry)}, {"t": "th", "id": "p9", "e": None}],
            now=NOW)
    started, _ = b.open_run(KEY, spider="weibo", token="run-2", now=NOW)  # a new run resumes the open thread
    cp = b.load(KEY)
    assert started and cp is not None and cp.threads == {"p1": entry}
    assert cp.threads["p1"]["state"]["roots"] == []  # a list still, not the {} of Redis's JSON library
    _, token = b.open_run(KEY, spider="weibo", token="run-2", now=NOW)
    b.apply(KEY, token, [announce(1, ["p1", "p2"], None, last=True), done(1, "p1"),
                         {"t": "th", "id": "p1", "e": None}], now=NOW)
    assert b.clear(KEY, "run-2") == 1
    assert not b.server.exists(f"t:cp:{KEY}:threads") and b.load(KEY) is None


def test_records_exported_after_the_last_batch_are_found_in_this_hosts_feed_on_the_next_run(
        redis_url: str, tmp_path: Any) -> None:
    """A kill between the feed's write and the batch that counts it: the next run reads this host's feed past
    the mark its last batch left, and takes those posts and comments as stored (sent as stored at once)."""
    import json
    import socket

    from tests.test_extension_checkpoint import make

    job = "weibo-uid-7365120894"
    settings = {"REDIS_URL": redis_url, "CHECKPOINT_BACKEND": "redis", "CHECKPOINT_REDIS_PREFIX": "t:cp:",
                "CHECKPOINT_REDIS_INTERVAL": 60.0, "DISTRIBUTED_KEY_PREFIX": "t:dist",
                "CHECKPOINT_SYNC_FEEDS": False, "DISTRIBUTED_SOCKET_TIMEOUT": 5.0}
    store = RedisCheckpointStore(redis.Redis.from_url(redis_url), "t:cp:")
    feed = tmp_path / "weibo.jsonl"

    def record(post_id: str, page: int, comment_id: str | None = None, job_key: str = job) -> str:
        rec = {"platform": "weibo", "post_id": post_id, "source": {"job": job_key, "page": page}}
        return json.dumps({**rec, **({"comment_id": comment_id} if comment_id else {})}) + "\n"

    counted = record("p1", 1)
    feed.write_text(counted + record("p2", 2) + record("p2", 2, "c7") + record("q1", 2, job_key="weibo-uid-1")
                    + '{"platform": "weibo", "post_id": "p3", "sou', encoding="utf-8")  # a torn last line
    _, token = store.open_run(job, spider="weibo", token="run-1", now=NOW)
    state = {"post_id": "p2", "thread_id": "p2", "cursor": "100:1", "roots": [], "known": {}, "fetched": 20}
    host = socket.gethostname()
    store.apply(job, token, [announce(1, ["p1"], "c2"), done(1, "p1"), announce(2, ["p2"]),
                             {"t": "th", "id": "p2", "e": json.dumps({"state": state, "stored": ["c6"]})},
                             {"t": "fm", "id": f"{host}:{feed}", "n": len(counted)},
                             {"t": "fm", "id": f"elsewhere:{tmp_path / 'other.jsonl'}", "n": 0}], now=NOW)
    assert [m.path for m in store.feed_marks(job, host)] == [str(feed)]
    ext, spider = make(tmp_path, settings)
    ext.spider_opened(spider)  # a new run (no queue seeded): it reads the tail of this host's feed
    try:
        assert ext.skip_ids == {"p2"}  # q1 is another job's, p3 was never a whole line
        assert ext.skip_comment_ids == {"c6", "c7"}
        assert {"t": "d", "p": 2, "id": "p2", "s": 1} in ext._events
        assert ext.acks_pending()
        assert store.load(job).stored == {2: ["p2"]}  # type: ignore[union-attr]
    finally:
        ext.spider_closed(spider, "shutdown")
    # An explicit start begins a new history: the marks go with the pages and threads.
    store.open_run(job, spider="weibo", token="run-2", start=5, now=NOW)
    assert store.feed_marks(job, host) == []
