"""Facebook parser on Graph API answers captured by others (tests/fixtures/real/facebook/, provenance in
tests/fixtures/real/SOURCES.md). Expected values are read from the raw JSON (paths named), never from the parser.
The spider asks only for ``id,message,created_time,permalink_url,from,attachments{…}``: counts are not claimed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.parsers import facebook
from mediacrawler.parsers._common import PlatformError

REAL = Path(__file__).parent / "fixtures" / "real" / "facebook"


def _load(name: str) -> Any:
    return json.loads((REAL / name).read_text("utf-8"))


def _utc(graph_time: str) -> str:
    # Graph writes "2021-07-09T19:09:52+0000".
    return datetime.strptime(graph_time, "%Y-%m-%dT%H:%M:%S%z").astimezone(timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("name", ["pyfacebook_feed_p1.json", "pyfacebook_feed_p2.json"])
def test_feed_pages_posts_photos_links_and_videos(name: str) -> None:
    payload = _load(name)
    page = facebook.parse_posts(payload)
    raw = payload["data"]
    listed = {p.post_id: p for p in page.posts} | {k: None for k in page.incomplete}
    assert sorted(listed) == sorted(p["id"] for p in raw) and len(raw) == 5
    for entry in raw:
        [att] = entry["attachments"]["data"]
        if att["media_type"] == "video":
            # No media.source in a feed answer: the video waits for its node (a chain step).
            assert entry["id"] in page.incomplete
            continue
        post = listed[entry["id"]]
        assert post is not None
        assert post.created_at == _utc(entry["created_time"]) and post.text == entry.get("message", "")
        if att["media_type"] == "photo":
            [image] = post.media
            assert (image.url, image.width, image.height) == (
                att["media"]["image"]["src"], att["media"]["image"]["width"], att["media"]["image"]["height"])
            assert image.key == f"photo:{att['target']['id']}"
        else:  # a shared link: unwrapped from l.facebook.com, no image asset for its preview
            assert att["type"] == "share" and post.media == []
            assert post.extra["link"] == att["unshimmed_url"]
    assert page.is_last == ("next" not in payload["paging"])
    assert page.next_cursor == (payload["paging"]["cursors"]["after"] if "next" in payload["paging"] else None)


def test_album_post_every_photo_in_order() -> None:
    node = _load("pyfacebook_post_album_cgtn.json")
    page = facebook.parse_posts({"data": [node]})
    [post] = page.posts
    assert post.post_id == node["id"] and post.created_at == _utc(node["created_time"])
    assert post.text == node["message"]
    subs = node["attachments"]["data"][0]["subattachments"]["data"]
    assert len(subs) == 7
    assert [(m.kind, m.url, m.key) for m in post.media] == [
        ("image", s["media"]["image"]["src"], f"photo:{s['target']['id']}") for s in subs]


def test_time_paged_posts_ids_times_and_texts() -> None:
    payload = _load("pyfacebook_posts_fields_p1.json")
    page = facebook.parse_posts(payload)
    assert [(p.post_id, p.created_at, p.text) for p in page.posts] == [
        (e["id"], _utc(e["created_time"]), e.get("message", "")) for e in payload["data"]]
    # paging.next is time-based (until=…, no cursors.after): never followed (it carries the token), no cursor.
    assert page.next_cursor is None


def test_multi_ids_answer_is_refused_not_read_as_posts() -> None:
    page = facebook.parse_posts(_load("pyfacebook_multi_posts_ids.json"))
    assert page.posts == [] and page.incomplete == {} and page.skipped == {"malformed_data": 1}


def test_video_node_without_source_is_a_clear_refusal() -> None:
    node = _load("pyfacebook_video_node_default.json")
    assert "source" not in node
    with pytest.raises(PlatformError, match="video node without a source"):
        facebook.parse_video_node(node)


def test_legacy_feed_ids_authors_times_texts() -> None:
    raw = _load("mbobot_feed_legacy_fields_2019.json")
    page = facebook.parse_posts({"data": raw})
    assert len(raw) == 119 and [p.post_id for p in page.posts] == [e["id"] for e in raw]
    for post, entry in zip(page.posts, raw, strict=True):
        assert post.created_at == _utc(entry["created_time"]) and post.text == entry.get("message", "")
        assert post.author is not None and (post.author.id, post.author.name) == (entry["from"]["id"],
                                                                                  entry["from"]["name"])


def test_legacy_photo_posts_are_refused_or_keep_their_photo() -> None:
    raw = _load("mbobot_feed_legacy_fields_2019.json")
    page = facebook.parse_posts({"data": raw})
    photos = {e["id"] for e in raw if e.get("type") == "photo"}
    assert len(photos) == 112
    assert all(p.media or p.post_id not in photos for p in page.posts)
    by_id = {p.post_id: p for p in page.posts}
    for entry in raw:
        if entry.get("type") != "photo":
            continue
        # One image a photo post, named by its object_id, at the one size the 2019 answer gives (``picture``).
        assert [(m.kind, m.key, m.url) for m in by_id[entry["id"]].media] == [
            ("image", f"photo:{entry['object_id']}", entry["picture"])]
    # A link's or a status's thumbnail is no photo of the post.
    assert all(not by_id[e["id"]].media for e in raw if e.get("type") in ("link", "status"))


def test_legacy_photo_post_prefers_full_picture() -> None:
    raw = _load("mbobot_feed_legacy_fields_2019.json")
    entry = dict(next(e for e in raw if e.get("type") == "photo"))
    full = entry["picture"].replace("/p130x130/", "/").replace("/s130x130/", "/")
    entry["full_picture"] = full
    [post] = facebook.parse_posts({"data": [entry]}).posts
    assert [(m.key, m.url) for m in post.media] == [(f"photo:{entry['object_id']}", full)]
