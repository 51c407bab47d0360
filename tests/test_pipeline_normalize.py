"""NormalizePipeline on a fake crawler."""

from __future__ import annotations

import pytest
from scrapy import Spider
from scrapy.exceptions import DropItem
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from mediacrawler import settings as project_settings
from mediacrawler.items import Author, MediaAsset, Metrics, Post
from mediacrawler.pipelines.normalize import NormalizePipeline, canonical_url


@pytest.fixture
def pipeline() -> NormalizePipeline:
    crawler = get_crawler(Spider, {"MEDIA_ALLOWED_SCHEMES": project_settings.MEDIA_ALLOWED_SCHEMES})
    crawler.stats.open_spider()  # type: ignore[union-attr]
    return build_from_crawler(NormalizePipeline, crawler)


def post(**kw: object) -> Post:
    base: dict[str, object] = dict(platform="weibo", post_id="1", url="https://weibo.com/1/Abc?from=x#c",
                                   author=Author(id="1"), created_at="2026-11-28T10:00:00+08:00")
    base.update(kw)
    return Post(**base)  # type: ignore[arg-type]


def test_canonical_url_utc_and_fetched_at(pipeline: NormalizePipeline) -> None:
    item = pipeline.process_item(post())
    assert item.url == "https://weibo.com/1/Abc"
    assert item.created_at == "2026-11-28T02:00:00Z"
    assert item.fetched_at and item.fetched_at.endswith("Z")


def test_counts_become_integers(pipeline: NormalizePipeline) -> None:
    item = pipeline.process_item(post(metrics=Metrics(likes="12.6万", comments=3, shares="")))  # type: ignore[arg-type]
    assert (item.metrics.likes, item.metrics.comments, item.metrics.shares) == (126000, 3, None)


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"title": "not a post"}, "missing_field"),
        (post(post_id=""), "missing_field"),
        (post(url="javascript:alert(1)"), "invalid_field"),
        (post(created_at="yesterday"), "invalid_field"),
        (post(created_at="2026-11-28T10:00:00"), "invalid_field"),
    ],
)
def test_drops_with_reason_and_stats(pipeline: NormalizePipeline, item: object, reason: str) -> None:
    with pytest.raises(DropItem):
        pipeline.process_item(item)
    assert pipeline.stats.get_value(f"normalize/dropped/{reason}") == 1


def test_media_with_other_scheme_is_failed_not_fetched(pipeline: NormalizePipeline) -> None:
    assets = [MediaAsset(kind="image", key="k1", url="file:///etc/passwd", alternates=["data:x", "https://a/b.jpg"]),
              MediaAsset(kind="image", key="k2", url="https://a/c.jpg")]
    item = pipeline.process_item(post(media=assets))
    assert item.media[0].status == "failed" and item.media[0].error == "scheme-not-allowed"
    assert item.media[0].alternates == ["https://a/b.jpg"]
    assert item.media[1].status is None
    assert pipeline.stats.get_value("media/failed/scheme-not-allowed") == 1
    assert pipeline.stats.get_value("media/failed") == 1


