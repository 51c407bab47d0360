"""The cache contract, one suite run unchanged against both backends, then what is specific to each.

The Redis backend talks to a real redis-server (tests/plugins/redis_server.py). Expiry tests use TTLs of 1–2 s and
let time pass through ``elapse``: the memory backend's injected clock steps (no sleeping), Redis waits fixed, bounded
times with at least 0.4 s of margin on each side.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis as redis_py
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings

from mediacrawler.cache import (
    Cache,
    CacheFactory,
    CacheUnavailable,
    SessionState,
    SessionStore,
    WrongTypeError,
    get_cache,
)
from mediacrawler.cache.memory import MemoryCache
from mediacrawler.cache.redis import RedisCache, get_redis
from mediacrawler.scrub import mask_url
from tests.plugins.redis_server import RedisServer, free_port
from tests.utils import project_settings_dict


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "redis"])
def cache(request: pytest.FixtureRequest, clock: Clock) -> Iterator[Cache]:
    if request.param == "memory":
        backend: Cache = MemoryCache(prefix="test:", clock=clock)
    else:
        backend = RedisCache(request.getfixturevalue("redis_url"), prefix="test:")
    yield backend
    backend.close()


def _redis_wait(seconds: float) -> None:
    # Redis expires keys on its own clock: the only way to let its TTLs run is to let time pass.
    time.sleep(seconds)


@pytest.fixture
def elapse(cache: Cache, clock: Clock) -> Callable[[float], None]:
    """Let *seconds* pass for *cache*: the memory backend's injected clock steps at once; Redis waits for real."""
    return clock.advance if isinstance(cache, MemoryCache) else _redis_wait


# --- The contract --------------------------------------------------------------------------------------------------
def test_get_set_roundtrip(cache: Cache) -> None:
    assert cache.get("missing") is None
    cache.set("s", "héllo")
    cache.set("b", b"\x00\xff")
    assert cache.get("s") == "héllo".encode()
    assert cache.get("b") == b"\x00\xff"
    cache.set("s", "again")
    assert cache.get("s") == b"again"


def test_values_must_be_str_or_bytes(cache: Cache) -> None:
    with pytest.raises(TypeError):
        cache.set("k", 12)  # type: ignore[arg-type]


def test_json_helpers(cache: Cache) -> None:
    assert cache.get_json("j") is None
    cache.set_json("j", {"cursor": "abc", "n": 1, "nested": [1, None]}, ttl=60)
    assert cache.get_json("j") == {"cursor": "abc", "n": 1, "nested": [1, None]}
    assert 0 < (cache.ttl("j") or 0) <= 60


def test_exists_and_delete(cache: Cache) -> None:
    assert not cache.exists("k")
    assert cache.delete("k") is False
    cache.set("k", "v")
    assert cache.exists("k")
    assert cache.delete("k") is True
    assert not cache.exists("k")
    assert cache.get("k") is None


def test_ttl_reports_missing_permanent_and_remaining(cache: Cache) -> None:
    assert cache.ttl("k") is None
    cache.set("k", "v")
    assert cache.ttl("k") == math.inf
    cache.set("k", "v", ttl=30)
    assert 29 < (cache.ttl("k") or 0) <= 30
    cache.set("k", "v")  # set without a ttl makes the key permanent again
    assert cache.ttl("k") == math.inf


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan])
def test_ttl_must_be_positive_and_finite(cache: Cache, bad: float) -> None:
    with pytest.raises(ValueError):
        cache.set("k", "v", ttl=bad)
    with pytest.raises(ValueError):
        cache.sadd("s", "m", ttl=bad)


def test_keys_are_prefixed(cache: Cache) -> None:
    assert cache.prefix == "test:"
    assert cache.key("session:1") == "test:session:1"


def test_set_with_short_ttl_expires(cache: Cache, elapse: Callable[[float], None]) -> None:
    cache.set("k", "v", ttl=1)
    cache.set("keep", "v")
    assert cache.get("k") == b"v"
    elapse(1.4)
    assert cache.get("k") is None
    assert not cache.exists("k")
    assert cache.ttl("k") is None
    assert cache.get("keep") == b"v"


def test_expire(cache: Cache, elapse: Callable[[float], None]) -> None:
    assert cache.expire("missing", 10) is False
    cache.set("k", "v")
    assert cache.expire("k", 1) is True
    assert 0 < (cache.ttl("k") or 0) <= 1
    elapse(1.4)
    assert not cache.exists("k")


