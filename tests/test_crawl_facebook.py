"""End to end: ``scrapy crawl facebook`` as a user runs it, against the sandbox's Graph API over real HTTP.

Expectations come from the sandbox's world model (mediacrawler_sandbox/facebook.py). The access token is a canary:
it must reach the Graph API (as ``Authorization: Bearer``) and nothing else: no log line at DEBUG, no record, no
checkpoint, no JOBDIR file, no feed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timezone
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediacrawler_sandbox.facebook import PAGE_ID, build_facebook_world
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CANARY = "EAAcanary0123456789abcdefCANARY"
KEY = f"facebook-page-{PAGE_ID}"


@pytest.fixture(scope="module")
def fb() -> Iterator[SandboxProcess]:
    with start_sandbox(startup_timeout=30) as proc:
        yield proc


@pytest.fixture
def sandbox(fb: SandboxProcess) -> SandboxProcess:
    fb.reset()
    fb.set_faults(facebook_token=CANARY)
    return fb


@pytest.fixture(scope="module")
def world() -> Any:
    return build_facebook_world()


def command(tmp_path: Path, sandbox: SandboxProcess, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "scrapy", "crawl", "facebook", *args,
        "-s", f"FACEBOOK_GRAPH_URL={sandbox.url}/facebook/v19.0", "-s", "FACEBOOK_PAGE_SIZE=4",
        "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", f"FILES_STORE={tmp_path / 'files'}",
        "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}", "-s", f"OUTPUT_DIR={tmp_path / 'output'}",
        "-s", "LOG_LEVEL=DEBUG", "-s", "PLATFORM_BACKOFF_BASE=0.05", "-s", "PLATFORM_BACKOFF_MAX=0.2",
    ]


def env(token: str = CANARY) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "REDIS_URL"}, "FACEBOOK_ACCESS_TOKEN": token}


def records(tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / "output" / "facebook" / f"{KEY}.jsonl"
    return [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []


def assert_canary_nowhere(tmp_path: Path, *texts: str) -> None:
    for text in texts:
        assert CANARY not in text
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix not in (".jpg", ".png", ".mp4", ".m4a"):
            assert CANARY.encode() not in path.read_bytes(), path


def test_a_page_of_three_graph_pages_gives_every_post_once_with_albums_and_videos(
        sandbox: SandboxProcess, world: Any, tmp_path: Path) -> None:
    proc = subprocess.run(command(tmp_path, sandbox, "-a", f"page={PAGE_ID}", "-s", f"JOBDIR={tmp_path / 'job'}",
                                  "-s", f"LOG_FILE={tmp_path / 'crawl.log'}"),
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=180)
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    found = records(tmp_path)
    expected = {p.id for p in world.posts(PAGE_ID)}
    assert len(expected) == 12
    assert Counter(r["post_id"] for r in found) == Counter({i: 1 for i in expected})
    by_kind: Counter[str] = Counter()
    for record in found:
        for asset in record["media"]:
            by_kind[asset["kind"]] += 1
            assert asset["status"] in ("downloaded", "deduplicated", "uptodate"), asset
            stored = tmp_path / "files" / asset["path"]
            assert hashlib.sha256(stored.read_bytes()).hexdigest() == asset["sha256"]
    albums = [r for r in found if sum(a["kind"] == "image" for a in r["media"]) == 3]
    assert len(albums) == 2  # posts 1 and 7: every photo of the album
    assert by_kind["video"] == 4  # two with a source in the post, two resolved through their video node
    assert sum(1 for r in found if r["extra"].get("link")) == 2
    paging = [r for r in sandbox.requests() if r["path"].endswith(f"/{PAGE_ID}/posts")]
    assert len(paging) == 3
    assert all(r["authorization"] for r in paging)  # the token went as a header, never in the URL
    assert not (tmp_path / "checkpoints" / f"{KEY}.json").exists()  # completed: cleared
    assert_canary_nowhere(tmp_path, proc.stdout, proc.stderr)


def test_an_invalid_token_stops_with_one_clear_line_and_never_shows_the_token(
        sandbox: SandboxProcess, tmp_path: Path) -> None:
    wrong = "EAAwrong0123456789wrongWRONG"
    proc = subprocess.run(command(tmp_path, sandbox, "-a", f"page={PAGE_ID}",
                                  "-s", f"LOG_FILE={tmp_path / 'crawl.log'}"),
                          cwd=ROOT, env=env(wrong), capture_output=True, text=True, timeout=120)
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 1
    assert "FACEBOOK_ACCESS_TOKEN was refused (invalid, expired" in log and "Traceback" not in proc.stderr
    assert "FACEBOOK_ACCESS_TOKEN was refused" in proc.stderr.strip().splitlines()[-1]
    assert wrong not in log and wrong not in proc.stderr and not records(tmp_path)


def test_a_missing_token_names_the_variable_in_the_final_line(sandbox: SandboxProcess, tmp_path: Path) -> None:
    no_token = {k: v for k, v in env().items() if k != "FACEBOOK_ACCESS_TOKEN"}
    proc = subprocess.run(command(tmp_path, sandbox, "-a", f"page={PAGE_ID}"), cwd=ROOT, env=no_token,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: facebook: stopped (login_required):") and "FACEBOOK_ACCESS_TOKEN is not set" in last
    assert not records(tmp_path)


def test_sigkill_after_the_second_page_resumes_from_the_stored_cursor(
        sandbox: SandboxProcess, world: Any, tmp_path: Path) -> None:
    sandbox.set_faults(facebook_latency_ms=400)  # pages slow enough to kill the crawl between two of them
    log1 = (tmp_path / "crawl-1.log").open("wb")
    first = subprocess.Popen(command(tmp_path, sandbox, "-a", f"page={PAGE_ID}", "-s", "MEDIA_ENABLED=0"),
                             cwd=ROOT, env=env(), stdout=log1, stderr=subprocess.STDOUT, start_new_session=True)
    checkpoint = tmp_path / "checkpoints" / f"{KEY}.json"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if checkpoint.exists() and json.loads(checkpoint.read_text("utf-8") or "{}").get("watermark", 0) >= 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the first crawl never stored two pages")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        log1.close()
    saved = json.loads(checkpoint.read_text("utf-8"))
    assert saved["next"]["cursor"]  # the opaque Graph cursor of page 3, and nothing secret
    sandbox.set_faults(facebook_latency_ms=0)
    before = len(sandbox.requests())
    second = subprocess.run(command(tmp_path, sandbox, "-a", f"page={PAGE_ID}", "-s", "MEDIA_ENABLED=0",
                                    "-s", f"LOG_FILE={tmp_path / 'crawl-2.log'}"),
                            cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = [r for r in sandbox.requests()[before:] if r["path"].endswith(f"/{PAGE_ID}/posts")]
    assert resumed and "after=" in resumed[0]["query"]  # not from the top: from the stored cursor
    expected = {p.id for p in world.posts(PAGE_ID)}
    assert Counter(r["post_id"] for r in records(tmp_path)) == Counter({i: 1 for i in expected})
    assert_canary_nowhere(tmp_path, second.stdout, second.stderr)


def test_one_video_by_id_is_stored(sandbox: SandboxProcess, world: Any, tmp_path: Path) -> None:
    video_id = sorted(world.videos)[0]
    proc = subprocess.run(command(tmp_path, sandbox, "-a", f"video={video_id}",
                                  "-s", f"LOG_FILE={tmp_path / 'crawl.log'}"),
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "output" / "facebook" / f"facebook-video-{video_id}.jsonl"
    [record] = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    asset, cover = record["media"]
    assert record["post_id"] == video_id and asset["kind"] == "video" and asset["status"] == "downloaded"
    # Its cover: the native format's picture, stored like any image and naming the video.
    assert cover["cover_of"] == f"video:{video_id}" and cover["status"] == "downloaded"
    assert cover["mime"] == "image/jpeg" and cover["width"] == 1280
    assert asset["duration"] and asset["mime"] == "video/mp4"
    # The record says where the video is, whose it is and when it was posted (the Graph fields of its node).
    [post] = [p for p in world.posts(PAGE_ID) if p.video is not None and p.video.id == video_id]
    assert record["url"] == f"https://www.facebook.com/{PAGE_ID}/videos/{video_id}/"
    assert record["author"] == {"id": PAGE_ID, "name": "Sandbox Page"}
    assert record["created_at"] == post.created.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert record["text"] == post.message
    [node] = [r for r in sandbox.requests() if r["path"].endswith(f"/{video_id}")]
    assert "permalink_url" in node["query"] and "created_time" in node["query"]
    assert_canary_nowhere(tmp_path, proc.stdout, proc.stderr)
