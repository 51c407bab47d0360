"""End-to-end: hostile and failing media URLs in one real crawl (subprocess, project media settings, DEBUG log).

One crawl against a ``--bad-media`` sandbox carries every case, each test asserts on one of them: credentials in a
media URL, redirects (followed within MEDIA_MAX_REDIRECTS, every hop re-checked), a redirect loop, hops to
``file://`` and to a URL with credentials, and ordinary failures (404, HTML instead of an image, a truncated body)
that must read as one WARNING each, never an ERROR with a traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from mediacrawler import settings as project
from mediacrawler.items import MediaAsset, Post
from mediacrawler_sandbox import media
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox
from mediacrawler_sandbox.world import build_world
from tests.test_crawl_media import UID, Crawl, assert_store_is_content_addressed, run_crawl

pytestmark = pytest.mark.slow

SECRET = "hunter2-Zq9xPw"  # appears only in URLs; must never reach a log line, a record or a stat
HOP_SECRET = "s3cretHopPw"  # the password of a redirect target
LARGE_SIDE = 300  # a 300x300 noise PNG: about 264 KiB
LARGE_THRESHOLD = 128 * 1024  # the sandbox's Weibo pictures are far below it


@pytest.fixture(scope="module")
def bad_sandbox() -> Iterator[SandboxProcess]:
    with start_sandbox(bad_media=True, startup_timeout=30) as proc:
        yield proc


class Case:
    """The URLs of the crawl, by name, and the crawl's outcome."""

    def __init__(self, base: str) -> None:
        world = build_world(bad_media=True).weibo
        good = [pid for pid in world.timeline_pids(UID) if world.pics[pid].bad is None]
        # Distinct contents, so that dedup between them cannot blur which asset got which bytes.
        seen: set[str] = set()
        pics = []
        for pid in good:
            if world.pics[pid].content_pid not in seen:
                seen.add(world.pics[pid].content_pid)
                pics.append(world.pics[pid])
        self.world = world
        self.pics = pics[:6]
        p = [pic.path("large") for pic in self.pics]
        host = base.split("://", 1)[1]
        hop_target = f"http://user:{HOP_SECRET}@{host}{p[5]}"
        # Percent-encode every character of the password: the URL we hand out must not spell it.
        hop_query = quote(hop_target, safe="").replace(HOP_SECRET, "".join(f"%{ord(c):02X}" for c in HOP_SECRET))
        self.bad = {kind: pid for pid, kind in world.bad_pids.items()}
        self.urls = {
            "direct0": base + p[0],
            "creds": f"http://user:{SECRET}@{host}{p[1]}",
            "direct2": base + p[2],
            "redirect1": f"{base}/hostile/redirect/1{p[0]}",
            "redirect3": f"{base}/hostile/redirect/3{p[3]}",
            "direct3": base + p[3],
            "loop": f"{base}/hostile/loop{p[4]}",
            "to-file": f"{base}/hostile/redirect/to?url={quote('file:///etc/passwd', safe='')}",
            "to-creds": f"{base}/hostile/redirect/to?url={hop_query}",
            "missing": f"{base}/media/weibo/large/nosuchpicture.gif",  # no such format: 404
            "html": base + world.pics[self.bad["html"]].path("large"),
            "truncated": base + world.pics[self.bad["truncated"]].path("large"),
            "ftp": f"ftp://{host}{p[2]}",
            # Above MEDIA_SEGMENT_THRESHOLD (below): stopped at its headers after the hop, then Range segments.
            "large-redirect": f"{base}/hostile/redirect/2/media/big/hostile1.png?side={LARGE_SIDE}",
        }
        assert SECRET not in self.urls["creds"].replace(f"user:{SECRET}@", "") and HOP_SECRET not in hop_query

    def posts(self) -> list[Post]:
        def post(pid: str, *names: str) -> Post:
            return Post(platform="weibo", post_id=pid, url=f"https://weibo.com/1/{pid}", author=None,
                        created_at="2026-11-28T10:00:00+08:00",
                        media=[MediaAsset(kind="image", key=name, url=self.urls[name]) for name in names])

        return [post("p1", "direct0", "creds", "direct2"),
                post("p2", "redirect1", "redirect3", "direct3", "loop", "to-file", "to-creds"),
                post("p3", "missing", "html", "truncated", "ftp"),
                post("p4", "large-redirect")]


@pytest.fixture(scope="module")
def crawl(bad_sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory) -> tuple[Case, Crawl, list]:
    case = Case(bad_sandbox.url)
    tmp_path = tmp_path_factory.mktemp("hostile")
    bad_sandbox.reset()
    media_settings = {k: getattr(project, k) for k in dir(project) if k.startswith("MEDIA_")}
    result = run_crawl(
        tmp_path, case.posts(), store=tmp_path / "files",
        ITEM_PIPELINES={"mediacrawler.pipelines.normalize.NormalizePipeline": 100,
                        "mediacrawler.pipelines.media.MediaStorePipeline": 300},
        DOWNLOADER_MIDDLEWARES=project.DOWNLOADER_MIDDLEWARES, DOWNLOAD_HANDLERS=project.DOWNLOAD_HANDLERS,
        **{**media_settings, "MEDIA_COMMIT_PROCESS": False, "MEDIA_SEGMENT_THRESHOLD": LARGE_THRESHOLD,
           "MEDIA_SEGMENT_SIZE": LARGE_THRESHOLD}, LOG_LEVEL="DEBUG")
    return case, result, bad_sandbox.requests()


