"""Secrets never reach a log line, stderr, a record, a checkpoint or a feed; no request leaves 127.0.0.1.

End to end: real ``scrapy crawl`` / ``mediacrawler enqueue`` subprocesses against the sandbox's ``/hostile/echo``
mount (error envelopes that echo the request's cookie or token, as is, lower-cased and URL-encoded, with a
``Set-Cookie``) and a real redis-server with ``requirepass``. Every crawl runs under a ``socket.connect`` /
``socket.getaddrinfo`` audit hook that records any address outside loopback. See docs/operations.md, "Secrets in
logs". Unit tests of the scrubber (mediacrawler/scrub.py) need no server.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from mediacrawler import scrub as scrub_module
from mediacrawler.parsers import facebook as fb_parser
from mediacrawler.parsers._common import PlatformError
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler.scrub import MASK, Scrubber, ScrubFilter, configured_secrets, mask_url
from tests.plugins.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[1]
COOKIE_SECRET = "Zq7/Kp+Wm3=Rt9xV2bN8"  # characters that URL-encoding changes
WEIBO_COOKIE = f"SUB={COOKIE_SECRET}; _T_WM=Hc4Lr8Pf2Jd6"
BILIBILI_COOKIE = f"SESSDATA={COOKIE_SECRET}; bili_jct=Xy5Vb3Nm1Qa7"
FB_TOKEN = "fbTok9Qw2Er5Ty8Ui1Op4As7Df0Gh3Jk6Lz"  # not EAA-shaped: only its configuration can mask it
REDIS_PASSWORD = "rPw5Hj8Kl2Mn6Bv9Cx"

# Runs sys.argv[1:] as a module (``scrapy`` or ``mediacrawler``) under an audit hook that writes every non-loopback
# address the process connects to or resolves to the file named by MC_EGRESS_LOG.
AUDITED = textwrap.dedent(
    """
    import os, runpy, sys
    LOG = os.environ["MC_EGRESS_LOG"]
    LOOPBACK = ("127.", "::1", "localhost", "0:0:0:0:0:0:0:1")

    def outside(host):
        host = host.decode() if isinstance(host, bytes) else str(host)
        return bool(host) and not host.startswith(LOOPBACK)

    def hook(event, args):
        host = None
        if event == "socket.connect" and isinstance(args[1], tuple) and args[1]:
            host = args[1][0]
        elif event == "socket.getaddrinfo" and args and args[0] is not None:
            host = args[0]
        if host is not None and outside(host):
            with open(LOG, "a") as f:
                f.write(f"{event} {host}\\n")

    sys.addaudithook(hook)
    module = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    """
)


def windows(secret: str) -> set[str]:
    """Every 8-character piece of every form the secret travels in (lower-cased, for a case-blind search)."""
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    return {f[i:i + 8].lower() for f in forms for i in range(len(f) - 7)}


def assert_absent(secret: str, texts: dict[str, str]) -> None:
    pieces = windows(secret)
    for where, text in texts.items():
        low = text.lower()
        leaked = sorted(p for p in pieces if p in low)
        assert not leaked, f"{where} holds pieces {leaked[:3]} of a secret:\n{text[-2000:]}"


def everything_written(tmp_path: Path, proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """stdout, stderr and every file the run left under ``tmp_path`` (log, feed, checkpoints, retry records)."""
    texts = {"stdout": proc.stdout, "stderr": proc.stderr}
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and path.name != "egress.log":
            texts[str(path.relative_to(tmp_path))] = path.read_text("utf-8", "replace")
    return texts


def audited_run(tmp_path: Path, module: str, *args: str, env: dict[str, str] | None = None,
                timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``python -m <module> args…`` under the egress audit hook: the finished process and the addresses outside
    loopback it used."""
    egress = tmp_path / "egress.log"
    full_env = {k: v for k, v in os.environ.items()
                if not k.endswith(("_COOKIE", "_ACCESS_TOKEN")) and k not in ("REDIS_URL", "CACHE_BACKEND")
                and not k.startswith("TLDEXTRACT_")}
    full_env.update({"SCRAPY_SETTINGS_MODULE": "mediacrawler.settings", "MC_EGRESS_LOG": str(egress),
                     # A cache of its own: tldextract would otherwise reuse a list an earlier run fetched.
                     "TLDEXTRACT_CACHE": str(tmp_path / "tldextract-cache"), **(env or {})})
    proc = subprocess.run([sys.executable, "-c", AUDITED, module, *args], cwd=ROOT, env=full_env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False)
    return proc, egress.read_text().splitlines() if egress.exists() else []


