"""Bilibili parser on api.bilibili.com answers captured by others (tests/fixtures/real/bilibili/, provenance in
tests/fixtures/real/SOURCES.md). Expected values are read from the raw JSON (paths named), never from the parser.
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.parsers import bilibili

REAL = Path(__file__).parent / "fixtures" / "real" / "bilibili"
#: RFC 6381 prefixes of the DASH ``codecs`` → the records' codec label.
FAMILY = {"avc1": "avc1", "hev1": "hevc", "hvc1": "hevc", "av01": "av01"}


def _load(name: str) -> Any:
    return json.loads((REAL / name).read_text("utf-8"))


def _utc(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_scheme(url: str) -> str:
    return url.split("//", 1)[1]


@pytest.mark.parametrize("name", ["apicollect_arc_search_mid53456.json", "someapi_arc_search.json"])
def test_arc_search_lists_every_video_with_what_the_listing_says(name: str) -> None:
    payload = _load(name)
    page = bilibili.parse_arc_search(payload)
    vlist = payload["data"]["list"]["vlist"]
    assert page.posts == [] and list(page.incomplete) == [v["bvid"] for v in vlist]
    for v in vlist:
        entry = page.incomplete[v["bvid"]]
        assert (entry["aid"], entry["title"], entry["mid"], entry["author"]) == (
            v["aid"], v["title"], str(v["mid"]), v["author"])
        assert entry["created_at"] == _utc(v["created"]) and entry["views"] == v["play"]
        assert entry["comments"] == v["comment"]
    info = payload["data"]["page"]
    assert page.is_last == (info["pn"] * info["ps"] >= info["count"])


@pytest.mark.parametrize("name", ["apicollect_search_type_video.json", "someapi_search_type_video.json",
                                  "tikhub_search_type_video_naruto.json"])
def test_search_lists_every_video_with_its_plain_title(name: str) -> None:
    payload = _load(name)
    page = bilibili.parse_search(payload)
    videos = [r for r in payload["data"]["result"] if r.get("type", "video") == "video"]
    assert page.posts == [] and list(page.incomplete) == list(dict.fromkeys(v["bvid"] for v in videos))
    assert len(videos) in (1, 20, 42)
    for v in videos:
        entry = page.incomplete[v["bvid"]]
        # title: <em class="keyword">…</em> markup removed, entities decoded.
        assert entry["title"] == html.unescape(re.sub(r"<[^>]+>", "", v["title"]))
        assert (entry["mid"], entry["author"], entry["created_at"]) == (str(v["mid"]), v["author"],
                                                                        _utc(v["pubdate"]))
        assert entry["views"] == v["play"] and _no_scheme(entry["pic"]) == _no_scheme("https:" + v["pic"]
                                                                                       if v["pic"].startswith("//")
                                                                                       else v["pic"])
    assert page.is_last == (payload["data"]["page"] >= payload["data"]["numPages"])


@pytest.mark.parametrize(("name", "unwrap"), [("apicollect_view_BV117411r7R1.json", False),
                                              ("someapi_view.json", False),
                                              ("apicollect_view_detail_BV17x411w7KC.json", True),
                                              ("someapi_view_detail.json", True)])
def test_view_fields_and_parts(name: str, unwrap: bool) -> None:
    payload = _load(name)
    data = payload["data"]["View"] if unwrap else payload["data"]
    post = bilibili.parse_view({"code": 0, "message": "0", "data": data} if unwrap else payload)
    assert post.post_id == data["bvid"] and not post.deleted
    assert post.author is not None and (post.author.id, post.author.name) == (str(data["owner"]["mid"]),
                                                                              data["owner"]["name"])
    assert post.created_at == _utc(data["pubdate"]) and post.extra["title"] == data["title"]
    assert post.text == data["desc"] and post.extra["aid"] == data["aid"]
    stat = data["stat"]
    assert (post.metrics.likes, post.metrics.comments, post.metrics.shares, post.metrics.views) == (
        stat["like"], stat["reply"], stat["share"], stat["view"])
    assert [p["cid"] for p in post.extra["parts"]] == [str(p["cid"]) for p in data["pages"]]
    [cover] = [m for m in post.media if m.kind == "image"]
    assert _no_scheme(cover.url) == _no_scheme(data["pic"])
    # The cover names the first part's video, read from the payload's own bvid and first cid.
    assert cover.key == f"cover:{data['bvid']}" and cover.cover_of == f"{data['bvid']}:{data['pages'][0]['cid']}"
    assert len([m for m in post.media if m.kind == "video"]) == len(data["pages"])


@pytest.mark.parametrize("name", ["apicollect_playurl_dash_BV1rp4y1e745.json",
                                  "someapi_playurl_dash_fnval4048.json"])
def test_dash_playurl_every_stream_with_its_true_codec(name: str) -> None:
    payload = _load(name)
    dash = payload["data"]["dash"]
    got = bilibili.parse_playurl(payload)
    videos = [(r["height"], r["width"], r["codec"], r["quality"], r["url"]) for r in got if r["kind"] == "video"]
    assert sorted(videos) == sorted((v["height"], v["width"], FAMILY[v["codecs"].split(".")[0]], v["id"],
                                     v["baseUrl"]) for v in dash["video"])
    audio = [(r["quality"], r["codecs"], r["url"]) for r in got if r["kind"] == "audio"]
    assert sorted(audio) == sorted((a["id"], a["codecs"], a["baseUrl"]) for a in dash["audio"])
    assert bilibili.playurl_duration(payload) == payload["data"]["timelength"] / 1000


@pytest.mark.parametrize("name", ["apicollect_playurl_durl_BV1y7411Q7Eq.json", "someapi_playurl_html5.json"])
def test_single_file_durl_is_one_progressive_rendition(name: str) -> None:
    payload = _load(name)
    [durl] = payload["data"]["durl"]
    [rendition] = bilibili.parse_playurl(payload)
    assert (rendition["kind"], rendition["url"], rendition["size"], rendition["quality"]) == (
        "progressive", durl["url"], durl["size"], payload["data"]["quality"])
    assert rendition["alternates"] == (durl.get("backup_url") or [])


def test_segmented_durl_is_one_video_of_four_parts_not_four_alternatives() -> None:
    payload = _load("apicollect_playurl_durl_segmented.json")
    durl = payload["data"]["durl"]
    assert [d["order"] for d in durl] == [1, 2, 3, 4]
    try:
        got = bilibili.parse_playurl(payload)
    except ValueError:
        return  # refusing the shape with a reason is acceptable; reading its parts as alternatives is not
    progressive = [r for r in got if r["kind"] == "progressive"]
    assert len(progressive) == 1
    text = json.dumps(got)
    assert all(d["url"] in text for d in durl)  # every part kept, in one rendition
