"""Pure normalizers shared by the parsers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mediacrawler.parsers._common import clean_id, html_to_text, iso_utc, job_slug, parse_count, strip_url
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
