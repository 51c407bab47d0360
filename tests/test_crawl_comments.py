"""End to end: ``-a comments`` on Weibo, Bilibili and Facebook against one sandbox subprocess over real HTTP.

Every comment and reply exactly once (with its parent and root), pinned replies once, a closed thread's reason on
its post, comment pictures in the media store, comments in ``<job>.comments.jsonl`` beside the posts; XHS and
Douyin refuse the argument; a SIGKILLed thread (a listing's, an items job's) resumes at its stored cursor; a re-run
asks one page per thread and emits only the new comments (Weibo from the top, Bilibili ``mode=2``, Facebook from
the stored ``after``). Expectations come from the sandbox's pure model (mediacrawler_sandbox/comments.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from mediacrawler_sandbox.bilibili import BVIDS
from mediacrawler_sandbox.comments import CommentWorld, Thread
from mediacrawler_sandbox.facebook import DEFAULT_TOKEN, PAGE_ID
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox
from mediacrawler_sandbox.weibo import build_weibo_world

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894
Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def sb() -> Iterator[SandboxProcess]:
    with start_sandbox(weibo_users=(UID,), weibo_pages=1, weibo_per_page=3, startup_timeout=30) as proc:
        yield proc


@pytest.fixture
def sandbox(sb: SandboxProcess) -> SandboxProcess:
    sb.reset()
    return sb


def crawl_command(tmp_path: Path, sandbox: SandboxProcess, spider: str, *args: str, media: bool = False,
                  output: str = "output") -> tuple[list[str], dict[str, str]]:
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider, *args,
           "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}", "-s", f"BILIBILI_API_URL={sandbox.url}/bilibili",
           "-s", f"FACEBOOK_GRAPH_URL={sandbox.url}/facebook/v19.0", "-s", "FACEBOOK_PAGE_SIZE=10",
           "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", f"MEDIA_ENABLED={int(media)}",
           "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", f"OUTPUT_DIR={tmp_path / output}", "-s", f"LOG_FILE={tmp_path / 'crawl.log'}",
           "-s", "LOG_LEVEL=INFO", "-s", "PLATFORM_BACKOFF_BASE=0.05", "-s", "PLATFORM_BACKOFF_MAX=0.2"]
    env = {**{k: v for k, v in os.environ.items() if k != "REDIS_URL"}, "FACEBOOK_ACCESS_TOKEN": DEFAULT_TOKEN}
    return cmd, env


def crawl(tmp_path: Path, sandbox: SandboxProcess, spider: str, *args: str, media: bool = False,
          output: str = "output") -> tuple[subprocess.CompletedProcess[str], Records, Records]:
    """``scrapy crawl`` with the default output (OUTPUT_DIR): the posts and the comments files it wrote."""
    cmd, env = crawl_command(tmp_path, sandbox, spider, *args, media=media, output=output)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = tmp_path / output / spider
    posts = [json.loads(line) for f in out.glob("*.jsonl") if not f.name.endswith(".comments.jsonl")
             for line in f.read_text("utf-8").splitlines()] if out.exists() else []
    comments = [json.loads(line) for f in out.glob("*.comments.jsonl")
                for line in f.read_text("utf-8").splitlines()] if out.exists() else []
    return proc, posts, comments


def expected_thread(platform: str, post_id: str, **change: int) -> Thread:
    world = CommentWorld()
    if "size" in change:
        world.set_size(platform, post_id, change["size"])
    return world.thread(platform, post_id)


def assert_exactly(comments: list[dict[str, Any]], thread: Thread, *, prefix: str = "") -> None:
    """Every comment and reply of ``thread`` once, each with its parent and root (Graph ids carry a prefix)."""
    mine = [c for c in comments if c["post_id"] == thread.post_id]
    assert Counter(c["comment_id"] for c in mine) == Counter(prefix + c.id for c in thread.all())
    by_id = {c["comment_id"]: c for c in mine}
    for top in thread.comments:
        assert by_id[prefix + top.id]["parent_id"] is None and by_id[prefix + top.id]["root_id"] == prefix + top.id
        for reply in top.replies:
            assert by_id[prefix + reply.id]["root_id"] == prefix + top.id
            assert by_id[prefix + reply.id]["parent_id"] == prefix + str(reply.parent)


def test_weibo_every_comment_once_pictures_stored_comments_file(sandbox: SandboxProcess, tmp_path: Path) -> None:
    posts_listed = [p.id for p in build_weibo_world(seed=1, users=(UID,), pages=1, per_page=3).timeline(UID)]
    long_one = posts_listed[0]
    sandbox.comments("weibo", long_one, size=45)  # 3 pages of 20
    proc, posts, comments = crawl(tmp_path, sandbox, "weibo", "-a", f"uid={UID}", "-a", "comments=all",
                                  media=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "output" / "weibo" / f"weibo-uid-{UID}.comments.jsonl").exists()
    assert all("comment_id" not in p for p in posts) and all("url" not in c for c in comments)
    assert sorted(p["post_id"] for p in posts) == sorted(posts_listed)
    for post in posts:
        thread = expected_thread("weibo", post["post_id"], **({"size": 45} if post["post_id"] == long_one else {}))
        assert_exactly(comments, thread)
        assert post["extra"]["comments_fetched"] == len(thread.all())
    hotflow = [r for r in sandbox.requests() if r["path"].endswith("/comments/hotflow")
               and parse_qs(r["query"])["mid"] == [long_one]]
    assert len(hotflow) == 3
    pictures = [a for c in comments for a in c["media"]]
    assert pictures and all(a["status"] == "downloaded" and (tmp_path / "files" / a["path"]).is_file()
                            for a in pictures)


def test_bilibili_pinned_once_and_a_closed_thread_has_a_reason(sandbox: SandboxProcess, tmp_path: Path) -> None:
    full, closing = BVIDS[0], BVIDS[1]
    sandbox.comments("bilibili", full, size=50)  # the pinned one, then 3 pages of 20, 20, 9
    sandbox.comments("bilibili", closing, size=45, close_from_page=2)
    sandbox.set_faults(bilibili_wbi="all")  # unsigned comment pages are refused
    proc, posts, comments = crawl(tmp_path, sandbox, "bilibili", "-a", f"bvid={full},{closing}",
                                  "-a", "comments=all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    thread = expected_thread("bilibili", full, size=50)
    assert_exactly(comments, thread)
    pinned = [c["comment_id"] for c in comments if c["pinned"] and c["post_id"] == full]
    assert pinned == [next(c.id for c in thread.comments if c.pinned)]
    by_id = {p["post_id"]: p for p in posts}
    assert by_id[full]["extra"]["comments_fetched"] == len(thread.all())
    assert "comments_closed" not in by_id[full]["extra"]
    assert by_id[closing]["extra"]["comments_closed"] == "comments-closed"
    first_page = [c for c in comments if c["post_id"] == closing and c["parent_id"] is None]
    assert 0 < len(first_page) <= 21 and by_id[closing]["extra"]["comments_fetched"] > 0


def test_facebook_stream_and_bounds(sandbox: SandboxProcess, tmp_path: Path) -> None:
    post = f"{PAGE_ID}_1000000000001"
    sandbox.comments("facebook", post, size=20)  # with its replies, more than 3 pages of 10
    proc, posts, comments = crawl(tmp_path / "all", sandbox, "facebook", "-a", f"page={PAGE_ID}",
                                  "-a", "max_pages=1", "-a", "comments=all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    prefix = post.rsplit("_", 1)[1] + "_"
    thread = expected_thread("facebook", post, size=20)
    assert len(thread.all()) > 30
    assert_exactly(comments, thread, prefix=prefix)
    requests = [r for r in sandbox.requests() if "/comments" in r["path"]]
    assert requests and all("access_token" not in r["query"] for r in requests)
    assert all(DEFAULT_TOKEN not in json.dumps(c) for c in comments)
    # Bounded: the 2 oldest comments of each post, each with its first reply (the rest by /{comment}/comments).
    proc, posts, comments = crawl(tmp_path / "bounded", sandbox, "facebook", "-a", f"page={PAGE_ID}",
                                  "-a", "max_pages=1", "-a", "comments=2", "-a", "replies=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for p in posts:
        thread = expected_thread("facebook", p["post_id"], **({"size": 20} if p["post_id"] == post else {}))
        pre = p["post_id"].rsplit("_", 1)[1] + "_"
        oldest = sorted(thread.comments, key=lambda c: (c.created, c.id))[:2]
        want = [pre + c.id for c in oldest] + [pre + c.replies[0].id for c in oldest if c.replies]
        assert sorted(c["comment_id"] for c in comments if c["post_id"] == p["post_id"]) == sorted(want)
        assert p["extra"]["comments_fetched"] == len(want)


@pytest.mark.parametrize(("spider", "target"), [("xhs", "note=64b7d0a5000000001f03a1b2"),
                                                ("douyin", "aweme=7300000000000000001")])
def test_xhs_and_douyin_refuse_comments(spider: str, target: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", spider, "-a", target, "-a", "comments=all",
                           "-s", f"OUTPUT_DIR={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    [line] = [x for x in proc.stderr.splitlines() if x.strip()]
    assert "comments" in line and "signatures" in line


def _hotflow(sandbox: SandboxProcess, post: str) -> list[dict[str, Any]]:
    return [r for r in sandbox.requests() if r["path"].endswith("/comments/hotflow")
            and parse_qs(r["query"])["mid"] == [post]]


@pytest.mark.parametrize("backend", ["file", "redis"])
def test_weibo_sigkill_mid_thread_resumes_at_the_stored_cursor(
        sandbox: SandboxProcess, tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    post = build_weibo_world(seed=1, users=(UID,), pages=1, per_page=3).timeline(UID)[0].id
    sandbox.comments("weibo", post, size=300)  # 15 pages of 20, and a reply walk for most comments
    sandbox.set_faults(weibo_latency_ms=30)
    args = ["-a", f"uid={UID}", "-a", "comments=all", "-s", "CHECKPOINT_WRITE_INTERVAL=0.1",
            "-s", "CHECKPOINT_REDIS_INTERVAL=0.1"]
    store: Any = None
    if backend == "redis":  # the shared checkpoint, without the shared queue
        import redis

        from mediacrawler.distributed.checkpoint import RedisCheckpointStore

        url = request.getfixturevalue("redis_url")
        args += ["-s", f"REDIS_URL={url}", "-s", "DISTRIBUTED_ENABLED=0", "-s", "CHECKPOINT_BACKEND=redis"]
        store = RedisCheckpointStore(redis.Redis.from_url(url), "mediacrawler:checkpoint:")
    def stored_state() -> Any:
        """The thread's state in the checkpoint, or ``None`` while none is written."""
        if store is None:
            path = tmp_path / "checkpoints" / f"weibo-uid-{UID}.json"
            try:
                threads = json.loads(path.read_text("utf-8")).get("threads", {})
            except (OSError, ValueError):
                return None
        else:
            cp = store.load(f"weibo-uid-{UID}")
            threads = cp.threads if cp is not None else {}
        return (threads.get(post) or {}).get("state")

    cmd, env = crawl_command(tmp_path, sandbox, "weibo", *args)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Killed once 6 pages of the thread were asked for and the checkpoint holds the thread's place (written
        # every 0.1 s; on a loaded machine the write can trail the requests).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not (
                len(_hotflow(sandbox, post)) >= 6 and (stored_state() or {}).get("cursor")):
            time.sleep(0.1)
        assert proc.poll() is None, "the crawl ended before it could be interrupted"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    stored = stored_state()
    assert stored is not None and stored["cursor"] is not None and stored["fetched"] > 0
    first_run = len(_hotflow(sandbox, post))
    sandbox.set_faults(weibo_latency_ms=0)
    done, posts, comments = crawl(tmp_path, sandbox, "weibo", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    # The second run started at the stored cursor: the first page was not asked for again.
    again = _hotflow(sandbox, post)[first_run:]
    assert again and "max_id" in parse_qs(again[0]["query"])
    assert len(again) <= 15 - 1
    thread = expected_thread("weibo", post, size=300)
    assert_exactly(comments, thread)  # the union of both runs' output: every comment once
    [record] = [p for p in posts if p["post_id"] == post]
    assert record["extra"]["comments_fetched"] == len(thread.all())
    assert not (tmp_path / "checkpoints" / f"weibo-uid-{UID}.json").exists()  # the job completed
    assert store is None or store.load(f"weibo-uid-{UID}") is None


def test_weibo_rerun_fetches_only_the_new_comments(sandbox: SandboxProcess, tmp_path: Path) -> None:
    listed = [p.id for p in build_weibo_world(seed=1, users=(UID,), pages=1, per_page=3).timeline(UID)]
    post = listed[0]
    args = ["-a", f"uid={UID}", "-a", "comments=all", "-s", "COMMENTS_REFRESH_DAYS=36500"]
    first, posts, comments = crawl(tmp_path, sandbox, "weibo", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(posts) == 3 and comments
    added = sandbox.comments("weibo", post, add=2)["ids"]
    before = len(sandbox.requests())
    second, posts2, comments2 = crawl(tmp_path, sandbox, "weibo", *args, output="out2")
    assert second.returncode == 0, second.stderr[-3000:]
    world = CommentWorld()
    world.publish("weibo", post, 2)
    new = [c for c in world.thread("weibo", post).comments if c.id in added]
    assert len(new) == 2
    # Only those 2 (and their replies); the posts are stored already and not emitted again.
    assert sorted(c["comment_id"] for c in comments2) == sorted(x.id for c in new for x in (c, *c.replies))
    assert [c["comment_id"] for c in comments2 if c["parent_id"] is None] == added
    assert posts2 == []
    # One page of each thread: the first, which reaches the mark.
    hotflow = [r for r in sandbox.requests()[before:] if r["path"].endswith("/comments/hotflow")]
    assert sorted(parse_qs(r["query"])["mid"][0] for r in hotflow) == sorted(listed)
    assert all("max_id" not in parse_qs(r["query"]) for r in hotflow)
    # Posts published longer ago than COMMENTS_REFRESH_DAYS keep their threads as they are.
    before = len(sandbox.requests())
    third, _, comments3 = crawl(tmp_path, sandbox, "weibo", *args, "-s", "COMMENTS_REFRESH_DAYS=0",
                                output="out3")
    assert third.returncode == 0 and comments3 == []
    assert not [r for r in sandbox.requests()[before:] if "/comments/" in r["path"]]


def test_weibo_comments_through_the_shared_queue_two_workers(sandbox: SandboxProcess, tmp_path: Path,
                                                             redis_url: str) -> None:
    from tests.sync_crawls import run_workers

    listed = [p.id for p in build_weibo_world(seed=1, users=(UID,), pages=1, per_page=3).timeline(UID)]
    sandbox.comments("weibo", listed[0], size=45)
    records = run_workers(sandbox, tmp_path, redis_url, "run", f"weibo-uid-{UID}",
                          {"uid": str(UID), "comments": "all"})
    posts = [r for r in records if "comment_id" not in r]
    comments = [r for r in records if "comment_id" in r]
    assert sorted(p["post_id"] for p in posts) == sorted(listed)
    for post in posts:
        long_one = {"size": 45} if post["post_id"] == listed[0] else {}
        thread = expected_thread("weibo", post["post_id"], **long_one)
        assert_exactly(comments, thread)
        assert post["extra"]["comments_fetched"] == len(thread.all())


def _published(platform: str, post: str, added: list[str], **change: int) -> list[str]:
    """The ids of the comments ``added`` to ``post``'s thread and of their replies (what a re-run emits)."""
    world = CommentWorld()
    if "size" in change:
        world.set_size(platform, post, change["size"])
    world.publish(platform, post, len(added))
    new = [c for c in world.thread(platform, post).comments if c.id in added]
    assert len(new) == len(added) == 2
    return sorted(x.id for c in new for x in (c, *c.replies))


def test_bilibili_rerun_asks_newest_first_down_to_the_mark(sandbox: SandboxProcess, tmp_path: Path) -> None:
    from mediacrawler_sandbox.bilibili import aid_for

    bvid = BVIDS[0]
    sandbox.comments("bilibili", bvid, size=30)  # the pinned one, then 2 pages, hot first
    args = ["-a", f"bvid={bvid}", "-a", "comments=all", "-s", "COMMENTS_REFRESH_DAYS=36500"]
    first, _, comments = crawl(tmp_path, sandbox, "bilibili", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert_exactly(comments, expected_thread("bilibili", bvid, size=30))
    main = [parse_qs(r["query"]) for r in sandbox.requests() if r["path"].endswith("/x/v2/reply/wbi/main")]
    assert len(main) == 2 and all(q["mode"] == ["3"] for q in main)  # a first walk: hot first
    added = sandbox.comments("bilibili", bvid, add=2)["ids"]
    before = len(sandbox.requests())
    second, _, comments2 = crawl(tmp_path, sandbox, "bilibili", *args, output="out2")
    assert second.returncode == 0, second.stderr[-3000:]
    # Exactly the 2 new ones and their replies: not the pinned one again, nothing below the mark.
    assert sorted(c["comment_id"] for c in comments2) == _published("bilibili", bvid, added, size=30)
    main = [parse_qs(r["query"]) for r in sandbox.requests()[before:]
            if r["path"].endswith("/x/v2/reply/wbi/main")]
    assert len(main) == 1 and main[0]["mode"] == ["2"] and main[0]["oid"] == [str(aid_for(bvid))]


def test_facebook_rerun_starts_at_the_stored_cursor(sandbox: SandboxProcess, tmp_path: Path) -> None:
    post = f"{PAGE_ID}_1000000000001"
    sandbox.comments("facebook", post, size=20)  # with its replies, more than 3 pages of 10
    args = ["-a", f"page={PAGE_ID}", "-a", "comments=all", "-s", "COMMENTS_REFRESH_DAYS=36500"]
    first, _, comments = crawl(tmp_path, sandbox, "facebook", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    prefix = post.rsplit("_", 1)[1] + "_"
    assert_exactly(comments, expected_thread("facebook", post, size=20), prefix=prefix)
    stream = f"/{post}/comments"
    walked = [parse_qs(r["query"]) for r in sandbox.requests() if r["path"].endswith(stream)]
    assert len(walked) > 3
    [marks] = (tmp_path / "checkpoints" / "marks" / "comments").glob("*.json")
    assert DEFAULT_TOKEN not in marks.read_text("utf-8")
    cursor = json.loads(marks.read_text("utf-8"))["threads"][post][2]
    added = sandbox.comments("facebook", post, add=2)["ids"]
    before = len(sandbox.requests())
    second, _, comments2 = crawl(tmp_path, sandbox, "facebook", *args, output="out2")
    assert second.returncode == 0, second.stderr[-3000:]
    # One page, asked after the last walk's end: the 2 new comments and their replies, nothing walked before.
    again = [parse_qs(r["query"]) for r in sandbox.requests()[before:] if r["path"].endswith(stream)]
    assert len(again) == 1 and again[0]["after"] == [cursor]
    want = [prefix + c for c in _published("facebook", post, added, size=20)]
    assert sorted(c["comment_id"] for c in comments2) == sorted(want)
    assert DEFAULT_TOKEN not in marks.read_text("utf-8")
    # A mark without its cursor (written before marks kept one): the thread is walked from its start, the comments
    # at or below the mark passed over, only the new ones emitted; the mark gets its cursor again.
    doc = json.loads(marks.read_text("utf-8"))
    doc["threads"] = {p: m[:2] for p, m in doc["threads"].items()}
    marks.write_text(json.dumps(doc), "utf-8")
    added = sandbox.comments("facebook", post, add=2)["ids"]
    third, _, comments3 = crawl(tmp_path, sandbox, "facebook", *args, output="out3")
    assert third.returncode == 0, third.stderr[-3000:]
    world = CommentWorld()
    world.set_size("facebook", post, 20)
    world.publish("facebook", post, 2)
    world.publish("facebook", post, 2)
    new = [c for c in world.thread("facebook", post).comments if c.id in added]
    assert len(new) == 2 and comments3
    want = sorted(prefix + x.id for c in new for x in (c, *c.replies))
    assert sorted(c["comment_id"] for c in comments3) == want
    assert len(json.loads(marks.read_text("utf-8"))["threads"][post]) == 3


def test_bilibili_items_job_sigkill_mid_thread_resumes_at_the_stored_cursor(sandbox: SandboxProcess,
                                                                           tmp_path: Path) -> None:
    bvid = BVIDS[0]
    sandbox.comments("bilibili", bvid, size=300)  # 15 pages of 20, and a reply walk for most comments
    sandbox.set_faults(bilibili_latency_ms=30)
    args = ["-a", f"bvid={bvid}", "-a", "comments=all", "-s", "CHECKPOINT_WRITE_INTERVAL=0.1"]

    def main_pages() -> list[dict[str, list[str]]]:
        return [parse_qs(r["query"]) for r in sandbox.requests() if r["path"].endswith("/x/v2/reply/wbi/main")]

    cmd, env = crawl_command(tmp_path, sandbox, "bilibili", *args)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(main_pages()) < 5 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert proc.poll() is None, "the crawl ended before it could be interrupted"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    [cp_file] = (tmp_path / "checkpoints").glob("bilibili-bvid-*.json")
    cp = json.loads(cp_file.read_text("utf-8"))
    assert cp["kind"] == "items" and cp["threads"][bvid]["state"]["cursor"] is not None
    first_run = len(main_pages())
    sandbox.set_faults(bilibili_latency_ms=0)
    done, posts, comments = crawl(tmp_path, sandbox, "bilibili", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    again = main_pages()[first_run:]
    assert again and json.loads(again[0]["pagination_str"][0])["offset"]  # not the first page again
    assert len(again) <= 15 - 4
    thread = expected_thread("bilibili", bvid, size=300)
    assert_exactly(comments, thread)  # the union of both runs' output: every comment once
    [record] = [p for p in posts if p["post_id"] == bvid]
    assert record["extra"]["comments_fetched"] == len(thread.all())
    assert not cp_file.exists()  # the job completed
