"""Facebook parser, tested from fixture files: tests/fixtures/facebook/<case>/{input.json, expected.json}.

input.json is the raw body as graph.facebook.com sends it (``\\/`` escaping included; status.json holds the HTTP
status when it is not 200); expected.json is the Page (or error kind and safe message, or video source) the
parser must make of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import facebook
from mediacrawler.parsers._common import Page, PlatformError
from tests.parser_cases import assert_case, case_names, page_record

FIXTURES = Path(__file__).parent / "fixtures" / "facebook"
CASES = case_names("facebook", marker="input.json")
SOURCE = Source(spider="facebook", job="facebook-page-100000000000001", page=1, cursor=None)
FETCHED = "2026-11-29T12:00:00Z"
TOKEN = "EAAJsandboxFAKEtokenZC4ZBxyzQ0ZD"


def load(case_dir: Path) -> tuple[Any, int]:
    raw = (case_dir / "input.json").read_bytes()
    try:
        payload = json.loads(raw)
    except ValueError:  # an HTML error page
        payload = None
    status_file = case_dir / "status.json"
    return payload, int(status_file.read_text()) if status_file.exists() else 200


def run_case(case_dir: Path) -> Any:
    payload, status = load(case_dir)
    try:
        facebook.raise_for_error(payload, status)
        if case_dir.name.startswith("video_record"):
            post = facebook.post_from_video_node(payload, "500000000000004", source=SOURCE, fetched_at=FETCHED)
            return page_record(Page(posts=[post], is_last=True))
        if case_dir.name.startswith("video_node"):
            source, length = facebook.parse_video_node(payload)
            return {"source": source, "length": length}
        page = facebook.parse_posts(payload, source=SOURCE, fetched_at=FETCHED)
    except PlatformError as e:
        return {"error": e.kind, "message": e.message, "code": e.code}
    return {**page_record(page), "next_params": facebook.next_request_params(payload)}


def test_at_least_eight_cases() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


@pytest.mark.parametrize("case", CASES)
def test_no_token_in_anything_the_parser_returns(case: str) -> None:
    assert TOKEN not in json.dumps(run_case(FIXTURES / case), ensure_ascii=False)
    assert "access_token" not in json.dumps(run_case(FIXTURES / case), ensure_ascii=False)


def test_inputs_are_graph_escaped() -> None:
    raw = (FIXTURES / "posts_mixed" / "input.json").read_bytes()
    assert b"\\/" in raw and b"\\u" in raw and raw.isascii()


def test_incomplete_post_completed_from_its_video_node() -> None:
    page = facebook.parse_posts(load(FIXTURES / "posts_mixed")[0], source=SOURCE, fetched_at=FETCHED)
    raw = page.incomplete["100000000000001_1004"]
    source, length = facebook.parse_video_node(load(FIXTURES / "video_node")[0])
    post = facebook.post_from_raw(raw, source=SOURCE, fetched_at=FETCHED,
                                  video_sources={"500000000000004": (source, length)})
    assert [(m.kind, m.key, m.url, m.duration) for m in post.media][0] == (
        "video", "video:500000000000004", source, 4.037)
    assert [(m.kind, m.key, m.cover_of) for m in post.media][1:] == [
        ("image", "cover:500000000000004", "video:500000000000004")]
    assert post.url == "https://www.facebook.com/100000000000001/posts/pfbid01004abcDEF/"
    assert "videos_unavailable" not in post.extra
    # A video whose node gave nothing: the record stays valid, the video is named as unavailable.
    post = facebook.post_from_raw(raw, source=SOURCE, fetched_at=FETCHED, video_sources={})
    # Its cover is still the post's picture of it.
    assert [m.key for m in post.media] == ["cover:500000000000004"]
    assert post.extra["videos_unavailable"] == ["500000000000004"]


def test_secrets_given_are_redacted_from_any_message() -> None:
    secret = "my-not-EAA-shaped-secret"
    kind, message = facebook.classify_error({"error": {"code": 1, "message": f"bad {secret} here"}}, 500,
                                            secrets=[secret])
    assert kind == "error" and secret not in message
    kind, message = facebook.classify_error(
        {"error": {"code": 100, "message": "Invalid parameter access_token=abc&x=1"}}, 400)
    assert "abc" not in message


@pytest.mark.parametrize(("status", "kind"), [(200, "ok"), (404, "not_found"), (429, "rate_limited"),
                                              (401, "login_required"), (503, "error")])
def test_status_without_an_error_object(status: int, kind: str) -> None:
    assert facebook.classify_error({"data": []} if status == 200 else None, status)[0] == kind


def test_strip_token_keeps_the_rest_byte_for_byte() -> None:
    url = ("https://graph.facebook.com/v19.0/1/posts?access_token=EAAJabc%3D&pretty=0&fields=id%2Cmessage"
           "&limit=4&appsecret_proof=ff&after=QVFI")
    assert facebook.strip_token(url) == ("https://graph.facebook.com/v19.0/1/posts?pretty=0&fields=id%2Cmessage"
                                         "&limit=4&after=QVFI")
    assert facebook.strip_token("https://x.test/a") == "https://x.test/a"


def test_unwrap_link() -> None:
    shim = "https://l.facebook.com/l.php?u=https%3A%2F%2Fa.test%2Fp%3Fq%3D1%26fbclid%3DX&h=1"
    assert facebook.unwrap_link(shim) == "https://a.test/p?q=1"
    assert facebook.unwrap_link("https://a.test/direct") == "https://a.test/direct"
    assert facebook.unwrap_link("https://l.facebook.com/l.php?u=file%3A%2F%2F%2Fetc%2Fpasswd") is None
    assert facebook.unwrap_link(["x"]) is None