def crawl(tmp_path: Path, spider: str, *args: str, env: dict[str, str] | None = None,
          timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    return audited_run(
        tmp_path, "scrapy", "crawl", spider, *args,
        "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "RETRY_TIMES=0",
        "-s", "PLATFORM_BACKOFF_BASE=0.05", "-s", "PLATFORM_BACKOFF_MAX=0.1", "-s", "LOG_LEVEL=DEBUG",
        "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
        "-s", f"OUTPUT_DIR={tmp_path / 'out'}", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}",
        env=env, timeout=timeout)


# -- the scrubber, unit ------------------------------------------------------------------------------------------


def test_configured_secrets_are_cookie_values_tokens_and_url_passwords() -> None:
    settings = {"WEIBO_COOKIE": WEIBO_COOKIE, "FACEBOOK_ACCESS_TOKEN": FB_TOKEN,
                "REDIS_URL": f"redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0", "BILIBILI_COOKIE": "lang=en"}
    assert configured_secrets(settings) == {COOKIE_SECRET, "Hc4Lr8Pf2Jd6", FB_TOKEN, REDIS_PASSWORD}


@pytest.mark.parametrize("form", [
    COOKIE_SECRET, COOKIE_SECRET.lower(), COOKIE_SECRET.upper(), quote(COOKIE_SECRET, safe=""),
    quote(COOKIE_SECRET, safe="").lower(), quote_plus(COOKIE_SECRET), quote(COOKIE_SECRET),
])
def test_every_form_of_a_secret_is_masked(form: str) -> None:
    scrubber = Scrubber([COOKIE_SECRET])
    text = scrubber(f"platform said: bad cookie SUB={form}; retry")
    assert MASK in text and text.startswith("platform said: bad cookie SUB=")
    assert_absent(COOKIE_SECRET, {"scrubbed": text})


def test_url_passwords_and_token_shapes_are_masked_unconfigured() -> None:
    text = Scrubber()("lost redis://user:hunter22@10.0.0.1:6379/0 and ?access_token=abc123def456&x=1 "
                      "EAAB1234567890ab")
    assert text == f"lost redis://user:{MASK}@10.0.0.1:6379/0 and ?access_token={MASK}&x=1 {MASK}"
    assert mask_url(f"redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    digest = "objects/ab/abeaa1234567890cdef1234567890abcdef redis://127.0.0.1:6379/0"
    assert Scrubber()(digest) == digest  # hex digests and plain URLs are left alone


def test_platform_errors_mask_registered_secrets_at_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scrub_module, "SCRUBBER", Scrubber([COOKIE_SECRET]))
    error = PlatformError("error", f"cookie {COOKIE_SECRET.lower()} rejected", code=20003)
    assert_absent(COOKIE_SECRET, {"message": error.message, "str": str(error)})


def test_facebook_masks_a_token_across_the_300_character_cut() -> None:
    message = "x" * 292 + FB_TOKEN + "y" * 80  # 400+ characters, the token from 292 to 327
    kind, text = fb_parser.classify_error({"error": {"message": message, "code": 4}}, 400, secrets=[FB_TOKEN])
    assert kind == "rate_limited"
    assert_absent(FB_TOKEN, {"message": text})
    assert FB_TOKEN[:8] not in text


def test_the_log_filter_masks_messages_arguments_and_tracebacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scrub_module, "SCRUBBER", Scrubber([REDIS_PASSWORD]))
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    handler.addFilter(ScrubFilter())
    log = logging.getLogger("tests.secrets")
    log.addHandler(handler)
    try:
        log.warning("lost Redis at %s", f"redis://:{REDIS_PASSWORD}@h/0")
        try:
            raise RuntimeError(f"auth {quote_plus(REDIS_PASSWORD).lower()} refused")
        except RuntimeError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    assert len(lines) == 2 and "Traceback" in lines[1]
    assert_absent(REDIS_PASSWORD, dict(enumerate(lines)))  # type: ignore[arg-type]