def test_sadd_sismember_scard(cache: Cache) -> None:
    assert not cache.sismember("s", "a")
    assert cache.scard("s") == 0
    assert cache.sadd("s", "a", "b") == 2
    assert cache.sadd("s", "b", "c") == 1
    assert cache.sismember("s", "a") and cache.sismember("s", "c")
    assert not cache.sismember("s", "z")
    assert cache.scard("s") == 3
    assert cache.exists("s")
    assert cache.ttl("s") == math.inf  # no entry has a TTL
    with pytest.raises(ValueError):
        cache.sadd("s")


def test_add_if_absent(cache: Cache) -> None:
    assert cache.add_if_absent("d", "1", ttl=60) is True
    assert cache.add_if_absent("d", "1", ttl=60) is False
    assert cache.add_if_absent("d", "2", ttl=60) is True
    assert cache.add_if_absent("other", "1", ttl=60) is True


def test_set_entries_expire_one_by_one(cache: Cache, elapse: Callable[[float], None]) -> None:
    # t=0: a (ttl 2). t=1: b (ttl 2), and a again, which must neither count nor extend a's expiry.
    assert cache.add_if_absent("d", "a", ttl=2)
    elapse(1.0)
    assert cache.add_if_absent("d", "b", ttl=2)
    assert not cache.add_if_absent("d", "a", ttl=2)
    assert cache.sadd("d", "a", "b", ttl=2) == 0
    assert cache.scard("d") == 2
    elapse(1.5)  # t=2.5: a has expired, b has not
    assert not cache.sismember("d", "a")
    assert cache.sismember("d", "b")
    assert cache.scard("d") == 1
    assert cache.exists("d")
    assert cache.add_if_absent("d", "a", ttl=2)  # forgotten, so new again (now until t=4.5)
    elapse(1.0)  # t=3.5: b has expired, the re-added a has not
    assert not cache.sismember("d", "b")
    assert cache.sismember("d", "a")
    assert cache.scard("d") == 1


def test_set_key_lives_as_long_as_its_longest_entry(cache: Cache) -> None:
    cache.sadd("d", "short", ttl=1)
    cache.sadd("d", "long", ttl=30)
    assert 29 < (cache.ttl("d") or 0) <= 30
    cache.sadd("d", "forever")
    assert cache.ttl("d") == math.inf


def test_abandoned_set_vanishes(cache: Cache, elapse: Callable[[float], None]) -> None:
    cache.sadd("d", "a", "b", ttl=1)
    elapse(1.4)
    assert not cache.exists("d")
    assert cache.ttl("d") is None
    assert cache.scard("d") == 0


def test_wrong_type(cache: Cache) -> None:
    cache.set("str", "v")
    cache.sadd("set", "m")
    with pytest.raises(WrongTypeError):
        cache.sadd("str", "m")
    with pytest.raises(WrongTypeError):
        cache.sismember("str", "m")
    with pytest.raises(WrongTypeError):
        cache.get("set")


def test_add_if_absent_is_atomic_across_threads(cache: Cache) -> None:
    ids = [str(i) for i in range(300)]
    accepted: list[list[str]] = [[] for _ in range(6)]
    barrier = threading.Barrier(6)

    def worker(n: int) -> None:
        barrier.wait()
        for member in ids[n::2] + ids[: n % 2 : 2] + ids:  # overlapping orders
            if cache.add_if_absent("race", member, ttl=60):
                accepted[n].append(member)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    everything = [member for part in accepted for member in part]
    assert sorted(everything, key=int) == ids


def test_claim_and_release(cache: Cache) -> None:
    assert cache.claim("c", "job-a", ttl=60) == "job-a"
    assert cache.get("c") == b"job-a"
    assert 59 < (cache.ttl("c") or 0) <= 60
    assert cache.claim("c", "job-b", ttl=60) == "job-a"  # held: the holder is returned, nothing changes
    assert cache.claim("c", "job-a", ttl=60) == "job-a"  # the holder again (a retry, a resumed run)
    assert cache.release("c", "job-b") is False  # not b's to release
    assert cache.get("c") == b"job-a"
    assert cache.release("c", "job-a") is True
    assert cache.release("c", "job-a") is False
    assert not cache.exists("c")
    assert cache.claim("c", "job-b", ttl=60) == "job-b"
    assert cache.claim("forever", "jöb") == "jöb"  # no ttl: held until released
    assert cache.ttl("forever") == math.inf
    with pytest.raises(ValueError):
        cache.claim("c2", "job-a", ttl=0)


