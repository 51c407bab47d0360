"""``mediacrawler web`` in a real headless browser: Debian's chromium driven by Selenium through the system's
chromedriver (given by path; Selenium Manager off, so nothing downloads a browser or a driver, and the browser
reaches only 127.0.0.1). One browser and one ``mediacrawler web`` subprocess for the module, over the data of a
sandbox crawl (tests/plugins/web_data.py).

``make test`` installs ``chromium`` and ``chromium-driver`` where it runs as root with apt (``make browser``);
elsewhere these tests skip and say why. ``MC_WRITE_SCREENSHOT=1`` writes docs/web.png (the README's picture).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mediacrawler_sandbox.weibo import build_weibo_world
from tests.plugins.web_data import BVID, ROOT, SHOWCASE_UID, THREAD_POST, WebData

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--autoplay-policy=no-user-gesture-required", "--window-size=1280,900"]
WAIT = 30.0  # seconds any one thing may take to appear in the page
CRAWL_UID = "1669879400"

pytestmark = pytest.mark.slow


def _no_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -r requirements-dev.txt)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"no {path}: install Debian's {package} (make browser, as root with apt)"
    return None


@pytest.fixture(scope="module")
def server(web_data: WebData) -> Iterator[str]:
    """``mediacrawler web --port 0`` over the sandbox crawl's settings; its URL."""
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    env.pop("REDIS_URL", None)
    env.pop("WEB_AUTH", None)
    command = [sys.executable, "-m", "mediacrawler", "web", "--port", "0"]
    for pair in web_data.settings:
        command += ["-s", pair]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    url = None
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline and url is None:
        line = proc.stderr.readline().decode("utf-8", "replace")
        if not line:
            break
        lines.append(line)
        found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        url = found.group(1) if found else None
    try:
        assert url, "".join(lines)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _no_browser()
    if reason:
        pytest.skip(f"no browser for the web tests: {reason}")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download a browser or a driver
    os.environ["SE_AVOID_STATS"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="mc-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(what: Callable[[], Any], message: str, timeout: float = WAIT) -> Any:
    """``what()`` once it is truthy (exceptions of a page being replaced count as not yet), within ``timeout``."""
    from selenium.common.exceptions import WebDriverException

    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = what()
        except WebDriverException as e:
            last = e
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"{message} (last: {last!r})")


def cards(driver: Any) -> list[str]:
    return [c.get_attribute("data-post") for c in driver.find_elements("css selector", "article.card")]


def test_posts_page_lists_the_crawled_posts_and_the_author_filter_narrows(browser: Any, server: str) -> None:
    showcase = [f"weibo/{p.id}" for p in build_weibo_world().timeline(int(SHOWCASE_UID))]
    browser.get(server + "/")
    listed = cards(browser)
    assert set(showcase + [f"bilibili/{BVID}"]) <= set(listed) and len(listed) == 5
    if os.environ.get("MC_WRITE_SCREENSHOT") == "1":
        browser.get(server + "/?since=2026-01-01")  # the crawled posts, without the hostile fixture post of 2020
        wait_for(lambda: browser.execute_script(
            "return [...document.images].filter(i => i.getBoundingClientRect().top < innerHeight)"
            ".every(i => i.complete && i.naturalWidth > 0)"), "the grid's images in view")
        browser.save_screenshot(str(ROOT / "docs" / "web.png"))
        browser.get(server + "/")
    field = browser.find_element("css selector", "input[name=author]")
    field.send_keys(SHOWCASE_UID)
    field.submit()
    wait_for(lambda: "author=" in browser.current_url, "the filtered page")
    assert sorted(cards(browser)) == sorted(showcase)
    assert browser.find_element("id", "total").text == "3"