def test_the_record_factory_scrubs_what_a_handler_takes_and_never_formats_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scrub_module, "SCRUBBER", Scrubber([REDIS_PASSWORD]))
    factory = scrub_module._scrubbing_factory(logging.LogRecord)  # what install_log_scrubbing installs

    class Item:
        """An item whose repr a formatted "Scraped from" line would hold (and the scrubber then read)."""

        formatted = 0

        def __str__(self) -> str:
            Item.formatted += 1
            return f"redis://:{REDIS_PASSWORD}@h/0"

    log = logging.getLogger("tests.secrets.factory")
    handler = logging.Handler(logging.INFO)
    log.addHandler(handler)
    log.propagate = False
    try:
        dropped = factory(log.name, logging.DEBUG, __file__, 1, "Scraped %s", (Item(),), None)
        assert Item.formatted == 0 and dropped.args  # below the only handler's level: left as it was made
        taken = factory(log.name, logging.INFO, __file__, 1, "Scraped %s", (Item(),), None)
        assert Item.formatted == 1 and taken.args is None
        assert REDIS_PASSWORD not in taken.getMessage() and MASK in taken.getMessage()
        handler.setLevel(logging.DEBUG)  # the levels are read as each record is made
        assert REDIS_PASSWORD not in factory(log.name, logging.DEBUG, __file__, 1, "%s", (Item(),), None).msg
        # Made outside any logger, or by one whose records reach no handler but the last resort's level: scrubbed.
        assert factory("no.such.logger", logging.DEBUG, __file__, 1, "%s", (Item(),), None).args is None
        log.removeHandler(handler)
        assert factory(log.name, logging.WARNING, __file__, 1, "%s", (Item(),), None).args is None
        assert factory(log.name, logging.INFO, __file__, 1, "%s", (Item(),), None).args
    finally:
        log.removeHandler(handler)
        log.propagate = True


PROBE = textwrap.dedent(
    """
    import sys
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings
    import mediacrawler.settings

    settings = Settings()
    settings.setmodule(mediacrawler.settings, priority="project")
    settings.update({"ADDONS": {}, "LOG_FILE": sys.argv[1]}, priority="cmdline")

    class ProbeSpider(scrapy.Spider):
        name = "probe"

        async def start(self):
            # After Crawler.crawl() replaced Scrapy's root log handler (scrapy/crawler.py).
            self.logger.info("probe: cookie is %s", sys.argv[2])
            raise RuntimeError("probe: refused " + sys.argv[2].lower())
            yield

    process = CrawlerProcess(settings)
    process.crawl(ProbeSpider)
    process.start()
    """
)


def test_records_logged_after_scrapy_replaced_its_log_handler_are_scrubbed(tmp_path: Path) -> None:
    log = tmp_path / "probe.log"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COOKIE")}
    # Its own working directory: the project's default FILES_STORE and records database are relative to it.
    proc = subprocess.run([sys.executable, "-c", PROBE, str(log), COOKIE_SECRET], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**env, "WEIBO_COOKIE": WEIBO_COOKIE},
                          check=False)
    text = log.read_text("utf-8")
    assert f"probe: cookie is {MASK}" in text and "RuntimeError: probe: refused" in text, proc.stderr[-2000:]
    assert_absent(COOKIE_SECRET, {"log": text, "stderr": proc.stderr, "stdout": proc.stdout})


# -- end to end: platforms that echo the credential --------------------------------------------------------------


def test_weibo_error_echoing_the_cookie_is_scrubbed(sandbox: SandboxProcess, tmp_path: Path) -> None:
    sandbox.reset()
    proc, egress = crawl(tmp_path, "weibo", "-a", "uid=7365120894", "-a", "max_pages=2",
                         "-s", f"WEIBO_BASE_URL={sandbox.url}/hostile/echo/weibo",
                         env={"WEIBO_COOKIE": WEIBO_COOKIE})
    echoed = [r for r in sandbox.requests() if r["path"].startswith("/hostile/echo/weibo")]
    assert echoed and all(r["cookie"] for r in echoed), "the cookie must have been sent (and echoed)"
    assert_absent(COOKIE_SECRET, everything_written(tmp_path, proc))
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert "bad cookie" in log and MASK in log  # the platform's message is logged, masked
    assert egress == []


def test_bilibili_error_echoing_the_cookie_is_scrubbed(sandbox: SandboxProcess, tmp_path: Path) -> None:
    sandbox.reset()
    proc, egress = crawl(tmp_path, "bilibili", "-a", "mid=2", "-a", "max_pages=1",
                         "-s", f"BILIBILI_API_URL={sandbox.url}/hostile/echo/bilibili",
                         "-s", f"BILIBILI_WEB_URL={sandbox.url}/hostile/echo/bilibili",
                         env={"BILIBILI_COOKIE": BILIBILI_COOKIE})
    assert any(r["path"].startswith("/hostile/echo/bilibili") and r["cookie"] for r in sandbox.requests())
    assert_absent(COOKIE_SECRET, everything_written(tmp_path, proc))
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert "bad cookie" in log and MASK in log
    assert egress == []


