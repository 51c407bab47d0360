"""Every platform spider as a worker: a job queued with ``mediacrawler enqueue`` is run by one worker (``scrapy
crawl <platform>`` with REDIS_URL and no target, a real redis-server) and by a plain crawl of the same arguments, both
against the sandbox over HTTP; the records must agree: the same posts, each with the same fields and media
hashes, every media file stored in the worker's own FILES_STORE.

The jobs are small (one listing page, or two given items) and the two crawls of a job run at the same time: about
6 s a test here (two process start-ups of CPU), 15 s on a busy machine. XHS and Bilibili are the spiders whose per-job state comes from their
arguments (note references with their tokens; the WBI key signing every playurl, asked by ``bilibili_wbi=all``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from mediacrawler.commands import enqueue
from mediacrawler_sandbox import bilibili, douyin, xhs
from mediacrawler_sandbox.facebook import PAGE_ID
from mediacrawler_sandbox.process import SandboxProcess
from tests.sync_crawls import CRAWL_TIMEOUT, ROOT, records

pytestmark = pytest.mark.slow

FACEBOOK_TOKEN = "EAAworker0123456789abcdef"
XHS_NOTES = xhs.build_xhs_world(seed=1).user_notes()[:2]

#: The job per spider (as ``mediacrawler enqueue <spider> key=value…`` takes it) and the roots it needs.
JOBS: dict[str, dict[str, str]] = {
    "weibo": {"uid": "7365120894", "max_pages": "1"},
    "bilibili": {"bvid": f"{bilibili.BVIDS[0]},{bilibili.BVIDS[1]}", "max_height": "480"},
    "facebook": {"page": PAGE_ID, "max_pages": "1"},
    "xhs": {"note": ",".join(f"https://www.xiaohongshu.com/explore/{n.id}?xsec_token="
                             f"{quote(n.xsec_token, safe='')}&xsec_source=pc_feed" for n in XHS_NOTES),
            "max_height": "480"},
    "douyin": {"aweme": f"{douyin.VIDEO_AWEMES[0]},https://v.douyin.com/iSbxA201/", "max_height": "480"},
}


def roots(sandbox: SandboxProcess) -> list[str]:
    url = sandbox.url
    values = {
        "WEIBO_BASE_URL": sandbox.weibo_url, "BILIBILI_API_URL": f"{url}/bilibili",
        "FACEBOOK_GRAPH_URL": f"{url}/facebook/v19.0", "FACEBOOK_PAGE_SIZE": "4", "XHS_WEB_URL": f"{url}/xhs",
        "DOUYIN_SHARE_URL": f"{url}/douyin", "DOUYIN_WEB_URL": f"{url}/douyin",
        "DOUYIN_SHORT_URL": f"{url}/douyin/v",
    }
    return [arg for name, value in values.items() for arg in ("-s", f"{name}={value}")]


@pytest.fixture
def sb(sandbox: SandboxProcess) -> Iterator[SandboxProcess]:
    sandbox.reset()
    sandbox.set_faults(bilibili_wbi="all", facebook_token=FACEBOOK_TOKEN)
    yield sandbox
    sandbox.reset()


def crawl(spider: str, sandbox: SandboxProcess, workdir: Path, *args: str, redis_url: str | None = None
          ) -> subprocess.Popen[bytes]:
    """``scrapy crawl <spider>`` with its own media store, checkpoints and output under ``workdir``."""
    workdir.mkdir(parents=True)
    command = [sys.executable, "-m", "scrapy", "crawl", spider, *args, *roots(sandbox),
               "-s", f"FILES_STORE={workdir / 'files'}", "-s", f"CHECKPOINT_DIR={workdir / 'checkpoints'}",
               "-s", f"OUTPUT_DIR={workdir / 'output'}", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
               "-s", "MEDIA_COMMIT_PROCESS=0", "-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=0",
               "-s", "PLATFORM_BACKOFF_BASE=0.05", "-s", "PLATFORM_BACKOFF_MAX=0.2"]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CACHE_BACKEND")}
    env.update(SCRAPY_SETTINGS_MODULE="mediacrawler.settings", FACEBOOK_ACCESS_TOKEN=FACEBOOK_TOKEN)
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
        command += ["-s", "DISTRIBUTED_LEASE_TTL=2", "-s", "DISTRIBUTED_HEARTBEAT=0.3",
                    "-s", "DISTRIBUTED_ACK_INTERVAL=0.2", "-s", "DISTRIBUTED_IDLE_CLOSE=1",
                    "-s", "DISTRIBUTED_JOB_POLL=0.2"]
    with (workdir / "crawl.log").open("wb") as log:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)


def finished(proc: subprocess.Popen[bytes], workdir: Path) -> list[dict[str, Any]]:
    """The records of a crawl that exited 0 without a traceback."""
    try:
        code = proc.wait(CRAWL_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        code = None
    log = (workdir / "crawl.log").read_text("utf-8", "replace")
    assert code == 0 and "Traceback" not in log, log[-4000:]
    return [r for path in sorted((workdir / "output").rglob("*.jsonl")) for r in records(path)]


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A record without what differs between two crawls of one job: when it was fetched, how its files came (a
    fresh download or one deduplicated)."""
    volatile = {"fetched_at", "source"}
    out = {k: v for k, v in record.items() if k not in volatile}
    out["media"] = [{k: v for k, v in asset.items() if k != "status"} for asset in record.get("media") or ()]
    if record.get("reposted"):
        out["reposted"] = comparable(record["reposted"])
    return out


@pytest.mark.parametrize("spider", sorted(JOBS))
def test_a_worker_on_an_enqueued_job_gives_the_records_of_a_plain_crawl(
        spider: str, sb: SandboxProcess, redis_url: str, tmp_path: Path) -> None:
    job = JOBS[spider]
    assert enqueue.main([spider, *(f"{k}={v}" for k, v in job.items()), "--redis-url", redis_url]) == 0
    worker = crawl(spider, sb, tmp_path / "worker", redis_url=redis_url)
    plain = crawl(spider, sb, tmp_path / "plain", *(a for k, v in job.items() for a in ("-a", f"{k}={v}")))
    by_worker, by_plain = finished(worker, tmp_path / "worker"), finished(plain, tmp_path / "plain")

    assert by_plain, "the plain crawl emitted nothing"
    assert sorted(r["post_id"] for r in by_worker) == sorted(r["post_id"] for r in by_plain)
    plain_records = {r["post_id"]: comparable(r) for r in by_plain}
    for record in by_worker:
        assert comparable(record) == plain_records[record["post_id"]], record["post_id"]
        assert record["source"]["job"] == next(r for r in by_plain if r["post_id"] == record["post_id"]
                                               )["source"]["job"]
    stored = [a for r in by_worker for a in r["media"] if a.get("sha256")]
    assert stored, "no media stored"
    for asset in stored:  # in the worker's own store, byte for byte
        data = (tmp_path / "worker" / "files" / asset["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == asset["sha256"]
    log = (tmp_path / "worker" / "crawl.log").read_text("utf-8", "replace")
    assert "worker mode" in log or "waiting for jobs" in log
