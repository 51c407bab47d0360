"""Segmented Range downloads (mediacrawler.media.segments, .spool): pure checks, then real downloads.

The download tests run a real Scrapy engine (asyncio reactor) in a subprocess — this module run as a script, see
:func:`_main` — against the sandbox subprocess on 127.0.0.1: every segment is a real HTTP request through the
downloader middlewares, and every check is on real files (spool, ledger, store objects) and on the sandbox's own
request log. Blobs are a few MiB with small segments, so each run takes about a second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from scrapy import Spider

from mediacrawler.media.segments import (
    RemoteChanged,
    SegmentConfig,
    SegmentError,
    check_segment,
    stop_unranged_body,
)
from mediacrawler.media.spool import (
    CoalescingSaver,
    Ledger,
    LedgerError,
    ledger_path,
    load_ledger,
    parse_content_range,
    plan_segments,
    save_ledger,
    spool_dir_for,
    spool_path,
    sweep_spool,
)
from mediacrawler.media.store import ContentAddressedStore
from mediacrawler_sandbox.media import blob_read, blob_sha256
from mediacrawler_sandbox.process import SandboxProcess

ROOT = Path(__file__).resolve().parent.parent
KiB = 1024
MiB = 1024 * KiB


# --- pure parts ---------------------------------------------------------------------------------------------
def test_plan_segments_layout() -> None:
    assert plan_segments(total=0, first=4, segment_size=3) == []
    assert plan_segments(total=3, first=4, segment_size=3) == [(0, 3)]
    assert plan_segments(total=4, first=4, segment_size=3) == [(0, 4)]
    assert plan_segments(total=11, first=4, segment_size=3) == [(0, 4), (4, 7), (7, 10), (10, 11)]
    with pytest.raises(ValueError):
        plan_segments(total=10, first=0, segment_size=3)


def test_parse_content_range() -> None:
    assert parse_content_range("bytes 0-99/1000") == (0, 99, 1000)
    assert parse_content_range("bytes 5-9/*") == (5, 9, None)
    assert parse_content_range("bytes */1000") is None
    assert parse_content_range("bytes 9-5/1000") is None
    assert parse_content_range("bytes 0-1000/1000") is None
    assert parse_content_range(None) is None
    assert parse_content_range(b"bytes 0-0/1") == (0, 0, 1)  # raw header values too


def _check(**overrides: Any) -> None:
    args: dict[str, Any] = {"status": 206, "content_range": "bytes 100-199/1000", "etag": '"a"', "body_size": 100,
                            "flags": [], "start": 100, "end": 200, "total": 1000, "expected_etag": '"a"'}
    args.update(overrides)
    check_segment(**args)


def test_check_segment_accepts_exactly_the_asked_range() -> None:
    _check()
    _check(etag=None)  # no ETag on the answer: the If-Range header is what protects the spool


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"status": 416, "content_range": "bytes */1000", "body_size": 0}, "range-not-satisfiable"),
    ({"status": 200, "content_range": None, "body_size": 0}, "remote-changed"),
    ({"content_range": "bytes 100-199/2000"}, "remote-changed"),
    ({"etag": '"b"'}, "remote-changed"),
    ({"content_range": "bytes 100-149/1000", "body_size": 50}, "bad-content-range"),
    ({"content_range": "bytes 0-99/1000"}, "bad-content-range"),
    ({"content_range": None}, "bad-content-range"),
    ({"body_size": 60}, "short-segment"),
    ({"flags": ["dataloss"]}, "short-segment"),
    ({"status": 404, "content_range": None}, "http-404"),
])
def test_check_segment_rejects(overrides: dict[str, Any], reason: str) -> None:
    with pytest.raises(SegmentError) as info:
        _check(**overrides)
    assert info.value.reason == reason
    assert isinstance(info.value, RemoteChanged) == (reason == "remote-changed")


def test_stop_unranged_body_only_for_segments_without_content_range() -> None:
    from scrapy import Request
    from scrapy.exceptions import StopDownload
    from scrapy.http import Headers

    segment = Request("http://x/a", meta={"media_segment": {"probe": False}})
    probe = Request("http://x/a", meta={"media_segment": {"probe": True}})
    with pytest.raises(StopDownload):
        stop_unranged_body(Headers({"Content-Length": "9"}), 9, segment)
    stop_unranged_body(Headers({"Content-Range": "bytes 0-8/9"}), 9, segment)
    stop_unranged_body(Headers({"Content-Length": "9"}), 9, probe)
    stop_unranged_body(Headers({}), 9, Request("http://x/other"))


def test_spool_named_by_key_hash_not_remote_name(tmp_path: Path) -> None:
    path = spool_path(spool_dir=tmp_path, key="weibo/video/../../etc/passwd")
    assert path.parent == tmp_path and path.suffix == ".part" and len(path.stem) == 64
    assert ledger_path(path).name == path.name + ".json"
    assert spool_dir_for("file:///data/files") == Path("/data/files/spool")


def test_segment_config_validates() -> None:
    with pytest.raises(ValueError):
        SegmentConfig(size=0)
    with pytest.raises(ValueError):
        SegmentConfig(max_restarts=-1)


def test_ledger_round_trip_and_atomic_save(tmp_path: Path) -> None:
    path = tmp_path / "x.part.json"
    ledger = Ledger(key="k", url="http://x/a", total=11, first=4, segment_size=3, etag='"e"',
                    last_modified="Sun, 01 Nov 2026 00:00:00 GMT", done={0, 2})
    save_ledger(path, ledger)
    loaded = load_ledger(path, key="k")
    assert loaded is not None and loaded.done == {0, 2} and loaded.missing() == [1, 3]
    assert loaded.done_bytes() == 7 and loaded.contiguous_end() == 4 and loaded.if_range == '"e"'
    assert [p.name for p in tmp_path.iterdir()] == ["x.part.json"]  # no temp file left behind
    assert load_ledger(path, key="other") is None
    weak = Ledger(key="k", url="u", total=1, first=1, segment_size=1, etag='W/"e"', last_modified="LM")
    assert weak.if_range == "LM"  # weak ETags are not allowed in If-Range


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"version": 99}',
                                     b'{"version":1,"key":"k","url":"u","total":5,"first":2,"segment_size":2,'
                                     b'"etag":null,"last_modified":null,"done":[7]}'])
def test_untrustworthy_ledger_is_ignored(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.part.json"
    path.write_bytes(content)
    assert load_ledger(path, key="k") is None
    with pytest.raises((LedgerError, ValueError)):
        Ledger.from_json(json.loads(content) if content != b"{" else None)


def test_stray_temps_of_one_ledger_are_removed_and_nothing_else(tmp_path: Path) -> None:
    from mediacrawler.fsutil import remove_stray_temps, write_atomic

    ours, other = tmp_path / "a.part.json", tmp_path / "b.part.json"
    write_atomic(ours, b"{}")
    names = [f".{ours.name}.x1.tmp", f".{ours.name}.x2.tmp", f".{other.name}.x3.tmp", "a.part", ".a.part.json"]
    for name in names:
        (tmp_path / name).write_bytes(b"left by a killed save")
    assert remove_stray_temps(ours) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([ours.name, *names[2:]])
    assert ours.read_bytes() == b"{}" and remove_stray_temps(tmp_path / "missing" / "x.json") == 0


def test_a_second_download_of_a_spool_never_touches_it(tmp_path: Path) -> None:
    from mediacrawler.media.segments import SpoolResult, _Download

    class NoCrawl:  # what _Download reads of a crawler before any request
        stats = None

    def download() -> _Download:
        return _Download(url="http://127.0.0.1:9/v", key="test/video/1", crawler=NoCrawl(),  # type: ignore[arg-type]
                         spool=spool_path(spool_dir=tmp_path, key="test/video/1"), config=SegmentConfig(),
                         headers=None, resolve=None, run=store.run)

    store = ContentAddressedStore(tmp_path / "files")  # nothing here runs on its executor
    first, second = download(), download()
    fd = first._lock_spool()
    os.pwrite(fd, b"segment bytes", 0)
    save_ledger(first.ledger_file, Ledger(key="test/video/1", url="u", total=13, first=13, segment_size=13))
    with pytest.raises(SegmentError) as busy:
        second._lock_spool()
    assert busy.value.reason == "spool-busy"
    # The refused download neither truncated the spool nor touched its ledger (it used to open with O_TRUNC).
    assert first.spool.read_bytes() == b"segment bytes" and first.ledger_file.exists()
    result = SpoolResult(path=first.spool, size=13, sha256="0" * 64, head=b"", segments=1, fetched_bytes=13,
                         resumed_bytes=0, restarts=0, resolves=0)
    handed = first._hand_over(result)
    first._close()
    # The complete file now has a name of its own: a new download starts a new spool and cannot reach it.
    assert handed.path.name.endswith(".done") and handed.path.read_bytes() == b"segment bytes"
    assert not first.spool.exists() and not first.ledger_file.exists()
    fd2 = second._lock_spool()
    assert os.fstat(fd2).st_size == 0 and handed.path.read_bytes() == b"segment bytes"
    second._close()


def test_memory_budget_lends_within_its_budget_first_come_first_served() -> None:
    from mediacrawler.media.segments import MemoryBudget

    async def scenario() -> None:
        pool = MemoryBudget(budget=10)
        a, b = pool.request(4), pool.request(4)
        assert a.done() and b.done() and pool.lent == 8
        c, d = pool.request(4), pool.request(1)  # c does not fit; d would, but waits behind c (no overtaking)
        assert not c.done() and not d.done() and pool.waits == 2
        pool.give_back(4)
        assert c.done() and d.done() and pool.lent == 9 and pool.peak == 9
        alone = MemoryBudget(budget=10)
        big = alone.request(64)  # larger than the budget: granted when nothing else is lent, so it progresses
        assert big.done() and alone.lent == 64
        assert not alone.request(1).done()

    _run_on_own_loop(scenario())


def test_sweep_removes_only_stale_unlocked_spools(tmp_path: Path) -> None:
    from mediacrawler.media.spool import lock_path, video_dir_for

    old = time.time() - 3600
    stale, busy, fresh = (spool_path(spool_dir=tmp_path, key=k) for k in ("stale", "busy", "fresh"))
    for spool in (stale, busy, fresh):
        spool.write_bytes(b"x")
        save_ledger(ledger_path(spool), Ledger(key="k", url="u", total=1, first=1, segment_size=1))
    video = video_dir_for(tmp_path, key="old video")
    (video / "video").mkdir(parents=True)  # no lock file: the sweep's own lock must not make it look fresh
    leftovers = [tmp_path / f"{stale.name}.1.ab.done", tmp_path / ".x.part.json.y.tmp"]
    for path in leftovers:
        path.write_bytes(b"x")
    for path in [stale, ledger_path(stale), busy, ledger_path(busy), video, *leftovers]:
        os.utime(path, (old, old))
    fd = lock_path(busy)  # in use by a download: never swept, however old
    assert fd is not None and lock_path(busy) is None
    try:
        assert sweep_spool(tmp_path, older_than=60) == 4
    finally:
        os.close(fd)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([busy.name, ledger_path(busy).name, fresh.name, ledger_path(fresh).name])
    assert sweep_spool(tmp_path / "missing", older_than=0) == 0


def _run_on_own_loop(coro: Any) -> Any:
    # Not asyncio.run: that would unset the event loop of the reactor conftest installed (see test_pipeline_dedupe).
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, 10))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def test_saver_reports_a_generation_saved_only_once_a_save_includes_it(tmp_path: Path) -> None:
    """What segment workers wait for before their next request: ``saved(n)`` returns after the save of a snapshot
    taken after request ``n``, not after a save that was already under way, and raises a failed save's error."""
    state = {"value": 0}
    saved_values: list[int] = []
    release = threading.Event()

    def save(snapshot: int) -> None:
        assert release.wait(5), "never released"
        if snapshot < 0:
            raise OSError(28, "No space left on device")
        saved_values.append(snapshot)

    async def scenario() -> list[Any]:
        saver = CoalescingSaver(snapshot=lambda: state["value"], save=save, run=store.run)
        events: list[Any] = []
        state["value"] = 1
        first = saver.request()  # the pass saving 1 starts and blocks in save()
        await asyncio.sleep(0.05)
        state["value"] = 2
        second = saver.request()  # made while that pass runs: only the next pass covers it

        async def wait(name: str, generation: int) -> None:
            await saver.saved(generation)
            events.append((name, list(saved_values)))  # what had been saved when it returned

        waits = [asyncio.ensure_future(wait("first", first)), asyncio.ensure_future(wait("second", second))]
        await asyncio.sleep(0.05)
        assert events == []  # nothing is reported saved before a save has finished
        release.set()
        await asyncio.gather(*waits)
        await saver.saved(second)  # already saved: returns at once
        state["value"] = -1  # the next save fails
        third = saver.request()
        try:
            await saver.saved(third)
        except OSError as exc:
            events.append(f"error {exc.errno}")
        with contextlib.suppress(OSError):
            await saver.flush()
        return events

    store = ContentAddressedStore(tmp_path / "files")  # its executor runs the saves
    try:
        first, second, error = _run_on_own_loop(scenario())
    finally:
        store.close()
    assert first[0] == "first" and 1 in first[1]
    assert second == ("second", [1, 2])  # not released by the save of 1 that was under way when it asked
    assert error == "error 28"
    assert saved_values == [1, 2]


