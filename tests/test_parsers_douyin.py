"""Douyin parser, tested from fixture files: tests/fixtures/douyin/<case>/{input.html|input.json, expected.json}.

``input.html`` is a share page as www.iesdouyin.com sends it (``window._ROUTER_DATA`` with ``\\u002F`` escapes);
``input.json`` a web detail API answer. The case name's prefix says which (``share_``, ``detail_``); the aweme is
the album's for ``*album*`` cases, else the video's. expected.json is the Post (or the error) the parser must make.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import douyin
from mediacrawler.parsers._common import PlatformError
from tests.parser_cases import assert_case, case_names

FIXTURES = Path(__file__).parent / "fixtures" / "douyin"
CASES = case_names("douyin", marker="expected.json")
SOURCE = Source(spider="douyin", job="douyin-aweme-7300000000000000001", page=1)
FETCHED = "2026-11-30T12:00:00Z"
VID = "7300000000000000001"
ALBUM = "7300000000000000002"


def run_case(case_dir: Path) -> Any:
    aweme = ALBUM if "album" in case_dir.name else VID
    try:
        if case_dir.name.startswith("share_"):
            html = (case_dir / "input.html").read_text("utf-8")
            post = douyin.parse_share_page(html, aweme=aweme, source=SOURCE, fetched_at=FETCHED)
        else:
            payload = json.loads((case_dir / "input.json").read_bytes())
            post = douyin.parse_detail(payload, aweme=aweme, source=SOURCE, fetched_at=FETCHED)
    except (PlatformError, ValueError) as e:
        return {"error": type(e).__name__, "message": str(e)}
    return {"post": dataclasses.asdict(post)}


def test_at_least_eight_cases() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


def test_share_pages_are_escaped_as_the_site_writes_them() -> None:
    html = (FIXTURES / "share_escapes" / "input.html").read_text("utf-8")
    assert "https:\\u002F\\u002F" in html and "\\u003C\\u002Fscript\\u003E" in html
    assert html.count("</script>") == 3  # the one inside the description is escaped, so the page is well formed


def test_escapes_come_back_as_text() -> None:
    post = run_case(FIXTURES / "share_escapes")["post"]
    assert post["text"] == 'a "quoted" </script><script>alert(1)</script> back\\slash \u2028 line 😀 & 中文'
    assert post["media"][0]["url"].startswith("https://v26-web.douyinvod.com/")


def test_video_renditions_carry_height_and_codec_for_the_media_path() -> None:
    [video, _cover] = run_case(FIXTURES / "share_video_bitrates")["post"]["media"]
    got = [(r["height"], r["codec"]) for r in video["renditions"]]
    assert got == [(1080, "hevc"), (720, "hevc"), (1080, "avc1"), (720, "avc1"), (540, "avc1"), (360, "avc1")]
    assert all(r["kind"] == "progressive" and len(r["alternates"]) == 2 for r in video["renditions"])
    assert video["duration"] == 15.047 and video["kind"] == "video"


def test_renditions_are_accepted_and_selected_by_the_media_path() -> None:
    from mediacrawler.media.manifests import select
    from mediacrawler.media.renditions import manifest_from_renditions

    [video, _cover] = run_case(FIXTURES / "detail_video")["post"]["media"]
    manifest = manifest_from_renditions(video["renditions"], duration=video["duration"])
    assert select(manifest, max_height=720, codec_preference=["hevc", "avc1"]).video.codec == "hevc"
    chosen = select(manifest, max_height=720, codec_preference=["avc1", "hevc"]).video
    assert (chosen.height, chosen.codec) == (720, "avc1")
    assert select(manifest, max_height=480, codec_preference=["avc1"]).video.height == 360


def test_an_album_stores_every_image_and_its_music() -> None:
    for case in ("share_album_music", "detail_album"):
        post = run_case(FIXTURES / case)["post"]
        kinds = [(a["kind"], a["key"]) for a in post["media"]]
        assert kinds == [("image", f"{ALBUM}:1"), ("image", f"{ALBUM}:2"), ("image", f"{ALBUM}:3"),
                         ("audio", "music:7200000000000000002")]
        assert post["url"] == f"https://www.douyin.com/note/{ALBUM}"


def test_unavailable_items_are_records_with_a_reason() -> None:
    for case, words in (("share_filtered", "status_deleted"), ("detail_status_error", "status_code 2053"),
                        ("detail_null_filtered", "status_self_see")):
        post = run_case(FIXTURES / case)["post"]
        assert post["deleted"] is True and words in post["extra"]["unavailable"] and post["media"] == []


@pytest.mark.parametrize(("text", "expected"), [
    ("7300000000000000001", ("id", "7300000000000000001")),
    (" 7300000000000000001 ", ("id", "7300000000000000001")),
    ("https://www.douyin.com/video/7300000000000000001", ("id", "7300000000000000001")),
    ("https://www.douyin.com/video/7300000000000000001?previous_page=app_code_link", ("id", "7300000000000000001")),
    ("https://www.douyin.com/note/7300000000000000002", ("id", "7300000000000000002")),
    ("https://www.iesdouyin.com/share/video/7300000000000000001/?region=CN&mid=1", ("id", "7300000000000000001")),
    ("https://www.douyin.com/discover?modal_id=7300000000000000001", ("id", "7300000000000000001")),
    ("https://v.douyin.com/iRNBho6u/", ("short", "iRNBho6u")),
    ("v.douyin.com/iRNBho6u", ("short", "iRNBho6u")),
])
def test_targets(text: str, expected: tuple[str, str]) -> None:
    assert douyin.parse_target(text) == expected


@pytest.mark.parametrize("text", [
    "", "abc", "12345", "https://www.douyin.com/user/MS4wLjABAAAA", "https://evil.example/video/7300000000000000001",
    "javascript:alert(1)", "https://v.douyin.com/", "https://v.douyin.com/../../etc/", "file:///7300000000000000001",
])
def test_bad_targets(text: str) -> None:
    with pytest.raises(ValueError):
        douyin.parse_target(text)


def test_id_from_a_redirected_share_url() -> None:
    final = "https://www.iesdouyin.com/share/video/7300000000000000001/?region=CN&mid=7&u_code=x&did=1"
    assert douyin.aweme_id_from_url(final) == "7300000000000000001"
    assert douyin.aweme_id_from_url("https://www.iesdouyin.com/share/user/MS4w") is None


def test_classify_envelope() -> None:
    assert douyin.classify_envelope({"status_code": 0, "aweme_detail": {}}) == "ok"
    assert douyin.classify_envelope({"status_code": 2053}) == "ok"  # recorded as the item's reason
    assert douyin.classify_envelope([]) == "invalid"
    assert douyin.classify_envelope({"data": 1}) == "invalid"


def _input(case: str) -> dict[str, Any]:
    return json.loads((FIXTURES / case / "input.json").read_text("utf-8"))


def test_video_cover_is_the_larger_picture_original_first() -> None:
    raw = _input("detail_video")["aweme_detail"]["video"]
    media = run_case(FIXTURES / "detail_video")["post"]["media"]
    assert [m["key"] for m in media] == ["video:7300000000000000001", "cover:7300000000000000001"]
    cover = media[1]
    # video.cover (720×1280) beats origin_cover (360×640); its crop (url_list[0]) goes after the originals.
    assert (cover["kind"], cover["cover_of"], cover["width"], cover["height"]) == (
        "image", "video:7300000000000000001", raw["cover"]["width"], raw["cover"]["height"])
    assert [cover["url"], *cover["alternates"]] == [*raw["cover"]["url_list"][1:], raw["cover"]["url_list"][0]]


def test_album_live_photo_clip_follows_its_still() -> None:
    raw = _input("detail_album_live")["aweme_detail"]
    aweme = raw["aweme_id"]
    media = run_case(FIXTURES / "detail_album_live")["post"]["media"]
    assert [(m["kind"], m["key"], m["live_of"]) for m in media] == [
        ("image", f"{aweme}:1", None), ("image", f"{aweme}:2", None), ("video", f"live:{aweme}:2", f"{aweme}:2"),
        ("image", f"{aweme}:3", None), ("audio", f"music:{raw['music']['id_str']}", None)]
    clip, clip_raw = media[2], raw["images"][1]["video"]
    # One file: bit_rate[0] and play_addr are the same url_key.
    assert [(r["url"], r["alternates"], r["height"], r["codec"], r["size"]) for r in clip["renditions"]] == [
        (clip_raw["play_addr"]["url_list"][0], clip_raw["play_addr"]["url_list"][1:], 1440, "avc1",
         clip_raw["bit_rate"][0]["play_addr"]["data_size"])]
    assert (clip["url"], clip["width"], clip["height"], clip["duration"]) == (
        clip_raw["play_addr"]["url_list"][0], 1080, 1440, clip_raw["duration"] / 1000)
    assert not any(m["cover_of"] for m in media)  # an album's video.cover is no video's cover
