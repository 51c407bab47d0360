"""MediaStorePipeline as a component, on a fake crawler: configuration, request building, identity."""

from __future__ import annotations

from pathlib import Path

import pytest
from itemadapter import ItemAdapter
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Request, Response
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from mediacrawler.contracts import RequestRefused, download_error_reason
from mediacrawler.items import MediaAsset, Post
from mediacrawler.media.index import SQLiteMediaIndex
from mediacrawler.media.urls import strip_userinfo
from mediacrawler.middlewares.media_redirects import MediaRedirectMiddleware
from mediacrawler.pipelines.media import (
    META_ASSET,
    MediaStorePipeline,
    build_media_request,
    media_url_problem,
    pending_assets,
)
from tests.utils import project_crawler


def make_pipeline(tmp_path: Path, **settings: object) -> MediaStorePipeline:
    crawler = project_crawler(**{"FILES_STORE": str(tmp_path / "files"), **settings})
    return build_from_crawler(MediaStorePipeline, crawler)


def post(*media: MediaAsset, reposted: Post | None = None, platform: str = "weibo") -> Post:
    return Post(platform=platform, post_id="1", url="https://weibo.com/1/a", author=None, created_at=None,
                media=list(media), reposted=reposted)


def test_switched_off_is_not_configured(tmp_path: Path) -> None:
    with pytest.raises(NotConfigured, match="MEDIA_ENABLED"):
        make_pipeline(tmp_path, MEDIA_ENABLED=False)


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"FILES_STORE": "s3://bucket/media"}, "FILES_STORE='s3://bucket/media'.*local paths"),
        ({"MEDIA_INDEX": "mongo"}, "MEDIA_INDEX"),
        ({"MEDIA_INDEX": "redis"}, "REDIS_URL"),
        ({"MEDIA_CONCURRENCY_PER_HOST": 0}, "MEDIA_CONCURRENCY_PER_HOST"),
        ({"MEDIA_SEGMENT_CONCURRENCY": 0}, "MEDIA_SEGMENT_CONCURRENCY"),
    ],
)
def test_unusable_setting_fails_instead_of_disabling(tmp_path: Path, settings: dict, why: str) -> None:
    # Issue #20 point 5: a setting the pipeline cannot work with fails the crawl, never disables media silently.
    with pytest.raises(ValueError, match=why):
        make_pipeline(tmp_path, **settings)


