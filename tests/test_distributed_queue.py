"""Unit tests of the distributed queue's parts against a real redis-server: the JSON serializer and the lease scripts.

Each test works under its own key prefix on the session server (``redis_url`` flushes DB 0 before every test).
"""

from __future__ import annotations

import json
import pickle
import threading
import time
from typing import Any

import pytest
import redis
from scrapy import Request

from mediacrawler.distributed.jobs import JobBoard
from mediacrawler.distributed.queue import LeasedQueue
from mediacrawler.distributed.serializer import UnserializableRequest, request_from_json, request_to_json
from mediacrawler.spiders.weibo import WeiboSpider
from tests.utils import project_crawler


@pytest.fixture
def spider() -> WeiboSpider:
    crawler = project_crawler(WeiboSpider)
    return WeiboSpider.from_crawler(crawler, uid="7365120894")


@pytest.fixture
def client(redis_url: str) -> Any:
    with redis.Redis.from_url(redis_url) as c:
        yield c


def _queue(client: Any, spider: WeiboSpider, name: str) -> LeasedQueue:
    return LeasedQueue(client, spider, f"t:{name}")


def _request(spider: WeiboSpider, page: int, **kw: Any) -> Request:
    return spider.listing_request(page, None).replace(**kw) if kw else spider.listing_request(page, None)


# --- Serializer ------------------------------------------------------------------------------------------------


def test_round_trip_keeps_callbacks_by_name_headers_body_meta_and_priority(spider: WeiboSpider) -> None:
    body = bytes(range(256))  # not UTF-8: must come back byte for byte
    request = Request("https://m.weibo.cn/api?x=1", method="POST", body=body, callback=spider.parse_listing,
                      errback=spider.listing_failed, headers={"X-A": "1", "Accept": ["a", "b"]}, priority=7,
                      meta={"mc_page": 3, "mc_chain": {"post_id": "9", "data": {"k": [1, 2.5, None, True]}}},
                      cb_kwargs={"n": 1}, dont_filter=True)
    text = request_to_json(request, spider)
    stored = json.loads(text)  # plain JSON, with the callbacks as names
    assert stored["callback"] == "parse_listing" and stored["errback"] == "listing_failed"
    back = request_from_json(text, spider)
    assert back.url == request.url and back.method == "POST" and back.body == body
    assert back.callback == spider.parse_listing and back.errback == spider.listing_failed
    assert back.headers.getlist("Accept") == [b"a", b"b"] and back.headers["X-A"] == b"1"
    assert back.meta == request.meta and back.cb_kwargs == {"n": 1}
    assert back.priority == 7 and back.dont_filter is True


@pytest.mark.parametrize(("value", "what"), [
    (object(), "builtins.object"),
    (b"bytes", "builtins.bytes"),
    (("a", "tuple"), "builtins.tuple"),
    ({"deep": [{"x": {1, 2}}]}, "builtins.set"),
    (float("nan"), "non-finite"),
])
def test_non_json_meta_is_refused_naming_the_key(spider: WeiboSpider, value: Any, what: str) -> None:
    request = _request(spider, 1)
    request.meta["bad_key"] = value
    with pytest.raises(UnserializableRequest, match=r"meta\['bad_key'\]") as info:
        request_to_json(request, spider)
    assert what in str(info.value)


def test_a_callback_that_is_no_spider_method_is_refused(spider: WeiboSpider) -> None:
    with pytest.raises(UnserializableRequest):
        request_to_json(Request("https://example.com/", callback=lambda r: None), spider)


def test_a_pickled_payload_is_refused_not_executed(spider: WeiboSpider) -> None:
    payload = pickle.dumps({"url": "https://example.com/", "callback": "parse_listing"})
    with pytest.raises(ValueError):
        request_from_json(payload, spider)
    with pytest.raises(ValueError, match="format marker"):
        request_from_json(json.dumps({"url": "https://example.com/"}), spider)


# --- Lease scripts ----------------------------------------------------------------------------------------------


def test_pop_moves_a_request_into_a_lease_atomically(client: Any, spider: WeiboSpider) -> None:
    q = _queue(client, spider, "pop")
    ids = [q.push_payload(request_to_json(_request(spider, n), spider), score=0, fingerprint=f"fp{n}",
                          filtered=True) for n in (1, 2, 3)]
    assert len(q) == 3 and q.leased() == 0
    rid, payload = q.pop_payload("w1", 10_000)
    assert rid == ids[0]  # FIFO within one priority
    assert request_from_json(payload, spider).meta["mc_page"] == 1
    assert len(q) == 2 and q.leased() == 1
    assert client.hget("t:pop:owner", rid) == b"w1"
    assert client.zscore("t:pop:lease", rid) > time.time() * 1000
    # Every value stored is JSON (no pickle anywhere).
    for value in client.hvals("t:pop:req"):
        assert json.loads(value)["format"] == "mc-request/1"


