"""Bilibili parser, tested from fixture files: tests/fixtures/bilibili/<case>/{input.json, expected.json}, plus
WBI signing against vectors computed here from the documented algorithm.

input.json is the raw payload as api.bilibili.com sends it (Go's ``\\u0026`` escapes included); the case name's
prefix says which parser reads it (``arc_search_``, ``search_``, ``view_``, ``playurl_``, ``nav_``, ``player_``,
``subtitle_``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import bilibili
from mediacrawler.parsers._common import Page, PlatformError
from tests.parser_cases import assert_case, case_names, page_record

FIXTURES = Path(__file__).parent / "fixtures" / "bilibili"
CASES = case_names("bilibili", marker="input.json")
SOURCE = Source(spider="bilibili", job="bilibili-mid-2", page=1)
FETCHED = "2026-11-30T12:00:00Z"


def _page(page: Page) -> dict[str, Any]:
    # Bilibili's fixtures record the incomplete posts' raw objects, not only their ids.
    return {**page_record(page), "incomplete": page.incomplete}


def run_case(case_dir: Path) -> Any:
    payload = json.loads((case_dir / "input.json").read_bytes())
    name = case_dir.name
    try:
        if name.startswith("arc_search"):
            return _page(bilibili.parse_arc_search(payload))
        if name.startswith("search_"):
            return _page(bilibili.parse_search(payload))
        if name.startswith("view_"):
            return {"post": dataclasses.asdict(bilibili.parse_view(payload, source=SOURCE, fetched_at=FETCHED))}
        if name.startswith("playurl_"):
            return {"renditions": bilibili.parse_playurl(payload), "duration": bilibili.playurl_duration(payload)}
        if name.startswith("player_"):
            return bilibili.parse_player(payload)
        if name.startswith("subtitle_"):
            return {"srt": bilibili.subtitle_srt((case_dir / "input.json").read_bytes()).decode("utf-8")}
        if name.startswith("nav_"):
            keys = bilibili.wbi_keys(payload)
            return {"keys": list(keys), "mixin_key": bilibili.mixin_key(*keys)}
    except PlatformError as e:
        return {"error": e.kind, "code": e.code}
    raise AssertionError(f"no parser for case {name}")


def test_at_least_eight_cases() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


def test_inputs_use_go_escapes() -> None:
    raw = (FIXTURES / "playurl_dash" / "input.json").read_bytes()
    assert b"\\u0026" in raw and b"&" not in raw
    assert b"\\u003cem" in (FIXTURES / "search_keyword" / "input.json").read_bytes()


# ---------------------------------------------------------------------------------------------- WBI


def _reference_sign(params: dict[str, str], img_key: str, sub_key: str, wts: int) -> str:
    """The documented algorithm, written out again independently of the parser module."""
    table = [46, 47, 18, 2, 53, 8, 23, 32, 15, 50, 10, 31, 58, 3, 45, 35, 27, 43, 5, 49, 33, 9, 42, 19, 29, 28, 14,
             39, 12, 38, 41, 13, 37, 48, 7, 16, 24, 55, 40, 61, 26, 17, 0, 1, 60, 51, 30, 4, 22, 25, 54, 21, 56, 59,
             6, 63, 57, 62, 11, 36, 20, 34, 44, 52]
    key = "".join((img_key + sub_key)[i] for i in table)[:32]
    items = sorted({**params, "wts": str(wts)}.items())
    query = "&".join(f"{quote(k, safe='')}={quote(''.join(c for c in v if c not in chr(33) + chr(39) + '()*'), safe='')}"
                     for k, v in items)
    return hashlib.md5((query + key).encode()).hexdigest()


IMG, SUB = "7cd084941338484aae1ad9425b84077c", "4932caff0ff746eab6f01bf08b70ac45"


def test_mixin_key_published_vector() -> None:
    assert bilibili.mixin_key(IMG, SUB) == "ea1db124af3c7062474693fa704f4ff8"


def test_sign_params_published_vector() -> None:
    signed = bilibili.sign_params({"foo": "114", "bar": "514", "zab": 1919810}, bilibili.mixin_key(IMG, SUB),
                                  wts=1702204169)
    assert signed == {"bar": "514", "foo": "114", "wts": "1702204169", "zab": "1919810",
                      "w_rid": "8f6f2b5b3d485fe1886cec6a0be8c5d4"}
    assert signed["w_rid"] == _reference_sign({"foo": "114", "bar": "514", "zab": "1919810"}, IMG, SUB, 1702204169)


def test_sign_params_strips_and_quotes_like_encode_uri_component() -> None:
    params = {"keyword": "猫 (cute)! it's*", "search_type": "video", "page": "2"}
    signed = bilibili.sign_params(params, bilibili.mixin_key(IMG, SUB), wts=1764400000)
    assert signed["keyword"] == "猫 cute its"  # what is sent is what was signed
    assert signed["w_rid"] == _reference_sign(params, IMG, SUB, 1764400000)
    # An old signature in the input is replaced, never signed over.
    again = bilibili.sign_params({**signed}, bilibili.mixin_key(IMG, SUB), wts=1764400000)
    assert again == signed


def test_wbi_keys_reject_unusable_nav() -> None:
    with pytest.raises(PlatformError) as e:
        bilibili.wbi_keys({"code": -101, "data": {"isLogin": False}})
    assert e.value.kind == "error"
    with pytest.raises(PlatformError) as e:
        bilibili.wbi_keys({"code": 0, "data": {"wbi_img": {"img_url": "https://x/bfs/wbi/short.png",
                                                            "sub_url": "https://x/bfs/wbi/" + SUB + ".png"}}})
    with pytest.raises(PlatformError) as e:
        bilibili.wbi_keys({"code": -352, "message": "风控校验失败"})
    assert e.value.kind == "rate_limited"
    with pytest.raises(ValueError):
        bilibili.mixin_key("abc", SUB)


# ------------------------------------------------------------------------------------------ helpers


@pytest.mark.parametrize(("value", "seconds"), [
    ("104:52", 6292), ("1:02:03", 3723), ("3:05", 185), ("00:59", 59), ("0:07", 7), (6292, 6292),
    ("", None), ("1:2:3:4", None), ("abc", None), (None, None), (True, None), (-1, None), ("12", 12),
])
def test_duration_seconds(value: Any, seconds: int | None) -> None:
    assert bilibili.duration_seconds(value) == seconds


@pytest.mark.parametrize(("payload", "kind"), [
    ({"code": 0, "data": {}}, "ok"), ({"code": "0"}, "ok"), ({"code": -352}, "rate_limited"),
    ({"code": -412}, "rate_limited"), ({"code": -101}, "login_required"), ({"code": -404}, "not_found"),
    ({"code": -403}, "not_found"), ({"code": 62002}, "not_found"), ({"code": 62004}, "not_found"),
    ({"code": -400}, "error"), ({"code": None}, "error"), ({"code": True}, "error"), ([], "error"), (None, "error"),
])
def test_classify_envelope(payload: Any, kind: str) -> None:
    assert bilibili.classify_envelope(payload) == kind


def test_playurl_caps_entries_and_drops_bad_urls() -> None:
    stream = {"id": 16, "baseUrl": "https://upos-sz-mirrorcos.bilivideo.com/x.m4s", "bandwidth": 1}
    payload = {"code": 0, "data": {"dash": {"video": [stream] * 1000, "audio": [
        {"id": 30216, "baseUrl": "javascript:alert(1)", "backupUrl": ["http://"]},
        {"id": 30216, "base_url": "https://host:notaport/a.m4s"}, "not an object"]}}}
    out = bilibili.parse_playurl(payload)
    assert len(out) == bilibili.MAX_RENDITIONS and all(r["kind"] == "video" for r in out)
    assert bilibili.parse_playurl({"code": 0, "data": {"dash": {"audio": payload["data"]["dash"]["audio"]}}}) == []
    # window.__playinfo__.data: the bare data object.
    assert bilibili.parse_playurl({"dash": {"video": [stream]}})[0]["url"] == stream["baseUrl"]
    with pytest.raises(PlatformError):
        bilibili.parse_playurl({"code": 0, "data": None})


def test_view_hostile_shapes_keep_what_is_usable() -> None:
    payload = {"code": 0, "data": {"bvid": "BV1GJ411x7h7", "owner": ["x"], "stat": "many", "pic": "javascript:x",
                                   "pubdate": "soon", "pages": [{"cid": "../x"}, {"cid": 5, "duration": "1:00"},
                                                                {"cid": 5}, "p"], "desc": ["x"]}}
    post = bilibili.parse_view(payload)
    assert post.author is None and post.created_at is None and post.text == ""
    assert [(m.kind, m.key, m.duration) for m in post.media] == [("video", "BV1GJ411x7h7:5", 60.0)]
    with pytest.raises(PlatformError):
        bilibili.parse_view({"code": 0, "data": {"bvid": ["x"]}})


def _durl_payload(n: int) -> dict[str, Any]:
    payload = json.loads((Path(__file__).parent / "fixtures" / "manifests" / "bilibili_durl.json").read_text())
    [entry] = payload["data"]["durl"]
    payload["data"]["durl"] = [dict(entry, order=k, length=1000 * k, size=100 * k,
                                    url=entry["url"].replace(".mp4", f"-{k}.mp4"), backup_url=[])
                               for k in range(n, 0, -1)]  # listed out of order: "order" decides
    return payload


def test_a_segmented_durl_is_one_rendition_with_its_segments_in_order() -> None:
    [rendition] = bilibili.parse_playurl(_durl_payload(3))
    assert rendition["kind"] == "progressive" and rendition["size"] == 600
    assert [s["length"] for s in rendition["segments"]] == [1000, 2000, 3000]
    assert [s["url"].rsplit("?", 1)[0][-6:] for s in rendition["segments"]] == ["-1.mp4", "-2.mp4", "-3.mp4"]
    assert rendition["url"] == rendition["segments"][0]["url"]
    # One durl file stays a plain progressive rendition; a segment without a usable URL leaves no rendition.
    [single] = bilibili.parse_playurl(_durl_payload(1))
    assert "segments" not in single
    broken = _durl_payload(3)
    broken["data"]["durl"][1]["url"] = "javascript:alert(1)"
    assert bilibili.parse_playurl(broken) == []


# ------------------------------------------------------------------------- subtitles, danmaku (extras)


@pytest.mark.parametrize("body", [b"{}", b'{"body": []}', b'{"body": [{"from": 1, "to": 2, "content": " "}]}',
                                  b"[1, 2]", b"<html>", b"\xff\xfe"])
def test_subtitle_srt_refuses_a_body_without_cues(body: bytes) -> None:
    with pytest.raises(ValueError):
        bilibili.subtitle_srt(body)


def _raw_deflate(data: bytes) -> bytes:
    import zlib

    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def test_inflate_danmaku_takes_raw_deflate_or_plain_xml_within_the_bound() -> None:
    xml = '<?xml version="1.0" encoding="UTF-8"?><i><chatid>1</chatid><d p="0.5,1,25">喵</d></i>'.encode()
    assert bilibili.inflate_danmaku(_raw_deflate(xml), max_bytes=len(xml)) == xml
    assert bilibili.inflate_danmaku(b"\n" + xml, max_bytes=len(xml) + 1) == b"\n" + xml  # inflated in transit
    with pytest.raises(ValueError, match="BILIBILI_DANMAKU_MAX_BYTES"):
        bilibili.inflate_danmaku(_raw_deflate(xml), max_bytes=len(xml) - 1)
    bomb = _raw_deflate(b"<i>" + b" " * 50_000_000 + b"</i>")  # 50 MB inflated from ~50 kB: never all in memory
    with pytest.raises(ValueError, match="over 1000 bytes"):
        bilibili.inflate_danmaku(bomb, max_bytes=1000)
    with pytest.raises(ValueError, match="neither XML nor raw deflate"):
        bilibili.inflate_danmaku(b"\x00garbage\xff" * 10, max_bytes=1000)


@pytest.mark.parametrize(("aid", "bvid"), [(170001, "BV17x411w7KC"), (455017605, "BV1Q541167Qg"),
                                           (882584971, "BV1mK4y1C7Bz"), (111298867365120, "BV1L9Uoa9EUx")])
def test_an_av_id_maps_to_its_bv_id(aid: int, bvid: str) -> None:
    # The pairs the public description of the mapping gives (bilibili-API-collect, docs/misc/bvid_desc.md).
    assert bilibili.aid_to_bvid(aid) == bvid


@pytest.mark.parametrize("aid", [0, -1, 1 << 51])
def test_what_is_no_av_id_is_refused(aid: int) -> None:
    with pytest.raises(ValueError, match="not an av id"):
        bilibili.aid_to_bvid(aid)


def test_the_bvid_argument_takes_av_ids_as_their_bv_ids() -> None:
    from mediacrawler.spiders.bilibili import BilibiliParams

    assert BilibiliParams(bvid="av170001, BV1Sbx411A01,BV17x411w7KC").bvid == "BV17x411w7KC,BV1Sbx411A01"
    with pytest.raises(ValueError, match="av170001"):
        BilibiliParams(bvid="BV1Sbx411A0")
