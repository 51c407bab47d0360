"""CSV that opens: the ``csv`` feed exporter (``-O posts.csv``) and ``mediacrawler export``, read back with the csv
module (mediacrawler/exporters.py, mediacrawler/commands/export.py)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from scrapy.utils.misc import build_from_crawler

from mediacrawler.commands.export import main as export_main
from mediacrawler.exporters import COMMENT_COLUMNS, MEDIA_COLUMNS, POST_COLUMNS, CsvExporter, JsonLinesExporter
from mediacrawler.items import Author, Comment, MediaAsset, Metrics, Post, Source
from mediacrawler.records.rows import Rows, add_record
from mediacrawler.records.store import open_store
from tests.utils import project_crawler

HOSTILE_TEXT = '第一行, "引号"\n第二行 😀 =1+1\r\n'


def post(post_id: str, *, likes: int | None = 5, job: str = "weibo-uid-1", created: str = "2026-03-04T05:06:07Z",
         fetched: str = "2026-11-01T00:00:00Z", platform: str = "weibo", **kw: Any) -> Post:
    media = [MediaAsset(kind="video", key="v", url="https://cdn.example/v.mp4", status="failed", error="http-404"),
             MediaAsset(kind="image", key="c", url="https://cdn.example/c.jpg", cover_of="v", status="downloaded",
                        sha256="a" * 64, path=f"objects/aa/aa/{'a' * 64}.jpg", size=3),
             MediaAsset(kind="image", key="p", url="https://cdn.example/p.jpg", status="uptodate",
                        sha256="b" * 64, path=f"objects/bb/bb/{'b' * 64}.jpg", size=4)]
    return Post(platform=platform, post_id=post_id, url=f"https://m.weibo.cn/detail/{post_id}",
                author=Author(id="42", name="猫, \"咪\""), created_at=created, text=HOSTILE_TEXT,
                metrics=Metrics(likes=likes, comments=0, shares=None, views=1_000_000_000_000), media=media,
                source=Source(spider=platform, job=job, page=1), fetched_at=fetched, **kw)


def comment(comment_id: str, post_id: str) -> Comment:
    return Comment(platform="weibo", comment_id=comment_id, post_id=post_id, parent_id=None, root_id=comment_id,
                   author=Author(id="9", name="评论者"), text="好,看", created_at="2026-03-05T00:00:00Z",
                   media=[MediaAsset(kind="image", key="m", url="https://cdn.example/m.jpg", status="downloaded",
                                     sha256="c" * 64, path=f"objects/cc/cc/{'c' * 64}.jpg", size=5)],
                   source=Source(spider="weibo", job="weibo-uid-1"))


def read_csv(data: bytes) -> list[dict[str, str]]:
    assert data.startswith(b"\xef\xbb\xbf") and data.count(b"\xef\xbb\xbf") == 1
    return list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")))


def export_items(tmp_path: Path, items: list[Any], **kwargs: Any) -> bytes:
    crawler = project_crawler(FILES_STORE=str(tmp_path / "files"))
    buf = io.BytesIO()
    exporter = build_from_crawler(CsvExporter, crawler, buf, **kwargs)
    exporter.start_exporting()
    for item in items:
        exporter.export_item(item)
    exporter.finish_exporting()
    return buf.getvalue()


def test_the_csv_feed_writes_flat_columns_with_the_values(tmp_path: Path) -> None:
    rows = read_csv(export_items(tmp_path, [post("1"), comment("c1", "1"), post("2", likes=None)]))
    assert [r["post_id"] for r in rows] == ["1", "2"]  # a comment is no post row
    first = rows[0]
    assert list(first) == list(POST_COLUMNS)
    assert first["text"] == HOSTILE_TEXT and first["author_name"] == '猫, "咪"' and first["author_id"] == "42"
    assert (first["likes"], first["comments"], first["reposts"], first["views"]) == ("5", "0", "", "1000000000000")
    assert rows[1]["likes"] == ""
    folder = "weibo/猫, ＂咪＂ (42)/2026-03-04 1"
    assert first["media_count"] == "3" and first["media_stored"] == "2"
    assert first["first_image"] == f"{folder}/02 image.jpg"  # not the cover
    assert first["media_paths"].split("|") == [f"{folder}/01 cover.jpg", f"{folder}/02 image.jpg"]
    assert first["media_urls"].split("|")[0] == "https://cdn.example/v.mp4"
    assert first["deleted"] == "false" and first["job"] == "weibo-uid-1" and first["reposted_post_id"] == ""
    assert not any("(" in v and ("Author(" in v or "MediaAsset(" in v) for r in rows for v in r.values())


def test_comment_and_media_feeds_and_the_store_paths_without_a_library(tmp_path: Path) -> None:
    comments = read_csv(export_items(tmp_path, [post("1"), comment("c1", "1")], kind="comments"))
    assert [list(r) for r in comments] == [list(COMMENT_COLUMNS)]
    assert comments[0]["text"] == "好,看" and comments[0]["author_name"] == "评论者"
    assert comments[0]["media_paths"] == "weibo/猫, ＂咪＂ (42)/2026-03-04 1/comments/c1 01 image.jpg"
    media = read_csv(export_items(tmp_path, [post("1")], kind="media"))
    assert [list(r) for r in media][0] == list(MEDIA_COLUMNS)
    assert [(r["number"], r["kind"], r["status"], r["library_path"] != "") for r in media] == [
        ("1", "video", "failed", False), ("2", "image", "downloaded", True), ("3", "image", "uptodate", True)]
    with pytest.raises(ValueError):
        export_items(tmp_path, [], kind="nope")
    crawler = project_crawler(LIBRARY_ENABLED=False)
    buf = io.BytesIO()
    exporter = build_from_crawler(CsvExporter, crawler, buf)
    exporter.start_exporting()
    exporter.export_item(post("1"))
    [row] = read_csv(buf.getvalue())
    assert row["first_image"] == f"objects/bb/bb/{'b' * 64}.jpg"


def test_feed_fields_pick_and_order_the_columns(tmp_path: Path) -> None:
    rows = read_csv(export_items(tmp_path, [post("1")], fields_to_export=["likes", "post_id"]))
    assert rows == [{"likes": "5", "post_id": "1"}]
    with pytest.raises(ValueError, match="author"):
        export_items(tmp_path, [], fields_to_export=["author"])


def test_an_appended_csv_gets_no_second_header(tmp_path: Path) -> None:
    path = tmp_path / "posts.csv"
    for post_id in ("1", "2"):
        with path.open("ab") as f:
            crawler = project_crawler(FILES_STORE=str(tmp_path / "files"))
            exporter = build_from_crawler(CsvExporter, crawler, f)
            exporter.start_exporting()
            exporter.export_item(post(post_id))
            exporter.finish_exporting()
    assert [r["post_id"] for r in read_csv(path.read_bytes())] == ["1", "2"]


def write_jsonl(path: Path, items: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        exporter = JsonLinesExporter(f)
        for item in items:
            exporter.export_item(item)


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    out = tmp_path / "output"
    write_jsonl(out / "weibo" / "weibo-uid-1.jsonl",
                [post("1", likes=5), post("2", created="2025-01-01T00:00:00Z"), comment("c1", "1")])
    # A later run saw post 1 again with more likes: the export shows its latest record, once.
    write_jsonl(out / "weibo" / "weibo-uid-1.jsonl", [post("1", likes=50, fetched="2026-11-02T00:00:00Z")])
    write_jsonl(out / "bilibili" / "bilibili-mid-2.jsonl",
                [post("BV1", platform="bilibili", job="bilibili-mid-2")])
    (out / "weibo" / "broken.jsonl").write_bytes(b'{"platform": "weibo", "post_id": \n[[[[\n')
    return out


def run_export(tmp_path: Path, outputs: Path, *args: str) -> tuple[int, bytes]:
    dest = tmp_path / "export.out"
    code = export_main(["--out", str(dest), "-s", f"OUTPUT_DIR={outputs}",
                        "-s", f"FILES_STORE={tmp_path / 'files'}",
                        "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
                        *args])
    return code, dest.read_bytes() if dest.exists() else b""


def test_without_a_database_export_reads_the_json_lines_outputs(tmp_path: Path, outputs: Path) -> None:
    code, data = run_export(tmp_path, outputs, "--format", "csv")
    assert code == 0
    rows = {(r["platform"], r["post_id"]): r for r in read_csv(data)}
    assert set(rows) == {("weibo", "1"), ("weibo", "2"), ("bilibili", "BV1")}
    assert rows[("weibo", "1")]["likes"] == "50" and rows[("weibo", "1")]["text"] == HOSTILE_TEXT
    code, data = run_export(tmp_path, outputs, "--platform", "weibo", "--since", "2026-01-01")
    assert code == 0 and [r["post_id"] for r in read_csv(data)] == ["1"]
    code, data = run_export(tmp_path, outputs, "--job", "bilibili-mid-2", "--format", "jsonl")
    assert code == 0 and [json.loads(line)["post_id"] for line in data.splitlines()] == ["BV1"]
    code, data = run_export(tmp_path, outputs, "--kind", "comments")
    assert code == 0 and [r["comment_id"] for r in read_csv(data)] == ["c1"]
    code, data = run_export(tmp_path, outputs, "--kind", "media", "--format", "jsonl", "--platform", "bilibili")
    assert code == 0 and [json.loads(line)["kind"] for line in data.splitlines()] == ["video", "image", "image"]


def test_export_refuses_bad_arguments_in_one_line(tmp_path: Path, outputs: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert run_export(tmp_path, outputs, "--since", "yesterday")[0] == 2
    assert "--since 'yesterday'" in capsys.readouterr().err
    assert export_main(["-s", f"OUTPUT_DIR={tmp_path / 'nowhere'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert run_export(tmp_path, outputs, "-s", "LIBRARY_TEMPLATE={post_id}")[0] == 2


def into_database(uri: str, run_id: str, *items: Any) -> None:
    """Upsert *items* as the records pipeline does (their plain dicts, with their media results)."""
    rows = Rows()
    for item in items:
        add_record(rows, dataclasses.asdict(item))
    store = open_store(uri, now="2026-12-02T00:00:00Z")
    try:
        store.write(rows, run_id=run_id, seen_at=f"2026-12-02T00:00:0{run_id[-1]}Z")
    finally:
        store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A records database holding two runs: post 1 seen twice (5 likes, then 50), post 2 of 2025, a repost 3 of
    post 4, a comment with a picture, a Bilibili post; no JSON Lines anywhere."""
    uri = str(tmp_path / "checkpoints" / "records.sqlite3")
    if request.param == "postgresql":
        uri = str(request.getfixturevalue("postgres_url"))
    original = post("4", job="weibo-uid-4")
    original.media = [MediaAsset(kind="image", key="o", url="https://cdn.example/o.jpg", status="downloaded",
                                 sha256="d" * 64, path=f"objects/dd/dd/{'d' * 64}.jpg", size=6)]
    original.author = Author(id="44", name="原作者")
    into_database(uri, "r1", post("1", likes=5), post("2", created="2025-01-01T00:00:00Z"), comment("c1", "1"),
                  post("3", reposted=original, job="weibo-uid-1"),
                  post("BV1", platform="bilibili", job="bilibili-mid-2"))
    into_database(uri, "r2", post("1", likes=50, fetched="2026-11-02T00:00:00Z"))
    return uri


