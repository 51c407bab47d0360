"""Targets from settings: ``scrapy crawl weibo -a start=3`` with WEIBO_TARGETS crawls from page 3 of each target,
each its own job (output file, checkpoint); with no target and no REDIS_URL one line says every way to give one
(exit 2); with REDIS_URL and no target the crawl is still a worker. Real subprocesses against a sandbox."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediacrawler.parsers._common import job_slug
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox
from mediacrawler_sandbox.world import build_world
from tests.sync_crawls import crawl_command, listing_requests, records, run

pytestmark = pytest.mark.slow

UIDS = (7365120894, 1669879400)
PAGES, PER_PAGE = 4, 5
KEYWORD = "猫"


@pytest.fixture(scope="module")
def sb() -> Iterator[SandboxProcess]:
    with start_sandbox(weibo_users=UIDS, weibo_pages=PAGES, weibo_per_page=PER_PAGE, startup_timeout=30) as proc:
        yield proc


def test_start_3_crawls_from_page_3_of_every_configured_target(tmp_path: Path, sb: SandboxProcess) -> None:
    sb.reset()
    world = build_world(weibo_users=UIDS, weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    targets = [f"uid:{UIDS[0]}", f"uid:{UIDS[1]}", f"keyword:{KEYWORD}"]
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", "start=3", "-s", "MEDIA_ENABLED=0",
                                  "-s", f"WEIBO_TARGETS={json.dumps(targets, ensure_ascii=False)}"), tmp_path)
    assert code == 0, log[-3000:]

    pages: dict[str, list[int]] = {}
    for containerid, page in listing_requests(sb):
        pages.setdefault(containerid, []).append(page)
    search = f"100103type=1&q={KEYWORD}"
    assert {k: sorted(v) for k, v in pages.items()} == {
        f"107603{UIDS[0]}": [3, 4, 5],  # 3 and 4 hold posts, 5 is the end-of-list answer
        f"107603{UIDS[1]}": [3, 4, 5],
        search: [3, 4],  # 3 search pages: 4 is the end
    }

    out = tmp_path / "run" / "weibo"
    for uid in UIDS:
        got = [r["post_id"] for r in records(out / f"weibo-uid-{uid}.jsonl")]
        assert sorted(got) == sorted(p.id for n in (3, 4) for p in world.page(uid, n))
        assert not (tmp_path / "checkpoints" / f"weibo-uid-{uid}.json").exists()  # each job completed
    key = f"weibo-keyword-{job_slug(KEYWORD)}"
    got = [r["post_id"] for r in records(out / f"{key}.jsonl")]
    assert sorted(got) == sorted(p.id for p in world.search_page(KEYWORD, 3))
    # Started past page 1: no high-water mark may claim the pages before it.
    assert not list((tmp_path / "checkpoints").glob("marks/*.json"))


def test_targets_from_the_environment_are_crawled(tmp_path: Path, sb: SandboxProcess,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sb.reset()
    monkeypatch.setenv("WEIBO_TARGETS", f"uid:{UIDS[0]},uid:{UIDS[1]}")  # as the error message spells it
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", "start=4", "-s", "MEDIA_ENABLED=0"), tmp_path)
    assert code == 0, log[-3000:]
    assert sorted(listing_requests(sb)) == sorted((f"107603{uid}", page) for uid in UIDS for page in (4, 5))
    world = build_world(weibo_users=UIDS, weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    for uid in UIDS:
        got = [r["post_id"] for r in records(tmp_path / "run" / "weibo" / f"weibo-uid-{uid}.jsonl")]
        assert sorted(got) == sorted(p.id for p in world.page(uid, 4))

    # -s wins over the environment.
    sb.reset()
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", "start=4", "-s", "MEDIA_ENABLED=0",
                                  "-s", f"WEIBO_TARGETS=uid:{UIDS[1]}", run="run2"), tmp_path, name="run2")
    assert code == 0, log[-3000:]
    assert listing_requests(sb) == [(f"107603{UIDS[1]}", 4), (f"107603{UIDS[1]}", 5)]


def test_an_explicit_target_wins_over_the_setting(tmp_path: Path, sb: SandboxProcess) -> None:
    sb.reset()
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UIDS[1]}", "-a", "start=4",
                                  "-s", "MEDIA_ENABLED=0", "-s", f"WEIBO_TARGETS=uid:{UIDS[0]}"), tmp_path)
    assert code == 0, log[-3000:]
    assert listing_requests(sb) == [(f"107603{UIDS[1]}", 4), (f"107603{UIDS[1]}", 5)]


@pytest.mark.parametrize(
    ("targets", "needles"),
    [
        ("", ["exactly one of", "WEIBO_TARGETS", "REDIS_URL"]),
        ("uid:abc", ["uid='abc'", "WEIBO_TARGETS"]),
        ("user:1", ["WEIBO_TARGETS entry 'user:1'", "keyword, post, search_type, uid"]),
    ],
)
def test_no_usable_target_exits_2_with_one_line(tmp_path: Path, sb: SandboxProcess, targets: str,
                                               needles: list[str]) -> None:
    sb.reset()
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", "start=3", "-s", f"WEIBO_TARGETS={targets}"),
                    tmp_path, timeout=60)
    assert code == 2, log
    lines = log.strip().splitlines()
    assert len(lines) == 1 and all(n in lines[0] for n in needles), log
    assert listing_requests(sb) == []


def test_with_redis_and_no_target_the_crawl_is_a_worker(tmp_path: Path, sb: SandboxProcess,
                                                        redis_url: str) -> None:
    sb.reset()
    code, log = run(crawl_command("weibo", sb, tmp_path, "-s", "MEDIA_ENABLED=0",
                                  "-s", "DISTRIBUTED_IDLE_CLOSE=1", "-s", "DISTRIBUTED_JOB_POLL=0.2"),
                    tmp_path, redis_url=redis_url, timeout=60)
    assert code == 0, log[-3000:]
    assert "worker mode" in log and "no job for" in log
    assert listing_requests(sb) == []



