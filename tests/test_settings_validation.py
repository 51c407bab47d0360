"""Settings validated at start-up (issue #20 points 5 and 6): every declared setting of settings.py refuses a wrong
value with one line naming it; ``scrapy crawl`` and ``mediacrawler status`` exit 2 on a bad setting or a REDIS_URL
that is misspelt, unreachable or refuses the password, within seconds and without the password in any output.
Real subprocesses and a real redis-server (``requirepass``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.test import get_crawler

from mediacrawler.config import (LocalPath, NeedsRedis, OneOf, Parsed, Range, TimeZone, declarations,
                                 settings_problem)
from mediacrawler.distributed.connection import masked_url
from tests.plugins.redis_server import free_port, redis_server_binary

PASSWORD = "s3cret-Pa55word"


def project_settings() -> Settings:
    settings = Settings()
    settings.setmodule("mediacrawler.settings", priority="project")
    return settings


def wrong_value(hint: object, constraints: tuple[object, ...]) -> str:
    """A command-line value that does not fit the declaration."""
    for c in constraints:
        if isinstance(c, Range) and c.min is not None:
            return str(c.min - 1)
        if isinstance(c, LocalPath):
            return "s3://bucket/media"
        if isinstance(c, OneOf):
            return "no such thing"
        if isinstance(c, TimeZone):
            return "Mars/Olympus_Mons"
        if isinstance(c, Parsed) and hint is str:
            return "/{post_id}/{nope}"
    if typing.get_origin(hint) is list:
        return "a,b"
    base = typing.get_origin(hint) or hint
    return {bool: "maybe", int: "8MiB", float: "fast", dict: "fast"}[base]  # type: ignore[index]


DECLARED = declarations()
#: Those a command-line value can fail (any text is a string or a list of strings: the <PLATFORM>_TARGETS are
#: checked per entry by commands/crawl.py, REDIS_URL by the start-up connect, tested below).
REFUTABLE = sorted(n for n, (hint, _, constraints) in DECLARED.items()
                   if constraints or hint not in (str, list[str]))


def test_the_project_defaults_pass() -> None:
    assert settings_problem(project_settings()) is None
    assert len(DECLARED) > 90  # every scalar setting of settings.py, Scrapy's own we set among them


@pytest.mark.parametrize("name", REFUTABLE)
def test_every_declared_setting_refuses_a_wrong_value(name: str) -> None:
    hint, _, constraints = DECLARED[name]
    value = wrong_value(hint, constraints)
    settings = project_settings()
    settings.set(name, value, priority="cmdline")
    problem = settings_problem(settings)
    # A parsed value is refused in its parser's own words (LIBRARY_TEMPLATE), any other with what it expects.
    said = ": " if any(isinstance(c, Parsed) for c in constraints) and hint is str else ": expected "
    assert problem is not None and problem.startswith(f"{name}={value!r}{said}"), problem
    assert "\n" not in problem


def test_needs_redis_and_ranges_say_what_they_expect() -> None:
    settings = project_settings()
    settings.set("MEDIA_INDEX", "redis", priority="cmdline")
    assert settings_problem(settings) == "MEDIA_INDEX='redis': expected REDIS_URL to be set for 'redis'"
    settings.set("REDIS_URL", "redis://127.0.0.1:6379/0", priority="cmdline")
    assert settings_problem(settings) is None
    settings = project_settings()
    settings.set("FACEBOOK_PAGE_SIZE", "101", priority="cmdline")
    assert settings_problem(settings) == "FACEBOOK_PAGE_SIZE='101': expected an integer >= 1 and <= 100"
    settings = project_settings()
    settings.set("CONCURRENT_REQUESTS", 2.5, priority="cmdline")  # getint would truncate it silently
    assert settings_problem(settings) == "CONCURRENT_REQUESTS=2.5: expected an integer >= 1"
    assert any(isinstance(c, NeedsRedis) for c in DECLARED["CACHE_BACKEND"][2])
    settings = project_settings()
    settings.set("PLATFORM_BACKOFF_BASE", "500", priority="cmdline")
    assert settings_problem(settings) == "PLATFORM_BACKOFF_BASE='500': expected a number <= PLATFORM_BACKOFF_MAX"
    settings.set("PLATFORM_BACKOFF_MAX", "600", priority="cmdline")
    assert settings_problem(settings) is None


def test_masked_url() -> None:
    assert masked_url(f"redis://:{PASSWORD}@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert masked_url(f"redis://user:{PASSWORD}@h:1/2") == "redis://user:***@h:1/2"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def run(argv: list[str], cwd: Path, *, redis_url: str | None = None, timeout: float = 60) -> tuple[int, str, str,
                                                                                                    float]:
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    for name in ("REDIS_URL", "CACHE_BACKEND", "CHECKPOINT_BACKEND"):
        env.pop(name, None)
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def crawl(tmp_path: Path, *args: str, redis_url: str | None = None) -> tuple[int, str, str, float]:
    # Nothing listens on the platform root: a crawl that started would log its failed requests.
    return run([sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", "uid=7365120894",
                "-s", f"WEIBO_BASE_URL=http://127.0.0.1:{free_port()}", "-s", f"FILES_STORE={tmp_path / 'files'}",
                "-s", f"CHECKPOINT_DIR={tmp_path / 'cp'}", "-s", f"OUTPUT_DIR={tmp_path / 'out'}", *args],
               tmp_path, redis_url=redis_url)


def status(tmp_path: Path, redis_url: str) -> tuple[int, str, str, float]:
    return run([sys.executable, "-m", "mediacrawler", "status"], tmp_path, redis_url=redis_url)


@pytest.mark.parametrize(("setting", "value"), [
    ("MEDIA_VIDEO_MAX_HEIGHT", "abc"),
    ("MEDIA_SEGMENT_SIZE", "8MiB"),
    ("FILES_STORE", "s3://bucket/media"),
    ("MEDIA_INDEX", "redis"),
    ("DOWNLOAD_DELAY", "fast"),
    # #20: the values a component refused by switching itself off; the rate format is the component's own parser.
    ("RATE_BUDGET", '{"weibo": "fast"}'),
    ("RATE_BUDGET", '{"weibo": "2/s", "media": "0/s"}'),
    ("PLATFORM_BACKOFF_BASE", "500"),
    ("METRICS_PORT", "70000"),
    ("SHUTDOWN_POLL_INTERVAL", "0"),
])
def test_scrapy_crawl_exits_2_naming_the_setting(tmp_path: Path, setting: str, value: str) -> None:
    code, out, err, _ = crawl(tmp_path, "-s", f"{setting}={value}")
    assert code == 2, err[-2000:]
    assert err.strip().splitlines() == [f"error: {settings_problem_line(setting, value)}"]
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def settings_problem_line(setting: str, value: str) -> str:
    settings = project_settings()
    settings.set("FILES_STORE", "files")
    settings.set(setting, value, priority="cmdline")
    problem = settings_problem(settings)
    assert problem is not None
    return problem


@pytest.mark.parametrize("url", ["unreachable", "127.0.0.1:6379/0"])
def test_unusable_redis_url_exits_2_within_15_s(tmp_path: Path, url: str) -> None:
    if url == "unreachable":
        url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    for code, out, err, took in (crawl(tmp_path, redis_url=url), status(tmp_path, url)):
        assert code == 2, err[-2000:]
        assert took < 15
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "REDIS_URL=" in lines[0] and "Traceback" not in err, err[-2000:]
        assert PASSWORD not in err + out


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[int]:
    """A real redis-server with ``requirepass``."""
    port = free_port()
    proc = subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--requirepass", PASSWORD, "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD, socket_connect_timeout=1)
    deadline = time.monotonic() + 10
    while True:  # bounded by the deadline
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("redis-server with requirepass did not start")
            time.sleep(0.05)
    yield port
    proc.terminate()
    proc.wait(10)


def test_wrong_password_exits_2_at_start_without_the_password(tmp_path: Path, password_redis: int) -> None:
    wrong = f"redis://:{PASSWORD}-wrong@127.0.0.1:{password_redis}/0"
    for url in (wrong, f"redis://127.0.0.1:{password_redis}/0"):
        for code, out, err, took in (crawl(tmp_path, redis_url=url), status(tmp_path, url)):
            assert code == 2, err[-2000:]
            assert took < 15
            lines = err.strip().splitlines()
            assert len(lines) == 1 and "REDIS_URL=" in lines[0], err[-2000:]
            assert "password" in lines[0]
            assert PASSWORD not in err + out


# A crawl started without the crawl command (a script's CrawlerProcess) has no start-up check: each component
# then refuses the value itself, failing the crawl with one line naming the setting; it never switches itself off.
COMPONENT_MISCONFIGURATIONS = [
    ("mediacrawler.middlewares.rate_budget.RateBudgetMiddleware", {"RATE_BUDGET": {"weibo": "fast"}}, "RATE_BUDGET"),
    ("mediacrawler.middlewares.rate_budget.RateBudgetMiddleware", {"RATE_BUDGET": {"weibo": "1/s"},
                                                                  "RATE_BUDGET_BURST": 0}, "RATE_BUDGET_BURST"),
    ("mediacrawler.middlewares.platform_errors.PlatformErrorsMiddleware", {"PLATFORM_BACKOFF_BASE": 500},
     "PLATFORM_BACKOFF_BASE"),
    ("mediacrawler.middlewares.media_slots.MediaSlotMiddleware", {"MEDIA_DOWNLOAD_DELAY": -1}, "MEDIA_DOWNLOAD_DELAY"),
    ("mediacrawler.middlewares.media_slots.MediaSlotMiddleware", {"MEDIA_CONCURRENCY_PER_HOST": 0},
     "MEDIA_CONCURRENCY_PER_HOST"),
    ("mediacrawler.middlewares.body_limits.BodyLimitsMiddleware", {"PLATFORM_API_MAXSIZE": -1}, "PLATFORM_API_MAXSIZE"),
    ("mediacrawler.middlewares.body_limits.BodyLimitsMiddleware", {"MEDIA_MAXSIZE": -1}, "MEDIA_MAXSIZE"),
    ("mediacrawler.middlewares.media_redirects.MediaRedirectMiddleware", {"MEDIA_MAX_REDIRECTS": -1},
     "MEDIA_MAX_REDIRECTS"),
    ("mediacrawler.pipelines.dedupe.DedupePipeline", {"DEDUPE_TTL": -1}, "DEDUPE_TTL"),
    ("mediacrawler.pipelines.dedupe.DedupePipeline", {"DEDUPE_CLAIM_TTL": 0}, "DEDUPE_CLAIM_TTL"),
    ("mediacrawler.extensions.metrics.MetricsExtension", {"METRICS_PORT": "http"}, "METRICS_PORT"),
    ("mediacrawler.extensions.metrics.MetricsExtension", {"METRICS_PORT": 70000}, "METRICS_PORT"),
    ("mediacrawler.extensions.retries.RetryExtension", {"RETRY_MEDIA_MAX_ATTEMPTS": 0}, "RETRY_MEDIA_MAX_ATTEMPTS"),
    ("mediacrawler.extensions.shutdown.ShutdownGraceExtension", {"SHUTDOWN_GRACE": -1}, "SHUTDOWN_GRACE"),
    ("mediacrawler.extensions.shutdown.ShutdownGraceExtension", {"SHUTDOWN_POLL_INTERVAL": 0},
     "SHUTDOWN_POLL_INTERVAL"),
]


@pytest.mark.parametrize(("path", "values", "name"), COMPONENT_MISCONFIGURATIONS,
                         ids=[f"{p.rsplit('.', 1)[1]}-{n}" for p, _, n in COMPONENT_MISCONFIGURATIONS])
def test_a_component_refuses_a_bad_value_instead_of_switching_off(tmp_path: Path, path: str, values: dict[str, Any],
                                                                   name: str) -> None:
    settings = project_settings()
    settings.set("FILES_STORE", str(tmp_path / "files"))
    settings.set("CHECKPOINT_DIR", str(tmp_path / "cp"))
    settings.set("EXTENSIONS", {}, priority="cmdline")  # get_crawler builds them: only the one under test here
    settings.setdict(values, priority="cmdline")
    crawler = get_crawler(settings_dict=dict(settings.copy_to_dict()))
    with pytest.raises(ValueError) as caught:
        build_from_crawler(load_object(path), crawler)
    assert not isinstance(caught.value, NotConfigured)
    message = str(caught.value)
    assert message.startswith(f"{name}=") and "\n" not in message, message


def test_a_switched_off_component_still_says_why() -> None:
    from mediacrawler.middlewares.rate_budget import RateBudgetMiddleware
    from mediacrawler.extensions.shutdown import ShutdownGraceExtension

    with pytest.raises(NotConfigured, match="RATE_BUDGET is empty"):
        RateBudgetMiddleware(get_crawler(settings_dict={"RATE_BUDGET": {}}))
    with pytest.raises(NotConfigured, match="SHUTDOWN_GRACE is 0"):
        ShutdownGraceExtension(get_crawler(settings_dict={"SHUTDOWN_GRACE": 0}))
