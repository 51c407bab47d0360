"""The dedupe pipeline on a fake crawler (get_crawler + build_from_crawler), with both cache backends.

``process_item`` and the signal handlers (``item_scraped``, ``item_dropped``, ``item_error``) are coroutines; each
test drives them on a private asyncio loop (see :func:`run_coro`), where the blocking Redis calls run in a worker
thread exactly as under Scrapy's asyncio reactor. A post is "emitted" (:func:`emit`) when it passes the pipeline
and Scrapy then reports it scraped, as the scraper does.
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
from mediacrawler.contracts import AlreadyStored
from mediacrawler.items import Post
from mediacrawler.jobstate import JobState
from mediacrawler.pipelines.dedupe import ClaimedElsewhere, DedupePipeline, DuplicatePost, claim_key
from tests.plugins.redis_server import RedisServer
from tests.utils import project_settings_dict

T = TypeVar("T")

JOB = "weibo-uid-7365120894"
OTHER_JOB = "weibo-keyword-cats"


def post(post_id: str = "4979000000000001", platform: str = "weibo") -> Post:
    return Post(
        platform=platform, post_id=post_id, url=f"https://weibo.com/1/{post_id}", author=None, created_at=None
    )


def dedupe_crawler(**settings: Any) -> Any:
    # The project's defaults of the settings the pipeline and its cache read (settings.py holds them).
    defaults = {k: v for k, v in project_settings_dict().items() if k.startswith(("DEDUPE_", "CACHE_"))}
    return get_crawler(settings_dict={**defaults, **settings})


def make_pipeline(job: str = JOB, **settings: Any) -> DedupePipeline:
    pipeline = build_from_crawler(DedupePipeline, dedupe_crawler(**settings))
    pipeline.owner = job  # what it reads from spider.job in a crawl
    return pipeline


def restarted(pipeline: DedupePipeline, job: str = JOB) -> DedupePipeline:
    """A new pipeline (a new run, or another worker) on the same cache as *pipeline*."""
    prefixes = ("DEDUPE_", "CACHE_", "REDIS_")
    settings = {k: v for k, v in pipeline.crawler.settings.items() if k.startswith(prefixes)}
    other = make_pipeline(job, **settings)
    if not other.cache.shared:
        other.cache = pipeline.cache  # a memory cache is per crawler: share it as Redis would be shared
    return other


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
    """The item, or None when the pipeline dropped it (the item stays in flight: not yet scraped)."""
    try:
        return run_coro(pipeline.process_item(item))
    except DropItem:
        return None


def scraped(pipeline: DedupePipeline, item: Any) -> None:
    run_coro(pipeline.item_scraped(item, spider=None))


def emit(pipeline: DedupePipeline, item: Any) -> Any:
    """Through the pipeline and, if it passed, scraped: the item, or None when dropped."""
    result = run(pipeline, item)
    if result is not None:
        scraped(pipeline, result)
    return result


def stats(pipeline: DedupePipeline) -> dict[str, Any]:
    return {k: v for k, v in pipeline.stats.get_stats().items() if k.startswith("dedupe/")}


def seen(pipeline: DedupePipeline, post_id: str, platform: str = "weibo") -> bool:
    return pipeline.cache.sismember(f"dedup:{platform}", post_id)


def claim_owner(pipeline: DedupePipeline, post_id: str, platform: str = "weibo") -> str | None:
    raw = pipeline.cache.get(claim_key(platform, post_id))
    return None if raw is None else raw.decode()


@pytest.fixture(params=["memory", "redis"])
def backend_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "memory":
        return {"CACHE_BACKEND": "memory"}
    return {"REDIS_URL": request.getfixturevalue("redis_url")}


# --- Configuration ---------------------------------------------------------------------------------------------
def test_disabled() -> None:
    with pytest.raises(NotConfigured):
        make_pipeline(DEDUPE_ENABLED=False)


@pytest.mark.parametrize("settings", [{"DEDUPE_TTL": -1}, {"DEDUPE_CLAIM_TTL": 0}, {"DEDUPE_CLAIM_TTL": -5}])
def test_bad_ttls_are_a_misconfiguration(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(settings))):
        make_pipeline(**settings)


def test_backend_follows_settings(redis_url: str) -> None:
    assert isinstance(make_pipeline().cache, MemoryCache)
    assert isinstance(make_pipeline(REDIS_URL=redis_url).cache, RedisCache)
    assert make_pipeline().ttl == 86400
    assert make_pipeline(DEDUPE_TTL=0).ttl is None
    assert make_pipeline().claim_ttl == 3600
    assert make_pipeline(DEDUPE_CLAIM_TTL=60).claim_ttl == 60


def test_owner_is_the_job_key_else_the_spider_name() -> None:
    pipeline = build_from_crawler(DedupePipeline, dedupe_crawler())

    class Spider:
        name = "weibo"
        job_state: JobState | None = JobState(job=JOB)

    pipeline.crawler.spider = Spider()  # type: ignore[assignment]
    assert pipeline._owner() == JOB
    pipeline = build_from_crawler(DedupePipeline, dedupe_crawler())
    Spider.job_state = None  # not a platform spider: no job state
    pipeline.crawler.spider = Spider()  # type: ignore[assignment]
    assert pipeline._owner() == "weibo"


# --- Seen only once emitted ------------------------------------------------------------------------------------
def test_drops_a_post_emitted_before(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    first = post("1")
    assert emit(pipeline, first) is first
    assert emit(pipeline, post("1")) is None
    assert emit(pipeline, post("2")) is not None
    assert emit(pipeline, post("1", platform="bilibili")) is not None  # ids are per platform
    assert stats(pipeline) == {"dedupe/accepted": 3, "dedupe/dropped": 1, "dedupe/committed": 3}


def test_a_post_is_not_seen_until_scraped(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    item = post("1")
    assert run(pipeline, item) is item
    assert not seen(pipeline, "1")  # in flight: claimed, not seen
    assert claim_owner(pipeline, "1") == JOB
    assert 3599 < (pipeline.cache.ttl(claim_key("weibo", "1")) or 0) <= 3600
    assert run(pipeline, post("1")) is None  # a second copy in this run while the first is in flight
    scraped(pipeline, item)
    assert seen(pipeline, "1")
    assert claim_owner(pipeline, "1") is None  # committed: the claim is released
    assert run(pipeline, post("1")) is None
    assert stats(pipeline) == {"dedupe/accepted": 1, "dedupe/dropped": 2, "dedupe/committed": 1}


def test_duplicate_is_dropped_at_debug_level(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    emit(pipeline, post("1"))
    with pytest.raises(DuplicatePost, match="duplicate post weibo:1") as info:
        run_coro(pipeline.process_item(post("1")))
    assert info.value.log_level == "DEBUG"


def test_items_without_ids_pass_untouched(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    item = {"platform": "weibo", "text": "no id"}
    assert emit(pipeline, item) is item
    assert emit(pipeline, {"post_id": "1"}) is not None
    assert stats(pipeline) == {"dedupe/no_id": 2}


def test_seed_membership_check_sees_pipeline_entries(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    emit(pipeline, post("4979000000000001"))
    # Another component of the same crawl sees the same cache, keyed as in the seed: dedup:{platform}.
    cache = cache_from_crawler(pipeline.crawler)
    assert cache is pipeline.cache
    assert cache.sismember("dedup:weibo", "4979000000000001")
    assert 86399 < (cache.ttl("dedup:weibo") or 0) <= 86400


def test_posts_come_back_after_the_ttl(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(DEDUPE_TTL=1, **backend_settings)
    assert emit(pipeline, post("1")) is not None
    assert emit(pipeline, post("1")) is None
    time.sleep(1.4)
    assert emit(pipeline, post("1")) is not None


def test_ttl_zero_never_forgets(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(DEDUPE_TTL=0, **backend_settings)
    emit(pipeline, post("1"))
    assert pipeline.cache.ttl("dedup:weibo") == float("inf")


# --- Released when the item does not make it -------------------------------------------------------------------
def test_dropped_by_a_later_pipeline_releases_the_claim(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    item = post("1")
    assert run(pipeline, item) is item
    run_coro(pipeline.item_dropped(item, spider=None, exception=DropItem("media: every file failed")))
    assert claim_owner(pipeline, "1") is None and not seen(pipeline, "1")
    assert run(restarted(pipeline, OTHER_JOB), post("1")) is not None  # another job may emit it now
    assert emit(pipeline, post("1")) is None  # ... and holds it; this run's own retry is dropped meanwhile
    assert stats(pipeline) == {"dedupe/accepted": 1, "dedupe/released": 1, "dedupe/claimed_elsewhere": 1}


def test_item_error_releases_the_claim(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    item = post("1")
    assert run(pipeline, item) is item
    run_coro(pipeline.item_error(item, spider=None, failure=None))
    assert claim_owner(pipeline, "1") is None and not seen(pipeline, "1")
    assert emit(pipeline, post("1")) is not None  # the same run may emit it again (e.g. the page is retried)
    assert stats(pipeline) == {"dedupe/accepted": 2, "dedupe/released": 1, "dedupe/committed": 1}


def test_a_copy_dropped_before_dedupe_does_not_release_the_claim(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    item = post("1")
    assert run(pipeline, item) is item
    # Another copy of the post, dropped by normalize (before dedupe), must not free the one in flight.
    run_coro(pipeline.item_dropped(post("1"), spider=None, exception=DropItem("not a valid post")))
    assert claim_owner(pipeline, "1") == JOB
    scraped(pipeline, item)
    assert seen(pipeline, "1")


def test_own_drops_release_nothing(backend_settings: dict[str, Any]) -> None:
    first = make_pipeline(**backend_settings)
    assert run(first, post("1")) is not None
    second = restarted(first, OTHER_JOB)
    copy = post("1")
    with pytest.raises(ClaimedElsewhere, match=f"by job {JOB}"):
        run_coro(second.process_item(copy))
    run_coro(second.item_dropped(copy, spider=None, exception=ClaimedElsewhere("x")))
    assert claim_owner(first, "1") == JOB
    assert stats(second) == {"dedupe/claimed_elsewhere": 1}


def test_spider_closed_releases_posts_left_in_flight(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)
    assert run(pipeline, post("1")) is not None
    run_coro(pipeline.spider_closed(spider=None, reason="finished"))
    assert claim_owner(pipeline, "1") is None and not seen(pipeline, "1")


def test_a_post_stored_by_an_interrupted_run_is_committed(backend_settings: dict[str, Any]) -> None:
    crashed = make_pipeline(**backend_settings)
    assert run(crashed, post("1")) is not None  # stored on disk, then killed before the commit
    resumed = restarted(crashed)
    copy = post("1")
    run_coro(resumed.item_dropped(copy, spider=None, exception=AlreadyStored("stored before the interruption")))
    assert seen(resumed, "1") and claim_owner(resumed, "1") is None
    assert run(restarted(crashed, OTHER_JOB), post("1")) is None


# --- Claims between jobs ---------------------------------------------------------------------------------------
def test_another_job_in_flight_wins_until_it_commits(backend_settings: dict[str, Any]) -> None:
    first = make_pipeline(**backend_settings)
    second = restarted(first, OTHER_JOB)
    item = post("1")
    assert run(first, item) is item
    assert run(second, post("1")) is None
    scraped(first, item)
    assert run(second, post("1")) is None
    assert stats(second) == {"dedupe/claimed_elsewhere": 1, "dedupe/dropped": 1}


def test_the_same_job_reclaims_its_stale_claim(backend_settings: dict[str, Any]) -> None:
    crashed = make_pipeline(**backend_settings)
    assert run(crashed, post("1")) is not None  # killed before item_scraped: claimed, never seen
    assert claim_owner(crashed, "1") == JOB
    assert run(restarted(crashed, OTHER_JOB), post("1")) is None  # another job keeps off it
    resumed = restarted(crashed)  # the same job, resumed
    item = post("1")
    assert run(resumed, item) is item
    scraped(resumed, item)
    assert seen(resumed, "1") and claim_owner(resumed, "1") is None
    assert stats(resumed) == {"dedupe/accepted": 1, "dedupe/committed": 1}


def test_a_claim_expires(backend_settings: dict[str, Any]) -> None:
    crashed = make_pipeline(DEDUPE_CLAIM_TTL=1, **backend_settings)
    assert run(crashed, post("1")) is not None
    other = restarted(crashed, OTHER_JOB)
    assert run(other, post("1")) is None
    time.sleep(1.4)
    assert run(other, post("1")) is not None


def test_two_jobs_racing_on_200_posts_accept_each_once(redis_url: str) -> None:
    """Two crawlers of different jobs (as two workers would) share one Redis; check-and-claim is atomic, and a
    commit racing with the other worker's checks lets nothing through a second time."""
    first, second = make_pipeline(JOB, REDIS_URL=redis_url), make_pipeline(OTHER_JOB, REDIS_URL=redis_url)
    pipelines = (first, second)

    async def race() -> list[Any]:
        items = [post(str(n)) for n in range(200)]
        calls = [p.process_item(item) for item in items for p in (first, second)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = run_coro(race())
    emitted = [(n % 2, r) for n, r in enumerate(results) if isinstance(r, Post)]
    assert sorted(int(p.post_id) for _, p in emitted) == list(range(200))
    assert all(isinstance(r, (Post, ClaimedElsewhere)) for r in results)
    assert stats(first)["dedupe/accepted"] + stats(second)["dedupe/accepted"] == 200

    async def commit_while_checking() -> list[Any]:
        commits = [pipelines[n].item_scraped(item, spider=None) for n, item in emitted]
        checks = [p.process_item(post(str(n))) for n in range(200) for p in pipelines]
        return await asyncio.gather(*commits, *checks, return_exceptions=True)

    again = run_coro(commit_while_checking())[len(emitted) :]
    assert not [r for r in again if isinstance(r, Post)]
    assert all(isinstance(r, (DuplicatePost, ClaimedElsewhere)) for r in again)
    assert stats(first)["dedupe/committed"] + stats(second)["dedupe/committed"] == 200
    assert first.cache.scard("dedup:weibo") == 200
    assert not redis_keys(redis_url, "mediacrawler:dedup-claim:*")


def redis_keys(url: str, pattern: str) -> list[bytes]:
    import redis

    with redis.Redis.from_url(url) as client:
        return list(client.keys(pattern))


def test_copies_racing_in_one_run_pass_once(backend_settings: dict[str, Any]) -> None:
    pipeline = make_pipeline(**backend_settings)

    async def race() -> list[Any]:
        return await asyncio.gather(*(pipeline.process_item(post("1")) for _ in range(20)), return_exceptions=True)

    results = run_coro(race())
    assert len([r for r in results if isinstance(r, Post)]) == 1
    assert stats(pipeline) == {"dedupe/accepted": 1, "dedupe/dropped": 19}


# --- Outages ---------------------------------------------------------------------------------------------------
def test_outage_within_retry_budget_is_waited_out(
    redis_server_factory: Callable[[], RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    pipeline = make_pipeline(REDIS_URL=server.url, CACHE_RETRY_BACKOFF_BASE=0.2, CACHE_RETRY_BACKOFF_MAX=0.5)
    assert emit(pipeline, post("1")) is not None
    server.stop()
    caplog.set_level(logging.INFO)
    restarter = threading.Timer(1.0, server.start)
    restarter.start()
    try:
        assert emit(pipeline, post("2")) is not None
    finally:
        restarter.join()
    assert stats(pipeline) == {"dedupe/accepted": 2, "dedupe/committed": 2}
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
    assert emit(pipeline, post("1")) is not None
    server.stop()
    caplog.set_level(logging.INFO)
    assert emit(pipeline, post("1")) is not None  # cannot check: let through, counted
    assert emit(pipeline, post("2")) is not None
    assert emit(pipeline, post("3")) is not None
    assert stats(pipeline) == {
        "dedupe/accepted": 1,
        "dedupe/committed": 1,
        "dedupe/unavailable": 3,
        "dedupe/commit_unavailable": 3,
    }
    records = [r for r in caplog.records if r.name == "mediacrawler.pipelines.dedupe"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING]  # once per outage, each side
    assert "letting posts through" in records[0].getMessage()
    assert "not marked seen" in records[1].getMessage()
    server.start()  # empty again (no persistence): dedupe resumes from scratch
    assert emit(pipeline, post("3")) is not None
    assert emit(pipeline, post("3")) is None
    assert stats(pipeline)["dedupe/dropped"] == 1
    assert stats(pipeline)["dedupe/committed"] == 2


def test_commit_meets_an_outage_then_the_cache_returns(
    redis_server_factory: Callable[[], RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    pipeline = make_pipeline(REDIS_URL=server.url, CACHE_RETRY_TIMES=1, CACHE_RETRY_BACKOFF_BASE=0.1)
    item = post("1")
    assert run(pipeline, item) is item  # claimed while Redis is up
    server.stop()
    caplog.set_level(logging.INFO)
    scraped(pipeline, item)  # cannot mark it seen: counted, logged, nothing raised
    assert stats(pipeline)["dedupe/commit_unavailable"] == 1
    server.start()
    # Not seen (possible duplicate later, never a loss); this run's in-flight record is gone with the commit.
    assert emit(pipeline, post("2")) is not None
    assert seen(pipeline, "2") and not seen(pipeline, "1")
    warnings = [r for r in caplog.records if r.name == "mediacrawler.pipelines.dedupe"]
    assert len(warnings) == 1 and "dedupe/commit_unavailable" in warnings[0].getMessage()