def test_claim_does_not_extend_the_holders_ttl(cache: Cache, elapse: Callable[[float], None]) -> None:
    cache.claim("c", "job-a", ttl=1)
    elapse(0.5)
    assert cache.claim("c", "job-a", ttl=60) == "job-a"
    assert (cache.ttl("c") or 0) <= 0.5


def test_claim_expires(cache: Cache, elapse: Callable[[float], None]) -> None:
    assert cache.claim("c", "job-a", ttl=1) == "job-a"
    assert cache.claim("c", "job-b", ttl=1) == "job-a"
    elapse(1.4)
    assert cache.claim("c", "job-b", ttl=60) == "job-b"


def test_claim_unless_in_a_set(cache: Cache, elapse: Callable[[float], None]) -> None:
    cache.sadd("done", "1", ttl=60)
    cache.sadd("done", "forever")
    cache.sadd("done", "short", ttl=1)
    assert cache.claim("c1", "job-a", ttl=60, unless_in=("done", "1")) is None
    assert not cache.exists("c1")  # nothing claimed
    assert cache.claim("cf", "job-a", ttl=60, unless_in=("done", "forever")) is None
    assert cache.claim("c2", "job-a", ttl=60, unless_in=("done", "2")) == "job-a"
    assert cache.claim("c2", "job-b", ttl=60, unless_in=("done", "2")) == "job-a"
    assert cache.claim("c3", "job-a", ttl=60, unless_in=("missing-set", "3")) == "job-a"
    # Done wins over a claim still held (a commit adds to the set before it releases).
    cache.sadd("done", "2", ttl=60)
    assert cache.claim("c2", "job-a", ttl=60, unless_in=("done", "2")) is None
    elapse(1.4)
    assert cache.claim("cs", "job-a", ttl=60, unless_in=("done", "short")) == "job-a"  # expired: not done


def test_claim_wrong_type(cache: Cache) -> None:
    cache.sadd("set", "m")
    cache.set("str", "v")
    with pytest.raises(WrongTypeError):
        cache.claim("set", "job-a", ttl=60)
    with pytest.raises(WrongTypeError):
        cache.release("set", "job-a")
    with pytest.raises(WrongTypeError):
        cache.claim("c", "job-a", ttl=60, unless_in=("str", "m"))
    cache.claim("claimed", "job-a")
    with pytest.raises(WrongTypeError):
        cache.sadd("claimed", "m")  # a claim is a string key
    assert cache.release("str", "job-a") is False  # a plain string that is not the owner: left alone


def test_claim_is_atomic_across_threads(cache: Cache) -> None:
    keys = [f"c{i}" for i in range(200)]
    owners = [f"job-{n}" for n in range(6)]
    answers: list[dict[str, str | None]] = [{} for _ in owners]
    barrier = threading.Barrier(len(owners))

    def worker(n: int) -> None:
        barrier.wait()
        for key in keys[n % 2 :: 2] + keys:  # overlapping orders; every key asked twice by some
            answers[n][key] = cache.claim(key, owners[n], ttl=60, unless_in=("done", key))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(len(owners))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for key in keys:
        holders = {answers[n][key] for n in range(len(owners))}
        assert len(holders) == 1, (key, holders)  # every worker was told the same holder
        (holder,) = holders
        assert holder in owners and cache.get(key) == holder.encode()  # type: ignore[union-attr]


def test_seed_walkthrough(cache: Cache) -> None:
    """Seed 3's example, as written, against our API."""
    session_id = str(uuid.uuid4())
    session_key = f"session:{session_id}"
    session_payload = {"auth_token": "abc123", "page_cursor": None, "request_count": 0}
    cache.set(session_key, json.dumps(session_payload), ttl=300)
    raw_data = cache.get(session_key)
    assert raw_data
    assert json.loads(raw_data) == session_payload
    assert 299 < (cache.ttl(session_key) or 0) <= 300

    dedup_key = "dedup:weibo"
    content_id = "1234567890"
    processed = []
    for _ in range(2):
        if not cache.sismember(dedup_key, content_id):
            processed.append(content_id)
            cache.sadd(dedup_key, content_id)
            cache.expire(dedup_key, 86400)
    assert processed == [content_id]
    assert 86399 < (cache.ttl(dedup_key) or 0) <= 86400


