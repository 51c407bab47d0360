"""End to end: `scrapy crawl weibo` as a user runs it, against the sandbox subprocess over real HTTP.

Expectations come from the sandbox's pure world model (same seed, same world), never from the crawler itself.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from mediacrawler.parsers._common import html_to_text
from mediacrawler_sandbox.media_site import _WEIBO_QUALITY_RENDITION
from mediacrawler_sandbox.video import video_file
from mediacrawler_sandbox.weibo import build_weibo_world

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894
CANARY = "SUB=canary-0123456789abcdef0123456789"


def crawl(tmp_path: Path, base_url: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
          media: bool = False) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run `scrapy crawl weibo` in a subprocess (cwd = the project, like a user) and read its JSON Lines."""
    out = tmp_path / "out.jsonl"
    cmd = [
        sys.executable, "-m", "scrapy", "crawl", "weibo", *args,
        "-s", f"WEIBO_BASE_URL={base_url}", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
        "-s", f"MEDIA_ENABLED={int(media)}", "-s", f"FILES_STORE={tmp_path / 'files'}",
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
        # Each picture, and a video with its cover (the page_pic the sandbox serves), marked as the cover.
        assert len(rec["media"]) == len(post.pics) + (2 if post.video else 0)
        if post.video:
            assert [a["cover_of"] for a in rec["media"][-2:]] == [None, f"weibo:video:{post.video.object_id}"]
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
    assert "login required: WEIBO_COOKIE is not set" in log
    # The last line a user reads names the variable to set (not only the reason).
    assert "WEIBO_COOKIE is not set" in proc.stderr.strip().splitlines()[-1]
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


# Video URLs that expire mid-download: small segments so that one video takes several requests, and a sandbox
# whose signed URLs serve two GETs each.
EXPIRING = ("-s", "MEDIA_SEGMENT_THRESHOLD=32768", "-s", "MEDIA_SEGMENT_SIZE=32768",
            "-s", "MEDIA_SEGMENT_CONCURRENCY=2")


def video_requests(sandbox: Any) -> list[dict[str, Any]]:
    return [r for r in sandbox.requests() if r["path"].startswith("/media/weibo/video/")]


def show_requests(sandbox: Any) -> list[dict[str, Any]]:
    return [r for r in sandbox.requests() if r["path"].endswith("/statuses/show")]


def sandbox_video_sha256(path: str) -> str:
    match = re.fullmatch(r"/media/weibo/video/(\d+)_(720|hd|sd)\.mp4", path)
    assert match, path
    found = video_file(["progressive", match.group(1), f"{_WEIBO_QUALITY_RENDITION[match.group(2)]}.mp4"])
    assert found is not None
    return hashlib.sha256(found[0]).hexdigest()


@pytest.mark.slow
def test_an_expired_video_url_is_refreshed_from_its_post(sandbox: Any, tmp_path: Path) -> None:
    sandbox.reset()
    sandbox.set_faults(weibo_video_url_uses=2)
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}", "-a", "max_pages=1", *EXPIRING,
                          env={"WEIBO_COOKIE": CANARY}, media=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    videos = [(r, m) for r in records for m in r["media"] if m["kind"] == "video"]
    assert videos and all(m["status"] == "downloaded" for _, m in videos), videos
    fetched = video_requests(sandbox)
    # Every video took more than two requests, so every one of them outlived its first URL exactly once: a 403,
    # one /statuses/show of its post, then the remaining segments under the fresh signature (none fetched twice).
    assert [r["status"] for r in fetched].count(403) == len(videos)
    shows = show_requests(sandbox)
    assert sorted(parse_qs(r["query"])["id"][0] for r in shows) == sorted(r["post_id"] for r, _ in videos)
    assert all(r["cookie"] for r in shows) and not any(r["cookie"] for r in fetched)  # an API call, like the rest
    for _, asset in videos:
        served = [r for r in fetched if r["status"] == 206]
        path = urlsplit(asset["url"]).path
        assert {parse_qs(r["query"])["ssig"][0] for r in served if r["path"] == path} == {"1", "2"}
        assert sum(r["bytes"] for r in served if r["path"] == path) == asset["size"]
        stored = tmp_path / "files" / asset["path"]
        assert hashlib.sha256(stored.read_bytes()).hexdigest() == asset["sha256"] == sandbox_video_sha256(path)
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert f"'weibo/media_refresh/resolved': {len(videos)}" in log
    assert CANARY.split("=", 1)[1] not in log


