"""``mediacrawler status`` on checkpoints a real interrupted crawl left: a ``scrapy crawl weibo`` subprocess against
a sandbox with slow answers, stopped with one SIGINT once its watermark passed page 3."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.checkpoints.store import FileCheckpointStore
from mediacrawler_sandbox.process import SandboxProcess, start_sandbox

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894
KEY = f"weibo-uid-{UID}"


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A checkpoint directory holding the checkpoint of an interrupted crawl (and an unreadable one beside it)."""
    workdir = tmp_path_factory.mktemp("status")
    sandbox: SandboxProcess = start_sandbox(weibo_users=(UID,), weibo_pages=30, weibo_per_page=5,
                                            faults={"weibo_latency_ms": 60}, startup_timeout=30)
    checkpoints = workdir / "checkpoints"
    try:
        cmd = [
            sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={UID}",
            "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}", "-s", f"CHECKPOINT_DIR={checkpoints}",
            "-s", f"OUTPUT_DIR={workdir / 'output'}", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
            "-s", "MEDIA_ENABLED=0", "-s", f"LOG_FILE={workdir / 'crawl.log'}",
        ]
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        store = FileCheckpointStore(checkpoints)
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                cp = store.load(KEY)
                if cp is not None and cp.watermark >= 3:
                    break
                time.sleep(0.02)
            assert proc.poll() is None, "the crawl ended before its watermark reached page 3"
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert "Spider closed (shutdown)" in (workdir / "crawl.log").read_text("utf-8")
    finally:
        sandbox.stop()
    (checkpoints / "broken-job.json").write_text('{"schema": 1, "key": "broken-jo', "utf-8")
    yield checkpoints


def status(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run([sys.executable, "-m", "mediacrawler", "status", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_json_lists_the_interrupted_job_with_its_watermark(interrupted: Path) -> None:
    cp = FileCheckpointStore(interrupted).load(KEY)
    assert cp is not None and 3 <= cp.watermark < 30
    proc = status("--dir", str(interrupted), "--json")
    assert proc.returncode == 1, proc.stderr  # the broken checkpoint beside it
    doc = json.loads(proc.stdout)
    assert doc["checkpoint_store"] == str(interrupted)
    assert doc["distributed"] is None
    by_job: dict[str, Any] = {e["job"]: e for e in doc["checkpoints"]}
    assert set(by_job) == {KEY, "broken-job"}
    entry = by_job[KEY]
    assert entry["spider"] == "weibo"
    assert (entry["watermark"], entry["next_page"], entry["next_cursor"]) == (cp.watermark, cp.watermark + 1,
                                                                              cp.next_cursor)
    assert entry["failed_pages"] == []
    assert entry["stored_past_watermark"] == len(cp.stored_ids())
    assert entry["updated_at"] == cp.updated_at
    written = datetime.fromisoformat(cp.updated_at.replace("Z", "+00:00"))  # type: ignore[union-attr]
    assert 0 <= entry["age_seconds"] <= (datetime.now(UTC) - written).total_seconds() + 1
    assert entry["location"] == str(interrupted / f"{KEY}.json")
    assert "not JSON" in by_job["broken-job"]["error"]


def test_text_names_the_job_its_next_page_and_the_distributed_part(interrupted: Path) -> None:
    cp = FileCheckpointStore(interrupted).load(KEY)
    assert cp is not None
    proc = status("--dir", str(interrupted))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"checkpoints in {interrupted}: 2"
    assert lines[1].split() == ["JOB", "SPIDER", "WATERMARK", "NEXT", "FAILED", "UPDATED", "AGE"]
    row = next(line.split() for line in lines if line.startswith(KEY))
    cursor = ["cursor", cp.next_cursor] if cp.next_cursor else []
    assert row[:7 + len(cursor)] == [KEY, "weibo", str(cp.watermark), "page", str(cp.next_page), *cursor, "-",
                                     cp.updated_at]
    assert any(line.startswith("broken-job") and "UNREADABLE" in line for line in lines)
    assert lines[-1] == "distributed state: REDIS_URL is not set (everything is local)"


def test_empty_store_exits_0(tmp_path: Path) -> None:
    proc = status("--dir", str(tmp_path / "none"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["checkpoints"] == []
    # Not silently: where it looked, in one line.
    assert proc.stderr.strip() == (f"mediacrawler status: no checkpoint directory: {tmp_path / 'none'} does not "
                                   f"exist (--dir {tmp_path / 'none'}); run from the crawl's directory or give "
                                   f"-s CHECKPOINT_DIR=…"), proc.stderr


def test_with_redis_url_the_distributed_part_is_reported(tmp_path: Path, redis_url: str) -> None:
    env = {**os.environ, "REDIS_URL": redis_url}
    run = [sys.executable, "-m", "mediacrawler", "status", "--dir", str(tmp_path)]
    text = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    as_json = subprocess.run([*run, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert text.returncode == as_json.returncode == 0, text.stderr + as_json.stderr
    distributed = json.loads(as_json.stdout)["distributed"]
    assert isinstance(distributed, dict)
    try:
        built = importlib.util.find_spec("mediacrawler.distributed.status") is not None
    except ModuleNotFoundError:  # no mediacrawler.distributed package at all
        built = False
    if not built:
        # Not built yet: said so, in both forms.
        assert distributed["available"] is False
        assert text.stdout.splitlines()[-1] == "distributed state: not available"
    else:
        assert distributed["available"] is True
        assert "distributed state:\n" in text.stdout


def command_elsewhere(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``mediacrawler …`` run from *cwd* (no scrapy.cfg there or above), with no SCRAPY_SETTINGS_MODULE."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "SCRAPY_SETTINGS_MODULE")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "mediacrawler", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("command", ["status", "checkpoints"])
def test_from_another_directory_with_s_checkpoint_dir_the_checkpoints_are_found(
        interrupted: Path, tmp_path: Path, command: str) -> None:
    proc = command_elsewhere(tmp_path, command, "-s", f"CHECKPOINT_DIR={interrupted}")
    assert proc.returncode == 1, proc.stderr  # the broken checkpoint beside it
    assert any(line.startswith(KEY) for line in proc.stdout.splitlines()), proc.stdout
    assert "does not exist" not in proc.stderr


@pytest.mark.parametrize("command", ["status", "checkpoints", "retry"])
def test_from_another_directory_without_it_one_line_says_where_it_looked(tmp_path: Path, command: str) -> None:
    proc = command_elsewhere(tmp_path, command)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"{tmp_path / 'checkpoints'} does not exist (CHECKPOINT_DIR=checkpoints, relative to {tmp_path})" \
        in lines[0] and "-s CHECKPOINT_DIR=" in lines[0], lines


@pytest.mark.parametrize("command", [["status"], ["checkpoints"], ["retry"], ["verify"],
                                     ["enqueue", "weibo", "uid=1"]])
def test_a_setting_that_is_not_name_value_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    proc = command_elsewhere(tmp_path, *command, "-s", "CHECKPOINT_DIR")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].endswith("-s 'CHECKPOINT_DIR': expected NAME=VALUE"), lines
