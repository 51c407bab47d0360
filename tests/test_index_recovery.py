"""A damaged media index is rebuilt from the objects, and a failed index write fails its assets (issue #16, 2).

Real parts only: the store is filled by real crawls (subprocesses, ``tests.test_crawl_media.run_crawl``) against
the sandbox subprocess, or with the sandbox's own image bytes; the index file is damaged on disk (random bytes
over the whole file, or random 4 KiB pages after the header page, or a schema whose index no longer matches its
table); ``verify`` runs as the command line does; the failed write is a real SQLite lock held by another
connection.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.media.index import SQLITE_FILENAME, ObjectRecord, SQLiteMediaIndex
from mediacrawler.media.store import ContentAddressedStore
from mediacrawler_sandbox.media import generic_image
from mediacrawler_sandbox.world import build_world
from tests.test_crawl_media import UID, run_crawl, weibo_posts

ROOT = Path(__file__).resolve().parents[1]
PAGE = 4096


def random_bytes(path: Path) -> None:
    """The whole file replaced by noise of the same size (at least one page)."""
    path.write_bytes(os.urandom(max(path.stat().st_size, PAGE)))


def damaged_pages(path: Path) -> None:
    """Pages 2 and 3 (after the header page, which stays valid) overwritten with noise."""
    assert path.stat().st_size >= 4 * PAGE, "the index is too small to damage in the middle"
    with open(path, "r+b") as f:
        f.seek(PAGE)
        f.write(os.urandom(2 * PAGE))


DAMAGE: dict[str, Callable[[Path], None]] = {"random-bytes": random_bytes, "damaged-pages": damaged_pages}


def store_files(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in (root / "objects").rglob("*") if p.is_file()}


def indexed(root: Path) -> dict[str, ObjectRecord]:
    index = SQLiteMediaIndex(root / SQLITE_FILENAME)
    try:
        return {rec.path: rec for rec in index.iter_objects()}
    finally:
        index.close()


def fill(root: Path, n: int) -> None:
    """Images 0..n-1 stored and indexed as the pipeline does (asset and URL rows too, so the file has pages)."""
    store = ContentAddressedStore(root)
    index = SQLiteMediaIndex(root / SQLITE_FILENAME)
    for i in range(n):
        p = store.persist_bytes(generic_image(i), ext=".jpg")
        index.record(obj=ObjectRecord(sha256=p.sha256, path=p.relpath, size=p.size, mime="image/jpeg"),
                     key=f"weibo/image/{'x' * 200}{i}", url=f"http://127.0.0.1:1/media/img/{i}.jpg?{'q' * 300}")
    index.close()
    store.close()


def verify(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("REDIS_URL", None)
    return subprocess.run([sys.executable, "-m", "mediacrawler", "verify", "--index", "sqlite", "--no-progress",
                           *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def asides(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob(f"{SQLITE_FILENAME}.corrupt-*"))


@pytest.mark.parametrize("damage", DAMAGE)
def test_verify_runs_on_a_corrupt_index_and_rebuilds_it(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "files"
    fill(root, 30)
    files = store_files(root)
    DAMAGE[damage](root / SQLITE_FILENAME)

    proc = verify("--store", str(root))
    assert "Traceback" not in proc.stderr, proc.stderr
    # Found (exit 1, one line saying what and where the file went), then verified against the rebuilt index.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "index    corrupt: " in proc.stdout and "rebuilt from the objects" in proc.stdout
    assert "30 ok, 0 corrupt, 0 missing, 0 orphan" in proc.stdout
    assert "Media index" in proc.stderr and "moved aside" in proc.stderr
    assert len(asides(root)) == 1
    rebuilt = indexed(root)
    assert {p: r.size for p, r in rebuilt.items()} == files
    assert {r.mime for r in rebuilt.values()} == {"image/jpeg"}

    again = verify("--store", str(root))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "verify: OK" in again.stdout and len(asides(root)) == 1


def test_verify_repair_rebuilds_an_index_only_the_full_check_finds_damaged(tmp_path: Path) -> None:
    root = tmp_path / "files"
    fill(root, 8)
    db = sqlite3.connect(root / SQLITE_FILENAME)
    # The index b-tree no longer matches its table: quick_check (on open) passes, integrity_check does not.
    db.execute("PRAGMA writable_schema=ON")
    db.execute("UPDATE sqlite_master SET sql = 'CREATE INDEX urls_by_sha256 ON urls (key, last_seen)' "
               "WHERE name = 'urls_by_sha256'")
    db.commit()
    db.close()

    proc = verify("--store", str(root))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "index    corrupt: " in proc.stdout and "PROBLEMS FOUND" in proc.stdout
    assert not asides(root)  # reported, not touched, without --repair

    proc = verify("--store", str(root), "--repair")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rebuilt from the objects" in proc.stdout and "verify: OK" in proc.stdout
    assert len(asides(root)) == 1
    assert set(indexed(root)) == set(store_files(root))
    assert verify("--store", str(root)).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGE)
def test_crawl_starts_on_a_corrupt_index_and_stores_nothing_twice(tmp_path: Path, fresh_sandbox: Any,
                                                                  damage: str) -> None:
    world = build_world().weibo
    posts = weibo_posts(world, fresh_sandbox.url)[:16]  # enough pictures for a multi-page index, in seconds
    half = len(posts) // 2
    store = tmp_path / "files"
    run_crawl(tmp_path, posts[:half], store=store, name="first")
    before = store_files(store)
    assert before and (store / SQLITE_FILENAME).stat().st_size >= 4 * PAGE
    DAMAGE[damage](store / SQLITE_FILENAME)

    second = run_crawl(tmp_path, posts, store=store, name="second")
    assert "moved aside" in second.log and "Traceback" not in second.log
    assert len(asides(store)) == 1
    assets = second.assets()
    assert assets and not [a for a in assets if a["status"] == "failed"]
    after = store_files(store)
    # New posts stored their media; the first crawl's objects were found again, not stored twice.
    assert set(before) < set(after)
    assert len(after) == len({a["sha256"] for a in assets})  # every distinct content once
    by_path = {a["path"]: a["status"] for a in assets}
    assert all(by_path[p] in ("deduplicated", "uptodate") for p in before if p in by_path)
    assert second.stats.get("media/downloaded", 0) == len(after) - len(before)
    # The rebuilt index (plus what the second crawl added) lists every object, with its size.
    assert {p: r.size for p, r in indexed(store).items()} == after


@pytest.mark.slow
def test_failed_index_write_fails_the_assets(tmp_path: Path, fresh_sandbox: Any) -> None:
    world = build_world().weibo
    posts = weibo_posts(world, fresh_sandbox.url)[:6]
    store = tmp_path / "files"
    SQLiteMediaIndex(store / SQLITE_FILENAME).close()  # an empty index in WAL mode
    # Another process holds the write lock for the whole crawl: every index write of the crawl fails for real.
    holder = sqlite3.connect(store / SQLITE_FILENAME, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        crawl = run_crawl(tmp_path, posts, store=store, name="locked", MEDIA_INDEX_BUSY_TIMEOUT=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assets = crawl.assets()
    assert assets
    assert {a["status"] for a in assets} == {"failed"}, [a["status"] for a in assets]
    assert all("index-write-failed" in a["error"] and "database is locked" in a["error"] for a in assets)
    assert "media/downloaded" not in crawl.stats
    assert crawl.stats["media/failed"] == len(assets)
    assert "Media index write failed for" in crawl.log
    # The bytes are safe in the store: verify lists them as orphans and --repair adopts them.
    files = store_files(store)
    assert files and not indexed(store)
    proc = verify("--store", str(store), "--repair")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"adopted {len(files)}" in proc.stdout
    assert set(indexed(store)) == set(files)
