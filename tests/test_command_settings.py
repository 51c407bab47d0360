"""Every ``mediacrawler`` subcommand reads the settings a crawl reads and honours ``-s NAME=VALUE`` for them
(commands/options.py ``checked_settings``; docs/operations.md, "Commands and settings"), run from a directory with
no scrapy.cfg, where the defaults (``checkpoints/``, ``files/``) point at nothing. ``export`` and ``library`` are
in tests/test_export.py and tests/test_library.py (``-s RECORDS_DB``, ``-s FILES_STORE``), ``retry`` in
tests/test_retry.py, ``demo`` in tests/test_demo_cli.py (``-s RECORDS_DB``), ``web`` here (refusing the database
of ``-s``) and in tests/test_web_api.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from mediacrawler import status
from mediacrawler.checkpoints.model import Checkpoint
from mediacrawler.checkpoints.store import FileCheckpointStore
from mediacrawler.commands import checkpoints, enqueue, verify
from mediacrawler.media.index import ObjectRecord, SQLiteMediaIndex
from mediacrawler.media.store import ContentAddressedStore
from mediacrawler.records.rows import Rows, add_record
from mediacrawler.records.store import open_store
from tests.test_command_options import elsewhere  # noqa: F401  (the fixture)

NOW = "2026-12-02T00:00:00Z"


def records_database(path: Path, *media: tuple[str, str | None]) -> str:
    """A records database of one post whose assets are *media* (key, stored path)."""
    rows = Rows()
    assets = [{"kind": "image", "key": key, "url": f"https://m.test/{key}.jpg", "status": "downloaded",
               "sha256": None if where is None else "ab" * 32, "path": where} for key, where in media]
    add_record(rows, {"platform": "weibo", "post_id": "1", "url": "https://weibo.com/1/1", "author": {"id": "1"},
                      "metrics": {"likes": 3}, "media": assets})
    store = open_store(str(path), now=NOW)
    store.write(rows, run_id="r1", seen_at=NOW)
    store.close()
    return str(path)


def test_checkpoints_reads_the_checkpoint_dir_of_s(elsewhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = Checkpoint(key="weibo-uid-1", spider="weibo", watermark=2, next_page=3)
    FileCheckpointStore(elsewhere / "crawl" / "cp").save(checkpoint)
    assert checkpoints.main(["-s", f"CHECKPOINT_DIR={elsewhere / 'crawl' / 'cp'}", "list"]) == 0
    assert capsys.readouterr().out.startswith("weibo-uid-1\tnext page 3")
    assert checkpoints.main(["-s", "CHECKPOINT_DIR=nowhere"]) == 0
    assert "nowhere does not exist (CHECKPOINT_DIR=nowhere" in capsys.readouterr().err
    assert checkpoints.main(["-s", "CHECKPOINT_BACKEND=carrier-pigeon"]) == 2  # checked as a crawl checks it
    assert capsys.readouterr().err.startswith("mediacrawler checkpoints: error: CHECKPOINT_BACKEND")


def test_status_reads_the_checkpoints_and_records_database_of_s(elsewhere: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    directory = elsewhere / "crawl" / "cp"
    FileCheckpointStore(directory).save(Checkpoint(key="weibo-uid-1", spider="weibo", watermark=2, next_page=3))
    uri = records_database(elsewhere / "crawl" / "db.sqlite3", ("p1", "objects/ab/x.jpg"))
    assert status.main(["-s", f"CHECKPOINT_DIR={directory}", "-s", f"RECORDS_DB={uri}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [e["job"] for e in report["checkpoints"]] == ["weibo-uid-1"]
    assert report["records"] == {"database": uri, "schema_version": 3, "posts": 1, "comments": 0, "authors": 1,
                                 "media": 1, "metrics_history": 1, "media_stored": 1, "last_seen_at": NOW}
    assert status.main(["-s", f"CHECKPOINT_DIR={directory}", "-s", f"RECORDS_DB={uri}"]) == 0
    assert f"records database {uri} (schema 3): 1 posts, 0 comments" in capsys.readouterr().out
    # No database where RECORDS_DB points: no line about one, and none is made.
    assert status.main(["-s", f"CHECKPOINT_DIR={directory}", "-s", f"RECORDS_DB={elsewhere / 'no.sqlite3'}"]) == 0
    assert "records database" not in capsys.readouterr().out and not (elsewhere / "no.sqlite3").exists()


def test_verify_reads_the_store_and_records_database_of_s(elsewhere: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    store = ContentAddressedStore(elsewhere / "crawl" / "files", fsync=False)
    kept = store.persist_bytes(b"\xff\xd8\xff\xe0 a picture", ext=".jpg")
    index = SQLiteMediaIndex(store.root / "index.sqlite3")
    index.record(obj=ObjectRecord(sha256=kept.sha256, path=kept.relpath, size=kept.size, mime="image/jpeg"),
                 key="weibo/image/p1", url="https://m.test/p1.jpg")
    index.close()
    gone = "objects/00/00/" + "0" * 64 + ".jpg"
    uri = records_database(elsewhere / "crawl" / "db.sqlite3", ("p1", kept.relpath), ("p2", gone), ("p3", None))
    args = ["-s", f"FILES_STORE={store.root}", "-s", f"RECORDS_DB={uri}", "--no-progress"]
    assert verify.main(args) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("records")] == [
        f"records  missing object: weibo image p2 → {gone}"]
    assert "; records: 1 rows name an object the store does not hold" in out[-2]
    assert out[-1] == "verify: PROBLEMS FOUND"
    # The same store and a database that names only what it holds: clean.
    uri = records_database(elsewhere / "crawl" / "ok.sqlite3", ("p1", kept.relpath))
    assert verify.main(["-s", f"FILES_STORE={store.root}", "-s", f"RECORDS_DB={uri}", "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: OK"
    assert verify.main(["-s", f"FILES_STORE={elsewhere / 'nowhere'}"]) == 2
    assert "does not exist (FILES_STORE=" in capsys.readouterr().err


def test_enqueue_queues_into_the_redis_of_s(elsewhere: Path, redis_url: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert enqueue.main(["weibo", "uid=7365120894", "-s", f"REDIS_URL={redis_url}"]) == 0
    assert "queued weibo-uid-7365120894" in capsys.readouterr().out
    client = redis.Redis.from_url(redis_url)
    [job] = [json.loads(raw) for raw in client.lrange("mediacrawler:dist:weibo:jobs", 0, -1)]
    assert (job["key"], job["args"]) == ("weibo-uid-7365120894", {"uid": "7365120894"})
    assert enqueue.main(["weibo", "uid=1", "-s", "REDIS_URL=redis://127.0.0.1:1/0",
                         "-s", "REDIS_CONNECT_TIMEOUT=1"]) == 2  # refused by the start-up check, one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mediacrawler enqueue: error: ")


def test_a_records_database_that_cannot_be_read_is_one_line_for_each_command(
        elsewhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mediacrawler.commands import export, library

    damaged = elsewhere / "damaged.sqlite3"
    damaged.write_bytes(b"not a database" * 100)
    s = ["-s", f"RECORDS_DB={damaged}", "-s", f"FILES_STORE={elsewhere}", "-s", f"CHECKPOINT_DIR={elsewhere}"]
    line = f"RECORDS_DB={damaged} cannot be read: file is not a database"
    assert export.main(s) == 2
    assert capsys.readouterr().err.splitlines() == [f"mediacrawler export: error: {line}"]
    assert library.main(["rebuild", *s]) == 2
    assert capsys.readouterr().err.splitlines() == [f"mediacrawler library: error: {line}"]
    assert status.main(s) == 1
    assert f"records database {damaged}: UNREADABLE: {line}" in capsys.readouterr().out
    assert verify.main([*s, "--no-progress"]) == 1
    assert f"records  unreadable: {line}" in capsys.readouterr().out
    from mediacrawler.commands import web

    assert web.main(["--port", "0", *s]) == 2  # refused before it listens
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mediacrawler web: error: RECORDS_DB={damaged} cannot be opened")