def test_facebook_error_with_the_token_across_position_300_is_scrubbed(sandbox: SandboxProcess,
                                                                       tmp_path: Path) -> None:
    sandbox.reset()
    proc, egress = crawl(tmp_path, "facebook", "-a", "page=100000000000001", "-a", "max_pages=1",
                         "-s", f"FACEBOOK_GRAPH_URL={sandbox.url}/hostile/echo/facebook",
                         env={"FACEBOOK_ACCESS_TOKEN": FB_TOKEN})
    assert any(r["path"].startswith("/hostile/echo/facebook") for r in sandbox.requests())
    log = (tmp_path / "crawl.log").read_text("utf-8")
    assert "Invalid OAuth 2.0 access token xxxx" in log
    assert_absent(FB_TOKEN, everything_written(tmp_path, proc))
    assert egress == []


def test_no_request_leaves_loopback_when_a_server_sets_cookies(sandbox: SandboxProcess, tmp_path: Path) -> None:
    """The echo mount answers with ``Set-Cookie``: Scrapy's cookie middleware asks tldextract for the public
    suffix, which, left alone, fetches the list from publicsuffix.org."""
    sandbox.reset()
    proc, egress = crawl(tmp_path, "weibo", "-a", "uid=7365120894", "-a", "max_pages=1",
                         "-s", f"WEIBO_BASE_URL={sandbox.url}/hostile/echo/weibo")
    assert any(r["path"].startswith("/hostile/echo/weibo") for r in sandbox.requests()), proc.stderr[-2000:]
    assert egress == []


# -- end to end: the Redis password ------------------------------------------------------------------------------


@pytest.fixture
def locked_redis(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory(password=REDIS_PASSWORD)


def worker_crawl(tmp_path: Path, redis_url: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    return crawl(tmp_path, "weibo", "-s", f"REDIS_URL={redis_url}", "-s", "DISTRIBUTED_REDIS_GIVE_UP=1.5",
                 "-s", "DISTRIBUTED_IDLE_CLOSE=3", "-s", "WEIBO_BASE_URL=http://127.0.0.1:9/weibo", timeout=60)


@pytest.mark.parametrize("case", ["auth", "outage"])
def test_redis_password_stays_out_of_worker_logs(case: str, locked_redis: RedisServer, tmp_path: Path) -> None:
    # A wrong password or an unreachable Redis is refused at start-up: one line naming REDIS_URL, its password
    # masked (a password changed while crawling: tests/test_redis_failures.py, also without the password).
    port = locked_redis.port if case == "auth" else free_port()
    proc, egress = worker_crawl(tmp_path, f"redis://:{REDIS_PASSWORD[:-1]}X@127.0.0.1:{port}/0")
    texts = everything_written(tmp_path, proc)
    assert proc.returncode == 2, proc.stderr
    assert f"REDIS_URL='redis://:***@127.0.0.1:{port}/0'" in proc.stderr
    assert_absent(REDIS_PASSWORD[:-1] + "X", texts)
    assert egress == []


@pytest.mark.parametrize("case", ["auth", "outage"])
def test_enqueue_error_names_the_redis_url_without_its_password(case: str, locked_redis: RedisServer,
                                                                 tmp_path: Path) -> None:
    port = locked_redis.port if case == "auth" else free_port()
    url = f"redis://:{REDIS_PASSWORD[:-1]}X@127.0.0.1:{port}/0"
    proc, egress = audited_run(tmp_path, "mediacrawler", "enqueue", "weibo", "uid=7365120894", "--redis-url", url)
    assert proc.returncode == 2, proc.stderr  # refused by the start-up check, before anything is queued
    assert f"REDIS_URL='redis://:***@127.0.0.1:{port}/0'" in proc.stderr
    assert_absent(REDIS_PASSWORD[:-1] + "X", {"stdout": proc.stdout, "stderr": proc.stderr})
    assert egress == []


def test_enqueue_with_the_right_password_queues_and_prints_no_password(locked_redis: RedisServer,
                                                                       tmp_path: Path) -> None:
    proc, _ = audited_run(tmp_path, "mediacrawler", "enqueue", "weibo", "uid=7365120894", "--redis-url",
                          locked_redis.url)
    assert proc.returncode == 0, proc.stderr
    assert "queued" in proc.stdout
    assert_absent(REDIS_PASSWORD, {"stdout": proc.stdout, "stderr": proc.stderr})
    with locked_redis.client() as client:
        assert client.keys("*"), "the job must be in Redis"
        dump = b" ".join(client.dump(k) or b"" for k in client.keys("*")).decode("latin-1")
    assert_absent(REDIS_PASSWORD, {"redis": dump})

