"""MediaStorePipeline as a component, on a fake crawler: configuration, request building, identity."""

from __future__ import annotations

from pathlib import Path

import pytest
from itemadapter import ItemAdapter
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from mediacrawler.items import MediaAsset, Post
from mediacrawler.pipelines.media import (
    META_ASSET,
    MediaStorePipeline,
    download_error_reason,
    media_url_problem,
    pending_assets,
)


def make_pipeline(tmp_path: Path, **settings: object) -> MediaStorePipeline:
    crawler = get_crawler(settings_dict={"FILES_STORE": str(tmp_path / "files"), **settings})
    return build_from_crawler(MediaStorePipeline, crawler)


def post(*media: MediaAsset, reposted: Post | None = None, platform: str = "weibo") -> Post:
    return Post(platform=platform, post_id="1", url="https://weibo.com/1/a", author=None, created_at=None,
                media=list(media), reposted=reposted)


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"MEDIA_ENABLED": False}, "MEDIA_ENABLED"),
        ({"FILES_STORE": "s3://bucket/media"}, "local paths"),
        ({"MEDIA_INDEX": "mongo"}, "MEDIA_INDEX"),
        ({"MEDIA_INDEX": "redis"}, "REDIS_URL"),
        ({"MEDIA_CONCURRENCY_PER_HOST": 0}, "MEDIA_CONCURRENCY_PER_HOST"),
    ],
)
def test_not_configured(tmp_path: Path, settings: dict, why: str) -> None:
    with pytest.raises(NotConfigured, match=why):
        make_pipeline(tmp_path, **settings)


def test_default_store_and_layout(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    assert pipe.cas.root == tmp_path / "files"
    assert {p.name for p in pipe.cas.root.iterdir()} == {"objects", "tmp", "quarantine"}
    assert pipe.index_backend == "sqlite"


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
     (None, "invalid-url"), ("http://[::1/a", "invalid-url")],
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
    from twisted.web._newclient import ResponseFailed, _DataLoss

    assert download_error_reason(IgnoreRequest("offsite")) == "filtered"
    assert download_error_reason(ResponseFailed([Failure(_DataLoss())])) == "dataloss"
    assert download_error_reason(TimeoutError()) == "timeout"
    assert download_error_reason(ConnectionRefusedError()) == "connection-error"
    assert download_error_reason(ValueError("x")) == "download-error"
