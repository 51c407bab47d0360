"""Large files as HTTP Range segments: streaming to disk, resumable, bounded memory.

Scrapy buffers a whole response body in memory, so one 1 GiB video costs 1 GiB of RAM with the stock
``FilesPipeline``, cannot resume, and retries from byte zero. Here a large asset is fetched as Range segments, each
a normal Scrapy request sent through ``crawler.engine.download_async()`` (downloader middlewares, retries,
timeouts, slots and throttling apply per segment), at most MEDIA_SEGMENT_CONCURRENCY of them in flight per file:

1. **probe** — ``GET`` with ``Range: bytes=0-<MEDIA_SEGMENT_THRESHOLD - 1>`` (no ``HEAD``: signed CDN URLs are
   often valid for ``GET`` only). A ``206`` gives the total size and validators; a file no larger than the
   threshold is then already complete. A ``200`` means the server ignores Range: that body is the whole file,
   kept within DOWNLOAD_MAXSIZE by Scrapy, and logged as such.
2. **segments** — the rest in MEDIA_SEGMENT_SIZE pieces. The download handler (:mod:`mediacrawler.media.handler`)
   puts each ``206`` body into a per-worker buffer instead of building a ``bytes`` body; a worker thread then
   writes it with ``os.pwrite`` at its offset into a spool file ``<spool dir>/<sha256 of the asset key>.part``
   (never a remote name). Memory stays bounded by segment size × concurrency whatever the file size, and all files
   together by MEDIA_SEGMENT_MEMORY (:class:`BufferPool`). Each ``206`` is checked: Content-Range start, end and
   total must match the request, the ETag must not have changed; a ``416`` or a short segment is an error, never
   "complete".
3. **ledger** — ``.part.json`` beside the spool (:mod:`mediacrawler.media.ledger`) says which segments are in;
   saved atomically after every segment (after an ``fdatasync`` of the spool when MEDIA_FSYNC is on), saves
   coalescing. A worker sends its next request only once its last segment is in the saved ledger, so bytes
   received but not recorded never exceed MEDIA_SEGMENT_SIZE x MEDIA_SEGMENT_CONCURRENCY per file: that is all a
   crash can cost, however slow the disk (and a new spool's ledger is saved before the first segment request).
4. **resume** — a new run fetches only the missing segments with ``If-Range`` set to the recorded validator; a
   changed remote (``200`` instead of ``206``, another ETag or total) discards the spool and starts over, at most
   MEDIA_SEGMENT_MAX_RESTARTS times.
5. **hash** — SHA-256 in file order, overlapping the transfer (on the second core): a segment that arrives in
   order is hashed from memory by the thread that wrote it; the others are read back from the spool once the
   prefix before them is complete.
6. **expired URLs** — a ``403``/``410`` (signed video URLs expire mid-download) asks ``resolve(url)`` for a fresh
   URL of the same asset and carries on with the segments already fetched, at most MEDIA_SEGMENT_MAX_RESOLVES
   times.

Whoever holds the spool's lock (``flock``, taken before the spool or its ledger is read) is its only writer,
across processes sharing FILES_STORE. A complete spool is renamed, still under the lock, to a name of its own
(``<spool>.<pid>.<random>.done``) and its ledger dropped: the result (:class:`SpoolResult`) is that complete,
hashed file, which no other download can touch any more; :func:`publish_spool` moves it into the
content-addressed store by rename. :class:`SegmentedDownloader` is the thin component around these functions that
the media pipeline calls.

Every loop is bounded: segment attempts (MEDIA_SEGMENT_RETRIES on top of Scrapy's own retries), restarts and
resolves are counted, and each request has Scrapy's DOWNLOAD_TIMEOUT.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import inspect
import logging
import os
import re
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured, StopDownload
from scrapy.http import Headers, Request, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.asyncio import run_in_thread
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.defer import Deferred, DeferredList, succeed

from mediacrawler.contracts import META_SEGMENT
from mediacrawler.fsutil import free_bytes, remove_stray_temps
from mediacrawler.media.handler import META_BODY_SINK, BodySink
from mediacrawler.media.ledger import Ledger, ledger_path, load_ledger, remove_spool, save_ledger

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

    from mediacrawler.media.store import ContentStore, Persisted

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
#: MEDIA_SEGMENT_THRESHOLD: files up to this size come in one (probe) request; it is also the probe's length.
DEFAULT_SEGMENT_THRESHOLD = 16 * MiB
#: MEDIA_SEGMENT_SIZE: bytes per Range segment above the threshold.
DEFAULT_SEGMENT_SIZE = 16 * MiB
#: MEDIA_SEGMENT_CONCURRENCY: segments of one file in flight at once.
DEFAULT_SEGMENT_CONCURRENCY = 3
#: MEDIA_SEGMENT_RETRIES: extra attempts per segment after Scrapy's RetryMiddleware gave up (cut connections).
DEFAULT_SEGMENT_RETRIES = 3
#: MEDIA_SEGMENT_MAX_RESTARTS: how often a file that changed remotely is started over before giving up.
DEFAULT_MAX_RESTARTS = 2
#: MEDIA_SEGMENT_MAX_RESOLVES: how often an expired URL (403/410) is re-resolved for one download.
DEFAULT_MAX_RESOLVES = 3
#: MEDIA_SEGMENT_MAX_FILE_SIZE: a larger announced total is refused before anything is written ("too-large").
DEFAULT_MAX_FILE_SIZE = 16 * 1024**3
#: MEDIA_SEGMENT_MEMORY: segment body buffers of all large downloads of a crawl together (see BufferPool).
DEFAULT_SEGMENT_MEMORY = 256 * MiB
#: MEDIA_SEGMENT_LOG_INTERVAL: seconds between progress lines of one large download (0: none).
DEFAULT_LOG_INTERVAL = 30.0
#: Spool directory under FILES_STORE (same filesystem as ``objects/``, so publishing is a rename).
SPOOL_DIR = "spool"


# Statuses after which a segment is tried again (Scrapy's RetryMiddleware already retried them RETRY_TIMES).
_TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 522, 524})
# Statuses of an expired signed URL.
_EXPIRED_STATUSES = frozenset({403, 410})
# Read-back buffer of the hasher: large, so that the thread gives the GIL back to the reactor rarely (a GIL
# hand-over can cost a whole switch interval while the reactor thread is busy).
_HASH_CHUNK = 4 * MiB
# Bytes per pwrite() call into a spool (see _write_at).
_WRITE_PIECE = 128 * 1024
_HEAD_BYTES = 4096
_CONTENT_RANGE_RE = re.compile(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", re.IGNORECASE)

#: ``resolve(url)`` → a fresh URL for the same asset, or ``None`` when it cannot be re-resolved.
Resolver = Callable[[str], Awaitable[str | None]]


class SegmentError(Exception):
    """A segmented download that cannot complete. ``reason`` is a short slug (``range-not-satisfiable``,
    ``bad-content-range``, ``short-segment``, ``http-<status>``, ``download-error``, ``expired``,
    ``remote-changed``, ``spool-busy``, ``size-mismatch``, ``disk-full``, ``store-error``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class RemoteChanged(SegmentError):
    """The remote file is not the version the spool holds (new ETag, new total, 200 instead of 206)."""

    def __init__(self, detail: str) -> None:
        super().__init__("remote-changed", detail)


class _Expired(SegmentError):
    def __init__(self, status: int) -> None:
        super().__init__("expired", f"HTTP {status}")
        self.status = status


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    """The MEDIA_SEGMENT_* settings (and MEDIA_FSYNC), checked."""

    threshold: int = DEFAULT_SEGMENT_THRESHOLD
    segment_size: int = DEFAULT_SEGMENT_SIZE
    concurrency: int = DEFAULT_SEGMENT_CONCURRENCY
    retries: int = DEFAULT_SEGMENT_RETRIES
    max_restarts: int = DEFAULT_MAX_RESTARTS
    max_resolves: int = DEFAULT_MAX_RESOLVES
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    memory: int = DEFAULT_SEGMENT_MEMORY
    log_interval: float = DEFAULT_LOG_INTERVAL
    fsync: bool = True

    def __post_init__(self) -> None:
        for name in ("threshold", "segment_size", "concurrency", "max_file_size", "memory"):
            if getattr(self, name) < 1:
                raise ValueError(f"MEDIA_SEGMENT_{name.upper()} must be at least 1")
        for name in ("retries", "max_restarts", "max_resolves", "log_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"MEDIA_SEGMENT_{name.upper()} must not be negative")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SegmentConfig:
        """Read the settings; ``ValueError`` when one is out of range."""
        return cls(
            threshold=settings.getint("MEDIA_SEGMENT_THRESHOLD", DEFAULT_SEGMENT_THRESHOLD),
            segment_size=settings.getint("MEDIA_SEGMENT_SIZE", DEFAULT_SEGMENT_SIZE),
            concurrency=settings.getint("MEDIA_SEGMENT_CONCURRENCY", DEFAULT_SEGMENT_CONCURRENCY),
            retries=settings.getint("MEDIA_SEGMENT_RETRIES", DEFAULT_SEGMENT_RETRIES),
            max_restarts=settings.getint("MEDIA_SEGMENT_MAX_RESTARTS", DEFAULT_MAX_RESTARTS),
            max_resolves=settings.getint("MEDIA_SEGMENT_MAX_RESOLVES", DEFAULT_MAX_RESOLVES),
            max_file_size=settings.getint("MEDIA_SEGMENT_MAX_FILE_SIZE", DEFAULT_MAX_FILE_SIZE),
            memory=settings.getint("MEDIA_SEGMENT_MEMORY", DEFAULT_SEGMENT_MEMORY),
            log_interval=settings.getfloat("MEDIA_SEGMENT_LOG_INTERVAL", DEFAULT_LOG_INTERVAL),
            fsync=settings.getbool("MEDIA_FSYNC", True),
        )


@dataclass(frozen=True, slots=True)
class SpoolResult:
    """A complete, hashed spool file of one asset, ready for :func:`publish_spool`.

    ``fetched_bytes`` counts body bytes received by this call (segments kept from an earlier run are
    ``resumed_bytes``); ``segmented`` is False when the server ignored Range and sent the file in one response.
    """

    key: str
    url: str
    path: Path
    size: int
    sha256: str
    head: bytes
    content_type: str | None
    etag: str | None
    last_modified: str | None
    segmented: bool
    segments: int
    fetched_bytes: int
    resumed_bytes: int
    restarts: int
    resolves: int


# --- pure helpers -------------------------------------------------------------------------------------------
def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """``"bytes 0-99/1000"`` → ``(0, 99, 1000)`` (end inclusive; total ``None`` for ``*``); ``None`` when absent
    or not a satisfied byte range (``bytes */1000`` included)."""
    if not value:
        return None
    m = _CONTENT_RANGE_RE.fullmatch(value)
    if m is None:
        return None
    start, end = int(m.group(1)), int(m.group(2))
    total = None if m.group(3) == "*" else int(m.group(3))
    if end < start or (total is not None and end >= total):
        return None
    return start, end, total


def check_segment(*, status: int, content_range: str | None, etag: str | None, body_size: int,
                  flags: list[str] | tuple[str, ...], start: int, end: int, total: int,
                  expected_etag: str | None) -> None:
    """Check the answer to ``Range: bytes=<start>-<end - 1>`` of a file of ``total`` bytes.

    Returns when it is exactly those bytes. Raises :class:`RemoteChanged` for another version of the file (200
    where 206 was asked for — the server answers ``If-Range`` that way —, another total, another ETag), and
    :class:`SegmentError` for ``range-not-satisfiable`` (416), ``bad-content-range`` (start/end not as asked),
    ``short-segment`` (fewer body bytes than the range, or a stopped/partial download) and ``http-<status>``.
    """
    if status == 416:
        raise SegmentError("range-not-satisfiable", f"416 for bytes {start}-{end - 1} (Content-Range "
                                                    f"{content_range!r})")
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
    if body_size != end - start or any(f in flags for f in ("dataloss", "download_stopped", "overflow")):
        raise SegmentError("short-segment", f"{body_size} of {end - start} bytes for bytes {start}-{end - 1}")


def spool_path(*, spool_dir: str | os.PathLike[str], key: str) -> Path:
    """The spool file of an asset: ``<spool_dir>/<sha256 of key>.part`` (no remote string in the name)."""
    return Path(spool_dir) / (hashlib.sha256(key.encode("utf-8")).hexdigest() + ".part")


def spool_dir_for(files_store: str | os.PathLike[str]) -> Path:
    """``<FILES_STORE>/spool`` for a local FILES_STORE value (``file://`` URIs included)."""
    base = str(files_store)
    if "://" in base:
        base = base.split("://", 1)[1]
    return Path(base).absolute() / SPOOL_DIR


def stop_unranged_body(headers: Headers, body_length: int, request: Request, spider: Any = None,
                       **kwargs: Any) -> None:
    """``headers_received`` handler: stop receiving the body of a segment request answered without
    Content-Range (a 200 with the whole file, or an error page), so that a changed or Range-ignoring remote
    never costs a whole file of memory. The response still arrives, empty and flagged ``download_stopped``."""
    spec = request.meta.get(META_SEGMENT)
    if spec and not spec.get("probe") and not headers.get(b"Content-Range"):
        raise StopDownload(fail=False)


def _header(response: Response, name: str) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value is not None else None


def _write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    # In pieces of _WRITE_PIECE: one large pwrite() lets the kernel allocate large page-cache folios, which is
    # slower and erratic in a VM (bench_large_file, 1 GiB: 2.4-3.6 s transfer with 8 MiB calls, 1.9-2.1 s with
    # 128 KiB calls; the extra GIL hand-overs of the smaller calls cost less).
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view[:_WRITE_PIECE], offset)
        view = view[written:]
        offset += written


def _hash_range(fd: int, digest: Any, start: int, end: int, buf: bytearray) -> None:
    # (Worker thread.) preadv into one reused buffer: its size in memory whatever the file size. hashlib and
    # preadv release the GIL, so this runs beside the reactor on the other core.
    view = memoryview(buf)
    pos = start
    while pos < end:
        n = os.preadv(fd, [view[: min(len(buf), end - pos)]], pos)
        if n <= 0:
            raise SegmentError("size-mismatch", f"spool ends at {pos}, expected {end} bytes")
        digest.update(view[:n])
        pos += n


class _OrderedHasher:
    """SHA-256 of the spool in file order, overlapping the transfer.

    A segment that arrives in order is hashed from memory by the thread that wrote it (:meth:`take`); the rest
    are read back from the spool in a background thread once the contiguous prefix before them is complete
    (:meth:`advance`). The digest and :attr:`offset` change only under the lock, in worker threads.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.digest = hashlib.sha256()
        self.offset = 0
        self.target = 0
        self._lock = threading.Lock()
        #: Held by the thread writing a segment into the spool (see _write_and_take).
        self.write_lock = threading.Lock()
        self._task: Deferred[None] | None = None
        # A flag, not "_task is None": without asyncio a coroutine may finish before deferred_from_coro returns.
        self._running = False
        self._buf: bytearray | None = None

    def take(self, data: bytes | memoryview, start: int) -> bool:
        """(Worker thread.) Hash ``data``, the bytes at ``start``, if they are next in line; True when taken."""
        with self._lock:
            if start != self.offset or not data:
                return False
            self.digest.update(data)
            self.offset += len(data)
            return True

    def _catch_up(self, end: int) -> None:
        # (Worker thread.) Read back whatever lies between the hashed prefix and ``end``.
        with self._lock:
            if self.offset < end:
                if self._buf is None:
                    self._buf = bytearray(_HASH_CHUNK)
                _hash_range(self.fd, self.digest, self.offset, end, self._buf)
                self.offset = end

    def advance(self, end: int, *, start: int = -1, body: bytes | None = None) -> None:
        """Hash up to ``end`` (every byte before it is in the spool) in the background; no-op when already
        there or on the way. ``body``, the bytes at ``start``, is hashed from memory when next in line."""
        self.target = max(self.target, end)
        if not self._running and self.offset < self.target:
            self._running = True
            self._task = deferred_from_coro(self._run(body if start == self.offset else None, start))

    async def _run(self, first: bytes | None, start: int) -> None:
        try:
            if first is not None:
                await run_in_thread(self.take, first, start)
                del first
            # Bounded: each pass moves offset to a target that only grows up to the file size.
            while self.offset < self.target:
                await run_in_thread(self._catch_up, self.target)
        finally:
            self._running = False

    async def wait(self) -> None:
        """Wait for the background pass (and raise its error)."""
        task, self._task = self._task, None
        if task is not None:
            await maybe_deferred_to_future(task)

    async def finish(self, total: int) -> str:
        """Hash up to ``total`` and return the hex digest."""
        self.advance(total)
        await self.wait()
        if self.offset != total:
            raise SegmentError("size-mismatch", f"hashed {self.offset} bytes, expected {total}")
        return self.digest.hexdigest()


def _save_durably(fd: int, path: Path, snapshot: Ledger, fsync: bool) -> None:
    # (Worker thread.) The ledger may only claim segments whose bytes are on disk: data first, then the ledger.
    if fsync:
        os.fdatasync(fd)
    save_ledger(path, snapshot, fsync=fsync)


class CoalescingSaver:
    """Saves a ledger in the background as work completes; saves coalesce (one in flight, the next one takes the
    newest state), so a slow fsync never queues up behind the transfer.

    :meth:`request` returns a generation number; :meth:`saved` waits until a save that includes that state is
    done. Segment workers wait for it before they fetch their next segment, so what a crash may cost stays bounded
    by the segments in flight, however slow the fsync.

    ``snapshot()`` runs on the reactor thread (the worker thread must not iterate state the reactor is changing);
    ``save(snapshot)`` runs in a worker thread.
    """

    def __init__(self, *, snapshot: Callable[[], Any], save: Callable[[Any], None]) -> None:
        self._snapshot = snapshot
        self._save = save
        self._dirty = False
        self._running = False
        self._task: Deferred[None] | None = None
        #: Generations requested and durably saved; a save covers every request made before its snapshot.
        self.requested = 0
        self.done = 0
        self._error: BaseException | None = None
        self._waiters: list[tuple[int, Deferred[None]]] = []

    def request(self) -> int:
        """Save the current state soon (in the background); returns its generation for :meth:`saved`."""
        self.requested += 1
        self._dirty = True
        if not self._running:
            self._running = True
            self._task = deferred_from_coro(self._run())
        return self.requested

    async def saved(self, generation: int) -> None:
        """Wait until the state of ``generation`` is saved (raises the error of a failed save)."""
        if self.done >= generation:
            return
        if self._error is not None:
            raise self._error
        waiter: Deferred[None] = Deferred()
        self._waiters.append((generation, waiter))
        await maybe_deferred_to_future(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for generation, waiter in waiters:
            if self._error is not None:
                waiter.errback(self._error)
            elif self.done >= generation:
                waiter.callback(None)
            else:
                self._waiters.append((generation, waiter))

    async def _run(self) -> None:
        try:
            # Bounded: each pass clears _dirty; only completed work sets it again.
            while self._dirty:
                self._dirty = False
                generation = self.requested  # read with the snapshot, on the reactor thread
                try:
                    await run_in_thread(self._save, self._snapshot())
                except BaseException as exc:
                    self._error = exc
                    raise
                self._error = None
                self.done = generation
                self._wake()
        finally:
            self._running = False
            self._wake()

    async def flush(self) -> None:
        """Wait until the newest state is saved (raises a save error)."""
        # Bounded: the running pass picks up every request made before it ends; at most one more pass after.
        for _ in range(2):
            task, self._task = self._task, None
            if task is not None:
                await maybe_deferred_to_future(task)
            if not self._dirty:
                return
            self.request()


def ledger_saver(fd: int, path: Path, ledger: Ledger, *, fsync: bool) -> CoalescingSaver:
    """The saver of a spool's ledger: spool data synced first, then the ledger (see :func:`_save_durably`)."""
    return CoalescingSaver(
        snapshot=lambda: dataclasses.replace(ledger, done=set(ledger.done)),
        save=lambda snap: _save_durably(fd, path, snap, fsync),
    )


async def gather_all(coros: Iterable[Awaitable[None]]) -> list[BaseException]:
    """Run coroutines concurrently until all have ended; return their exceptions (reactor-agnostic)."""
    results = await maybe_deferred_to_future(
        DeferredList([deferred_from_coro(c) for c in coros], consumeErrors=True))
    return [value.value for ok, value in results if not ok]


class BufferPool:
    """The segment body buffers of every large download of one crawler, within MEDIA_SEGMENT_MEMORY bytes.

    Per file, memory is segment size x MEDIA_SEGMENT_CONCURRENCY; this bounds the sum over all the files being
    downloaded at once, whatever their number or hosts. A segment worker takes a buffer for its round and gives it
    back when the round ends; while the budget is lent out, workers wait their turn (first come, first served).
    A buffer is always granted when none is lent out, so one segment larger than the budget still progresses.
    Returned buffers are kept for reuse as long as lent plus kept stays within the budget.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        #: Bytes lent out now, and the most ever lent out at once.
        self.lent = 0
        self.peak = 0
        self.waits = 0
        self._kept: list[bytearray] = []
        self._waiters: deque[tuple[int, Deferred[bytearray]]] = deque()

    def request(self, size: int) -> Deferred[bytearray]:
        """A buffer of at least ``size`` bytes, now or once enough is given back (see :meth:`give_back`)."""
        if not self._waiters:
            buffer = self._take(size)
            if buffer is not None:
                return succeed(buffer)
        self.waits += 1
        waiter: Deferred[bytearray] = Deferred()
        self._waiters.append((size, waiter))
        return waiter

    def give_back(self, buffer: bytearray) -> None:
        """Return a buffer from :meth:`request`; hands buffers to waiters that now fit, in order."""
        self.lent -= len(buffer)
        if self.lent + sum(map(len, self._kept)) + len(buffer) <= self.budget:
            self._kept.append(buffer)
        # Bounded: each pass grants one waiter or stops.
        while self._waiters:
            size, waiter = self._waiters[0]
            granted = self._take(size)
            if granted is None:
                break
            self._waiters.popleft()
            waiter.callback(granted)

    def _take(self, size: int) -> bytearray | None:
        if self.lent and self.lent + size > self.budget:
            return None
        buffer = next((b for b in self._kept if len(b) >= size), None)
        if buffer is not None:
            self._kept.remove(buffer)
        else:
            # Kept buffers that no longer fit beside this one are dropped (freed), oldest first.
            while self._kept and self.lent + sum(map(len, self._kept)) + size > self.budget:
                self._kept.pop(0)
            buffer = bytearray(size)
        self.lent += len(buffer)
        self.peak = max(self.peak, self.lent)
        return buffer


_POOLS: weakref.WeakKeyDictionary[Any, BufferPool] = weakref.WeakKeyDictionary()


def buffer_pool_for(crawler: Crawler, budget: int = DEFAULT_SEGMENT_MEMORY) -> BufferPool:
    """The :class:`BufferPool` of ``crawler`` (made on first use, with ``budget`` bytes)."""
    pool = _POOLS.get(crawler)
    if pool is None:
        pool = _POOLS[crawler] = BufferPool(budget)
    return pool


class _Download:
    """The state of one ``fetch_segmented`` call (see the module docstring for the flow)."""

    def __init__(self, *, url: str, key: str, crawler: Crawler, spool: Path, config: SegmentConfig,
                 headers: dict[str, str] | None, meta: dict[str, Any] | None, resolve: Resolver | None) -> None:
        self.url = url
        self.key = key
        self.crawler = crawler
        self.spool = spool
        self.ledger_file = ledger_path(spool)
        self.config = config
        self.headers = {**(headers or {}), "Accept-Encoding": "identity"}
        self.meta = dict(meta or {})
        self.resolve = resolve
        self.stats: StatsCollector | None = crawler.stats
        self.fd: int | None = None
        self.fetched = 0
        self.resumed = 0
        self.restarts = 0
        self.resolves = 0
        self.content_type: str | None = None
        self._probe_body: bytes | None = None
        self.pool = buffer_pool_for(crawler, config.memory)
        self._started = time.monotonic()
        self._last_progress = self._started

    # --- bookkeeping ----------------------------------------------------------------------------------------
    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"media/segments/{key}", count)

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # also releases the flock
            self.fd = None

    def _lock_spool(self) -> int:
        """Open (or create) the spool and take its lock before anything else touches it or its ledger.

        One writer per spool, across processes sharing FILES_STORE and within this one: whoever holds the lock
        alone may truncate the spool, write its ledger, or move it away. The file is opened without truncating
        (truncating first would wipe a spool another download is writing) and, once locked, must still be the
        file at the path: a holder that moved or deleted it in the meantime leaves us an orphan inode.
        """
        # Bounded: each pass either returns, raises, or found the path replaced under it (retry, at most twice).
        for _ in range(3):
            fd = os.open(self.spool, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise SegmentError("spool-busy", f"{self.spool} is being downloaded by another request") from None
            try:
                opened, current = os.fstat(fd), os.stat(self.spool)
                same = (opened.st_dev, opened.st_ino) == (current.st_dev, current.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                # A run killed while saving the ledger leaves its temp file behind; nobody else writes it now.
                remove_stray_temps(self.ledger_file)
                return fd
            os.close(fd)
        raise SegmentError("spool-busy", f"{self.spool} keeps being replaced by another download")

    def _reset_spool(self) -> None:
        """(Locked.) Forget what the spool holds: empty it and drop its ledger."""
        assert self.fd is not None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.ledger_file)
        os.ftruncate(self.fd, 0)

    def _hand_over(self, result: SpoolResult) -> SpoolResult:
        """(Locked.) Move a complete spool to a name of its own for the caller, and drop its ledger.

        After this no other download can reach the file through the spool path (a new one starts a new file), so
        what the caller verifies and publishes is exactly what was hashed, even after the lock is released.
        """
        done = self.spool.with_name(f"{self.spool.name}.{os.getpid()}.{secrets.token_hex(4)}.done")
        os.rename(self.spool, done)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.ledger_file)
        return dataclasses.replace(result, path=done)

    def _request(self, *, start: int, end: int, probe: bool, validator: str | None,
                 sink: BodySink | None = None) -> Request:
        headers = {**self.headers, "Range": f"bytes={start}-{end - 1}"}
        if validator:
            headers["If-Range"] = validator
        meta: dict[str, Any] = {
            **self.meta,
            META_SEGMENT: {"key": self.key, "start": start, "end": end, "probe": probe},
        }
        if not probe:
            # A segment never holds more than its length in memory, and its size is expected: no warning.
            meta["download_maxsize"] = end - start
            meta["download_warnsize"] = 0
        if sink is not None:
            meta[META_BODY_SINK] = sink
        return Request(self.url, headers=headers, meta=meta, callback=NO_CALLBACK, dont_filter=True)

    async def _download(self, request: Request) -> Response:
        assert self.crawler.engine is not None
        self._inc("requests")
        response = await self.crawler.engine.download_async(request)
        sink = request.meta.get(META_BODY_SINK)
        size = len(response.body)
        if isinstance(sink, BodySink) and sink.attached:
            size = sink.size
            self._inc("sink_bodies")
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

    # --- the flow -------------------------------------------------------------------------------------------
    async def run(self) -> SpoolResult:
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock_spool()
            # Bounded: every pass either returns, raises, or spends one restart or one resolve.
            for _ in range(self.config.max_restarts + self.config.max_resolves + 2):
                try:
                    ledger = self._resume()
                    if ledger is None:
                        probed = await self._probe()
                        if isinstance(probed, SpoolResult):
                            return self._hand_over(probed)
                        ledger = probed
                    return self._hand_over(await self._fetch_rest(ledger))
                except RemoteChanged as exc:
                    self._reset_spool()
                    if self.restarts >= self.config.max_restarts:
                        raise SegmentError("remote-changed",
                                           f"{exc.detail}; gave up after {self.restarts} restarts") from None
                    self.restarts += 1
                    self._inc("restarts")
                    logger.warning("Remote file of %s changed (%s): starting over", self.key, exc.detail)
            raise SegmentError("download-error", f"{self.key}: too many restarts and re-resolutions")
        except OSError as exc:
            self._drop_if_empty()
            reason = "disk-full" if exc.errno == errno.ENOSPC else "store-error"
            raise SegmentError(reason, f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            self._drop_if_empty()
            raise
        finally:
            self._close()

    def _drop_if_empty(self) -> None:
        """(Locked.) Remove a spool that holds nothing to resume (refused after the probe, say): no litter."""
        if self.fd is None or self.ledger_file.exists():
            return
        with contextlib.suppress(OSError):
            if os.fstat(self.fd).st_size == 0:
                os.unlink(self.spool)

    def _resume(self) -> Ledger | None:
        """(Locked.) The ledger of a spool this run can continue; else ``None`` (the spool emptied)."""
        assert self.fd is not None
        ledger = load_ledger(self.ledger_file, key=self.key)
        if ledger is None:
            self._reset_spool()
            return None
        size = os.fstat(self.fd).st_size
        if size != ledger.total or ledger.if_range is None or ledger.segment_size < 1:
            # Without a validator a resumed spool could mix two versions of the file: start over.
            logger.info("Download spool of %s cannot be resumed (size %d of %d, validator %r): starting over",
                        self.key, size, ledger.total, ledger.if_range)
            self._reset_spool()
            return None
        self.resumed = ledger.done_bytes()
        self._inc("resumed_bytes", self.resumed)
        logger.info("Resuming %s: %d of %d bytes already in %s", self.key, self.resumed, ledger.total, self.spool)
        return ledger

    async def _probe(self) -> Ledger | SpoolResult:
        """First ranged GET: the file when it is small (or when Range is ignored), else a new ledger."""
        first = self.config.threshold
        # Bounded by max_resolves: each expired answer spends one.
        for _ in range(self.config.max_resolves + 1):
            response = await self._download_checked(self._request(start=0, end=first, probe=True, validator=None))
            if response.status in _EXPIRED_STATUSES:
                await self._resolve(response.status)
                continue
            break
        else:  # pragma: no cover - _resolve raises before the loop runs out
            raise SegmentError("expired", self.url)
        self.content_type = _header(response, "Content-Type")
        if response.status == 200:
            return await self._single(response)
        if response.status == 416:
            raise SegmentError("range-not-satisfiable", f"416 for the first bytes of {self.url} (empty file?)")
        if response.status != 206:
            raise SegmentError(f"http-{response.status}", self.url)
        parsed = parse_content_range(_header(response, "Content-Range"))
        if parsed is None or parsed[2] is None:
            raise SegmentError("bad-content-range",
                               f"206 with Content-Range {_header(response, 'Content-Range')!r}")
        total = parsed[2]
        check_segment(status=206, content_range=_header(response, "Content-Range"), etag=None,
                      body_size=len(response.body), flags=response.flags, start=0, end=min(first, total),
                      total=total, expected_etag=None)
        if total > self.config.max_file_size:
            raise SegmentError("too-large", f"{self.url} announces {total} bytes, over "
                                            f"MEDIA_SEGMENT_MAX_FILE_SIZE={self.config.max_file_size}")
        free = free_bytes(self.spool.parent)
        if free is not None and total - min(first, total) > free:
            # Refused now rather than after filling the disk: the spool is sparse until its segments arrive.
            raise SegmentError("disk-full", f"{total} bytes to spool, {free} free under {self.spool.parent}")
        ledger = Ledger(key=self.key, url=self.url, total=total, first=first,
                        segment_size=self.config.segment_size, etag=_header(response, "ETag"),
                        last_modified=_header(response, "Last-Modified"))
        fd = self.fd
        assert fd is not None
        os.ftruncate(fd, 0)  # nothing of an earlier version may survive in the gaps
        os.ftruncate(fd, total)  # sparse: segments land at their offsets in any order
        await run_in_thread(_write_at, fd, response.body, 0)
        ledger.done.add(0)
        self._probe_body = response.body  # hashed from memory by _fetch_rest, then dropped
        if len(ledger.segments()) > 1:
            logger.info("Downloading %s (%d bytes) as %d Range segments of %d bytes into %s", self.key, total,
                        len(ledger.segments()) - 1, ledger.segment_size, self.spool)
        return ledger

    async def _download_checked(self, request: Request) -> Response:
        """Download with MEDIA_SEGMENT_RETRIES extra attempts for transport errors and transient statuses."""
        # Bounded: retries + 1 attempts.
        for attempt in range(self.config.retries + 1):
            last = attempt == self.config.retries
            try:
                response = await self._download(request)
            except IgnoreRequest as exc:
                raise SegmentError("download-error", f"{type(exc).__name__}: {exc}") from exc
            except Exception as exc:  # transport errors, timeouts, data loss, after Scrapy's own retries
                if last:
                    raise SegmentError("download-error", f"{type(exc).__name__}: {exc}") from exc
                self._inc("retries")
                logger.debug("Retrying %s (%s: %s)", request, type(exc).__name__, exc)
                continue
            if response.status in _TRANSIENT_STATUSES and not last:
                self._inc("retries")
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def _single(self, response: Response) -> SpoolResult:
        """The server ignored Range: the 200 body is the whole file (Scrapy kept it within DOWNLOAD_MAXSIZE)."""
        body = response.body
        length = _header(response, "Content-Length")
        if length is not None and length.strip().isdigit() and int(length) != len(body):
            raise SegmentError("short-segment", f"{len(body)} bytes, Content-Length says {length}")
        if "dataloss" in response.flags or "download_stopped" in response.flags:
            raise SegmentError("short-segment", f"incomplete 200 body of {self.url}")
        logger.info("Server ignores Range for %s: downloaded %d bytes in one response (no resume possible; "
                    "limit DOWNLOAD_MAXSIZE)", self.url, len(body))
        self._inc("ranges_ignored")
        fd = self.fd
        assert fd is not None
        digest = await run_in_thread(_write_and_hash, fd, body, self.config.fsync)
        return SpoolResult(key=self.key, url=self.url, path=self.spool, size=len(body), sha256=digest,
                           head=body[:_HEAD_BYTES], content_type=self.content_type,
                           etag=_header(response, "ETag"), last_modified=_header(response, "Last-Modified"),
                           segmented=False, segments=1, fetched_bytes=self.fetched, resumed_bytes=0,
                           restarts=self.restarts, resolves=self.resolves)

    async def _fetch_rest(self, ledger: Ledger) -> SpoolResult:
        fd = self.fd
        assert fd is not None
        segments = ledger.segments()
        hasher = _OrderedHasher(fd)
        body, self._probe_body = self._probe_body, None
        hasher.advance(ledger.contiguous_end(), start=0, body=body)
        del body
        saver = ledger_saver(fd, self.ledger_file, ledger, fsync=self.config.fsync)
        if ledger.missing():
            # A new spool gets its ledger before the first segment request goes out: a crash then keeps the probe.
            await saver.saved(saver.request())
        try:
            # Bounded: each round ends complete, or raises, or spends one resolve (then raises past the cap).
            for _ in range(self.config.max_resolves + 1):
                pending = ledger.missing()
                if not pending:
                    break
                # A resumed spool's validator is checked with one request before fanning out, so that a changed
                # file costs one stopped response, not one per worker.
                expired = await self._round(ledger, segments, pending, hasher, saver,
                                            solo_first=bool(self.resumed) and not self.restarts)
                if expired is None:
                    continue
                await self._resolve(expired)
                ledger.url = self.url
            if ledger.missing():
                raise SegmentError("expired", f"{self.key}: segments still missing after re-resolving")
            await saver.flush()
            digest = await hasher.finish(ledger.total)
        finally:
            # Never leave a thread writing to a spool that the caller may delete.
            await _quietly(hasher.wait())
            await _quietly(saver.flush())
        size = os.fstat(fd).st_size
        if size != ledger.total:
            raise SegmentError("size-mismatch", f"spool has {size} bytes, expected {ledger.total}")
        head = os.pread(fd, _HEAD_BYTES, 0)
        self._inc("completed")
        return SpoolResult(key=self.key, url=self.url, path=self.spool, size=ledger.total, sha256=digest,
                           head=head, content_type=self.content_type, etag=ledger.etag,
                           last_modified=ledger.last_modified,
                           segmented=len(segments) > 1, segments=len(segments), fetched_bytes=self.fetched,
                           resumed_bytes=self.resumed, restarts=self.restarts, resolves=self.resolves)

    async def _round(self, ledger: Ledger, segments: list[tuple[int, int]], pending: list[int],
                     hasher: _OrderedHasher, saver: CoalescingSaver, *, solo_first: bool = False) -> int | None:
        """Fetch ``pending`` segments with MEDIA_SEGMENT_CONCURRENCY workers (the first one alone with
        ``solo_first``). Returns the status of an expired URL (the round stopped early), ``None`` when every
        pending segment is in; raises the first hard error."""
        if solo_first and len(pending) > 1:
            expired = await self._round(ledger, segments, pending[:1], hasher, saver)
            if expired is not None:
                return expired
            pending = pending[1:]
        queue = list(reversed(pending))
        stop: list[BaseException] = []
        need = max(segments[i][1] - segments[i][0] for i in pending)

        async def worker() -> None:
            # One body buffer per worker, reused for each of its segments: memory is segment size x concurrency
            # per file, and the crawler's pool bounds all files together.
            requested = self.pool.request(need)
            if not requested.called:
                self._inc("buffer_waits")
            buffer = await maybe_deferred_to_future(requested)
            if self.stats is not None:
                self.stats.max_value("media/segments/buffer_peak_bytes", self.pool.peak)
            sink = BodySink(buffer)
            try:
                # Bounded by the queue: every pass pops one segment.
                while queue and not stop:
                    index = queue.pop()
                    start, end = segments[index]
                    try:
                        await self._segment(ledger, index, start, end, sink, hasher)
                    except BaseException as exc:
                        stop.append(exc)
                        return
                    ledger.done.add(index)
                    generation = saver.request()
                    hasher.advance(ledger.contiguous_end())
                    self._log_progress(ledger)
                    # The next request waits until this segment is in the saved ledger: bytes served but not
                    # recorded stay within one segment per worker (what a crash may cost), however slow the
                    # fsync. The buffer waits too, so memory is bounded by the same segment size x concurrency.
                    try:
                        await saver.saved(generation)
                    except BaseException as exc:
                        stop.append(exc)
                        return
            finally:
                sink.reset()
                self.pool.give_back(buffer)

        errors = await gather_all([worker() for _ in range(min(self.config.concurrency, len(pending)))])
        errors = stop + [e for e in errors if e not in stop]
        if not errors:
            return None
        # A hard error wins over a changed file, which wins over an expired URL.
        for kind in (lambda e: not isinstance(e, SegmentError), lambda e: type(e) is SegmentError,
                     lambda e: isinstance(e, RemoteChanged)):
            for exc in errors:
                if kind(exc):
                    raise exc
        first = errors[0]
        assert isinstance(first, _Expired)
        return first.status

    def _log_progress(self, ledger: Ledger) -> None:
        # A multi-GiB download takes minutes: say how far it is, every MEDIA_SEGMENT_LOG_INTERVAL seconds.
        now = time.monotonic()
        if not self.config.log_interval or now - self._last_progress < self.config.log_interval:
            return
        self._last_progress = now
        done = ledger.done_bytes()
        rate = self.fetched / max(now - self._started, 1e-6) / MiB
        logger.info("Downloading %s: %.1f of %.1f MiB (%.0f%%), %d of %d segments, %.1f MiB/s", self.key,
                    done / MiB, ledger.total / MiB, 100 * done / max(ledger.total, 1), len(ledger.done),
                    len(ledger.segments()), rate)

    async def _segment(self, ledger: Ledger, index: int, start: int, end: int, sink: BodySink,
                       hasher: _OrderedHasher) -> None:
        """Fetch one segment into ``sink``, check it, write it at its offset and hash it when next in line."""
        # Bounded: retries + 1 attempts for a short or cut segment (transport errors are counted inside).
        for attempt in range(self.config.retries + 1):
            request = self._request(start=start, end=end, probe=False, validator=ledger.if_range, sink=sink)
            response = await self._download_checked(request)
            if response.status in _EXPIRED_STATUSES:
                raise _Expired(response.status)
            # The handler puts a 206 body into the sink; without it (another handler) it is in response.body.
            body: bytes | memoryview = sink.view() if sink.attached else response.body
            flags = [*response.flags, "overflow"] if sink.attached and sink.overflow else response.flags
            try:
                check_segment(status=response.status, content_range=_header(response, "Content-Range"),
                              etag=_header(response, "ETag"), body_size=len(body), flags=flags,
                              start=start, end=end, total=ledger.total, expected_etag=ledger.etag)
            except SegmentError as exc:
                if exc.reason != "short-segment" or attempt == self.config.retries:
                    raise
                self._inc("retries")
                continue
            del response
            assert self.fd is not None
            await run_in_thread(_write_and_take, self.fd, body, start, hasher)
            self._inc("written_bytes", end - start)
            return
        raise AssertionError("unreachable")  # pragma: no cover


def _write_and_take(fd: int, body: bytes | memoryview, start: int, hasher: _OrderedHasher) -> None:
    # (Worker thread.) Write a segment, then hash it from memory if it is next in line (the spool need not be
    # read back). One writer at a time per spool: concurrent pwrite()s to one file contend for its inode lock
    # in the kernel, which spins (0.4 s more system time per GiB in bench_large_file); a Python lock sleeps.
    with hasher.write_lock:
        _write_at(fd, body, start)
    hasher.take(body, start)




def _write_and_hash(fd: int, body: bytes, fsync: bool) -> str:
    _write_at(fd, body, 0)
    os.ftruncate(fd, len(body))
    if fsync:
        os.fdatasync(fd)
    return hashlib.sha256(body).hexdigest()


async def _quietly(awaitable: Awaitable[None]) -> None:
    try:
        await awaitable
    except Exception:  # already reported through the main path
        pass


async def fetch_segmented(url: str, *, key: str, crawler: Crawler, spool_dir: str | os.PathLike[str],
                          config: SegmentConfig | None = None, headers: dict[str, str] | None = None,
                          meta: dict[str, Any] | None = None, resolve: Resolver | None = None) -> SpoolResult:
    """Download ``url`` into the spool of asset ``key`` under ``spool_dir`` (see the module docstring).

    Each request goes through ``crawler.engine.download_async()``; ``headers`` (e.g. Referer) and ``meta`` are
    added to every one of them. ``resolve(url)`` is asked for a fresh URL when the current one answers 403/410.
    Resumes from an earlier spool of ``key`` when its ledger allows. Raises :class:`SegmentError`; the spool and
    its ledger are then kept for a later run (except after ``remote-changed``). On success the spool is complete
    and hashed; publish it with :func:`publish_spool` or drop it with :func:`remove_spool`.
    """
    crawler.signals.connect(stop_unranged_body, signal=signals.headers_received)
    download = _Download(url=url, key=key, crawler=crawler, spool=spool_path(spool_dir=spool_dir, key=key),
                         config=config or SegmentConfig.from_settings(crawler.settings), headers=headers,
                         meta=meta, resolve=resolve)
    started = time.monotonic()
    try:
        result = await download.run()
    except SegmentError as exc:
        if crawler.stats is not None:
            crawler.stats.inc_value(f"media/segments/failed/{exc.reason}")
        raise
    logger.debug("Spooled %s: %d bytes (%d fetched, %d resumed) in %.2fs, sha256 %s", key, result.size,
                 result.fetched_bytes, result.resumed_bytes, time.monotonic() - started, result.sha256)
    return result


def publish_spool(result: SpoolResult, *, store: ContentStore, ext: str | None = None) -> Persisted:
    """(Blocking: call in a worker thread.) Move a complete spool into the content-addressed store by rename and
    delete its ledger. The SHA-256 already computed is handed to the store when its ``publish_file`` accepts a
    ``sha256`` argument (no second pass over the file); a store that hashes again must get the same digest."""
    kwargs: dict[str, Any] = {"ext": ext}
    if "sha256" in inspect.signature(store.publish_file).parameters:
        kwargs["sha256"] = result.sha256
    persisted = store.publish_file(result.path, **kwargs)
    remove_spool(result.path)
    if persisted.sha256 != result.sha256 or persisted.size != result.size:
        raise SegmentError("size-mismatch", f"store saw {persisted.size} bytes / {persisted.sha256}, "
                                            f"the download {result.size} / {result.sha256}")
    return persisted


def sweep_spool(spool_dir: str | os.PathLike[str], *, older_than: float = 7 * 24 * 3600) -> int:
    """Delete spools (and ledgers, and their stray temp files) untouched for ``older_than`` seconds, e.g. of
    assets no longer crawled, and completed spools (``*.done``) a crash kept from being published; return how
    many spools went. Spools in use are locked and skipped."""
    cutoff = time.time() - older_than
    removed = 0
    for done in Path(spool_dir).glob("*.part.*.done"):
        with contextlib.suppress(FileNotFoundError):
            if done.stat().st_mtime < cutoff:
                done.unlink()
                removed += 1
    for spool in Path(spool_dir).glob("*.part"):
        try:
            fd = os.open(spool, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            newest = max(os.fstat(fd).st_mtime, _mtime(ledger_path(spool)))
            if newest < cutoff:
                remove_spool(spool)
                remove_stray_temps(ledger_path(spool))
                removed += 1
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return removed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


class SegmentedDownloader:
    """The large-file path of the media pipeline: :func:`fetch_segmented` with the MEDIA_SEGMENT_* settings,
    spooling under ``<FILES_STORE>/spool``.

    Settings: MEDIA_SEGMENT_THRESHOLD (bytes; larger files are segmented, default 16 MiB), MEDIA_SEGMENT_SIZE
    (default 16 MiB), MEDIA_SEGMENT_CONCURRENCY (segments of one file in flight, default 3), MEDIA_SEGMENT_MEMORY
    (segment buffers of all files together, default 256 MiB), MEDIA_SEGMENT_RETRIES, MEDIA_SEGMENT_MAX_RESTARTS,
    MEDIA_SEGMENT_MAX_RESOLVES, MEDIA_FSYNC. Peak memory per file is about max(threshold, segment size ×
    concurrency), and all files together stay within MEDIA_SEGMENT_MEMORY plus one probe per file.

    Expired URLs are re-resolved with the ``resolve`` argument of :meth:`download` or, without one, with the
    spider's ``async def refresh_media_url(self, *, key: str, url: str) -> str | None`` when it has one.
    """

    def __init__(self, crawler: Crawler, *, spool_dir: str | os.PathLike[str] | None = None) -> None:
        self.crawler = crawler
        try:
            self.config = SegmentConfig.from_settings(crawler.settings)
        except ValueError as exc:
            raise NotConfigured(str(exc)) from None
        self.spool_dir = Path(spool_dir) if spool_dir else spool_dir_for(crawler.settings.get("FILES_STORE")
                                                                          or "files")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SegmentedDownloader:
        return cls(crawler)

    async def download(self, url: str, *, key: str, headers: dict[str, str] | None = None,
                       meta: dict[str, Any] | None = None, resolve: Resolver | None = None) -> SpoolResult:
        """Spool asset ``key`` from ``url`` (see :func:`fetch_segmented`)."""
        if resolve is None:
            refresh = getattr(self.crawler.spider, "refresh_media_url", None)
            if refresh is not None:
                async def resolve(old: str) -> str | None:
                    return await refresh(key=key, url=old)
        return await fetch_segmented(url, key=key, crawler=self.crawler, spool_dir=self.spool_dir,
                                     config=self.config, headers=headers, meta=meta, resolve=resolve)

    async def publish(self, result: SpoolResult, *, store: ContentStore, ext: str | None = None) -> Persisted:
        """Move a spool into ``store`` (:func:`publish_spool`, in a worker thread)."""
        return await run_in_thread(publish_spool, result, store=store, ext=ext)

    async def discard(self, result: SpoolResult) -> None:
        """Drop a spool that will not be published (e.g. rejected content)."""
        await run_in_thread(remove_spool, result.path)
