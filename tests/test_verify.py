"""``mediacrawler verify``: re-hash the store, report corrupt/missing/orphan files, repair from recorded URLs.

The store is filled with real sandbox images (the bytes ``/media/img/{n}.jpg`` serves) and indexed with their
sandbox URLs, so ``--repair`` re-downloads over real HTTP.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest
from scrapy.settings import Settings

from mediacrawler.items import Author, MediaAsset, Post
from mediacrawler.library import Library
from mediacrawler.media.index import ObjectRecord, SourceRecord, SQLiteMediaIndex
from mediacrawler.media.store import ContentAddressedStore
from mediacrawler.commands.verify import add_arguments, format_report, main, run_from_args
from mediacrawler.commands.verify import run_verify
from mediacrawler_sandbox.media import blob_read, generic_image
from tests.utils import project_settings_dict

ROOT = Path(__file__).resolve().parents[1]


def fill(store_root: Path, base_url: str, n: int = 6) -> dict[int, str]:
    """Store images 0..n-1 as the pipeline would; return {n: relpath}."""
    store = ContentAddressedStore(store_root)
    index = SQLiteMediaIndex(store_root / "index.sqlite3")
    paths = {}
    for i in range(n):
        body = generic_image(i)
        persisted = store.persist_bytes(body, ext=".jpg")
        index.record(obj=ObjectRecord(sha256=persisted.sha256, path=persisted.relpath, size=persisted.size,
                                      mime="image/jpeg"),
                     key=f"bench/image/{i}", url=f"{base_url}/media/img/{i}.jpg")
        paths[i] = persisted.relpath
    index.close()
    return paths


def flip_byte(path: Path, offset: int = 200) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("REDIS_URL", None)
    return subprocess.run([sys.executable, "-m", "mediacrawler", "verify", "--index", "sqlite", *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_clean_store_passes(tmp_path: Path, sandbox: Any) -> None:
    root = tmp_path / "files"
    fill(root, sandbox.url)
    proc = cli("--store", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 ok, 0 corrupt, 0 missing, 0 orphan" in proc.stdout
    assert "verify: 6/6 files (100.0%)" in proc.stderr  # the progress display


def test_flipped_byte_is_named_and_repaired(tmp_path: Path, fresh_sandbox: Any) -> None:
    root = tmp_path / "files"
    paths = fill(root, fresh_sandbox.url)
    victim = root / paths[3]
    good = victim.read_bytes()
    flip_byte(victim)

    proc = cli("--store", str(root))
    assert proc.returncode == 1
    assert f"corrupt  {paths[3]}" in proc.stdout
    assert "1 corrupt" in proc.stdout and "PROBLEMS FOUND" in proc.stdout

    proc = cli("--store", str(root), "--repair")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"repaired {paths[3]}" in proc.stdout
    assert victim.read_bytes() == good
    assert len(list((root / "quarantine").iterdir())) == 1  # the corrupt copy is kept aside, not deleted
    assert [e["path"] for e in fresh_sandbox.requests()] == ["/media/img/3.jpg"]
    assert cli("--store", str(root)).returncode == 0


def test_missing_and_orphan(tmp_path: Path, sandbox: Any) -> None:
    root = tmp_path / "files"
    paths = fill(root, sandbox.url)
    (root / paths[1]).unlink()
    stray = ContentAddressedStore(root).persist_bytes(generic_image(99), ext=".jpg")  # stored, never indexed
    junk = root / "objects" / "ab" / "evil.desktop"
    junk.parent.mkdir(parents=True, exist_ok=True)
    junk.write_bytes(b"[Desktop Entry]")

    proc = cli("--store", str(root))
    assert proc.returncode == 1
    assert f"missing  {paths[1]}" in proc.stdout
    assert f"orphan   {stray.relpath}" in proc.stdout
    assert "orphan   objects/ab/evil.desktop" in proc.stdout

    proc = cli("--store", str(root), "--repair")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / paths[1]).read_bytes() == generic_image(1)
    assert not junk.exists()
    assert cli("--store", str(root)).returncode == 0  # the valid orphan was adopted into the index


def test_a_large_object_is_repaired_by_streaming_past_download_maxsize(tmp_path: Path, fresh_sandbox: Any) -> None:
    # DOWNLOAD_MAXSIZE bounds what a crawl holds in memory; a repair streams to disk, so it is not bound by it.
    root = tmp_path / "files"
    size = 3 * 1024 * 1024 + 17
    store = ContentAddressedStore(root)
    index = SQLiteMediaIndex(root / "index.sqlite3")
    body = blob_read("repair", 0, size)
    persisted = store.persist_bytes(body, ext="")  # random bytes: no media extension
    index.record(obj=ObjectRecord(sha256=persisted.sha256, path=persisted.relpath, size=size),
                 key="bench/video/repair", url=f"{fresh_sandbox.url}/media/blob/repair?size={size}")
    index.close()
    (root / persisted.relpath).unlink()
    args = add_arguments(argparse.ArgumentParser()).parse_args(
        ["--store", str(root), "--repair", "--index", "sqlite", "--no-progress"])
    out, err = io.StringIO(), io.StringIO()
    status = run_from_args(args, settings=Settings(project_settings_dict(DOWNLOAD_MAXSIZE=1024 * 1024)),
                           out=out, err=err)
    assert status == 0, out.getvalue() + err.getvalue()
    assert f"repaired {persisted.relpath}" in out.getvalue()
    assert hashlib.sha256((root / persisted.relpath).read_bytes()).hexdigest() == persisted.sha256
    assert list((root / "tmp").iterdir()) == []  # the download was published by rename, nothing left behind
    assert [e["bytes"] for e in fresh_sandbox.requests()] == [size]


def test_repair_refuses_wrong_bytes_and_unsafe_urls(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    index = SQLiteMediaIndex(tmp_path / "files" / "index.sqlite3")
    body = generic_image(5)
    persisted = store.persist_bytes(body, ext=".jpg")
    index.record(obj=ObjectRecord(sha256=persisted.sha256, path=persisted.relpath, size=len(body)),
                 key="k", url="file:///etc/passwd")
    index.record(obj=ObjectRecord(sha256=persisted.sha256, path=persisted.relpath, size=len(body)),
                 key="k2", url="http://127.0.0.1:9/other.jpg")
    index.record(obj=ObjectRecord(sha256=persisted.sha256, path=persisted.relpath, size=len(body)),
                 key="k3", url="http://127.0.0.1:9/endless.jpg")
    flip_byte(store.root / persisted.relpath)
    fetched: list[str] = []

    def fetch(url: str, referer: str | None, dest: IO[bytes]) -> None:
        fetched.append(url)
        if url.endswith("other.jpg"):
            dest.write(body[:-1] + b"?")  # the same size, other bytes: must not be accepted
            return
        for _ in range(100):  # far more than the object: stopped at its size, before the disk fills
            dest.write(b"\0" * 1024)

    report = run_verify(store=store, index=index, repair=True, fetch=fetch)
    assert sorted(fetched) == ["http://127.0.0.1:9/endless.jpg", "http://127.0.0.1:9/other.jpg"]
    assert report.corrupt == [persisted.relpath] and not report.repaired
    why = report.unrepaired[persisted.relpath]
    assert "scheme not allowed" in why and "different bytes" in why
    assert f"body larger than the {len(body)} bytes of the object" in why
    assert list(store.tmp_dir.iterdir()) == []  # no half-written download left behind
    assert not report.clean
    assert not (store.root / persisted.relpath).exists()  # quarantined
    lines = format_report(report, repair=True)
    assert lines[-1] == "verify: PROBLEMS FOUND" and "crawling its post again downloads it again" in lines[-2]
    index.close()


def test_referer_comes_from_the_platform_of_the_source(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path)
    index = SQLiteMediaIndex(tmp_path / "index.sqlite3")
    body = generic_image(7)
    p = store.persist_bytes(body, ext=".jpg")
    index.record(obj=ObjectRecord(sha256=p.sha256, path=p.relpath, size=len(body)), key="weibo/image/pid7",
                 url="http://127.0.0.1:9/large/pid7.jpg")
    (store.root / p.relpath).unlink()
    seen: list[tuple[str, str | None]] = []

    def fetch(url: str, referer: str | None, dest: IO[bytes]) -> None:
        seen.append((url, referer))
        dest.write(body)

    def referer_for(source: SourceRecord) -> str | None:
        return "https://m.weibo.cn/" if (source.key or "").startswith("weibo/") else None

    report = run_verify(store=store, index=index, repair=True, fetch=fetch, referer_for=referer_for)
    assert seen == [("http://127.0.0.1:9/large/pid7.jpg", "https://m.weibo.cn/")]
    assert report.repaired == [p.relpath] and report.clean
    assert hashlib.sha256((store.root / p.relpath).read_bytes()).hexdigest() == p.sha256
    index.close()


def test_no_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store", str(tmp_path / "nope"), "--index", "sqlite"]) == 2
    assert "no media store" in capsys.readouterr().err


def test_the_library_beside_the_store_is_checked(tmp_path: Path, sandbox: Any) -> None:
    """A library entry whose object left the store, and a file that links to nothing, each named; exit 1."""
    root = tmp_path / "files"
    paths = fill(root, sandbox.url, n=2)
    library = Library(tmp_path / "library", store_root=root,
                      template="{platform}/{author_id}/{post_id}/{index:02d} {kind}.{ext}")
    library.symlinks = True  # a link that can point at a missing object
    media = [MediaAsset(kind="image", key=str(i), url="u", sha256=p.split("/")[-1][:64], path=p, status="uptodate")
             for i, p in paths.items()]
    library.place(Post(platform="weibo", post_id="1", url="u", author=Author(id="9"), created_at=None, media=media))
    assert cli("--store", str(root), "--no-progress").returncode == 0
    (tmp_path / "library" / "weibo" / "mine.txt").write_text("not a stored file")
    (root / paths[1]).unlink()
    proc = cli("--store", str(root), "--no-progress")
    assert proc.returncode == 1
    assert "library  missing object: weibo/9/1/02 image.jpg" in proc.stdout
    assert "library  stray: weibo/mine.txt" in proc.stdout
