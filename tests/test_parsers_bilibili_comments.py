"""Bilibili replies, tested from fixture files: tests/fixtures/bilibili_comments/<case>/{input.json,
expected.json}. ``main_*`` cases are a video's replies (``main_first`` its first page), ``thread_*`` the replies
of reply 9001."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import bilibili_comments
from mediacrawler.parsers._common import PlatformError
from tests.parser_cases import assert_case, case_names

FIXTURES = Path(__file__).parent / "fixtures" / "bilibili_comments"
CASES = case_names("bilibili_comments", marker="input.json")
SOURCE = Source(spider="bilibili", job="bilibili-bvid-BV1Sbx411A01", page=None, cursor=None)
POST = "BV1Sbx411A01"


def run_case(case_dir: Path) -> Any:
    payload = json.loads((case_dir / "input.json").read_bytes())
    try:
        if case_dir.name.startswith("thread_"):
            page = bilibili_comments.parse_thread(payload, post_id=POST, root_id="9001", source=SOURCE,
                                                  fetched_at="2026-11-29T12:00:00Z")
        else:
            page = bilibili_comments.parse_main(payload, post_id=POST, first_page=case_dir.name == "main_first",
                                                source=SOURCE, fetched_at="2026-11-29T12:00:00Z")
    except PlatformError as e:
        return {"error": e.kind, "code": e.code}
    return dataclasses.asdict(page)


def test_at_least_six_cases() -> None:
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


def test_pagination_str_carries_the_offset_as_given() -> None:
    offset = (FIXTURES / "main_first" / "expected.json").read_text("utf-8")
    cursor = json.loads(offset)["next_cursor"]
    assert json.loads(bilibili_comments.pagination_str(cursor)) == {"offset": cursor}
    assert bilibili_comments.pagination_str(None) == '{"offset":""}'


def test_the_pinned_reply_is_emitted_once_over_two_pages() -> None:
    ids = [c["comment_id"] for case in ("main_first", "main_last") for c in run_case(FIXTURES / case)["comments"]]
    assert ids.count("8001") == 1 and ids.count("8002") == 1 and len(ids) == len(set(ids))