def test_media_url_with_credentials_is_failed_and_loses_them(pipeline: NormalizePipeline,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    assets = [MediaAsset(kind="image", key="k1", url="https://bob:pa55word@cdn.example/a.jpg?x=1",
                         alternates=["https://bob:pa55word@cdn.example/b.jpg", "https://cdn.example/c.jpg"]),
              MediaAsset(kind="image", key="k2", url="https://cdn.example/d.jpg")]
    with caplog.at_level("DEBUG"):
        item = pipeline.process_item(post(media=assets))
    first = item.media[0]
    assert (first.status, first.error) == ("failed", "credentials-in-url")
    assert first.url == "https://cdn.example/a.jpg?x=1"
    assert first.alternates == ["https://cdn.example/c.jpg"]
    assert item.media[1].status is None
    assert pipeline.stats.get_value("media/failed/credentials-in-url") == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["Media asset https://cdn.example/a.jpg?x=1 failed: credentials-in-url"]
    assert "pa55word" not in caplog.text and "pa55word" not in repr(item)
    assert "pa55word" not in repr(pipeline.stats.get_stats())


def test_media_allowed_schemes_is_honoured() -> None:
    crawler = get_crawler(Spider, settings_dict={"MEDIA_ALLOWED_SCHEMES": ["https"]})
    crawler.stats.open_spider()  # type: ignore[union-attr]
    pipe = build_from_crawler(NormalizePipeline, crawler)
    item = pipe.process_item(post(media=[MediaAsset(kind="image", key="k", url="http://cdn.example/a.jpg"),
                                         MediaAsset(kind="image", key="k2", url="https://cdn.example/a.jpg")]))
    assert [(m.status, m.error) for m in item.media] == [("failed", "scheme-not-allowed"), (None, None)]


def test_bad_reposted_original_does_not_cost_the_repost(pipeline: NormalizePipeline) -> None:
    item = pipeline.process_item(post(reposted=post(post_id="2", url="not a url")))
    assert item.reposted is None
    assert pipeline.stats.get_value("normalize/reposted_invalid") == 1


def test_counts_past_10_to_the_15_never_reach_the_record(pipeline: NormalizePipeline) -> None:
    item = pipeline.process_item(post(metrics=Metrics(likes="9" * 300, comments=10**15, shares=10**15 + 1)))
    assert (item.metrics.likes, item.metrics.comments, item.metrics.shares) == (None, 10**15, None)
    assert pipeline.stats.get_value("normalize/count_out_of_range") == 2


def test_a_multi_kb_data_url_is_refused_and_kept_only_as_a_short_prefix(
        pipeline: NormalizePipeline, caplog: pytest.LogCaptureFixture) -> None:
    data_url = "data:image/png;base64," + "A" * 50_000
    long_http = "https://cdn.example/" + "a" * 5000 + ".jpg"
    media = [MediaAsset(kind="image", key="a", url=data_url), MediaAsset(kind="image", key="b", url=long_http,
                                                                          alternates=[long_http, "https://c/x.jpg"])]
    with caplog.at_level("WARNING"):
        item = pipeline.process_item(post(media=media))
    a, b = item.media
    assert (a.status, a.error, b.status, b.error) == ("failed", "url-too-long", "failed", "url-too-long")
    assert len(a.url) <= 257 and a.url.endswith("…") and len(b.url) <= 257
    assert b.alternates == ["https://c/x.jpg"]
    assert all(len(r.getMessage()) < 600 for r in caplog.records)


TRICKY_URLS = [
    "https://wx1.sinaimg.cn/large/abc.jpg", "HTTPS://WX1.SinaImg.cn/Large/ABC.jpg?x=1#f", "http://a", "http://a/",
    "https://a.b-c.d/p?q=1&r=@x#frag@y", "https://user:pw@a/b", "https://a:80/b", "https://a:x/b", "https://[::1]/b",
    "https://a]/b", "https://./b", "https://-/b", "https:///b", "https:/a/b", "https:a/b", "ftp://a/b", "file:///etc",
    "data:x", "javascript:alert(1)", " https://a/b", "https://a/b c", "https://a/\tb", "https://a\t.b/c",
    "https://a/\u732b.jpg", "https://\u732b.cn/a", "https://a/b\n", "https://a/b?x=\u732b", "h+t.t-p://a/b", "",
    "1http://a/b", "https://a/" + "x" * 5000, "https://a%40b/c", "https://a/b@c", "https://a?b", "https://a#b",
    "https://a/b?", "https://a/b#", "//a/b", "https://a.com//b//c",
]


@pytest.mark.parametrize("url", TRICKY_URLS)
def test_plain_url_shortcuts_answer_as_the_full_checks(pipeline: NormalizePipeline, url: str) -> None:
    from urllib.parse import urlsplit

    from mediacrawler.media.urls import media_url_problem
    from mediacrawler.parsers._common import strip_url

    for schemes in (pipeline.allowed_schemes, frozenset({"https"})):
        pipeline.allowed_schemes = schemes
        assert pipeline.url_problem(url) == media_url_problem(url, allowed_schemes=schemes,
                                                              max_length=pipeline.max_url)
    try:
        parts = urlsplit(url)
        expected = strip_url(url) if parts.scheme in ("http", "https") and parts.netloc else ValueError
    except ValueError:
        expected = ValueError
    try:
        got: object = canonical_url(url)
    except ValueError:
        got = ValueError
    assert got == expected
