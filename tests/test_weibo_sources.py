"""Weibo ``-a post=<mid|bid|link>[,…]`` (``/statuses/show``, bid → mid in base62) and ``-a search_type`` (the
``100103type=`` tabs): the pure parts, then real crawls against the session sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from mediacrawler.parsers.weibo import bid_to_mid, post_ref, search_containerid
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.weibo import build_weibo_world, mid_to_bid
from mediacrawler.spiders._args import validate_args
from mediacrawler.spiders.weibo import WeiboSpider

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894


@pytest.fixture(scope="module")
def world() -> Any:
    return build_weibo_world(seed=1, users=(7365120894, 1669879400), pages=5, per_page=10)


def test_bid_is_the_base62_of_the_mid(world: Any) -> None:
    for mid in list(world.posts)[:200]:
        assert bid_to_mid(mid_to_bid(mid)) == mid
    # Inner groups keep their zeros: 7 digits each.
    assert bid_to_mid(mid_to_bid("4000000000000001")) == "4000000000000001"
    with pytest.raises(ValueError):
        bid_to_mid("abc-defgh")


@pytest.mark.parametrize("link", [
    "4930000000000001", "https://m.weibo.cn/detail/4930000000000001", "m.weibo.cn/status/4930000000000001",
    "https://weibo.com/7365120894/{bid}", "https://www.weibo.com/7365120894/{bid}?refer_flag=1001030103_",
    "https://m.weibo.cn/status/{bid}", "{bid}",
])
def test_every_form_of_a_post_names_its_mid(link: str) -> None:
    mid = "4930000000000001"
    assert post_ref(link.format(bid=mid_to_bid(mid))) == mid


def test_what_is_not_a_post_is_refused_with_its_text() -> None:
    for bad in ("https://example.com/7365120894/NbqPs0Ab1", "https://weibo.com/u/7365120894", "not a post!"):
        with pytest.raises(ValueError):
            post_ref(bad)
    assert "not a Weibo post link" in str(validate_args(WeiboSpider, {"post": "https://example.com/1/NbqPs0Ab1"}))
    assert "search_type applies to -a keyword" in str(validate_args(WeiboSpider, {"uid": "1",
                                                                                  "search_type": "hot"}))
    assert search_containerid("猫", "realtime") == "100103type=61&q=猫"


def crawl(tmp_path: Path, sandbox: SandboxProcess, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                                        list[dict[str, Any]]]:
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "weibo", *args, "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}",
           "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "MEDIA_ENABLED=0",
           "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}",
           "-O", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "WEIBO_COOKIE")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []
    return proc, rows


@pytest.mark.slow
def test_given_posts_are_read_one_by_one_and_a_gone_one_says_so(sandbox: SandboxProcess, world: Any,
                                                                 tmp_path: Path) -> None:
    timeline = world.timeline(UID)
    plain = next(p for p in timeline if not p.is_long_text and not p.is_repost)
    long = next(p for p in timeline if p.is_long_text)
    gone = "4999999999999999"
    links = [f"https://m.weibo.cn/detail/{plain.id}", f"https://weibo.com/{UID}/{long.bid}", gone]
    sandbox.reset()
    proc, rows = crawl(tmp_path, sandbox, "-a", "post=" + ",".join(links))
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_id = {r["post_id"]: r for r in rows}
    assert set(by_id) == {plain.id, long.id, gone}
    assert by_id[gone]["deleted"] is True and "does not exist" in by_id[gone]["extra"]["unavailable"]
    assert by_id[long.id]["extra"].get("long_text") != "truncated"  # its full text came from /statuses/extend
    shown = [parse_qs(r["query"])["id"][0] for r in sandbox.requests() if r["path"].endswith("/statuses/show")]
    assert shown == [plain.id, long.id, gone]
    assert not [r for r in sandbox.requests() if r["path"].endswith("/getIndex")]


@pytest.mark.slow
def test_a_search_tab_is_its_containerid(sandbox: SandboxProcess, world: Any, tmp_path: Path) -> None:
    sandbox.reset()
    proc, rows = crawl(tmp_path, sandbox, "-a", "keyword=猫", "-a", "search_type=video")
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = world.search_tab("猫", 64)
    assert expected and sorted(r["post_id"] for r in rows) == sorted(p.id for p in expected)
    containers = {parse_qs(r["query"])["containerid"][0] for r in sandbox.requests()
                  if r["path"].endswith("/getIndex")}
    assert containers == {"100103type=64&q=猫"}
