"""Helpers for component tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

import mediacrawler.settings as project_settings
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox


def project_settings_dict(**overrides: Any) -> dict[str, Any]:
    """The project's settings (mediacrawler/settings.py: where every project default lives) plus overrides."""
    s = Settings()
    s.setmodule(project_settings, priority="project")
    values = {k: v for k, v in s.items() if k.isupper()}
    values.update(overrides)
    return values


def project_crawler(spidercls: type[Spider] = Spider, **overrides: Any) -> Crawler:
    """A fake crawler (``get_crawler``) with the project's settings, for ``build_from_crawler(Component, crawler)``."""
    settings = project_settings_dict(**overrides)
    settings.pop("ADDONS", None)  # the output add-on is a crawl-level concern; component tests export nothing
    return get_crawler(spidercls, settings)


def weibo_sandbox(uid: int, pages: int, per_page: int) -> Any:
    """A module-scoped fixture (``sb = weibo_sandbox(UID, PAGES, PER_PAGE)``): one sandbox serving one Weibo user's
    ``pages`` x ``per_page`` timeline, started once per test module."""

    @pytest.fixture(scope="module")
    def sb() -> Iterator[SandboxProcess]:
        with start_sandbox(weibo_users=(uid,), weibo_pages=pages, weibo_per_page=per_page,
                           startup_timeout=30) as proc:
            yield proc

    return sb
