"""Graph comment edges, tested from fixture files: tests/fixtures/facebook_comments/<case>/{input.json,
expected.json}. ``stream_*`` cases are pages of post 100000000000001_1001's edge with ``filter=stream`` (read in
order, the roots of the first carried into the second); ``replies_of_comment`` is ``/1001_2001/comments``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Source
from mediacrawler.parsers import facebook_comments
from mediacrawler.parsers._common import PlatformError
from tests.parser_cases import assert_case, case_names

FIXTURES = Path(__file__).parent / "fixtures" / "facebook_comments"
CASES = case_names("facebook_comments", marker="input.json")
SOURCE = Source(spider="facebook", job="facebook-page-100000000000001", page=None, cursor=None)
POST = "100000000000001_1001"
TOKEN = "EAAJsandboxFAKEtokenZC4ZBxyzQ0ZD"


def _parse(case: str, **kwargs: Any) -> Any:
    payload = json.loads((FIXTURES / case / "input.json").read_bytes())
    return facebook_comments.parse_comments(payload, post_id=POST, source=SOURCE, fetched_at="2026-11-29T12:00:00Z",
                                            secrets=(TOKEN,), **kwargs)


def run_case(case_dir: Path) -> Any:
    try:
        if case_dir.name == "replies_of_comment":
            page = _parse(case_dir.name, root_id="1001_2001")
        elif case_dir.name == "stream_last":
            first = _parse("stream_first")
            page = _parse(case_dir.name, roots={c.comment_id: c.root_id for c in first.comments})
        else:
            page = _parse(case_dir.name)
    except PlatformError as e:
        return {"error": e.kind, "code": e.code}
    return dataclasses.asdict(page)


def test_at_least_six_cases() -> None:
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    assert_case(FIXTURES / case, run_case)


@pytest.mark.parametrize("case", CASES)
def test_no_token_in_anything_the_parser_returns(case: str) -> None:
    out = json.dumps(run_case(FIXTURES / case), ensure_ascii=False)
    assert TOKEN not in out and "access_token" not in out


def test_the_last_page_still_gives_its_end_cursor() -> None:
    # Where a re-run starts (incremental): paging.cursors.after of the last page, not paging.next.
    last = run_case(FIXTURES / "stream_last")
    assert last["is_last"] and last["next_cursor"] is None and last["end_cursor"] == "QVFIUmE"
    assert run_case(FIXTURES / "empty")["end_cursor"] is None
