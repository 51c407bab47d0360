"""The sandbox's comment threads over real HTTP, read back with our own parsers: every comment and reply exactly
once, each platform's cursor and its quirks (Weibo max_id 0 at the end and ok:0 for none, Bilibili's pinned reply
on every page and a thread that closes mid-walk, Graph's nested replies), pictures that are real images, and
comments published after a first walk appearing at the top. Expectations come from the pure model
(mediacrawler_sandbox/comments.py)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any
from urllib.parse import urlencode

from mediacrawler.parsers import bilibili_comments, facebook_comments, weibo_comments
from mediacrawler_sandbox.bilibili import BVIDS, aid_for
from mediacrawler_sandbox.comments import CommentWorld
from mediacrawler_sandbox.facebook import DEFAULT_TOKEN, PAGE_ID
from mediacrawler_sandbox.process import SandboxProcess

WEIBO_POST = "5104383848730501"
FB_POST = f"{PAGE_ID}_1000000000001"


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def weibo_walk(sb: SandboxProcess, post: str) -> tuple[list[Any], list[str]]:
    comments, cursors, cursor = [], [], None
    for _ in range(100):
        max_id, kind = weibo_comments.split_cursor(cursor)
        _, body = get(f"{sb.url}/weibo/comments/hotflow?" + urlencode(
            {"id": post, "mid": post, "max_id": max_id, "max_id_type": kind}))
        page = weibo_comments.parse_hotflow(json.loads(body), post_id=post)
        comments += page.comments
        for c in page.comments:
            reply_cursor = None
            for _ in range(50):
                if not c.metrics.replies:
                    break
                rid, _kind = weibo_comments.split_cursor(reply_cursor)
                _, raw = get(f"{sb.url}/weibo/comments/hotFlowChild?" + urlencode(
                    {"cid": c.comment_id, "max_id": rid, "max_id_type": 0}))
                replies = weibo_comments.parse_hotflow_child(json.loads(raw), post_id=post, root_id=c.comment_id)
                comments += replies.comments
                if replies.is_last:
                    break
                reply_cursor = replies.next_cursor
        if page.is_last:
            return comments, cursors
        cursor = page.next_cursor
        cursors.append(cursor)
    raise AssertionError("the thread never ended")


def test_weibo_three_pages_every_comment_and_reply_once(fresh_sandbox: SandboxProcess) -> None:
    fresh_sandbox.comments("weibo", WEIBO_POST, size=45)
    comments, cursors = weibo_walk(fresh_sandbox, WEIBO_POST)
    world = CommentWorld()
    world.set_size("weibo", WEIBO_POST, 45)
    expected = world.thread("weibo", WEIBO_POST)
    assert sorted(c.comment_id for c in comments) == sorted(c.id for c in expected.all())
    assert len(cursors) == 2 and cursors[1].endswith(":1")  # max_id_type 1 from the third page on
    by_id = {c.comment_id: c for c in comments}
    for top in expected.comments:
        for reply in top.replies:
            assert by_id[reply.id].root_id == top.id and by_id[reply.id].parent_id == reply.parent
    pinned = [c for c in comments if c.pinned is False and c.extra.get("liked_by_author")]
    assert len(pinned) == 1
    deleted = [c for c in comments if c.deleted]
    assert len(deleted) == 1 and deleted[0].author is None
    [picture] = [a for c in comments for a in c.media]
    status, data = get(picture.url)
    assert status == 200 and data[:3] == b"\xff\xd8\xff"
    assert any("😍" in c.text for c in comments)


def test_weibo_no_comments_is_ok_0_and_new_comments_come_first(fresh_sandbox: SandboxProcess) -> None:
    _, body = get(f"{fresh_sandbox.url}/weibo/comments/hotflow?id=5104383848730500&mid=5104383848730500")
    assert json.loads(body) == {"ok": 0, "msg": "快来发表你的评论吧"}
    first, _ = weibo_walk(fresh_sandbox, WEIBO_POST)
    added = fresh_sandbox.comments("weibo", WEIBO_POST, add=2)["ids"]
    _, body = get(f"{fresh_sandbox.url}/weibo/comments/hotflow?id={WEIBO_POST}&mid={WEIBO_POST}")
    page = weibo_comments.parse_hotflow(json.loads(body), post_id=WEIBO_POST)
    assert [c.comment_id for c in page.comments[:2]] == added
    assert not set(added) & {c.comment_id for c in first}


def bilibili_walk(sb: SandboxProcess, bvid: str) -> tuple[list[Any], str | None]:
    aid, comments, cursor, first = aid_for(bvid), [], None, True
    for _ in range(100):
        _, body = get(f"{sb.url}/bilibili/x/v2/reply/main?" + urlencode(
            {"oid": aid, "type": 1, "mode": 3, "pagination_str": bilibili_comments.pagination_str(cursor)}))
        page = bilibili_comments.parse_main(json.loads(body), post_id=bvid, first_page=first)
        first = False
        comments += page.comments
        for c in page.comments:
            pn = 1
            while c.metrics.replies and pn < 50:
                _, raw = get(f"{sb.url}/bilibili/x/v2/reply/reply?" + urlencode(
                    {"oid": aid, "type": 1, "root": c.comment_id, "pn": pn, "ps": 2}))
                thread = bilibili_comments.parse_thread(json.loads(raw), post_id=bvid, root_id=c.comment_id)
                comments += thread.comments
                if thread.is_last:
                    break
                pn = int(thread.next_cursor or 0)
        if page.is_last:
            return comments, page.closed
        cursor = page.next_cursor
    raise AssertionError("the thread never ended")


def test_bilibili_pinned_once_folded_kept_every_reply_once(fresh_sandbox: SandboxProcess) -> None:
    bvid = BVIDS[0]
    fresh_sandbox.comments("bilibili", bvid, size=45)
    comments, closed = bilibili_walk(fresh_sandbox, bvid)
    world = CommentWorld()
    world.set_size("bilibili", bvid, 45)
    expected = world.thread("bilibili", bvid)
    assert closed is None
    assert sorted(c.comment_id for c in comments) == sorted(c.id for c in expected.all())
    assert [c.comment_id for c in comments if c.pinned] == [next(c.id for c in expected.comments if c.pinned)]
    assert len([c for c in comments if c.extra.get("folded")]) == 1


def test_bilibili_a_thread_that_closes_mid_walk_says_so(fresh_sandbox: SandboxProcess) -> None:
    bvid = BVIDS[1]
    fresh_sandbox.comments("bilibili", bvid, size=45, close_from_page=2)
    comments, closed = bilibili_walk(fresh_sandbox, bvid)
    assert closed == "comments-closed" and 0 < len({c.root_id for c in comments}) <= 21


def test_facebook_stream_nests_replies_and_needs_the_token(fresh_sandbox: SandboxProcess) -> None:
    fresh_sandbox.comments("facebook", FB_POST, size=30)
    headers = {"Authorization": f"Bearer {DEFAULT_TOKEN}"}
    base = f"{fresh_sandbox.url}/facebook/v19.0/{FB_POST}/comments"
    status, body = get(base)
    assert status == 400 and json.loads(body)["error"]["code"] == 190
    comments, roots, after = [], {}, None
    for _ in range(50):
        _, body = get(base + "?" + urlencode({"filter": "stream", "limit": 10, **({"after": after} if after else {})}),
                      headers)
        page = facebook_comments.parse_comments(json.loads(body), post_id=FB_POST, roots=roots)
        roots.update({c.comment_id: c.root_id for c in page.comments})
        comments += page.comments
        if page.is_last:
            break
        after = page.next_cursor
    world = CommentWorld()
    world.set_size("facebook", FB_POST, 30)
    expected = world.thread("facebook", FB_POST)
    assert len(comments) == len({c.comment_id for c in comments}) == len(expected.all())
    nested = [c for c in comments if c.parent_id is not None and c.parent_id != c.root_id]
    assert nested and all(roots[c.parent_id] == c.root_id for c in nested)
    top = next(c for c in comments if c.metrics.replies)
    _, body = get(f"{fresh_sandbox.url}/facebook/v19.0/{top.comment_id}/comments", headers)
    replies = facebook_comments.parse_comments(json.loads(body), post_id=FB_POST, root_id=top.comment_id)
    assert len(replies.comments) == top.metrics.replies and all(r.root_id == top.comment_id for r in replies.comments)


def test_bilibili_mode_2_is_newest_first_and_mode_3_hot_first() -> None:
    from mediacrawler_sandbox.comments import bilibili_main

    world = CommentWorld()
    world.set_size("bilibili", BVIDS[0], 15)
    aid = aid_for(BVIDS[0])
    newest = bilibili_main(world, BVIDS[0], aid, pagination=None, base="http://x", mode=2)["data"]["replies"]
    hot = bilibili_main(world, BVIDS[0], aid, pagination=None, base="http://x", mode=3)["data"]["replies"]
    assert [r["ctime"] for r in newest] == sorted((r["ctime"] for r in newest), reverse=True)
    assert [r["like"] for r in hot] == sorted((r["like"] for r in hot), reverse=True)
    assert sorted(r["rpid"] for r in hot) == sorted(r["rpid"] for r in newest) and hot != newest


def test_facebook_after_names_the_end_on_the_last_page_and_published_comments_follow_it() -> None:
    from mediacrawler_sandbox.comments import facebook_comments as fb_page

    world = CommentWorld()
    world.set_size("facebook", FB_POST, 4)
    listed = len(world.thread("facebook", FB_POST).all())
    last = fb_page(world, FB_POST, node=FB_POST, after=None, limit=100, stream=True, base="http://x")
    assert "next" not in last["paging"] and len(last["data"]) == listed
    before = {c["id"]: c["created_time"] for c in last["data"]}
    world.publish("facebook", FB_POST, 2)
    after = fb_page(world, FB_POST, node=FB_POST, after=last["paging"]["cursors"]["after"], limit=100,
                    stream=True, base="http://x")
    new = [c for c in after["data"] if "parent" not in c]
    assert len(new) == 2 and not set(before) & {c["id"] for c in after["data"]}
    again = fb_page(world, FB_POST, node=FB_POST, after=None, limit=100, stream=True, base="http://x")
    assert {c["id"]: c["created_time"] for c in again["data"][:listed]} == before  # earlier ones unmoved
    assert min(c["created_time"] for c in new) > max(before.values())
