"""Incremental sync end to end: real ``scrapy crawl weibo`` runs against a sandbox whose timeline gains new posts.

Run 1 walks the whole timeline and sets the high-water mark; 3 posts are published (and an old post pinned on top
of page 1); run 2 requests pages 1 and 2 only, emits exactly the 3 new posts and downloads only their pictures; run
3 (nothing new) requests page 1 only and emits nothing; ``-a full=true`` walks every page again and downloads
nothing (every asset is recognised by its key). Expectations come from the sandbox's own world model. The first
test runs twice: marks and checkpoints in files, and in a real redis-server (``CHECKPOINT_BACKEND=redis`` with
REDIS_URL; the marks follow it), where the crawls share no state on disk but the media store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from scrapy.utils.test import get_crawler

from mediacrawler.extensions.marks import FileMarkStore, MarkExtension, MarkStore, RedisMarkStore
from mediacrawler.items import Post, Source
from mediacrawler.parsers._common import Page
from mediacrawler.parsers.weibo import parse_mblog
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from mediacrawler.contracts import HighWaterMark
from mediacrawler.spiders.weibo import WeiboSpider
from tests.sync_crawls import control, crawl_command, listing_requests, media_paths, records, run
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

UID = 7365120894
KEY = f"weibo-uid-{UID}"
CONTAINER = f"107603{UID}"
PAGES, PER_PAGE = 2, 10


sb = weibo_sandbox(UID, PAGES, PER_PAGE)


def crawl(sb: SandboxProcess, workdir: Path, name: str, *args: str, redis_url: str | None = None) -> list[dict]:
    if redis_url:
        args = (*args, "-s", "CHECKPOINT_BACKEND=redis")
    code, log = run(crawl_command("weibo", sb, workdir, "-a", f"uid={UID}", *args, run=name), workdir, name=name,
                    redis_url=redis_url)
    assert code == 0, log[-3000:]
    return records(workdir / name / "weibo" / f"{KEY}.jsonl")


@pytest.mark.parametrize("backend", ["file", "redis"])
def test_second_run_fetches_only_new_posts_and_their_media(tmp_path: Path, sb: SandboxProcess, backend: str,
                                                           request: pytest.FixtureRequest) -> None:
    sb.reset()
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    old_ids = [p.id for p in world.timeline(UID)]
    redis_url: str | None = request.getfixturevalue("redis_url") if backend == "redis" else None
    marks: MarkStore
    if redis_url:
        client = redis.Redis.from_url(redis_url)
        marks = RedisMarkStore(client, "mediacrawler:marks:")
    else:
        marks = FileMarkStore(tmp_path / "checkpoints" / "marks")

    def crawl_run(name: str) -> list[dict]:
        return crawl(sb, tmp_path, name, redis_url=redis_url)

    first = crawl_run("run1")
    assert sorted(r["post_id"] for r in first) == sorted(old_ids)
    assert [page for _, page in listing_requests(sb)] == [1, 2, 3]  # page 3: the end-of-list answer
    mark = marks.load(KEY)
    assert mark is not None and mark.post_id == old_ids[0]
    assert (tmp_path / "checkpoints" / f"{KEY}.json").exists() is False  # completed: checkpoint cleared
    if redis_url:
        assert not (tmp_path / "checkpoints" / "marks").exists()  # nothing on disk: the mark is in Redis
        assert client.keys("mediacrawler:checkpoint:*") == []  # the shared checkpoint, cleared

    sb.reset()
    new_ids = control(sb, "weibo/publish", {"uid": UID, "count": 3})["ids"]
    assert new_ids == world.publish(UID, 3)  # the same posts the model computes
    assert all(int(i) > int(old_ids[0]) for i in new_ids)
    control(sb, "weibo/pin", {"uid": UID, "post_id": old_ids[-1]})  # an old post pinned first on page 1
    new_pics = {pic.path("large") for i in new_ids for pic in world.posts[i].pics}
    assert new_pics

    second = crawl_run("run2")
    assert sorted(r["post_id"] for r in second) == sorted(new_ids)
    assert [page for _, page in listing_requests(sb)] == [1, 2]  # page 2 is all below the mark: stop there
    assert set(media_paths(sb)) == new_pics
    assert all(m["status"] == "downloaded" for r in second for m in r["media"])
    for r in second:  # the pictures are on disk under their recorded hashes
        for m in r["media"]:
            assert (tmp_path / "files" / m["path"]).stat().st_size == m["size"]
    mark = marks.load(KEY)
    assert mark is not None and mark.post_id == new_ids[0]  # the newest new post, never the pinned one

    before = len(sb.requests())  # no reset: it would unpublish the new posts
    third = crawl_run("run3")
    assert third == []
    entries = sb.requests()[before:]
    assert [(e["path"], e["query"].split("page=")[-1]) for e in entries] == [
        ("/weibo/api/container/getIndex", "1")]  # page 1, nothing else: no other page, no media
    mark = marks.load(KEY)
    assert mark is not None and mark.post_id == new_ids[0] and mark.seq == 2


def test_full_walks_every_page_and_downloads_nothing_known(tmp_path: Path, sb: SandboxProcess) -> None:
    sb.reset()
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    crawl(sb, tmp_path, "run1")
    sb.reset()
    again = crawl(sb, tmp_path, "run2", "-a", "full=true")
    assert sorted(r["post_id"] for r in again) == sorted(p.id for p in world.timeline(UID))
    assert [page for _, page in listing_requests(sb)] == [1, 2, 3]
    assert media_paths(sb) == []  # every asset recognised by its key in the media index
    assert {m["status"] for r in again for m in r["media"]} == {"uptodate"}


# --- The hooks on their own: pinned posts, the stop decision, the candidate ------------------------------------


def _post(post_id: str, *, pinned: bool = False, created_at: str | None = None) -> Post:
    return Post(platform="weibo", post_id=post_id, url=f"https://weibo.com/1/{post_id}", author=None,
                created_at=created_at, source=Source(spider="weibo", job="weibo-uid-1", page=1),
                extra={"pinned": True} if pinned else {})


def test_weibo_isTop_is_the_pinned_flag() -> None:
    mblog = {"id": "5", "bid": "x", "user": {"id": 1, "screen_name": "a"}, "text": "hi",
             "created_at": "Sat Nov 28 10:00:00 +0800 2026"}
    assert parse_mblog({**mblog, "isTop": 1}).extra["pinned"] is True
    assert "pinned" not in parse_mblog(mblog).extra


def test_pinned_posts_never_stop_the_walk_nor_become_the_mark(tmp_path: Path) -> None:
    crawler = get_crawler(WeiboSpider, {"CHECKPOINT_DIR": str(tmp_path), "MARKS_ENABLED": True})
    spider = WeiboSpider.from_crawler(crawler, uid="1")
    spider.job_state.mark = HighWaterMark(post_id="100")
    # Below the mark but pinned above newer posts: the page goes on; the old pinned post is not emitted again.
    page = Page(posts=[_post("50", pinned=True), _post("120"), _post("90")])
    assert spider._apply_mark(page, 1) is False
    assert [p.post_id for p in page.posts] == ["120"]
    # A new post pinned on a page otherwise all below the mark: emitted, and the walk stops there.
    page = Page(posts=[_post("150", pinned=True), _post("90"), _post("80")], incomplete={"70": {}})
    assert spider._apply_mark(page, 1) is True
    assert [p.post_id for p in page.posts] == ["150"] and page.incomplete == {}
    # Only a pinned post: nothing says where the source stands; go on.
    assert spider._apply_mark(Page(posts=[_post("60", pinned=True)]), 1) is False
    # Ids that are not numbers compare by time.
    spider.job_state.mark = HighWaterMark(post_id="BVa", created_at="2026-11-28T01:00:00Z")
    page = Page(posts=[_post("BVb", created_at="2026-11-28T02:00:00Z"),
                       _post("BVc", created_at="2026-11-27T00:00:00Z")])
    assert spider._apply_mark(page, 1) is False and [p.post_id for p in page.posts] == ["BVb"]

    ext = MarkExtension(crawler)
    ext.key = "weibo-uid-1"
    for post in (_post("90"), _post("500", pinned=True), _post("120"), _post("110")):
        ext.item_scraped(post, spider)
    assert ext.best == HighWaterMark(post_id="120")


def test_xhs_profile_notes_are_judged_by_the_time_in_their_ids_and_pinned_ones_stay_pinned() -> None:
    from mediacrawler.parsers import xhs as xhs_parser
    from mediacrawler_sandbox.xhs import USER_ID, build_xhs_world, note_page, profile_page
    from mediacrawler.spiders.xhs import XhsChain, XhsSpider

    base = "http://127.0.0.1:9"
    world = build_xhs_world()
    notes = world.user_notes()
    world.pinned = notes[-1].id  # the oldest note, pinned: shown first
    html = profile_page(world, USER_ID, base=base).decode()
    spider = XhsSpider.from_crawler(get_crawler(XhsSpider), user=USER_ID)

    def read(note_id: str) -> dict:
        return xhs_parser.read_note_page(note_page(world, note_id, base=base, xsec_token=None).decode(),
                                         note_id=note_id)

    # The mark as the marks extension keeps it: a note read from its page (its own time, not the id's).
    source = Source(spider="xhs", job=spider.job, page=1)
    marked = xhs_parser.post_from_read(read(notes[2].id), note_id=notes[2].id, source=source)
    assert marked.created_at is not None
    spider.job_state.mark = HighWaterMark(post_id=marked.post_id, created_at=marked.created_at)
    page = spider._profile(html)
    assert list(page.incomplete)[0] == world.pinned and len(page.incomplete) == 6
    assert spider._apply_mark(page, 1) is False  # two notes are newer
    assert list(page.incomplete) == [notes[0].id, notes[1].id]  # the pinned old note is not read again either

    newest = xhs_parser.post_from_read(read(notes[0].id), note_id=notes[0].id, source=source)
    spider.job_state.mark = HighWaterMark(post_id=newest.post_id, created_at=newest.created_at)  # nothing is new
    page = spider._profile(html)
    assert spider._apply_mark(page, 1) is True and page.incomplete == {}

    # The pinned note, read from its page, keeps the card's flag: it never becomes the mark.
    spider.job_state.mark = None
    page = spider._profile(html)
    chain = XhsChain(post_id=world.pinned, raw=page.incomplete[world.pinned], read=read(world.pinned))
    post = spider.post_from_chain(chain, source, missing=None)
    assert post.extra.get("pinned") is True and post.created_at is not None
    other = XhsChain(post_id=notes[0].id, raw=page.incomplete[notes[0].id], read=read(notes[0].id))
    assert "pinned" not in spider.post_from_chain(other, source, missing=None).extra
    assert xhs_parser.note_id_time(notes[0].id) == newest.created_at  # the sandbox's ids carry the note's time
    assert xhs_parser.note_id_time("not-an-id") is None and xhs_parser.note_id_time("0" * 24) is None


def test_douyin_is_top_is_the_pinned_flag() -> None:
    from mediacrawler.parsers.douyin import aweme_to_post

    aweme = {"aweme_id": "7300000000000000001", "desc": "x", "create_time": 1764390000}
    assert aweme_to_post({**aweme, "is_top": 1}).extra["pinned"] is True
    assert "pinned" not in aweme_to_post({**aweme, "is_top": 0}).extra