@pytest.mark.parametrize("where", ["disk", "tmpfs"])
@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "buffered"])
def test_hasher_writes_and_hashes_in_file_order_from_memory_or_disk(tmp_path: Path, where: str,
                                                                   direct: bool) -> None:
    """The spool writer and hash (docs/media.md, "Spool writes"): segments written out of order through O_DIRECT
    (or buffered, where O_DIRECT is refused: ``open_direct`` gives ``None``) from page-aligned buffers, hashed from
    memory when offered in turn, read back from disk when not (a resumed prefix, a released offer); the unaligned
    tail goes buffered. The file and the digest are those of the content either way."""
    import hashlib
    import mmap

    from mediacrawler.fsutil import DIRECT_ALIGN, open_direct
    from mediacrawler.media.segment_buffers import OrderedHasher as _OrderedHasher

    base = Path("/dev/shm") if where == "tmpfs" else tmp_path
    if not base.is_dir():
        pytest.skip("no /dev/shm")
    path = base / f"hasher-{os.getpid()}-{direct}.part"
    seg = 64 * KiB
    content = os.urandom(5 * seg + 1000)  # five aligned segments and an unaligned tail
    segments = [(i, min(i + seg, len(content))) for i in range(0, len(content), seg)]
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    direct_fd = open_direct(path) if direct else None
    os.ftruncate(fd, len(content))

    def buffer(start: int, end: int) -> memoryview:
        m = mmap.mmap(-1, seg)  # page-aligned, as BufferPool's
        m[: end - start] = content[start:end]
        return memoryview(m)[: end - start]

    async def scenario() -> str:
        hasher = _OrderedHasher(fd, run=store.run, direct_fd=direct_fd)
        os.pwrite(fd, content[:seg], 0)  # segment 0 on disk from an earlier run: read back
        hasher.advance(seg)
        views = {s: buffer(s, e) for s, e in segments[1:]}
        for start in (segments[2][0], segments[1][0], segments[3][0]):
            await store.run(lambda s=start: hasher.write(views[s], s, aligned=True))
        later = [hasher.offer(views[segments[2][0]], segments[2][0]),
                 hasher.offer(views[segments[3][0]], segments[3][0])]
        await asyncio.sleep(0)
        assert not any(f.done() for f in later)  # they wait for segment 1
        await hasher.offer(views[segments[1][0]], segments[1][0])
        await asyncio.gather(*later)
        hasher.advance(segments[3][1])
        await store.run(lambda: hasher.write(views[segments[5][0]], segments[5][0], aligned=True))
        waiting = hasher.offer(views[segments[5][0]], segments[5][0])  # behind the missing segment 4
        hasher.release()  # as when segment 4's worker fails: segment 5 is read back later
        await waiting
        hasher.hold()
        await store.run(lambda: hasher.write(views[segments[4][0]], segments[4][0], aligned=True))
        await hasher.offer(views[segments[4][0]], segments[4][0])
        digest = await hasher.finish(len(content))
        written = 4 * seg + (len(content) - 5 * seg) // DIRECT_ALIGN * DIRECT_ALIGN
        assert hasher.direct_bytes == (written if direct_fd is not None else 0)
        return digest

    store = ContentAddressedStore(tmp_path / "files")
    try:
        digest = _run_on_own_loop(scenario())
    finally:
        store.close()
        os.close(fd)
        if direct_fd is not None:
            os.close(direct_fd)
    try:
        assert path.read_bytes() == content
        assert digest == hashlib.sha256(content).hexdigest()
    finally:
        path.unlink()


