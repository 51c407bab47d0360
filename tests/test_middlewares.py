"""Platform-error and session middlewares on a fake crawler (no network)."""

from __future__ import annotations

import json
import time

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import TextResponse
from scrapy.utils.misc import build_from_crawler

from mediacrawler.middlewares.platform_errors import PlatformErrorsMiddleware, backoff_delay, parse_retry_after
from mediacrawler.middlewares.sessions import SessionCookieMiddleware
from mediacrawler.spiders.weibo import WeiboSpider
from tests.utils import project_crawler

BASE = "http://127.0.0.1:9/weibo"


def make(settings: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    crawler = project_crawler(WeiboSpider, WEIBO_BASE_URL=BASE, **(settings or {}))
    crawler.spider = WeiboSpider.from_crawler(crawler, uid="1")
    crawler.stats.open_spider()  # type: ignore[union-attr]
    return crawler


def test_backoff_grows_and_is_bounded() -> None:
    delays = [backoff_delay(i, base=2, cap=30) for i in range(6)]
    assert delays == [2, 4, 8, 16, 30, 30]
    assert backoff_delay(0, base=2, cap=30, retry_after=10) == 10
    assert backoff_delay(0, base=2, cap=30, retry_after=1e9) == 30
    assert parse_retry_after(b"7") == 7.0 and parse_retry_after(b"Wed, 21 Oct 2015") is None


def api_request() -> Request:
    return Request(f"{BASE}/api/container/getIndex?page=1", meta={"mc_api": True, "mc_page": 1})


def response(req: Request, body: object, status: int = 200, headers: dict[str, str] | None = None) -> TextResponse:
    return TextResponse(req.url, status=status, body=json.dumps(body).encode(), encoding="utf-8",
                        request=req, headers=headers)


@pytest.mark.parametrize(
    ("body", "status", "headers", "min_delay"),
    [
        ({"ok": 0, "errno": "100005", "msg": "slow"}, 200, None, 1.0),
        ("<html>418</html>", 418, None, 1.0),
        ("", 432, None, 1.0),
        ("", 429, {"Retry-After": "5"}, 4.5),
    ],
)
def test_rate_limited_is_retried_later(body: object, status: int, headers: dict[str, str] | None,
                                       min_delay: float) -> None:
    mw = build_from_crawler(PlatformErrorsMiddleware, make({"PLATFORM_BACKOFF_BASE": 1.0}))
    req = api_request()
    out = mw.process_response(req, response(req, body, status, headers))
    assert isinstance(out, Request) and out.dont_filter
    assert out.meta["retry_times"] == 1 and out.meta["mc_page"] == 1
    assert out.meta["mc_not_before"] - time.time() >= min_delay - 0.5


def test_rate_limit_gives_up_after_the_budget() -> None:
    mw = build_from_crawler(PlatformErrorsMiddleware, make({"PLATFORM_RATE_LIMIT_RETRIES": 2}))
    req = api_request()
    req.meta["retry_times"] = 2
    with pytest.raises(IgnoreRequest):
        mw.process_response(req, response(req, {"ok": 0, "errno": "100005"}))


def test_end_of_list_and_ok_pass_through() -> None:
    mw = build_from_crawler(PlatformErrorsMiddleware, make())
    req = api_request()
    for body in ({"ok": 0, "msg": "这里还没有内容", "data": {"cards": []}}, {"ok": 1, "data": {"cards": []}}):
        resp = response(req, body)
        assert mw.process_response(req, resp) is resp


def test_media_requests_are_not_touched() -> None:
    mw = build_from_crawler(PlatformErrorsMiddleware, make())
    req = Request("http://127.0.0.1:9/media/x.jpg")
    resp = response(req, "", 418)
    assert mw.process_response(req, resp) is resp


def test_cookie_is_added_at_download_time_and_stripped_before_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEIBO_COOKIE", "SUB=secret-canary")
    mw = build_from_crawler(SessionCookieMiddleware, make())
    req = api_request()
    mw.process_request(req)
    assert req.headers[b"Cookie"] == b"SUB=secret-canary"
    mw.process_response(req, response(req, {"ok": 1}))
    assert b"Cookie" not in req.headers
    media = Request("http://cdn.example/x.jpg")
    mw.process_request(media)
    assert b"Cookie" not in media.headers  # never to another host
    same_host = Request(f"{BASE}/media/weibo/video/1_hd.mp4")
    mw.process_request(same_host)
    assert b"Cookie" not in same_host.headers  # nor to a media URL on the API's own host
    mw.process_request(req)
    mw.process_exception(req, TimeoutError())
    assert b"Cookie" not in req.headers
