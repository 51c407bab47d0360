"""No spider callback is a generator that returns a value (Scrapy would drop it): the check Scrapy makes on every
response unless WARN_ON_GENERATOR_RETURN_VALUE is off, made here once for every callback of every spider."""

from __future__ import annotations

import inspect

from scrapy.spiderloader import SpiderLoader
from scrapy.utils.misc import is_generator_with_return_value

from mediacrawler import settings as project_settings
from mediacrawler.spiders._base import PlatformSpider


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
