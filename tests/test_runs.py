"""Every crawl's run in the records database's ``runs`` table (extensions/runs.py), as the jobs page and
``/api/jobs`` show it (web/queries.py ``job_runs``, web/jobs.py): a ``scrapy crawl`` subprocess against the sandbox
shows as its job's last run with its figures and reason; a slow one shows as running with live figures, and as
stopped once its row went stale after a SIGKILL. Rows read the same from SQLite and PostgreSQL; no credential
reaches a row."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import build_from_crawler
from starlette.testclient import TestClient

from mediacrawler.commands.options import command_settings
from mediacrawler.extensions.runs import RunsExtension
from mediacrawler.records.store import RUN_COUNTS, open_store
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler.web.app import build_app
from mediacrawler.web.queries import job_runs
from tests.sync_crawls import ROOT, crawl_command, records, run
from tests.utils import project_crawler, weibo_sandbox

UID = 7365120894
JOB = f"weibo-uid-{UID}"
COOKIE = "SUB=runs-secret-cookie-4711"

sb = weibo_sandbox(UID, 3, 4)


def app_settings(workdir: Path) -> list[str]:
    return [f"CHECKPOINT_DIR={workdir / 'checkpoints'}", f"FILES_STORE={workdir / 'files'}",
            f"OUTPUT_DIR={workdir / 'run'}"]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    pairs = app_settings(tmp_path)
    app = build_app(command_settings(pairs), overrides=pairs, crawl_dir=str(tmp_path / "web-crawls"))
    with TestClient(app) as c:
        yield c


def job(client: TestClient, key: str = JOB) -> dict[str, Any]:
    answer = client.get("/api/jobs").json()
    return next((j for j in answer["jobs"] if j["job"] == key), {})


def final_stat(log: str, name: str) -> int:
    found = re.findall(rf"'{re.escape(name)}': (\d+)", log.split("Dumping Scrapy stats", 1)[-1])
    return int(found[0]) if found else 0


def test_a_cli_crawl_is_its_jobs_last_run(sb: SandboxProcess, tmp_path: Path, client: TestClient) -> None:
    code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", "-s", f"WEIBO_COOKIE={COOKIE}"),
                    tmp_path)
    assert code == 0, log[-3000:]
    posts = records(tmp_path / "run" / "weibo" / f"{JOB}.jsonl")
    assert len(posts) == 12
    entry = job(client)
    last = entry["last_run"]
    assert last["state"] == "finished" and last["reason"] == "finished" and last["finished_at"]
    assert (last["spider"], last["host"], last["worker"], last["crawl"]) == ("weibo", socket.gethostname(), None,
                                                                             None)
    figures = last["progress"]
    assert figures["posts"] == len(posts) and figures["live"] is False
    assert figures["pages"] == final_stat(log, "weibo/pages") >= 3
    assert figures["bytes"] == final_stat(log, "media/stored_bytes") > 0
    assert figures["media"] == sum(final_stat(log, f"media/{s}") for s in ("downloaded", "uptodate",
                                                                           "deduplicated")) > 0
    assert figures["errors"] == final_stat(log, "log_count/ERROR") == 0
    assert figures["posts_per_minute"] == pytest.approx(figures["posts"] / figures["minutes"], rel=0.01, abs=0.1)
    assert entry["running"] is False and entry["live"] is None and entry["runs"] == 1
    html = client.get("/jobs").text
    assert f'data-job="{JOB}"' in html and f"· {len(posts)} posts ·" in html and 'class="state finished"' in html
    # No credential in the row: its every column, as stored.
    store = open_store(str(tmp_path / "checkpoints" / "records.sqlite3"), now="2026-12-02T00:00:00Z")
    try:
        (row,) = store.table("runs")
        history = store.table("metrics_history")
    finally:
        store.close()
    assert "runs-secret-cookie-4711" not in repr(row) and row["pid"] > 0
    # Every count this run wrote is the run's: metrics_history joins runs by run_id.
    assert {p["post_id"] for p in posts} <= {h["post_id"] for h in history}  # and the originals of reposts
    assert {h["run_id"] for h in history} == {row["run_id"]}


def test_a_running_crawl_is_live_and_stopped_once_stale_after_sigkill(sb: SandboxProcess, tmp_path: Path,
                                                                       client: TestClient) -> None:
    sb.reset()
    sb.set_faults(weibo_latency_ms=2500)  # every API answer 2.5 s late: the crawl takes seconds per page
    command = crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", "-s", "RUNS_INTERVAL=0.5")
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    env.pop("REDIS_URL", None)
    with (tmp_path / "slow.log").open("wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        entry, deadline = job(client), time.monotonic() + 90
        while not (entry.get("running") and (entry.get("live") or {}).get("pages")):
            assert time.monotonic() < deadline, entry
            assert proc.poll() is None, (tmp_path / "slow.log").read_text("utf-8", "replace")[-3000:]
            time.sleep(0.2)
            entry = job(client)
        assert entry["last_run"]["state"] == "running" and entry["last_run"]["finished_at"] is None
        live = entry["live"]
        assert live["live"] is True and live["pages"] >= 1 and live["posts"] < 12
        assert "(live)" in client.get("/jobs").text
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        sb.reset()
    entry, deadline = job(client), time.monotonic() + 30
    while entry["last_run"]["state"] != "stopped" and time.monotonic() < deadline:
        time.sleep(0.2)
        entry = job(client)
    last = entry["last_run"]
    assert last["state"] == "stopped" and last["finished_at"] is None and last["reason"] is None
    assert last["progress"]["pages"] >= 1 and entry["running"] is False and entry["live"] is None
    html = client.get("/jobs").text
    assert f"(no update since {last['updated_at']})" in html and 'class="state stopped"' in html


def _row(run_id: str, job: str, started: str, updated: str, *, finished: bool = False, posts: int = 0,
         worker: str | None = None) -> dict[str, Any]:
    return {"run_id": run_id, "spider": "weibo", "job": job, "host": "h", "worker": worker, "pid": 7,
            "started_at": started, "updated_at": updated, "finished_at": updated if finished else None,
            "finish_reason": "finished" if finished else None, "update_interval": 5.0,
            **dict.fromkeys(RUN_COUNTS, 0), "posts": posts, "pages": 1}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "records.sqlite3")
    return str(request.getfixturevalue("postgres_url"))


def test_last_runs_states_and_workers_added_up(store_uri: str) -> None:
    from mediacrawler.web.jobs import live_progress

    store = open_store(store_uri, now="2026-12-02T00:00:00Z")
    try:
        for row in (_row("a1", "a", "2026-12-02T09:00:00Z", "2026-12-02T09:10:00Z", finished=True, posts=4),
                    _row("a2", "a", "2026-12-02T10:00:00Z", "2026-12-02T10:00:45Z", posts=6),  # killed
                    _row("b1", "b", "2026-12-02T10:00:00Z", "2026-12-02T10:00:58Z", posts=10, worker="w1"),
                    _row("b2", "b", "2026-12-02T10:00:30Z", "2026-12-02T10:00:59Z", posts=5, worker="w2")):
            store.write_run(row)
        found = job_runs(store, now=datetime(2026, 12, 2, 10, 1, 5, tzinfo=UTC))
    finally:
        store.close()
    assert found["a"]["runs"] == 2 and found["a"]["last"]["run_id"] == "a2"
    assert found["a"]["last"]["state"] == "stopped" and found["a"]["running"] == []  # 20 s > 3 intervals of 5 s
    assert [r["run_id"] for r in found["b"]["running"]] == ["b1", "b2"] and found["b"]["last"]["run_id"] == "b2"
    total = live_progress(found["b"]["running"])
    assert total is not None and (total["posts"], total["pages"], total["runs"]) == (15, 2, 2)
    assert total["posts_per_minute"] == pytest.approx(10 / (58 / 60) + 5 / (29 / 60), abs=0.1)


def test_off_without_the_records_database() -> None:
    with pytest.raises(NotConfigured, match="RECORDS_ENABLED is off"):
        build_from_crawler(RunsExtension, project_crawler(RECORDS_ENABLED=False))
