"""Four processes add the same 1,000 ids to one Redis dedupe set at once: each id is accepted exactly once."""

from __future__ import annotations

import multiprocessing
import random
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

from mediacrawler.cache.redis import RedisCache

WORKERS = 4
IDS = [str(1_000_000 + i) for i in range(1000)]


def _add_all(url: str, seed: int, barrier: Barrier, results: Queue[tuple[int, list[str]]]) -> None:
    cache = RedisCache(url, prefix="concurrency:")
    order = IDS[:]
    random.Random(seed).shuffle(order)  # each worker races on the ids in its own order
    barrier.wait(timeout=30)
    results.put((seed, [post_id for post_id in order if cache.add_if_absent("dedup:weibo", post_id, ttl=600)]))


def test_four_processes_accept_each_id_once(redis_url: str) -> None:
    # The parent uses the shared pool first, so the forked children must each build their own.
    parent = RedisCache(redis_url, prefix="concurrency:")
    assert parent.scard("dedup:weibo") == 0
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(WORKERS)
    queue: Queue[tuple[int, list[str]]] = ctx.Queue()
    workers = [ctx.Process(target=_add_all, args=(redis_url, seed, barrier, queue)) for seed in range(WORKERS)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=60)[1] for _ in workers]  # drain before join: a full pipe blocks the child
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    accepted = [post_id for part in results for post_id in part]
    assert len(accepted) == len(IDS)
    assert sorted(accepted) == sorted(IDS)
    assert all(part for part in results), "every worker should have won some ids (they ran concurrently)"
    assert parent.scard("dedup:weibo") == len(IDS)
