"""Kill the checkpoint writer many times over, at random instants: the checkpoint always parses or is absent.

A forked child rewrites one checkpoint in a tight loop with :class:`FileCheckpointStore` (the code the extension
uses); the parent SIGKILLs it after a random delay, then reads what is on disk. Forking keeps each round at a few
milliseconds, so hundreds of kills fit in a couple of seconds.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from mediacrawler.checkpoints.model import Checkpoint, CheckpointCorrupt
from mediacrawler.checkpoints.store import FileCheckpointStore

KEY = "weibo-keyword-cats-0123456789"
ROUNDS = 300

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _writer(directory: Path) -> None:
    """Child: rewrite the checkpoint for ever, seq growing; never returns."""
    try:
        store = FileCheckpointStore(directory)
        try:
            current = store.load(KEY)
        except CheckpointCorrupt:
            os._exit(3)
        seq = current.seq if current else 0
        # A few hundred ids make each write long enough for kills to land inside it.
        stored = {page: [f"{page}{n:012d}" for n in range(50)] for page in range(2, 8)}
        while True:
            seq += 1
            store.save(Checkpoint(key=KEY, spider="weibo", watermark=seq, next_page=seq + 1, stored=stored,
                                  seq=seq))
    except BaseException:
        os._exit(4)


def _save_seconds(directory: Path) -> float:
    """How long one save takes here (its fsyncs dominate, and they cost 1-10 ms depending on the disk)."""
    store = FileCheckpointStore(directory)
    stored = {page: [f"{page}{n:012d}" for n in range(50)] for page in range(2, 8)}
    times = []
    for seq in range(1, 6):
        started = time.monotonic()
        store.save(Checkpoint(key=KEY, spider="weibo", watermark=seq, next_page=seq + 1, stored=stored, seq=seq))
        times.append(time.monotonic() - started)
    return sorted(times)[len(times) // 2]


def test_kill_while_writing_never_leaves_a_torn_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "kills"
    store = FileCheckpointStore(directory)
    # Kills land from the writer's start-up to a few saves in, whatever a save costs on this disk (a fixed 6 ms
    # bound never let a write finish where one save's fsyncs take longer); capped so the rounds fit the deadline.
    longest = min(0.1, max(0.006, 3 * _save_seconds(tmp_path / "timing")))
    rng = random.Random(1234)
    last_seq = 0
    mid_write = 0  # rounds where the kill left a temp file behind, i.e. landed inside a write
    deadline = time.monotonic() + 60
    for _ in range(ROUNDS):
        assert time.monotonic() < deadline, "kill rounds took too long"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            _writer(directory)
        time.sleep(rng.uniform(0.0005, longest))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"writer exited on its own (status {status}): it saw a torn checkpoint"
        cp = store.load(KEY)  # raises CheckpointCorrupt on a torn file
        if cp is not None:
            assert cp.seq >= last_seq, "the checkpoint went backwards"
            assert cp.watermark == cp.seq and len(cp.stored_ids()) == 300
            last_seq = cp.seq
        temps = list(directory.glob(f".{KEY}.json.*.tmp"))
        if temps:
            mid_write += 1
            store.remove_stale_temps(KEY)
    assert last_seq > 0, "no write ever completed"
    # Evidence that the test exercised what it claims: some kills did land in the middle of a write.
    assert mid_write > 0
