"""Typed spider arguments: validation before the crawl, and `-a start` never shadowing Spider.start()."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from scrapy.utils.test import get_crawler

from mediacrawler.spiders._args import validate_args
from mediacrawler.spiders.weibo import WeiboSpider


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"uid": "abc"}, "uid='abc'"),
        ({"uid": "1", "start": "0"}, "start='0'"),
        ({"uid": "1", "max_pages": "-2"}, "max_pages"),
        ({}, "exactly one of"),
        ({"uid": "1", "keyword": "x"}, "exactly one of"),
        ({"keyword": "   "}, "keyword"),
        ({"uid": "1", "typo": "1"}, "typo"),
        ({"uid": "1", "video_codecs": "avc1;rm -rf"}, "video_codecs"),
        ({"uid": "1", "comments": "many"}, "comments='many'"),
        ({"uid": "1", "comments": "-3"}, "comments='-3'"),
        ({"uid": "1", "comments": "0"}, "-a comments=0"),
        ({"uid": "1", "replies": "5"}, "-a replies needs -a comments"),
    ],
)
def test_invalid_arguments_give_one_line(kwargs: dict[str, str], needle: str) -> None:
    msg = validate_args(WeiboSpider, kwargs)
    assert msg is not None and needle in msg and "\n" not in msg and msg.startswith("weibo: ")


def test_valid_arguments_and_private_scrapyd_args() -> None:
    assert validate_args(WeiboSpider, {"uid": "7365120894", "start": "3", "_job": "abc123"}) is None


def test_comment_arguments_are_typed() -> None:
    from mediacrawler.spiders.weibo import WeiboParams

    assert WeiboParams(uid="1", comments="ALL").comments == "all"
    params = WeiboParams(uid="1", comments="20", replies="0")
    assert (params.comments, params.replies) == (20, 0)
    assert WeiboParams(uid="1").comments is None


def test_video_codecs_argument_reaches_the_video_settings() -> None:
    from mediacrawler.media.video import VideoSettings

    assert validate_args(WeiboSpider, {"uid": "1", "video_codecs": "hevc,avc1"}) is None
    spider = WeiboSpider.from_crawler(get_crawler(WeiboSpider), uid="1", video_codecs="hevc,avc1", max_height="480")
    config = VideoSettings.from_settings(spider.crawler.settings, spider_args=spider.args)
    assert config.codecs == ("hevc", "avc1") and config.max_height == 480


def test_start_argument_does_not_shadow_the_start_coroutine() -> None:
    crawler = get_crawler(WeiboSpider)
    spider = WeiboSpider.from_crawler(crawler, uid="7365120894", start="3", max_pages="2")
    assert inspect.isasyncgenfunction(spider.start)
    assert spider.args.start == 3 and spider.args.max_pages == 2
    assert spider.first_page() == (3, None)
    assert spider.job == "weibo-uid-7365120894"


def test_job_keys_never_collide_per_platform() -> None:
    crawler = get_crawler(WeiboSpider)
    a = WeiboSpider.from_crawler(crawler, keyword="猫").job
    b = WeiboSpider.from_crawler(get_crawler(WeiboSpider), keyword="狗").job
    c = WeiboSpider.from_crawler(get_crawler(WeiboSpider), uid="1").job
    assert len({a, b, c}) == 3 and all(k.startswith("weibo-") for k in (a, b, c))
    assert all("/" not in k for k in (a, b, c))


@pytest.mark.parametrize(("platform", "kwargs"), [
    ("bilibili", {"bvid": "BV1Sbx411A01,BV1Sbx411A02", "start": "2"}),
    ("douyin", {"aweme": "7300000000000000001", "max_pages": "1"}),
    ("xhs", {"note": "656038c486c2e82e442b3c58", "start": "2", "max_pages": "3"}),
])
def test_a_list_of_items_refuses_page_arguments_in_one_line(platform: str, kwargs: dict[str, str]) -> None:
    from mediacrawler.spiders.bilibili import BilibiliSpider
    from mediacrawler.spiders.douyin import DouyinSpider
    from mediacrawler.spiders.xhs import XhsSpider

    spidercls: Any = {"bilibili": BilibiliSpider, "douyin": DouyinSpider, "xhs": XhsSpider}[platform]
    msg = validate_args(spidercls, kwargs)
    assert msg is not None and "\n" not in msg and msg.startswith(f"{platform}: ")
    assert "apply to listings" in msg and "is a list of items, walked whole" in msg
    assert msg.count("-a start") == ("start" in kwargs) and msg.count("-a max_pages") == ("max_pages" in kwargs)
    # The same target without them is valid, and its spider walks the items given (no pages).
    plain = {k: v for k, v in kwargs.items() if k not in ("start", "max_pages")}
    assert validate_args(spidercls, plain) is None
    spider = spidercls.from_crawler(get_crawler(spidercls), **plain)
    assert spider.job_state.kind == "items" and spider.job_state.items == spider.requested_items()
    assert len(spider.job_state.items) == len(plain[next(iter(plain))].split(","))
