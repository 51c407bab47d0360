"""Douyin parser on answers captured from the real platform by others (tests/fixtures/real/douyin/, provenance in
tests/fixtures/real/SOURCES.md). Expected values are read from the raw JSON by hand (the paths are named in each
assertion), never by running the parser: ids, author, UTC time, text, counts, images, renditions and their codecs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.media.manifests import select
from mediacrawler.media.renditions import manifest_from_renditions
from mediacrawler.parsers import douyin

REAL = Path(__file__).parent / "fixtures" / "real" / "douyin"
#: The codec word Douyin writes in a ``url_key`` (``{uri}_{codec}_{height}p_{bitrate}``) → the records' label.
URL_KEY_CODEC = {"h264": "avc1", "bytevc1": "hevc", "bytevc2": "bytevc2"}


def _load(name: str) -> Any:
    return json.loads((REAL / name).read_text("utf-8"))


def test_web_post_list_aweme_is_read_with_every_file_and_its_codec() -> None:
    aweme = _load("someapi_aweme_post_list.json")["aweme_list"][0]
    post = douyin.parse_detail({"status_code": 0, "aweme_detail": aweme}, aweme="7188795449468259623")
    assert (post.post_id, post.deleted, post.url) == (
        "7188795449468259623", False, "https://www.douyin.com/video/7188795449468259623")
    assert post.author is not None and (post.author.id, post.author.name) == ("3734384759022542", "𝐻𝑒𝑎𝑙𝑒𝑟★")
    assert post.created_at == "2023-01-15T08:38:06Z"  # create_time 1673771886
    assert post.text == "艾特身边最像它的人来看"
    assert (post.metrics.likes, post.metrics.comments, post.metrics.shares) == (48559, 18165, 41916)
    [video, cover] = post.media
    assert (video.kind, video.width, video.height, video.duration) == ("video", 1080, 1440, 13.095)
    # video.cover (720×720, as large as origin_cover): url_list[0] is a centre crop
    # (~tplv-dy-cropcenter:323:430), url_list[1:] the original on three hosts; the original comes first.
    raw_cover = aweme["video"]["cover"]
    assert (cover.kind, cover.key, cover.cover_of) == ("image", "cover:7188795449468259623",
                                                       "video:7188795449468259623")
    assert (cover.width, cover.height) == (raw_cover["width"], raw_cover["height"]) == (720, 720)
    assert [cover.url, *cover.alternates] == [*raw_cover["url_list"][1:], raw_cover["url_list"][0]]
    assert "cover" not in post.extra
    # bit_rate[]: 8 H.264 files (url_key …_h264_…, is_bytevc1 0), then 3 ByteVC1 ones (…_bytevc1_…, is_bytevc1 1);
    # play_addr_h264 is bit_rate[1]'s file and play_addr_265 bit_rate[9]'s: not listed twice.
    got = [(r["height"], r["codec"], r["bandwidth"], r["size"]) for r in video.renditions or []]
    assert got == [
        (1440, "avc1", 2012897, 3265927), (1440, "avc1", 1991612, 3219940), (768, "avc1", 1340040, 2174216),
        (960, "avc1", 1317855, 2138221), (960, "avc1", 1267427, 2049113), (768, "avc1", 1151860, 1862270),
        (768, "avc1", 831739, 1361454), (768, "avc1", 792704, 1281605), (960, "hevc", 722568, 1168212),
        (768, "hevc", 645024, 1042843), (768, "hevc", 557916, 902011)]
    assert [r["url"] for r in video.renditions or []] == [
        e["play_addr"]["url_list"][0] for e in aweme["video"]["bit_rate"]]


def _search_awemes() -> list[dict[str, Any]]:
    return [card["aweme_info"] for card in _load("tikhub_app_general_search_v1.json")["data"]
            if isinstance(card.get("aweme_info"), dict)]


@pytest.mark.parametrize("aweme", _search_awemes(), ids=lambda a: a["aweme_id"])
def test_app_search_aweme_fields(aweme: dict[str, Any]) -> None:
    post = douyin.aweme_to_post(aweme)
    assert post.post_id == aweme["aweme_id"] and not post.deleted
    assert post.author is not None
    assert (post.author.id, post.author.name) == (aweme["author"]["uid"], aweme["author"]["nickname"])
    assert post.text == aweme["desc"]
    stats = aweme["statistics"]
    assert (post.metrics.likes, post.metrics.comments, post.metrics.shares) == (
        stats["digg_count"], stats["comment_count"], stats["share_count"])
    if aweme["aweme_type"] == 68:
        images = [m for m in post.media if m.kind == "image"]
        # images[].url_list[0] is the full-size picture (…:{width}:{height}:q80.heic); download_url_list is
        # watermarked ("-water") and never used.
        assert [(m.url, m.width, m.height) for m in images] == [
            (i["url_list"][0], i["width"], i["height"]) for i in aweme["images"]]
        # No image of these albums has a clip (no images[].video), and an album's video.cover (its first
        # picture again) is no cover of a video.
        assert not any("video" in i for i in aweme["images"])
        assert [m.kind for m in post.media if m.kind != "audio"] == ["image"] * len(aweme["images"])
        assert all("water" not in u for m in images for u in [m.url, *m.alternates])
        assert post.url.endswith(f"/note/{aweme['aweme_id']}")


def test_app_search_times_are_utc() -> None:
    by_id = {a["aweme_id"]: douyin.aweme_to_post(a) for a in _search_awemes()}
    assert len(by_id) == 16
    assert by_id["7565738211130035491"].created_at == "2025-10-30T10:00:00Z"  # create_time 1761818400
    assert by_id["7584769166932233472"].created_at == "2025-12-17T10:18:26Z"  # 1765966706


@pytest.mark.parametrize("aweme", [a for a in _search_awemes() if a["aweme_type"] == 0],
                         ids=lambda a: a["aweme_id"])
def test_app_search_video_codecs_are_the_platforms_own(aweme: dict[str, Any]) -> None:
    post = douyin.aweme_to_post(aweme)
    [video, cover] = post.media
    video_raw = aweme["video"]
    # The cover is video.cover (the ~noop original, 653×871 to 2160×3840), larger than origin_cover (a 360p
    # resize): its url_list as listed, named after the video.
    assert video_raw["cover"]["width"] * video_raw["cover"]["height"] > (
        video_raw["origin_cover"]["width"] * video_raw["origin_cover"]["height"])
    assert (cover.key, cover.cover_of, cover.width, cover.height) == (
        f"cover:{aweme['aweme_id']}", f"video:{aweme['aweme_id']}", video_raw["cover"]["width"],
        video_raw["cover"]["height"])
    assert [cover.url, *cover.alternates] == video_raw["cover"]["url_list"]
    # Each file's codec is the word in its url_key; bit_rate[] first, then play_addr_h264 and play_addr_265
    # (play_addr is the play_addr_h264 file again).
    files = [e["play_addr"] for e in video_raw["bit_rate"]]
    files += [video_raw["play_addr_h264"], video_raw["play_addr_265"]]
    expected = [(f["url_list"][0], f["height"], URL_KEY_CODEC[f["url_key"].split("_")[1]]) for f in files]
    assert [(r["url"], r["height"], r["codec"]) for r in video.renditions or []] == expected
    assert video_raw["play_addr"]["url_key"] == video_raw["play_addr_h264"]["url_key"]
    # The ByteVC2 files say is_bytevc1 = is_h265 = 2: never labelled H.264.
    assert all(r["codec"] == "bytevc2" for r, e in zip(video.renditions or [], video_raw["bit_rate"])
               if e["is_bytevc1"] == 2)
    # A preference for H.264 gets the H.264 file when it is as tall as the tallest ByteVC2 one.
    chosen = select(manifest_from_renditions(video.renditions or []), max_height=4096,
                    codec_preference=["avc1"]).video
    if video_raw["play_addr_h264"]["height"] == max(f["height"] for f in files):
        assert chosen.fetch.urls[0] == video_raw["play_addr_h264"]["url_list"][0]


def test_app_search_counts_35_bytevc2_renditions_none_labelled_avc1() -> None:
    renditions = [r for a in _search_awemes() if a["aweme_type"] == 0
                  for r in douyin.aweme_to_post(a).media[0].renditions or []]
    bytevc2 = [r for r in renditions if r["codec"] == "bytevc2"]
    assert len(bytevc2) == 35  # of the 37 bit_rate[] files (2 are ByteVC1)
    assert sum(r["codec"] == "avc1" for r in renditions) == 8  # one play_addr_h264 per video


def test_search_answer_is_refused_by_the_detail_reader() -> None:
    payload = _load("tikhub_app_general_search_v1.json")
    with pytest.raises(ValueError, match="not a detail answer"):
        douyin.parse_detail(payload, aweme="7565738211130035491")
    with pytest.raises(ValueError, match="not a detail answer"):
        douyin.parse_detail(_load("someapi_aweme_post_list.json"), aweme="7188795449468259623")