# --- the driver: a real crawl running one segmented download -------------------------------------------------
class SegmentSpider(Spider):
    """Downloads one asset with :class:`SegmentedDownloader` from ``start()``, publishes it into the store, and
    writes what happened to ``out`` (JSON)."""

    name = "segments_driver"

    def __init__(self, *args: Any, url: str = "", key: str = "", out: str = "", publish: str = "1",
                 resolvable: str = "0", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.url, self.key, self.out = url, key, out
        self.publish, self.resolvable = publish == "1", resolvable == "1"
        self.resolved: list[str] = []

    async def refresh_media_url(self, *, key: str, url: str) -> str | None:
        """Like a spider re-reading the post: the same asset under a freshly signed URL."""
        if not self.resolvable:
            return None
        fresh = f"{url.split('&sig=')[0]}&sig={len(self.resolved) + 1}"
        self.resolved.append(fresh)
        return fresh

    async def start(self) -> AsyncIterator[Any]:
        from mediacrawler.media.segments import SegmentedDownloader

        settings = self.crawler.settings
        store = ContentAddressedStore(settings.get("FILES_STORE"), fsync=settings.getbool("MEDIA_FSYNC"))
        downloader = SegmentedDownloader(self.crawler, store=store)
        out: dict[str, Any] = {"ok": False}
        try:
            result = await downloader.download(self.url, key=self.key, headers={"Referer": "http://sandbox/"})
            out["result"] = {k: getattr(result, k) for k in ("size", "sha256", "segments",
                                                             "fetched_bytes", "resumed_bytes", "restarts",
                                                             "resolves")}
            if self.publish:
                persisted = await downloader.publish(result)
                out["persisted"] = {"relpath": persisted.relpath, "sha256": persisted.sha256,
                                    "size": persisted.size}
            out["ok"] = True
        except SegmentError as exc:
            out.update(reason=exc.reason, detail=str(exc))
        assert self.crawler.stats is not None
        out["stats"] = {k: v for k, v in self.crawler.stats.get_stats().items()
                        if k.startswith(("media/", "retry/", "downloader/response_status_count"))}
        out["resolved"] = self.resolved
        assert self.crawler.engine is not None
        out["slots"] = {k: v.delay for k, v in self.crawler.engine.downloader.slots.items()}
        tmp = self.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(out, f)
        os.replace(tmp, self.out)
        return
        yield  # an async generator that yields nothing: the work is the download above


def _main() -> None:
    from scrapy.crawler import CrawlerProcess

    sys.path.insert(0, str(ROOT))
    from tests.utils import project_settings_dict

    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--publish", default="1")
    parser.add_argument("--resolvable", default="0")
    parser.add_argument("-s", dest="settings", action="append", default=[], help="NAME=VALUE")
    args = parser.parse_args()
    settings = project_settings_dict(
        DOWNLOAD_DELAY=0, AUTOTHROTTLE_ENABLED=False, RANDOMIZE_DOWNLOAD_DELAY=False, LOG_LEVEL="INFO",
        CONCURRENT_REQUESTS_PER_DOMAIN=16, ITEM_PIPELINES={}, TELNETCONSOLE_ENABLED=False)
    settings.pop("ADDONS", None)
    for pair in args.settings:
        name, _, value = pair.partition("=")
        settings[name] = value
    process = CrawlerProcess(settings, install_root_handler=True)
    process.crawl(SegmentSpider, url=args.url, key=args.key, out=args.out, publish=args.publish,
                  resolvable=args.resolvable)
    process.start()


def driver_command(*, url: str, key: str, out: Path, store: Path, settings: dict[str, Any] | None = None,
                   publish: bool = True, resolvable: bool = False) -> list[str]:
    """The command line of one driver run (also used by test_segments_kill_resume)."""
    command = [sys.executable, "-m", "tests.test_media_segments", "--url", url, "--key", key, "--out", str(out),
               "--publish", "1" if publish else "0", "--resolvable", "1" if resolvable else "0",
               "-s", f"FILES_STORE={store}"]
    for name, value in (settings or {}).items():
        command += ["-s", f"{name}={value}"]
    return command


SMALL = {"MEDIA_SEGMENT_THRESHOLD": 256 * KiB, "MEDIA_SEGMENT_SIZE": 256 * KiB, "MEDIA_SEGMENT_CONCURRENCY": 3}


def run_driver(tmp_path: Path, *, url: str, key: str = "test/video/1", settings: dict[str, Any] | None = None,
               publish: bool = True, resolvable: bool = False, timeout: float = 60) -> dict[str, Any]:
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.json"
    command = driver_command(url=url, key=key, out=out, store=tmp_path / "store",
                             settings={**SMALL, **(settings or {})}, publish=publish, resolvable=resolvable)
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), f"driver wrote nothing (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    result["log"] = proc.stderr
    return result


