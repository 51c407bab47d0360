"""End to end: the media kinds a Weibo post carries beyond pictures and one video, crawled from the sandbox's
showcase timeline (mediacrawler_sandbox/weibo.py, ``SHOWCASE_UID``) with media on: Live Photos stored as a linked
pair, every video of a mixed post, every video's cover once."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from mediacrawler_sandbox.weibo import SHOWCASE_UID, build_weibo_world
from mediacrawler_sandbox.video import video_file
from tests.test_crawl_weibo import crawl

pytestmark = pytest.mark.slow


def _stored(root: Path, asset: dict[str, Any]) -> bytes:
    assert asset["status"] in ("downloaded", "deduplicated", "uptodate"), asset
    data = (root / asset["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == asset["sha256"]
    return data


def test_live_photos_mixed_posts_and_covers_are_all_stored(sandbox: Any, tmp_path: Path) -> None:
    sandbox.reset()
    world = build_weibo_world()
    posts = world.timeline(SHOWCASE_UID)
    proc, records = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={SHOWCASE_UID}", media=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_id = {r["post_id"]: r for r in records}
    assert set(by_id) == {p.id for p in posts}
    files = tmp_path / "files"

    live, mixed, single = (by_id[p.id] for p in posts)
    # Live Photos: each still, then its motion clip naming the still; the plain picture between has no clip.
    keys = [(a["kind"], a["key"], a["live_of"]) for a in live["media"]]
    first, _, last = posts[0].pics
    assert keys == [
        ("image", f"weibo:{first.pid}", None), ("video", f"weibo:live:{first.pid}", f"weibo:{first.pid}"),
        ("image", f"weibo:{posts[0].pics[1].pid}", None),
        ("image", f"weibo:{last.pid}", None), ("video", f"weibo:live:{last.pid}", f"weibo:{last.pid}"),
    ]
    for asset in live["media"]:
        data = _stored(files, asset)
        if asset["live_of"]:
            pid = asset["key"].removeprefix("weibo:live:")
            assert data == video_file(["progressive", f"live{pid}", "360p.mp4"])[0]  # the clip's own bytes
            assert asset["mime"] == "video/mp4"
        else:
            assert asset["mime"] == "image/jpeg"

    # A mixed post: its picture, then each video followed by its cover.
    kinds = [(a["kind"], a["cover_of"]) for a in mixed["media"]]
    v1, v2 = posts[1].mixed_videos
    assert kinds == [("image", None), ("video", None), ("image", f"weibo:video:{v1.object_id}"),
                     ("video", None), ("image", f"weibo:video:{v2.object_id}")]
    videos = [a for a in mixed["media"] if a["kind"] == "video"]
    assert [a["key"] for a in videos] == [f"weibo:video:{v.object_id}" for v in (v1, v2)]
    assert len({_stored(files, a) for a in mixed["media"]}) == 5  # five distinct files

    # A plain video post: the video and its cover.
    assert [(a["kind"], a["cover_of"]) for a in single["media"]] == [
        ("video", None), ("image", f"weibo:video:{posts[2].video.object_id}")]
    covers = [a for r in records for a in r["media"] if a["cover_of"]]
    assert len(covers) == 3 and len({a["sha256"] for a in covers}) == 3
    for asset in covers:
        assert _stored(files, asset)[:3] == b"\xff\xd8\xff"

    # Run again: nothing new is stored and every asset is still there.
    before = sorted(p.name for p in (files / "objects").rglob("*") if p.is_file())
    again, records2 = crawl(tmp_path, sandbox.weibo_url, "-a", f"uid={SHOWCASE_UID}", "-a", "full=true",
                            media=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in (files / "objects").rglob("*") if p.is_file()) == before
