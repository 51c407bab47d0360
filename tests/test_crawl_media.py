"""End-to-end: real crawls (subprocesses) through MediaStorePipeline against the sandbox subprocess.

The spider here is a stand-in for the platform spiders: it yields ``Post`` items whose media point at the
sandbox's Weibo pictures, built from the sandbox's own world model, so every expectation (how many distinct
contents, which pids are duplicates or bad) comes from the model, and every check is on files on disk, records in
the feed, the crawl's stats and the sandbox's request log.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from mediacrawler.items import MediaAsset, Post
from mediacrawler.media.store import parse_object_relpath
from mediacrawler_sandbox.world import build_world

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894  # the first timeline owner: duplicates (and, with --bad-media, bad pictures) live on it
REFERER = "https://m.weibo.cn/"

RUNNER = textwrap.dedent(
    """
    import json, sys
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from mediacrawler.items import Author, MediaAsset, Metrics, Post

    config = json.load(open(sys.argv[1]))

    def to_post(d):
        d = dict(d)
        d["media"] = [MediaAsset(**m) for m in d.get("media", [])]
        d["reposted"] = to_post(d["reposted"]) if d.get("reposted") else None
        d["metrics"] = Metrics(**d["metrics"]) if d.get("metrics") else Metrics()
        d["author"] = Author(**d["author"]) if d.get("author") else None
        return Post(**d)

    class MediaTestSpider(scrapy.Spider):
        name = "media_test"

        async def start(self):
            if config.get("listing"):
                # A listing request first and the posts from its callback, as a platform spider yields them: the
                # crawl then closes once they are processed, not at the engine's next 5 s heartbeat.
                yield scrapy.Request(config["listing"], callback=self.parse_listing, dont_filter=True,
                                     meta={"handle_httpstatus_all": True})
                return
            for d in config["posts"]:
                yield to_post(d)

        def parse_listing(self, response):
            for d in config["posts"]:
                yield to_post(d)

    process = CrawlerProcess(config["settings"])
    crawler = process.create_crawler(MediaTestSpider)
    process.crawl(crawler)
    process.start()
    json.dump(crawler.stats.get_stats(), open(config["stats_path"], "w"), default=str)
    """
)


class Crawl:
    """The outcome of one crawl: records from the feed, stats, and the store root."""

    def __init__(self, items: list[dict[str, Any]], stats: dict[str, Any], store: Path, log: str) -> None:
        self.items = items
        self.stats = stats
        self.store = store
        self.log = log

    def assets(self) -> list[dict[str, Any]]:
        found = []
        for item in self.items:
            post: dict[str, Any] | None = item
            while post:
                found.extend(post["media"])
                post = post.get("reposted")
        return found

    def objects(self) -> list[Path]:
        return sorted(p for p in (self.store / "objects").rglob("*") if p.is_file())


def run_crawl(tmp_path: Path, posts: list[Post], *, store: Path, name: str = "run", **settings: Any) -> Crawl:
    workdir = tmp_path / name
    workdir.mkdir()
    feed = workdir / "items.jsonl"
    urls = [m.url for p in posts for m in p.media if m.url.startswith("http")]
    config = {
        "listing": f"{urlsplit(urls[0]).scheme}://{urlsplit(urls[0]).netloc}/" if urls else None,
        "posts": [asdict(p) for p in posts],
        "stats_path": str(workdir / "stats.json"),
        "settings": {
            "ITEM_PIPELINES": {"mediacrawler.pipelines.media.MediaStorePipeline": 300},
            "FILES_STORE": str(store),
            "FEEDS": {str(feed): {"format": "jsonlines"}},
            "WEIBO_MEDIA_REFERER": REFERER,
            "LOG_LEVEL": "INFO",
            "TELNETCONSOLE_ENABLED": False,
            "RETRY_TIMES": 1,
            **settings,
        },
    }
    (workdir / "config.json").write_text(json.dumps(config))
    (workdir / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    # cwd is the work dir: no scrapy.cfg there, so only the settings above apply.
    proc = subprocess.run([sys.executable, "runner.py", "config.json"], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    stats = json.loads((workdir / "stats.json").read_text())
    return Crawl(items, stats, store, proc.stderr)


def weibo_posts(world: Any, base_url: str) -> list[Post]:
    """Posts of UID's timeline as a platform spider would emit them (reposted originals nested)."""

    def assets(post: Any) -> list[MediaAsset]:
        return [MediaAsset(kind="image", key=pic.pid, url=base_url + pic.path("large"))
                for pic in world.post_pics(post, include_retweeted=False)]

    def to_post(post: Any) -> Post:
        original = world.retweeted(post)
        return Post(platform="weibo", post_id=post.id, url=f"https://weibo.com/{post.user_id}/{post.bid}",
                    author=None, created_at=None, media=assets(post),
                    reposted=to_post(original) if original is not None else None)

    return [to_post(p) for p in world.timeline(UID)]