def blob_url(sandbox: SandboxProcess, name: str, size: int) -> str:
    return f"{sandbox.url}/media/blob/{name}?size={size}"


def stored_file(tmp_path: Path, outcome: dict[str, Any]) -> Path:
    return tmp_path / "store" / outcome["persisted"]["relpath"]


def spool_files(tmp_path: Path) -> list[str]:
    spool = tmp_path / "store" / "spool"
    return sorted(p.name for p in spool.iterdir()) if spool.exists() else []


def media_log(sandbox: SandboxProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in sandbox.requests() if e["path"] == f"/media/blob/{name}" and e["method"] == "GET"]


def sha256_file(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


# --- real downloads against the sandbox ----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "o_direct"])
def test_clean_segmented_download_is_byte_identical(fresh_sandbox: SandboxProcess, tmp_path: Path,
                                                     direct: bool) -> None:
    size = 3 * MiB + 12345
    # A spool a crawl abandoned a month ago: swept when the downloader opens (MEDIA_SPOOL_MAX_AGE, 7 days).
    stale = spool_path(spool_dir=tmp_path / "store" / "spool", key="gone/video/1")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"abandoned")
    save_ledger(ledger_path(stale), Ledger(key="gone/video/1", url="u", total=9, first=9, segment_size=9))
    month_ago = time.time() - 30 * 24 * 3600
    for path in (stale, ledger_path(stale)):
        os.utime(path, (month_ago, month_ago))
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, "clean", size),
                         settings={"MEDIA_SEGMENT_LOG_INTERVAL": 0.000001, "MEDIA_SEGMENT_DIRECT": direct})
    assert outcome["ok"], outcome
    # A progress line per segment here (an interval of a microsecond), the last one at 100%.
    progress = [line for line in outcome["log"].splitlines() if "Downloading test/video/1: " in line]
    assert len(progress) == 12 and "3.0 of 3.0 MiB (100%), 13 of 13 segments, " in progress[-1]
    expected = blob_sha256("clean", size)
    assert outcome["result"]["sha256"] == expected and outcome["persisted"]["sha256"] == expected
    assert sha256_file(stored_file(tmp_path, outcome)) == expected
    assert outcome["result"]["segments"] == 13
    assert spool_files(tmp_path) == []  # no .part, no ledger after success, and the stale spool swept
    assert "Swept 1 stale download spools" in outcome["log"]
    log = media_log(fresh_sandbox, "clean")
    assert {e["status"] for e in log} == {206}
    assert sum(e["bytes"] for e in log) == size  # every byte exactly once
    assert log[0]["range"] == "bytes=0-262143" and log[0]["if_range"] is None
    assert len({e["if_range"] for e in log[1:]}) == 1 and log[1]["if_range"].startswith('"')
    assert outcome["stats"]["media/segments/completed"] == 1
    assert outcome["result"]["fetched_bytes"] == size
    # With MEDIA_SEGMENT_DIRECT on, past the probe, every segment's aligned part went through O_DIRECT where the
    # filesystem takes it (the 12,345-byte last segment's 57 unaligned bytes buffered); off, none did.
    from mediacrawler.fsutil import open_direct

    probe = tmp_path / "direct-probe"
    probe.touch()
    direct_fd = open_direct(probe)
    if direct_fd is not None:
        os.close(direct_fd)
    assert outcome["stats"].get("media/segments/direct_bytes", 0) == (
        11 * 256 * KiB + 12288 if direct and direct_fd is not None else 0)


