"""CheckpointExtension, CheckpointSkipPipeline, SyncedFileFeedStorage and ``mediacrawler checkpoints`` on a fake
crawler: handlers are called directly, in the order a crawl sends the signals."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from scrapy import Spider
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.request import request_from_dict
from scrapy.utils.test import get_crawler

from mediacrawler.checkpoints.model import SCHEMA_VERSION, Checkpoint
from mediacrawler.checkpoints.store import FileCheckpointStore, scan_feed_tail, write_json_atomic
from mediacrawler.commands import checkpoints as ckmod
from mediacrawler.contracts import AlreadyStored
from mediacrawler.extensions.checkpoint import CheckpointExtension
from mediacrawler.feeds import FeedMark, SyncedFileFeedStorage, repair_torn_tail, sync_feeds
from mediacrawler.pipelines.checkpoint import CheckpointSkipPipeline
from mediacrawler.items import Post, Source
from mediacrawler.contracts import Resume
from mediacrawler.spiders.weibo import WeiboSpider

KEY = "weibo-uid-7365120894"
EXT = "mediacrawler.extensions.checkpoint.CheckpointExtension"


class _NoLater:
    """Stands in for CallLaterOnce: tests commit explicitly, no reactor needed."""

    def __init__(self) -> None:
        self.scheduled = 0

    def schedule(self, delay: float = 0) -> None:
        self.scheduled += 1

    def cancel(self) -> None:
        pass


def make(tmp_path: Path, settings: dict[str, Any] | None = None, **spider_args: Any
         ) -> tuple[CheckpointExtension, WeiboSpider]:
    values = {"CHECKPOINT_DIR": str(tmp_path / "checkpoints"), "EXTENSIONS": {EXT: 500}, **(settings or {})}
    crawler = get_crawler(WeiboSpider, values)
    spider = WeiboSpider.from_crawler(crawler, uid="7365120894", **spider_args)
    crawler.spider = spider
    ext = build_from_crawler(CheckpointExtension, crawler)
    ext._commit_later = _NoLater()  # type: ignore[assignment]
    # The pipeline finds the extension among the crawler's extensions, as in a real crawl.
    crawler.extensions.middlewares = (ext,)
    return ext, spider


def post(post_id: str, page: int, job: str = KEY) -> Post:
    return Post(platform="weibo", post_id=post_id, url=f"https://weibo.com/1/{post_id}", author=None,
                created_at=None, source=Source(spider="weibo", job=job, page=page))


def parsed(ext: CheckpointExtension, spider: Spider, page: int, ids: list[str], *, is_last: bool = False,
           next_cursor: str | None = None) -> None:
    ext.page_parsed(spider=spider, page=page, cursor=None, next_cursor=next_cursor, post_ids=ids, is_last=is_last)


def scraped(ext: CheckpointExtension, spider: Spider, page: int, *ids: str) -> None:
    for i in ids:
        ext.item_scraped(item=post(i, page), spider=spider)


def on_disk(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "checkpoints" / f"{KEY}.json").read_text("utf-8"))


def write_checkpoint(tmp_path: Path, **fields: Any) -> Path:
    cp = Checkpoint(key=KEY, spider="weibo", **fields)
    store = FileCheckpointStore(tmp_path / "checkpoints")
    store.save(cp)
    return store.path(KEY)


# --- Configuration -----------------------------------------------------------------------------------------------


def test_disabled_raises_not_configured(tmp_path: Path) -> None:
    crawler = get_crawler(WeiboSpider, {"CHECKPOINT_ENABLED": False})
    with pytest.raises(NotConfigured, match="CHECKPOINT_ENABLED"):
        build_from_crawler(CheckpointExtension, crawler)
    with pytest.raises(NotConfigured):
        build_from_crawler(CheckpointSkipPipeline, crawler)


@pytest.mark.parametrize(("backend", "message"), [("redis", "needs REDIS_URL"), ("nosuch", "neither")])
def test_unknown_backend_raises_not_configured(backend: str, message: str) -> None:
    crawler = get_crawler(WeiboSpider, {"CHECKPOINT_BACKEND": backend})
    with pytest.raises(NotConfigured, match=message):
        build_from_crawler(CheckpointExtension, crawler)


def test_not_a_platform_spider_is_left_alone(tmp_path: Path) -> None:
    crawler = get_crawler(Spider, {"CHECKPOINT_DIR": str(tmp_path)})
    spider = Spider.from_crawler(crawler, name="plain")
    ext = build_from_crawler(CheckpointExtension, crawler)
    ext.spider_opened(spider)
    ext.item_scraped(item=post("1", 1), spider=spider)
    ext.spider_closed(spider, "finished")
    assert ext.checkpoint is None
    assert list(tmp_path.iterdir()) == []


# --- The watermark -----------------------------------------------------------------------------------------------


def test_fresh_start_has_no_resume_and_writes_the_watermark(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    assert spider.job_state.resume is None
    assert spider.first_page() == (1, None)
    parsed(ext, spider, 1, ["a", "b"], next_cursor="c2")
    scraped(ext, spider, 1, "a", "b")
    ext.commit()
    data = on_disk(tmp_path)
    assert data["schema"] == SCHEMA_VERSION
    assert data["key"] == KEY and data["spider"] == "weibo"
    assert data["watermark"] == 1
    assert data["next"] == {"page": 2, "cursor": "c2"}
    assert data["stored"] == {}
    # Only plain progress data: never a cookie, a token or a URL.
    assert set(data) == {"schema", "key", "spider", "watermark", "next", "stored", "failed_pages", "last_page",
                         "feeds", "seq", "updated_at"}


def test_watermark_waits_for_every_item_of_the_page(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a", "b", "long"])
    scraped(ext, spider, 1, "a")
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 0
    assert on_disk(tmp_path)["stored"] == {"1": ["a"]}
    ext.item_dropped(item=post("b", 1), spider=spider, exception=DropItem("invalid"))
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 0
    assert on_disk(tmp_path)["stored"] == {"1": ["a"]}  # a dropped post is not stored
    scraped(ext, spider, 1, "long")  # the long-text post arrives last
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 1
    assert on_disk(tmp_path)["stored"] == {}


def test_pages_completing_out_of_order(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a", "long1"])
    scraped(ext, spider, 1, "a")
    parsed(ext, spider, 2, ["b", "c"], next_cursor="c3")
    scraped(ext, spider, 2, "b", "c")
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 0
    assert on_disk(tmp_path)["stored"] == {"1": ["a"], "2": ["b", "c"]}
    scraped(ext, spider, 1, "long1")
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 2
    assert on_disk(tmp_path)["next"] == {"page": 3, "cursor": "c3"}


def test_empty_page_and_duplicate_ids_within_a_page(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, [])
    parsed(ext, spider, 2, ["a", "a"])  # listed twice: two items, the dedupe pipeline drops one
    scraped(ext, spider, 2, "a")
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 1
    ext.item_dropped(item=post("a", 2), spider=spider, exception=DropItem("duplicate"))
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 2


def test_a_failed_page_pins_the_watermark(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"])
    scraped(ext, spider, 1, "a")
    ext.page_failed(spider=spider, page=2, cursor=None, reason="HTTP 503")
    parsed(ext, spider, 3, ["c"], is_last=True)
    scraped(ext, spider, 3, "c")
    ext.spider_closed(spider, "finished")
    data = on_disk(tmp_path)
    assert data["watermark"] == 1 and data["next"]["page"] == 2
    assert data["failed_pages"] == [2]
    assert data["stored"] == {"3": ["c"]}


def test_an_item_error_pins_its_page(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a", "b"], is_last=True)
    scraped(ext, spider, 1, "a")
    ext.item_error(item=post("b", 1), spider=spider, failure=None)
    ext.spider_closed(spider, "finished")
    data = on_disk(tmp_path)
    assert data["watermark"] == 0 and data["failed_pages"] == [1]


def test_items_of_other_jobs_and_unknown_pages_are_ignored(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"])
    ext.item_scraped(item=post("a", 1, job="weibo-uid-1"), spider=spider)
    ext.item_scraped(item=post("z", 7), spider=spider)
    ext.item_scraped(item={"not": "a post"}, spider=spider)
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 0


# --- The end of a run --------------------------------------------------------------------------------------------


def test_finished_and_completed_clears_the_checkpoint(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"])
    scraped(ext, spider, 1, "a")
    ext.commit()
    assert (tmp_path / "checkpoints" / f"{KEY}.json").exists()
    parsed(ext, spider, 2, ["b"], is_last=True)
    scraped(ext, spider, 2, "b")
    ext.spider_closed(spider, "finished")
    assert not (tmp_path / "checkpoints" / f"{KEY}.json").exists()
    assert ext.stats.get_value("checkpoint/cleared") is True


@pytest.mark.parametrize("reason", ["shutdown", "closespider_pagecount", "closespider_errorcount", "cancelled"])
def test_any_other_reason_keeps_the_checkpoint(tmp_path: Path, reason: str) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"])
    scraped(ext, spider, 1, "a")
    parsed(ext, spider, 2, ["b"], is_last=True)
    scraped(ext, spider, 2, "b")
    ext.spider_closed(spider, reason)
    assert on_disk(tmp_path)["watermark"] == 2


def test_finished_without_reaching_the_last_page_keeps_it(tmp_path: Path) -> None:
    # e.g. -a max_pages=N, or too many failed pages in a row: "finished", but the source is not done.
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"])
    scraped(ext, spider, 1, "a")
    ext.spider_closed(spider, "finished")
    assert on_disk(tmp_path)["next"]["page"] == 2


# --- Start: -a start, reset, resume, corrupt --------------------------------------------------------------------


def test_resume_from_checkpoint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_checkpoint(tmp_path, watermark=20, next_page=21, next_cursor="c21", stored={21: ["x", "y"]})
    ext, spider = make(tmp_path)
    with caplog.at_level(logging.INFO, logger="mediacrawler.extensions.checkpoint"):
        ext.spider_opened(spider)
    assert spider.job_state.resume == Resume(page=21, cursor="c21")
    assert spider.first_page() == (21, "c21")
    assert ext.skip_ids == {"x", "y"}
    lines = [r.getMessage() for r in caplog.records if "resuming" in r.getMessage()]
    assert len(lines) == 1 and "page 21" in lines[0] and "2 posts" in lines[0]


def test_explicit_start_overrides_the_checkpoint(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, watermark=20, next_page=21, stored={21: ["x"]})
    ext, spider = make(tmp_path, start="5")
    ext.spider_opened(spider)
    assert spider.first_page() == (5, None)
    assert ext.skip_ids == frozenset()
    parsed(ext, spider, 5, ["a"])
    scraped(ext, spider, 5, "a")
    ext.commit()
    assert on_disk(tmp_path)["watermark"] == 5


def test_reset_deletes_the_checkpoint(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path, watermark=20, next_page=21)
    ext, spider = make(tmp_path, reset_checkpoint="true")
    ext.spider_opened(spider)
    assert not path.exists()
    assert spider.job_state.resume is None and spider.first_page() == (1, None)


@pytest.mark.parametrize(
    "content",
    [
        b'{"schema": 1, "key": "weibo-uid-7365120894", "spider": "we',  # truncated
        b"",
        b"\x00\x00\x00",
        b'{"schema": 99, "key": "weibo-uid-7365120894"}',
        b'{"schema": 1, "key": "weibo-uid-1", "spider": "weibo", "watermark": 1, "next": {"page": 2}, "stored": {}}',
        b'{"schema": 1, "key": "weibo-uid-7365120894", "spider": "weibo", "watermark": 3, "next": {"page": 9},'
        b' "stored": {}}',
    ],
)
def test_corrupt_checkpoint_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
                                           ) -> None:
    path = tmp_path / "checkpoints" / f"{KEY}.json"
    path.parent.mkdir()
    path.write_bytes(content)
    ext, spider = make(tmp_path)
    with caplog.at_level(logging.WARNING, logger="mediacrawler.extensions.checkpoint"):
        ext.spider_opened(spider)
    assert not path.exists()
    assert (path.parent / f"{KEY}.json.corrupt").read_bytes() == content
    assert spider.job_state.resume is None and spider.first_page() == (1, None)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "moved aside" in warnings[0].getMessage()


def test_second_corrupt_file_gets_its_own_name(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    for n in range(2):
        store.path(KEY).write_text("{", "utf-8")
        store.quarantine(KEY)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{KEY}.json.corrupt", f"{KEY}.json.corrupt.2"]


def test_resume_keeps_the_stored_list_until_the_watermark_passes(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, watermark=2, next_page=3, stored={3: ["x"], 4: ["y"]})
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    assert on_disk(tmp_path)["stored"] == {"3": ["x"], "4": ["y"]}
    parsed(ext, spider, 3, ["x", "z"])
    ext.item_dropped(item=post("x", 3), spider=spider, exception=AlreadyStored("stored"))
    scraped(ext, spider, 3, "z")
    ext.commit()
    data = on_disk(tmp_path)
    assert data["watermark"] == 3
    assert data["stored"] == {"4": ["y"]}


# --- Item-level safety: the skip pipeline ------------------------------------------------------------------------


def test_skip_pipeline_drops_posts_stored_before_the_stop(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, watermark=2, next_page=3, stored={3: ["x"]})
    ext, spider = make(tmp_path)
    pipeline = build_from_crawler(CheckpointSkipPipeline, ext.crawler)
    assert ext.skip_pipeline
    ext.spider_opened(spider)
    with pytest.raises(AlreadyStored):
        pipeline.process_item(post("x", 3))
    item = post("new", 3)
    assert pipeline.process_item(item) is item
    assert ext.stats.get_value("checkpoint/skipped_stored") == 1


def test_skip_pipeline_needs_the_extension() -> None:
    crawler = get_crawler(WeiboSpider, {})
    with pytest.raises(NotConfigured, match="extension"):
        build_from_crawler(CheckpointSkipPipeline, crawler)


def test_resume_recognises_records_written_after_the_last_checkpoint(tmp_path: Path) -> None:
    feed = tmp_path / "out.jsonl"
    before = json.dumps({"post_id": "old", "source": {"job": KEY, "page": 3}}) + "\n"
    after = [
        json.dumps({"post_id": "late", "source": {"job": KEY, "page": 3}}),
        json.dumps({"post_id": "other-job", "source": {"job": "weibo-uid-1", "page": 3}}),
        '{"post_id": "torn", "sou',
    ]
    feed.write_text(before + after[0] + "\n" + after[1] + "\n" + after[2], "utf-8")
    write_checkpoint(tmp_path, watermark=2, next_page=3, stored={3: ["old"]},
                     feeds=[FeedMark(str(feed), len(before.encode()))])
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    assert ext.skip_ids == {"old", "late"}
    assert feed.read_text("utf-8").endswith("\n")  # the torn record was cut
    assert on_disk(tmp_path)["stored"] == {"3": ["late", "old"]}


def test_scan_feed_tail_reads_a_rewritten_file_whole(tmp_path: Path) -> None:
    feed = tmp_path / "out.jsonl"
    feed.write_text(json.dumps({"post_id": "a", "source": {"job": KEY, "page": 4}}) + "\n", "utf-8")
    assert scan_feed_tail(FeedMark(str(feed), 10_000), KEY) == {4: {"a"}}
    assert scan_feed_tail(FeedMark(str(tmp_path / "missing.jsonl"), 0), KEY) == {}


# --- Feeds are durable before the checkpoint advances -------------------------------------------------------------


def test_commit_flushes_and_fsyncs_open_feeds_first(tmp_path: Path) -> None:
    feed = tmp_path / "out" / "feed.jsonl"
    ext, spider = make(tmp_path)
    storage = build_from_crawler(SyncedFileFeedStorage, ext.crawler, str(feed),
                                 feed_options={"format": "jsonlines"})
    f = storage.open(spider)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"])
    f.write(b'{"post_id": "a"}\n')  # still in the file object's buffer
    assert feed.read_bytes() == b""
    scraped(ext, spider, 1, "a")
    ext.commit()
    assert feed.read_bytes() == b'{"post_id": "a"}\n'
    assert on_disk(tmp_path)["feeds"] == [{"path": str(feed.resolve()), "size": 17}]
    storage.store(f)
    assert f.closed
    assert sync_feeds(ext.crawler) == [FeedMark(str(feed.resolve()), 17)]


def test_storage_cuts_a_torn_record_before_appending(tmp_path: Path) -> None:
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b'{"a": 1}\n{"b": ')
    crawler = get_crawler(WeiboSpider, {})
    storage = build_from_crawler(SyncedFileFeedStorage, crawler, f"file://{feed}",
                                 feed_options={"format": "jsonlines"})
    f = storage.open(None)  # type: ignore[arg-type]
    f.write(b'{"c": 3}\n')
    storage.store(f)
    assert feed.read_bytes() == b'{"a": 1}\n{"c": 3}\n'


def test_repair_torn_tail(tmp_path: Path) -> None:
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"no newline at all")
    assert repair_torn_tail(p) == 17 and p.read_bytes() == b""
    p.write_bytes(b"x\n" + b"y" * 200_000)
    assert repair_torn_tail(p) == 200_000 and p.read_bytes() == b"x\n"
    assert repair_torn_tail(p) == 0
    assert repair_torn_tail(tmp_path / "missing") == 0


def test_unsynced_feed_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ext, spider = make(tmp_path, {"FEEDS": {"s3://bucket/x.jsonl": {"format": "jsonlines"},
                                            str(tmp_path / "ok.jsonl"): {"format": "jsonlines"}},
                                  "FEED_STORAGES": {"": "mediacrawler.feeds.SyncedFileFeedStorage",
                                                    "file": "mediacrawler.feeds.SyncedFileFeedStorage"}})
    with caplog.at_level(logging.WARNING, logger="mediacrawler.extensions.checkpoint"):
        ext.spider_opened(spider)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "s3://bucket/x.jsonl" in warnings[0]


# --- Atomic writes and the store ---------------------------------------------------------------------------------


def test_write_json_atomic_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "a.json"
    for n in range(3):
        write_json_atomic(target, {"n": n})
    assert json.loads(target.read_text("utf-8")) == {"n": 2}
    assert [p.name for p in target.parent.iterdir()] == ["a.json"]


def test_stale_temp_files_are_removed_at_open(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    (directory / f".{KEY}.json.abc123.tmp").write_text("{", "utf-8")
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    assert list(directory.iterdir()) == []


def test_checkpoint_round_trip_and_seq_grows(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"])
    ext.commit()
    scraped(ext, spider, 1, "a")
    ext.commit()
    store = FileCheckpointStore(tmp_path / "checkpoints")
    cp = store.load(KEY)
    assert cp is not None and cp.seq == 2 and cp.watermark == 1
    assert Checkpoint.from_dict(cp.to_dict()) == cp


@pytest.mark.parametrize("key", ["../etc/passwd", ".hidden", "a/b", "", "x.json"])
def test_invalid_keys_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(ValueError):
        FileCheckpointStore(tmp_path).path(key)


# --- JOBDIR: every request the spider makes survives serialization -----------------------------------------------


def test_listing_and_long_text_requests_are_serializable(tmp_path: Path) -> None:
    _, spider = make(tmp_path, {"WEIBO_BASE_URL": "http://127.0.0.1:1/weibo"})
    source = Source(spider="weibo", job=KEY, page=3, cursor="c")
    requests = [spider.listing_request(3, "c"),
                spider.start_chain("5012", {"id": "5012", "isLongText": True, "text": "x"}, source)]
    for request in requests:
        assert request is not None
        data = request.to_dict(spider=spider)
        json.dumps(data["meta"])  # plain data only
        back = request_from_dict(data, spider=spider)
        assert back.callback == request.callback and back.errback == request.errback
        assert back.meta == request.meta


# --- mediacrawler checkpoints ------------------------------------------------------------------------------------


def test_cli_list_show_reset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = str(tmp_path / "checkpoints")
    assert ckmod.main(["--dir", directory, "list"]) == 0
    assert "no checkpoints" in capsys.readouterr().err
    write_checkpoint(tmp_path, watermark=20, next_page=21, next_cursor="c", stored={21: ["x"]})
    assert ckmod.main(["--dir", directory]) == 0
    out = capsys.readouterr().out
    assert KEY in out and "next page 21" in out
    assert ckmod.main(["--dir", directory, "show", KEY]) == 0
    assert json.loads(capsys.readouterr().out)["next"] == {"page": 21, "cursor": "c"}
    assert ckmod.main(["--dir", directory, "show", "weibo-uid-1"]) == 1
    assert ckmod.main(["--dir", directory, "show", "../x"]) == 2
    assert ckmod.main(["--dir", directory, "reset", KEY]) == 0
    assert "deleted" in capsys.readouterr().out
    assert ckmod.main(["--dir", directory, "reset", KEY]) == 1
    assert ckmod.main(["--dir", directory, "frobnicate"]) == 2


def test_cli_lists_an_items_checkpoint_by_its_items(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "checkpoints"
    key = "bilibili-bvid-BV1-BV2-BV3"
    FileCheckpointStore(directory).save(Checkpoint(key=key, spider="bilibili", kind="items", done=["BV1", "BV3"],
                                                   failed_items=["BV2"]))
    assert ckmod.main(["--dir", str(directory)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(key))
    assert "items: 2 done failed=BV2" in line and "page" not in line
    assert ckmod.main(["--dir", str(directory), "show", key]) == 0
    assert json.loads(capsys.readouterr().out)["done"] == ["BV1", "BV3"]


def test_cli_flags_unreadable_checkpoints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / f"{KEY}.json").write_text("{", "utf-8")
    assert ckmod.main(["--dir", str(tmp_path), "list"]) == 1
    assert "UNREADABLE" in capsys.readouterr().out
    assert ckmod.main(["--dir", str(tmp_path), "show", KEY]) == 1


def test_cli_reads_checkpoint_dir_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    write_checkpoint(tmp_path, watermark=1, next_page=2)
    monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", "mediacrawler.settings")
    monkeypatch.chdir(tmp_path)  # CHECKPOINT_DIR defaults to "checkpoints", relative to the working directory
    assert ckmod.main(["list"]) == 0
    assert KEY in capsys.readouterr().out


# --- One consistent state with the high-water mark (issue #20) ----------------------------------------------------


def test_a_cleared_checkpoint_is_not_written_back_by_a_feed_opened_at_close(tmp_path: Path) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, [], is_last=True)  # the page at the mark: all its posts at or below it
    ext.spider_closed(spider, "finished")
    path = tmp_path / "checkpoints" / f"{KEY}.json"
    assert not path.exists()
    ext.feed_opened(path=str(tmp_path / "empty.jsonl"), size=0)  # the empty export, created after
    assert not path.exists()


def test_a_checkpoint_of_a_completed_run_is_deleted_not_resumed(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    path = write_checkpoint(tmp_path, watermark=1, next_page=2, last_page=1)
    ext, spider = make(tmp_path)
    with caplog.at_level(logging.INFO):
        ext.spider_opened(spider)
    assert spider.job_state.resume is None and spider.first_page() == (1, None) and not path.exists()
    assert f"{KEY}: checkpoint {path} is of a completed run (page 1 of 1); deleted, not resumed" in caplog.text
