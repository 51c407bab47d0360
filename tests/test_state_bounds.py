"""Issue #21, point 6: state files are read with a bound. A 1 GiB (sparse) or deeply nested checkpoint, mark or
retry set is moved aside (``<job>.json.corrupt``, kept for inspection) with one WARNING, the job goes on, and
``status`` / ``checkpoints list`` report it without crashing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from mediacrawler.checkpoints.model import CheckpointCorrupt
from mediacrawler.checkpoints.store import FileCheckpointStore
from mediacrawler.extensions.marks import FileMarkStore, RedisMarkStore
from mediacrawler.extensions.retries import FileRetryStore
from mediacrawler_sandbox.process import SandboxProcess
from tests.sync_crawls import crawl_command, records, run
from tests.utils import weibo_sandbox
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
    assert spider.job_state.resume is None and spider.first_page() == (1, None)
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


# --- A damaged mark or retry set is moved aside, as a damaged checkpoint is ----------------------------------
UID = 7365120894
JOB = f"weibo-uid-{UID}"

sb = weibo_sandbox(UID, 1, 5)


def test_a_damaged_mark_and_retry_set_are_moved_aside_and_the_job_goes_on(tmp_path: Path,
                                                                            sb: SandboxProcess) -> None:
    sb.reset()
    checkpoints = tmp_path / "checkpoints"
    mark_path = FileMarkStore(checkpoints / FileMarkStore.subdir).path(JOB)
    retry_path = FileRetryStore(checkpoints / FileRetryStore.subdir).path(JOB)
    _damage(mark_path, "deep")
    retry_path.parent.mkdir(parents=True, exist_ok=True)
    retry_path.write_bytes(b'{"version": 1, "assets": {"torn')
    damaged = {mark_path: mark_path.read_bytes(), retry_path: retry_path.read_bytes()}
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", run="run1"), tmp_path, name="run1")
    assert code == 0, log[-3000:]
    warnings = [line for line in log.splitlines() if " WARNING: " in line and ("mark" in line or "retry" in line)]
    assert len(warnings) == 2, warnings
    mark_warning, retry_warning = sorted(warnings, key=lambda w: "retry set" in w)
    assert "high-water mark" in mark_warning and "nested 200000 deep" in mark_warning
    assert f"moved aside to {mark_path}.corrupt" in mark_warning
    assert "retry set" in retry_warning and "not JSON" in retry_warning
    assert f"moved aside to {retry_path}.corrupt" in retry_warning
    for path, data in damaged.items():  # kept, byte for byte, for inspection
        assert path.with_name(path.name + ".corrupt").read_bytes() == data
    # The job went on: every post stored, and its complete end wrote a fresh mark where the damaged one was.
    assert len(records(tmp_path / "run1" / "weibo" / f"{JOB}.jsonl")) == 5
    mark = FileMarkStore(checkpoints / FileMarkStore.subdir).load(JOB)
    assert mark is not None and mark.key == JOB

    shown = _cli("status", "--dir", str(checkpoints), "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    documents = json.loads(shown.stdout)
    assert {"job": JOB, "location": f"{mark_path}.corrupt", "moved_aside": True} in documents["marks"]
    assert {"job": JOB, "location": f"{retry_path}.corrupt", "moved_aside": True} in documents["retries"]
    text = _cli("status", "--dir", str(checkpoints))
    assert f"{JOB}  DAMAGED, moved aside: {mark_path}.corrupt (inspect it, then delete it)" in text.stdout
    assert f"{JOB}  DAMAGED, moved aside: {retry_path}.corrupt" in text.stdout

    # A second damage of the same job keeps the first copy: the new one is numbered.
    _damage(mark_path, "deep")
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", run="run2"), tmp_path, name="run2")
    assert code == 0, log[-3000:]
    assert f"moved aside to {mark_path}.corrupt.2" in log
    assert mark_path.with_name(mark_path.name + ".corrupt").read_bytes() == damaged[mark_path]


def test_a_damaged_document_in_redis_is_renamed_aside(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = RedisMarkStore(client, "t:marks:")
    client.set(f"t:marks:{JOB}", b"[" * 200_000, ex=3600)
    with pytest.raises(store.corrupt, match="nested"):
        store.load(JOB)
    assert store.quarantine(JOB) == f"redis:t:marks:{JOB}:corrupt"
    assert store.load(JOB) is None and store.keys() == []
    assert client.get(f"t:marks:{JOB}:corrupt") == b"[" * 200_000 and client.ttl(f"t:marks:{JOB}:corrupt") == -1
    client.set(f"t:marks:{JOB}", b"{}")
    assert store.quarantine(JOB) == f"redis:t:marks:{JOB}:corrupt:2"
    assert store.set_aside() == [(JOB, f"redis:t:marks:{JOB}:corrupt"), (JOB, f"redis:t:marks:{JOB}:corrupt:2")]
    assert store.quarantine(JOB) is None  # nothing left to move
