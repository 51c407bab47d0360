"""Directories the crawl must write to, made read-only for real: one line and a non-zero exit, never a traceback.

A read-only directory is a read-only bind mount when the tests run as root (root writes through ``chmod``), else a
``chmod 555`` directory; where neither can be had, the tests are skipped with the reason.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.fsutil import writable_dir_problem
from tests.test_extension_checkpoint import make, parsed, scraped

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894


def _make_read_only(path: Path) -> bool:
    if os.geteuid() != 0:
        path.chmod(0o555)
        return True
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode == 0
    if not mounted:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(path)], capture_output=True)
        return False
    return True


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Any]:
    """``read_only(path)`` makes an existing directory read-only until the test ends."""
    made: list[Path] = []

    def make_ro(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        if not _make_read_only(path):
            pytest.skip("no way to make a directory read-only here (no bind mount as root)")
        made.append(path)
        return path

    yield make_ro
    for path in made:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(path)], capture_output=True)
        else:
            path.chmod(0o755)


def crawl(tmp_path: Path, base_url: str, *settings: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={UID}",
           "-s", f"WEIBO_BASE_URL={base_url}", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
           "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-O", str(tmp_path / "out.jsonl"), *settings]
    env = {k: v for k, v in os.environ.items() if k != "WEIBO_COOKIE"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("setting", ["CHECKPOINT_DIR", "FILES_STORE"])
def test_a_read_only_directory_stops_the_crawl_before_it_starts_with_one_line(
        sandbox: Any, tmp_path: Path, read_only: Any, setting: str) -> None:
    target = read_only(tmp_path / "ro")
    sandbox.reset()
    proc = crawl(tmp_path, sandbox.weibo_url, "-s", f"{setting}={target}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"error: {setting}={target} cannot be written: Read-only file system"] or (
        os.geteuid() != 0 and lines == [f"error: {setting}={target} cannot be written: Permission denied"])
    assert not sandbox.requests()  # nothing was crawled


def test_writable_dir_problem_creates_missing_directories(tmp_path: Path) -> None:
    assert writable_dir_problem(tmp_path / "a" / "b") is None
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())
    (tmp_path / "file").write_text("x")
    assert writable_dir_problem(tmp_path / "file") is not None  # a file in the way


def test_a_checkpoint_that_cannot_be_cleared_is_one_error_line_not_an_exception(
        tmp_path: Path, read_only: Any, caplog: pytest.LogCaptureFixture) -> None:
    ext, spider = make(tmp_path)
    ext.spider_opened(spider)
    parsed(ext, spider, 1, ["a"], is_last=True)
    scraped(ext, spider, 1, "a")
    ext.commit()
    checkpoint = tmp_path / "checkpoints" / "weibo-uid-7365120894.json"
    assert checkpoint.exists()
    read_only(tmp_path / "checkpoints")  # e.g. the disk was remounted read-only during the crawl
    with caplog.at_level(logging.ERROR):
        ext.spider_closed(spider, "finished")
    assert checkpoint.exists()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "cannot clear checkpoint" in errors[0].getMessage()
    assert errors[0].exc_info is None
    assert ext.stats.get_value("checkpoint/write_errors") == 1
