"""Weibo comment threads, tested from fixture files: tests/fixtures/weibo_comments/<case>/{input.json,
expected.json}. ``hotflow_*`` cases are a post's comments (post 5104383848730501), ``child_*`` the replies of
comment 5230000000000001."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import weibo_comments
from mediacrawler.parsers._common import PlatformError
from tests.parser_cases import assert_case, case_names

FIXTURES = Path(__file__).parent / "fixtures" / "weibo_comments"
CASES = case_names("weibo_comments", marker="input.json")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SOURCE = Source(spider="weibo", job="weibo-uid-7365120894", page=None, cursor=None)
POST = "5104383848730501"
ROOT = "5230000000000001"


def run_case(case_dir: Path) -> Any:
    payload = json.loads((case_dir / "input.json").read_bytes())
    try:
        if case_dir.name.startswith("child_"):
            page = weibo_comments.parse_hotflow_child(payload, post_id=POST, root_id=ROOT, source=SOURCE,
                                                      fetched_at="2026-11-29T12:00:00Z", now=NOW)
        else:
            page = weibo_comments.parse_hotflow(payload, post_id=POST, source=SOURCE,
                                                fetched_at="2026-11-29T12:00:00Z", now=NOW)
    except PlatformError as e:
        return {"error": e.kind}
    return dataclasses.asdict(page)


def test_at_least_six_cases() -> None:
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


def test_cursor_round_trip() -> None:
    assert weibo_comments.comment_cursor(139293859600000, 1) == "139293859600000:1"
    assert weibo_comments.split_cursor("139293859600000:1") == ("139293859600000", "1")
    assert weibo_comments.split_cursor(None) == ("0", "0")
    assert weibo_comments.comment_cursor(0, 0) is None and weibo_comments.comment_cursor("x", 0) is None
