"""The daily loop as one consistent state per job (issue #20): the checkpoint and the high-water mark never
disagree, an explicit ``-a start`` is honoured, and a requested item of a list is never silently dropped.

Real ``scrapy crawl`` subprocesses against the sandbox over HTTP on 127.0.0.1; checkpoints and marks in files, in a
real redis-server, or with the target given by ``WEIBO_TARGETS`` instead of ``-a uid``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from tests.sync_crawls import control, crawl_command, listing_requests, records, run
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES, PER_PAGE = 3, 10

sb = weibo_sandbox(UID, PAGES, PER_PAGE)


def crawl(sb: SandboxProcess, workdir: Path, name: str, mode: str, *args: str,
          redis_url: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """One crawl of the job (records, log); ``mode`` says how the target and the state stores are given."""
    target = (("-s", f"WEIBO_TARGETS={json.dumps([f'uid:{UID}'])}") if mode == "targets"
              else ("-a", f"uid={UID}"))
    if mode == "redis":
        args = (*args, "-s", "CHECKPOINT_BACKEND=redis")
    code, log = run(crawl_command("weibo", sb, workdir, *target, "-s", "MEDIA_ENABLED=0", *args, run=name),
                    workdir, name=name, redis_url=redis_url)
    assert code == 0, log[-3000:]
    return records(workdir / name / "weibo" / f"{KEY}.jsonl"), log


def pages_since(sb: SandboxProcess, before: int) -> list[int]:
    return [page for _, page in listing_requests(sb)[before:]]


@pytest.mark.parametrize("mode", ["file", "redis", "targets"])
def test_daily_loop_always_starts_at_page_1_and_emits_only_new_posts(
        tmp_path: Path, sb: SandboxProcess, mode: str, request: pytest.FixtureRequest) -> None:
    sb.reset()
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    redis_url: str | None = request.getfixturevalue("redis_url") if mode == "redis" else None
    checkpoint = tmp_path / "checkpoints" / f"{KEY}.json"

    def no_checkpoint_left() -> None:
        assert not checkpoint.exists(), checkpoint.read_text()
        if redis_url:
            assert redis.Redis.from_url(redis_url).keys(f"mediacrawler:checkpoint:{KEY}*") == []

    first, _ = crawl(sb, tmp_path, "run1", mode, redis_url=redis_url)
    assert sorted(r["post_id"] for r in first) == sorted(p.id for p in world.timeline(UID))
    assert pages_since(sb, 0) == [1, 2, 3, 4]  # page 4: the end-of-list answer
    no_checkpoint_left()

    new_ids = control(sb, "weibo/publish", {"uid": UID, "count": 3})["ids"]
    before = len(listing_requests(sb))
    second, log = crawl(sb, tmp_path, "run2", mode, redis_url=redis_url)
    assert sorted(r["post_id"] for r in second) == sorted(new_ids)
    assert pages_since(sb, before) == [1, 2]  # page 2 is all at or below the mark
    assert "resuming at page" not in log
    no_checkpoint_left()

    for name in ("run3", "run4"):  # nothing new: page 1 only, every time, never a page past it
        before = len(listing_requests(sb))
        again, log = crawl(sb, tmp_path, name, mode, redis_url=redis_url)
        assert again == []
        assert pages_since(sb, before) == [1]
        assert "resuming at page" not in log and "page 1 is all at or below the high-water mark" in log
        no_checkpoint_left()


def test_explicit_start_is_honoured_after_a_complete_run(tmp_path: Path, sb: SandboxProcess) -> None:
    sb.reset()
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    timeline = [p.id for p in world.timeline(UID)]
    crawl(sb, tmp_path, "run1", "file")

    before = len(listing_requests(sb))
    rows, log = crawl(sb, tmp_path, "run2", "file", "-a", "start=3")
    assert sorted(r["post_id"] for r in rows) == sorted(timeline[2 * PER_PAGE:])  # page 3 on
    assert pages_since(sb, before) == [3, 4]
    assert f"{KEY}: -a start=3: the high-water mark (post {timeline[0]}) does not apply to an explicit start" in log

    # Both asked for: the mark applies from the explicit start on, and the log says so.
    before = len(listing_requests(sb))
    rows, log = crawl(sb, tmp_path, "run3", "file", "-a", "start=2", "-a", "incremental=true")
    assert rows == [] and pages_since(sb, before) == [2]
    assert f"{KEY}: -a start=2 -a incremental=true: stopping at the high-water mark" in log


# --- Lists of requested items: each is emitted or reported, never dropped silently -----------------------------

def list_crawl(tmp_path: Path, sandbox: Any, spider: str, name: str, *args: str,
               redis_url: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """``scrapy crawl <spider>`` of a list against the session sandbox (media off); (records, log)."""
    import subprocess
    import sys

    from tests.sync_crawls import ROOT

    out = tmp_path / f"{name}.jsonl"
    root = sandbox.url
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider, *args,
           "-s", f"BILIBILI_API_URL={root}/bilibili", "-s", f"DOUYIN_SHARE_URL={root}/douyin",
           "-s", f"DOUYIN_WEB_URL={root}/douyin", "-s", f"DOUYIN_SHORT_URL={root}/douyin/v",
           "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "MEDIA_ENABLED=0",
           "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", "LOG_LEVEL=INFO", "-s", "DISTRIBUTED_ENABLED=0", "-O", str(out)]
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DOUYIN_COOKIE", "CACHE_BACKEND")}
    if redis_url:
        env["REDIS_URL"] = redis_url  # the dedupe cache in Redis: it outlives the run
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return records(out), proc.stderr


@pytest.mark.parametrize("cache", ["memory", "redis"])
def test_a_list_run_twice_emits_or_reports_every_item(tmp_path: Path, sandbox: Any, cache: str,
                                                       request: pytest.FixtureRequest) -> None:
    from mediacrawler_sandbox.bilibili import BVIDS

    sandbox.reset()
    sandbox.set_faults(bilibili_wbi="all")
    redis_url = request.getfixturevalue("redis_url") if cache == "redis" else None
    if redis_url:
        redis.Redis.from_url(redis_url).flushdb()
    first_id, second_id = BVIDS[0], BVIDS[1]
    ids = f"bvid={first_id},{second_id}"
    rows, log = list_crawl(tmp_path, sandbox, "bilibili", "run1", "-a", ids, redis_url=redis_url)
    assert sorted(r["post_id"] for r in rows) == sorted([first_id, second_id])

    rows, log = list_crawl(tmp_path, sandbox, "bilibili", "run2", "-a", ids, redis_url=redis_url)
    emitted = {r["post_id"] for r in rows}
    reported = {i for i in (first_id, second_id) if f"bilibili {i} is already stored" in log}
    assert emitted | reported == {first_id, second_id} and not emitted & reported
    assert emitted == ({first_id, second_id} if cache == "memory" else set())  # a memory cache dies with a run
    assert "a list of items: every item is read" in log


@pytest.mark.parametrize("order", ["id first", "short link first"])
def test_a_douyin_short_link_and_its_id_in_one_list_give_one_post_and_a_line(
        tmp_path: Path, sandbox: Any, order: str) -> None:
    from mediacrawler_sandbox import douyin

    sandbox.reset()
    video = douyin.VIDEO_AWEMES[0]
    [code] = [c for c, aweme in douyin.SHORT_LINKS.items() if aweme == video]
    entries = [video, f"https://v.douyin.com/{code}/"]
    if order != "id first":
        entries.reverse()
    rows, log = list_crawl(tmp_path, sandbox, "douyin", "run", "-a", f"aweme={','.join(entries)}")
    assert [r["post_id"] for r in rows] == [video]
    first, second = (video, f"short link {code}") if order == "id first" else (f"short link {code}", video)
    assert f"{second} names the same video as {first} (aweme {video}); one post" in log
    assert "failed for good" not in log
