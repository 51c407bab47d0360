"""Weibo parser, tested from fixture files: tests/fixtures/weibo/<case>/{input.json, expected.json}.

input.json is the raw payload as m.weibo.cn sends it (PHP-style escaping included); expected.json is the Page (or
the error kind, or the long text) the parser must make of it.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import weibo
from mediacrawler.parsers._common import PlatformError
from tests.parser_cases import assert_case, case_names, page_record

FIXTURES = Path(__file__).parent / "fixtures" / "weibo"
CASES = case_names("weibo", marker="input.json")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SOURCE = Source(spider="weibo", job="weibo-uid-7365120894", page=2, cursor="111")


def run_case(case_dir: Path) -> Any:
    payload = json.loads((case_dir / "input.json").read_bytes())
    if case_dir.name.startswith("extend_"):
        return {"long_text": weibo.parse_long_text(payload)}
    if case_dir.name.startswith("show_"):  # /statuses/show?id=
        try:
            mblog = weibo.parse_show(payload)
        except PlatformError as e:
            return {"error": e.kind}
        post = (None if mblog is None
                else weibo.parse_mblog(mblog, source=SOURCE, fetched_at="2026-11-29T12:00:00Z", now=NOW))
        return {"post": None if post is None else dataclasses.asdict(post)}
    try:
        page = weibo.parse_index(payload, source=SOURCE, fetched_at="2026-11-29T12:00:00Z", now=NOW)
    except PlatformError as e:
        return {"error": e.kind}
    return page_record(page)


def test_at_least_eight_cases() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


def test_inputs_are_php_escaped() -> None:
    raw = (FIXTURES / "timeline_basic" / "input.json").read_bytes()
    assert b"\\/" in raw and b"\\u" in raw
    assert raw.isascii()


class _Tripwire(dict):  # type: ignore[type-arg]
    """An mblog whose ``text`` access fails the way an unforeseen shape would."""

    def get(self, key: Any, default: Any = None) -> Any:
        if key == "text":
            raise TypeError("unforeseen shape")
        return super().get(key, default)


def test_a_post_the_parser_trips_over_is_counted_and_the_page_keeps_the_others() -> None:
    good = {"id": "1", "bid": "b1", "text": "ok", "user": {"id": 5}}
    cards = [{"card_type": 9, "mblog": _Tripwire(id="2", text="x")}, {"card_type": 9, "mblog": good},
             {"card_type": 9, "mblog": {"text": "no id"}}]
    payload = {"ok": 1, "data": {"cards": cards}}
    page = weibo.parse_index(payload, source=SOURCE, fetched_at="2026-11-29T12:00:00Z", now=NOW)
    assert [p.post_id for p in page.posts] == ["1"]
    assert page.skipped == {"malformed_mblog": 1, "invalid_mblog": 1}


def test_a_mid_says_when_its_post_was_written() -> None:
    # 4387933362623405 is a post of 2019-06-27 (Beijing) in a captured timeline (tests/fixtures/real/weibo/).
    assert weibo.mid_time("4387933362623405") == datetime(2019, 6, 27, 15, 11, 40, tzinfo=UTC)
    assert weibo.mid_time("12") is None and weibo.mid_time("9" * 19) is None and weibo.mid_time("abc") is None
    assert weibo.mid_time(None) is None and weibo.mid_time("../1") is None
