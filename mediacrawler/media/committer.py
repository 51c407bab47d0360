"""The batch committer: checks, hashes and stores downloaded bodies, and writes their index rows, in groups.

The media pipeline hands every downloaded body to :meth:`BatchCommitter.submit` and awaits the outcome. The
committer thread takes whatever has queued up since its last round (up to ``max_batch`` bodies) and, for the whole
group at once:

1. on the store's sync threads, in parallel, per body: the integrity checks still due (magic bytes, the header
   pixel cap, the Pillow decode: :func:`~mediacrawler.media.integrity.check_body`), SHA-256, a temp file written
   and synced, then linked into place (:meth:`~mediacrawler.media.store.ContentAddressedStore.stage`,
   :meth:`~mediacrawler.media.store.ContentAddressedStore.publish_one`);
2. one sync per directory that gained an entry in this round
   (:meth:`~mediacrawler.media.store.ContentAddressedStore.sync_new_entries`);
3. the round's index rows in one transaction, synced (:meth:`~mediacrawler.media.index.MediaIndex.record_many`),
   **after** the objects are durable — so an index row never points at a missing object, even after a crash;
4. the finished group handed back with one call of ``deliver`` (the pipeline resolves the waiting coroutines on
   the reactor thread in one wake-up).

A job is reported done (and its record may say ``downloaded``) only once its object and its index row are durable;
when the round's index write fails, its jobs come back with ``StoreError("index-write-failed: …")`` (the pipeline
records those assets as failed; the objects stay, and the next crawl or ``verify --repair`` indexes them).
A crash at any point leaves whole objects under ``objects/`` (at worst not yet indexed: the next crawl indexes
them as ``deduplicated`` without storing them twice, and ``verify`` lists them as orphans until then), ``*.part``
files under ``tmp/``, and index rows only for objects that exist.

Why this shape (docs/benchmarks.md): on a small machine the crawl is bound by the GIL and the reactor thread.
Filesystem metadata calls (mkdir, create, link) can block for hundreds of microseconds while syncs are committing,
so they stay off the reactor; a worker thread has to win the GIL back from the busy reactor after every system
call, so per-body work is spread over several threads (their waits overlap) and everything per-group (directory
syncs, the transaction, the wake-up of the reactor) happens once per round instead of once per body.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from mediacrawler.media.index import MediaIndex, ObjectRecord
from mediacrawler.media.integrity import (
    DEFAULT_MAX_IMAGE_DECODE_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    BodyCheck,
    MediaRejected,
    check_body,
)
from mediacrawler.media.sniff import Sniffed
from mediacrawler.media.store import ContentAddressedStore, Persisted, Staged, StoreError, credit_first_twin

logger = logging.getLogger(__name__)

#: Most bodies committed in one round (MEDIA_COMMIT_BATCH).
DEFAULT_MAX_BATCH = 256

_STOP = object()


class CommitJob:
    """One downloaded body on its way into the store, and then its outcome.

    In: ``body``, the asset ``kind``, the index ``key`` and ``url``, ``checked`` when the checks already ran (else
    the committer runs them), ``waiter`` (anything the submitter uses to find the job again; the committer never
    touches it). Out, once delivered: ``obj`` and ``created`` (``False``: the bytes were stored already), or
    ``error`` (:class:`~mediacrawler.media.integrity.MediaRejected`, ``OSError``, :class:`StoreError`).
    """

    __slots__ = ("body", "checked", "created", "error", "key", "kind", "obj", "staged", "url", "waiter")

    def __init__(self, body: bytes, *, kind: str, key: str | None, url: str, checked: BodyCheck | None = None,
                 waiter: Any = None) -> None:
        self.body = body
        self.kind = kind
        self.key = key
        self.url = url
        self.checked = checked
        self.waiter = waiter
        self.staged: Staged | None = None
        self.obj: ObjectRecord | None = None
        self.created = False
        self.error: BaseException | None = None


class BatchCommitter:
    """The committer thread (see the module docstring).

    ``deliver(jobs)`` is called on the committer thread after each round with the finished jobs (in submission
    order); it must be quick and thread-safe (e.g. ``loop.call_soon_threadsafe(resolve, jobs)``).
    """

    def __init__(self, *, store: ContentAddressedStore, index: MediaIndex | None,
                 deliver: Callable[[list[CommitJob]], None], max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                 max_image_decode_bytes: int = DEFAULT_MAX_IMAGE_DECODE_BYTES,
                 max_batch: int = DEFAULT_MAX_BATCH, isolated: bool = False, name: str = "media-committer") -> None:
        self.store = store
        self.index = index
        self.deliver = deliver
        self.max_image_pixels = max_image_pixels
        self.max_image_decode_bytes = max_image_decode_bytes
        self.max_batch = max(1, max_batch)
        #: With ``isolated``, the checks and file work of each round run in a helper process (:class:`StoreWorker`)
        #: with its own GIL; this thread keeps the index writes and the hand-back. Falls back to in-process work
        #: if the helper cannot start or dies.
        self.isolated = isolated
        self._worker: StoreWorker | None = None
        self._worker_tried = False  # one start attempt: after a failure, rounds stay in-process
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self._closed = False
        #: Rounds committed and objects in them (for tests and the benchmark).
        self.rounds = 0
        self.committed = 0

    def start(self, *, lazy: bool = False) -> None:
        """Start the committer thread, and with ``isolated`` the helper process: now, or with ``lazy`` on the first
        round (a crawl without images, e.g. videos only or records only, then never pays its start-up)."""
        if not self._started:
            self._started = True
            if not lazy:
                self._spawn_worker()
            self._thread.start()

    def _spawn_worker(self) -> None:
        if not self.isolated or self._worker_tried:
            return
        self._worker_tried = True
        try:
            self._worker = StoreWorker(self.store, max_image_pixels=self.max_image_pixels,
                                       max_image_decode_bytes=self.max_image_decode_bytes)
        except OSError as exc:
            logger.error("Media store worker process did not start (%s); storing in-process", exc)

    def submit(self, job: CommitJob) -> None:
        """Queue ``job`` (any thread); its outcome comes back through ``deliver``."""
        if self._closed:
            raise RuntimeError("the committer is closed")
        self._queue.put(job)

    def close(self, timeout: float | None = None) -> None:
        """Commit and deliver everything queued, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            self._queue.put(_STOP)
            self._thread.join(timeout)
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    # --- committer thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            jobs = [first]
            while len(jobs) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stopping = True
                    break
                jobs.append(nxt)
            try:
                self.commit(jobs)
            except BaseException as exc:  # every job must come back, whatever happened
                logger.exception("Media commit round failed")
                for job in jobs:
                    if job.obj is None and job.error is None:
                        job.error = exc
            try:
                self.deliver(jobs)
            except Exception:
                logger.exception("Delivering media commit results failed")

    def commit(self, jobs: list[CommitJob]) -> None:
        """Check, store and index ``jobs`` as one group (the committer thread's round; callable directly)."""
        outcomes: list[Persisted | BaseException] | None = None
        self._spawn_worker()
        if self._worker is not None:
            try:
                outcomes = self._worker.run(jobs)
            except (OSError, ValueError) as exc:
                # Redone in-process: publishing is idempotent (what the worker linked is found, not rewritten).
                logger.error("Media store worker process failed (%s); storing in-process from now on", exc)
                self._worker.close()
                self._worker = None
        if outcomes is None:
            outcomes = store_group(self.store, jobs, max_image_pixels=self.max_image_pixels,
                                   max_image_decode_bytes=self.max_image_decode_bytes)
        rows: list[tuple[ObjectRecord, str | None, str | None]] = []
        indexed: list[CommitJob] = []
        for job, outcome in zip(jobs, outcomes, strict=True):
            job.body = b""  # do not keep the bytes alive until delivery
            if not isinstance(outcome, Persisted):
                job.error = outcome
                continue
            checked = job.checked
            assert checked is not None
            obj = ObjectRecord(sha256=outcome.sha256, path=outcome.relpath, size=outcome.size,
                               mime=checked.sniffed.mime, width=checked.width, height=checked.height)
            rows.append((obj, job.key, job.url))
            indexed.append(job)
            job.obj = obj
            job.created = outcome.created
        if rows and self.index is not None:
            try:
                self.index.record_many(rows)
            except Exception as exc:  # noqa: BLE001 - a dead index must not lose the round
                # The files are safe in the store (verify lists them as orphans, --repair adopts them), but an
                # asset whose row is not durable must not be recorded as stored: it fails, and a later run
                # fetches it again (deduplicated against the file already there).
                logger.error("Media index write failed for %d objects (%s)", len(rows), exc)
                for job in indexed:
                    job.obj = None
                    job.created = False
                    job.error = StoreError(f"index-write-failed: {type(exc).__name__}: {exc}")
                rows = []
        self.rounds += 1
        self.committed += len(rows)



