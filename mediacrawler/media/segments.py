"""Large files as HTTP Range segments into a resumable spool, and the one retry policy of bodies fetched in pieces
(:func:`download_piece`): docs/media.md, "Large files and video: the download layer".
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import StopDownload
from scrapy.http import Headers, Request, Response
from scrapy.http.request import NO_CALLBACK

from mediacrawler.config import default, setting
from mediacrawler.contracts import META_BODY_SINK, META_SEGMENT, META_VIDEO, download_error_reason
from mediacrawler.fsutil import free_bytes, open_direct, remove_stray_temps
from mediacrawler.media.segment_buffers import (
    BufferPool,
    MemoryBudget,
    OrderedHasher,
    SegmentBuffer,
    SegmentError,
    write_at,
)
from mediacrawler.media.sniff import SNIFF_BYTES
from mediacrawler.media.spool import (
    CoalescingSaver,
    Runner,
    Ledger,
    drain,
    ledger_path,
    load_ledger,
    lock_path,
    parse_content_range,
    remove_spool,
    save_ledger,
    spool_dir_for,
    spool_path,
    sweep_spool,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from mediacrawler.media.store import ContentAddressedStore, Persisted

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
_EXPIRED_STATUSES = frozenset({403, 410})  # an expired signed URL

#: ``resolve(url)`` → a fresh URL for the same asset, or ``None`` when it cannot be re-resolved.
Resolver = Callable[[str], Awaitable[str | None]]


class RemoteChanged(SegmentError):
    """The remote file is not the version the spool holds (new ETag, new total, 200 instead of 206)."""

    def __init__(self, detail: str) -> None:
        super().__init__("remote-changed", detail)


class _Expired(SegmentError):
    def __init__(self, status: int) -> None:
        super().__init__("expired", f"HTTP {status}")
        self.status = status


async def download_piece(crawler: Crawler, request: Request,
                         problem: Callable[[Response], str | None]) -> Response:
    """Download one piece through Scrapy, retrying a response that ``problem`` finds wrong in the same
    ``retry_times`` count (docs/media.md, "One retry count per body"); the last response, for the caller.

    A piece that stays bad is one WARNING here, with the reason; Scrapy's "Gave up retrying" goes to DEBUG (the
    ``give_up_log_level`` of RetryMiddleware and get_retry_request), so one failed piece is never also an ERROR.
    """
    assert crawler.engine is not None
    request.meta.setdefault("give_up_log_level", "DEBUG")
    try:
        response = await crawler.engine.download_async(request)
        why = None
        for _ in range(setting(crawler.settings, "RETRY_TIMES") + 1):  # bounded; get_retry_request stops earlier
            why = problem(response)
            retry = get_retry_request(response.request or request, spider=crawler.spider, reason=why,
                                      give_up_log_level="DEBUG") if why else None
            if retry is None:
                break
            response = await crawler.engine.download_async(retry)
    except Exception as exc:
        logger.warning("Media piece %s failed: %s: %s", _piece_name(request), download_error_reason(exc),
                       type(exc).__name__)
        raise
    if why or (response.status >= 400 and response.status not in _EXPIRED_STATUSES):
        logger.warning("Media piece %s failed: %s", _piece_name(request), why or f"http-{response.status}")
    return response


def _piece_name(request: Request) -> str:
    """A piece for a log line by asset key and place, never by its URL (signed URLs carry tokens)."""
    spec = request.meta.get(META_SEGMENT) or request.meta.get(META_VIDEO) or {}
    if "start" in spec:
        return f"{spec.get('key')} bytes {spec['start']}-{spec['end'] - 1}"
    return f"{spec.get('key')} {spec.get('track') or ''} #{spec.get('index')}"


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    """The MEDIA_SEGMENT_* settings (and MEDIA_FSYNC), checked."""

    threshold: int = default("MEDIA_SEGMENT_THRESHOLD")
    size: int = default("MEDIA_SEGMENT_SIZE")
    concurrency: int = default("MEDIA_SEGMENT_CONCURRENCY")
    max_restarts: int = default("MEDIA_SEGMENT_MAX_RESTARTS")
    max_resolves: int = default("MEDIA_SEGMENT_MAX_RESOLVES")
    max_file_size: int = default("MEDIA_SEGMENT_MAX_FILE_SIZE")
    memory: int = default("MEDIA_SEGMENT_MEMORY")
    log_interval: float = default("MEDIA_SEGMENT_LOG_INTERVAL")
    direct: bool = default("MEDIA_SEGMENT_DIRECT")
    fsync: bool = default("MEDIA_FSYNC")

    def __post_init__(self) -> None:
        for name in ("threshold", "size", "concurrency", "max_file_size", "memory"):
            if getattr(self, name) < 1:
                raise ValueError(f"MEDIA_SEGMENT_{name.upper()} must be at least 1")
        for name in ("max_restarts", "max_resolves", "log_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"MEDIA_SEGMENT_{name.upper()} must not be negative")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SegmentConfig:
        """Read the settings; ``ValueError`` when one is out of range."""
        names = {f.name: f"MEDIA_SEGMENT_{f.name.upper()}" for f in dataclasses.fields(cls)}
        return cls(**{name: setting(settings, key) for name, key in {**names, "fsync": "MEDIA_FSYNC"}.items()})


@dataclass(frozen=True, slots=True)
class SpoolResult:
    """A complete, hashed spool of one asset, for :meth:`SegmentedDownloader.publish`; ``fetched_bytes`` came in
    this call, ``resumed_bytes`` from an earlier run (``segments`` is 1 when Range was ignored)."""

    path: Path
    size: int
    sha256: str
    head: bytes
    segments: int
    fetched_bytes: int
    resumed_bytes: int
    restarts: int
    resolves: int


def check_segment(*, status: int, content_range: str | None, etag: str | None, body_size: int,
                  flags: list[str] | tuple[str, ...], start: int, end: int, total: int,
                  expected_etag: str | None) -> None:
    """Check the answer to ``Range: bytes=<start>-<end - 1>`` of a file of ``total`` bytes: :class:`RemoteChanged`
    for another version (a 200, another total or ETag), else :class:`SegmentError` for a bad or short answer."""
    if status == 416:
        raise SegmentError("range-not-satisfiable", f"416 for bytes {start}-{end - 1} ({content_range!r})")
    if status == 200:
        raise RemoteChanged("200 with the full body instead of 206 (changed file, or Range ignored)")
    if status != 206:
        raise SegmentError(f"http-{status}")
    parsed = parse_content_range(content_range)
    if parsed is None:
        raise SegmentError("bad-content-range", f"206 with Content-Range {content_range!r}")
    got_start, got_end, got_total = parsed
    if got_total is not None and got_total != total:
        raise RemoteChanged(f"total size {got_total}, expected {total}")
    if expected_etag and etag and etag != expected_etag:
        raise RemoteChanged(f"ETag {etag}, expected {expected_etag}")
    if (got_start, got_end + 1) != (start, end):
        raise SegmentError("bad-content-range", f"asked for bytes {start}-{end - 1}, got {content_range!r}")
    if body_size != end - start or any(f in flags for f in ("dataloss", "download_stopped")):
        raise SegmentError("short-segment", f"{body_size} of {end - start} bytes for bytes {start}-{end - 1}")


def stop_unranged_body(headers: Headers, body_length: int, request: Request, spider: Any = None,
                       **kwargs: Any) -> None:
    """``headers_received``: stop the body of a segment request answered without Content-Range (a 200 with the
    whole file, an error page), so a changed remote never costs a whole file of memory."""
    spec = request.meta.get(META_SEGMENT)
    if spec and not spec.get("probe") and not headers.get(b"Content-Range"):
        raise StopDownload(fail=False)


def _header(response: Response, name: str) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value is not None else None


class _Download:
    """The state of one :meth:`SegmentedDownloader.download` call."""

    def __init__(self, *, url: str, key: str, crawler: Crawler, spool: Path, config: SegmentConfig,
                 headers: dict[str, str] | None, resolve: Resolver | None, run: Runner,
                 budget: MemoryBudget | None = None, pool: BufferPool | None = None) -> None:
        self.url = url
        self.key = key
        self.crawler = crawler
        self.spool = spool
        self.ledger_file = ledger_path(spool)
        self.config = config
        self.headers = {**(headers or {}), "Accept-Encoding": "identity"}
        self.resolve = resolve
        self.run_blocking = run
        self.stats = crawler.stats
        self.fd: int | None = None
        self.direct_fd: int | None = None  # the spool again, O_DIRECT (None where off or refused): docs/media.md
        self._probe_body: bytes | None = None  # the probe's body, hashed from memory by _fetch_rest
        self.fetched = self.resumed = self.restarts = self.resolves = 0
        self.budget = budget if budget is not None else MemoryBudget(config.memory)
        self.pool = pool if pool is not None else BufferPool(config.size, keep=config.concurrency)
        self._started = self._last_progress = time.monotonic()

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"media/segments/{key}", count)

    def _close(self) -> None:
        if self.direct_fd is not None:
            os.close(self.direct_fd)
            self.direct_fd = None
        if self.fd is not None:
            os.close(self.fd)  # also releases the flock
            self.fd = None

    def _lock_spool(self) -> int:
        """Take the spool's lock before anything reads or writes it or its ledger (one writer per spool, across
        processes sharing FILES_STORE)."""
        fd = lock_path(self.spool)
        if fd is None:
            raise SegmentError("spool-busy", f"{self.spool} is being downloaded by another request")
        self.fd = fd
        self.direct_fd = open_direct(self.spool) if self.config.direct else None
        remove_stray_temps(self.ledger_file)  # of a run killed while saving the ledger; nobody else writes it now
        return fd

    def _reset_spool(self) -> None:
        """(Locked.) Forget what the spool holds: drop its ledger, empty it."""
        assert self.fd is not None
        self.resumed = 0
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.ledger_file)
        os.ftruncate(self.fd, 0)

    def _hand_over(self, result: SpoolResult) -> SpoolResult:
        """(Locked.) Move a complete spool to a name of its own (no later download can reach it) and drop its
        ledger: what the caller verifies and publishes is exactly what was hashed."""
        done = self.spool.with_name(f"{self.spool.name}.{os.getpid()}.{secrets.token_hex(4)}.done")
        os.rename(self.spool, done)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.ledger_file)
        return dataclasses.replace(result, path=done)

    def _request(self, *, start: int, end: int, probe: bool, validator: str | None,
                 sink: SegmentBuffer | None = None) -> Request:
        headers = {**self.headers, "Range": f"bytes={start}-{end - 1}"}
        if validator:
            headers["If-Range"] = validator
        meta: dict[str, Any] = {META_SEGMENT: {"key": self.key, "start": start, "end": end, "probe": probe}}
        if not probe:  # a segment never holds more than its length in memory, and its size is expected
            meta.update(download_maxsize=end - start, download_warnsize=0)
        if sink is not None:
            meta[META_BODY_SINK] = sink
        return Request(self.url, headers=headers, meta=meta, callback=NO_CALLBACK, dont_filter=True)

    async def _download(self, request: Request, problem: Callable[[Response], str | None] = lambda r: None
                        ) -> Response:
        self._inc("requests")
        try:
            response = await download_piece(self.crawler, request, problem)
        except Exception as exc:
            raise SegmentError(download_error_reason(exc), f"{type(exc).__name__}: {exc}") from exc
        size = len(_body(response))
        self.fetched += size
        self._inc("response_bytes", size)
        return response

    async def _resolve(self, status: int) -> None:
        if self.resolve is None:
            raise SegmentError("expired", f"HTTP {status} and no way to re-resolve {self.url}")
        if self.resolves >= self.config.max_resolves:
            raise SegmentError("expired", f"HTTP {status} after {self.resolves} re-resolutions of {self.key}")
        self.resolves += 1
        self._inc("resolves")
        new_url = await self.resolve(self.url)
        if not new_url:
            raise SegmentError("expired", f"HTTP {status}; {self.key} could not be re-resolved")
        logger.info("Media URL of %s expired (HTTP %d); continuing with a re-resolved URL", self.key, status)
        self.url = new_url

    async def run(self) -> SpoolResult:
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock_spool()
            # Bounded: every pass returns, raises, or spends one restart.
            for _ in range(self.config.max_restarts + 1):
                try:
                    ledger = self._resume() or await self._probe()
                    result = ledger if isinstance(ledger, SpoolResult) else await self._fetch_rest(ledger)
                    return self._hand_over(result)

                except RemoteChanged as exc:
                    self._reset_spool()
                    if self.restarts >= self.config.max_restarts:
                        raise SegmentError("remote-changed",
                                           f"{exc.detail}; gave up after {self.restarts} restarts") from None
                    self.restarts += 1
                    self._inc("restarts")
                    logger.warning("Remote file of %s changed (%s): starting over", self.key, exc.detail)
            raise SegmentError("remote-changed", f"{self.key}: too many restarts")
        except BaseException as exc:
            if self.fd is not None and not self.ledger_file.exists():  # nothing to resume: no litter
                with contextlib.suppress(OSError):
                    if os.fstat(self.fd).st_size == 0:
                        os.unlink(self.spool)
            if isinstance(exc, OSError):
                reason = "disk-full" if exc.errno == errno.ENOSPC else "store-error"
                raise SegmentError(reason, f"{type(exc).__name__}: {exc}") from exc
            raise
        finally:
            self._close()

    def _resume(self) -> Ledger | None:
        """(Locked.) The ledger of a spool this run can continue; else ``None`` (the spool emptied)."""
        assert self.fd is not None
        ledger = load_ledger(self.ledger_file, key=self.key)
        size = os.fstat(self.fd).st_size
        if ledger is None or size != ledger.total or ledger.if_range is None:
            # Without a validator a resumed spool could mix two versions of the file: start over.
            if ledger is not None:
                logger.info("Download spool of %s cannot be resumed (size %d of %d, validator %r): starting over",
                            self.key, size, ledger.total, ledger.if_range)
            self._reset_spool()
            return None
        self.resumed = ledger.done_bytes()
        self._inc("resumed_bytes", self.resumed)
        logger.info("Resuming %s: %d of %d bytes already in %s", self.key, self.resumed, ledger.total, self.spool)
        return ledger

    async def _probe(self) -> Ledger | SpoolResult:
        """First ranged GET: the file when it is small (or Range is ignored), else a new ledger."""
        first = self.config.threshold
        for _ in range(self.config.max_resolves + 1):  # bounded: each expired answer spends one resolve
            response = await self._download(self._request(start=0, end=first, probe=True, validator=None))
            if response.status not in _EXPIRED_STATUSES:
                break
            await self._resolve(response.status)
        if response.status == 200:
            return await self._single(response)
        content_range = _header(response, "Content-Range")
        parsed = parse_content_range(content_range)
        total = parsed[2] if parsed and parsed[2] is not None else 0
        if response.status == 206 and not total:
            raise SegmentError("bad-content-range", f"206 with Content-Range {content_range!r}")
        check_segment(status=response.status, content_range=content_range, etag=None, body_size=len(response.body),
                      flags=response.flags, start=0, end=min(first, total), total=total, expected_etag=None)
        if total > self.config.max_file_size:
            raise SegmentError("too-large", f"{self.url} announces {total} bytes, over "
                                            f"MEDIA_SEGMENT_MAX_FILE_SIZE={self.config.max_file_size}")
        free = free_bytes(self.spool.parent)
        if free is not None and total - min(first, total) > free:
            # Refused now rather than after filling the disk: the spool is sparse until its segments arrive.
            raise SegmentError("disk-full", f"{total} bytes to spool, {free} free under {self.spool.parent}")
        ledger = Ledger(key=self.key, url=self.url, total=total, first=first,
                        segment_size=self.config.size, etag=_header(response, "ETag"),
                        last_modified=_header(response, "Last-Modified"))
        assert self.fd is not None
        os.ftruncate(self.fd, 0)  # nothing of an earlier version may survive in the gaps
        os.ftruncate(self.fd, total)  # sparse: segments land at their offsets in any order
        await self.run_blocking(write_at, self.fd, response.body, 0)
        self._probe_body = response.body
        ledger.done.add(0)
        if len(ledger.segments()) > 1:
            logger.info("Downloading %s (%d bytes) as %d Range segments of %d bytes into %s", self.key, total,
                        len(ledger.segments()) - 1, ledger.segment_size, self.spool)
        return ledger

    async def _single(self, response: Response) -> SpoolResult:
        """The server ignored Range: the 200 body is the whole file (Scrapy kept it within DOWNLOAD_MAXSIZE)."""
        body = response.body
        length = _header(response, "Content-Length")
        if (length is not None and length.strip().isdigit() and int(length) != len(body)) or any(
                f in response.flags for f in ("dataloss", "download_stopped")):
            raise SegmentError("short-segment", f"{len(body)} bytes of a 200 body (Content-Length {length})")
        logger.info("Server ignores Range for %s: downloaded %d bytes in one response (no resume possible; "
                    "limit DOWNLOAD_MAXSIZE)", self.url, len(body))
        self._inc("ranges_ignored")
        assert self.fd is not None
        hasher = OrderedHasher(self.fd, run=self.run_blocking)
        await self.run_blocking(hasher.write, body, 0)
        hasher.offer(memoryview(body), 0)
        if self.config.fsync:
            await self.run_blocking(os.fdatasync, self.fd)
        return self._result(len(body), await hasher.finish(len(body)), body[:SNIFF_BYTES], segments=1)

    def _result(self, size: int, sha256: str, head: bytes, *, segments: int) -> SpoolResult:
        return SpoolResult(path=self.spool, size=size, sha256=sha256, head=head, segments=segments,
                           fetched_bytes=self.fetched, resumed_bytes=self.resumed, restarts=self.restarts,
                           resolves=self.resolves)

    async def _fetch_rest(self, ledger: Ledger) -> SpoolResult:
        fd = self.fd
        assert fd is not None
        segments = ledger.segments()
        hasher = OrderedHasher(fd, run=self.run_blocking, direct_fd=self.direct_fd)
        probe_body, self._probe_body = self._probe_body, None
        if probe_body is not None and 0 in ledger.done:  # this pass's probe: hashed from memory, not read back
            hasher.offer(memoryview(probe_body)[: segments[0][1]], 0)
        hasher.advance(ledger.contiguous_end())

        def save(snapshot: Ledger) -> None:  # (executor) data first: the ledger claims only bytes on disk
            if self.config.fsync:
                os.fdatasync(fd)
            save_ledger(self.ledger_file, snapshot, fsync=self.config.fsync)

        saver = CoalescingSaver(snapshot=lambda: dataclasses.replace(ledger, done=set(ledger.done)), save=save,
                                run=self.run_blocking)
        if ledger.missing():
            # A new spool gets its ledger before the first segment request goes out: a crash then keeps the probe.
            await saver.saved(saver.request())
        try:
            # Bounded: each round ends complete, raises, or spends one resolve (then raises past the cap).
            for _ in range(self.config.max_resolves + 1):
                pending = ledger.missing()
                if not pending:
                    break
                # A resumed spool's validator is checked with one request before fanning out, so that a changed
                # file costs one stopped response, not one per worker.
                solo = bool(self.resumed) and not self.restarts and len(pending) > 1
                expired = await self._round(ledger, segments, pending[:1] if solo else pending, hasher, saver)
                if solo and expired is None:
                    expired = await self._round(ledger, segments, pending[1:], hasher, saver)
                if expired is not None:
                    await self._resolve(expired)
                    ledger.url = self.url
            if ledger.missing():
                raise SegmentError("expired", f"{self.key}: segments still missing after re-resolving")
            await saver.flush()
            digest = await hasher.finish(ledger.total)
            self._inc("direct_bytes", hasher.direct_bytes)
        finally:
            # Never leave a thread writing to a spool that the caller may delete.
            with contextlib.suppress(Exception):
                await hasher.wait()
            with contextlib.suppress(Exception):
                await saver.flush()
        self._inc("completed")
        return self._result(ledger.total, digest, os.pread(fd, SNIFF_BYTES, 0), segments=len(segments))

    async def _round(self, ledger: Ledger, segments: list[tuple[int, int]], pending: list[int],
                     hasher: OrderedHasher, saver: CoalescingSaver) -> int | None:
        """Fetch ``pending`` with MEDIA_SEGMENT_CONCURRENCY workers. Returns the status of an expired URL (the
        round stopped early), ``None`` when every pending segment is in; raises the first hard error."""
        async def one(index: int) -> None:
            start, end = segments[index]
            if not (reserved := self.budget.request(end - start)).done():
                self._inc("buffer_waits")
            await reserved
            if self.stats is not None:
                self.stats.max_value("media/segments/buffer_peak_bytes", self.budget.peak)
            try:
                try:
                    await self._segment(ledger, start, end, hasher)
                except BaseException:
                    hasher.release()  # the segments offered behind this one must not wait for it
                    raise
                ledger.done.add(index)
                generation = saver.request()
                hasher.advance(ledger.contiguous_end())
                self._log_progress(ledger)
                # The next request waits until this segment is in the saved ledger: bytes served but not recorded
                # stay within one segment per worker (what a crash may cost), however slow the fsync.
                await saver.saved(generation)
            finally:
                self.budget.give_back(end - start)

        hasher.hold()
        errors = await drain(pending, one, workers=self.config.concurrency)
        if not errors:
            return None
        # A hard error wins over a segment error, then a changed file, then an expired URL (returned).
        first = min(errors, key=lambda e: (isinstance(e, SegmentError), isinstance(e, (RemoteChanged, _Expired)),
                                           isinstance(e, _Expired)))
        if isinstance(first, _Expired):
            return first.status
        raise first

    def _log_progress(self, ledger: Ledger) -> None:
        # A multi-GiB download takes minutes: say how far it is, every MEDIA_SEGMENT_LOG_INTERVAL seconds.
        now = time.monotonic()
        if not self.config.log_interval or now - self._last_progress < self.config.log_interval:
            return
        self._last_progress = now
        done = ledger.done_bytes()
        logger.info("Downloading %s: %.1f of %.1f MiB (%.0f%%), %d of %d segments, %.1f MiB/s", self.key,
                    done / MiB, ledger.total / MiB, 100 * done / max(ledger.total, 1), len(ledger.done),
                    len(ledger.segments()), self.fetched / max(now - self._started, 1e-6) / MiB)

    async def _segment(self, ledger: Ledger, start: int, end: int, hasher: OrderedHasher) -> None:
        """Fetch one segment into a pooled buffer, check it, write it at its offset and hash it when next in
        line."""
        def check(response: Response) -> None:
            check_segment(status=response.status, content_range=_header(response, "Content-Range"),
                          etag=_header(response, "ETag"), body_size=len(_body(response)), flags=response.flags,
                          start=start, end=end, total=ledger.total, expected_etag=ledger.etag)

        def problem(response: Response) -> str | None:
            # Only a short or cut 206 is worth another try; anything else is decided below.
            try:
                check(response) if response.status == 206 else None
            except SegmentError as exc:
                return exc.reason if exc.reason == "short-segment" else None
            return None

        sink = self.pool.take(end - start)
        try:
            response = await self._download(self._request(start=start, end=end, probe=False,
                                                           validator=ledger.if_range, sink=sink), problem)
            if response.status in _EXPIRED_STATUSES:
                raise _Expired(response.status)
            check(response)
            body = _body(response)
            aligned = isinstance(body, memoryview)  # in the pooled (page-aligned) buffer
            await self.run_blocking(functools.partial(hasher.write, aligned=aligned), body, start)
            if aligned:
                # The buffer is held until the hash has taken it (in file order: bounded by the segments in
                # flight), so these bytes are never read back from disk.
                await hasher.offer(body, start)
        finally:
            self.pool.give_back(sink)
        self._inc("written_bytes", end - start)


def _body(response: Response) -> bytes | memoryview:
    """The body of a segment answer: in its :class:`SegmentBuffer` when the handler put it there."""
    sink = response.meta.get(META_BODY_SINK) if response.request is not None else None
    return sink.view() if isinstance(sink, SegmentBuffer) and sink.attached else response.body


class SegmentedDownloader:
    """The large-file path (docs/media.md, "Large files and video") into ``store``, whose executor does its file
    work: spools under ``<FILES_STORE>/spool``, which it sweeps of spools older than MEDIA_SPOOL_MAX_AGE when it
    opens."""

    def __init__(self, crawler: Crawler, *, store: ContentAddressedStore,
                 spool_dir: str | os.PathLike[str] | None = None) -> None:
        self.crawler = crawler
        self.store = store
        # A ValueError (a bad MEDIA_SEGMENT_* setting) fails the crawl: the media pipeline never disables itself.
        self.config = SegmentConfig.from_settings(crawler.settings)
        self.spool_dir = Path(spool_dir) if spool_dir else spool_dir_for(setting(crawler.settings, "FILES_STORE"))
        self.budget = MemoryBudget(self.config.memory)  # shared by all large downloads of the crawl
        self.pool = BufferPool(self.config.size, keep=self.config.concurrency)
        sweep_spool(self.spool_dir, older_than=setting(crawler.settings, "MEDIA_SPOOL_MAX_AGE"))
        crawler.signals.connect(stop_unranged_body, signal=signals.headers_received)

    async def download(self, url: str, *, key: str, headers: dict[str, str] | None = None) -> SpoolResult:
        """Download ``url`` into the spool of asset ``key`` (the steps: docs/media.md, "Large files"); raises
        :class:`SegmentError`, the spool kept for a later run; on success :meth:`publish` or :meth:`discard`."""
        refresh = getattr(self.crawler.spider, "refresh_media_url", None)
        download = _Download(url=url, key=key, crawler=self.crawler, config=self.config, headers=headers,
                             spool=spool_path(spool_dir=self.spool_dir, key=key), budget=self.budget,
                             run=self.store.run, pool=self.pool,
                             resolve=None if refresh is None else lambda old: refresh(key=key, url=old))
        started = time.monotonic()
        try:
            result = await download.run()
        except SegmentError as exc:
            download._inc(f"failed/{exc.reason}")
            raise
        logger.debug("Spooled %s: %d bytes (%d fetched, %d resumed) in %.2fs, sha256 %s", key, result.size,
                     result.fetched_bytes, result.resumed_bytes, time.monotonic() - started, result.sha256)
        return result

    async def publish(self, result: SpoolResult, *, ext: str | None = None) -> Persisted:
        """Move a complete spool (its own name, no ledger since :meth:`_Download._hand_over`) into the store by
        rename; the store takes the SHA-256 already computed."""
        return await self.store.run(self.store.publish_file, result.path, ext=ext, sha256=result.sha256)

    async def discard(self, result: SpoolResult) -> None:
        """Drop a spool that will not be published (e.g. rejected content)."""
        await self.store.run(remove_spool, result.path)
