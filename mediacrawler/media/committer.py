"""The batch committer: checks, hashes and stores downloaded bodies, then writes their index rows, in rounds
(order: docs/media.md, "Crash safety"). Rounds are coroutines on the reactor's asyncio loop; a small body's checks,
hash and temp file run on the loop, a large one's, the group's syncs and links, and the index writes on the store's
executor (docs/media.md, "Concurrency").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Sequence

from mediacrawler.media.index import MediaIndex, ObjectRecord
from mediacrawler.media.integrity import BodyCheck, MediaRejected, check_body
from mediacrawler.media.store import ContentAddressedStore, Persisted, Staged, StoreError, SyncGroup

logger = logging.getLogger(__name__)

#: Rounds in flight at once: the next round's file work runs while the last one's index rows are written.
ROUNDS_IN_FLIGHT = 2
#: What one body's file work returns: its outcome and the checks' findings.
Outcome = tuple[Persisted | BaseException, BodyCheck | None]
#: What one body's staging returns: its temp file (or the object already stored, or the error), and the checks.
Prepared = tuple[Staged | Persisted | BaseException, BodyCheck | None]


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
                 max_image_decode_bytes: int, max_batch: int, inline_bytes: int) -> None:
        self.store, self.index = store, index
        self.limits = (max_image_pixels, max_image_decode_bytes)
        self.max_batch = max(1, max_batch)
        #: Bodies up to this size are staged on the loop's thread (MEDIA_INLINE_CHECK_BYTES), larger ones on the
        #: executor.
        self.inline_bytes = inline_bytes
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
            with contextlib.ExitStack() as stack:
                group = stack.enter_context(self.store.sync_group())  # opened before the bodies are written
                staged = await self._stage(jobs)
                # From here the executor's task owns the group's descriptor and closes it after the publish, even
                # if this coroutine is cancelled meanwhile.
                owned = stack.pop_all()
            published = await self.store.run(_publish_group, self.store, [outcome for outcome, _ in staged],
                                             group, owned)
            outcomes = list(zip(published, [checked for _, checked in staged], strict=True))
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

    async def _stage(self, jobs: list[CommitJob]) -> list[Prepared]:
        """Each job's body checked (unless it was), hashed and written to a temp file: a small body's on the loop's
        thread, where it costs less than the hand-offs of the GIL to an executor thread and back (one system call
        each: docs/benchmarks.md, "Media store", "Session 13"), as Scrapy's own FilesPipeline writes its files;
        the large ones together in one executor task."""
        staged: list[Prepared | None] = [None] * len(jobs)
        large: list[int] = []
        for i, job in enumerate(jobs):
            if len(job.body) <= self.inline_bytes:
                staged[i] = stage_body(self.store, job.body, job.kind, job.checked, self.limits)
            else:
                large.append(i)
        if large:
            try:
                done = await self.store.run(lambda: [stage_body(self.store, jobs[i].body, jobs[i].kind,
                                                                jobs[i].checked, self.limits) for i in large])
            except BaseException:
                self.store.discard([outcome for outcome, _ in filter(None, staged) if isinstance(outcome, Staged)])
                raise
            for i, outcome in zip(large, done, strict=True):
                staged[i] = outcome
        return [outcome for outcome in staged if outcome is not None]

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


def stage_body(store: ContentAddressedStore, body: bytes, kind: str, checked: BodyCheck | None,
               limits: tuple[int, int]) -> Prepared:
    """One body's checks still due, SHA-256 and temp file (:meth:`~ContentAddressedStore.stage`, inside the
    round's :meth:`~ContentAddressedStore.sync_group`): its outcome, or the error that stopped it, and the checks'
    findings."""
    max_pixels, max_decode = limits
    try:
        if checked is None:
            checked = check_body(body, kind=kind, max_image_pixels=max_pixels, max_image_decode_bytes=max_decode)
        return store.stage(body, ext=checked.sniffed.ext, sha256=hashlib.sha256(body).hexdigest()), checked
    except (MediaRejected, OSError, StoreError) as exc:
        return exc, checked


def _publish_group(store: ContentAddressedStore, group: Sequence[Staged | Persisted | BaseException],
                   sync: SyncGroup, owned: contextlib.ExitStack) -> list[Persisted | BaseException]:
    """(Store executor.) :meth:`~ContentAddressedStore.publish` of a staged group, then its sync group closed."""
    with owned:
        return store.publish(group, sync=sync)