def by_key(result: Crawl) -> dict[str, dict[str, Any]]:
    return {a["key"]: a for a in result.assets()}


def test_credentials_in_a_media_url_never_reach_log_record_or_stats(crawl: tuple[Case, Crawl, list]) -> None:
    case, result, requests = crawl
    assets = by_key(result)
    creds = assets["creds"]
    assert (creds["status"], creds["error"]) == ("failed", "credentials-in-url")
    assert creds["url"] == case.urls["direct0"].replace(case.pics[0].path("large"), case.pics[1].path("large"))
    for text in (result.log, json.dumps(result.items), json.dumps(result.stats)):
        assert SECRET not in text
    assert not [r for r in requests if r["path"] == case.pics[1].path("large")]  # never requested
    # The other assets of the post are stored.
    assert {assets["direct0"]["status"], assets["direct2"]["status"]} <= {"downloaded", "deduplicated"}


def test_redirects_are_followed_and_deduplicated(crawl: tuple[Case, Crawl, list]) -> None:
    case, result, _ = crawl
    assets = by_key(result)
    for name, direct in (("redirect1", "direct0"), ("redirect3", "direct3")):
        assert assets[name]["status"] in ("downloaded", "deduplicated"), assets[name]
        assert (assets[name]["sha256"], assets[name]["path"]) == (assets[direct]["sha256"], assets[direct]["path"])
        assert assets[name]["url"] == case.urls[name]  # the record keeps the URL it was given
    assert_store_is_content_addressed(result.store)
    large = assets["large-redirect"]
    assert large["status"] == "downloaded", large
    expected = media.big_image("hostile1", LARGE_SIDE)
    assert len(expected) > LARGE_THRESHOLD and result.stats["media/large_images"] == 1
    assert (result.store / large["path"]).read_bytes() == expected
    stored = {a["path"] for a in assets.values() if a["status"] in ("downloaded", "deduplicated")}
    assert len(result.objects()) == len(stored) == 4  # pics 0, 2, 3 and the large one: each once


def test_loop_and_refused_hops_fail_with_reasons(crawl: tuple[Case, Crawl, list]) -> None:
    case, result, requests = crawl
    assets = by_key(result)
    expected = {"loop": "too-many-redirects", "to-file": "scheme-not-allowed", "to-creds": "credentials-in-url"}
    for name, reason in expected.items():
        assert (assets[name]["status"], assets[name]["error"]) == ("failed", reason), name
        assert assets[name]["sha256"] is None and assets[name]["path"] is None
    loops = [r for r in requests if r["path"].startswith("/hostile/loop/")]
    assert len(loops) == project.MEDIA_MAX_REDIRECTS + 1  # the first request and every hop allowed, no more
    assert not [r for r in requests if r["path"] == case.pics[5].path("large")]  # the credential hop: not sent
    assert result.stats["media/failed/too-many-redirects"] == 1
    assert result.stats["media/failed/scheme-not-allowed"] == 2  # to-file, ftp
    assert result.stats["media/failed/credentials-in-url"] == 2  # the hop, and the creds asset (by normalize)
    for text in (result.log, json.dumps(result.items), json.dumps(result.stats)):
        assert HOP_SECRET not in text and "root:x:0" not in text


def test_ordinary_failures_are_one_warning_each_never_an_error(crawl: tuple[Case, Crawl, list]) -> None:
    case, result, _ = crawl
    assets = by_key(result)
    expected = {"missing": "http-404", "html": "not-media", "truncated": "dataloss", "ftp": "scheme-not-allowed"}
    for name, reason in expected.items():
        assert assets[name]["status"] == "failed" and assets[name]["error"].split(":")[0] == reason, assets[name]
    assert "Traceback" not in result.log
    assert not [line for line in result.log.splitlines() if "] ERROR:" in line or " ERROR " in line]
    failed = [a for a in assets.values() if a["status"] == "failed"]
    assert len(failed) == 8
    warnings = [line for line in result.log.splitlines() if "] WARNING:" in line]
    for asset in failed:
        mine = [line for line in warnings if asset["url"] in line and asset["error"].split(":")[0] in line]
        assert len(mine) == 1, (asset, mine)
    assert result.stats["media/failed"] == len(failed)
    assert sum(v for k, v in result.stats.items() if re.fullmatch(r"media/failed/[^/]+", k)) == len(failed)


def test_redirects_without_the_hop_checks_are_not_followed(bad_sandbox: SandboxProcess, tmp_path: Path) -> None:
    base = bad_sandbox.url
    pic = Case(base).pics[0].path("large")
    post = Post(platform="weibo", post_id="r", url="https://weibo.com/1/r", author=None, created_at=None,
                media=[MediaAsset(kind="image", key="r", url=f"{base}/hostile/redirect/1{pic}")])
    result = run_crawl(tmp_path, [post], store=tmp_path / "files", MEDIA_ALLOW_REDIRECTS=True)
    [asset] = result.assets()
    assert (asset["status"], asset["error"]) == ("failed", "http-302")
    assert "MediaRedirectMiddleware is not enabled: media redirects are not followed" in result.log
