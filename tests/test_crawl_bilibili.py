"""End to end: ``scrapy crawl bilibili`` as a user runs it, against the sandbox's Bilibili API over real HTTP.

The sandbox checks every WBI signature (``bilibili_wbi="all"``), serves a creator (mid 2) with a three-part video and
a collaboration, a keyword search and real media behind each part's playurl. Expectations come from its world model.
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

import av
import pytest

from mediacrawler.sandbox import bilibili

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CANARY = "SESSDATA=canary-bili-0123456789abcdef"


def crawl(tmp_path: Path, sandbox: Any, *args: str, media: bool = True) -> tuple[subprocess.CompletedProcess[str],
                                                                                   list[dict[str, Any]]]:
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "bilibili", *args,
           "-s", f"BILIBILI_API_URL={sandbox.url}/bilibili", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
           "-s", f"MEDIA_ENABLED={int(media)}", "-s", f"FILES_STORE={tmp_path / 'files'}",
           "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}", "-s", "LOG_LEVEL=DEBUG",
           "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-s", "PLATFORM_BACKOFF_BASE=0.05",
           "-s", "PLATFORM_BACKOFF_MAX=0.2", "-O", str(out)]
    env = {**{k: v for k, v in os.environ.items() if k != "REDIS_URL"}, "BILIBILI_COOKIE": CANARY}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []
    return proc, rows


@pytest.fixture
def bili(sandbox: Any) -> Any:
    sandbox.reset()
    sandbox.set_faults(bilibili_wbi="all")
    return sandbox


def test_a_creator_gives_one_post_per_video_and_one_verified_mp4_per_part(bili: Any, tmp_path: Path) -> None:
    proc, rows = crawl(tmp_path, bili, "-a", "mid=2", "-a", "max_height=480", "-s", "BILIBILI_PAGE_SIZE=4")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    expected = [u.bvid for u in bilibili.creator_uploads(2)]
    assert Counter(r["post_id"] for r in rows) == Counter({b: 1 for b in expected})
    by_id = {r["post_id"]: r for r in rows}
    multi = by_id[bilibili.MULTIPART_BVID]
    parts = [a for a in multi["media"] if a["kind"] == "video"]
    assert [a["key"].rsplit(":", 1)[1] for a in parts] == [str(cid) for cid, _ in
                                                            bilibili.parts_of(bilibili.MULTIPART_BVID)]
    hashes = set()
    for row in rows:
        for asset in row["media"]:
            assert asset["status"] in ("downloaded", "deduplicated", "uptodate"), (row["post_id"], asset)
            data = (tmp_path / "files" / asset["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == asset["sha256"]
            if asset["kind"] == "video":
                hashes.add(asset["sha256"])
                assert asset["rendition"]["height"] <= 480
                with av.open(str(tmp_path / "files" / asset["path"])) as container:
                    assert container.streams.video and container.streams.audio  # video and audio tracks muxed
    assert len(hashes) == sum(len(bilibili.parts_of(b)) for b in expected)  # every part its own file
    # The union video is listed under its owner, not under mid 2.
    assert by_id[bilibili.UNION_BVID]["author"]["id"] == "3"
    # Every listing and playurl request was signed and accepted (the sandbox answers -403 to a bad w_rid).
    signed = [r for r in bili.requests() if "/wbi/" in r["path"]]
    assert signed and all("w_rid=" in r["query"] for r in signed)
    assert CANARY not in log and CANARY not in json.dumps(rows)


def test_keyword_and_bvid_targets_and_a_gone_video(bili: Any, tmp_path: Path) -> None:
    proc, rows = crawl(tmp_path, bili, "-a", "keyword=猫", media=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hits = {u.bvid for u in bilibili.UPLOADS.values() if "猫" in u.title}
    assert len(hits) >= 3 and Counter(r["post_id"] for r in rows) == Counter({b: 1 for b in hits})
    assert all("<em" not in r["extra"]["title"] and "猫" in r["extra"]["title"] for r in rows)
    gone = "BV2zz9999999"  # not a video the sandbox knows: -404
    (tmp_path / "b").mkdir()
    proc, rows = crawl(tmp_path / "b", bili, "-a", f"bvid={bilibili.BVIDS[0]},{gone}", media=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_id = {r["post_id"]: r for r in rows}
    assert set(by_id) == {bilibili.BVIDS[0], gone}
    assert by_id[gone]["deleted"] is True and "not_found" in by_id[gone]["extra"]["unavailable"]
    assert [a["kind"] for a in by_id[bilibili.BVIDS[0]]["media"]] == ["image", "video"]


def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, sandbox: Any) -> None:
    proc, _ = crawl(tmp_path, sandbox, "-a", "bvid=av123")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "bvid" in proc.stderr
