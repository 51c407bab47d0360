"""Helpers of the incremental-sync, retry and targets tests: real ``scrapy crawl`` subprocesses against a sandbox
(one-job crawls, and workers taking a queued job from Redis), and readers of what they leave behind (the sandbox
request log, JSON Lines records, marks and retry sets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from mediacrawler_sandbox.process import SandboxProcess

ROOT = Path(__file__).resolve().parent.parent
CRAWL_TIMEOUT = 90.0


def crawl_command(spider: str, sandbox: SandboxProcess, workdir: Path, *args: str, run: str = "run") -> list[str]:
    """``scrapy crawl`` against ``sandbox`` with checkpoints and media under ``workdir``, output per ``run``."""
    return [
        sys.executable, "-m", "scrapy", "crawl", spider,
        "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}",
        "-s", f"CHECKPOINT_DIR={workdir / 'checkpoints'}",
        "-s", f"FILES_STORE={workdir / 'files'}",
        "-s", f"OUTPUT_DIR={workdir / run}",
        "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0", "-s", "LOG_LEVEL=INFO",
        "-s", "MEDIA_COMMIT_PROCESS=0",
        *args,
    ]


def run(command: list[str], workdir: Path, *, redis_url: str | None = None, name: str = "run",
        timeout: float = CRAWL_TIMEOUT) -> tuple[int, str]:
    """Run ``command`` (cwd: the project), its log in ``workdir/<name>.log``; (exit status, log)."""
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    env.pop("REDIS_URL", None)
    env.pop("CACHE_BACKEND", None)
    if redis_url:
        env["REDIS_URL"] = redis_url
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        try:
            proc = subprocess.run(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not end within {timeout}s:\n{log_path.read_text('utf-8', 'replace')[-3000:]}")
    return proc.returncode, log_path.read_text("utf-8", "replace")


def records(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSON Lines file (none when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def control(sandbox: SandboxProcess, name: str, payload: dict[str, Any]) -> Any:
    """POST ``payload`` to ``/_sandbox/<name>``."""
    request = urllib.request.Request(f"{sandbox.url}/_sandbox/{name}", data=json.dumps(payload).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def listing_requests(sandbox: SandboxProcess) -> list[tuple[str, int]]:
    """``(containerid, page)`` of every getIndex request in the sandbox log, in arrival order."""
    found = []
    for entry in sandbox.requests():
        if entry["path"].endswith("/api/container/getIndex"):
            query = parse_qs(entry["query"])
            found.append((query["containerid"][0], int(query["page"][0])))
    return found


def media_paths(sandbox: SandboxProcess) -> list[str]:
    """Paths of every media request in the sandbox log."""
    return [entry["path"] for entry in sandbox.requests() if entry["path"].startswith("/media/")]


def run_workers(sandbox: SandboxProcess, workdir: Path, redis_url: str, name: str, key: str,
                job: dict[str, str], count: int = 2) -> list[dict[str, Any]]:
    """Queue the weibo job ``key`` with arguments ``job`` (as ``mediacrawler enqueue`` does), run ``count`` workers
    (``scrapy crawl weibo`` without a target) until they go idle and close; every record they exported (OUTPUT_DIR
    ``workdir/name``)."""
    from mediacrawler.distributed.jobs import JobBoard
    from tests.utils import project_crawler

    settings = project_crawler(REDIS_URL=redis_url).settings
    assert JobBoard(settings, "weibo", worker="test").enqueue(key, job)
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings", "REDIS_URL": redis_url}
    env.pop("CACHE_BACKEND", None)
    command = [*crawl_command("weibo", sandbox, workdir, run=name), "-s", "DISTRIBUTED_LEASE_TTL=2",
               "-s", "DISTRIBUTED_HEARTBEAT=0.3", "-s", "DISTRIBUTED_ACK_INTERVAL=0.2",
               "-s", "DISTRIBUTED_IDLE_CLOSE=1", "-s", "DISTRIBUTED_JOB_POLL=0.2", "-s", "CONCURRENT_REQUESTS=4"]
    procs = []
    for n in range(count):
        with (workdir / f"{name}-{n}.log").open("wb") as log:
            procs.append((subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT), workdir / f"{name}-{n}.log"))
    for proc, log_path in procs:
        try:
            code = proc.wait(CRAWL_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            pytest.fail(f"worker did not close within {CRAWL_TIMEOUT}s:\n{log_path.read_text('utf-8', 'replace')}")
        text = log_path.read_text("utf-8", "replace")
        assert code == 0 and "Traceback" not in text, text[-3000:]
    return [r for path in sorted((workdir / name / "weibo").glob("*.jsonl")) for r in records(path)]