def media_log(sandbox: Any) -> list[dict[str, Any]]:
    return [e for e in sandbox.requests() if e["path"].startswith("/media/")]


def assert_store_is_content_addressed(store: Path) -> None:
    for path in (store / "objects").rglob("*"):
        if path.is_file():
            rel = path.relative_to(store).as_posix()
            sha, _ = parse_object_relpath(rel)
            assert hashlib.sha256(path.read_bytes()).hexdigest() == sha, rel


def test_store_every_distinct_image_once_then_download_nothing(tmp_path: Path, fresh_sandbox: Any) -> None:
    world = build_world().weibo
    pids = world.timeline_pids(UID)
    distinct = world.distinct_contents(pids)
    assert world.duplicate_pids and any(p in pids for p in world.duplicate_pids)
    posts = weibo_posts(world, fresh_sandbox.url)
    store = tmp_path / "files"

    first = run_crawl(tmp_path, posts, store=store, name="first")
    assert len(first.items) == len(posts)
    objects = first.objects()
    assert len(objects) == distinct
    assert_store_is_content_addressed(store)
    assets = first.assets()
    statuses = [a["status"] for a in assets]
    assert statuses.count("downloaded") == distinct
    assert statuses.count("deduplicated") == len(pids) - distinct
    assert statuses.count("uptodate") == len(assets) - len(pids)  # a pid reposted twice in this run
    assert first.stats["media/dedup/content"] == len(pids) - distinct
    for asset in assets:
        assert (store / asset["path"]).is_file()
        assert asset["sha256"] == Path(asset["path"]).name.split(".")[0]
        assert asset["size"] == (store / asset["path"]).stat().st_size
        assert asset["mime"] == "image/jpeg" if asset["path"].endswith(".jpg") else asset["mime"].startswith("image/")
    # Duplicates point at the same object as the picture whose bytes they repeat.
    by_pid = {a["key"]: a for a in assets}
    for dup, canonical in world.duplicate_pids.items():
        if dup in by_pid and canonical in by_pid:
            assert by_pid[dup]["path"] == by_pid[canonical]["path"]
    assert media_log(fresh_sandbox), "the first crawl fetched nothing?"

    fresh_sandbox.reset()
    second = run_crawl(tmp_path, posts, store=store, name="second")
    log = media_log(fresh_sandbox)
    assert sum(e["bytes"] for e in log) == 0 and not log
    assert {a["status"] for a in second.assets()} == {"uptodate"}
    assert second.objects() == objects
    assert "media/downloaded" not in second.stats


def test_new_signed_url_for_a_known_key_is_not_downloaded(tmp_path: Path, fresh_sandbox: Any) -> None:
    world = build_world().weibo
    pic = next(p for pid in world.timeline_pids(UID) if (p := world.pics[pid]).bad is None)
    url = fresh_sandbox.url + pic.path("large")
    store = tmp_path / "files"
    make = lambda u: [Post(platform="weibo", post_id="1", url="u", author=None, created_at=None,  # noqa: E731
                           media=[MediaAsset(kind="image", key=pic.pid, url=u)])]
    run_crawl(tmp_path, make(url), store=store, name="first")
    fresh_sandbox.reset()
    second = run_crawl(tmp_path, make(url + "?Expires=999&sig=abc"), store=store, name="second")
    assert second.assets()[0]["status"] == "uptodate"
    assert not media_log(fresh_sandbox)


