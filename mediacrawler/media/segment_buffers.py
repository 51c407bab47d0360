"""Segment memory and spool writes of large downloads: the crawl's reusable page-aligned buffers, the memory
budget over them, and the writer that puts segments on disk and hashes the spool in file order (docs/media.md,
"Spool writes"). Used by segments.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import mmap
import os
import threading
from collections import deque
from typing import TYPE_CHECKING

from mediacrawler.fsutil import write_direct

if TYPE_CHECKING:
    from mediacrawler.media.spool import Runner

MiB = 1024 * 1024
# Read-back buffer of the hasher: large, so that its thread gives the GIL back to the reactor rarely.
_HASH_CHUNK = 4 * MiB
# Bytes per pwrite() (see write_at).
_WRITE_PIECE = 128 * 1024


class SegmentError(Exception):
    """A segmented download that cannot complete; ``reason`` is a slug (``short-segment``, ``expired``,
    ``spool-busy``…: docs/media.md, "Results on the record")."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    # In 128 KiB pieces: one large pwrite() lets the kernel allocate large page-cache folios, slower and erratic
    # in a VM (bench_large_file: 2.4-3.6 s per GiB with 8 MiB calls, 1.9-2.1 s with 128 KiB).
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view[:_WRITE_PIECE], offset)
        view = view[written:]
        offset += written


class OrderedHasher:
    """Writes the spool and takes its SHA-256 in file order, overlapping the transfer (docs/media.md, "Spool
    writes"). A segment in a page-aligned buffer goes to disk through the ``O_DIRECT`` descriptor when there is
    one (its unaligned tail, and everything else, through the buffered one) and is hashed from that buffer when
    the hash reaches it (:meth:`offer`); bytes on disk that nobody offers (a resumed spool, a segment let go) are
    read back. One task on the loop does all hashing, on the store's executor (``run``)."""

    def __init__(self, fd: int, *, run: Runner, direct_fd: int | None = None) -> None:
        self.fd = fd
        self.direct_fd = direct_fd
        self.run = run
        self.digest = hashlib.sha256()
        self.offset = self.target = 0
        self.direct_bytes = 0
        #: Held while writing a segment: concurrent pwrite()s to one inode spin in the kernel; this lock sleeps.
        self.write_lock = threading.Lock()
        self._offers: dict[int, tuple[memoryview, asyncio.Future[None]]] = {}
        #: Offers are waited for; off from a failed segment to the next round (:meth:`hold`, :meth:`release`).
        self.holding = True
        self._task: asyncio.Task[None] | None = None
        self._running = False  # not "_task is None": the task ends before wait() takes it

    def write(self, body: bytes | memoryview, start: int, *, aligned: bool = False) -> None:
        """(Store executor.) Write a segment at its offset; ``aligned``: ``body`` starts on a page boundary (a
        pooled buffer), so it may go through ``O_DIRECT``."""
        view = memoryview(body)
        with self.write_lock:
            done = 0
            if aligned and self.direct_fd is not None:
                done = write_direct(self.direct_fd, view, start)
                self.direct_bytes += done
            if done < len(view):
                write_at(self.fd, view[done:], start + done)

    def offer(self, view: memoryview, start: int) -> asyncio.Future[None]:
        """Let the hash take ``view`` (bytes at ``start``, already written) from memory when it gets there; the
        future is done once it has, or once it never will (:meth:`release`: then they are read back)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self.holding or start < self.offset or start in self._offers:
            waiter.set_result(None)
            return waiter
        self._offers[start] = (view, waiter)
        self._kick()
        return waiter

    def hold(self) -> None:
        """Wait for offers again (a new round: every segment before an offered one is on disk or in flight)."""
        self.holding = True

    def release(self) -> None:
        """Give back every offered buffer unhashed, and take none until :meth:`hold` (a segment failed: the ones
        behind it must not wait for it)."""
        self.holding = False
        offers, self._offers = self._offers, {}
        for _view, waiter in offers.values():
            if not waiter.done():
                waiter.set_result(None)

    def _catch_up(self, end: int) -> None:
        # (Store executor, one at a time.) preadv into one reused buffer; hashlib and preadv release the GIL.
        buf = memoryview(bytearray(_HASH_CHUNK))
        while self.offset < end:
            n = os.preadv(self.fd, [buf[: min(_HASH_CHUNK, end - self.offset)]], self.offset)
            if n <= 0:
                raise SegmentError("size-mismatch", f"spool ends at {self.offset}, expected {end} bytes")
            self.digest.update(buf[:n])
            self.offset += n

    def advance(self, end: int) -> None:
        """Bytes up to ``end`` are on disk: hash them in the background (from memory where offered)."""
        self.target = max(self.target, end)
        self._kick()

    def _kick(self) -> None:
        if not self._running and (self.offset in self._offers or self.offset < self.target):
            self._running = True
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            # Bounded: every pass hashes at least one offer or one read-back, and the offset only grows up to the
            # file size.
            while True:
                offered = self._offers.pop(self.offset, None)
                if offered is not None:
                    view, waiter = offered
                    try:
                        await self.run(self.digest.update, view)
                        self.offset += len(view)
                    finally:
                        if not waiter.done():
                            waiter.set_result(None)
                elif self.offset < self.target:
                    # Read back only up to the next offer: what is in memory is never read from disk.
                    await self.run(self._catch_up, min([self.target, *(s for s in self._offers if s > self.offset)]))
                else:
                    break
        except BaseException:
            self.release()  # nobody waits for a hash that stopped
            raise
        finally:
            self._running = False

    async def wait(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await task

    async def finish(self, total: int) -> str:
        self.advance(total)
        await self.wait()
        if self.offset != total:
            raise SegmentError("size-mismatch", f"hashed {self.offset} bytes, expected {total}")
        return self.digest.hexdigest()


class MemoryBudget:
    """MEDIA_SEGMENT_MEMORY over the segment bodies in flight of all large downloads, first come, first served;
    granted whenever nothing is lent, so a segment larger than the budget still progresses."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.lent = 0
        self.peak = 0
        self.waits = 0
        self._waiters: deque[tuple[int, asyncio.Future[int]]] = deque()

    def request(self, size: int) -> asyncio.Future[int]:
        """A future of the grant (done already when it fits now); await it, then :meth:`give_back` the size."""
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not self._waiters and self._take(size):
            waiter.set_result(size)
            return waiter
        self.waits += 1
        self._waiters.append((size, waiter))
        return waiter

    def give_back(self, size: int) -> None:
        self.lent -= size
        while self._waiters and self._take(self._waiters[0][0]):  # bounded: each pass grants one waiter
            granted, waiter = self._waiters.popleft()
            waiter.set_result(granted)

    def _take(self, size: int) -> bool:
        if self.lent and self.lent + size > self.budget:
            return False
        self.lent += size
        self.peak = max(self.peak, self.lent)
        return True


