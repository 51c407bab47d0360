"""End to end: `scrapy crawl weibo` as a user runs it, against the sandbox subprocess over real HTTP.

Expectations come from the sandbox's pure world model (same seed, same world), never from the crawler itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from mediacrawler.parsers._common import html_to_text
from mediacrawler.sandbox.weibo import build_weibo_world

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894
CANARY = "SUB=canary-0123456789abcdef0123456789"


def crawl(tmp_path: Path, base_url: str, *args: str, env: dict[str, str] | None = None,
          timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run `scrapy crawl weibo` in a subprocess (cwd = the project, like a user) and read its JSON Lines."""
    out = tmp_path / "out.jsonl"
    cmd = [
        sys.executable, "-m", "scrapy", "crawl", "weibo", *args,
        "-s", f"WEIBO_BASE_URL={base_url}", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
        "-s", "MEDIA_ENABLED=0", "-s", f"FILES_STORE={tmp_path / 'files'}",
        "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}", "-s", "PLATFORM_BACKOFF_BASE=0.05",
        "-s", "PLATFORM_BACKOFF_MAX=0.5", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-O", str(out),
    ]
    full_env = {k: v for k, v in os.environ.items() if k != "WEIBO_COOKIE"}
    full_env.update(env or {})
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] if out.exists() else []
    return proc, records


def index_requests(sandbox: Any) -> list[dict[str, Any]]:
    return [r for r in sandbox.requests() if r["path"].endswith("/api/container/getIndex")]


def page_of(req: dict[str, Any]) -> int:
    return int(parse_qs(req["query"])["page"][0])


@pytest.fixture(scope="module")
def world():  # type: ignore[no-untyped-def]
    return build_weibo_world(seed=1, users=(7365120894, 1669879400), pages=5, per_page=10)


def test_timeline_gives_exactly_the_expected_posts(sandbox: Any, world: Any, tmp_path: Path) -> None:
    sandbox.reset()
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = world.timeline(UID)
    assert [r["post_id"] for r in sorted(records, key=lambda r: r["post_id"], reverse=True)] == sorted(
        (p.id for p in expected), reverse=True)
    assert len(records) == len({r["post_id"] for r in records}) == len(expected) == 50
    by_id = {r["post_id"]: r for r in records}
    for post in expected:
        rec = by_id[post.id]
        assert rec["platform"] == "weibo"
        assert rec["url"] == f"https://weibo.com/{UID}/{post.bid}"
        assert rec["author"]["id"] == str(UID)
        assert rec["created_at"].endswith("Z") and rec["created_at"] == post.created_at.astimezone(
            __import__("datetime").timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for name, raw in (("likes", post.attitudes_count), ("comments", post.comments_count),
                          ("shares", post.reposts_count)):
            # The sandbox writes counts as Weibo does: 1234, "1万+", "12.6万".
            want = raw if isinstance(raw, int) else round(float(raw.rstrip("+").removesuffix("万")) * 10_000)
            assert rec["metrics"][name] == want, (post.id, name, raw, rec["metrics"])
        assert rec["metrics"]["views"] == (12_000 if post.video else None)  # the sandbox's "1.2万次播放"
        if post.is_long_text:  # expanded through /statuses/extend
            assert rec["extra"]["long_text"] == "expanded"
            assert rec["text"] == html_to_text(post.text)
        if post.retweeted_id:  # linked to its original, which may be deleted
            original = world.posts[post.retweeted_id]
            assert rec["reposted"]["post_id"] == original.id
            assert rec["reposted"]["deleted"] is bool(getattr(original, "deleted", False))
            if rec["reposted"]["deleted"]:
                assert rec["reposted"]["author"] is None
        else:
            assert rec["reposted"] is None
        assert len(rec["media"]) == len(post.pics) + (1 if post.video else 0)
    assert any(p.is_long_text for p in expected) and any(p.retweeted_id for p in expected)
    # The end came from the platform's own signal: one request past the last page, answered end-of-list.
    pages = sorted(page_of(r) for r in index_requests(sandbox))
    assert pages == [1, 2, 3, 4, 5, 6]
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert "last page reached (page 6)" in log
    # No code-execution endpoint in a process that holds the user's cookies (Scrapy 2.19 enables one by default).
    assert "remote_control" not in log and "Remote control" not in log


def test_start_skips_earlier_pages(sandbox: Any, world: Any, tmp_path: Path) -> None:
    sandbox.reset()
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}", "-a", "start=3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    pages = [page_of(r) for r in index_requests(sandbox)]
    assert pages[0] == 3 and 1 not in pages and 2 not in pages
    expected = {p.id for p in world.timeline(UID)[20:]}
    assert {r["post_id"] for r in records} == expected
    assert {r["source"]["page"] for r in records} == {3, 4, 5}