def test_a_fingerprint_is_seen_only_after_ack_and_pending_ones_are_filtered(client: Any,
                                                                            spider: WeiboSpider) -> None:
    q = _queue(client, spider, "seen")
    payload = request_to_json(_request(spider, 1), spider)
    rid = q.push_payload(payload, score=0, fingerprint="fpA", filtered=True)
    assert rid is not None
    assert q.push_payload(payload, score=0, fingerprint="fpA", filtered=True) is None  # queued: a duplicate
    got = q.pop_payload("w1", 10_000)
    assert got is not None and got[0] == rid
    assert not client.sismember("t:seen:seen", "fpA")  # leased, not done: not seen
    assert q.push_payload(payload, score=0, fingerprint="fpA", filtered=True) is None  # leased: still a duplicate
    assert q.ack(rid) == 1
    assert client.sismember("t:seen:seen", "fpA") and not client.hexists("t:seen:pending", "fpA")
    assert len(q) == 0 and q.leased() == 0 and not client.hexists("t:seen:req", rid)
    assert q.push_payload(payload, score=0, fingerprint="fpA", filtered=True) is None  # done: seen
    assert q.ack(rid) == 0  # acknowledging twice is harmless


def test_a_dead_workers_lease_is_reaped_exactly_once_by_two_racing_reapers(client: Any,
                                                                           spider: WeiboSpider) -> None:
    q = _queue(client, spider, "reap")
    rid = q.push_payload(request_to_json(_request(spider, 1), spider), score=-5, fingerprint="fpR", filtered=True)
    assert q.pop_payload("dead", 200) is not None
    assert q.reap() == 0  # not expired yet
    deadline = time.monotonic() + 5
    while client.zscore("t:reap:lease", rid) > _redis_ms(client):  # bounded wait for the expiry
        assert time.monotonic() < deadline
        time.sleep(0.02)
    counts: list[int] = []
    start = threading.Barrier(2)

    def reaper() -> None:
        with redis.Redis(connection_pool=client.connection_pool) as c:
            mine = LeasedQueue(c, spider, "t:reap")
            start.wait(5)
            counts.append(sum(mine.reap() for _ in range(20)))

    threads = [threading.Thread(target=reaper) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(counts) == [0, 1]
    assert client.zrange("t:reap:q", 0, -1, withscores=True) == [(rid.encode(), -5.0)]  # back where it was
    assert q.leased() == 0 and not client.hexists("t:reap:owner", rid)
    assert client.hexists("t:reap:pending", "fpR") and not client.sismember("t:reap:seen", "fpR")
    got = q.pop_payload("alive", 10_000)  # another worker takes it over
    assert got is not None and got[0] == rid


def test_renew_extends_only_the_owners_leases(client: Any, spider: WeiboSpider) -> None:
    q = _queue(client, spider, "renew")
    for n in (1, 2):
        q.push_payload(request_to_json(_request(spider, n), spider), score=0, fingerprint="", filtered=False)
    a, _ = q.pop_payload("w1", 1_000) or ("", b"")
    b, _ = q.pop_payload("w2", 1_000) or ("", b"")
    before = {r: client.zscore("t:renew:lease", r) for r in (a, b)}
    assert q.renew("w1", 60_000, [a, b]) == 1
    assert client.zscore("t:renew:lease", a) > before[a] + 50_000
    assert client.zscore("t:renew:lease", b) == before[b]


def test_a_retry_replaces_its_lease_in_one_step(client: Any, spider: WeiboSpider) -> None:
    q = _queue(client, spider, "handoff")
    payload = request_to_json(_request(spider, 1), spider)
    old = q.push_payload(payload, score=0, fingerprint="fpH", filtered=True)
    assert q.pop_payload("w1", 10_000) is not None
    new = q.push_payload(payload, score=0, fingerprint="", filtered=False, replaces=old)
    assert new not in (None, old)
    assert q.leased() == 0 and len(q) == 1 and not client.hexists("t:handoff:req", old)
    assert client.hget("t:handoff:fp", new) == b"fpH" and client.hget("t:handoff:pending", "fpH") == b"1"
    assert q.pop_payload("w1", 10_000) is not None and q.ack(new) == 1
    assert client.sismember("t:handoff:seen", "fpH") and not client.hexists("t:handoff:pending", "fpH")


def test_finish_deletes_a_job_only_when_nothing_is_queued_or_leased(client: Any, spider: WeiboSpider) -> None:
    q = _queue(client, spider, "fin")
    rid = q.push_payload(request_to_json(_request(spider, 1), spider), score=0, fingerprint="f", filtered=True)
    assert q.finish(require_seeded=False) == 0
    q.pop_payload("w1", 10_000)
    assert q.finish(require_seeded=False) == 0  # leased
    q.ack(rid)
    assert q.finish(require_seeded=False) == 1
    assert client.keys("t:fin:*") == []


def test_jobs_are_queued_once_and_the_first_taker_seeds(redis_url: str, client: Any) -> None:
    settings = project_crawler(REDIS_URL=redis_url, DISTRIBUTED_KEY_PREFIX="tj").settings
    a, b = JobBoard(settings, "weibo", "wa"), JobBoard(settings, "weibo", "wb")
    assert a.enqueue("weibo-uid-1", {"uid": "1"}) is True
    assert a.enqueue("weibo-uid-1", {"uid": "1"}) is False  # already queued
    job_a, job_b = a.take(), b.take()
    assert job_a is not None and job_b is not None
    assert (job_a.key, job_a.args, job_a.seed) == ("weibo-uid-1", {"uid": "1"}, True)
    assert (job_b.key, job_b.seed) == ("weibo-uid-1", False)  # joins the active job; someone seeds it already
    assert a.enqueue("weibo-uid-1", {"uid": "1"}) is False  # active
    for value in client.lrange("tj:weibo:jobs", 0, -1) + client.hvals("tj:weibo:active"):
        assert json.loads(value)["key"] == "weibo-uid-1"


def _redis_ms(client: Any) -> float:
    sec, usec = client.time()
    return sec * 1000 + usec / 1000