@pytest.mark.slow
def test_segment_buffers_stay_within_the_crawl_memory_budget(fresh_sandbox: SandboxProcess,
                                                              tmp_path: Path) -> None:
    # Three workers, but a budget of two buffers: the third waits for one, and the file is still right.
    size = 3 * MiB
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, "budget", size),
                         settings={"MEDIA_SEGMENT_MEMORY": 2 * 256 * KiB})
    assert outcome["ok"], outcome
    assert outcome["result"]["sha256"] == blob_sha256("budget", size)
    assert outcome["stats"]["media/segments/buffer_waits"] >= 1
    assert outcome["stats"]["media/segments/buffer_peak_bytes"] == 2 * 256 * KiB


@pytest.mark.slow
def test_a_file_above_the_size_cap_is_refused_after_the_probe(fresh_sandbox: SandboxProcess,
                                                              tmp_path: Path) -> None:
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, "huge", 3 * MiB),
                         settings={"MEDIA_SEGMENT_MAX_FILE_SIZE": 2 * MiB})
    assert not outcome["ok"] and outcome["reason"] == "too-large", outcome
    assert "MEDIA_SEGMENT_MAX_FILE_SIZE" in outcome["detail"]
    assert len(media_log(fresh_sandbox, "huge")) == 1  # the probe only
    assert spool_files(tmp_path) == []