def test_max_pages_bounds_the_run(sandbox: Any, tmp_path: Path) -> None:
    sandbox.reset()
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}", "-a", "max_pages=2")
    assert proc.returncode == 0
    assert sorted(page_of(r) for r in index_requests(sandbox)) == [1, 2]
    assert len(records) == 20


def test_keyword_search(sandbox: Any, tmp_path: Path) -> None:
    sandbox.reset()
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", "keyword=猫")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert records and len(records) == len({r["post_id"] for r in records})
    assert all(r["source"]["job"].startswith("weibo-keyword-") for r in records)
    queries = [parse_qs(r["query"]) for r in index_requests(sandbox)]
    assert all(q["containerid"] == ["100103type=1&q=猫"] and q["page_type"] == ["searchall"] for q in queries)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-a", "uid=abc"], "uid='abc'"),
        (["-a", f"uid={UID}", "-a", "start=0"], "start='0'"),
        ([], "exactly one of"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(sandbox: Any, tmp_path: Path, args: list[str], needle: str) -> None:
    sandbox.reset()
    proc, _ = crawl(tmp_path, sandbox.weibo_url, *args, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    assert index_requests(sandbox) == []


def test_rate_limited_pages_are_retried_and_the_crawl_completes(sandbox: Any, world: Any, tmp_path: Path) -> None:
    sandbox.reset()
    sandbox.set_faults(weibo_api=[
        {"kind": "errno", "page": 2, "times": 2},
        {"kind": "418", "page": 3, "times": 1},
        {"kind": "432", "page": 4, "times": 1},
        {"kind": "429", "page": 5, "times": 1},
    ])
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {r["post_id"] for r in records} == {p.id for p in world.timeline(UID)}
    statuses = [(page_of(r), r["status"]) for r in index_requests(sandbox)]
    assert statuses.count((2, 200)) == 3  # two rate-limit envelopes (200 + errno), then the page
    assert (3, 418) in statuses and (4, 432) in statuses and (5, 429) in statuses
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert "rate limited" in log


def test_login_required_stops_cleanly_with_the_reason(sandbox: Any, world: Any, tmp_path: Path) -> None:
    sandbox.reset()
    sandbox.set_faults(weibo_api=[{"kind": "login", "page": 3}])
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}")
    assert proc.returncode == 1
    assert "login_required" in proc.stderr and "Traceback" not in proc.stderr
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert "login required: set WEIBO_COOKIE" in log
    assert "'finish_reason': 'login_required'" in log
    assert {r["post_id"] for r in records} == {p.id for p in world.timeline(UID)[:20]}
    assert max(page_of(r) for r in index_requests(sandbox)) == 3


def test_cookie_is_sent_to_the_api_only_and_never_written(sandbox: Any, tmp_path: Path) -> None:
    sandbox.reset()
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}", "-a", "max_pages=1",
                          "-s", "LOG_LEVEL=DEBUG", env={"WEIBO_COOKIE": CANARY})
    assert proc.returncode == 0
    api = index_requests(sandbox)
    assert api and all(r["cookie"] for r in api)
    secret = CANARY.split("=", 1)[1]
    for text in (proc.stdout, proc.stderr, (tmp_path / "crawl.log").read_text(encoding="utf-8"),
                 json.dumps(records, ensure_ascii=False)):
        assert secret not in text
