"""End to end: ``-a subtitles/danmaku/chapters=true`` on the sandbox's Bilibili (docs/platforms.md, "Bilibili
extras"): per part, the subtitle JSON stored with its SRT, the danmaku inflated XML, the chapters in the record and
in the part's MP4."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import av
import pytest

from mediacrawler_sandbox import bilibili, bilibili_extras, video
from tests.test_crawl_bilibili import CANARY, crawl

pytestmark = pytest.mark.slow

BVID = bilibili.MULTIPART_BVID


@pytest.fixture
def bili(sandbox: Any) -> Any:
    sandbox.reset()
    sandbox.set_faults(bilibili_wbi="all")
    return sandbox


def _stored(tmp_path: Path, entry: dict[str, Any]) -> bytes:
    data = (tmp_path / "files" / entry["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["size"]
    return data


@pytest.mark.parametrize("comment_mount", ["comment", "comment-bare"])
def test_subtitles_danmaku_and_chapters_of_every_part(bili: Any, tmp_path: Path, comment_mount: str) -> None:
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={BVID}", "-a", "max_height=360", "-a", "subtitles=true",
                       "-a", "danmaku=true", "-a", "chapters=true",
                       "-s", f"BILIBILI_COMMENT_URL={bili.url}/bilibili/{comment_mount}")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    [row] = rows
    cids = [cid for cid, _ in bilibili.parts_of(BVID)]
    assert len(cids) == 3
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for asset in row["media"]:
        assert asset["status"] in ("downloaded", "deduplicated"), asset
        by_kind.setdefault(asset["kind"], []).append(asset)
    assert len(by_kind["video"]) == 3
    subs = by_kind["subtitle"]
    assert sorted(a["key"] for a in subs) == sorted(f"{BVID}:{cid}:{lan}" for cid in cids
                                                    for lan, _, _ in bilibili_extras.TRACKS)
    for asset in subs:
        cid, lan = asset["key"].split(":")[1:]
        assert asset["path"].endswith(".json") and asset["mime"] == "application/json"
        assert json.loads(_stored(tmp_path, asset)) == bilibili_extras.subtitle_body(int(cid), lan)
        srt = _stored(tmp_path, asset["derived"]["srt"]).decode("utf-8")
        assert asset["derived"]["srt"]["path"].endswith(".srt")
        texts = next(t for code, _, t in bilibili_extras.TRACKS if code == lan)
        assert srt.startswith("1\n00:00:00,000 --> 00:00:01,333\n" + texts[0] + "\n\n2\n")
        assert srt.count(" --> ") == 3 and texts[2] in srt
    dms = by_kind["danmaku"]
    assert sorted(a["key"] for a in dms) == sorted(f"{BVID}:{cid}" for cid in cids)
    for asset in dms:
        xml = _stored(tmp_path, asset)
        assert asset["path"].endswith(".xml")
        assert xml.decode("utf-8") == bilibili_extras.danmaku_xml(int(asset["key"].split(":")[1]))
        assert len(ElementTree.fromstring(xml).findall("d")) == 3
    for part in row["extra"]["parts"]:
        assert part["subtitles"] == ["zh-CN", "en-US"]
        assert [c["content"] for c in part["chapters"]] == ["开场", "结尾 & 彩蛋"]
        assert part["chapters"][0]["from"] == 0 and part["chapters"][-1]["to"] == 4
    # The chapters are on each part's video and in its MP4, where a player reads them (titles and times).
    half = video.DURATION / 2
    for asset in by_kind["video"]:
        assert asset["chapters"] == [{"start": 0, "end": half, "title": "开场"},
                                     {"start": half, "end": video.DURATION, "title": "结尾 & 彩蛋"}]
        _stored(tmp_path, asset)
        with av.open(str(tmp_path / "files" / asset["path"])) as container:
            assert container.streams.video and container.streams.audio
            got = [(c["metadata"]["title"], float(c["start"] * c["time_base"]), float(c["end"] * c["time_base"]))
                   for c in container.chapters()]
        assert got == [("开场", 0.0, half), ("结尾 & 彩蛋", half, video.DURATION)], got
    # The player/wbi/v2 requests were signed and accepted (bilibili_wbi="all").
    requests = bili.requests()
    players = [r for r in requests if r["path"].endswith("/x/player/wbi/v2")]
    assert len(players) == 3 and all("w_rid=" in r["query"] for r in players)
    # Subtitle and danmaku hosts are media hosts: the session cookie never goes there, nor into the record.
    extras = [r for r in requests if "/bilibili/subtitle/" in r["path"] or "/bilibili/comment" in r["path"]]
    assert len(extras) == 9 and not any(r["cookie"] for r in extras)
    assert CANARY not in log and CANARY not in json.dumps(rows)
    assert "Traceback" not in log
    if comment_mount != "comment":
        return
    # The store with its documents verifies clean; a second run stores nothing new and records the same objects.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    verify = subprocess.run([sys.executable, "-m", "mediacrawler", "verify", "--index", "sqlite",
                             "--store", str(tmp_path / "files")], capture_output=True, text=True, env=env,
                            timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "0 corrupt, 0 missing, 0 orphan" in verify.stdout, verify.stdout
    before = {a["key"] + a["kind"]: (a["path"], a.get("derived")) for a in row["media"]}
    (tmp_path / "out.jsonl").unlink()
    proc, again = crawl(tmp_path, bili, "-a", f"bvid={BVID}", "-a", "max_height=360", "-a", "subtitles=true",
                        "-a", "danmaku=true", "-a", "chapters=true", "-a", "full=true",
                        "-s", f"BILIBILI_COMMENT_URL={bili.url}/bilibili/{comment_mount}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row2] = again
    assert {a["key"] + a["kind"]: (a["path"], a.get("derived")) for a in row2["media"]} == before
    assert {a["status"] for a in row2["media"] if a["kind"] in ("subtitle", "danmaku")} == {"deduplicated"}


def test_a_failed_player_answer_loses_no_video_and_a_bad_danmaku_fails_alone(bili: Any, tmp_path: Path) -> None:
    bili.set_faults(bilibili_wbi="all", bilibili_api=[{"kind": "-404", "endpoint": "player", "after": 1}])
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={BVID}", "-a", "max_height=360", "-a", "subtitles=true",
                       "-a", "chapters=true", "-a", "danmaku=true",
                       "-s", f"BILIBILI_COMMENT_URL={bili.url}/bilibili/subtitle")
    log = (tmp_path / "crawl.log").read_text("utf-8")
    [row] = rows
    videos = [a for a in row["media"] if a["kind"] == "video"]
    assert len(videos) == 3 and all(a["status"] == "downloaded" for a in videos), videos
    parts = row["extra"]["parts"]
    assert "chapters" in parts[0] and len(parts[0]["subtitles"]) == 2
    assert all("extras_error" in p and "chapters" not in p for p in parts[1:]), parts
    assert videos[0]["chapters"] and [v["chapters"] for v in videos[1:]] == [None, None]
    assert len([a for a in row["media"] if a["kind"] == "subtitle"]) == 2
    dms = [a for a in row["media"] if a["kind"] == "danmaku"]
    assert len(dms) == 3 and all(a["status"] == "failed" and a["path"] is None for a in dms)
    assert "Traceback" not in log


def test_extras_are_off_by_default(bili: Any, tmp_path: Path) -> None:
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={BVID}", "-a", "max_height=360", media=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = rows
    assert {a["kind"] for a in row["media"]} == {"image", "video"}
    assert all("chapters" not in p and "subtitles" not in p for p in row["extra"]["parts"])
    assert all(a["chapters"] is None for a in row["media"])
    assert not [r for r in bili.requests() if r["path"].endswith("/x/player/wbi/v2")]


def test_the_player_step_follows_the_playurls_and_names_the_video_by_aid_or_bvid() -> None:
    from scrapy.utils.test import get_crawler

    from mediacrawler.spiders.bilibili import BilibiliChain, BilibiliSpider

    crawler = get_crawler(BilibiliSpider, {"BILIBILI_API_URL": "http://127.0.0.1:9/bilibili"})
    spider = crawler.spidercls.from_crawler(crawler, bvid=BVID, chapters="true")
    view = bilibili.view_response(BVID, base="http://127.0.0.1:9")
    cids = [str(cid) for cid, _ in bilibili.parts_of(BVID)]
    chain = BilibiliChain(post_id=BVID, raw={"view": view})
    steps = []
    for _ in range(10):
        step = spider.next_step(chain)
        if step is None:
            break
        steps.append(step)
        kind, cid = step.name.split(":")
        (chain.tried if kind == "playurl" else chain.players_tried).append(cid)
        chain = BilibiliChain.from_json(json.loads(json.dumps(chain.to_json())))  # as it travels in meta
    assert [s.name for s in steps] == [f"playurl:{c}" for c in cids] + [f"player:{c}" for c in cids]
    assert f"aid={bilibili.aid_for(BVID)}&cid={cids[0]}" in steps[3].url
    # A chain checkpointed before the aid was kept (or a view without one) asks by bvid.
    old = chain.to_json()
    del old["aid"]
    chain = BilibiliChain.from_json({**old, "players_tried": []})
    assert f"bvid={BVID}&cid={cids[0]}" in str(spider.next_step(chain).url)  # type: ignore[union-attr]


def test_a_single_durl_file_is_remuxed_to_carry_the_chapters(bili: Any, tmp_path: Path) -> None:
    # A faststart MP4 that would be stored byte for byte is remuxed (stream copy) when it has chapters to carry.
    bili.set_faults(bilibili_wbi="all", bilibili_durl_segments=1)
    bvid = bilibili.BVIDS[0]
    proc, rows = crawl(tmp_path, bili, "-a", f"bvid={bvid}", "-a", "chapters=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = rows
    [asset] = [a for a in row["media"] if a["kind"] == "video"]
    assert asset["status"] == "downloaded" and [r["kind"] for r in asset["renditions"]] == ["progressive"]
    served = [r for r in bili.requests() if r["path"].startswith("/media/bili/") and r["method"] == "GET"]
    assert served and all(r["path"].endswith(".mp4") for r in served)
    with av.open(str(tmp_path / "files" / asset["path"])) as container:
        assert [c["metadata"]["title"] for c in container.chapters()] == ["开场", "结尾 & 彩蛋"]
        assert container.streams.video and container.streams.audio
        assert abs(container.duration / 1_000_000 - video.DURATION) < 0.2
