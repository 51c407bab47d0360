"""Date windows (``-a since``/``-a until``): the pure window functions, and real crawls against one sandbox whose
Weibo timeline has 10 pages spanning months (docs/platforms.md, "Date windows"); Facebook's ``-a post`` list, on the
same sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from zoneinfo import ZoneInfo

import pytest

from mediacrawler.parsers._common import iso_utc
from mediacrawler_sandbox import bilibili
from mediacrawler_sandbox.facebook import PAGE_ID, build_facebook_world
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox
from mediacrawler_sandbox.weibo import build_weibo_world
from mediacrawler.spiders._args import validate_args
from mediacrawler.spiders._window import DateWindow, cut_page, parse_when, window_suffix
from mediacrawler.spiders.weibo import WeiboSpider

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894
PAGES = 10
SHANGHAI = ZoneInfo("Asia/Shanghai")


# --- the window itself ------------------------------------------------------------------------------------------
def test_a_bare_date_is_local_midnight_and_an_offset_is_kept() -> None:
    assert iso_utc(parse_when("2026-03-01", SHANGHAI)) == "2026-02-28T16:00:00Z"
    assert iso_utc(parse_when("2026-03-01T08:30", SHANGHAI)) == "2026-03-01T00:30:00Z"
    assert iso_utc(parse_when("2026-03-01T08:30:00Z", SHANGHAI)) == "2026-03-01T08:30:00Z"
    assert iso_utc(parse_when("2026-03-01 08:30-05:00", SHANGHAI)) == "2026-03-01T13:30:00Z"
    with pytest.raises(ValueError, match="not an ISO 8601"):
        parse_when("last tuesday", SHANGHAI)


def test_since_is_inclusive_until_exclusive_unknown_times_kept() -> None:
    window = DateWindow.of("2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z", UTC)
    assert window is not None and DateWindow.of(None, None, UTC) is None
    assert window.admits("2026-03-01T00:00:00Z") and window.admits("2026-03-01T23:59:59Z")
    assert not window.admits("2026-03-02T00:00:00Z") and not window.admits("2026-02-28T23:59:59Z")
    assert window.admits(None)
    assert window.bounds_s() == (int(datetime(2026, 3, 1, tzinfo=UTC).timestamp()),
                                 int(datetime(2026, 3, 2, tzinfo=UTC).timestamp()))


def test_a_page_stops_the_walk_only_when_all_its_regular_posts_are_older() -> None:
    window = DateWindow(since="2026-03-01T00:00:00Z")
    old, new = "2026-02-01T00:00:00Z", "2026-03-05T00:00:00Z"
    assert cut_page(window, [(old, False), (old, False)]) == ([False, False], True)
    # A pinned post, however new, never keeps the page from being older; nor, alone, does it stop anything.
    assert cut_page(window, [(new, True), (old, False)]) == ([True, False], True)
    assert cut_page(window, [(old, True)]) == ([False], False)
    assert cut_page(window, [(new, False), (old, False)]) == ([True, False], False)
    assert cut_page(window, [(None, False)]) == ([True], False)


def test_bad_windows_are_one_line_and_a_window_is_its_own_job() -> None:
    assert "since (2026-03-02) must be before until (2026-03-01)" in str(
        validate_args(WeiboSpider, {"uid": "1", "since": "2026-03-02", "until": "2026-03-01"}))
    assert "not an ISO 8601 date" in str(validate_args(WeiboSpider, {"uid": "1", "since": "yesterday"}))
    assert validate_args(WeiboSpider, {"uid": "1", "since": "2026-03-01"}) is None
    keys = {window_suffix(None, None), window_suffix("2026-03-01", None), window_suffix(None, "2026-03-01"),
            window_suffix("2026-03-01", "2026-04-01"), window_suffix("2026-03-01T00:00+08:00", None),
            window_suffix("2026-03-01T00:00-08:00", None)}
    assert len(keys) == 6 and "" in keys


def test_time_zone_reads_the_bare_dates_and_each_platform_has_its_own() -> None:
    from scrapy.utils.test import get_crawler

    from mediacrawler.spiders.facebook import FacebookSpider

    weibo = WeiboSpider.from_crawler(get_crawler(WeiboSpider, {}), uid="1", since="2026-03-01")
    assert weibo.date_window() == DateWindow(since="2026-02-28T16:00:00Z")
    facebook = FacebookSpider.from_crawler(get_crawler(FacebookSpider, {}), page="1", since="2026-03-01")
    assert facebook.date_window() == DateWindow(since="2026-03-01T00:00:00Z")
    pacific = WeiboSpider.from_crawler(get_crawler(WeiboSpider, {"TIME_ZONE": "America/Los_Angeles"}),
        uid="1", since="2026-03-01", until="2026-03-02T00:00:00+08:00")
    assert pacific.date_window() == DateWindow(since="2026-03-01T08:00:00Z", until="2026-03-01T16:00:00Z")
    assert weibo.job != WeiboSpider.from_crawler(get_crawler(WeiboSpider, {}), uid="1").job


def test_the_pipeline_drops_what_a_chain_dated_outside_and_keeps_the_rest() -> None:
    from scrapy.utils.test import get_crawler

    from mediacrawler.items import Post
    from mediacrawler.pipelines.window import DateWindowPipeline, OutsideWindow
    from mediacrawler.spiders.bilibili import BilibiliSpider

    crawler = get_crawler(BilibiliSpider, {})
    crawler.spider = crawler.spidercls.from_crawler(crawler, bvid="BV1Sbx411A01", since="2026-03-01T00:00:00Z",
                                            until="2026-04-01T00:00:00Z")
    assert crawler.stats is not None
    pipeline = DateWindowPipeline.from_crawler(crawler)

    def post(created_at: str | None) -> Post:
        return Post(platform="bilibili", post_id="BV1Sbx411A01", url="https://www.bilibili.com/video/BV1Sbx411A01",
                    author=None, created_at=created_at, source=None, fetched_at=None)

    for inside in ("2026-03-01T00:00:00Z", "2026-03-31T23:59:59Z", None):
        assert pipeline.process_item(post(inside)).created_at == inside
    for outside in ("2026-02-28T23:59:59Z", "2026-04-01T00:00:00Z"):
        with pytest.raises(OutsideWindow, match="outside the date window"):
            pipeline.process_item(post(outside))
    assert crawler.stats.get_value("window/outside") == 2
    crawler.spider = crawler.spidercls.from_crawler(crawler, bvid="BV1Sbx411A01")  # no window: nothing is judged
    assert pipeline.process_item(post("2020-01-01T00:00:00Z")).created_at == "2020-01-01T00:00:00Z"


# --- crawls -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxProcess]:
    with start_sandbox(weibo_users=(UID,), weibo_pages=PAGES, startup_timeout=30) as proc:
        yield proc


def crawl(tmp_path: Path, sandbox: SandboxProcess, spider: str, *args: str, media: bool = False
          ) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], str]:
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider, *args,
           "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}", "-s", f"BILIBILI_API_URL={sandbox.url}/bilibili",
           "-s", f"FACEBOOK_GRAPH_URL={sandbox.url}/facebook/v19.0", "-s", "DOWNLOAD_DELAY=0",
           "-s", "AUTOTHROTTLE_ENABLED=0", "-s", f"MEDIA_ENABLED={int(media)}",
           "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", "LOG_LEVEL=DEBUG", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-s", "MEDIA_COMMIT_PROCESS=0",
           "-O", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "WEIBO_COOKIE", "BILIBILI_COOKIE")}
    env["FACEBOOK_ACCESS_TOKEN"] = "sandbox-token"
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []
    log = (tmp_path / "crawl.log").read_text("utf-8") if (tmp_path / "crawl.log").exists() else ""
    return proc, rows, log


def test_a_window_over_pages_3_and_4_of_a_10_page_timeline(sandbox: SandboxProcess, tmp_path: Path) -> None:
    world = build_weibo_world(seed=1, users=(UID,), pages=PAGES, per_page=10)
    timeline = world.timeline(UID)
    span = timeline[0].created_at - timeline[-1].created_at
    assert span > timedelta(days=60), span  # the listing spans months: the window is a small part of it
    # until: a post in the middle of page 3 (exclusive, so that post is out); since: one in the middle of page 4,
    # written in Shanghai time without an offset (TIME_ZONE's default for Weibo), so those ends cut mid-page.
    until_post, since_post = world.page(UID, 3)[4], world.page(UID, 4)[6]
    until = until_post.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    since = since_post.created_at.astimezone(SHANGHAI).strftime("%Y-%m-%dT%H:%M:%S")
    inside = [p.id for p in timeline if since_post.created_at <= p.created_at < until_post.created_at]
    assert 5 < len(inside) < 20
    sandbox.reset()
    proc, rows, log = crawl(tmp_path, sandbox, "weibo", "-a", f"uid={UID}", "-a", f"since={since}",
                            "-a", f"until={until}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["post_id"] for r in rows) == sorted(inside)
    pages = sorted(int(parse_qs(r["query"])["page"][0]) for r in sandbox.requests()
                   if r["path"].endswith("/api/container/getIndex"))
    assert pages == [1, 2, 3, 4, 5]  # page 5 is all older than since: nothing after it is asked for
    assert "page 5 is all older than -a since; stopping there" in log
    # The windowed job is its own: it completed at the window's start, and its high-water mark is its own.
    marks = [p.name for p in (tmp_path / "checkpoints" / "marks").iterdir()]
    assert len(marks) == 1 and marks[0].startswith(f"weibo-uid-{UID}-since-"), marks


def test_a_windowed_bilibili_search_sends_the_pubtime_parameters(sandbox: SandboxProcess, tmp_path: Path) -> None:
    t0 = max(u.created for u in bilibili.UPLOADS.values())
    since, until = t0 - 20 * 3600, t0 - 10 * 3600
    text = [datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (since, until)]
    expected = [u.bvid for u in bilibili.search_hits("日常") if since <= u.created < until]
    assert len(expected) == 10
    sandbox.reset()
    proc, rows, _ = crawl(tmp_path, sandbox, "bilibili", "-a", "keyword=日常", "-a", f"since={text[0]}",
                          "-a", f"until={text[1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["post_id"] for r in rows) == sorted(expected)
    searches = [parse_qs(r["query"]) for r in sandbox.requests() if r["path"].endswith("/wbi/search/type")]
    assert searches and all(q["order"] == ["pubdate"] and q["pubtime_begin_s"] == [str(since)]
                            and q["pubtime_end_s"] == [str(until - 1)] for q in searches), searches


def test_a_video_outside_the_window_is_not_emitted_and_its_media_not_fetched(sandbox: SandboxProcess,
                                                                             tmp_path: Path) -> None:
    inside, outside = bilibili.UPLOADS["BV1Up0004001"], bilibili.UPLOADS["BV1Up0002001"]
    since = datetime.fromtimestamp(inside.created - 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert outside.created < inside.created - 60
    sandbox.reset()
    proc, rows, log = crawl(tmp_path, sandbox, "bilibili", "-a", f"bvid={outside.bvid},{inside.bvid}",
                            "-a", f"since={since}", "-a", "max_height=360", media=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["post_id"] for r in rows] == [inside.bvid]
    assert all(a["status"] == "downloaded" for a in rows[0]["media"] if a["kind"] == "video")
    media = [r["path"] for r in sandbox.requests() if r["path"].startswith("/media/")]
    assert media and not any(outside.bvid in path for path in media)
    assert any(inside.bvid in path for path in media)
    assert f"post {outside.bvid}" in log and "outside the date window" in log


def test_a_windowed_facebook_page_sends_since_and_until(sandbox: SandboxProcess, tmp_path: Path) -> None:
    posts = build_facebook_world().posts(PAGE_ID)
    since, until = posts[8].created, posts[3].created
    expected = [p.id for p in posts if since <= p.created < until]
    assert len(expected) == 5
    sandbox.reset()
    proc, rows, _ = crawl(tmp_path, sandbox, "facebook", "-a", f"page={PAGE_ID}", "-a", f"since={iso_utc(since)}",
                          "-a", f"until={iso_utc(until)}", "-s", "FACEBOOK_PAGE_SIZE=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["post_id"] for r in rows) == sorted(expected)
    queries = [parse_qs(r["query"]) for r in sandbox.requests() if r["path"].endswith("/posts")]
    assert len(queries) == 3 and all(q["since"] == [str(int(since.timestamp()))]
                                     and q["until"] == [str(int(until.timestamp()) - 1)] for q in queries)


def test_given_facebook_posts_are_read_one_by_one_as_items(sandbox: SandboxProcess, tmp_path: Path) -> None:
    posts = build_facebook_world().posts(PAGE_ID)
    wanted = [posts[2].id, posts[0].id, posts[5].id]  # a video post (its node a chain step), a photo, a status
    sandbox.reset()
    proc, rows, _ = crawl(tmp_path, sandbox, "facebook", "-a", "post=" + ",".join(wanted))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["post_id"] for r in rows) == sorted(wanted)
    nodes = [r["path"].rsplit("/", 1)[1] for r in sandbox.requests() if "_" in r["path"].rsplit("/", 1)[1]]
    assert nodes == wanted and not [r for r in sandbox.requests() if r["path"].endswith("/posts")]



def test_a_window_with_more_results_than_a_search_answers_is_walked_day_by_day(sandbox: SandboxProcess,
                                                                              tmp_path: Path) -> None:
    t0 = max(u.created for u in bilibili.UPLOADS.values())
    since, until = t0 - 46 * 3600, t0 + 3600  # two days; "#4" finds mid 4's #4 (day one) and #40 to #45 (day two)
    text = [datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (since, until)]
    expected = [u.bvid for u in bilibili.search_hits("#4") if since <= u.created < until]
    assert len(expected) == 7
    sandbox.reset()
    sandbox.set_faults(bilibili_search_cap=7)  # the sandbox answers at most 7 results to one query
    try:
        proc, rows, log = crawl(tmp_path, sandbox, "bilibili", "-a", "keyword=#4", "-a", f"since={text[0]}",
                                "-a", f"until={text[1]}", "-s", "BILIBILI_SEARCH_MAX_RESULTS=7")
        requests = sandbox.requests()
    finally:
        sandbox.reset()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["post_id"] for r in rows) == sorted(expected)
    windows = [(int(q["pubtime_begin_s"][0]), int(q["pubtime_end_s"][0]), int(q["page"][0]))
               for q in (parse_qs(r["query"]) for r in requests if r["path"].endswith("/wbi/search/type"))]
    # The whole window first (7 results: as many as one query answers), then each day, newest first.
    assert windows == [(since, until - 1, 1), (until - 86_400, until - 1, 1), (since, until - 86_401, 1)]
    assert "walked day by day" in log and "not reached" not in log