@pytest.mark.slow
def test_segments_are_not_paced_like_the_api(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    # The API's politeness (DOWNLOAD_DELAY 2 s + AutoThrottle) would cost 22 s or more for these 12 requests;
    # media requests run in their own slot, paced by MEDIA_DOWNLOAD_DELAY (0).
    size = 3 * MiB
    started = time.monotonic()
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, "paced", size),
                         settings={"DOWNLOAD_DELAY": 2, "AUTOTHROTTLE_ENABLED": True})
    elapsed = time.monotonic() - started
    assert outcome["ok"], outcome["log"][-3000:]
    assert outcome["slots"] == {"media:127.0.0.1": 0.0}
    assert len(media_log(fresh_sandbox, "paced")) == 12 and elapsed < 15


@pytest.mark.slow
def test_cut_connections_on_a_share_of_segments(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size = 4 * MiB
    fresh_sandbox.set_faults(media_cut_rate=0.3)
    # RETRY_TIMES is the only retry count of a segment (no second loop on top of RetryMiddleware's).
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, "cuts", size), settings={"RETRY_TIMES": 4})
    assert outcome["ok"], outcome["log"][-3000:]
    assert sha256_file(stored_file(tmp_path, outcome)) == blob_sha256("cuts", size)
    log = media_log(fresh_sandbox, "cuts")
    assert any(e["aborted"] for e in log), "the sandbox cut no connection: the test tested nothing"
    assert fresh_sandbox.stats()["cuts"] >= 2
    assert spool_files(tmp_path) == []


