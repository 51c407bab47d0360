"""What the shared state looks like from outside, on a real redis-server: marks and retry sets kept in Redis by
one process and read by another (``mediacrawler status`` in a subprocess), the distributed metrics (queue depth,
leases, live workers, shared checkpoint lag) and the scheduler's heartbeat in the set of live workers. The state is
made by the real components (job board, leased queue, shared checkpoint store, scheduler), never written by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Request

from mediacrawler.distributed.checkpoint import RedisCheckpointStore
from mediacrawler.distributed.connection import key_base, workers_key
from mediacrawler.distributed.jobs import JobBoard
from mediacrawler.distributed.queue import LeasedQueue
from mediacrawler.distributed.scheduler import BEAT, RedisScheduler
from mediacrawler.distributed.serializer import request_to_json
from mediacrawler.extensions.marks import Mark, RedisMarkStore, mark_store_from_settings
from mediacrawler.extensions.metrics import MetricsExtension
from mediacrawler.extensions.retries import RedisRetryStore, RetrySet, retry_store_from_settings
from mediacrawler.spiders.weibo import WeiboSpider
from tests.utils import project_crawler

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "mediacrawler:dist"
ACTIVE, WAITING = "weibo-uid-1", "weibo-uid-2"
NOW = "2026-11-30T00:00:00Z"


def run_status(redis_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "CHECKPOINT_BACKEND": "redis",
           "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    return subprocess.run([sys.executable, "-m", "mediacrawler", "status", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_marks_and_retry_sets_written_by_one_process_are_read_by_another(redis_url: str, tmp_path: Path) -> None:
    # Another process writes them through the stores the settings choose (CHECKPOINT_BACKEND=redis: Redis).
    writer = (
        "from scrapy.utils.project import get_project_settings\n"
        "from mediacrawler.extensions.marks import Mark, mark_store_from_settings\n"
        "from mediacrawler.extensions.retries import RetrySet, retry_store_from_settings\n"
        "s = get_project_settings()\n"
        "mark_store_from_settings(s).save(Mark(key='weibo-uid-7', spider='weibo', post_id='5012',"
        " created_at='2026-11-28T01:55:00Z', seq=3, updated_at='2026-11-28T02:00:00Z'))\n"
        "retry_store_from_settings(s).save(RetrySet(key='weibo-uid-7', spider='weibo', args={'uid': '7'},"
        " assets={'weibo/video/v1': {'post_id': '5011', 'kind': 'video', 'reason': 'http-404', 'attempts': 1,"
        " 'last_failed': '2026-11-28T02:00:00Z'}, 'weibo/image/i1': {'post_id': '5011', 'kind': 'image',"
        " 'reason': 'timeout', 'attempts': 2}}))\n"
    )
    env = {**os.environ, "REDIS_URL": redis_url, "CHECKPOINT_BACKEND": "redis",
           "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    done = subprocess.run([sys.executable, "-c", writer], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing on disk

    settings = project_crawler(REDIS_URL=redis_url, CHECKPOINT_BACKEND="redis").settings
    marks, retries = mark_store_from_settings(settings), retry_store_from_settings(settings)
    assert isinstance(marks, RedisMarkStore) and isinstance(retries, RedisRetryStore)
    mark = marks.load("weibo-uid-7")
    assert mark == Mark(key="weibo-uid-7", spider="weibo", post_id="5012", created_at="2026-11-28T01:55:00Z",
                        seq=3, updated_at="2026-11-28T02:00:00Z")
    retry_set = retries.load("weibo-uid-7")
    assert retry_set is not None and retry_set.post_ids() == ["5011"] and len(retry_set.assets) == 2
    assert marks.keys() == retries.keys() == ["weibo-uid-7"]
    # The file backend is still the default without Redis checkpoints.
    assert not isinstance(mark_store_from_settings(project_crawler(REDIS_URL=redis_url).settings), RedisMarkStore)

    # Damage is reported, not raised: an unreadable document is the status's error, exit 1.
    redis.Redis.from_url(redis_url).set("mediacrawler:marks:weibo-uid-8", b"{not json")
    shown = run_status(redis_url, tmp_path, "--json")
    assert shown.returncode == 1, shown.stderr
    doc = json.loads(shown.stdout)
    (good,) = [e for e in doc["marks"] if "error" not in e]
    assert (good["job"], good["post_id"], good["seq"]) == ("weibo-uid-7", "5012", 3)
    assert good["location"] == "redis:mediacrawler:marks:weibo-uid-7"
    assert [e["job"] for e in doc["marks"] if "error" in e] == ["weibo-uid-8"]
    (pending,) = doc["retries"]
    assert (pending["job"], pending["pending"], pending["posts"], pending["reasons"]) == (
        "weibo-uid-7", 2, 1, {"http-404": 1, "timeout": 1})
    retries.delete("weibo-uid-7")
    marks.delete("weibo-uid-8")
    text = run_status(redis_url, tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "high-water marks: 1" in lines and "media pending retry: 0 assets" in lines
    row = next(line.split() for line in lines if line.startswith("  weibo-uid-7"))
    assert row[:4] == ["weibo-uid-7", "weibo", "5012", "2026-11-28T01:55:00Z"]


def make_shared_state(redis_url: str) -> None:
    """One active job (3 requests queued, 2 leased of which 1 expired, 2 checkpoint pages pending), one job
    waiting, one live worker and one whose heartbeat deadline passed."""
    client = redis.Redis.from_url(redis_url)
    settings = project_crawler(REDIS_URL=redis_url).settings
    board = JobBoard(settings, "weibo", worker="w1")
    assert board.enqueue(ACTIVE, {"uid": "1"})
    assert board.take() is not None  # active now
    assert board.enqueue(WAITING, {"uid": "2"})
    spider = WeiboSpider.from_crawler(project_crawler(WeiboSpider), uid="1")
    queue = LeasedQueue(client, spider, key_base(PREFIX, "weibo", ACTIVE))
    for n in range(5):
        payload = request_to_json(Request(f"http://127.0.0.1:9/{n}", callback=spider.parse), spider)
        assert queue.push_payload(payload, score=0, fingerprint=f"fp{n}", filtered=True)
    assert queue.pop_payload("w1", 60_000) is not None
    assert queue.pop_payload("w-dead", 0) is not None  # leased until now: expired
    beat = client.register_script(BEAT)
    beat(keys=[workers_key(PREFIX, "weibo")], args=["w-dead", 0])
    beat(keys=[workers_key(PREFIX, "weibo")], args=["w1", 60_000])
    store = RedisCheckpointStore(client, "mediacrawler:checkpoint:")
    _, token = store.open_run(ACTIVE, spider="weibo", token="run-1", now=NOW)
    store.apply(ACTIVE, token, [{"t": "a", "p": 1, "ids": ["x"], "c": None, "l": 0},
                                {"t": "a", "p": 2, "ids": ["y"], "c": None, "l": 0}], now=NOW)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_and_status_show_queue_depth_leases_workers_and_checkpoint_lag(redis_url: str,
                                                                             tmp_path: Path) -> None:
    make_shared_state(redis_url)
    crawler = project_crawler(WeiboSpider, REDIS_URL=redis_url, METRICS_PORT=0)
    ext = MetricsExtension(crawler)
    ext.spider_opened(WeiboSpider.from_crawler(crawler, uid="1"))
    got = samples(generate_latest(ext.registry).decode())
    job = frozenset({"platform": "weibo", "job": ACTIVE}.items())
    platform = frozenset({"platform": "weibo"}.items())
    assert got[("mediacrawler_queue_depth", job)] == 3
    assert got[("mediacrawler_leases", job)] == 2
    assert got[("mediacrawler_leases_expired", job)] == 1
    assert got[("mediacrawler_shared_checkpoint_lag_pages", job)] == 2
    assert got[("mediacrawler_jobs_waiting", platform)] == 1
    assert got[("mediacrawler_workers_live", platform)] == 1
    parsed = frozenset({"platform": "weibo", "job": ACTIVE, "status": "parsed"}.items())
    assert ("mediacrawler_pages_total", parsed) in got  # the crawl's own counters are still there

    shown = run_status(redis_url, tmp_path, "--json")
    assert shown.returncode == 0, shown.stderr
    weibo = json.loads(shown.stdout)["distributed"]["spiders"]["weibo"]
    assert (weibo["jobs_waiting"], weibo["workers"]) == (1, ["w1"])
    active: dict[str, Any] = weibo["active"][ACTIVE]
    assert (active["queued"], active["leased"], active["expired_leases"], active["checkpoint_lag_pages"]) == (
        3, 2, 1, 2)
    assert active["workers"] == ["w-dead", "w1"]  # lease owners, the dead one's lease not reaped yet


def test_without_redis_the_extension_adds_no_distributed_families() -> None:
    crawler = project_crawler(WeiboSpider, REDIS_URL=None, METRICS_PORT=0)
    ext = MetricsExtension(crawler)
    ext.spider_opened(WeiboSpider.from_crawler(crawler, uid="1"))
    assert ext.distributed is None
    assert "mediacrawler_queue_depth" not in generate_latest(ext.registry).decode()


def test_the_scheduler_heartbeat_keeps_the_worker_live_until_it_closes(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    crawler = project_crawler(WeiboSpider, REDIS_URL=redis_url, DISTRIBUTED_LEASE_TTL=30.0)
    scheduler = RedisScheduler(crawler)
    scheduler.spider = WeiboSpider.from_crawler(crawler, uid="1")
    scheduler._renew_and_reap({})  # one heartbeat (it runs in a thread; here called directly)
    (sec, usec) = client.time()
    deadline = client.zscore(workers_key(PREFIX, "weibo"), scheduler.worker)
    assert deadline is not None and 29_000 <= deadline - (sec * 1000 + usec // 1000) <= 30_000
    scheduler.close("finished")
    assert client.zscore(workers_key(PREFIX, "weibo"), scheduler.worker) is None


def _post(post_id: str, key: str, status: str) -> Any:
    from mediacrawler.items import MediaAsset, Post, Source

    asset = MediaAsset(kind="image", key=key, url=f"http://127.0.0.1:9/{key}.jpg", status=status,
                       error="http-404: gone" if status == "failed" else None)
    return Post(platform="weibo", post_id=post_id, url=f"https://weibo.com/1/{post_id}", author=None,
                created_at=None, media=[asset], source=Source(spider="weibo", job="weibo-uid-1", page=1))


def test_two_processes_of_one_job_merge_their_retry_sets_in_redis(redis_url: str) -> None:
    from mediacrawler.extensions.retries import RetryExtension

    def process() -> tuple[RetryExtension, WeiboSpider]:
        crawler = project_crawler(WeiboSpider, REDIS_URL=redis_url, CHECKPOINT_BACKEND="redis")
        ext = RetryExtension(crawler)
        spider = WeiboSpider.from_crawler(crawler, uid="1")
        ext.spider_opened(spider)
        return ext, spider

    store = RedisRetryStore(redis.Redis.from_url(redis_url), "mediacrawler:retry:")
    store.save(RetrySet(key="weibo-uid-1", spider="weibo", args={"uid": "1"}, assets={
        "weibo/image/p10": {"post_id": "10", "kind": "image", "reason": "http-404", "attempts": 1}}))
    (one, spider_one), (two, spider_two) = process(), process()  # both read the same set at start
    assert spider_one.job_state.retry_posts == spider_two.job_state.retry_posts == ["10"]
    one.item_scraped(_post("11", "p11", "failed"), spider_one)
    two.item_scraped(_post("12", "p12", "failed"), spider_two)  # written over one's: merged, not replaced
    stored = store.load("weibo-uid-1")
    assert stored is not None and stored.post_ids() == ["10", "11", "12"]
    # Process one stores post 10's picture (read again): it leaves the set, the others' failures stay.
    one.item_scraped(_post("10", "p10", "downloaded"), spider_one)
    stored = store.load("weibo-uid-1")
    assert stored is not None and stored.post_ids() == ["11", "12"]
    one.spider_closed(spider_one, "finished")
    two.spider_closed(spider_two, "finished")  # its own view still had post 10: it does not bring it back
    assert one.stats.get_value("retry/pending") == two.stats.get_value("retry/pending") == 2
    stored = store.load("weibo-uid-1")
    assert stored is not None and sorted(stored.assets) == ["weibo/image/p11", "weibo/image/p12"]
