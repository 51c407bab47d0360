"""Answers no reader was built for, end to end (issue #21): real crawls in a subprocess against the sandbox's
``/hostile`` mount. A value a parser cannot convert costs that field, never the post; a state nested too deep is a
failed page with its reason; a listing that cannot go on (a repeated cursor) ends with exit status 1 and one line
saying so. Parsers' own cases are in tests/test_parsers_*.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894


def crawl(tmp_path: Path, spider: str, *args: str,
          env_extra: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], str]:
    """``scrapy crawl <spider>`` as a user runs it: (the process, the records, the log)."""
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider, *args, "-s", "DOWNLOAD_DELAY=0",
           "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "MEDIA_ENABLED=0", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
           "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-s", "RETRY_TIMES=1", "-s", "PLATFORM_BACKOFF_BASE=0.05",
           "-s", "PLATFORM_BACKOFF_MAX=0.2", "-O", str(out)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "WEIBO_COOKIE", "DOUYIN_COOKIE", "FACEBOOK_ACCESS_TOKEN")}
    env.update(env_extra or {})
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()] if out.exists() else []
    return proc, rows, (tmp_path / "crawl.log").read_text(encoding="utf-8")


def test_every_post_of_a_page_with_unconvertible_values_is_emitted(sandbox: Any, tmp_path: Path) -> None:
    proc, rows, log = crawl(tmp_path, "weibo", "-a", f"uid={UID}", "-s",
                            f"WEIBO_BASE_URL={sandbox.url}/hostile/odd/weibo")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in log and "spider_exceptions" not in log
    by_id = {r["post_id"]: r for r in rows}
    assert sorted(by_id) == [f"51043838487330{n:02d}" for n in (1, 2, 3, 4)]
    first, second, third, fourth = (by_id[f"51043838487330{n:02d}"] for n in (1, 2, 3, 4))
    assert first["metrics"]["likes"] is None and first["metrics"]["comments"] == 10
    assert first["extra"]["unreadable"] == {"likes": "count over 10^15: an integer of 400 digits"}
    assert second["metrics"]["comments"] is None
    assert second["extra"]["unreadable"] == {"comments": "not a finite number: inf"}
    assert third["created_at"] is None
    assert third["extra"]["unreadable"] == {"created_at": "no such date or time: '02-30'"}
    # "5分钟前" is five minutes before the answer's own Date header, never in the future.
    assert "unreadable" not in fourth["extra"] and fourth["created_at"] <= fourth["fetched_at"]


def test_a_douyin_state_nested_100k_deep_is_a_failed_item_with_a_reason(sandbox: Any, tmp_path: Path) -> None:
    root = f"{sandbox.url}/hostile/deep/douyin"
    proc, rows, log = crawl(tmp_path, "douyin", "-a", "aweme=7300000000000000101",
                            "-s", f"DOUYIN_SHARE_URL={root}", "-s", f"DOUYIN_WEB_URL={root}")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "RecursionError" not in log and "Traceback" not in log
    assert "window._ROUTER_DATA is nested deeper than 200 levels" in log
    assert "1 of 1 item(s) failed for good (the first, id:7300000000000000101: " in proc.stderr
    assert "nested deeper than 200 levels" in proc.stderr
    assert rows == []


def test_a_facebook_listing_whose_cursor_repeats_ends_with_exit_1_saying_so(sandbox: Any, tmp_path: Path) -> None:
    proc, rows, log = crawl(tmp_path, "facebook", "-a", "page=100000000000001",
                            "-s", f"FACEBOOK_GRAPH_URL={sandbox.url}/hostile/cursor/facebook",
                            env_extra={"FACEBOOK_ACCESS_TOKEN": "EAAhostiletoken"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in log
    assert [r["post_id"] for r in rows] == ["100000000000001_1", "100000000000001_2"]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("error: "))
    assert "the listing stopped at a repeated cursor" in line and "page 3" in line, proc.stderr[-2000:]
    assert "EAAhostiletoken" not in proc.stderr + log