def test_bad_bodies_are_rejected_with_reasons_and_nothing_stored(tmp_path: Path, sandbox_factory: Any) -> None:
    sandbox = sandbox_factory(bad_media=True)
    world = build_world(bad_media=True).weibo
    assert sorted(world.bad_pids.values()) == ["bomb", "html", "truncated"]
    posts = weibo_posts(world, sandbox.url)
    store = tmp_path / "files"
    crawl = run_crawl(tmp_path, posts, store=store)

    assert len(crawl.items) == len(posts)  # no record lost
    by_pid = {a["key"]: a for a in crawl.assets()}
    expected = {"html": "not-media", "truncated": "dataloss", "bomb": "image-too-large"}
    for pid, kind in world.bad_pids.items():
        asset = by_pid[pid]
        assert asset["status"] == "failed", (kind, asset)
        assert asset["error"].split(":")[0] == expected[kind], (kind, asset["error"])
        assert asset["sha256"] is None and asset["path"] is None
        assert crawl.stats[f"media/failed/{expected[kind]}"] >= 1
    good = [pid for pid in world.timeline_pids(UID) if pid not in world.bad_pids]
    assert len(crawl.objects()) == world.distinct_contents(good)
    assert_store_is_content_addressed(store)
    assert not list((store / "tmp").iterdir())
    # The crawl went on: every good picture is stored.
    assert all(by_pid[pid]["status"] in ("downloaded", "deduplicated", "uptodate") for pid in good)


HOSTILE = ["../../x", "/etc/passwd", "%2e%2e%2f%2e%2e%2fx", "..\\..\\x", "C:\\x", "x.desktop", "\u2025/\uff0e\uff0e\uff0f",
           "a" * 300, "CON"]


def test_remote_names_never_influence_a_path(tmp_path: Path, fresh_sandbox: Any) -> None:
    base = fresh_sandbox.url
    media = [MediaAsset(kind="image", key=name, url=f"{base}/media/img/{i}.jpg?name={name}&f=../../x.desktop")
             for i, name in enumerate(HOSTILE)]
    media.append(MediaAsset(kind="image", key="dots", url=f"{base}/media/img/..%2f..%2f..%2fetc%2fpasswd"))
    media.append(MediaAsset(kind="image", key="abs", url="file:///etc/passwd"))
    posts = [Post(platform="../../evil", post_id="../1", url="u", author=None, created_at=None, media=media)]
    store = tmp_path / "store" / "files"
    before = {p for p in tmp_path.rglob("*")}
    crawl = run_crawl(tmp_path, posts, store=store)
    created = {p for p in tmp_path.rglob("*")} - before
    allowed_roots = (tmp_path / "store", tmp_path / "run")
    outside = [p for p in created if not any(p == r or r in p.parents for r in allowed_roots)]
    assert outside == [] and not (tmp_path / "x").exists()
    assets = crawl.assets()
    assert [a["status"] for a in assets[:len(HOSTILE)]] == ["downloaded"] * len(HOSTILE)
    for asset in assets[:len(HOSTILE)]:
        parse_object_relpath(asset["path"])  # only the sha256 grammar, whatever the key, URL or platform said
    assert assets[-1]["error"] == "scheme-not-allowed"
    assert assets[-2]["status"] == "failed"
    assert_store_is_content_addressed(store)


def test_media_disabled_crawls_records_only(tmp_path: Path, fresh_sandbox: Any) -> None:
    world = build_world().weibo
    posts = weibo_posts(world, fresh_sandbox.url)[:10]
    crawl = run_crawl(tmp_path, posts, store=tmp_path / "files", MEDIA_ENABLED=False)
    assert len(crawl.items) == 10
    assert all(a["status"] is None and a["sha256"] is None for a in crawl.assets())
    assert not media_log(fresh_sandbox)
    assert not (tmp_path / "files").exists()


