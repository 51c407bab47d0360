"""Pure normalizers shared by the parsers."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from mediacrawler.parsers._common import (
    check_depth,
    clean_id,
    html_to_text,
    iso_utc,
    job_slug,
    load_json,
    parse_count,
    read_count,
    relative_to_absolute,
    strip_url,
)
from mediacrawler.parsers.weibo import classify_envelope, parse_created_at


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (12, 12), ("12", 12), ("12.6万", 126000), ("1万+", 10000), ("100万+", 1000000), ("1.2亿", 120000000),
        ("3,456", 3456), ("2.5k", 2500), ("", None), (None, None), ("转发", None), (-1, None), (True, None),
        (3.0, 3), ([], None),
    ],
)
def test_parse_count(raw: object, expected: int | None) -> None:
    assert parse_count(raw) == expected


def test_html_to_text_keeps_breaks_and_emoji_alt() -> None:
    html = 'a<br />b <span class="url-icon"><img alt=[笑cry] src="x.png" /></span> <a href="/n/x">@x</a> &amp;'
    assert html_to_text(html) == "a\nb [笑cry] @x &"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Sat Nov 28 10:00:00 +0800 2026", "2026-11-28T02:00:00Z"),
        ("Sun Jan 01 03:00:00 +0800 2026", "2025-12-31T19:00:00Z"),
        ("刚刚", "2026-11-29T12:00:00Z"),
        ("5分钟前", "2026-11-29T11:55:00Z"),
        ("昨天 10:00", "2026-11-28T02:00:00Z"),
        ("11-28", "2026-11-27T16:00:00Z"),
        ("", None),
        ("not a date", None),
    ],
)
def test_weibo_created_at_in_utc(raw: str, expected: str | None) -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert parse_created_at(raw, now=now) == expected


def test_iso_utc_refuses_naive() -> None:
    with pytest.raises(ValueError):
        iso_utc(datetime(2026, 1, 1))


def test_job_slug_is_safe_and_distinct() -> None:
    a, b = job_slug("猫"), job_slug("狗")
    assert a != b and a.isalnum() and b.isalnum()
    assert job_slug("../../etc passwd").startswith("etc-passwd-")
    assert "/" not in job_slug("a/b") and "." not in job_slug("..")


def test_strip_url() -> None:
    assert strip_url("HTTPS://Weibo.COM/1/abc?x=1#f") == "https://weibo.com/1/abc"


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ({"ok": 1, "data": {"cards": []}}, "ok"),
        ({"ok": 0, "msg": "这里还没有内容", "data": {"cards": []}}, "end"),
        ({"ok": 0, "errno": "100005", "msg": "请求过于频繁"}, "rate_limited"),
        ({"ok": 0, "errno": 100005}, "rate_limited"),
        ({"ok": -100, "url": "https://passport.weibo.cn/signin/welcome"}, "login_required"),
        ({"ok": 0, "errno": "20101", "msg": "target weibo does not exist"}, "error"),
        ([], "error"),
        ("x", "error"),
    ],
)
def test_classify_envelope(payload: object, kind: str) -> None:
    assert classify_envelope(payload) == kind


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5104383848731003, "5104383848731003"),
        ("5104383848731003", "5104383848731003"),
        (" Z1aB1cE1a ", "Z1aB1cE1a"),
        ("BV1xx411c7mD", "BV1xx411c7mD"),
        (0, "0"),
        (-1, None),
        (True, None),
        (False, None),
        ([1, 2], None),
        ({"a": 1}, None),
        (1.5, None),
        ("", None),
        ("../../etc", None),
        ("a/b", None),
        ("x" * 65, None),
        (None, None),
    ],
)
def test_clean_id(value: object, expected: str | None) -> None:
    assert clean_id(value) == expected


# --- totality (issue #21): every reader returns a value or None with a reason, never raises -----------------------
@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (int("9" * 400), "count over 10^15: an integer of 400 digits"),
        ("1" * 400, "count over 10^15: '111111111111111111111111'… (400 characters)"),
        (float("inf"), "not a finite number: inf"),
        (float("nan"), "not a finite number: nan"),
        (10**15 + 1, "count over 10^15: 1000000000000001"),
        ("1e400", "not a count: '1e400'"),
        (-3, "negative count: -3"),
    ],
)
def test_read_count_refuses_what_it_cannot_believe_with_a_reason(raw: object, reason: str) -> None:
    assert read_count(raw) == (None, reason)
    unreadable: dict[str, str] = {}
    assert parse_count(raw, field="likes", unreadable=unreadable) is None
    assert unreadable == {"likes": reason}


def test_read_count_keeps_the_largest_believable_count() -> None:
    assert read_count(10**15) == (10**15, None)
    assert read_count("1000亿") == (100_000_000_000, None)
    assert read_count(None) == (None, None) and read_count("") == (None, None)


CST = timezone(timedelta(hours=8))
JAN_3 = datetime(2027, 1, 3, 4, 0, tzinfo=UTC)  # 12:00 in Beijing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12-28", "2026-12-27T16:00:00Z"),  # a day without a year is never in the future: last year's
        ("01-02", "2027-01-01T16:00:00Z"),
        ("刚刚", "2027-01-03T04:00:00Z"),
        ("5分钟前", "2027-01-03T03:55:00Z"),
        ("3小时前", "2027-01-03T01:00:00Z"),
        ("昨天 23:30", "2027-01-02T15:30:00Z"),
        ("今天 09:15", "2027-01-03T01:15:00Z"),
        ("2026-11-28", "2026-11-27T16:00:00Z"),
    ],
)
def test_relative_dates_are_read_against_the_answer_time(text: str, expected: str) -> None:
    assert iso_utc(relative_to_absolute(text, now=JAN_3, tz=CST)) == expected  # type: ignore[arg-type]
    assert parse_created_at(text, now=JAN_3) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("02-30", "no such date or time: '02-30'"),
        ("今天 25:00", "no such date or time: '今天 25:00'"),
        ("99999999999999分钟前", "out of range: '99999999999999分钟前'"),
        ("999999999天前", "out of range: '999999999天前'"),
        ("今天 13:00", "later than the answer's time (2027-01-03T04:00:00Z): '今天 13:00'"),
        ("2027-05-01", "later than the answer's time (2027-01-03T04:00:00Z): '2027-05-01'"),
    ],
)
def test_impossible_dates_are_unreadable_with_the_raw_text(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(reason) + "$"):
        relative_to_absolute(text, now=JAN_3, tz=CST)
    unreadable: dict[str, str] = {}
    assert parse_created_at(text, now=JAN_3, unreadable=unreadable) is None
    assert unreadable == {"created_at": reason}


def test_check_depth_refuses_a_deep_value_before_any_decoder() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match="nested deeper than 200 levels"):
        check_depth(deep)
    with pytest.raises(ValueError, match="nested deeper than 200 levels"):
        load_json(deep.encode())
    # Brackets inside strings (either quote) do not count; the scan ends where the value closes.
    shallow = '{"a": ["[[[[", {"b": "x\\"[["}], \'c\': \'[[\'}' + "[" * 1000
    check_depth(shallow, limit=3)
    assert load_json('[[[1]]]', limit=3) == [[[1]]]
    with pytest.raises(ValueError):
        load_json('[[[[1]]]]', limit=3)
