"""The content-addressed store and the media index, on a real filesystem, real SQLite and a real redis-server."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.contracts import asset_index_key
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings

from mediacrawler.distributed.media_index import RedisMediaIndex
from mediacrawler.media.index import ObjectRecord, SQLiteMediaIndex, index_class
from mediacrawler.media.store import STORE_SCHEMES, ContentAddressedStore, StoreError, hash_file, store_scheme

from .test_media_units import encode


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# --- store ------------------------------------------------------------------------------------------------------
def test_persist_names_objects_by_sha256_and_dedups(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    body = encode("JPEG")
    sha = hashlib.sha256(body).hexdigest()
    first = store.persist_bytes(body, ext=".jpg")
    again = store.persist_bytes(body, ext=".jpg")
    assert first.created and not again.created
    assert first.relpath == again.relpath == f"objects/{sha[:2]}/{sha[2:4]}/{sha}.jpg"
    assert (store.root / first.relpath).read_bytes() == body
    assert store.stat(first.relpath) == len(body)
    assert list(store.iter_objects()) == [first.relpath]
    assert not list((store.root / "tmp").iterdir())


def test_racing_writers_of_the_same_bytes_create_one_object(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path)
    body = os.urandom(256 * 1024)
    results = []
    barrier = threading.Barrier(8)

    def write() -> None:
        barrier.wait()
        results.append(store.persist_bytes(body, ext=""))

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.created for r in results) == 1
    assert len(files_under(store.objects_dir)) == 1


def test_publish_file_hashes_streaming_and_moves_into_place(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    spool = store.tmp_dir / "spool.bin"
    body = encode("PNG", (300, 200))
    spool.write_bytes(body)
    result = store.publish_file(spool)
    assert result.relpath.endswith(".png") and result.created
    assert not spool.exists()
    assert hash_file(store.root / result.relpath) == (hashlib.sha256(body).hexdigest(), len(body))
    # The same bytes again: the source is consumed, nothing new is stored.
    spool.write_bytes(body)
    assert not store.publish_file(spool).created
    assert not spool.exists()


def test_damaged_object_is_replaced_on_the_next_write(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path)
    body = encode("JPEG")
    rel = store.persist_bytes(body, ext=".jpg").relpath
    (store.root / rel).write_bytes(body[:100])  # a torn write from some older tool
    assert store.persist_bytes(body, ext=".jpg").created
    assert (store.root / rel).read_bytes() == body
    assert len(list(store.quarantine_dir.iterdir())) == 1


def test_a_planted_symlink_cannot_carry_writes_outside_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = ContentAddressedStore(tmp_path / "files")
    body = encode("JPEG")
    sha = hashlib.sha256(body).hexdigest()
    (store.objects_dir / sha[:2]).symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreError):
        store.persist_bytes(body, ext=".jpg")
    assert not any(outside.rglob("*"))


def test_store_scheme_selection(tmp_path: Path) -> None:
    assert STORE_SCHEMES[store_scheme(str(tmp_path / "a"))] is ContentAddressedStore
    assert STORE_SCHEMES[store_scheme(f"file://{tmp_path}/b")](f"file://{tmp_path}/b").root == tmp_path / "b"
    assert store_scheme("s3://bucket/prefix") not in STORE_SCHEMES


CRASH_WRITER = textwrap.dedent(
    """
    import os, sys
    from mediacrawler.media.store import ContentAddressedStore
    store = ContentAddressedStore(sys.argv[1])
    print("ready", flush=True)
    i = 0
    while True:
        store.persist_bytes(os.urandom(3 * 1024 * 1024 + i), ext="")
        i += 1
    """
)


@pytest.mark.slow
def test_kill_9_mid_write_leaves_no_partial_object(tmp_path: Path) -> None:
    root = tmp_path / "files"
    for attempt in range(6):
        proc = subprocess.Popen([sys.executable, "-c", CRASH_WRITER, str(root)], stdout=subprocess.PIPE,
                                cwd=Path(__file__).parents[1])
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.15 + 0.07 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = ContentAddressedStore(root)
    objects = list(store.iter_objects())
    assert objects, "the writer stored nothing before being killed"
    for rel in objects:
        name_sha = Path(rel).name
        assert hash_file(store.root / rel)[0] == name_sha, rel
    # Leftovers may exist only under tmp/, and a sweep removes them.
    leftovers = list(store.tmp_dir.glob("*.part"))
    assert store.sweep_tmp(older_than=0) == len(leftovers)
    assert not list(store.tmp_dir.glob("*.part"))


# --- index ------------------------------------------------------------------------------------------------------
OBJ = ObjectRecord(sha256="ab" * 32, path=f"objects/ab/ab/{'ab' * 32}.jpg", size=123, mime="image/jpeg",
                   width=10, height=20)
OTHER = ObjectRecord(sha256="cd" * 32, path=f"objects/cd/cd/{'cd' * 32}.png", size=9, mime="image/png")


@pytest.fixture(params=["sqlite", "redis"])
def index(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        idx = SQLiteMediaIndex(tmp_path / "index.sqlite3")
    else:
        import redis

        url = request.getfixturevalue("redis_url")
        idx = RedisMediaIndex(redis.Redis.from_url(url), prefix="test:media:")
    yield idx
    idx.close()


def test_index_lookup_by_key_then_url(index) -> None:
    key = asset_index_key(platform="weibo", kind="image", key="pid1")
    assert index.lookup(key=key, url="http://h/large/pid1.jpg") is None
    index.record(obj=OBJ, key=key, url="http://h/large/pid1.jpg?sig=1&e=2", seen_at=1000.0)
    # A new signed URL for the same key: found by key.
    hit = index.lookup(key=key, url="http://h/large/pid1.jpg?sig=9")
    assert hit is not None and (hit.sha256, hit.path, hit.size, hit.mime, hit.width, hit.height) == (
        OBJ.sha256, OBJ.path, 123, "image/jpeg", 10, 20)
    # No key: found by canonical URL (query order does not matter).
    assert index.lookup(key=None, url="http://h/large/pid1.jpg?e=2&sig=1") is not None
    assert index.lookup(key="weibo/image/other", url="http://h/other.jpg") is None


def test_index_keeps_first_seen_and_sources(index) -> None:
    index.record(obj=OBJ, key="k1", url="http://a/1.jpg", seen_at=1000.0)
    index.record(obj=OBJ, key="k2", url="http://b/2.jpg?z=1&a=2", seen_at=2000.0)
    index.record(obj=OTHER, key="k3", url="http://c/3.png", seen_at=1500.0)
    got = index.get(OBJ.sha256)
    assert got is not None and got.first_seen == 1000.0 and got.last_seen == 2000.0
    sources = index.sources(OBJ.sha256)
    assert [s.url for s in sources] == ["http://b/2.jpg?z=1&a=2", "http://a/1.jpg"]
    assert [s.key for s in sources] == ["k2", "k1"]
    assert sorted(o.sha256 for o in index.iter_objects()) == [OBJ.sha256, OTHER.sha256]
    assert index.get("ef" * 32) is None


def test_index_backend_selection(tmp_path: Path, redis_url: str) -> None:
    assert index_class(Settings({})) is SQLiteMediaIndex
    assert index_class(Settings({"REDIS_URL": redis_url})) is RedisMediaIndex
    assert index_class(Settings({"REDIS_URL": redis_url, "MEDIA_INDEX": "sqlite"})) is SQLiteMediaIndex
    assert index_class(Settings({"MEDIA_INDEX": "mediacrawler.media.index.SQLiteMediaIndex"})) is SQLiteMediaIndex
    with pytest.raises(NotConfigured, match="MEDIA_INDEX"):
        index_class(Settings({"MEDIA_INDEX": "mongo"}))
    with pytest.raises(NotConfigured, match="REDIS_URL"):
        index_class(Settings({"MEDIA_INDEX": "redis"}))
    idx = index_class(Settings({})).from_settings(Settings(), store_root=tmp_path)
    assert isinstance(idx, SQLiteMediaIndex) and idx.path == tmp_path / "index.sqlite3"
    idx.close()
    settings = Settings({"REDIS_URL": redis_url})
    assert isinstance(index_class(settings).from_settings(settings, store_root=tmp_path), RedisMediaIndex)


def test_sqlite_index_is_wal_and_shared_by_threads(tmp_path: Path) -> None:
    idx = SQLiteMediaIndex(tmp_path / "i.sqlite3")
    errors = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                sha = hashlib.sha256(f"{n}-{i}".encode()).hexdigest()
                idx.record(obj=ObjectRecord(sha256=sha, path=f"objects/{sha[:2]}/{sha[2:4]}/{sha}", size=i),
                           key=f"k{n}-{i}", url=f"http://h/{n}/{i}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(list(idx.iter_objects())) == 300
    # Another connection (verify, another process) reads while this one stays open.
    other = SQLiteMediaIndex(tmp_path / "i.sqlite3")
    assert other.lookup(key="k3-7", url=None) is not None
    assert other._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()
    idx.close()


def test_redis_index_writes_wait_out_a_blip_within_the_grace_and_fail_past_it(redis_server_factory: Any) -> None:
    import redis

    server = redis_server_factory()
    assert server.process is not None
    client = redis.Redis.from_url(server.url, socket_timeout=0.2, socket_connect_timeout=0.2)

    def paused(seconds: float, grace: float) -> tuple[BaseException | None, float]:
        index = RedisMediaIndex(client, prefix=f"test:grace{grace}:", outage_grace=grace)
        os.kill(server.process.pid, signal.SIGSTOP)
        timer = threading.Timer(seconds, os.kill, (server.process.pid, signal.SIGCONT))
        timer.start()
        started = time.monotonic()
        try:
            index.record_many([(OBJ, "weibo/image/a", "https://x.example/a.jpg")])
            error = None
        except redis.RedisError as exc:
            error = exc
        elapsed = time.monotonic() - started
        timer.join()
        return error, elapsed

    error, elapsed = paused(1.5, grace=10)
    assert error is None and 1.3 < elapsed < 5
    found = RedisMediaIndex(client, prefix="test:grace10:").lookup(key="weibo/image/a", url=None)
    assert found is not None and found.sha256 == OBJ.sha256 and found.size == OBJ.size
    error, elapsed = paused(3, grace=0.5)
    assert isinstance(error, redis.TimeoutError) and elapsed < 2.5
    with pytest.raises(ValueError, match="MEDIA_INDEX_OUTAGE_GRACE"):
        RedisMediaIndex(client, outage_grace=-1)
