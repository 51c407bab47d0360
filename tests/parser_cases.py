"""Loading and comparing the parser fixture cases of ``tests/test_parsers_<platform>.py`` (web-poet style:
``tests/fixtures/<platform>/<case>/{input…, expected.json}``, written by ``tests/fixtures/_make.py``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediacrawler.parsers._common import Page

FIXTURES = Path(__file__).parent / "fixtures"


def case_names(platform: str, *, marker: str) -> list[str]:
    """The cases of ``platform``: the folders under its fixtures that hold a file named ``marker``."""
    return sorted(p.name for p in (FIXTURES / platform).iterdir() if (p / marker).exists())


def expected_of(case_dir: Path) -> Any:
    """A case's ``expected.json``."""
    return json.loads((case_dir / "expected.json").read_text(encoding="utf-8"))


def assert_case(case_dir: Path, run_case: Callable[[Path], Any]) -> None:
    """What ``run_case`` makes of the case is, as a whole, its ``expected.json``."""
    assert run_case(case_dir) == expected_of(case_dir)


def page_record(page: Page) -> dict[str, Any]:
    """A listing :class:`Page` as the fixtures record it (the ids of incomplete posts, sorted)."""
    return {
        "posts": [dataclasses.asdict(p) for p in page.posts],
        "incomplete": sorted(page.incomplete),
        "next_cursor": page.next_cursor,
        "is_last": page.is_last,
        "skipped": page.skipped,
    }
