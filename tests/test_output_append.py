"""A re-run never makes an earlier output smaller (docs/operations.md, "Output files"): the daily loop (the same
``scrapy crawl`` three times, new posts published in between) leaves a default output file that only grows, each
run's new posts appended after the earlier ones; ``-o`` appends too, ``-O`` overwrites as the user asked. Real
subprocesses against a sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediacrawler_sandbox.process import SandboxProcess
from tests.sync_crawls import control, crawl_command, records, run
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES, PER_PAGE = 2, 5

sb = weibo_sandbox(UID, PAGES, PER_PAGE)


def crawl(sb: SandboxProcess, tmp_path: Path, name: str, *args: str) -> str:
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", "-s", "MEDIA_ENABLED=0", *args,
                                  run="out"), tmp_path, name=name)
    assert code == 0, log[-3000:]
    return log


def test_the_daily_loop_only_ever_grows_the_output(tmp_path: Path, sb: SandboxProcess) -> None:
    sb.reset()
    out = tmp_path / "out" / "weibo" / f"{KEY}.jsonl"
    seen: list[bytes] = []
    published: list[list[str]] = [[]]
    for day, new in enumerate((0, 2, 3)):
        if new:
            published.append(control(sb, "weibo/publish", {"uid": UID, "count": new})["ids"])
        crawl(sb, tmp_path, f"day{day}")
        now = out.read_bytes()
        if seen:
            assert now.startswith(seen[-1]), f"day {day} changed what day {day - 1} wrote"
        seen.append(now)
    ids = [r["post_id"] for r in records(out)]
    assert len(ids) == len(set(ids)) == PAGES * PER_PAGE + 2 + 3
    # Each day's new posts after the earlier days' records.
    assert set(ids[-3:]) == set(published[2]) and set(ids[-5:-3]) == set(published[1])


def test_o_appends_and_capital_o_overwrites(tmp_path: Path, sb: SandboxProcess) -> None:
    sb.reset()
    feed = tmp_path / "mine.jsonl"
    feed.write_text('{"post_id": "kept"}\n', "utf-8")
    crawl(sb, tmp_path, "o", "-o", f"{feed}:jsonlines")
    got = [r["post_id"] for r in records(feed)]
    assert got[0] == "kept" and len(got) == 1 + PAGES * PER_PAGE

    crawl(sb, tmp_path, "O", "-a", "full=true", "-s", "DEDUPE_ENABLED=0", "-O", f"{feed}:jsonlines")
    got = [r["post_id"] for r in records(feed)]
    assert "kept" not in got and len(got) == PAGES * PER_PAGE