def store_group(store: ContentAddressedStore, jobs: Sequence[CommitJob], *,
                max_image_pixels: int, max_image_decode_bytes: int = DEFAULT_MAX_IMAGE_DECODE_BYTES
                ) -> list[Persisted | BaseException]:
    """The file work of one round, in this process: per job (on the store's sync threads) the checks still due,
    SHA-256, temp file, sync, link; then one sync per directory that gained an entry. A
    :class:`~mediacrawler.media.store.Persisted` or the exception for each job; fills ``job.checked``."""

    def one(job: CommitJob) -> Persisted | BaseException:
        try:
            if job.checked is None:
                job.checked = check_body(job.body, kind=job.kind, max_image_pixels=max_image_pixels,
                                         max_image_decode_bytes=max_image_decode_bytes)
            staged = store.stage(job.body, ext=job.checked.sniffed.ext, sha256=hashlib.sha256(job.body).hexdigest())
        except (MediaRejected, OSError, StoreError) as exc:
            return exc
        if isinstance(staged, Persisted):
            return staged
        job.staged = staged
        return store.publish_one(staged)

    outcomes: list[Persisted | BaseException] = store.map_parallel(one, list(jobs))
    pairs = [(job.staged, outcome) for job, outcome in zip(jobs, outcomes, strict=True) if job.staged is not None]
    if pairs:
        synced = store.sync_new_entries([st for st, _ in pairs], [o for _, o in pairs])
        by_staged = {id(st): o for (st, _), o in zip(pairs, synced, strict=True)}
        outcomes = [by_staged.get(id(job.staged), o) if job.staged is not None else o
                    for job, o in zip(jobs, outcomes, strict=True)]
    for job in jobs:
        job.staged = None
    return credit_first_twin(outcomes)


