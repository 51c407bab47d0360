"""Issue #21, point 5: bad job messages and queue entries are dead-lettered with a reason, never stop a worker.

Against the session's real redis-server (``redis_url`` flushes DB 0 before every test)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis

from mediacrawler.distributed.connection import key_base
from mediacrawler.distributed.jobs import JobBoard
from mediacrawler.distributed.queue import LeasedQueue, dead_key
from mediacrawler.distributed.scheduler import RedisScheduler
from mediacrawler.distributed.serializer import RefusedEntry, request_from_json, request_to_json
from mediacrawler.fsutil import json_depth
from mediacrawler.spiders.weibo import WeiboSpider
from tests.utils import project_crawler

PREFIX = "tq"


@pytest.fixture
def client(redis_url: str) -> Any:
    with redis.Redis.from_url(redis_url) as c:
        yield c


def _letters(client: Any, spider: str = "weibo") -> list[dict[str, Any]]:
    return [json.loads(v) for v in client.lrange(dead_key(PREFIX, spider), 0, -1)]


def test_malformed_jobs_are_dead_lettered_and_the_good_job_behind_them_is_taken(
        redis_url: str, client: Any, caplog: pytest.LogCaptureFixture) -> None:
    settings = project_crawler(REDIS_URL=redis_url, DISTRIBUTED_KEY_PREFIX=PREFIX).settings
    board = JobBoard(settings, "weibo", "w1")
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"key": "weibo-uid-1", "args": {"uid": "1"}}))  # no spider
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"key": "weibo-uid-2", "spider": "weibo", "args": ["2"]}))
    client.rpush(f"{PREFIX}:weibo:jobs", '{"key":' + "[" * 5_000 + "]" * 5_000 + "}")  # deep
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"spider": "weibo", "args": {}}))  # no key
    assert board.enqueue("weibo-uid-3", {"uid": "3"}) is True
    with caplog.at_level(logging.WARNING, logger="mediacrawler.distributed.jobs"):
        job = board.take()
    assert job is not None and (job.key, job.args, job.seed) == ("weibo-uid-3", {"uid": "3"}, True)
    letters = _letters(client)
    assert [(d["kind"], d.get("job")) for d in letters] == [("job", "weibo-uid-1"), ("job", "weibo-uid-2"),
                                                            ("job", None), ("job", None)]
    assert "spider: Field required" in letters[0]["reason"]
    assert "args: Input should be a valid dictionary" in letters[1]["reason"]
    assert letters[2]["reason"].startswith("not JSON") and len(letters[2]["entry"]) <= 2048
    assert letters[3]["reason"].startswith("no job key")
    assert client.hkeys(f"{PREFIX}:weibo:active") == [b"weibo-uid-3"]  # the bad ones are not active
    assert client.get(key_base(PREFIX, "weibo", "weibo-uid-1") + ":seeding") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("mediacrawler.distributed")]
    assert len(warnings) == 4 and all("dead-lettered" in r.getMessage() for r in warnings)


def test_a_job_of_another_spider_or_with_non_string_args_is_refused(redis_url: str, client: Any) -> None:
    settings = project_crawler(REDIS_URL=redis_url, DISTRIBUTED_KEY_PREFIX=PREFIX).settings
    board = JobBoard(settings, "weibo", "w1")
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"key": "a", "spider": "xhs", "args": {}}))
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"key": "b", "spider": "weibo", "args": {"uid": 1}}))
    client.rpush(f"{PREFIX}:weibo:jobs", json.dumps({"key": "c", "spider": "weibo", "args": {"x": "y" * 70_000}}))
    assert board.take() is None
    reasons = [d["reason"] for d in _letters(client)]
    assert "spider 'xhs'" in reasons[0] and "args.uid" in reasons[1] and "DISTRIBUTED_JOB_MAX_BYTES" in reasons[2]
    assert client.hlen(f"{PREFIX}:weibo:active") == 0


def _scheduler(redis_url: str) -> tuple[RedisScheduler, WeiboSpider, LeasedQueue]:
    crawler = project_crawler(WeiboSpider, REDIS_URL=redis_url, DISTRIBUTED_KEY_PREFIX=PREFIX)
    scheduler = RedisScheduler(crawler)
    spider = WeiboSpider.from_crawler(crawler, uid="1")
    scheduler.spider = spider
    queue = scheduler.queue_for_spider()
    assert queue is not None
    return scheduler, spider, queue


def _stored(spider: WeiboSpider, **change: Any) -> str:
    d = json.loads(request_to_json(spider.listing_request(1, None), spider))
    d.update(change)
    return json.dumps(d)


@pytest.mark.parametrize(("payload", "reason"), [
    (lambda s: '{"format":"mc-request/1","url":"x","meta":' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
    (lambda s: _stored(s, callback="close"), "callback 'close' is not one of weibo's queue callbacks"),
    (lambda s: _stored(s, errback="_set_crawler"), "errback '_set_crawler' is not one"),
    (lambda s: _stored(s, url="http://169.254.169.254/latest/meta-data"), "is not on a host of weibo"),
    (lambda s: _stored(s, url="https://user:pw@m.weibo.cn/api"), "is not on a host of weibo"),
])
def test_a_refused_queue_entry_is_dead_lettered_with_one_warning_and_the_next_one_served(
        redis_url: str, client: Any, caplog: pytest.LogCaptureFixture, payload: Any, reason: str) -> None:
    scheduler, spider, queue = _scheduler(redis_url)
    queue.push_payload(payload(spider), score=0, fingerprint="fp-bad", filtered=True)
    queue.push_payload(request_to_json(spider.listing_request(2, None), spider), score=1, fingerprint="",
                       filtered=False)
    with caplog.at_level(logging.WARNING, logger="mediacrawler.distributed.scheduler"):
        assert scheduler.next_request() is None  # refused, no RecursionError, no crash
    good = scheduler.next_request()
    assert good is not None and good.meta["mc_page"] == 2
    (letter,) = _letters(client)
    assert letter["kind"] == "request" and reason in letter["reason"] and len(letter["entry"]) <= 2048
    assert "pw" not in letter["reason"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("mediacrawler.distributed")]
    assert len(warnings) == 1 and "Dead-lettered queue entry" in warnings[0]
    assert queue.leased() == 1 and len(queue) == 0  # the refused one left the queue; only the good one is leased
    assert client.hget(f"{queue.key}:pending", "fp-bad") is None


def test_declared_callbacks_and_hosts_still_round_trip() -> None:
    crawler = project_crawler(WeiboSpider)
    spider = WeiboSpider.from_crawler(crawler, uid="1")
    back = request_from_json(request_to_json(spider.listing_request(1, None), spider), spider)
    assert back.callback == spider.parse_listing
    with pytest.raises(RefusedEntry, match="queue callbacks"):
        request_from_json(_stored(spider, callback="parse_step"), spider)


def test_json_depth_is_counted_without_decoding() -> None:
    assert json_depth('{"a": "[[[{{{", "b": [1, [2]]}') == 3
    assert json_depth('"\\"[["') == 0 and json_depth("[" * 200_000) == 200_000
