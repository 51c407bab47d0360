"""The batch committer: checks, hashes and stores downloaded bodies, then writes their index rows, in rounds
(order: docs/media.md, "Crash safety"). Rounds are coroutines on the reactor's asyncio loop; their file work and
index writes run on the store's executor (docs/media.md, "Concurrency").
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence

from mediacrawler.media.index import MediaIndex, ObjectRecord
from mediacrawler.media.integrity import BodyCheck, MediaRejected, check_body
from mediacrawler.media.store import ContentAddressedStore, Persisted, Staged, StoreError

logger = logging.getLogger(__name__)

#: Rounds in flight at once: the next round's file work runs while the last one's index rows are written.
ROUNDS_IN_FLIGHT = 2
#: What one body's file work returns: its outcome and the checks' findings.
Outcome = tuple[Persisted | BaseException, BodyCheck | None]


class CommitJob:
    """One downloaded body on its way into the store (``checked`` when the checks already ran), then its outcome:
    ``obj`` and ``created`` (False: stored already), or ``error``."""

    __slots__ = ("body", "checked", "created", "error", "key", "kind", "obj", "url", "waiter")

    def __init__(self, body: bytes, *, kind: str, key: str | None, url: str, checked: BodyCheck | None = None
                 ) -> None:
        self.body, self.kind, self.key, self.url, self.checked = body, kind, key, url, checked
        self.waiter: asyncio.Future[CommitJob] | None = None
        self.obj: ObjectRecord | None = None
        self.created = False
        self.error: BaseException | None = None


class BatchCommitter:
    """Commits what was submitted since the last round began (up to ``max_batch`` bodies) as one group,
    :data:`ROUNDS_IN_FLIGHT` rounds at a time, their index writes and results in round order (docs/media.md,
    "Concurrency"). Used from coroutines on one asyncio loop: ``await commit(job)``."""

    def __init__(self, *, store: ContentAddressedStore, index: MediaIndex | None, max_image_pixels: int,
                 max_image_decode_bytes: int, max_batch: int) -> None:
        self.store, self.index = store, index
        self.limits = (max_image_pixels, max_image_decode_bytes)
        self.max_batch = max(1, max_batch)
        self._queue: list[CommitJob] = []
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references to tasks
        # The previous round's turn at the index: rounds write rows and wake their jobs in the order they began.
        self._turn: asyncio.Future[None] | None = None
        self._closed = False
        #: Rounds committed and objects in them (tests, benchmark).
        self.rounds = self.committed = 0

    async def commit(self, job: CommitJob) -> CommitJob:
        """Queue ``job`` for the next round; returns it once its object and index row are durable, or with its
        ``error``."""
        if self._closed:
            raise RuntimeError("the committer is closed")
        job.waiter = asyncio.get_running_loop().create_future()
        self._queue.append(job)
        self._start_rounds()
        return await job.waiter

    async def close(self) -> None:
        """Wait for every queued job's round; no job is taken after this."""
        self._closed = True
        while self._tasks:  # bounded: no round starts once closed and the queue is empty
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _start_rounds(self) -> None:
        # A round takes the queue when it first runs (next loop iteration): jobs submitted meanwhile join it.
        while self._queue and self._in_flight < ROUNDS_IN_FLIGHT:
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._round())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _round(self) -> None:
        jobs = self._queue[: self.max_batch]
        del self._queue[: len(jobs)]
        previous, turn = self._turn, asyncio.get_running_loop().create_future()
        self._turn = turn
        try:
            if jobs:
                await self._commit_round(jobs, previous)
        finally:
            turn.set_result(None)
            self._in_flight -= 1
            if self._queue:
                self._start_rounds()

    async def _commit_round(self, jobs: list[CommitJob], previous: asyncio.Future[None] | None) -> None:
        try:
            outcomes = await self.store.run(store_round, self.store,
                                            [(job.body, job.kind, job.checked) for job in jobs], self.limits)
            if previous is not None:
                await previous
            await self.store.run(self._finish_round, jobs, outcomes)
        except BaseException as exc:  # every job must come back, whatever happened
            if previous is not None and not previous.done():
                await previous
            logger.error("Media commit round failed", exc_info=exc)
            for job in jobs:
                if job.obj is None and job.error is None:
                    job.error = exc
        for job in jobs:
            waiter, job.waiter = job.waiter, None
            if waiter is not None and not waiter.done():  # done: its coroutine was cancelled
                waiter.set_result(job)

    def _finish_round(self, jobs: list[CommitJob], pending: list[Outcome]) -> None:
        """(Store executor.) The round's objects into its jobs, then its index rows, in one durable write."""
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
    """(Store executor.) The file work of one round: per body, in this thread (spread over the store's threads
    it cost GIL hand-offs and bought nothing on two cores), the checks still due, SHA-256 and a temp file; then
    :meth:`~ContentAddressedStore.publish` of the group under one :meth:`~ContentAddressedStore.sync_group`. Per
    body, in order, its outcome and checks. One of at most :data:`ROUNDS_IN_FLIGHT` tasks that may wait for others
    of the executor (the per-file syncs where there is no ``syncfs``)."""
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

    with store.sync_group() as group:
        prepared = [prepare(item) for item in work]
        published = store.publish([outcome for outcome, _ in prepared], sync=group)
    return list(zip(published, [checked for _, checked in prepared], strict=True))