def test_redis_index_shared_between_runs(tmp_path: Path, fresh_sandbox: Any, redis_url: str) -> None:
    world = build_world().weibo
    posts = weibo_posts(world, fresh_sandbox.url)[:12]
    store = tmp_path / "files"
    first = run_crawl(tmp_path, posts, store=store, name="first", REDIS_URL=redis_url)
    assert not (store / "index.sqlite3").exists()
    assert {a["status"] for a in first.assets()} <= {"downloaded", "deduplicated", "uptodate"}
    import redis

    client = redis.Redis.from_url(redis_url)
    assert client.scard("mediacrawler:media:objects") == len(first.objects())
    fresh_sandbox.reset()
    second = run_crawl(tmp_path, posts, store=store, name="second", REDIS_URL=redis_url)
    assert {a["status"] for a in second.assets()} == {"uptodate"}
    assert not media_log(fresh_sandbox)


def test_a_valid_image_sent_gzip_encoded_is_stored_as_its_decoded_bytes(tmp_path: Path, fresh_sandbox: Any) -> None:
    # The server gzips although asked for identity: Content-Length counts the gzip bytes, the body the middleware
    # hands on is inflated. Compared on one side of the coding, the image is whole and is stored.
    from mediacrawler_sandbox.media import generic_image

    base = fresh_sandbox.url
    posts = [Post(platform="weibo", post_id="1", url="https://weibo.com/1/a", author=None, created_at=None,
                  media=[MediaAsset(kind="image", key="gz", url=f"{base}/hostile/gzipped/img/5.jpg"),
                         MediaAsset(kind="image", key="plain", url=f"{base}/media/img/6.jpg")])]
    store = tmp_path / "files"
    crawl = run_crawl(tmp_path, posts, store=store)
    by_key = {a["key"]: a for a in crawl.assets()}
    assert by_key["gz"]["status"] == "downloaded", by_key["gz"]
    assert by_key["gz"]["sha256"] == hashlib.sha256(generic_image(5)).hexdigest()
    assert (store / by_key["gz"]["path"]).read_bytes() == generic_image(5)
    assert by_key["plain"]["status"] == "downloaded"
    assert crawl.stats["media/decoded"] == 1 and "media/failed" not in crawl.stats


def test_a_redis_index_paused_8s_during_commits_fails_no_media(tmp_path: Path, fresh_sandbox: Any,
                                                               redis_server_factory: Any) -> None:
    # The redis-server process is stopped (SIGSTOP) for 8 s once the first objects are indexed, with a client
    # socket timeout of 1 s: commits time out during the blip; they must wait (MEDIA_INDEX_OUTAGE_GRACE), not fail.
    import signal
    import threading
    import time

    server = redis_server_factory()
    base = fresh_sandbox.url
    fresh_sandbox.set_faults(media_latency_ms=300)
    posts = [Post(platform="weibo", post_id=str(p), url=f"https://weibo.com/1/{p}", author=None, created_at=None,
                  media=[MediaAsset(kind="image", key=f"k{p}-{i}", url=f"{base}/media/img/{p * 10 + i}.jpg")
                         for i in range(6)]) for p in range(8)]
    paused: list[float] = []

    def blip() -> None:
        with server.client() as client:
            deadline = time.monotonic() + 60
            while client.scard("mediacrawler:media:objects") < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)
        paused.append(time.monotonic())
        time.sleep(8)  # the outage itself
        os.kill(server.process.pid, signal.SIGCONT)

    watcher = threading.Thread(target=blip, daemon=True)
    watcher.start()
    crawl = run_crawl(tmp_path, posts, store=tmp_path / "files", REDIS_URL=f"{server.url}?socket_timeout=1",
                      MEDIA_CONCURRENCY_PER_HOST=2, DOWNLOAD_DELAY=0, AUTOTHROTTLE_ENABLED=False)
    watcher.join(timeout=30)
    assert paused, "the crawl finished before the blip: the test tested nothing"
    assets = crawl.assets()
    assert len(assets) == 48
    assert [a for a in assets if a["status"] == "failed"] == []
    assert "media/failed" not in crawl.stats
    assert "Media index: Redis at redis://127.0.0.1" in crawl.log and "commits resumed after" in crawl.log
    import redis

    assert redis.Redis.from_url(server.url).scard("mediacrawler:media:objects") == len(crawl.objects()) == 48