def run_db_export(tmp_path: Path, uri: str, *args: str) -> tuple[int, bytes]:
    dest = tmp_path / "export.out"
    code = export_main(["--out", str(dest), "-s", f"RECORDS_DB={uri}", "-s", f"FILES_STORE={tmp_path / 'files'}",
                        "-s", f"OUTPUT_DIR={tmp_path / 'no-outputs'}", *args])
    return code, dest.read_bytes() if dest.exists() else b""


def test_export_reads_the_records_database(tmp_path: Path, database: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_db_export(tmp_path, database)
    assert code == 0, capsys.readouterr().err
    rows = {(r["platform"], r["post_id"]): r for r in read_csv(data)}
    assert sorted(rows) == [("bilibili", "BV1"), ("weibo", "1"), ("weibo", "2"), ("weibo", "3"), ("weibo", "4")]
    first = rows[("weibo", "1")]
    assert list(first) == list(POST_COLUMNS)  # the CSV feed's columns, from the same definition
    counts = (first["likes"], first["comments"], first["reposts"], first["views"])
    assert counts == ("50", "0", "", "1000000000000")
    assert first["text"] == HOSTILE_TEXT and first["author_name"] == '猫, "咪"' and first["author_id"] == "42"
    folder = "weibo/猫, ＂咪＂ (42)/2026-03-04 1"
    assert first["first_image"] == f"{folder}/02 image.jpg"
    assert first["media_paths"].split("|") == [f"{folder}/01 cover.jpg", f"{folder}/02 image.jpg"]
    assert (first["media_count"], first["media_stored"], first["deleted"]) == ("3", "2", "false")
    assert (first["job"], first["fetched_at"]) == ("weibo-uid-1", "2026-11-02T00:00:00Z")
    assert rows[("weibo", "3")]["reposted_post_id"] == "4"
    assert rows[("weibo", "4")]["first_image"] == "weibo/原作者 (44)/2026-03-04 4/01 image.jpg"
    err = capsys.readouterr().err
    assert "5 posts rows from 5 records" in err and "JSON Lines" not in err
    # The selections are SQL: platform and publish time, job.
    code, data = run_db_export(tmp_path, database, "--platform", "weibo", "--since", "2026-01-01")
    assert code == 0 and sorted(r["post_id"] for r in read_csv(data)) == ["1", "3", "4"]
    code, data = run_db_export(tmp_path, database, "--job", "weibo-uid-1", "--format", "jsonl")
    lines = [json.loads(line) for line in data.splitlines()]
    assert code == 0 and sorted(r["post_id"] for r in lines) == ["1", "2", "3"]
    assert all(list(r) == list(POST_COLUMNS) for r in lines)  # the same flat columns as JSON
    code, data = run_db_export(tmp_path, database, "--kind", "comments", "--job", "weibo-uid-1")
    [c1] = read_csv(data)
    assert code == 0 and list(c1) == list(COMMENT_COLUMNS)
    assert (c1["comment_id"], c1["post_id"], c1["text"], c1["author_name"], c1["job"]) == (
        "c1", "1", "好,看", "评论者", "weibo-uid-1")
    assert c1["media_count"] == "1"
    code, data = run_db_export(tmp_path, database, "--kind", "media", "--platform", "weibo")
    media = read_csv(data)
    # Each asset once: the repost's original is a post of its own, its picture not repeated under the repost.
    keys = [(r["post_id"], r["comment_id"], r["number"]) for r in media]
    assert len(keys) == len(set(keys)) == 3 + 3 + 3 + 1 + 1  # posts 1, 2, 3, the original 4, comment c1
    assert {r["key"] for r in media if r["post_id"] == "4"} == {"o"} and ("1", "c1", "1") in keys


def test_without_a_database_export_reads_the_json_lines_and_says_so_once(
        tmp_path: Path, outputs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_export(tmp_path, outputs, "-s", f"RECORDS_DB={tmp_path / 'none.sqlite3'}")
    assert code == 0 and len(read_csv(data)) == 3
    said = [line for line in capsys.readouterr().err.splitlines() if "JSON Lines" in line]
    assert said == [f"mediacrawler export: no records database at {tmp_path / 'none.sqlite3'} (RECORDS_DB): "
                    f"reading the JSON Lines under {outputs} instead"]
    assert not (tmp_path / "none.sqlite3").exists()  # looked for, never made
    code, _ = run_export(tmp_path, outputs, "-s", "RECORDS_ENABLED=false")
    assert code == 0 and "RECORDS_ENABLED is off: reading the JSON Lines" in capsys.readouterr().err
