"""mediacrawler.exporters writes the same bytes as Scrapy's own JSON exporters (ItemAdapter's path), for rich posts:
reposts (of deleted originals too), media with results and renditions, extra, non-ASCII text, values the JSON encoder
converts (sets, datetimes, decimals); and falls back to Scrapy's path where it must."""

from __future__ import annotations

import dataclasses
import decimal
import io
from datetime import UTC, datetime
from typing import Any

import pytest
from scrapy.exporters import JsonItemExporter, JsonLinesItemExporter

from mediacrawler.exporters import JsonExporter, JsonLinesExporter
from mediacrawler.items import Author, MediaAsset, Metrics, Post, Source, as_plain
from mediacrawler.parsers import weibo as parser
from mediacrawler_sandbox.weibo import build_weibo_world
from mediacrawler_sandbox.weibo_api import timeline_response

UID = 7365120894


def sandbox_posts() -> list[Post]:
    """Two pages of the sandbox timeline through the real parser: every kind of Weibo post (pics, video, long text,
    reposts, a deleted original, link cards)."""
    world = build_weibo_world(users=(UID,), pages=2, per_page=20)
    posts: list[Post] = []
    for page in (1, 2):
        payload = timeline_response(world, parser.timeline_containerid(str(UID)), UID, page=page, since_id=None,
                                    base="http://127.0.0.1:1/weibo")
        result = parser.parse_index(payload, source=Source("weibo", f"weibo-uid-{UID}", page, None),
                                    fetched_at="2026-11-30T00:00:00Z", expand_long_text=False)
        posts += result.posts
    return posts


def with_results(post: Post, n: int) -> Post:
    """The media pipeline's results on every other asset, a failure on the rest, and some odd extras."""
    for i, asset in enumerate(post.media):
        if (i + n) % 2:
            asset.sha256, asset.path, asset.size = f"{n:02x}" * 32, f"objects/ab/cd/{n}.jpg", 1000 + n
            asset.mime, asset.status, asset.width, asset.height = "image/jpeg", "downloaded", 640, 480
            asset.rendition = {"height": 720, "codecs": "avc1.64001f", "bandwidth": 1_500_000, "hdr": None}
        else:
            asset.status, asset.error = "failed", "too-large"
    post.extra = {**post.extra, "nested": {"list": [1, 2.5, None, True, "é"], "empty": {}}, "emoji": "猫😀",
                  "quote": 'a "b" \\ c\n', "n": n}
    return post


def rich_posts() -> list[Post]:
    posts = [with_results(p, n) for n, p in enumerate(sandbox_posts())]
    original = Post(platform="weibo", post_id="1", url="https://m.weibo.cn/detail/1", author=None, created_at=None,
                    deleted=True, extra={"deleted_reason": "已删除"})
    posts.append(Post(
        platform="weibo", post_id="2", url="https://m.weibo.cn/detail/2", author=Author("9", "名字"),
        created_at="2026-11-30T01:02:03Z", text="转发 \u2028 line separator", metrics=Metrics(1, 0, None, 10**12),
        reposted=original,
        media=[MediaAsset(kind="video", key="v", url="https://x.invalid/v.m3u8", manifest="hls", duration=12.5,
                          renditions=[{"kind": "video", "url": "https://x.invalid/720.mp4", "height": 720}])],
        source=Source("weibo", "weibo-uid-2", 3, "cursor-é"),
        # Not plain JSON, but what the encoder converts either way.
        extra={"tags": {"b"}, "when": datetime(2026, 11, 30, tzinfo=UTC), "price": decimal.Decimal("1.50")},
    ))
    return posts


def export(exporter_cls: type, items: list[Any], **kwargs: Any) -> bytes:
    out = io.BytesIO()
    exporter = exporter_cls(out, **kwargs)
    exporter.start_exporting()
    for item in items:
        exporter.export_item(item)
    exporter.finish_exporting()
    return out.getvalue()


OPTIONS = [{"encoding": "utf-8"}, {}, {"encoding": "utf-8", "indent": 2},
           {"encoding": "utf-8", "export_empty_fields": True}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "none")
@pytest.mark.parametrize(("ours", "stock"), [(JsonLinesExporter, JsonLinesItemExporter),
                                             (JsonExporter, JsonItemExporter)], ids=["jsonlines", "json"])
def test_same_bytes_as_itemadapter(ours: type, stock: type, options: dict[str, Any]) -> None:
    posts = rich_posts()
    assert len(posts) == 41
    assert sum(p.reposted is not None for p in posts) >= 8 and any(p.reposted and p.reposted.deleted for p in posts)
    assert sum(a.sha256 is not None for p in posts for a in p.media) >= 20
    expected = export(stock, posts, **options)
    assert export(ours, posts, **options) == expected
    assert len(expected) > 20_000


def test_other_items_and_field_lists_take_scrapys_path() -> None:
    items: list[Any] = [{"a": 1, "post": rich_posts()[-1]}, rich_posts()[0]]
    assert export(JsonLinesExporter, items, encoding="utf-8") == export(JsonLinesItemExporter, items,
                                                                         encoding="utf-8")
    fields = {"fields_to_export": ["post_id", "media"], "encoding": "utf-8"}
    assert export(JsonLinesExporter, items[1:], **fields) == export(JsonLinesItemExporter, items[1:], **fields)


@dataclasses.dataclass
class WithSerializer:
    name: str = dataclasses.field(default="x", metadata={"serializer": str.upper})


def test_as_plain_is_dataclasses_asdict() -> None:
    """The records pipeline's conversion (items.as_plain) gives what dataclasses.asdict gives, nothing shared that
    the record could change through."""
    posts = rich_posts()
    plain = [as_plain(p) for p in posts]
    assert plain == [dataclasses.asdict(p) for p in posts]
    assert plain[0]["media"] is not posts[0].media and plain[0]["extra"] is not posts[0].extra
    assert as_plain({"t": (1, Author("1"))}) == {"t": [1, {"id": "1", "name": None}]}


def test_a_field_serializer_is_applied() -> None:
    assert export(JsonLinesExporter, [WithSerializer()], encoding="utf-8") == b'{"name": "X"}\n'


def test_wired_in_settings() -> None:
    from mediacrawler import settings

    assert settings.FEED_EXPORTERS == {"jsonlines": "mediacrawler.exporters.JsonLinesExporter",
                                       "jsonl": "mediacrawler.exporters.JsonLinesExporter",
                                       "jl": "mediacrawler.exporters.JsonLinesExporter",
                                       "json": "mediacrawler.exporters.JsonExporter",
                                       "csv": "mediacrawler.exporters.CsvExporter"}
