"""PlatformSpider's side of expired media URLs: which post an asset came from, and which fresh URL is the same
file. (The whole flow, sandbox and all, is in tests/test_crawl_weibo.py.)"""

from __future__ import annotations

import asyncio

from scrapy.utils.test import get_crawler

from mediacrawler.items import MediaAsset, Post
from mediacrawler.spiders._reread import _same_file
from mediacrawler.spiders.weibo import WeiboSpider


def post(post_id: str, *media: MediaAsset, reposted: Post | None = None) -> Post:
    return Post(platform="weibo", post_id=post_id, url=f"https://weibo.com/1/{post_id}", author=None,
                created_at=None, media=list(media), reposted=reposted)


def video(key: str, url: str, *alternates: str) -> MediaAsset:
    return MediaAsset(kind="video", key=key, url=url, alternates=list(alternates))


def test_the_fresh_url_is_the_same_file_never_another_rendition() -> None:
    fresh = post("2", video("weibo:video:9", "https://cdn/o0/hd.mp4?ssig=2", "https://cdn/o0/sd.mp4?ssig=2"))
    key = "weibo/video/weibo:video:9"
    assert _same_file(fresh, index_key=key, url="https://cdn/o0/sd.mp4?ssig=1") == "https://cdn/o0/sd.mp4?ssig=2"
    assert _same_file(fresh, index_key=key, url="https://cdn/o0/hd.mp4?ssig=1") == "https://cdn/o0/hd.mp4?ssig=2"
    assert _same_file(fresh, index_key=key, url="https://cdn/o0/720.mp4?ssig=1") is None  # gone: not a substitute
    assert _same_file(fresh, index_key="weibo/video/weibo:video:8", url="https://cdn/o0/hd.mp4") is None
    # The original of a repost carries its own assets.
    repost = post("3", reposted=fresh)
    assert _same_file(repost, index_key=key, url="https://cdn/o0/hd.mp4") == "https://cdn/o0/hd.mp4?ssig=2"


def test_each_asset_is_remembered_with_its_own_post_and_the_memory_is_bounded() -> None:
    spider = WeiboSpider.from_crawler(get_crawler(WeiboSpider), uid="7365120894")
    spider.media_posts_remembered = 3
    original = post("1", video("weibo:video:a", "https://cdn/a.mp4"))
    spider.remember_media(post("2", video("weibo:video:b", "https://cdn/b.mp4"), reposted=original))
    assert spider._media_posts == {"weibo/video/weibo:video:b": "2", "weibo/video/weibo:video:a": "1"}
    for n in range(3):
        spider.remember_media(post(f"p{n}", video(f"weibo:video:c{n}", f"https://cdn/c{n}.mp4")))
    assert list(spider._media_posts.values()) == ["p0", "p1", "p2"]  # least recent forgotten first


def test_an_unknown_asset_is_not_re_resolved_and_says_so() -> None:
    crawler = get_crawler(WeiboSpider)
    spider = WeiboSpider.from_crawler(crawler, uid="7365120894")
    crawler.spider = spider
    refreshed = asyncio.run(spider.refresh_media_url(key="weibo/video/weibo:video:x#video", url="https://cdn/x"))
    assert refreshed is None
    assert crawler.stats is not None and crawler.stats.get_value("weibo/media_refresh/unknown") == 1
    assert crawler.stats.get_value("weibo/media_refresh/requests") is None


def test_a_track_key_reads_the_post_of_its_asset() -> None:
    asked: list[str] = []

    class Recording(WeiboSpider):
        def post_request(self, post_id: str) -> None:  # type: ignore[override]
            asked.append(post_id)  # then "cannot": no request goes out in this unit test
            return None

    crawler = get_crawler(Recording)
    spider = Recording.from_crawler(crawler, uid="7365120894")
    crawler.spider = spider
    spider.remember_media(post("42", video("weibo:video:1034:7", "https://cdn/o0/hd.mp4?ssig=1")))
    for key in ("weibo/video/weibo:video:1034:7", "weibo/video/weibo:video:1034:7#video",
                "weibo/video/weibo:video:1034:7#audio", "weibo/video/weibo:video:1034:7#other"):
        asyncio.run(spider.refresh_media_url(key=key, url="https://cdn/o0/hd.mp4?ssig=1"))
    assert asked == ["42", "42", "42"]  # "#other" is not a track suffix: that key is unknown
