"""Issue #21, point 6: state files are read with a bound. A 1 GiB (sparse) or deeply nested checkpoint is moved
aside with one WARNING, the job starts fresh, and ``status`` / ``checkpoints list`` report it without crashing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediacrawler.checkpoints.model import CheckpointCorrupt
from mediacrawler.checkpoints.store import FileCheckpointStore
from mediacrawler.extensions.marks import FileMarkStore
from tests.test_extension_checkpoint import KEY, make, parsed, scraped

ROOT = Path(__file__).resolve().parent.parent


def _damage(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "huge":
        with path.open("wb") as f:  # sparse: 1 GiB on paper, nothing on disk
            f.truncate(1024 ** 3)
    else:
        path.write_bytes(b"[" * 200_000 + b"]" * 200_000)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run([sys.executable, "-m", "mediacrawler", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(("kind", "reason"), [("huge", "larger than 67108864 bytes (STATE_FILE_MAX_BYTES)"),
                                              ("deep", "nested 200000 deep")])
def test_a_damaged_checkpoint_is_reported_and_moved_aside_and_the_job_starts_fresh(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str, reason: str) -> None:
    directory = tmp_path / "checkpoints"
    path = directory / f"{KEY}.json"
    _damage(path, kind)
    with pytest.raises(CheckpointCorrupt, match=reason.replace("(", r"\(").replace(")", r"\)")):
        FileCheckpointStore(directory).load(KEY)
    listed = _cli("checkpoints", "--dir", str(directory), "list")
    assert listed.returncode == 1 and f"{KEY}\tUNREADABLE: " in listed.stdout and reason in listed.stdout, \
        listed.stderr[-2000:]
    shown = _cli("status", "--dir", str(directory), "--json")
    assert shown.returncode in (0, 1), shown.stderr[-2000:]
    (entry,) = json.loads(shown.stdout)["checkpoints"]
    assert entry["job"] == KEY and reason in entry["error"]
    ext, spider = make(tmp_path)
    with caplog.at_level(logging.WARNING, logger="mediacrawler.extensions.checkpoint"):
        ext.spider_opened(spider)
    assert not path.exists() and (directory / f"{KEY}.json.corrupt").exists()
    assert spider.resume is None and spider.first_page() == (1, None)
    warnings = [r.getMessage() for r in caplog.records if r.name == "mediacrawler.extensions.checkpoint"]
    assert len(warnings) == 1 and "moved aside" in warnings[0] and reason in warnings[0]
    parsed(ext, spider, 1, ["a"])  # checkpointing goes on for the job: a fresh checkpoint is written
    scraped(ext, spider, 1, "a")
    ext.commit()
    fresh = FileCheckpointStore(directory).load(KEY)
    assert fresh is not None and fresh.watermark == 1


@pytest.mark.parametrize("kind", ["huge", "deep"])
def test_a_damaged_mark_is_corrupt_not_a_crash(tmp_path: Path, kind: str) -> None:
    store = FileMarkStore(tmp_path)
    _damage(store.path(KEY), kind)
    with pytest.raises(store.corrupt):
        store.load(KEY)
