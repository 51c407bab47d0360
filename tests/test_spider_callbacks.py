"""No spider callback is a generator that returns a value (Scrapy would drop it): the check Scrapy makes on every
response unless WARN_ON_GENERATOR_RETURN_VALUE is off, made here once for every callback of every spider."""

from __future__ import annotations

import inspect
import json

import pytest
from scrapy.http import TextResponse
from scrapy.spiderloader import SpiderLoader
from scrapy.utils.misc import is_generator_with_return_value

from mediacrawler import settings as project_settings
from mediacrawler.spiders._base import PlatformSpider

UID = 7365120894


def test_no_callback_is_a_generator_returning_a_value() -> None:
    from scrapy.settings import Settings

    loader = SpiderLoader.from_settings(Settings({"SPIDER_MODULES": project_settings.SPIDER_MODULES}))
    spiders = [loader.load(name) for name in loader.list()]
    assert {s.name for s in spiders} >= {"weibo", "bilibili", "facebook", "xhs", "douyin"}
    checked = 0
    for spidercls in spiders:
        assert issubclass(spidercls, PlatformSpider)
        for name, func in inspect.getmembers(spidercls, inspect.isgeneratorfunction):
            assert not is_generator_with_return_value(func), f"{spidercls.__name__}.{name}"
            checked += 1
    assert checked >= 30


def test_an_api_answer_is_decoded_once_for_the_errors_middleware_and_the_callback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mediacrawler.items import Source
    from mediacrawler.parsers import weibo as parser
    from mediacrawler.spiders import _base
    from mediacrawler.spiders.weibo import WeiboSpider
    from mediacrawler_sandbox.weibo import build_weibo_world
    from mediacrawler_sandbox.weibo_api import timeline_response
    from tests.utils import project_crawler

    world = build_weibo_world(users=(UID,), pages=1, per_page=20)
    body = json.dumps(timeline_response(world, parser.timeline_containerid(str(UID)), UID, page=1, since_id=None,
                                        base="http://127.0.0.1:1/weibo")).encode()
    decoded: list[object] = []
    real_loads = json.loads
    monkeypatch.setattr(_base.json, "loads", lambda text: decoded.append(text) or real_loads(text))
    spider = WeiboSpider.from_crawler(project_crawler(WeiboSpider), uid=str(UID))
    response = TextResponse("http://127.0.0.1:1/weibo/api/container/getIndex?page=1", body=body)
    assert spider.classify_response(response) == "ok"
    page = spider.parse_listing_payload(response, Source("weibo", spider.job, 1))
    assert len(page.posts) + len(page.incomplete) == 20 and len(decoded) == 1
    # Another response (a retry's) is decoded on its own; a body that is no JSON is "invalid", as before.
    assert spider.classify_response(response.replace(body=body)) == "ok" and len(decoded) == 2
    assert spider.classify_response(response.replace(body=b"<html>")) == "invalid"


def test_spiders_decode_an_answer_once_through_the_base_s_payload() -> None:
    # The errors middleware decoded it already (classify_response): a second json.loads per answer is waste.
    import ast
    from pathlib import Path

    spiders = Path(PlatformSpider.__module__.replace(".", "/")).parent
    root = Path(__file__).resolve().parent.parent
    found = []
    for path in sorted((root / spiders).glob("*.py")):
        if path.name == "_base.py":
            continue  # payload() itself
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "loads"
                    and node.args and "response" in ast.unparse(node.args[0])):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []
