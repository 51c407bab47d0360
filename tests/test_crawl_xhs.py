"""End to end: ``scrapy crawl xhs`` as a user runs it, against the sandbox's XiaoHongShu pages over real HTTP.

Expectations come from the sandbox's world model (mediacrawler_sandbox/xhs.py). XHS_COOKIE is a canary: it must
reach the page requests and nothing else: no media request, log line at DEBUG, record, checkpoint or feed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import av
import pytest

from mediacrawler_sandbox import xhs

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CANARY = "web_session=040069canary0123456789xhs"
WORLD = xhs.build_xhs_world(seed=1)


@pytest.fixture
def sb(sandbox: Any) -> Any:
    sandbox.reset()
    return sandbox


def share_url(note: xhs.XhsNote) -> str:
    """A note URL as copied from the browser (the real host: the spider sends it to XHS_WEB_URL)."""
    return (f"https://www.xiaohongshu.com/explore/{note.id}?xsec_token={quote(note.xsec_token, safe='')}"
            "&xsec_source=pc_feed")


def crawl(tmp_path: Path, sandbox: Any, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]],
                                                              str]:
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "xhs", *args,
           "-s", f"XHS_WEB_URL={sandbox.url}/xhs", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
           "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", "LOG_LEVEL=DEBUG", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-s", "PLATFORM_BACKOFF_BASE=0.05",
           "-s", "PLATFORM_BACKOFF_MAX=0.2", "-s", "PLATFORM_RATE_LIMIT_RETRIES=2", "-O", str(out)]
    env = {**{k: v for k, v in os.environ.items() if k != "REDIS_URL"}, "XHS_COOKIE": CANARY}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []
    log = (tmp_path / "crawl.log").read_text("utf-8") if (tmp_path / "crawl.log").exists() else ""
    return proc, rows, log


def assert_canary_nowhere(tmp_path: Path, *texts: str) -> None:
    for text in texts:
        assert CANARY not in text and "040069canary" not in text
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix not in (".jpg", ".png", ".mp4", ".webp"):
            assert b"040069canary" not in path.read_bytes(), path


def assert_stored(tmp_path: Path, asset: dict[str, Any]) -> bytes:
    assert asset["status"] in ("downloaded", "deduplicated", "uptodate"), asset
    data = (tmp_path / "files" / asset["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == asset["sha256"] and len(data) == asset["size"]
    return data


def test_a_notes_file_gives_every_note_with_every_image_and_the_video_stored(sb: Any, tmp_path: Path) -> None:
    notes = WORLD.user_notes()
    lines = ["# copied from the browser", *(share_url(n) for n in notes), "",
             f"https://www.xiaohongshu.com/explore/{xhs.GONE_NOTE}?xsec_token=ABgone%3D&xsec_source=pc_search",
             share_url(notes[0])]  # the first note again: recorded once
    notes_file = tmp_path / "notes.txt"
    notes_file.write_text("\n".join(lines) + "\n", "utf-8")
    proc, rows, log = crawl(tmp_path, sb, "-a", f"notes_file={notes_file}", "-a", "max_height=480")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    by_id = {r["post_id"]: r for r in rows}
    assert Counter(r["post_id"] for r in rows) == Counter({n: 1 for n in [*WORLD.order, xhs.GONE_NOTE]})
    videos = 0
    for note in notes:
        record = by_id[note.id]
        assert not record["deleted"] and record["extra"]["title"] == note.title
        images = [a for a in record["media"] if a["kind"] == "image"]
        assert [a["url"].split("?")[0].rsplit("/", 1)[1] for a in images] == [f"{i.n}.jpg" for i in note.images]
        for asset in images:
            assert "sc=dft" in asset["url"]  # the default scene, not the preview
            assert_stored(tmp_path, asset)
        for asset in (a for a in record["media"] if a["kind"] == "video"):
            videos += 1
            data = assert_stored(tmp_path, asset)
            stored = tmp_path / "files" / asset["path"]
            with av.open(str(stored)) as container:
                assert container.streams.video[0].codec_context.height == 480
                assert container.streams.audio  # the progressive file keeps its audio
            assert data[4:8] == b"ftyp"
    assert videos == sum(1 for n in notes if n.kind == "video") == 2
    assert by_id[xhs.GONE_NOTE]["deleted"] and "-510001" in by_id[xhs.GONE_NOTE]["extra"]["unavailable"]
    pages = [r for r in sb.requests() if r["path"].startswith("/xhs/")]
    media = [r for r in sb.requests() if r["path"].startswith("/media/")]
    assert len(pages) == len(notes) + 1 and all(r["cookie"] for r in pages)
    assert media and not any(r["cookie"] for r in media)
    first = next(r for r in pages if r["path"] == f"/xhs/explore/{notes[0].id}")
    assert f"xsec_token={quote(notes[0].xsec_token, safe='')}" in first["query"]
    assert_canary_nowhere(tmp_path, proc.stdout, proc.stderr, log)


def test_a_user_records_the_notes_of_its_profile_page_and_says_why_no_more(sb: Any, tmp_path: Path) -> None:
    proc, rows, log = crawl(tmp_path, sb, "-a", f"user={xhs.USER_ID}", "-s", "MEDIA_ENABLED=0")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    expected = WORLD.user_notes()[:xhs.PROFILE_NOTES]
    assert [r["post_id"] for r in sorted(rows, key=lambda r: r["created_at"], reverse=True)] == [n.id for n in expected]
    for record, note in zip(sorted(rows, key=lambda r: r["created_at"], reverse=True), expected, strict=True):
        # Each note read from its own page (with the card's xsec_token), not just the card's cover.
        assert "partial" not in record["extra"] and "incomplete" not in record["extra"]
        assert sum(a["kind"] == "image" for a in record["media"]) == len(note.images)
    assert "further pages need signed APIs" in log
    assert len([r for r in sb.requests() if r["path"].startswith("/xhs/explore/")]) == xhs.PROFILE_NOTES
    assert_canary_nowhere(tmp_path, proc.stdout, proc.stderr, log)


def test_a_page_that_says_nothing_of_its_note_fails_and_is_never_a_deleted_record(sb: Any, tmp_path: Path) -> None:
    first = WORLD.user_notes()[0]
    # EMPTY_NOTE: a noteDetailMap entry with an empty note and state "success" (nothing says the note is gone).
    proc, rows, log = crawl(tmp_path, sb, "-a", f"note={xhs.EMPTY_NOTE},{share_url(first)}",
                            "-s", "MEDIA_ENABLED=0")
    assert proc.returncode == 1, proc.stderr[-3000:] + log[-3000:]  # the job is not complete: retried next run
    assert [r["post_id"] for r in rows] == [first.id] and not rows[0]["deleted"]
    assert f"holds no note {xhs.EMPTY_NOTE}" in log and "failed for good" in log


def test_461_and_code_300012_back_off_then_the_page_fails_with_that_reason(sb: Any, tmp_path: Path) -> None:
    a, b, c = WORLD.user_notes()[:3]
    sb.set_faults(xhs_web=[{"kind": "461", "note": a.id, "times": 2},
                           {"kind": "300012_json", "note": b.id, "times": 1},
                           {"kind": "300012", "note": c.id}])  # for good
    proc, rows, log = crawl(tmp_path, sb, "-a", "note=" + ",".join(share_url(n) for n in (a, b, c)),
                            "-s", "MEDIA_ENABLED=0")
    assert proc.returncode == 1, proc.stderr[-3000:] + log[-3000:]  # one page failed: the job is not complete
    assert sorted(r["post_id"] for r in rows) == sorted([a.id, b.id])
    assert not any(r["deleted"] for r in rows)  # a rate limit is never "the note is gone"
    hits = Counter(r["path"].rsplit("/", 1)[1] for r in sb.requests() if r["path"].startswith("/xhs/explore/"))
    assert hits == {a.id: 3, b.id: 2, c.id: 3}  # c: the first answer and PLATFORM_RATE_LIMIT_RETRIES retries
    assert f"item {c.id} failed for good: rate limited" in log
    assert "rate limited (http_461)" in log


def test_a_list_resumes_with_only_the_items_its_checkpoint_has_not_done(sb: Any, tmp_path: Path) -> None:
    """Source kind ``items``: the checkpoint records which requested items are done (no page numbers); the run
    after one where the 2nd of 3 failed fetches only the 2nd, then the list is complete and its checkpoint goes."""
    a, b, c = WORLD.user_notes()[:3]
    sb.set_faults(xhs_web=[{"kind": "300012", "note": b.id}])  # for good, in this run
    notes = "note=" + ",".join(share_url(n) for n in (a, b, c))
    proc, rows, _ = crawl(tmp_path, sb, "-a", notes, "-s", "MEDIA_ENABLED=0")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert sorted(r["post_id"] for r in rows) == sorted([a.id, c.id])
    assert f"error: xhs: 1 of 3 item(s) failed for good (the first, {b.id}: rate limited" in proc.stderr
    [path] = (tmp_path / "checkpoints").glob("*.json")
    checkpoint = json.loads(path.read_text("utf-8"))
    assert checkpoint["kind"] == "items" and checkpoint["done"] == sorted([a.id, c.id])
    assert checkpoint["failed"] == [b.id] and "watermark" not in checkpoint and "next" not in checkpoint

    sb.reset()  # the fault is gone
    proc, rows, log = crawl(tmp_path, sb, "-a", notes, "-s", "MEDIA_ENABLED=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["post_id"] for r in rows] == [b.id]
    hits = Counter(r["path"].rsplit("/", 1)[1] for r in sb.requests() if r["path"].startswith("/xhs/explore/"))
    assert hits == {b.id: 1}  # only the item not done
    assert "2 of 3 items done, the other 1 are fetched" in log
    assert "source completed (all 3 items done); checkpoint cleared" in log and not path.exists()


def test_a_notes_file_of_too_many_lines_is_refused_in_one_line(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("# a comment\n" * 10_001, "utf-8")
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "xhs", "-a", f"notes_file={notes}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "more than 10000 lines (XHS_NOTES_FILE_MAX_LINES)" in lines[0]


@pytest.mark.parametrize(("args", "message"), [
    (["-a", "note=not-a-note"], "invalid argument note='not-a-note'"),
    (["-a", "note=https://evil.test/explore/656038c486c2e82e442b3c58"], "xiaohongshu.com"),
    (["-a", "notes_file=/nonexistent/notes.txt"], "cannot read it"),
    (["-a", "notes_file=/dev/zero"], "larger than 4194304 bytes (XHS_NOTES_FILE_MAX_BYTES)"),
    (["-a", f"note={xhs.GONE_NOTE}", "-a", f"user={xhs.USER_ID}"], "give exactly one of"),
    (["-a", "user=12345"], "24-hex-digit user id"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "xhs", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: xhs: ") and message in lines[0], proc.stderr
