"""The spider loader (``SPIDER_LOADER_CLASS``): ``scrapy crawl weibo`` imports the Weibo spider alone.

Scrapy's own loader imports every module of ``SPIDER_MODULES`` to find a spider by name, so each crawl paid for
the five platforms' argument models and parsers (docs/benchmarks.md, "Start-up"). Each of our spiders lives in
the module named like the spider (``mediacrawler/spiders/weibo.py`` holds ``weibo``): :meth:`SpiderLoader.load`
imports that module and takes the spider from it; any other name, and ``list``/``find_by_request``, fall back
to Scrapy's loader over every module (which also warns of duplicate names). An import error in the spider's
module is raised as is.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from scrapy.spiderloader import SpiderLoader as ScrapySpiderLoader
from scrapy.utils.spider import iter_spider_classes

from mediacrawler.config import setting

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.settings import BaseSettings


class SpiderLoader:
    """Loads a spider from its own module when it has one (see the module docstring), else as Scrapy does."""

    def __init__(self, settings: BaseSettings) -> None:
        self.settings = settings
        self.spider_modules: list[str] = setting(settings, "SPIDER_MODULES")
        self._everything: ScrapySpiderLoader | None = None

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(settings)

    def load(self, spider_name: str) -> type[Spider]:
        """The spider class named ``spider_name``; KeyError when no module defines it."""
        if spider_name.isidentifier():
            for package in self.spider_modules:
                name = f"{package}.{spider_name}"
                try:
                    module = import_module(name)
                except ModuleNotFoundError as e:
                    if e.name != name:
                        raise  # the spider's module is there and lacks something: loudly
                    continue
                for spidercls in iter_spider_classes(module):
                    if spidercls.name == spider_name:
                        return spidercls
        return self.everything().load(spider_name)

    def list(self) -> list[str]:
        return self.everything().list()

    def find_by_request(self, request: Request) -> list[str]:
        return self.everything().find_by_request(request)

    def everything(self) -> ScrapySpiderLoader:
        """Scrapy's loader, which imports every module of SPIDER_MODULES (built once, when first needed)."""
        if self._everything is None:
            self._everything = ScrapySpiderLoader.from_settings(self.settings)
        return self._everything