# --- Sessions --------------------------------------------------------------------------------------------------
def test_session_store_roundtrip(cache: Cache) -> None:
    store = SessionStore(cache, ttl=300)
    state = store.create(auth_ref="env:WEIBO_COOKIE", cursor=None)
    assert cache.exists(f"session:{state.id}")
    assert 299 < (cache.ttl(f"session:{state.id}") or 0) <= 300
    assert store.record_request(state.id, cursor="since:42") is not None
    again = store.record_request(state.id)
    assert again is not None
    assert (again.request_count, again.cursor, again.auth_ref) == (2, "since:42", "env:WEIBO_COOKIE")
    assert cache.get_json(f"session:{state.id}") == {
        "auth_ref": "env:WEIBO_COOKIE",
        "cursor": "since:42",
        "request_count": 2,
        "data": {},
    }
    assert store.end(state.id) is True
    assert store.load(state.id) is None
    assert store.record_request(state.id) is None
    assert store.touch(state.id) is False


def test_session_ttl_is_renewed_while_used(cache: Cache, elapse: Callable[[float], None]) -> None:
    store = SessionStore(cache, ttl=1)
    state = store.create()
    for _ in range(3):  # used every 0.6 s for 1.8 s, longer than its TTL
        elapse(0.6)
        assert store.load(state.id) is not None
    elapse(1.4)  # then left alone
    assert store.load(state.id) is None
    assert not cache.exists(f"session:{state.id}")


def test_session_secret_never_logged(cache: Cache, caplog: pytest.LogCaptureFixture) -> None:
    secret = "SUB=s3cr3t-cookie-value"
    caplog.set_level(logging.DEBUG)
    store = SessionStore(cache, ttl=60)
    state = store.create(auth_ref=secret)
    logging.getLogger("test").info("state %r", state)
    store.record_request(state.id)
    store.end(state.id)
    assert secret not in repr(state)
    assert secret not in caplog.text
    assert state.id in caplog.text


def test_session_state_from_settings() -> None:
    store = SessionStore.from_settings(MemoryCache(), Settings(project_settings_dict(SESSION_TTL=42)))
    assert store.ttl == 42
    assert SessionStore.from_settings(MemoryCache(), Settings(project_settings_dict())).ttl == 300
    assert isinstance(store.create(), SessionState)


# --- Factory ---------------------------------------------------------------------------------------------------
def test_factory_defaults_to_memory() -> None:
    cache = get_cache(Settings(project_settings_dict(REDIS_URL=None, CACHE_BACKEND=None)))
    assert isinstance(cache, MemoryCache)
    assert cache.prefix == "mediacrawler:"


def test_factory_picks_redis_when_redis_url_is_set(redis_url: str) -> None:
    cache = get_cache(Settings(project_settings_dict(REDIS_URL=redis_url, CACHE_BACKEND=None, CACHE_KEY_PREFIX="x:")))
    assert isinstance(cache, RedisCache)
    assert (cache.prefix, cache.retry_times, cache.backoff_max) == ("x:", 5, 8.0)
    memory = get_cache(Settings(project_settings_dict(REDIS_URL=redis_url, CACHE_BACKEND="memory")))
    assert isinstance(memory, MemoryCache) and memory.prefix == "mediacrawler:"
    redis = CacheFactory.get_cache(Settings(project_settings_dict(REDIS_URL=redis_url)), cache_type="redis")
    assert isinstance(redis, RedisCache)


@pytest.mark.parametrize(
    "settings",
    [{"CACHE_BACKEND": "redis"}, {"CACHE_BACKEND": "memcached"}, {"CACHE_BACKEND": "builtins.dict"}],
)
def test_factory_misconfigured(settings: dict[str, str]) -> None:
    with pytest.raises(NotConfigured):
        get_cache(Settings(settings))


# --- Memory backend: sweeping on an injected clock --------------------------------------------------------------
def test_memory_sweeps_expired_keys() -> None:
    clock = Clock()
    cache = MemoryCache(clock=clock)
    for i in range(5000):
        cache.set(f"k{i}", "v", ttl=1)
    cache.set("permanent", "v")
    assert len(cache) == 5001
    clock.advance(1.0)
    assert len(cache) == 1


def test_memory_set_is_bounded_by_live_entries() -> None:
    clock = Clock()
    cache = MemoryCache(clock=clock)
    for second in range(100):  # 100 entries a second for 100 s, each living 10 s
        for i in range(100):
            cache.add_if_absent("d", f"{second}-{i}", ttl=10)
        clock.advance(1.0)
    entries = cache._values[cache.key("d")]
    assert cache.scard("d") == 900  # added at t=91..99 (t=90's reached their deadline at t=100, now)
    assert len(entries.deadlines) == len(entries.heap) == 900  # type: ignore[union-attr]
    clock.advance(10.0)
    assert len(cache) == 0