class SegmentBuffer:
    """A segment's body, received by the download handler straight into a reusable buffer (a
    :class:`~mediacrawler.contracts.BodySink`: handlers.py). ``view()`` is the body of the last attempt."""

    __slots__ = ("_view", "attached", "buffer", "size")

    def __init__(self, buffer: mmap.mmap | bytearray, capacity: int) -> None:
        self.buffer = buffer
        self._view = memoryview(buffer)[:capacity]
        self.size = 0
        self.attached = False

    def reset(self) -> None:
        self.size = 0
        self.attached = False

    def write(self, data: bytes) -> bool:
        end = self.size + len(data)
        if end > len(self._view):
            return False
        self._view[self.size : end] = data
        self.size = end
        return True

    def view(self) -> memoryview:
        return self._view[: self.size]


class BufferPool:
    """Segment buffers of the crawl, reused: a fresh 8 MiB buffer costs 2,048 page faults (MEDIA_SEGMENT_MEMORY
    bounds how many are lent at once, :class:`MemoryBudget`)."""

    def __init__(self, size: int, keep: int) -> None:
        self.size = size
        self.keep = keep
        self._free: list[mmap.mmap | bytearray] = []

    def take(self, capacity: int) -> SegmentBuffer:
        # Anonymous mmap, not bytearray: page-aligned, so a segment can be written with O_DIRECT.
        buffer = self._free.pop() if self._free and capacity <= self.size else mmap.mmap(-1, max(capacity, self.size))
        return SegmentBuffer(buffer, capacity)

    def give_back(self, sink: SegmentBuffer) -> None:
        if len(sink.buffer) == self.size and len(self._free) < self.keep:
            self._free.append(sink.buffer)
