"""The batch committer: checks, hashes and stores downloaded bodies, then writes their index rows, in rounds
(order: docs/media.md, "Crash safety"). The file work runs in a one-process ``ProcessPoolExecutor`` by default (its
own GIL; measured in docs/benchmarks.md), or on the store's threads.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from mediacrawler.media.index import MediaIndex, ObjectRecord
from mediacrawler.media.integrity import BodyCheck, MediaRejected, check_body
from mediacrawler.media.store import ContentAddressedStore, Persisted, Staged, StoreError

logger = logging.getLogger(__name__)

_STOP = object()
#: Seconds between the store process's looks at whether the crawler is still alive.
_PARENT_POLL = 0.2
#: What one body's file work returns: its outcome and the checks' findings.
Outcome = tuple[Persisted | BaseException, BodyCheck | None]


class CommitJob:
    """One downloaded body on its way into the store (``checked`` when the checks already ran; ``waiter`` is the
    submitter's), then its outcome: ``obj`` and ``created`` (False: stored already), or ``error``."""

    __slots__ = ("body", "checked", "created", "error", "key", "kind", "obj", "url", "waiter")

    def __init__(self, body: bytes, *, kind: str, key: str | None, url: str, checked: BodyCheck | None = None,
                 waiter: Any = None) -> None:
        self.body, self.kind, self.key, self.url, self.checked, self.waiter = body, kind, key, url, checked, waiter
        self.obj: ObjectRecord | None = None
        self.created = False
        self.error: BaseException | None = None


class BatchCommitter:
    """Commits what queued up since the last round (up to ``max_batch`` bodies) as one group, two rounds in flight
    (docs/media.md, "Concurrency"); ``deliver(jobs)``, quick and thread-safe, gets each round's jobs in order. With
    ``isolated`` the file work runs in a helper process (in the store's threads when it cannot start or dies)."""

    def __init__(self, *, store: ContentAddressedStore, index: MediaIndex | None,
                 deliver: Callable[[list[CommitJob]], None], max_image_pixels: int, max_image_decode_bytes: int,
                 max_batch: int, isolated: bool = False, name: str = "media-committer") -> None:
        self.store, self.index, self.deliver = store, index, deliver
        self.limits = (max_image_pixels, max_image_decode_bytes)
        self.max_batch = max(1, max_batch)
        self.isolated = isolated
        self.pool: ProcessPoolExecutor | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._rounds: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._room = threading.Semaphore(2)
        self._threads = [threading.Thread(target=self._gather, name=name, daemon=True),
                         threading.Thread(target=self._finish, name=f"{name}-index", daemon=True)]
        self._started = self._closed = False
        #: Rounds committed and objects in them (tests, benchmark).
        self.rounds = self.committed = 0

    def start(self) -> None:
        """Start the helper process (with ``isolated``), then the threads."""
        if not self._started:
            self._started = True
            self._pool()
            for thread in self._threads:
                thread.start()

    def _pool(self) -> ProcessPoolExecutor | None:
        if self.pool is None and self.isolated:
            self.isolated = False  # one start attempt
            try:
                # fork, from start(), before our threads run (why not spawn: docs/media.md, "Concurrency").
                self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                                initializer=_worker_init, initargs=(str(self.store.root),
                                                                                    self.store.fsync))
                self.pool.submit(int).result()  # forked and answering, or fall back now
            except (OSError, BrokenProcessPool) as exc:
                logger.error("Media store process did not start (%s); storing in threads", exc)
                self._drop_pool()
        return self.pool

    def _drop_pool(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, job: CommitJob) -> None:
        """Queue ``job`` (any thread); its outcome comes back through ``deliver``."""
        if self._closed:
            raise RuntimeError("the committer is closed")
        self._queue.put(job)

    def close(self, timeout: float | None = None) -> None:
        """Commit and deliver everything queued, then stop the threads and the helper process."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            self._queue.put(_STOP)
            for thread in self._threads:
                thread.join(timeout)
        self._drop_pool()

    def _gather(self) -> None:
        stopping = False
        while not stopping:
            self._room.acquire()  # jobs queue up meanwhile: the next round is larger
            first = self._queue.get()
            if first is _STOP:
                break
            jobs = [first]
            while len(jobs) < self.max_batch:  # bounded by max_batch
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stopping = True
                    break
                jobs.append(nxt)
            try:
                pending: Any = self._start_files(jobs)
            except BaseException as exc:  # noqa: BLE001 - reported with the round
                pending = exc
            self._rounds.put((jobs, pending))
        self._rounds.put(_STOP)

    def _finish(self) -> None:
        while (item := self._rounds.get()) is not _STOP:  # ends with the gathering thread
            jobs, pending = item
            try:
                if isinstance(pending, BaseException):
                    raise pending
                self._finish_round(jobs, pending)
            except BaseException as exc:  # every job must come back, whatever happened
                logger.exception("Media commit round failed")
                for job in jobs:
                    if job.obj is None and job.error is None:
                        job.error = exc
            try:
                self.deliver(jobs)
            except Exception:
                logger.exception("Delivering media commit results failed")
            self._room.release()

    def _start_files(self, jobs: list[CommitJob]) -> Future[list[Outcome]] | list[Outcome]:
        work = [(job.body, job.kind, job.checked) for job in jobs]
        pool = self._pool()
        if pool is not None:
            try:
                return pool.submit(_store_round, work, self.limits)
            except (BrokenProcessPool, RuntimeError):  # died (or shut down) since the last round
                pass
        return store_round(self.store, work, self.limits)

    def _finish_round(self, jobs: list[CommitJob], pending: Future[list[Outcome]] | list[Outcome]) -> None:
        if isinstance(pending, Future):
            try:
                pending = pending.result()
            except BrokenProcessPool as exc:
                # Redone here: publishing is idempotent (what the process linked is found, not rewritten).
                logger.error("Media store process died (%s); storing in threads from now on", exc)
                self._drop_pool()
                pending = store_round(self.store, [(job.body, job.kind, job.checked) for job in jobs], self.limits)
        rows: list[tuple[ObjectRecord, str | None, str | None]] = []
        indexed: list[CommitJob] = []
        for job, (outcome, checked) in zip(jobs, pending, strict=True):
            job.body = b""  # do not keep the bytes alive until delivery
            job.checked = checked
            if not isinstance(outcome, Persisted):
                job.error = outcome
                continue
            assert checked is not None
            job.obj = ObjectRecord(sha256=outcome.sha256, path=outcome.relpath, size=outcome.size,
                                   mime=checked.sniffed.mime, width=checked.width, height=checked.height)
            job.created = outcome.created
            rows.append((job.obj, job.key, job.url))
            indexed.append(job)
        if rows and self.index is not None:
            try:
                self.index.record_many(rows)
            except Exception as exc:  # noqa: BLE001 - a dead index must not lose the round
                # The files are safe (verify lists them as orphans, --repair adopts them), but an asset whose row
                # is not durable must not be recorded as stored: it fails, and a later run deduplicates it.
                logger.error("Media index write failed for %d objects (%s)", len(rows), exc)
                for job in indexed:
                    job.obj, job.created = None, False
                    job.error = StoreError(f"index-write-failed: {type(exc).__name__}: {exc}")
                rows = []
        self.rounds += 1
        self.committed += len(rows)


def store_round(store: ContentAddressedStore, work: Sequence[tuple[bytes, str, BodyCheck | None]],
                limits: tuple[int, int]) -> list[Outcome]:
    """The file work of one round: per body, on the store's threads, the checks still due, SHA-256 and a temp file;
    then :meth:`~ContentAddressedStore.publish` of the group. Per body, in order, its outcome and checks."""
    max_pixels, max_decode = limits

    def prepare(item: tuple[bytes, str, BodyCheck | None]) -> tuple[Staged | Persisted | BaseException,
                                                                     BodyCheck | None]:
        body, kind, checked = item
        try:
            if checked is None:
                checked = check_body(body, kind=kind, max_image_pixels=max_pixels,
                                     max_image_decode_bytes=max_decode)
            return store.stage(body, ext=checked.sniffed.ext, sha256=hashlib.sha256(body).hexdigest()), checked
        except (MediaRejected, OSError, StoreError) as exc:
            return exc, checked

    prepared = store.map_parallel(prepare, list(work))
    return list(zip(store.publish([outcome for outcome, _ in prepared]), [checked for _, checked in prepared],
                    strict=True))


# --- the helper process -----------------------------------------------------------------------------------------
_store: ContentAddressedStore | None = None


def _worker_init(root: str, fsync: bool) -> None:
    global _store  # noqa: PLW0603 - one store per helper process
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # the crawler decides when to stop (it shuts the pool down)
    signal.set_wakeup_fd(-1)  # the reactor's, inherited: not ours to write to
    _store = ContentAddressedStore(root, fsync=fsync)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    # A pool worker holds both ends of its queues, so it never sees the crawler die (SIGKILL): it looks. Whatever
    # it leaves is what a crash leaves (docs/media.md, "Crash safety").
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL)
    os._exit(0)


def _store_round(work: list[tuple[bytes, str, BodyCheck | None]], limits: tuple[int, int]) -> list[Outcome]:
    assert _store is not None
    return store_round(_store, work, limits)