# --- the store worker process ---------------------------------------------------------------------------------
# Wire format, both ways over the worker's stdin/stdout: one JSON line, then (requests only) the bodies back to
# back. Request: {"jobs": [[kind, size, checked or null], ...]}, checked = [mime, ext, family, width, height].
# Response: [outcome, ...], outcome = {"ok": [sha256, relpath, size, created, checked]} or
# {"err": [type, reason, detail, errno]}.


class StoreWorker:
    """A helper process that does :func:`store_group` for the committer: same code, same store, its own GIL.

    On two cores the crawl is bound by the GIL: every system call of a worker *thread* (about fifteen per body:
    decode, hash, mkdir, create, write, sync, link, unlink, directory sync) has to win the GIL back from the busy
    reactor thread, and those hand-overs cost the reactor more than the work itself. The process gets the bodies
    of a round in one write and answers in one line. It ignores SIGINT/SIGTERM (the crawler decides when to
    stop) and exits when its stdin closes, e.g. when the crawler dies.
    """

    def __init__(self, store: ContentAddressedStore, *, max_image_pixels: int,
                 max_image_decode_bytes: int = DEFAULT_MAX_IMAGE_DECODE_BYTES) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from mediacrawler.media.committer import worker_main; worker_main()",
             str(store.root), "1" if store.fsync else "0", str(max_image_pixels), str(max_image_decode_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin: IO[bytes] = self.proc.stdin
        self._stdout: IO[bytes] = self.proc.stdout

    def run(self, jobs: Sequence[CommitJob]) -> list[Persisted | BaseException]:
        head = [[job.kind, len(job.body), _checked_to_wire(job.checked)] for job in jobs]
        self._stdin.write(b"".join([json.dumps({"jobs": head}).encode(), b"\n", *(job.body for job in jobs)]))
        self._stdin.flush()
        line = self._stdout.readline()
        if not line:
            raise OSError(f"the store worker exited ({self.proc.poll()})")
        answers = json.loads(line)
        if len(answers) != len(jobs):
            raise ValueError("the store worker answered for another number of bodies")
        outcomes: list[Persisted | BaseException] = []
        for job, answer in zip(jobs, answers, strict=True):
            if "ok" in answer:
                sha, relpath, size, created, checked = answer["ok"]
                job.checked = _checked_from_wire(checked)
                outcomes.append(Persisted(sha, relpath, size, created=created))
            else:
                outcomes.append(_error_from_wire(answer["err"]))
        return outcomes

    def close(self) -> None:
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stdout.close()


def worker_main(argv: Sequence[str] | None = None) -> None:
    """The store worker process (see :class:`StoreWorker`): ``<store root> <fsync 0|1> <max image pixels>
    <max image decode bytes>``."""
    args = list(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    store = ContentAddressedStore(args[0], fsync=args[1] == "1")
    max_image_pixels = int(args[2])
    max_image_decode_bytes = int(args[3])
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        while line := stdin.readline():
            jobs = []
            for kind, size, checked in json.loads(line)["jobs"]:
                body = stdin.read(size)
                if len(body) != size:
                    return
                jobs.append(CommitJob(body, kind=kind, key=None, url="", checked=_checked_from_wire(checked)))
            answers = []
            for job, outcome in zip(jobs, store_group(store, jobs, max_image_pixels=max_image_pixels,
                                                        max_image_decode_bytes=max_image_decode_bytes),
                                            strict=True):
                if isinstance(outcome, Persisted):
                    answers.append({"ok": [outcome.sha256, outcome.relpath, outcome.size, outcome.created,
                                           _checked_to_wire(job.checked)]})
                else:
                    answers.append({"err": _error_to_wire(outcome)})
            stdout.write(json.dumps(answers).encode() + b"\n")
            stdout.flush()
    except BrokenPipeError:
        pass
    finally:
        store.close()


def _checked_to_wire(checked: BodyCheck | None) -> list[Any] | None:
    if checked is None:
        return None
    s = checked.sniffed
    return [s.mime, s.ext, s.family, checked.size, checked.width, checked.height]


def _checked_from_wire(wire: list[Any] | None) -> BodyCheck | None:
    if wire is None:
        return None
    mime, ext, family, size, width, height = wire
    return BodyCheck(sniffed=Sniffed(mime, ext, family), size=size, width=width, height=height)


def _error_to_wire(exc: BaseException) -> list[Any]:
    if isinstance(exc, MediaRejected):
        return ["MediaRejected", exc.reason, exc.detail, None]
    if isinstance(exc, OSError):
        return ["OSError", type(exc).__name__, str(exc), exc.errno]
    return ["StoreError", type(exc).__name__, str(exc), None]


def _error_from_wire(wire: list[Any]) -> BaseException:
    kind, reason, detail, err = wire
    if kind == "MediaRejected":
        return MediaRejected(reason, detail)
    if kind == "OSError":
        return OSError(err, f"{reason}: {detail}") if err is not None else OSError(f"{reason}: {detail}")
    return StoreError(detail)
