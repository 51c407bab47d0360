"""Share links: :func:`mediacrawler.links.route` over the five platforms' real URL shapes, and ``mediacrawler get``
crawling one link per platform (short links followed through the sandbox) with an unknown link among them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediacrawler.links import SHORT_LINK, Route, UnknownLink, route
from mediacrawler_sandbox import bilibili, douyin, xhs
from mediacrawler_sandbox.facebook import build_facebook_world
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.weibo import build_weibo_world, mid_to_bid

ROOT = Path(__file__).resolve().parents[1]
NOTE = "64f0aaaaaaaaaaaaaaaaaaaa"
TOKEN = "ABk2Zz0FvV4mS0sVxWq1Q9vKqY2wV0dGk5d0m3Jd8cQ0="
MID = "4930000000000001"


@pytest.mark.parametrize(("url", "spider", "args"), [
    # Weibo
    ("https://weibo.com/u/7365120894", "weibo", {"uid": "7365120894"}),
    ("https://m.weibo.cn/u/7365120894?uid=7365120894", "weibo", {"uid": "7365120894"}),
    ("https://m.weibo.cn/profile/7365120894", "weibo", {"uid": "7365120894"}),
    ("https://weibo.com/7365120894", "weibo", {"uid": "7365120894"}),
    (f"https://m.weibo.cn/detail/{MID}", "weibo", {"post": MID}),
    (f"https://m.weibo.cn/status/{mid_to_bid(MID)}", "weibo", {"post": MID}),
    (f"https://weibo.com/7365120894/{mid_to_bid(MID)}?pagetype=profilefeed", "weibo", {"post": MID}),
    ("https://s.weibo.com/weibo?q=%E7%8C%AB", "weibo", {"keyword": "猫"}),
    # Bilibili
    ("https://www.bilibili.com/video/BV1Sbx411A01/?spm_id_from=333.1007&p=2", "bilibili",
     {"bvid": "BV1Sbx411A01"}),
    ("https://m.bilibili.com/video/BV1Sbx411A01", "bilibili", {"bvid": "BV1Sbx411A01"}),
    ("bilibili.com/video/BV1Sbx411A01", "bilibili", {"bvid": "BV1Sbx411A01"}),
    ("https://www.bilibili.com/video/av170001/", "bilibili", {"bvid": "BV17x411w7KC"}),  # an old av link
    ("https://space.bilibili.com/2", "bilibili", {"mid": "2"}),
    ("https://space.bilibili.com/2/video?tid=0", "bilibili", {"mid": "2"}),
    ("https://space.bilibili.com/2/favlist?fid=1000001&ftype=create", "bilibili", {"fav": "1000001"}),
    ("https://www.bilibili.com/list/ml1000001", "bilibili", {"fav": "1000001"}),
    ("https://www.bilibili.com/medialist/detail/ml1000001", "bilibili", {"fav": "1000001"}),
    ("https://space.bilibili.com/2/channel/collectiondetail?sid=5001", "bilibili", {"season": "2:5001"}),
    ("https://space.bilibili.com/2/lists/5001?type=season", "bilibili", {"season": "2:5001"}),
    ("https://space.bilibili.com/4/channel/seriesdetail?sid=6001", "bilibili", {"series": "4:6001"}),
    ("https://space.bilibili.com/4/lists/6001?type=series", "bilibili", {"series": "4:6001"}),
    ("https://search.bilibili.com/all?keyword=%E6%97%A5%E5%B8%B8", "bilibili", {"keyword": "日常"}),
    ("https://b23.tv/AbCdEf1", SHORT_LINK, {"root": "BILIBILI_SHORT_URL", "path": "/AbCdEf1"}),
    # Facebook
    ("https://www.facebook.com/100000000000001", "facebook", {"page": "100000000000001"}),
    ("https://www.facebook.com/sandbox.page/", "facebook", {"page": "sandbox.page"}),
    ("https://m.facebook.com/profile.php?id=100000000000001", "facebook", {"page": "100000000000001"}),
    ("https://www.facebook.com/watch/?v=500000000000002", "facebook", {"video": "500000000000002"}),
    ("https://www.facebook.com/sandbox.page/videos/500000000000002/", "facebook", {"video": "500000000000002"}),
    ("https://www.facebook.com/reel/500000000000002", "facebook", {"video": "500000000000002"}),
    ("https://www.facebook.com/100000000000001/posts/1000000000000", "facebook",
     {"post": "100000000000001_1000000000000"}),
    ("https://www.facebook.com/permalink.php?story_fbid=1000000000000&id=100000000000001", "facebook",
     {"post": "100000000000001_1000000000000"}),
    # XHS
    (f"https://www.xiaohongshu.com/explore/{NOTE}?xsec_token={TOKEN}&xsec_source=pc_feed", "xhs",
     {"note": f"https://www.xiaohongshu.com/explore/{NOTE}?xsec_token={TOKEN}&xsec_source=pc_feed"}),
    (f"https://www.xiaohongshu.com/discovery/item/{NOTE}?xsec_token={TOKEN}", "xhs",
     {"note": f"https://www.xiaohongshu.com/discovery/item/{NOTE}?xsec_token={TOKEN}"}),
    ("https://www.xiaohongshu.com/user/profile/5f0e1d2c3b4a596877665544", "xhs",
     {"user": "5f0e1d2c3b4a596877665544"}),
    ("http://xhslink.com/a/Ab3dEf", SHORT_LINK, {"root": "XHS_SHORT_URL", "path": "/a/Ab3dEf"}),
    # Douyin (short links go to the spider, which follows them from DOUYIN_SHORT_URL)
    ("https://www.douyin.com/video/7300000000000000101", "douyin", {"aweme": "https://www.douyin.com/video/"
                                                                             "7300000000000000101"}),
    ("https://www.iesdouyin.com/share/video/7300000000000000101/", "douyin",
     {"aweme": "https://www.iesdouyin.com/share/video/7300000000000000101/"}),
    ("https://v.douyin.com/iRNBho6u/", "douyin", {"aweme": "https://v.douyin.com/iRNBho6u/"}),
])
def test_each_link_form_routes_to_its_spider_and_target(url: str, spider: str, args: dict[str, str]) -> None:
    assert route(url) == Route(spider, args)


@pytest.mark.parametrize("url", [
    "https://example.com/video/BV1Sbx411A01", "ftp://www.bilibili.com/video/BV1Sbx411A01",
    "https://www.bilibili.com/read/cv123", "https://www.facebook.com/groups/1234", "https://weibo.com/u/abc",
    "https://www.facebook.com/sandbox.page/posts/pfbid02abcDEF",
    "https://www.xiaohongshu.com/explore", "https://www.douyin.com/user/MS4wLjABAAAA", "not a link at all",
    "https://b23.tv/", "https://www.bilibili.com/video/av0", "https://www.bilibili.com/video/av9999999999999999",
])
def test_what_no_spider_takes_is_named(url: str) -> None:
    with pytest.raises(UnknownLink, match="not"):
        route(url)


def get(tmp_path: Path, sandbox: SandboxProcess, *args: str) -> subprocess.CompletedProcess[str]:
    root = sandbox.url
    cmd = [sys.executable, "-m", "mediacrawler", "get", *args,
           "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}", "-s", f"BILIBILI_API_URL={root}/bilibili",
           "-s", f"BILIBILI_SHORT_URL={root}/bilibili/b23", "-s", f"FACEBOOK_GRAPH_URL={root}/facebook/v19.0",
           "-s", f"XHS_WEB_URL={root}/xhs", "-s", f"XHS_SHORT_URL={root}/xhs/xhslink",
           "-s", f"DOUYIN_SHARE_URL={root}/douyin", "-s", f"DOUYIN_WEB_URL={root}/douyin",
           "-s", f"DOUYIN_SHORT_URL={root}/douyin/v", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
           "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", f"OUTPUT_DIR={tmp_path / 'out'}", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}",
           "-s", "MEDIA_COMMIT_PROCESS=0"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "WEIBO_COOKIE", "BILIBILI_COOKIE", "XHS_COOKIE", "DOUYIN_COOKIE")}
    env["FACEBOOK_ACCESS_TOKEN"] = "sandbox-token"
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_get_crawls_one_link_per_platform_and_names_the_unknown_one(sandbox: SandboxProcess,
                                                                     tmp_path: Path) -> None:
    weibo_post = next(p for p in build_weibo_world().timeline(7365120894) if p.pics and not p.is_long_text)
    fb_video = next(p.video.id for p in build_facebook_world().posts("100000000000001") if p.video)
    note = xhs.build_xhs_world().user_notes()[0]
    short = next(code for code, aweme in douyin.SHORT_LINKS.items() if aweme in douyin.VIDEO_AWEMES)
    unknown = "https://example.com/not/a/post"
    (tmp_path / "links.txt").write_text(f"# shared today\nhttps://weibo.com/7365120894/{weibo_post.bid}\n\n"
                                        f"http://xhslink.com/a/n0\n", "utf-8")
    sandbox.reset()
    proc = get(tmp_path, sandbox, "https://b23.tv/hop0", unknown, f"https://www.facebook.com/watch/?v={fb_video}",
               f"https://v.douyin.com/{short}/", "-f", "links.txt", "-a", "max_height=360")
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert any(line.startswith(f"error: {unknown}: not a link") for line in lines), lines
    assert lines[-1] == f"error: 1 of 6 link(s) not crawled: {unknown}"
    records = {path.parent.name: [json.loads(x) for x in path.read_text("utf-8").splitlines()]
               for path in (tmp_path / "out").rglob("*.jsonl")}
    ids = {spider: [r["post_id"] for r in rows] for spider, rows in records.items()}
    assert ids == {"weibo": [weibo_post.id], "bilibili": [bilibili.BVIDS[0]], "facebook": [fb_video],
                   "xhs": [note.id], "douyin": [douyin.SHORT_LINKS[short]]}, ids
    for spider, rows in records.items():
        media = [a for a in rows[0]["media"] if a["kind"] in ("image", "video")]
        assert media, spider
        for asset in media:
            assert asset["status"] == "downloaded", (spider, asset)
            assert (tmp_path / "files" / asset["path"]).stat().st_size > 0
    # Only the sandbox was asked: the short links' roots point there, and their targets are routed, not fetched.
    paths = [r["path"] for r in sandbox.requests()]
    assert "/bilibili/b23/hop0" in paths and "/bilibili/b23/sbx0" in paths and "/xhs/xhslink/a/n0" in paths


@pytest.mark.slow
def test_a_short_link_that_never_lands_is_one_line(sandbox: SandboxProcess, tmp_path: Path) -> None:
    proc = get(tmp_path, sandbox, "https://b23.tv/loop", "-s", "LINKS_MAX_REDIRECTS=3")
    assert proc.returncode == 1
    assert "error: https://b23.tv/loop: its short link took more than 3 redirects (LINKS_MAX_REDIRECTS)" in \
        proc.stderr
