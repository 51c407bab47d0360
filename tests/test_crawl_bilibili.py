"""End to end: ``scrapy crawl bilibili`` as a user runs it, against the sandbox's Bilibili API over real HTTP.

The sandbox checks every WBI signature (``bilibili_wbi="all"``), serves a creator (mid 2) with a three-part video and
a collaboration, a keyword search and real media behind each part's playurl. Expectations come from its world model.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import av
import pytest

from mediacrawler_sandbox import bilibili, video

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
                if row["post_id"] == bilibili.DURL_BVID:
                    # No DASH: one rendition, the durl's quality (nothing to select), its segments joined.
                    assert abs(asset["duration"] - video.DURATION) < 0.2
                    [listed] = asset["renditions"]
                    assert len(listed["segments"]) == bilibili.DURL_SEGMENTS
                else:
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
    proc, _ = crawl(tmp_path, sandbox, "-a", "bvid=cv123")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "bvid" in proc.stderr


# Stream URLs that expire mid-download: 4 KiB Range segments, so a part's 480p video takes 5 requests and its audio
# 17, and a sandbox whose stream tokens serve 3 GETs each (every stream outlives its URL, the audio five times: more
# than the default MEDIA_SEGMENT_MAX_RESOLVES, sized for real ~120 min URLs, allows).
EXPIRING = ("-s", "MEDIA_SEGMENT_THRESHOLD=4096", "-s", "MEDIA_SEGMENT_SIZE=4096", "-s", "MEDIA_SEGMENT_CONCURRENCY=2",
            "-s", "MEDIA_SEGMENT_MAX_RESOLVES=8", "-a", "max_height=480")
STREAM_USES = 3


def stream_requests(sandbox: Any) -> list[dict[str, Any]]:
    return [r for r in sandbox.requests() if r["path"].startswith("/media/bili/")]


def playurl_requests(sandbox: Any) -> list[dict[str, Any]]:
    return [r for r in sandbox.requests() if r["path"].endswith("/x/player/wbi/playurl")]


def trid(entry: dict[str, Any]) -> int:
    return int(parse_qs(entry["query"])["trid"][0])


def stored_videos(tmp_path: Path, rows: list[dict[str, Any]]) -> dict[str, str]:
    """``{asset key: sha256 of the stored object}`` of every video asset, each checked against its record."""
    found = {}
    for row in rows:
        for asset in row["media"]:
            if asset["kind"] == "video" and asset["status"] == "downloaded":
                digest = hashlib.sha256((tmp_path / "files" / asset["path"]).read_bytes()).hexdigest()
                assert digest == asset["sha256"]
                found[asset["key"]] = digest
    return found


def test_expired_stream_urls_are_read_again_from_the_parts_playurl(bili: Any, tmp_path: Path) -> None:
    bvid = bilibili.MULTIPART_BVID
    cids = [str(cid) for cid, _ in bilibili.parts_of(bvid)]
    (tmp_path / "plain").mkdir()
    proc, rows = crawl(tmp_path / "plain", bili, "-a", f"bvid={bvid}", *EXPIRING)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = stored_videos(tmp_path / "plain", rows)
    assert sorted(reference) == sorted(f"{bvid}:{cid}" for cid in cids)
    assert not any(r["status"] == 403 for r in stream_requests(bili))

    bili.reset()
    bili.set_faults(bilibili_wbi="all", bilibili_stream_url_uses=STREAM_USES)
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={bvid}", *EXPIRING)
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    assert stored_videos(tmp_path, rows) == reference  # every part, byte for byte what the unexpired run stored

    requests = bili.requests()
    playurls = [r for r in requests if r["path"].endswith("/x/player/wbi/playurl")]
    assert all(r["status"] == 200 and "w_rid=" in r["query"] for r in playurls)
    streams = [r for r in requests if r["path"].startswith("/media/bili/")]
    # The refreshes are API requests like the chain's (signed, with the session); the CDN never sees the cookie.
    assert all(r["cookie"] for r in playurls) and not any(r["cookie"] for r in streams)
    # The files the media path picks at max_height=480: the 480p AVC stream and the audio.
    names = {f"{next(r.bili_stream_id for r in video.RENDITIONS if r.height == 480)}.m4s",
             f"{video.AUDIO_BILI_ID}.m4s"}
    for cid in cids:
        part_playurls = [r for r in playurls if parse_qs(r["query"])["cid"] == [cid]]
        paths = {r["path"] for r in streams if f"/{cid}-1-" in r["path"]}
        assert {p.rsplit("-", 1)[1] for p in paths} == names and len(paths) == 2  # on the primary host only
        for path in paths:
            fetched = [r for r in streams if r["path"] == path]
            expired = [r for r in fetched if r["status"] == 403]
            assert expired, f"{path} never outlived its URL"
            assert {r["status"] for r in fetched} == {206, 403}
            for gone in expired:
                # A 403, then a fresh playurl of this cid, then this file's next segment under a newer token (other
                # segments of the file in flight under the old token may still answer 403 in between).
                later = next(r for r in fetched if r["seq"] > gone["seq"] and r["status"] == 206)
                assert trid(later) > trid(gone)
                assert any(gone["seq"] < p["seq"] < later["seq"] for p in part_playurls)
            served = [r for r in fetched if r["status"] == 206 and not r["aborted"]]
            assert max(Counter(trid(r) for r in served).values()) <= STREAM_USES
            spans = sorted({tuple(map(int, r["range"].removeprefix("bytes=").split("-"))) for r in served})
            assert spans[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:]))  # no gap
        assert len(part_playurls) >= 3  # the chain's, then one per expired stream at least
    refreshed = sum(1 for r in playurls) - len(cids)
    # Each refresh resolved its stream. A refresh request Scrapy retried on a stale pooled connection reaches the
    # sandbox twice, so the sandbox may count a request or two more than the spider resolved.
    resolved = re.search(r"'bilibili/media_refresh/resolved': (\d+)", log)
    assert resolved is not None and 0 < int(resolved.group(1)) <= refreshed
    assert "'bilibili/media_refresh/failed'" not in log
    assert CANARY not in log and CANARY not in json.dumps(rows)


def test_a_part_whose_playurl_cannot_be_read_again_fails_alone(bili: Any, tmp_path: Path) -> None:
    broken, fine = bilibili.BVIDS[0], bilibili.BVIDS[1]
    # The chain's playurl works; every later one (the refreshes) answers -404.
    bili.set_faults(bilibili_stream_url_uses=STREAM_USES,
                    bilibili_api=[{"kind": "-404", "endpoint": "playurl", "bvid": broken, "after": 1}])
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={broken},{fine}", *EXPIRING)
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    by_id = {r["post_id"]: r for r in rows}
    assert set(by_id) == {broken, fine}
    failed = next(a for a in by_id[broken]["media"] if a["kind"] == "video")
    assert failed["status"] == "failed" and failed["sha256"] is None, failed
    assert "403" in failed["error"] and "could not be re-resolved" in failed["error"], failed["error"]
    cover = next(a for a in by_id[broken]["media"] if a["kind"] == "image")
    assert cover["status"] == "downloaded"
    assert list(stored_videos(tmp_path, [by_id[fine]])) == [f"{fine}:{bilibili.cid_for(fine)}"]
    # ... although its streams expired too: their refreshes worked.
    assert any(r["status"] == 403 for r in stream_requests(bili) if f"/{fine}/" in r["path"])
    playurls = [r for r in bili.requests() if r["path"].endswith("/x/player/wbi/playurl")
                and parse_qs(r["query"])["bvid"] == [broken]]
    assert len(playurls) >= 2  # the refresh was tried (and answered -404)
    assert "could not read the streams of" in log and "'bilibili/media_refresh/failed'" in log
    assert "'finish_reason': 'finished'" in log


def test_a_bad_best_rendition_falls_back_to_the_next_best_one(bili: Any, tmp_path: Path) -> None:
    # The 720p stream is gone on every mirror (404 for good): the part is stored from the 480p stream, not refused.
    from mediacrawler_sandbox.video import RENDITIONS

    best = max(RENDITIONS, key=lambda r: r.height)
    bili.set_faults(fragment_drop=[{"path_regex": rf"-1-{best.bili_stream_id}\.m4s$", "times": None}])
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={bilibili.BVIDS[0]}")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    [row] = rows
    [video] = [a for a in row["media"] if a["kind"] == "video"]
    assert video["status"] == "downloaded", video
    second = sorted({r.height for r in RENDITIONS}, reverse=True)[1]
    assert video["rendition"]["height"] == second
    with av.open(str(tmp_path / "files" / video["path"])) as container:
        assert container.streams.video[0].height == second and container.streams.audio
    assert f"rendition {best.qn}-7 failed" in log
    assert "media/video/rendition_fallbacks': 1" in log or "'media/video/rendition_fallbacks': 1" in log


def test_a_segmented_durl_is_joined_into_one_mp4_of_the_full_duration(bili: Any, tmp_path: Path) -> None:
    # The playurl answers a durl of 3 segments (real MP4 pieces cut at keyframes): one rendition, its segments
    # fetched in order and joined, the MP4 held to the sum of the segments' lengths.
    from mediacrawler_sandbox.video import DURATION

    bili.set_faults(bilibili_durl_segments=3)
    bvid = bilibili.BVIDS[0]
    [(cid, media_id)] = bilibili.parts_of(bvid)
    payload = bilibili.playurl_response(bvid, cid, base=bili.url, durl_segments=3)
    lengths = [entry["length"] for entry in payload["data"]["durl"]]
    assert len(lengths) == 3 and sum(lengths) == DURATION * 1000
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={bvid}")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    [row] = rows
    [video] = [a for a in row["media"] if a["kind"] == "video"]
    assert video["status"] == "downloaded", video
    assert abs(video["duration"] - DURATION) < 0.2
    with av.open(str(tmp_path / "files" / video["path"])) as container:
        assert abs(container.duration / 1_000_000 - DURATION) < 0.2
        assert container.streams.video and container.streams.audio
    # Every segment was fetched, in order, each once; nothing else of the video.
    fetched = [r["path"].rsplit("/", 1)[1] for r in bili.requests()
               if r["path"].startswith("/media/bili/") and r["method"] == "GET"]
    names = [f"{cid}-1-{payload['data']['quality']}-{k}of3.mp4" for k in (1, 2, 3)]
    assert sorted(set(fetched)) == names and [fetched.index(n) for n in names] == sorted(fetched.index(n)
                                                                                         for n in names)
    assert list((tmp_path / "files" / "objects").rglob("*.mp4")) == [tmp_path / "files" / video["path"]]


def test_a_video_of_2000_parts_is_cut_to_bilibili_max_parts_in_linear_time(bili: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={bilibili.MANY_PARTS_BVID}", "-s", "BILIBILI_MAX_PARTS=200",
                       media=False)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = rows
    assert (row["extra"]["parts_total"], row["extra"]["parts_cut"]) == (2000, 1800)
    assert len(row["extra"]["parts"]) == 200 and sum(a["kind"] == "video" for a in row["media"]) == 200
    assert len(json.dumps(row)) < 1_000_000  # was one 415 MB record
    playurls = [r for r in bili.requests() if "/playurl" in r["path"]]
    assert len(playurls) == 200
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert f"video {bilibili.MANY_PARTS_BVID} has 2000 parts; only the first 200 are crawled" in log
    assert elapsed < 120
