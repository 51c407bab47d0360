"""The platform contract's sources and chains (docs/architecture.md, "Sources"): the ``items`` checkpoint shape,
and each platform's typed chain state, which travels in ``meta`` as plain JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from mediacrawler.checkpoints.model import Checkpoint, CheckpointCorrupt
from mediacrawler.spiders._chain import Chain
from mediacrawler.spiders.bilibili import BilibiliChain, BilibiliSpider
from mediacrawler.spiders.douyin import DouyinChain, DouyinSpider
from mediacrawler.spiders.facebook import FacebookChain, FacebookSpider
from mediacrawler.spiders.weibo import WeiboChain, WeiboSpider
from mediacrawler.spiders.xhs import XhsChain, XhsSpider


def test_an_items_checkpoint_has_items_not_pages() -> None:
    cp = Checkpoint(key="bilibili-bvid-a-b-c", spider="bilibili", kind="items", done=["C", "A"], failed_items=["B"])
    data = cp.to_dict()
    assert data["kind"] == "items" and data["done"] == ["A", "C"] and data["failed"] == ["B"]
    assert not {"watermark", "next", "stored", "failed_pages", "last_page"} & set(data)
    back = Checkpoint.from_dict(json.loads(json.dumps(data)), key="bilibili-bvid-a-b-c")
    assert (back.kind, sorted(back.done), back.failed_items) == ("items", ["A", "C"], ["B"])
    # A listing's document still reads as before (no "kind": a listing).
    listing = Checkpoint(key="weibo-uid-1", spider="weibo", watermark=3, next_page=4).to_dict()
    assert "kind" not in listing and Checkpoint.from_dict(listing).kind == "listing"
    with pytest.raises(CheckpointCorrupt, match="kind 'thread2'"):
        Checkpoint.from_dict({**data, "kind": "thread2"})
    with pytest.raises(CheckpointCorrupt):
        Checkpoint.from_dict({**data, "done": [1]})  # ids are strings


@pytest.mark.parametrize(("spidercls", "chain"), [
    (WeiboSpider, WeiboChain(post_id="5012", raw={"id": "5012"}, step="extend", extended=True, long_text="全文")),
    (XhsSpider, XhsChain(post_id="n1", raw={"card": {}}, read={"note": {"title": "t"}})),
    (DouyinSpider, DouyinChain(post_id="73", raw={"aweme": "73", "short": "x"}, detail={"aweme_detail": {}})),
    (FacebookSpider, FacebookChain(post_id="1_2", raw={"id": "1_2"}, tried=["v1"], sources={"v1": ["u", 3.5]})),
    (BilibiliSpider, BilibiliChain(post_id="BV1", raw={"bvid": "BV1"}, cids=["7", "8"], aid=170001, tried=["7"],
                                   streams={"7": [{"url": "u", "kind": "video"}]}, stream_errors={"8": "e"})),
])
def test_each_platforms_chain_is_typed_and_survives_json(spidercls: Any, chain: Chain) -> None:
    assert spidercls.chain_type is type(chain)
    encoded = json.dumps(chain.to_json())  # plain JSON: what meta, JOBDIR and the shared queue hold
    assert type(chain).from_json(json.loads(encoded)) == chain
    fresh = type(chain)(post_id="p", raw={})
    assert fresh.step is None and type(chain).from_json(fresh.to_json()) == fresh
    # A field another version wrote is ignored; a field it lacks takes its default.
    assert type(chain).from_json({**fresh.to_json(), "unknown": 1}) == fresh
    assert {f.name for f in dataclasses.fields(chain)} >= {"post_id", "raw", "step"}


def test_a_bilibili_chain_of_an_older_version_without_aid_still_reads() -> None:
    old = BilibiliChain(post_id="BV1", raw={}, cids=["7"], aid=5).to_json()
    del old["aid"]
    assert BilibiliChain.from_json(old).aid is None