def test_post_page_images_load_and_video_plays_and_seeks(browser: Any, server: str) -> None:
    newest = build_weibo_world().timeline(int(SHOWCASE_UID))[0].id
    browser.get(f"{server}/posts/weibo/{newest}")
    images = browser.find_elements("css selector", "img.full")
    assert images
    widths = wait_for(lambda: (lambda w: w if all(w) else None)(browser.execute_script(
        "return [...document.querySelectorAll('img.full')].map(i => i.complete ? i.naturalWidth : 0)")),
        "every image loaded")
    assert len(widths) == len(images) and min(widths) > 0

    browser.get(f"{server}/posts/bilibili/{BVID}")
    assert len(browser.find_elements("css selector", "video.player track")) == 2
    played = browser.execute_async_script("""
        const done = arguments[arguments.length - 1], v = document.querySelector('video.player');
        v.muted = true;
        v.play().then(() => {
          const t0 = Date.now();
          (function check() {
            if (v.currentTime > 0.3) return done({ok: true, t: v.currentTime, d: v.duration});
            if (Date.now() - t0 > 15000) return done({ok: false, t: v.currentTime, err: v.error && v.error.code});
            setTimeout(check, 100);
          })();
        }).catch(e => done({ok: false, err: String(e)}));""")
    assert played["ok"], played
    seeked = browser.execute_async_script("""
        const done = arguments[arguments.length - 1], v = document.querySelector('video.player');
        v.pause();
        const timer = setTimeout(() => done({ok: false, t: v.currentTime}), 15000);
        v.addEventListener('seeked', () => { clearTimeout(timer); done({ok: true, t: v.currentTime}); },
                           {once: true});
        v.currentTime = Math.min(2.5, v.duration - 0.5);""")
    assert seeked["ok"] and abs(seeked["t"] - min(2.5, played["d"] - 0.5)) < 0.5, seeked
    tracks = browser.execute_script(
        "return [...document.querySelector('video.player').textTracks].map(t => t.language)")
    assert sorted(tracks) == ["en-US", "zh-CN"]


def test_comments_render_as_a_thread(browser: Any, server: str) -> None:
    browser.get(f"{server}/posts/weibo/{THREAD_POST}")
    nested = browser.find_elements(
        "xpath", "//ul[@class='thread']/li[@data-comment='1']/ul/li[@data-comment='11']"
                 "/ul/li[@data-comment='111']")
    assert len(nested) == 1 and "a reply to the reply" in nested[0].text
    top = browser.find_elements("xpath", "//ul[@class='thread']/li")
    assert [li.get_attribute("data-comment") for li in top] == ["1", "2"]


def test_start_form_refuses_a_bad_argument_then_starts_a_crawl_shown_on_the_jobs_page(browser: Any,
                                                                                       server: str) -> None:
    browser.get(f"{server}/start?spider=weibo")
    browser.find_element("id", "arg-uid").send_keys("12ab")
    browser.find_element("id", "go").click()
    error = wait_for(lambda: browser.find_elements("css selector", ".field-error[data-field=uid]"), "the error")
    assert error[0].text == "must be a numeric Weibo user id, e.g. 7365120894"
    uid = browser.find_element("id", "arg-uid")
    assert uid.get_attribute("value") == "12ab"  # what was typed stays, beside its error
    uid.clear()
    uid.send_keys(CRAWL_UID)
    browser.find_element("id", "arg-max_pages").send_keys("1")
    browser.find_element("id", "go").click()
    wait_for(lambda: "/crawls/" in browser.current_url, "the crawl's page")
    assert browser.find_element("css selector", "#crawl .state").text in ("running", "finished")
    browser.get(f"{server}/jobs")
    job = f"weibo-uid-{CRAWL_UID}"

    def progress() -> str | None:
        row = browser.find_elements("css selector", f"tr[data-job='{job}']")
        text = row[0].find_elements("css selector", ".progress") if row else []
        return text[0].text if text and re.search(r"[1-9]\d* posts", text[0].text) else None

    shown = wait_for(progress, "the crawl's progress on the jobs page", timeout=150)
    assert re.match(r"\d+ pages · [1-9]\d* posts · \d+ media", shown)
    state = wait_for(lambda: (lambda s: s if s in ("finished", "failed") else None)(browser.find_element(
        "css selector", f"tr[data-job='{job}'] .state").text), "the crawl to end", timeout=150)
    assert state == "finished"


def test_the_jobs_page_shows_the_last_run_of_a_crawl_started_elsewhere(browser: Any, server: str) -> None:
    # The showcase crawl of tests/plugins/web_data.py ran as `scrapy crawl`: its run is in the runs table.
    showcase = len(build_weibo_world().timeline(int(SHOWCASE_UID)))
    browser.get(f"{server}/jobs")
    row = wait_for(lambda: browser.find_elements("css selector", f"tr[data-job='weibo-uid-{SHOWCASE_UID}']"),
                   "the showcase job's row")[0]
    assert row.find_element("css selector", ".state").text == "finished"
    assert not row.find_elements("css selector", "a.state")  # not started from the page: no log to link
    assert re.match(rf"\d+ pages · {showcase} posts · [1-9]\d* media", row.find_element("css selector",
                                                                                      ".progress").text)
