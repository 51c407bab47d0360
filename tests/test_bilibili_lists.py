"""Bilibili favourites (``-a fav``), collections (``-a season``), series (``-a series``) and ``-a order`` on
search: the parsers on the sandbox's payloads, and one real crawl of each against the sandbox (every video through
the same view → playurl chain as an upload)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from mediacrawler.parsers import bilibili as parser
from mediacrawler_sandbox import bilibili, bilibili_lists
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler.spiders._args import validate_args
from mediacrawler.spiders.bilibili import BilibiliSpider

ROOT = Path(__file__).resolve().parents[1]
BASE = "http://127.0.0.1:9"


def test_fav_pages_follow_has_more_and_skip_what_is_not_a_video() -> None:
    first = bilibili_lists.fav_response(bilibili_lists.FAV_ID, pn=1, ps=20, base=BASE)
    first["data"]["medias"].append({"id": 1, "type": 12, "title": "an audio", "bvid": "BV1xxxxxxxxx"})
    page = parser.parse_fav_list(first)
    assert list(page.incomplete) == bilibili_lists.FAVOURITES[bilibili_lists.FAV_ID]
    assert page.is_last and page.skipped == {"not_a_video": 1}
    entry = page.incomplete[bilibili_lists.FAVOURITES[bilibili_lists.FAV_ID][0]]
    assert entry["created_at"].endswith("Z") and entry["mid"] == "4" and entry["length"] == 4
    first = parser.parse_fav_list(bilibili_lists.fav_response(bilibili_lists.FAV_ID, pn=1, ps=5, base=BASE))
    assert not first.is_last and list(first.incomplete) == bilibili_lists.FAVOURITES[bilibili_lists.FAV_ID][:5]
    last = parser.parse_fav_list(bilibili_lists.fav_response(bilibili_lists.FAV_ID, pn=3, ps=5, base=BASE))
    assert last.is_last and list(last.incomplete) == bilibili_lists.FAVOURITES[bilibili_lists.FAV_ID][10:]
    with pytest.raises(parser.PlatformError):
        parser.parse_fav_list(bilibili_lists.fav_response(42, pn=1, ps=20, base=BASE))


def test_season_and_series_pages_end_at_their_total() -> None:
    mid, sid = bilibili_lists.SEASON
    page = parser.parse_season_archives(bilibili_lists.season_response(mid, sid, page_num=1, page_size=5,
                                                                       base=BASE))
    assert list(page.incomplete) == bilibili_lists.SEASONS[bilibili_lists.SEASON][:5] and not page.is_last
    page = parser.parse_season_archives(bilibili_lists.season_response(mid, sid, page_num=2, page_size=5,
                                                                       base=BASE))
    assert list(page.incomplete) == bilibili_lists.SEASONS[bilibili_lists.SEASON][5:] and page.is_last
    mid, sid = bilibili_lists.SERIES_KEY
    page = parser.parse_series_archives(bilibili_lists.series_response(mid, sid, pn=2, ps=30, base=BASE))
    assert list(page.incomplete) == bilibili_lists.SERIES[bilibili_lists.SERIES_KEY][30:] and page.is_last


def test_arguments() -> None:
    assert validate_args(BilibiliSpider, {"fav": "1000001"}) is None
    assert validate_args(BilibiliSpider, {"season": "2:5001"}) is None
    assert "must be <mid>:<id>" in str(validate_args(BilibiliSpider, {"series": "5001"}))
    assert "give exactly one of" in str(validate_args(BilibiliSpider, {"fav": "1", "mid": "2"}))
    assert "-a order applies to -a keyword" in str(validate_args(BilibiliSpider, {"mid": "2", "order": "click"}))
    assert "order" in str(validate_args(BilibiliSpider, {"keyword": "x", "order": "random"}))


def crawl(tmp_path: Path, sandbox: SandboxProcess, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                                        list[dict[str, Any]]]:
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "bilibili", *args,
           "-s", f"BILIBILI_API_URL={sandbox.url}/bilibili", "-s", "DOWNLOAD_DELAY=0",
           "-s", "AUTOTHROTTLE_ENABLED=0",
           "-s", "MEDIA_ENABLED=0", "-s", f"FILES_STORE={tmp_path / 'files'}",
           "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}",
           "-O", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "BILIBILI_COOKIE")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []
    return proc, rows


@pytest.mark.slow
@pytest.mark.parametrize(("arg", "path", "expected", "pages"), [
    (f"fav={bilibili_lists.FAV_ID}", "/x/v3/fav/resource/list",
     bilibili_lists.FAVOURITES[bilibili_lists.FAV_ID], 3),
    ("season={}:{}".format(*bilibili_lists.SEASON), "/x/polymer/web-space/seasons_archives_list",
     bilibili_lists.SEASONS[bilibili_lists.SEASON], 2),
    ("series={}:{}".format(*bilibili_lists.SERIES_KEY), "/x/series/archives",
     bilibili_lists.SERIES[bilibili_lists.SERIES_KEY][:5], 1),
])
def test_each_list_gives_every_video_through_view_and_playurl(sandbox: SandboxProcess, tmp_path: Path, arg: str,
                                                               path: str, expected: list[str], pages: int) -> None:
    sandbox.reset()
    proc, rows = crawl(tmp_path, sandbox, "-a", arg, "-s", "BILIBILI_PAGE_SIZE=5", "-a", f"max_pages={pages}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Counter(r["post_id"] for r in rows) == Counter(expected)
    requests = sandbox.requests()
    assert len([r for r in requests if r["path"].endswith(path)]) == pages
    viewed = Counter(parse_qs(r["query"])["bvid"][0] for r in requests
                     if r["path"].endswith("/web-interface/view"))
    played = {parse_qs(r["query"])["bvid"][0] for r in requests if r["path"].endswith("/player/wbi/playurl")}
    assert viewed == Counter(expected) and played == set(expected)
    for row in rows:
        videos = [a for a in row["media"] if a["kind"] == "video"]
        assert videos and all("/media/bili/" in a["url"] for a in videos), row["post_id"]
        assert row["created_at"] == parser.iso_from_timestamp(bilibili.UPLOADS[row["post_id"]].created)


@pytest.mark.slow
def test_search_order_is_sent(sandbox: SandboxProcess, tmp_path: Path) -> None:
    sandbox.reset()
    proc, rows = crawl(tmp_path, sandbox, "-a", "keyword=旅行", "-a", "order=click")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["post_id"] for r in rows] and {r["post_id"] for r in rows} == {
        u.bvid for u in bilibili.search_hits("旅行", order="click")}
    searches = [parse_qs(r["query"]) for r in sandbox.requests() if r["path"].endswith("/wbi/search/type")]
    assert searches and all(q["order"] == ["click"] and "pubtime_begin_s" not in q for q in searches)