@pytest.mark.slow
def test_every_segment_cut_is_an_error_not_a_file(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size = 1 * MiB
    fresh_sandbox.set_faults(media_cut_rate=1.0)
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, "allcut", size),
                         settings={"RETRY_TIMES": 1})
    assert not outcome["ok"] and outcome["reason"] == "dataloss", outcome
    # One retry count per body: the probe was tried RETRY_TIMES + 1 times, not once more per layer.
    assert len(media_log(fresh_sandbox, "allcut")) == 2
    assert not (tmp_path / "store" / "objects").exists() or not any((tmp_path / "store" / "objects").rglob("*.*"))


@pytest.mark.slow
def test_a_failed_piece_is_one_warning_with_its_reason_and_no_error(fresh_sandbox: SandboxProcess,
                                                                    tmp_path: Path) -> None:
    fresh_sandbox.set_faults(media_cut_rate=1.0)
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, "onewarn", MiB), key="test/video/w",
                         settings={"RETRY_TIMES": 1})
    assert not outcome["ok"] and outcome["reason"] == "dataloss", outcome
    lines = outcome["log"].splitlines()
    warnings = [line for line in lines if "WARNING" in line and "test/video/w" in line]
    assert warnings == [w for w in warnings if "Media piece test/video/w bytes 0-262143 failed: dataloss" in w]
    assert len(warnings) == 1, warnings
    assert not [line for line in lines if "Gave up retrying" in line and "DEBUG" not in line]
    assert not [line for line in lines if " ERROR" in line or "ERROR:" in line]
    assert "?size=" not in warnings[0]  # by key and range, never the URL


@pytest.mark.slow
def test_a_stalled_body_times_out_and_is_tried_again_once(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    # The probe's connection goes silent half-way (left open): DOWNLOAD_TIMEOUT ends it, RetryMiddleware tries it
    # again, and that is the only retry count there is.
    size, name = 1 * MiB, "stall"
    fresh_sandbox.set_faults(media_stall_paths={f"/media/blob/{name}": 1}, media_cut_fraction=0.5)
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, name, size),
                         settings={"DOWNLOAD_TIMEOUT": 1.5, "RETRY_TIMES": 1})
    assert outcome["ok"], outcome["log"][-3000:]
    assert sha256_file(stored_file(tmp_path, outcome)) == blob_sha256(name, size)
    assert fresh_sandbox.stats()["stalls"] == 1
    assert outcome["stats"]["retry/count"] == 1
    assert outcome["stats"]["retry/reason_count/scrapy.exceptions.DownloadTimeoutError"] == 1
    assert len(media_log(fresh_sandbox, name)) == 1 + 4  # the stalled probe, then probe + 3 segments


