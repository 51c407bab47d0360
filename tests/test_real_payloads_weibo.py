"""Weibo parser on m.weibo.cn answers captured by others (tests/fixtures/real/weibo/, provenance in
tests/fixtures/real/SOURCES.md). Expected values are read from the raw JSON (paths named), never from the parser.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.items import Post
from mediacrawler.parsers import weibo

REAL = Path(__file__).parent / "fixtures" / "real" / "weibo"
TIMELINES = ["koa2_getIndex_timeline_1076035529945701_p2.json",
             "weiboAPI_getIndex_timeline_1076031669879400_p2.json"]
BEIJING = timezone(timedelta(hours=8))
#: The moment each timeline was captured (SOURCES.md), for the relative and "MM-DD" dates.
CAPTURED = {TIMELINES[0]: datetime(2019, 7, 16, 12, 0, tzinfo=timezone.utc),
            TIMELINES[1]: datetime(2019, 6, 16, 12, 0, tzinfo=timezone.utc)}


def _load(name: str) -> Any:
    return json.loads((REAL / name).read_text("utf-8"))


def _count(raw: Any) -> int:
    # "100万+" is Weibo's "a million or more": its lower bound.
    return 1_000_000 if raw == "100万+" else int(raw)


def _mblogs(name: str) -> list[dict[str, Any]]:
    return [c["mblog"] for c in _load(name)["data"]["cards"] if c.get("card_type") == 9 and "mblog" in c]


def _check(post: Post, mblog: dict[str, Any]) -> None:
    assert post.post_id == mblog["id"] and not post.deleted
    assert post.author is not None
    assert (post.author.id, post.author.name) == (str(mblog["user"]["id"]), mblog["user"]["screen_name"])
    assert (post.metrics.likes, post.metrics.comments, post.metrics.shares) == (
        _count(mblog["attitudes_count"]), _count(mblog["comments_count"]), _count(mblog["reposts_count"]))
    # Every picture at its best quality: pics[].large.url, in order.
    pictures = [m.url for m in post.media if m.kind == "image" and m.cover_of is None]
    assert pictures == [p["large"]["url"] for p in mblog.get("pics") or []]
    info = (mblog.get("page_info") or {})
    if info.get("type") == "video":
        media = info["media_info"]
        best = next(media[k] for k in ("mp4_720p_mp4", "mp4_hd_url", "mp4_sd_url", "stream_url") if media.get(k))
        [clip] = [m for m in post.media if m.kind == "video"]
        assert clip.url == best and clip.duration == float(media["duration"])
        # Its cover: page_info.page_pic, marked as the video's.
        [cover] = [m for m in post.media if m.cover_of is not None]
        assert (cover.url, cover.cover_of) == (info["page_pic"]["url"], clip.key)
    else:
        assert not any(m.kind == "video" for m in post.media)


@pytest.mark.parametrize("name", TIMELINES)
def test_timeline_posts_ids_authors_counts_and_media(name: str) -> None:
    page = weibo.parse_index(_load(name), expand_long_text=False, now=CAPTURED[name])
    mblogs = _mblogs(name)
    assert [p.post_id for p in page.posts] == [m["id"] for m in mblogs] and len(mblogs) in (10, 11)
    for post, mblog in zip(page.posts, mblogs, strict=True):
        _check(post, mblog)
        rt = mblog.get("retweeted_status")
        assert (post.reposted is not None) == bool(rt)
        if rt:
            assert post.reposted is not None
            _check(post.reposted, rt)


def test_the_repost_with_nine_pictures() -> None:
    page = weibo.parse_index(_load(TIMELINES[0]), expand_long_text=False, now=CAPTURED[TIMELINES[0]])
    [post] = [p for p in page.posts if p.reposted is not None]
    assert post.reposted is not None and post.reposted.post_id == "4387930325701338"
    assert len(post.reposted.media) == 9
    assert post.reposted.media[0].url == "https://wx4.sinaimg.cn/large/006WBHSjgy1g4g3djs0ovj30k91b8e67.jpg"
    assert post.extra.get("pinned") is True  # mblog.isTop 1
    assert [p.post_id for p in page.posts if p.extra.get("pinned")] == [post.post_id]


@pytest.mark.parametrize("name", TIMELINES)
def test_mm_dd_dates_at_capture_time_are_that_day_in_beijing(name: str) -> None:
    page = weibo.parse_index(_load(name), expand_long_text=False, now=CAPTURED[name])
    for post, mblog in zip(page.posts, _mblogs(name), strict=True):
        raw = mblog["created_at"]
        if len(raw) == 5 and raw[2] == "-":  # "MM-DD"
            assert post.created_at is not None
            day = datetime.fromisoformat(post.created_at.replace("Z", "+00:00")).astimezone(BEIJING)
            assert (day.year, day.month, day.day) == (2019, int(raw[:2]), int(raw[3:]))


@pytest.mark.parametrize("name", TIMELINES)
def test_mm_dd_dates_read_years_later_keep_the_year_they_were_written(name: str) -> None:
    # Read now (years after the capture): "06-27" of a 2019 capture is still 2019-06-27 (the mid says when).
    page = weibo.parse_index(_load(name), expand_long_text=False)
    for post, mblog in zip(page.posts, _mblogs(name), strict=True):
        raw = mblog["created_at"]
        if len(raw) == 5 and raw[2] == "-":
            assert post.created_at is not None
            day = datetime.fromisoformat(post.created_at.replace("Z", "+00:00")).astimezone(BEIJING)
            assert (day.year, day.month, day.day) == (2019, int(raw[:2]), int(raw[3:]))


def test_album_tab_has_no_posts_and_says_which_cards_it_skipped() -> None:
    payload = _load("koa2_getIndex_album_1078031660475004.json")
    page = weibo.parse_index(payload)
    assert page.posts == [] and page.incomplete == {}
    groups = [c for card in payload["data"]["cards"] for c in card.get("card_group", [])]
    expected: dict[str, int] = {}
    for card in groups:
        expected[f"card_type_{card['card_type']}"] = expected.get(f"card_type_{card['card_type']}", 0) + 1
    assert page.skipped == expected


def test_statuses_show_repost_with_its_full_time() -> None:
    payload = _load("weiboAPI_statuses_show_4383411844046171.json")
    mblog = weibo.parse_show(payload)
    assert mblog is not None
    post = weibo.parse_mblog(mblog)
    assert post.post_id == "4383411844046171" and post.text == "转发微博"
    assert post.created_at == "2019-06-15T03:44:46Z"  # "Sat Jun 15 11:44:46 +0800 2019"
    assert post.author is not None and (post.author.id, post.author.name) == ("5973737418", "九月九的晴天")
    raw_rt = payload["data"]["retweeted_status"]
    assert post.reposted is not None and post.reposted.post_id == raw_rt["id"] == "4383404751066167"
    assert post.reposted.created_at == "2019-06-15T03:16:35Z"  # "Sat Jun 15 11:16:35 +0800 2019"
    _check(post.reposted, raw_rt)


def test_statuses_extend_long_text() -> None:
    payload = _load("weiboAPI_statuses_extend.json")
    assert weibo.parse_long_text(payload) == payload["data"]["longTextContent"]
