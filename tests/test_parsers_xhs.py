"""XiaoHongShu parser, tested from fixture files: tests/fixtures/xhs/<case>/{input.html, meta.json,
expected.json}.

input.html is the page as www.xiaohongshu.com renders it (``window.__INITIAL_STATE__`` as a JavaScript literal with
bare ``undefined`` and ``\\u002F`` escapes); meta.json says which page it is (a note or a profile) and its id;
expected.json is the Post (or profile, or error) the parser must make of it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import xhs
from mediacrawler.parsers._common import PlatformError
from tests.parser_cases import assert_case, case_names

FIXTURES = Path(__file__).parent / "fixtures" / "xhs"
CASES = case_names("xhs", marker="input.html")
SOURCE = Source(spider="xhs", job="xhs-note-test", page=1, cursor=None)
FETCHED = "2026-11-29T12:00:00Z"


def run_case(case_dir: Path) -> Any:
    meta = json.loads((case_dir / "meta.json").read_text("utf-8"))
    html = (case_dir / "input.html").read_text("utf-8")
    out: dict[str, Any] = {"classified": xhs.classify_page(200, html.encode("utf-8"))}
    try:
        if meta["kind"] == "profile":
            profile = xhs.parse_profile_page(html, user_id=meta["id"])
            out["profile"] = dataclasses.asdict(profile)
            out["cards"] = [dataclasses.asdict(xhs.post_from_card(n.card, note_id=n.note_id, source=SOURCE,
                                                                 fetched_at=FETCHED)) for n in profile.notes]
        else:
            out["post"] = dataclasses.asdict(xhs.parse_note_page(html, note_id=meta["id"], source=SOURCE,
                                                                 fetched_at=FETCHED))
    except PlatformError as e:
        out["error"] = {"kind": e.kind, "message": e.message, "code": e.code}
    except ValueError as e:
        out["error"] = {"kind": "ValueError", "message": str(e)}
    return out


def test_at_least_six_cases() -> None:
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


def test_inputs_are_javascript_literals_not_json() -> None:
    html = (FIXTURES / "note_images" / "input.html").read_text("utf-8")
    literal = html.split("window.__INITIAL_STATE__=", 1)[1].split("</script>", 1)[0]
    assert ":undefined" in literal and "\\u002F" in literal
    with pytest.raises(ValueError):
        json.loads(literal)
    state = xhs.initial_state(html)
    assert state["feed"]["undefinedValue"] is None  # a bare undefined is None, never the string "undefined"
    assert "\"undefined\"" not in json.dumps(state)  # no value is the string "undefined"
    note = state["note"]["noteDetailMap"]["64a1b2c3d4e5f60718293a4b"]["note"]
    assert note["imageList"][0]["urlDefault"].startswith("http://sns-webpic-qc.xhscdn.com/202611281000/")


def test_images_take_the_default_scene_first_and_keep_the_preview() -> None:
    post = run_case(FIXTURES / "note_images")["post"]
    first = post["media"][0]
    assert first["url"].endswith("1040g2sg31a0000000000001!nd_dft_wlteh_webp_3")
    assert first["alternates"] == [first["url"].replace("nd_dft", "nd_prv")]
    assert [m["key"] for m in post["media"]] == ["64a1b2c3d4e5f60718293a4b:0", "64a1b2c3d4e5f60718293a4b:1"]
    assert post["metrics"]["likes"] == 12_000 and post["metrics"]["comments"] == 100_000
    assert post["created_at"] == "2025-11-28T10:00:00Z"


def test_video_prefers_h264_and_lists_h265_after_it() -> None:
    post = run_case(FIXTURES / "note_video")["post"]
    video = [m for m in post["media"] if m["kind"] == "video"][0]
    assert [(r["codec"], r["height"]) for r in video["renditions"]] == [("avc1", 1080), ("avc1", 720),
                                                                       ("hevc", 1080)]
    assert all(len(r["alternates"]) == 2 for r in video["renditions"])
    assert video["url"] == video["renditions"][0]["url"] and video["duration"] == 15.0


def test_a_note_the_page_says_is_gone_is_a_record_a_page_without_it_is_a_failed_page() -> None:
    gone = run_case(FIXTURES / "note_unavailable")["post"]
    assert gone["deleted"] is True and gone["extra"]["unavailable"] == "当前笔记暂时无法浏览 (code -510001)"
    # An empty noteDetailMap entry with state "success" says nothing of the note: not a deleted post.
    missing = run_case(FIXTURES / "note_missing")
    assert "post" not in missing and missing["error"]["kind"] == "ValueError"
    assert "holds no note 64a1b2c3d4e5f60718293a4f" in missing["error"]["message"]


def test_code_300012_is_rate_limited_not_gone() -> None:
    out = run_case(FIXTURES / "note_rate_limited")
    assert out["classified"] == "rate_limited" and out["error"]["kind"] == "rate_limited"
    assert out["error"]["code"] == 300012


@pytest.mark.parametrize(("status", "body", "kind"), [
    (461, b"", "rate_limited"),
    (200, b'{"code":300012,"success":false,"msg":"IP\\u5b58\\u5728\\u98ce\\u9669"}', "rate_limited"),
    (200, b'{"code":-100,"success":false,"msg":"login"}', "login_required"),
    (200, b'{"code":0,"success":true,"data":{}}', "ok"),
    (200, b"<html>no state</html>", "invalid"),
    (404, b"<html>not found</html>", "ok"),
])
def test_classify_page(status: int, body: bytes, kind: str) -> None:
    assert xhs.classify_page(status, body) == kind


@pytest.mark.parametrize(("text", "expected"), [
    ("64a1b2c3d4e5f60718293a4b", ("64a1b2c3d4e5f60718293a4b", None, None)),
    ("https://www.xiaohongshu.com/explore/64a1b2c3d4e5f60718293a4b?xsec_token=AB%2Bcd%3D&xsec_source=pc_feed",
     ("64a1b2c3d4e5f60718293a4b", "AB+cd=", "pc_feed")),
    ("https://www.xiaohongshu.com/discovery/item/64a1b2c3d4e5f60718293a4b?xsec_token=XY",
     ("64a1b2c3d4e5f60718293a4b", "XY", None)),
    ("https://www.xiaohongshu.com/user/profile/5f0e1d2c3b4a596877665544/64a1b2c3d4e5f60718293a4b",
     ("64a1b2c3d4e5f60718293a4b", None, None)),
])
def test_note_ref(text: str, expected: tuple[str, str | None, str | None]) -> None:
    assert xhs.note_ref(text) == expected


@pytest.mark.parametrize("text", ["64A1B2C3D4E5F60718293A4B", "abc", "https://evil.test/explore/64a1b2c3d4e5f60718293a4b",
                                  "https://www.xiaohongshu.com/explore/../64a1b2c3d4e5f60718293a4b/x",
                                  "https://www.xiaohongshu.com/explore/64a1b2c3d4e5f60718293a4b?xsec_token=a%20b",
                                  "javascript:alert(1)"])
def test_note_ref_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        xhs.note_ref(text)


def _state_page(body: str) -> str:
    return f"<html><script>window.__INITIAL_STATE__={body}</script></html>"


def test_a_state_of_tiny_objects_past_the_cap_is_refused_before_parsing() -> None:
    page = _state_page('{"note":{"x":[' + ",".join(["{}"] * (xhs.MAX_STATE_OBJECTS + 1)) + "]}}")
    with pytest.raises(xhs.StateTooLarge, match=f"objects, more than {xhs.MAX_STATE_OBJECTS}"):
        xhs.initial_state(page)
    assert xhs.classify_page(200, page.encode()) == "ok"  # not "invalid": a retry would bring the same page
    with pytest.raises(xhs.StateTooLarge, match="characters, more than"):
        xhs.initial_state(_state_page('{"a":"' + "x" * xhs.MAX_STATE_BYTES + '"}'))


def test_the_state_of_a_page_is_parsed_once_for_the_middleware_and_the_spider() -> None:
    page = _state_page('{"note":{"serverRequestInfo":{"state":"success"}}}')
    xhs._parsed_state.cache_clear()
    xhs.classify_page(200, page.encode())
    xhs.initial_state(page)
    assert xhs._parsed_state.cache_info().misses == 1 and xhs._parsed_state.cache_info().hits == 1


def test_a_spider_page_past_the_state_cap_is_a_failed_page_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    from scrapy.http import HtmlResponse, Request

    from mediacrawler.spiders.xhs import XhsSpider
    from tests.utils import project_crawler

    spider = XhsSpider.from_crawler(project_crawler(XhsSpider), note="656038c486c2e82e442b3c58")
    body = _state_page('{"note":{"x":[' + ",".join(["{}"] * (xhs.MAX_STATE_OBJECTS + 1)) + "]}}").encode()
    request = Request(spider.listing_url(1, None), meta={"mc_page": 1})
    with caplog.at_level("ERROR"):
        list(spider.parse_listing(HtmlResponse(request.url, body=body, request=request, encoding="utf-8")))
    assert spider.job_state.pages_failed == 1
    assert any("page 1 failed for good: unparseable listing: window.__INITIAL_STATE__ of" in r.getMessage()
               for r in caplog.records)