def test_memory_renewed_ttls_do_not_grow_the_heap() -> None:
    clock = Clock()
    cache = MemoryCache(clock=clock)
    cache.set("session:1", "{}", ttl=300)
    for _ in range(10_000):
        clock.advance(0.01)
        cache.expire("session:1", 300)
    assert len(cache._key_heap) < 200
    assert cache.ttl("session:1") == pytest.approx(300)


def test_memory_entry_expiry_on_injected_clock() -> None:
    clock = Clock()
    cache = MemoryCache(clock=clock)
    assert cache.add_if_absent("d", "a", ttl=10)
    clock.advance(5)
    assert cache.add_if_absent("d", "b", ttl=10)
    assert not cache.add_if_absent("d", "a", ttl=10)
    clock.advance(5)  # exactly a's deadline: gone
    assert not cache.sismember("d", "a")
    assert cache.sismember("d", "b")
    assert cache.ttl("d") == pytest.approx(5)
    clock.advance(5)
    assert not cache.exists("d")


# --- Redis backend ---------------------------------------------------------------------------------------------
def test_redis_stores_namespaced_sorted_sets(redis_url: str) -> None:
    cache = RedisCache(redis_url, prefix="mediacrawler:")
    cache.sadd("dedup:weibo", "1", ttl=60)
    cache.set("session:x", "{}", ttl=300)
    raw = redis_py.Redis.from_url(redis_url)
    assert set(raw.keys("*")) == {b"mediacrawler:dedup:weibo", b"mediacrawler:session:x"}
    assert raw.type("mediacrawler:dedup:weibo") == b"zset"
    assert 59_000 < raw.pttl("mediacrawler:dedup:weibo") <= 60_001
    raw.close()


def test_redis_one_client_per_url(redis_url: str) -> None:
    first, second = RedisCache(redis_url), RedisCache(redis_url, prefix="other:")
    assert first.client is second.client is get_redis(redis_url)


def test_mask_url() -> None:
    assert mask_url("redis://:s3cret@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert mask_url("redis://user:s3cret@redis.internal/1") == "redis://user:***@redis.internal/1"
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def _record_messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mediacrawler.cache.redis" and r.levelno == level]


def test_redis_outage_is_retried_and_logged_once(
    redis_server_factory: Callable[[], RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    cache = RedisCache(server.url, retry_times=6, backoff_base=0.2, backoff_max=0.5)
    cache.set("k", "v")
    server.stop()
    caplog.set_level(logging.INFO, logger="mediacrawler.cache.redis")
    restarter = threading.Timer(1.0, server.start)
    restarter.start()
    try:
        started = time.monotonic()
        assert cache.add_if_absent("d", "1", ttl=60) is True  # waits through the outage, then succeeds
        assert time.monotonic() - started >= 0.9
    finally:
        restarter.join()
    assert cache.get("k") is None  # the restarted server kept nothing (--save '')
    warnings = _record_messages(caplog, logging.WARNING)
    assert len(warnings) == 1
    assert f"cache: Redis at {server.url} unreachable" in warnings[0] and "retrying in 0.2s" in warnings[0]
    infos = _record_messages(caplog, logging.INFO)
    assert len(infos) == 1 and "reachable again" in infos[0]


def test_redis_unavailable_after_budget_then_fails_fast(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"  # nothing listens there
    cache = RedisCache(url, retry_times=2, backoff_base=0.1, backoff_max=0.2)
    caplog.set_level(logging.DEBUG, logger="mediacrawler.cache.redis")
    started = time.monotonic()
    with pytest.raises(CacheUnavailable, match=r"redis://:\*\*\*@127\.0\.0\.1"):
        cache.get("k")
    assert time.monotonic() - started >= 0.3  # slept 0.1 + 0.2
    started = time.monotonic()
    with pytest.raises(CacheUnavailable):
        cache.sismember("d", "1")  # same outage: one attempt, no back-off
    assert time.monotonic() - started < 0.3
    assert len(_record_messages(caplog, logging.WARNING)) == 1
    assert "s3cret" not in caplog.text


def test_redis_fork_gets_fresh_pools(redis_url: str) -> None:
    import multiprocessing

    parent = get_redis(redis_url)
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[bool] = ctx.Queue()

    def child() -> None:
        client = get_redis(redis_url)
        queue.put(client is not parent and client.ping())

    process = ctx.Process(target=child)
    process.start()
    process.join(timeout=30)
    assert queue.get(timeout=5) is True
    assert get_redis(redis_url) is parent
