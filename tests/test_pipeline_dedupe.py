"""The dedupe pipeline on a fake crawler (get_crawler + build_from_crawler), with both cache backends.

``process_item`` is a coroutine; each test drives it on a private asyncio loop (see :func:`run_coro`), where it runs
the blocking Redis call in a worker thread exactly as under Scrapy's asyncio reactor.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from mediacrawler.cache import cache_from_crawler
from mediacrawler.cache.memory import MemoryCache
from mediacrawler.cache.redis import RedisCache
from mediacrawler.items import Post
from mediacrawler.pipelines.dedupe import DedupePipeline
from tests.plugins.redis_server import RedisServer

T = TypeVar("T")


def post(post_id: str = "4979000000000001", platform: str = "weibo") -> Post:
    return Post(
        platform=platform, post_id=post_id, url=f"https://weibo.com/1/{post_id}", author=None, created_at=None
    )


def make_pipeline(**settings: Any) -> DedupePipeline:
    crawler = get_crawler(settings_dict=settings)
    return build_from_crawler(DedupePipeline, crawler)


def run_coro(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro* on a loop of its own. Not ``asyncio.run``: that unsets the thread's current event loop on exit,
    which would pull the loop of the reactor that conftest installed from under later tests."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def run(pipeline: DedupePipeline, item: Any) -> Any:
    """The item, or None when the pipeline dropped it."""
    try:
        return run_coro(pipeline.process_item(item))
    except DropItem:
        return None


def stats(pipeline: DedupePipeline) -> dict[str, Any]:
    return {k: v for k, v in pipeline.stats.get_stats().items() if k.startswith("dedupe/")}


@pytest.fixture(params=["memory", "redis"])
def backend_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "memory":
        return {"CACHE_BACKEND": "memory"}
    return {"REDIS_URL": request.getfixturevalue("redis_url")}


def test_disabled() -> None:
    with pytest.raises(NotConfigured):
        make_pipeline(DEDUPE_ENABLED=False)


def test_negative_ttl_is_a_misconfiguration() -> None:
    with pytest.raises(NotConfigured):
        make_pipeline(DEDUPE_TTL=-1)


def test_backend_follows_settings(redis_url: str) -> None:
    assert isinstance(make_pipeline().cache, MemoryCache)
    assert isinstance(make_pipeline(REDIS_URL=redis_url).cache, RedisCache)
    assert make_pipeline().ttl == 86400
    assert make_pipeline(DEDUPE_TTL=0).ttl is None


def test_drops_a_post_seen_before(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    first = post("1")
    assert run(pipeline, first) is first
    assert run(pipeline, post("1")) is None
    assert run(pipeline, post("2")) is not None
    assert run(pipeline, post("1", platform="bilibili")) is not None  # ids are per platform
    assert stats(pipeline) == {"dedupe/accepted": 3, "dedupe/dropped": 1}


def test_duplicate_is_dropped_at_debug_level(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    run(pipeline, post("1"))
    with pytest.raises(DropItem, match="duplicate post weibo:1") as info:
        run_coro(pipeline.process_item(post("1")))
    assert info.value.log_level == "DEBUG"


def test_items_without_ids_pass_untouched(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    item = {"platform": "weibo", "text": "no id"}
    assert run(pipeline, item) is item
    assert run(pipeline, {"post_id": "1"}) is not None
    assert stats(pipeline) == {"dedupe/no_id": 2}


def test_seed_membership_check_sees_pipeline_entries(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    run(pipeline, post("4979000000000001"))
    # Another component of the same crawl sees the same cache, keyed as in the seed: dedup:{platform}.
    cache = cache_from_crawler(pipeline.crawler)
    assert cache is pipeline.cache
    assert cache.sismember("dedup:weibo", "4979000000000001")
    assert 86399 < (cache.ttl("dedup:weibo") or 0) <= 86400


def test_posts_come_back_after_the_ttl(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(DEDUPE_TTL=1, **backend_settings)
    assert run(pipeline, post("1")) is not None
    assert run(pipeline, post("1")) is None
    time.sleep(1.4)
    assert run(pipeline, post("1")) is not None


def test_ttl_zero_never_forgets(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(DEDUPE_TTL=0, **backend_settings)
    run(pipeline, post("1"))
    assert pipeline.cache.ttl("dedup:weibo") == float("inf")


def test_two_workers_racing_on_one_post_emit_it_once(redis_url: str) -> None:
    """Two crawlers (as two workers would) share one Redis; check-and-add is atomic."""
    first, second = make_pipeline(REDIS_URL=redis_url), make_pipeline(REDIS_URL=redis_url)

    async def race() -> list[Any]:
        items = [post(str(n)) for n in range(200)]
        calls = [p.process_item(item) for item in items for p in (first, second)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = run_coro(race())
    emitted = [r for r in results if isinstance(r, Post)]
    assert sorted(int(p.post_id) for p in emitted) == list(range(200))
    assert all(isinstance(r, (Post, DropItem)) for r in results)
    assert stats(first)["dedupe/accepted"] + stats(second)["dedupe/accepted"] == 200


def test_outage_within_retry_budget_is_waited_out(
    redis_server_factory: Callable[[], RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    pipeline = make_pipeline(REDIS_URL=server.url, CACHE_RETRY_BACKOFF_BASE=0.2, CACHE_RETRY_BACKOFF_MAX=0.5)
    assert run(pipeline, post("1")) is not None
    server.stop()
    caplog.set_level(logging.INFO)
    restarter = threading.Timer(1.0, server.start)
    restarter.start()
    try:
        assert run(pipeline, post("2")) is not None
    finally:
        restarter.join()
    assert stats(pipeline) == {"dedupe/accepted": 2}
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("mediacrawler.")]
    outage = [m for m in messages if "unreachable" in m]
    assert len(outage) == 1
    assert outage[0].startswith(f"cache: Redis at {server.url} unreachable (") and outage[0].endswith(
        "retrying in 0.2s"
    )
    assert any("reachable again" in m for m in messages)


def test_outage_past_retry_budget_lets_posts_through(
    redis_server_factory: Callable[[], RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    pipeline = make_pipeline(REDIS_URL=server.url, CACHE_RETRY_TIMES=1, CACHE_RETRY_BACKOFF_BASE=0.1)
    assert run(pipeline, post("1")) is not None
    server.stop()
    caplog.set_level(logging.INFO)
    assert run(pipeline, post("1")) is not None  # cannot check: let through, counted
    assert run(pipeline, post("2")) is not None
    assert stats(pipeline) == {"dedupe/accepted": 1, "dedupe/unavailable": 2}
    pipeline_warnings = [r for r in caplog.records if r.name == "mediacrawler.pipelines.dedupe"]
    assert len(pipeline_warnings) == 1 and "letting posts through" in pipeline_warnings[0].getMessage()
    server.start()  # empty again (no persistence): dedupe resumes from scratch
    assert run(pipeline, post("3")) is not None
    assert run(pipeline, post("3")) is None
    assert stats(pipeline)["dedupe/dropped"] == 1