def test_default_store_and_layout(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    assert pipe.cas.root == tmp_path / "files"
    assert {p.name for p in pipe.cas.root.iterdir()} == {"objects", "tmp", "quarantine"}
    assert pipe.index_class is SQLiteMediaIndex


def test_requests_carry_identity_referer_and_identity_encoding(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, WEIBO_MEDIA_REFERER="https://m.weibo.cn/")
    item = post(MediaAsset(kind="image", key="pid1", url="http://127.0.0.1:1/media/weibo/large/pid1.jpg"),
                MediaAsset(kind="image", key="pid2", url="file:///etc/passwd"),
                reposted=post(MediaAsset(kind="video", key="v1", url="https://127.0.0.1:1/v.mp4")))
    requests = pipe.get_media_requests(item, None)  # type: ignore[arg-type]
    assert [r.url for r in requests] == ["http://127.0.0.1:1/media/weibo/large/pid1.jpg",
                                         "https://127.0.0.1:1/v.mp4"]
    first = requests[0]
    assert first.meta[META_ASSET] == {"index_key": "weibo/image/pid1", "kind": "image", "key": "pid1",
                                      "platform": "weibo"}
    assert first.headers[b"Referer"] == b"https://m.weibo.cn/"
    assert first.headers[b"Accept-Encoding"] == b"identity"
    assert requests[1].meta[META_ASSET]["index_key"] == "weibo/video/v1"


def test_item_completed_records_url_problems_and_failures(tmp_path: Path) -> None:
    from twisted.python.failure import Failure

    from mediacrawler.pipelines.media import MediaDownloadFailed

    pipe = make_pipeline(tmp_path)
    item = post(MediaAsset(kind="image", key="a", url="http://127.0.0.1:1/a.jpg"),
                MediaAsset(kind="image", key="b", url="gopher://x/b"),
                MediaAsset(kind="image", key="c", url="http://127.0.0.1:1/c.jpg", status="skipped"))
    failure = Failure(MediaDownloadFailed("dataloss", "ResponseFailed"))
    pipe.item_completed([(False, failure)], item, None)  # type: ignore[arg-type]
    a, b, c = (ItemAdapter(m) for m in item.media)
    assert (a["status"], a["error"]) == ("failed", "dataloss: ResponseFailed")
    assert (b["status"], b["error"]) == ("failed", "scheme-not-allowed")
    assert (c["status"], c["error"]) == ("skipped", None)  # settled elsewhere: untouched
    stats = pipe.crawler.stats.get_stats()
    assert stats["media/failed/dataloss"] == 1 and stats["media/failed/scheme-not-allowed"] == 1


def test_file_path_needs_the_response(tmp_path: Path) -> None:
    from scrapy.http import Request, Response

    pipe = make_pipeline(tmp_path)
    request = Request("http://127.0.0.1:1/../../x.desktop")
    with pytest.raises(ValueError):
        pipe.file_path(request)
    response = Response(request.url, body=b"\xff\xd8\xff\xe0 not really a jpeg")
    path = pipe.file_path(request, response)
    assert path.startswith("objects/") and path.endswith(".jpg") and ".." not in path


@pytest.mark.parametrize(
    ("url", "problem"),
    [("http://h/a.jpg", None), ("HTTPS://h/a.jpg", None), ("file:///etc/passwd", "scheme-not-allowed"),
     ("data:image/png;base64,AAAA", "scheme-not-allowed"), ("s3://b/k", "scheme-not-allowed"),
     ("//h/a.jpg", "scheme-not-allowed"), ("http:///a.jpg", "invalid-url"), ("", "invalid-url"),
     (None, "invalid-url"), ("http://[::1/a", "invalid-url"), ("http://u:p@h/a.jpg", "credentials-in-url"),
     ("https://u@h/a.jpg", "credentials-in-url"), ("http://@h/a.jpg", "credentials-in-url"),
     ("http://h:port/a.jpg", "invalid-url")],
)
def test_media_url_problem(url: object, problem: str | None) -> None:
    assert media_url_problem(url, allowed_schemes=("http", "https")) == problem


def test_pending_assets_walks_reposts() -> None:
    inner = post(MediaAsset(kind="image", key="o1", url="http://h/o1.jpg"))
    outer = post(MediaAsset(kind="image", key="p1", url="http://h/p1.jpg"), reposted=inner)
    assert [a["key"] for _, a in pending_assets(outer)] == ["p1", "o1"]


def test_download_error_reasons() -> None:
    from twisted.internet.error import ConnectionRefusedError, TimeoutError
    from twisted.python.failure import Failure
    from twisted.web.client import ResponseFailed

    from mediacrawler.compat import DataLoss

    assert download_error_reason(IgnoreRequest("offsite")) == "filtered"
    assert download_error_reason(ResponseFailed([Failure(DataLoss())])) == "dataloss"
    assert download_error_reason(TimeoutError()) == "timeout"
    assert download_error_reason(ConnectionRefusedError()) == "connection-error"
    assert download_error_reason(ValueError("x")) == "download-error"
    # From the types Scrapy 2.19 and Twisted raise, never from their text.
    from scrapy.exceptions import (CannotResolveHostError, DownloadCancelledError, DownloadConnectionRefusedError,
                                   DownloadTimeoutError, ResponseDataLossError)
    from twisted.internet.error import ConnectionLost, DNSLookupError
    from twisted.web.client import ResponseNeverReceived
    from twisted.web.http import PotentialDataLoss

    from mediacrawler.compat import TunnelError

    assert download_error_reason(ResponseDataLossError()) == "dataloss"
    assert download_error_reason(PotentialDataLoss()) == "dataloss"
    assert download_error_reason(DownloadTimeoutError("took longer")) == "timeout"
    assert download_error_reason(DownloadCancelledError("maxsize")) == "too-large"
    for exc in (DownloadConnectionRefusedError(), CannotResolveHostError(), DNSLookupError(), TunnelError(),
                ResponseNeverReceived([Failure(ConnectionLost())]), ResponseFailed([Failure(ValueError())])):
        assert download_error_reason(exc) == "connection-error", exc
    assert download_error_reason(ValueError("a timeout with dataloss over a connection")) == "download-error"
    assert download_error_reason(RequestRefused("too-large", "MEDIA_MAXSIZE")) == "too-large"


def test_strip_userinfo() -> None:
    assert strip_userinfo("http://u:p@h:8/a?b=c@d") == "http://h:8/a?b=c@d"
    assert strip_userinfo("http://h/a@b") == "http://h/a@b"
    assert strip_userinfo("http://u:p@[::1/a") == "[::1/a"  # unsplittable: everything up to the last @ goes


def test_media_requests_give_up_retrying_quietly(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    item = post(MediaAsset(kind="image", key="a", url="http://h/a.jpg"))
    [request] = pipe.get_media_requests(item, None)  # type: ignore[arg-type]
    assert request.meta["give_up_log_level"] == "DEBUG"  # the asset's own WARNING reports the failure


def test_item_completed_redacts_credentials(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pipe = make_pipeline(tmp_path)
    item = post(MediaAsset(kind="image", key="a", url="http://u:pa55word@127.0.0.1:1/a.jpg"))
    assert pipe.get_media_requests(item, None) == []  # type: ignore[arg-type]
    with caplog.at_level("DEBUG"):
        pipe.item_completed([], item, None)  # type: ignore[arg-type]
    asset = ItemAdapter(item.media[0])
    assert (asset["status"], asset["error"], asset["url"]) == ("failed", "credentials-in-url",
                                                               "http://127.0.0.1:1/a.jpg")
    assert "pa55word" not in caplog.text and "http://127.0.0.1:1/a.jpg" in caplog.text


def redirect_middleware(**settings: object) -> MediaRedirectMiddleware:
    crawler = get_crawler(settings_dict={"WEIBO_MEDIA_REFERER": "https://m.weibo.cn/", **settings})
    crawler.stats.open_spider()  # type: ignore[union-attr]
    return build_from_crawler(MediaRedirectMiddleware, crawler)


def media_request(url: str = "http://cdn.example/a.jpg", **meta: object) -> Request:
    request = build_media_request(url=url, platform="weibo", kind="image", key="a", referer="https://m.weibo.cn/")
    request.meta.update(meta)
    return request


@pytest.mark.parametrize(
    ("location", "reason"),
    [(b"https://cdn2.example/a.jpg", None), (b"/moved/a.jpg", None), (b"//cdn2.example/a.jpg", None),
     (b"file:///etc/passwd", "scheme-not-allowed"), (b"gopher://h/1", "scheme-not-allowed"),
     (b"http://u:s3cr3t@cdn.example/a.jpg", "credentials-in-url"),
     (b"//u:s3cr3t@cdn2.example/a", "credentials-in-url"),
     (b"http://:80/a.jpg", "invalid-url")],
)
def test_redirect_targets_are_checked_before_they_are_followed(location: bytes, reason: str | None,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    mw = redirect_middleware()
    request = media_request()
    response = Response(request.url, status=302, headers={"Location": location}, request=request)
    with caplog.at_level("DEBUG"):
        if reason is None:
            assert mw.process_response(request, response) is response
            return
        with pytest.raises(RequestRefused) as refused:
            mw.process_response(request, response)
    assert refused.value.reason == reason and str(refused.value) == reason
    assert mw.crawler.stats.get_value(f"media/redirects/refused/{reason}") == 1  # type: ignore[union-attr]
    assert "s3cr3t" not in caplog.text


def test_redirect_hops_are_bounded_and_rechecked() -> None:
    mw = redirect_middleware(MEDIA_MAX_REDIRECTS=2)
    first = media_request()
    mw.process_request(first)
    assert first.meta["redirect_ttl"] == 2
    hop = media_request(redirect_urls=["http://cdn.example/0.jpg", "http://cdn.example/1.jpg"])
    hop.headers["Referer"] = "http://cdn.example/1.jpg"
    mw.process_request(hop)
    assert hop.headers["Referer"] == b"https://m.weibo.cn/"  # the platform's, as for the first request
    response = Response(hop.url, status=301, headers={"Location": "/2.jpg"}, request=hop)
    with pytest.raises(RequestRefused, match="too-many-redirects"):
        mw.process_response(hop, response)
    bad_hop = media_request(url="http://u:p@cdn.example/a.jpg", redirect_urls=["http://cdn.example/0.jpg"])
    with pytest.raises(RequestRefused, match="credentials-in-url"):
        mw.process_request(bad_hop)
    # Not a media request, or a 3xx the pipeline handles itself: untouched.
    other = Request("http://cdn.example/x", meta={"redirect_urls": ["http://u:p@x/"]})
    assert mw.process_request(other) is None
    kept = media_request(handle_httpstatus_all=True)
    response = Response(kept.url, status=302, headers={"Location": "file:///etc/passwd"}, request=kept)
    assert mw.process_response(kept, response) is response
