"""The batch committer and the group writes under it: store.persist_many/stage/publish, index.record_many.

Real filesystem, real SQLite, real Pillow-encoded images; the crash test SIGKILLs a committing process mid-round.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mediacrawler import settings
from mediacrawler.media import store as store_module
from mediacrawler.media.committer import BatchCommitter, CommitJob
from mediacrawler.media.index import ObjectRecord, SQLiteMediaIndex
from mediacrawler.media.store import ContentAddressedStore, Persisted, Staged, credit_first_twin, hash_file

from .test_media_units import encode


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def variant(base: bytes, n: int) -> bytes:
    # Bytes after a JPEG's EOI are ignored by decoders: distinct hashes, same valid image.
    return base + f"variant-{n}".encode()


# --- store: group writes ----------------------------------------------------------------------------------------
def test_credit_first_twin_moves_created_to_the_first_occurrence() -> None:
    # Parallel links decide which twin "creates" the object; the report must not depend on that race.
    a, b = "objects/aa/bb/" + "a" * 64 + ".jpg", "objects/cc/dd/" + "c" * 64 + ".jpg"
    err = OSError(5, "EIO")
    outcomes: list[Persisted | BaseException] = [
        Persisted("a" * 64, a, 3, created=False), err, Persisted("c" * 64, b, 4, created=True),
        Persisted("a" * 64, a, 3, created=True), Persisted("c" * 64, b, 4, created=False)]
    assert credit_first_twin(outcomes) is outcomes
    assert [o.created if isinstance(o, Persisted) else o for o in outcomes] == [True, err, True, False, False]


def test_persist_many_stores_each_once_and_reports_in_order(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    base = encode("JPEG")
    bodies = [variant(base, n) for n in range(20)]
    store.persist_bytes(bodies[3], ext=".jpg")  # already stored
    group = [(b, ".jpg", None) for b in bodies] + [(bodies[5], ".jpg", None)]  # a twin inside the group
    results = store.persist_many(group)
    assert all(isinstance(r, Persisted) for r in results)
    digests = [hashlib.sha256(b).hexdigest() for b, _, _ in group]
    assert [r.sha256 for r in results] == digests  # type: ignore[union-attr]
    created = [r.created for r in results]  # type: ignore[union-attr]
    assert created[3] is False and created[-1] is False and sum(created) == 19
    for r in results:
        assert hash_file(store.root / r.relpath)[0] == r.sha256  # type: ignore[union-attr]
    assert len(files_under(store.objects_dir)) == 20
    assert not list(store.tmp_dir.iterdir())
    store.close()


def test_persist_many_reports_errors_per_body(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    good = encode("JPEG")
    results = store.persist_many([(good, ".jpg", None), (b"x", ".desktop", None), (good + b"1", ".jpg", "zz")])
    assert isinstance(results[0], Persisted) and results[0].created
    assert not isinstance(results[1], Persisted) and not isinstance(results[2], Persisted)
    assert len(files_under(store.objects_dir)) == 1
    store.close()


def test_staged_bodies_are_only_temp_files_until_published(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    body = encode("PNG", (40, 30))
    staged = store.stage(body, ext=".png")
    assert isinstance(staged, Staged)
    assert not files_under(store.objects_dir) and len(list(store.tmp_dir.glob("*.part"))) == 1
    [done] = store.publish([staged])
    assert isinstance(done, Persisted) and done.created
    assert (store.root / done.relpath).read_bytes() == body
    assert not list(store.tmp_dir.iterdir())
    # Already stored: stage() says so and writes nothing.
    again = store.stage(body, ext=".png")
    assert isinstance(again, Persisted) and not again.created
    discarded = store.stage(body + b"!", ext=".png")
    assert isinstance(discarded, Staged)
    store.discard([discarded])
    assert not list(store.tmp_dir.iterdir())
    store.close()


#: Bodies staged on the loop's thread (the project's default: every photo here) or none (all on the executor, as a
#: body above MEDIA_INLINE_CHECK_BYTES): the same outcomes and the same order either way.
STAGING = pytest.mark.parametrize("inline_bytes", [settings.MEDIA_INLINE_CHECK_BYTES, 0], ids=["loop", "executor"])


class SyncRecorder:
    """A ``syncfs`` that logs each call with what is under ``objects/`` and ``tmp/`` at that moment, then syncs
    (the real one where there is one), or raises ``fail[n]`` at its n-th call."""

    def __init__(self, store: ContentAddressedStore, fail: dict[int, OSError] | None = None) -> None:
        self.store, self.fail, self.calls = store, fail or {}, []
        self.real = store_module.libc_syncfs()

    def __call__(self, fd: int) -> None:
        self.calls.append((files_under(self.store.objects_dir), sorted(self.store.tmp_dir.glob("*.part"))))
        if len(self.calls) in self.fail:
            raise self.fail[len(self.calls)]
        (self.real or (lambda _: os.sync()))(fd)


def test_a_group_is_synced_before_it_is_named_and_its_names_before_it_is_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    recorder = SyncRecorder(store)
    monkeypatch.setattr(store_module, "libc_syncfs", lambda: recorder)
    monkeypatch.setattr(store_module, "_datasync", lambda fd: pytest.fail("a per-file sync in a syncfs group"))
    bodies = [variant(encode("JPEG"), n) for n in range(12)]
    results = store.persist_many([(b, ".jpg", None) for b in bodies] + [(bodies[0], ".jpg", None)])
    assert all(isinstance(r, Persisted) for r in results) and sum(r.created for r in results) == 12  # type: ignore
    # Two syncs for the group: the first with every body in tmp/ and nothing named yet, the second once all 12 are.
    [(named_1, temps_1), (named_2, temps_2)] = recorder.calls
    assert named_1 == [] and len(temps_1) == 13
    assert len(named_2) == 12 and temps_2 == []
    store.close()


@STAGING
def test_the_committer_publishes_its_rounds_by_syncfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      inline_bytes: int) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    recorder = SyncRecorder(store)
    monkeypatch.setattr(store_module, "libc_syncfs", lambda: recorder)
    monkeypatch.setattr(store_module, "_datasync", lambda fd: pytest.fail("a per-file sync in a syncfs group"))
    jobs = [CommitJob(variant(encode("JPEG"), n), kind="image", key=f"k/{n}", url=f"http://h/{n}.jpg")
            for n in range(20)]
    committer, _ = run_committer(store, None, jobs, inline_bytes=inline_bytes)
    assert all(j.error is None and j.created for j in jobs)
    assert len(recorder.calls) == 2 * committer.rounds
    # Each round's first sync sees its bodies in tmp/ only, its second their names (none left in tmp/).
    assert sum(len(temps) for _, temps in recorder.calls[0::2]) == 20
    assert all(temps == [] for _, temps in recorder.calls[1::2]) and len(recorder.calls[-1][0]) == 20
    store.close()


@pytest.mark.parametrize("failing_call", [1, 2])
def test_a_failed_syncfs_fails_every_object_it_was_to_make_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    already = store.persist_bytes(variant(encode("JPEG"), 99), ext=".jpg")
    eio = OSError(errno.EIO, "syncfs: Input/output error")
    recorder = SyncRecorder(store, {failing_call: eio})
    monkeypatch.setattr(store_module, "libc_syncfs", lambda: recorder)
    bodies = [variant(encode("JPEG"), n) for n in range(5)] + [variant(encode("JPEG"), 99)]
    results = store.persist_many([(b, ".jpg", None) for b in bodies])
    assert results[:5] == [eio] * 5
    assert results[5] == dataclasses.replace(already, created=False)  # stored before: not the group's to lose
    assert len(recorder.calls) == failing_call
    # Failed in the data sync: nothing named; in the names' sync: named, not reported (verify lists them as
    # orphans until a later crawl stores them again).
    assert len(files_under(store.objects_dir)) == (1 if failing_call == 1 else 6)
    assert not list(store.tmp_dir.iterdir())
    store.close()


@pytest.mark.parametrize("missing", ["syncfs", "filesystem"])
def test_without_syncfs_each_file_and_directory_is_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           missing: str) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    if missing == "syncfs":  # not Linux >= 5.8
        monkeypatch.setattr(store_module, "libc_syncfs", lambda: None)
    else:  # a filesystem whose syncfs is not known to be as durable as fsync
        monkeypatch.setattr(store_module, "filesystem_type", lambda path: "nfs4")
    synced: list[int] = []
    dirs: list[str] = []
    monkeypatch.setattr(store_module, "_datasync", lambda fd: synced.append(fd) or os.fdatasync(fd))
    real_fsync_dir = store_module._fsync_dir
    monkeypatch.setattr(store_module, "_fsync_dir", lambda d: dirs.append(str(d)) or real_fsync_dir(d))
    results = store.persist_many([(variant(encode("JPEG"), n), ".jpg", None) for n in range(6)])
    assert all(isinstance(r, Persisted) and r.created for r in results)
    assert len(synced) == 6
    assert {os.path.dirname(store.root / r.relpath) for r in results} <= set(dirs)  # type: ignore[union-attr]
    store.close()


def test_filesystem_type_finds_the_mount_of_a_path(tmp_path: Path) -> None:
    if not Path("/proc/self/mountinfo").exists():
        pytest.skip("no /proc/self/mountinfo")
    assert store_module.filesystem_type("/proc/self") == "proc"
    assert store_module.filesystem_type(str(tmp_path)) is not None


# --- index: durable group commit --------------------------------------------------------------------------------
def test_record_many_is_committed_when_it_returns(tmp_path: Path) -> None:
    idx = SQLiteMediaIndex(tmp_path / "i.sqlite3")
    rows = []
    for n in range(30):
        sha = hashlib.sha256(str(n).encode()).hexdigest()
        rows.append((ObjectRecord(sha256=sha, path=f"objects/{sha[:2]}/{sha[2:4]}/{sha}.jpg", size=n), f"k{n}",
                     f"http://h/{n}.jpg"))
    idx.record(obj=rows[0][0], key="sighting", url=None)  # queued before: goes out with the group
    idx.record_many(rows)
    other = sqlite3.connect(tmp_path / "i.sqlite3")  # another process's view, without our queue
    assert other.execute("SELECT COUNT(*) FROM objects").fetchone()[0] == 30
    assert other.execute("SELECT COUNT(*) FROM assets").fetchone()[0] == 31
    other.close()
    assert idx.lookup(key="k7", url=None) is not None
    assert idx.lookup(key=None, url="http://h/9.jpg") is not None
    idx.close()


def test_lookup_prefers_the_key_then_the_url_queued_or_committed(tmp_path: Path) -> None:
    idx = SQLiteMediaIndex(tmp_path / "i.sqlite3")
    a, b, c = (ObjectRecord(sha256=h * 64, path=f"objects/{h * 2}/{h * 2}/{h * 64}.jpg", size=n)
               for n, h in enumerate("abc", 1))
    idx.record_many([(a, "k/a", "http://h/a.jpg"), (b, "k/b", "http://h/b.jpg")])
    sha = lambda o: o.sha256 if o is not None else None  # noqa: E731 - seen times differ
    assert sha(idx.lookup(key="k/a", url="http://h/b.jpg")) == a.sha256  # the key wins over a URL
    assert sha(idx.lookup(key="k/new", url="http://h/b.jpg")) == b.sha256  # a new key: found by its URL
    assert idx.lookup(key="k/new", url="http://h/new.jpg") is None
    idx.record(obj=c, key="k/c", url="http://h/c.jpg")  # queued, not committed
    assert sha(idx.lookup(key="k/new", url="http://h/c.jpg")) == c.sha256
    assert sha(idx.lookup(key="k/a", url="http://h/c.jpg")) == a.sha256  # a committed key wins over a queued URL
    assert sha(idx.lookup(key="k/c", url="http://h/a.jpg")) == c.sha256
    idx.close()


def test_lookups_do_not_wait_for_a_commit_in_progress(tmp_path: Path) -> None:
    idx = SQLiteMediaIndex(tmp_path / "i.sqlite3")
    sha = "ab" * 32
    idx.record_many([(ObjectRecord(sha256=sha, path=f"objects/ab/ab/{sha}.jpg", size=1), "k", "http://h/k")])
    with idx._write:  # a commit (and its fsync) in progress on another thread
        started = time.perf_counter()
        assert idx.lookup(key="k", url=None) is not None
        assert idx.lookup(key="missing", url="http://h/missing") is None
        # record() queues and returns; the next flush takes the row.
        idx.record(obj=ObjectRecord(sha256=sha, path=f"objects/ab/ab/{sha}.jpg", size=1), key="k2", url=None)
        assert time.perf_counter() - started < 1.0
        assert idx.lookup(key="k2", url=None) is not None  # seen from the queue
    idx.flush()
    assert idx.get(sha) is not None
    idx.close()


# --- committer --------------------------------------------------------------------------------------------------
def run_committer(store: ContentAddressedStore, index: SQLiteMediaIndex | None, jobs: list[CommitJob], *,
                  inline_bytes: int = settings.MEDIA_INLINE_CHECK_BYTES) -> tuple[BatchCommitter, list[CommitJob]]:
    """Commit ``jobs`` concurrently from coroutines on an asyncio loop; the jobs in the order they came back."""
    committer = BatchCommitter(store=store, index=index, max_image_pixels=10_000_000,
                               max_image_decode_bytes=settings.MEDIA_MAX_IMAGE_DECODE_BYTES,
                               max_batch=settings.MEDIA_COMMIT_BATCH, inline_bytes=inline_bytes)
    delivered: list[CommitJob] = []

    async def one(job: CommitJob) -> None:
        delivered.append(await committer.commit(job))

    async def scenario() -> None:
        await asyncio.gather(*(one(job) for job in jobs))
        await committer.close()

    loop = asyncio.new_event_loop()  # not asyncio.run: it would unset the event loop of the installed reactor
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 30))
    finally:
        loop.close()
    return committer, delivered


@STAGING
def test_committer_checks_stores_and_indexes_in_rounds(tmp_path: Path, inline_bytes: int) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    index = SQLiteMediaIndex(store.root / "index.sqlite3")
    base = encode("JPEG", (120, 80))
    jobs = [CommitJob(variant(base, n), kind="image", key=f"t/image/{n}", url=f"http://h/{n}.jpg")
            for n in range(60)]
    jobs.append(CommitJob(variant(base, 4), kind="image", key="t/image/again", url="http://h/again.jpg"))
    jobs.append(CommitJob(b"<!doctype html><title>no</title>", kind="image", key="t/image/html", url="http://h/x"))
    jobs.append(CommitJob(base[: len(base) // 2], kind="image", key="t/image/cut", url="http://h/cut.jpg"))
    committer, delivered = run_committer(store, index, jobs, inline_bytes=inline_bytes)
    assert sorted(map(id, delivered)) == sorted(map(id, jobs))
    ok = [j for j in jobs if j.error is None]
    assert len(ok) == 61
    assert sum(j.created for j in ok) == 60  # the twin is not written twice
    assert jobs[4].created is True and jobs[60].created is False  # the first of the twins is credited
    reasons = {getattr(j.error, "reason", None) for j in jobs if j.error is not None}
    assert reasons == {"not-media", "corrupt-image"}
    assert all(j.obj is not None and (j.obj.width, j.obj.height) == (120, 80) for j in ok)
    assert committer.rounds >= 1 and committer.committed == 61
    for job in ok:
        assert job.obj is not None
        assert index.lookup(key=job.key, url=None) == index.lookup(key=None, url=job.url)
        assert hash_file(store.root / job.obj.path) == (job.obj.sha256, job.obj.size)
    assert len(files_under(store.objects_dir)) == 60
    assert not list(store.tmp_dir.iterdir())
    index.close()
    store.close()


@STAGING
def test_committer_delivers_store_errors(tmp_path: Path, inline_bytes: int) -> None:
    store = ContentAddressedStore(tmp_path / "files")
    body = encode("JPEG")
    sha = hashlib.sha256(body).hexdigest()
    (store.objects_dir / sha[:2]).symlink_to(tmp_path, target_is_directory=True)  # planted: refused
    _, delivered = run_committer(store, None, [CommitJob(body, kind="image", key=None, url="http://h/1.jpg")],
                                 inline_bytes=inline_bytes)
    assert delivered[0].obj is None and type(delivered[0].error).__name__ == "StoreError"
    store.close()


CRASH_COMMITTER = textwrap.dedent(
    """
    import asyncio, io, os, sys
    from PIL import Image
    from mediacrawler import settings
    from mediacrawler.media.committer import BatchCommitter, CommitJob
    from mediacrawler.media.index import SQLiteMediaIndex
    from mediacrawler.media.store import ContentAddressedStore

    root, inline_bytes = sys.argv[1], int(sys.argv[2])
    store = ContentAddressedStore(root)
    index = SQLiteMediaIndex(os.path.join(root, "index.sqlite3"))
    buf = io.BytesIO()
    Image.effect_mandelbrot((160, 120), (-2, -1.5, 1, 1.5), 50).convert("RGB").save(buf, "JPEG")
    base = buf.getvalue()
    committer = BatchCommitter(store=store, index=index, max_image_pixels=settings.MEDIA_MAX_IMAGE_PIXELS,
                               max_image_decode_bytes=settings.MEDIA_MAX_IMAGE_DECODE_BYTES,
                               max_batch=settings.MEDIA_COMMIT_BATCH, inline_bytes=inline_bytes)

    async def one(n, room):
        # ~200 KiB each: the kill lands inside writes and syncs, not only between them. Keys are unique per attempt:
        # a later attempt may index a key (new bytes) and die before reporting it, which is not a lie of the first.
        try:
            job = await committer.commit(CommitJob(base + os.urandom(200_000 + n % 4096), kind="image",
                                                   key=f"k/{os.getpid()}/{n}", url=f"http://h/{n}.jpg"))
            if job.obj is not None:  # what a record would claim: printed only once the committer says it is done
                sys.stdout.write(f"done {job.obj.sha256} {job.key}\\n")
                sys.stdout.flush()
        finally:
            room.release()

    async def main():
        room = asyncio.Semaphore(256)
        print("ready", flush=True)
        tasks = set()
        n = 0
        while True:
            await room.acquire()
            task = asyncio.ensure_future(one(n, room))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
            await asyncio.sleep(0)  # bodies arrive one by one, as downloads do: rounds start small

    asyncio.run(main())
    """
)


@pytest.mark.slow
@STAGING
def test_kill_9_mid_round_leaves_no_partial_object_and_no_dangling_row(tmp_path: Path, inline_bytes: int) -> None:
    root = tmp_path / "files"
    claimed: dict[str, str] = {}
    for attempt in range(5):
        proc = subprocess.Popen([sys.executable, "-c", CRASH_COMMITTER, str(root), str(inline_bytes)],
                                stdout=subprocess.PIPE, cwd=Path(__file__).parents[1])
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == [b"ready"]
        time.sleep(0.4 + 0.13 * attempt)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        for line in out.decode().split("\n")[:-1]:  # the last line may have been cut by the kill
            if line.startswith("done "):
                _, sha, key = line.split()
                claimed[key] = sha
    assert claimed, "the committer finished nothing before being killed"
    store = ContentAddressedStore(root)
    # 1. Nothing partial under objects/: every file hashes to its name.
    objects = list(store.iter_objects())
    for rel in objects:
        assert hash_file(store.root / rel)[0] == Path(rel).name.split(".")[0], rel
    # 2. No index row points at a missing or different file.
    db = sqlite3.connect(root / "index.sqlite3")
    rows = db.execute("SELECT sha256, path, size FROM objects").fetchall()
    assert rows
    for sha, path, size in rows:
        assert hash_file(store.root / path) == (sha, size), path
    # 3. Every job reported done is indexed under its key and stored.
    indexed = dict(db.execute("SELECT key, sha256 FROM assets").fetchall())
    db.close()
    for key, sha in claimed.items():
        assert indexed.get(key) == sha, key
    # Leftovers only under tmp/, and a sweep removes them.
    store.sweep_tmp(older_than=0)
    assert not list(store.tmp_dir.glob("*.part"))