@pytest.mark.slow
def test_failed_run_resumes_with_only_the_missing_bytes(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size, name = 4 * MiB, "resume"
    url = blob_url(fresh_sandbox, name, size)
    # Run 1: a connection is cut part-way (the sandbox's cut stream with seed 1 spares the first five requests)
    # and nothing retries it; the segments already in stay in the ledger.
    fresh_sandbox.set_faults(media_cut_rate=0.1)
    first = run_driver(tmp_path, url=url, settings={"MEDIA_SEGMENT_CONCURRENCY": 1, "RETRY_TIMES": 0})
    assert not first["ok"] and first["reason"] == "dataloss", first
    spool = spool_path(spool_dir=tmp_path / "store" / "spool", key="test/video/1")
    ledger = load_ledger(ledger_path(spool), key="test/video/1")
    assert ledger is not None and 0 < len(ledger.done) < len(ledger.segments())
    # Run 2: only what is missing crosses the wire, each request validated with If-Range.
    fresh_sandbox.reset()
    second = run_driver(tmp_path, url=url)
    assert second["ok"], second["log"][-3000:]
    assert sha256_file(stored_file(tmp_path, second)) == blob_sha256(name, size)
    log = media_log(fresh_sandbox, name)
    assert sum(e["bytes"] for e in log) == size - ledger.done_bytes()
    assert all(e["if_range"] == ledger.etag for e in log) and {e["status"] for e in log} == {206}
    assert second["result"]["resumed_bytes"] == ledger.done_bytes()
    assert spool_files(tmp_path) == []


def _half_spool(tmp_path: Path, *, name: str, size: int, etag: str, generation: int = 0,
                total: int | None = None) -> Ledger:
    """A spool + ledger as a crashed run leaves them: the first half of the segments in place."""
    spool = spool_path(spool_dir=tmp_path / "store" / "spool", key="test/video/1")
    spool.parent.mkdir(parents=True, exist_ok=True)
    total = size if total is None else total
    ledger = Ledger(key="test/video/1", url="http://old/", total=total, first=256 * KiB,
                    segment_size=256 * KiB, etag=etag)
    with open(spool, "wb") as f:
        f.truncate(total)
        for index, (start, end) in enumerate(ledger.segments()):
            if end <= size and index < len(ledger.segments()) // 2:
                f.seek(start)
                f.write(blob_read(name, start, end - start, generation))
                ledger.done.add(index)
    save_ledger(ledger_path(spool), ledger)
    return ledger


def _etag(sandbox: SandboxProcess, url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as response:
        return str(response.headers["ETag"])


@pytest.mark.slow
def test_changed_etag_restarts_cleanly(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size, name = 2 * MiB, "flip"
    url = blob_url(fresh_sandbox, name, size)
    _half_spool(tmp_path, name=name, size=size, etag=_etag(fresh_sandbox, url))
    fresh_sandbox.set_faults(media_etag_generation=1)  # "the file changed" between the runs
    outcome = run_driver(tmp_path, url=url)
    assert outcome["ok"], outcome["log"][-3000:]
    assert outcome["result"]["restarts"] == 1
    assert sha256_file(stored_file(tmp_path, outcome)) == blob_sha256(name, size, generation=1)
    log = media_log(fresh_sandbox, name)
    # One request with the stale If-Range got a 200 (its body stopped at the headers, see stop_unranged_body),
    # then a clean restart.
    assert log[0]["status"] == 200 and log[0]["if_range"] is not None
    assert [e["status"] for e in log[1:]] == [206] * 8
    assert sum(e["bytes"] for e in log[1:]) == size
    assert spool_files(tmp_path) == []


@pytest.mark.slow
def test_server_ignoring_range_is_one_download(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size, name = 1 * MiB + 7, "norange"
    fresh_sandbox.set_faults(media_ignore_range=True)
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, name, size))
    assert outcome["ok"], outcome["log"][-3000:]
    assert outcome["result"]["segments"] == 1  # one response: not segmented
    assert sha256_file(stored_file(tmp_path, outcome)) == blob_sha256(name, size)
    assert "Server ignores Range" in outcome["log"]
    assert outcome["stats"]["media/segments/ranges_ignored"] == 1
    assert len(media_log(fresh_sandbox, name)) == 1


@pytest.mark.slow
def test_416_is_an_error_not_complete(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size, name = 1 * MiB, "short"
    url = blob_url(fresh_sandbox, name, size)
    # A ledger that believes the file is longer than it is (same validator): the tail segments get 416.
    _half_spool(tmp_path, name=name, size=size, etag=_etag(fresh_sandbox, url), total=2 * size)
    outcome = run_driver(tmp_path, url=url)
    assert not outcome["ok"] and outcome["reason"] == "range-not-satisfiable", outcome
    assert not (tmp_path / "store" / "objects").exists() or not any((tmp_path / "store" / "objects").rglob("*.*"))


@pytest.mark.slow
def test_expired_url_is_re_resolved_keeping_segments(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    size, name = 3 * MiB, "signed"
    fresh_sandbox.set_faults(media_errors=[{"status": 403, "path": f"/media/blob/{name}", "rate": 0.2}])
    outcome = run_driver(tmp_path, url=blob_url(fresh_sandbox, name, size) + "&sig=0", resolvable=True,
                         settings={"MEDIA_SEGMENT_MAX_RESOLVES": 10})
    assert outcome["ok"], outcome["log"][-3000:]
    assert outcome["result"]["resolves"] >= 1 and outcome["resolved"]
    assert sha256_file(stored_file(tmp_path, outcome)) == blob_sha256(name, size)
    log = media_log(fresh_sandbox, name)
    assert sum(e["bytes"] for e in log if e["status"] == 206) == size  # nothing fetched twice
    assert any(e["query"].endswith("&sig=1") for e in log)


@pytest.mark.slow
def test_expired_url_without_resolver_fails_and_keeps_the_spool(fresh_sandbox: SandboxProcess,
                                                                 tmp_path: Path) -> None:
    size, name = 2 * MiB, "expired"
    url = blob_url(fresh_sandbox, name, size)
    _half_spool(tmp_path, name=name, size=size, etag=_etag(fresh_sandbox, url))
    fresh_sandbox.set_faults(media_errors=[{"status": 410, "path": f"/media/blob/{name}"}])
    outcome = run_driver(tmp_path, url=url)
    assert not outcome["ok"] and outcome["reason"] == "expired", outcome
    assert len(spool_files(tmp_path)) == 2  # spool + ledger kept for the next run


if __name__ == "__main__":
    _main()
