"""End to end: ``scrapy crawl douyin`` as a user runs it, against the sandbox's Douyin mount over real HTTP.

Without DOUYIN_COOKIE every aweme is read from its share page; with it (a canary value) from the detail API, and the
cookie must reach those requests and nothing else: no log line at DEBUG, no record, no checkpoint, no JOBDIR file,
no feed. Expectations come from the sandbox's world model (mediacrawler_sandbox/douyin.py) and its media.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import av
import pytest

from mediacrawler_sandbox import douyin, media, video

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CANARY = "sessionid=canary-douyin-0123456789abcdef"
VIDEO, OTHER = douyin.VIDEO_AWEMES
ALBUM, GONE = douyin.ALBUM_AWEME, douyin.GONE_AWEME


def crawl(tmp_path: Path, sandbox: Any, *args: str, cookie: str | None = None,
          media_on: bool = True) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    out = tmp_path / "out.jsonl"
    root = f"{sandbox.url}/douyin"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "douyin", *args,
           "-s", f"DOUYIN_SHARE_URL={root}", "-s", f"DOUYIN_WEB_URL={root}", "-s", f"DOUYIN_SHORT_URL={root}/v",
           "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", f"MEDIA_ENABLED={int(media_on)}",
           "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", "LOG_LEVEL=DEBUG", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-s", "PLATFORM_BACKOFF_BASE=0.05",
           "-s", "PLATFORM_BACKOFF_MAX=0.2", "-s", f"JOBDIR={tmp_path / 'job'}", "-O", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DOUYIN_COOKIE")}
    if cookie is not None:
        env["DOUYIN_COOKIE"] = cookie
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []
    return proc, rows


def stored(tmp_path: Path, asset: dict[str, Any]) -> bytes:
    assert asset["status"] in ("downloaded", "deduplicated", "uptodate"), asset
    data = (tmp_path / "files" / asset["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == asset["sha256"] and len(data) == asset["size"]
    return data


@pytest.fixture
def dy(sandbox: Any) -> Any:
    sandbox.reset()
    return sandbox


def test_share_pages_store_an_album_a_video_at_the_chosen_height_and_record_a_gone_item(
        dy: Any, tmp_path: Path) -> None:
    proc, rows = crawl(tmp_path, dy, "-a", f"aweme={VIDEO},https://v.douyin.com/iSbxA201/,{GONE}",
                       "-a", "max_height=480")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    by_id = {r["post_id"]: r for r in rows}
    assert sorted(by_id) == sorted([VIDEO, ALBUM, GONE]) and len(rows) == 3
    # The album (reached through its short link): every picture, in order, byte for byte; the music as audio.
    album = by_id[ALBUM]
    assert album["url"] == f"https://www.douyin.com/note/{ALBUM}" and album["extra"]["aweme_type"] == 68
    images = [a for a in album["media"] if a["kind"] == "image"]
    assert [stored(tmp_path, a) for a in images] == [media.generic_image(n)
                                                     for n in douyin.album_image_numbers(ALBUM)]
    [music] = [a for a in album["media"] if a["kind"] == "audio"]
    assert stored(tmp_path, music) == douyin.music_file(douyin.MUSIC_ID) and music["mime"] == "audio/mpeg"
    # The video: the H.264 file of the highest height within max_height (the sandbox lists 720/480/360 and HEVC).
    [clip, _cover] = by_id[VIDEO]["media"]
    data = stored(tmp_path, clip)
    assert clip["rendition"]["height"] == 480 and clip["rendition"]["codec"] == "avc1"
    assert hashlib.sha256(data).hexdigest() == video.video_catalog(VIDEO).rendition(480).progressive_sha256
    assert by_id[VIDEO]["text"] == douyin.AWEMES[VIDEO].desc and by_id[VIDEO]["author"]["id"] == "93000000001"
    # The removed item: a record that says why, not an error.
    gone = by_id[GONE]
    assert gone["deleted"] is True and gone["extra"]["unavailable"].startswith("filtered: status_deleted")
    paths = [r["path"] for r in dy.requests()]
    assert f"/douyin/share/video/{VIDEO}/" in paths and "/douyin/v/iSbxA201/" in paths
    assert f"/douyin/share/note/{ALBUM}/" in paths  # the short link's redirect, followed
    assert not any("/aweme/detail/" in p for p in paths)  # no cookie: no detail API
    assert not any(r["cookie"] for r in dy.requests())


def test_with_a_cookie_the_detail_api_is_read_and_the_cookie_goes_nowhere_else(dy: Any, tmp_path: Path) -> None:
    proc, rows = crawl(tmp_path, dy, "-a", f"aweme=https://www.douyin.com/video/{OTHER},https://v.douyin.com/"
                                           f"iSbxA201/,7300000000000099999", "-a", "video_codecs=hevc,avc1",
                       cookie=CANARY)
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    by_id = {r["post_id"]: r for r in rows}
    assert sorted(by_id) == sorted([OTHER, ALBUM, "7300000000000099999"])
    assert all(r["extra"].get("read_from") == "detail" for r in rows if not r["deleted"])
    [clip, _cover] = by_id[OTHER]["media"]
    data = stored(tmp_path, clip)
    assert clip["rendition"]["height"] == 720 and clip["rendition"]["codec"] == "hevc"
    assert data == douyin.hevc_file(OTHER, "720p")
    with av.open(str(tmp_path / "files" / clip["path"])) as container:
        assert container.streams.video[0].codec_context.name == "hevc" and container.streams.audio
    assert len([a for a in by_id[ALBUM]["media"] if a["kind"] == "image" and a["sha256"]]) == douyin.ALBUM_IMAGES
    assert by_id["7300000000000099999"]["extra"]["unavailable"].startswith(f"status_code {douyin.NOT_FOUND_CODE}")
    details = [r for r in dy.requests() if r["path"].endswith("/aweme/detail/")]
    assert len(details) == 3 and all(r["cookie"] for r in details)
    media_requests = [r for r in dy.requests() if "/media/" in r["path"]]
    assert media_requests and not any(r["cookie"] for r in media_requests)  # never to media, even on that host
    for text in (proc.stdout, proc.stderr, log, json.dumps(rows)):
        assert CANARY not in text and "canary-douyin" not in text
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix not in (".jpg", ".mp4", ".mp3"):
            assert b"canary-douyin" not in path.read_bytes(), path


def test_every_videos_cover_and_the_albums_live_photo_are_stored_once(dy: Any, tmp_path: Path) -> None:
    proc, rows = crawl(tmp_path, dy, "-a", f"aweme={VIDEO},{OTHER},{ALBUM}")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    by_id = {r["post_id"]: r for r in rows}
    assert sorted(by_id) == sorted([VIDEO, OTHER, ALBUM])
    # Each video, then its cover naming it: the world's picture for that aweme, byte for byte.
    for aweme in (VIDEO, OTHER):
        assets = by_id[aweme]["media"]
        assert [(a["kind"], a["key"], a["cover_of"]) for a in assets] == [
            ("video", f"video:{aweme}", None), ("image", f"cover:{aweme}", f"video:{aweme}")]
        assert stored(tmp_path, assets[1]) == media.generic_image(int(aweme[-3:]))
        assert assets[1]["mime"] == "image/jpeg" and "cover" not in by_id[aweme]["extra"]
    # The album: its pictures, the Live Photo's clip right after its still, the music.
    album = by_id[ALBUM]["media"]
    numbers = douyin.album_image_numbers(ALBUM)
    assert [(a["kind"], a["key"], a["live_of"]) for a in album] == [
        ("image", f"{ALBUM}:1", None), ("image", f"{ALBUM}:2", None), ("video", f"live:{ALBUM}:2", f"{ALBUM}:2"),
        ("image", f"{ALBUM}:3", None), ("audio", f"music:{douyin.MUSIC_ID}", None)]
    assert [stored(tmp_path, a) for a in album if a["kind"] == "image"] == [media.generic_image(n) for n in numbers]
    clip = album[2]
    clip_id = douyin.live_clip_id(ALBUM, 2)
    assert stored(tmp_path, clip) == video.video_file(["progressive", clip_id, "360p.mp4"])[0]
    assert clip["mime"] == "video/mp4" and clip["rendition"]["height"] == 360
    # Each file asked for once; a second run stores nothing new and keeps every file.
    fetched = [r["path"] for r in dy.requests() if r["path"].startswith("/media/")]
    assert fetched.count(f"/media/progressive/{clip_id}/360p.mp4") == 1
    assert all(fetched.count(f"/media/img/{int(a[-3:])}.jpg") == 1 for a in (VIDEO, OTHER))
    files = tmp_path / "files" / "objects"
    before = sorted(p.name for p in files.rglob("*") if p.is_file())
    assert len(before) == len({a["sha256"] for r in rows for a in r["media"]})
    again, rows2 = crawl(tmp_path, dy, "-a", f"aweme={VIDEO},{OTHER},{ALBUM}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in files.rglob("*") if p.is_file()) == before
    assert all(a["sha256"] for r in rows2 for a in r["media"])


def test_a_users_list_is_refused_with_one_line_and_exit_2(tmp_path: Path, sandbox: Any) -> None:
    proc, _ = crawl(tmp_path, sandbox, "-a", "user=MS4wLjABAAAAxyz")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "a user's list needs request signatures this project does not produce" in proc.stderr
    proc, _ = crawl(tmp_path, sandbox, "-a", "aweme=https://www.douyin.com/user/MS4wLjABAAAAxyz")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "aweme" in proc.stderr


def test_a_bytevc2_only_bit_rate_with_video_codecs_avc1_stores_the_play_addr_h264_file(
        dy: Any, tmp_path: Path) -> None:
    # bit_rate[] lists only ByteVC2 files (is_bytevc1 = 2), the H.264 one is video.play_addr_h264 (a real 2025
    # shape).
    aweme = douyin.BYTEVC2_AWEME
    proc, rows = crawl(tmp_path, dy, "-a", f"aweme={aweme}", "-a", "video_codecs=avc1")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    [row] = rows
    [clip, _cover] = row["media"]
    assert [(r["height"], r["codec"]) for r in clip["renditions"]] == [(720, "bytevc2"), (480, "bytevc2"),
                                                                        (720, "avc1")]
    data = stored(tmp_path, clip)
    assert clip["rendition"]["height"] == 720 and clip["rendition"]["codec"] == "avc1"
    assert hashlib.sha256(data).hexdigest() == video.video_catalog(aweme).rendition(720).progressive_sha256
    with av.open(str(tmp_path / "files" / clip["path"])) as container:
        assert container.streams.video[0].codec_context.name == "h264"
    assert not any("/bytevc2/" in r["path"] for r in dy.requests())  # never fetched a ByteVC2 file