@pytest.mark.slow
@pytest.mark.parametrize("fault", [{"kind": "5xx", "endpoint": "show", "status": 503},
                                   {"kind": "login", "endpoint": "show"}])  # one post behind a login wall
def test_a_video_whose_post_cannot_be_read_again_fails_alone(sandbox: Any, tmp_path: Path,
                                                              fault: dict[str, Any]) -> None:
    sandbox.reset()
    sandbox.set_faults(weibo_video_url_uses=2, weibo_api=[fault])
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}", "-a", "max_pages=1", *EXPIRING,
                          media=True)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the asset fails; the crawl, its records and pictures do not
    assert len(records) == 10
    videos = [m for r in records for m in r["media"] if m["kind"] == "video"]
    assert videos and all(m["status"] == "failed" and "403" in m["error"] for m in videos), videos
    images = [m for r in records for m in r["media"] if m["kind"] == "image"]
    assert images and all(m["status"] in ("downloaded", "deduplicated") for m in images)
    assert show_requests(sandbox)
    assert not list((tmp_path / "files").glob("objects/**/*.mp4"))
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert "could not read post" in log and "'weibo/media_refresh/failed'" in log
    assert "'finish_reason': 'finished'" in log


def test_a_wrong_api_root_names_the_status_the_url_and_the_setting(sandbox: Any, tmp_path: Path) -> None:
    sandbox.reset()
    wrong = f"{sandbox.url}/not-weibo"
    proc, records = crawl(tmp_path, wrong, "-a", f"uid={UID}")
    assert proc.returncode == 1 and not records and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert f"HTTP 404 from {wrong}/api/container/getIndex?containerid=107603{UID}&page=1" in last
    assert f"check WEIBO_BASE_URL (the platform's root, now {wrong})" in last
    # Running the same command again cannot help: the line says to fix the setting first.
    assert "fix that, then run the same command again" in last and "to fetch them" not in last
    log = (tmp_path / "crawl.log").read_text(encoding="utf-8")
    assert "Ignoring non-200 response" not in log and "page 1 failed for good: HTTP 404 from" in log


def test_a_server_error_page_says_its_status_and_that_a_rerun_fetches_it(sandbox: Any, tmp_path: Path) -> None:
    sandbox.reset()
    sandbox.set_faults(weibo_api=[{"kind": "5xx", "status": 500, "page": 2}])
    proc, _ = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}", "-s", "RETRY_TIMES=1")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "page 2: HTTP 500 from" in last and "&page=2" in last and "run the same command again to fetch them" in last


def test_dash_capital_o_posts_csv_writes_flat_columns_with_library_paths(sandbox: Any, tmp_path: Path) -> None:
    """``-O posts.csv`` (our csv exporter): one flat row per post that the csv module reads back with the values of
    the JSON record, the media as paths in the library (hard links to the stored objects)."""
    sandbox.reset()
    out = tmp_path / "posts.csv"
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={UID}", "-a", "max_pages=1", "-O", str(out),
                          media=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    raw = out.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
    assert records and [r["post_id"] for r in rows] == [r["post_id"] for r in records]
    library = tmp_path / "library"
    for row, record in zip(rows, records):
        assert (row["author_id"], row["author_name"]) == (record["author"]["id"], record["author"]["name"])
        assert row["text"] == record["text"] and row["created_at"] == record["created_at"]
        assert row["likes"] == str(record["metrics"]["likes"]) and row["url"] == record["url"]
        stored = [m for m in record["media"] if m["sha256"]]
        paths = [p for p in row["media_paths"].split("|") if p]
        assert int(row["media_count"]) == len(record["media"]) and len(paths) == len(stored)
        for path, asset in zip(paths, stored):
            assert (library / path).stat().st_ino == (tmp_path / "files" / asset["path"]).stat().st_ino
