"""scrapyd end to end: a real scrapyd on 127.0.0.1 with basic auth, our egg deployed with scrapyd-deploy, weibo
jobs scheduled with schedule.json against the sandbox, cancelled with cancel.json and scheduled again.

- The egg is built by scrapyd-deploy from a copy of this checkout (setup.py, its entry point ``scrapy: settings``)
  with a generated scrapy.cfg whose target carries the test's port and credentials; the committed scrapy.cfg is
  never touched. The copy also carries a probe spider that the checkout does not have: scrapyd listing it proves
  that its runner (which starts the jobs too) imports the egg, not the checkout (the venv's editable install).
- Items are read where scrapyd's FEEDS put them (``items_dir/<project>/<spider>/<job>.jl``); OUTPUT_DIR must stay
  empty (the default-output add-on leaves scrapyd's FEEDS alone). Every runtime path is passed as a setting under
  the test's directory; nothing may appear in scrapyd's own working directory.
- A cancel is scrapyd's ``cancel.json`` with ``signal=TERM`` (scrapyd's default is INT; Scrapy treats both alike).
  Waits poll listjobs.json, the checkpoint file or the sandbox's request log, each with a deadline.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.checkpoints.model import Checkpoint
from mediacrawler.checkpoints.store import FileCheckpointStore
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from tests.utils import weibo_sandbox

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "mediacrawler"
USER, PASSWORD = "operator", "e2e-not-a-secret"
UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES, PER_PAGE = 12, 5
JOB_TIMEOUT = 60.0


# --- scrapyd and the sandbox -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(home: Path) -> dict[str, str]:
    """Environment of scrapyd and scrapyd-deploy: no settings module, Redis, metrics or scrapyd options of ours."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SCRAPYD_") and k not in ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "REDIS_URL",
                                                        "CACHE_BACKEND", "METRICS_PORT")}
    env["HOME"] = str(home)  # scrapyd also reads ~/.scrapyd.conf
    return env


class Scrapyd:
    """One ``python -m scrapyd`` subprocess in its own directory, and a client of its JSON API with basic auth."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root / "server"
        self.cwd.mkdir(parents=True)
        self.items_dir = root / "items"
        self.logs_dir = root / "logs"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        (self.cwd / "scrapyd.conf").write_text(
            "[scrapyd]\n"
            "bind_address = 127.0.0.1\n"
            f"http_port = {self.port}\n"
            f"username = {USER}\n"
            f"password = {PASSWORD}\n"
            f"eggs_dir = {root / 'eggs'}\n"
            f"logs_dir = {self.logs_dir}\n"
            f"items_dir = {self.items_dir}\n"
            f"dbs_dir = {root / 'dbs'}\n"
            "jobs_to_keep = 100\n"
            "max_proc = 1\n"
            "poll_interval = 0.2\n", "utf-8")
        self.log_path = root / "scrapyd.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "scrapyd"], cwd=self.cwd, env=_clean_env(self.cwd),
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"scrapyd exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            try:
                if self.get("daemonstatus.json")["status"] == "ok":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"scrapyd did not answer within 30 s:\n{self.log()[-3000:]}")
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def request(self, path: str, data: Iterable[tuple[str, str]] | None = None, *, auth: bool = True) -> Any:
        body = urllib.parse.urlencode(list(data)).encode() if data is not None else None
        req = urllib.request.Request(self.url + path, data=body)
        if auth:
            token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read())

    def get(self, path: str) -> Any:
        return self.request(path)

    def schedule(self, settings: dict[str, Any], **args: Any) -> str:
        fields = [("project", PROJECT), ("spider", "weibo"),
                  *(("setting", f"{name}={value}") for name, value in settings.items()),
                  *((name, str(value)) for name, value in args.items())]
        answer = self.request("schedule.json", fields)
        assert answer["status"] == "ok", answer
        return str(answer["jobid"])

    def cancel(self, job: str, sig: str = "TERM") -> Any:
        answer = self.request("cancel.json", [("project", PROJECT), ("job", job), ("signal", sig)])
        assert answer["status"] == "ok", answer
        return answer

    def state(self, job: str) -> str | None:
        jobs = self.get(f"listjobs.json?project={PROJECT}")
        for state in ("pending", "running", "finished"):
            if any(j["id"] == job for j in jobs[state]):
                return state
        return None

    def wait_finished(self, job: str, timeout: float = JOB_TIMEOUT) -> float:
        """Seconds until the job is listed as finished; fails with the job's log tail after ``timeout``."""
        start = time.monotonic()
        wait_until(lambda: self.state(job) == "finished", f"job {job} to finish", timeout,
                   detail=lambda: self.job_log(job)[-3000:])
        return time.monotonic() - start

    def job_log(self, job: str) -> str:
        path = self.logs_dir / PROJECT / "weibo" / f"{job}.log"
        return path.read_text("utf-8", "replace") if path.exists() else ""

    def items_path(self, job: str) -> Path:
        return self.items_dir / PROJECT / "weibo" / f"{job}.jl"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: scrapyd and any job it still runs
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def deploy(scrapyd: Scrapyd, workdir: Path) -> str:
    """scrapyd-deploy from a copy of the checkout with a generated scrapy.cfg; returns scrapyd-deploy's output."""
    project = workdir / "project"
    project.mkdir()
    for package in ("mediacrawler", "mediacrawler_sandbox"):  # the sandbox too: setup.py is what leaves it out
        shutil.copytree(ROOT / package, project / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("setup.py", "requirements.txt", "README.md", "MANIFEST.in"):
        shutil.copy2(ROOT / name, project / name)
    # In the egg only: proves that scrapyd's runner imports the egg, not the checkout.
    (project / "mediacrawler" / "spiders" / "scrapyd_probe.py").write_text(
        "import scrapy\n\n\nclass ScrapydProbeSpider(scrapy.Spider):\n    name = 'scrapyd_probe'\n", "utf-8")
    (project / "scrapy.cfg").write_text(
        "[settings]\ndefault = mediacrawler.settings\n\n"
        f"[deploy:e2e]\nurl = {scrapyd.url}\nproject = {PROJECT}\nusername = {USER}\npassword = {PASSWORD}\n",
        "utf-8")
    deploy_script = Path(sys.executable).with_name("scrapyd-deploy")
    assert deploy_script.is_file(), "scrapyd-client is not installed (pip install -r requirements-dev.txt)"
    done = subprocess.run([str(deploy_script), "e2e", "-v", "e2e1"], cwd=project, env=_clean_env(workdir),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def scrapyd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrapyd]:
    root = tmp_path_factory.mktemp("scrapyd")
    server = Scrapyd(root)
    try:
        output = deploy(server, root)
        assert '"status": "ok"' in output and '"spiders": 6' in output, output
        yield server
    finally:
        server.stop()


sb = weibo_sandbox(UID, PAGES, PER_PAGE)


@pytest.fixture
def sandbox(sb: SandboxProcess) -> SandboxProcess:
    sb.reset()
    return sb


@pytest.fixture(scope="module")
def world_pages() -> dict[int, set[str]]:
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE)
    pages = {n: {str(p.id) for p in world.weibo.page(UID, n)} for n in range(1, PAGES + 1)}
    assert sum(map(len, pages.values())) == PAGES * PER_PAGE
    return pages


# --- helpers -----------------------------------------------------------------------------------------------------


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 30.0,
               detail: Callable[[], str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f":\n{detail()}" if detail else ""))


def job_settings(sandbox: SandboxProcess, workdir: Path, **extra: Any) -> dict[str, Any]:
    """Every runtime path under the test's directory (scrapyd runs jobs in its own working directory)."""
    return {
        "WEIBO_BASE_URL": sandbox.weibo_url,
        "CHECKPOINT_DIR": workdir / "checkpoints",
        "FILES_STORE": workdir / "files",
        "OUTPUT_DIR": workdir / "output",
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": "False",
        "MEDIA_FSYNC": "False",
        **extra,
    }


def checkpoint(workdir: Path) -> Checkpoint | None:
    return FileCheckpointStore(workdir / "checkpoints").load(KEY)


def post_ids(paths: Iterable[Path]) -> Counter[str]:
    ids: Counter[str] = Counter()
    for path in paths:
        if not path.exists():
            continue
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            record = json.loads(line)
            assert record["source"]["job"] == KEY, f"{path}:{n}"
            ids[record["post_id"]] += 1
    return ids


def assert_exactly_once(ids: Counter[str], expected: set[str]) -> None:
    duplicated = sorted(i for i, c in ids.items() if c > 1)
    assert not duplicated, f"{len(duplicated)} posts stored twice, e.g. {duplicated[:5]}"
    assert set(ids) == expected, (f"missing {sorted(expected - set(ids))[:5]}, "
                                  f"unexpected {sorted(set(ids) - expected)[:5]}")


def listing_pages(sandbox: SandboxProcess) -> list[int]:
    return [int(urllib.parse.parse_qs(e["query"])["page"][0]) for e in sandbox.requests()
            if e["path"].endswith("/api/container/getIndex")]


def watermark_at_least(workdir: Path, n: int) -> Callable[[], bool]:
    def check() -> bool:
        cp = checkpoint(workdir)
        return cp is not None and cp.watermark >= n
    return check


def all_posts(pages: dict[int, set[str]], first: int = 1) -> set[str]:
    return set().union(*(ids for n, ids in pages.items() if n >= first))


# --- the tests ---------------------------------------------------------------------------------------------------


def test_basic_auth_is_required_and_the_egg_is_what_runs(scrapyd: Scrapyd) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrapyd.request(f"listspiders.json?project={PROJECT}", auth=False)
    assert refused.value.code == 401
    spiders = scrapyd.get(f"listspiders.json?project={PROJECT}")["spiders"]
    assert set(spiders) == {"bilibili", "douyin", "facebook", "weibo", "xhs", "scrapyd_probe"}


def test_the_egg_holds_the_package_and_no_sandbox(scrapyd: Scrapyd) -> None:
    (egg,) = (scrapyd.root / "eggs" / PROJECT).glob("*.egg")
    with zipfile.ZipFile(egg) as archive:
        names = archive.namelist()
    assert {"mediacrawler/settings.py", "mediacrawler/spiders/scrapyd_probe.py"} <= set(names)
    assert not [n for n in names if n.startswith(("mediacrawler_sandbox", "mediacrawler/sandbox"))], names
    assert scrapyd.get(f"listversions.json?project={PROJECT}")["versions"] == ["e2e1"]
    assert PASSWORD not in scrapyd.log()


def test_schedule_with_uid_and_start(scrapyd: Scrapyd, sandbox: SandboxProcess, tmp_path: Path,
                                     world_pages: dict[int, set[str]]) -> None:
    job = scrapyd.schedule(job_settings(sandbox, tmp_path), uid=UID, start=2)
    scrapyd.wait_finished(job)
    log = scrapyd.job_log(job)
    assert "Spider closed (finished)" in log, log[-3000:]
    assert "starting at page 2" in log
    assert "log_count/ERROR" not in log, log[-3000:]

    # Items where scrapyd's FEEDS say; the default output (OUTPUT_DIR) stayed out of the way.
    assert_exactly_once(post_ids([scrapyd.items_path(job)]), all_posts(world_pages, first=2))
    assert not (tmp_path / "output").exists()
    pages = listing_pages(sandbox)
    assert 1 not in pages and min(pages) == 2, pages
    assert checkpoint(tmp_path) is None  # the job completed its source
    assert not (tmp_path / "checkpoints" / f"{KEY}.json").exists()

    # Media went to FILES_STORE, and every stored record points at a file there.
    stored = [m for line in scrapyd.items_path(job).read_text("utf-8").splitlines()
              for m in json.loads(line)["media"] if m["status"] in ("downloaded", "uptodate", "deduplicated")]
    assert stored
    for media in stored:
        assert (tmp_path / "files" / media["path"]).is_file(), media
    # Nothing written relative to scrapyd's working directory (or the package).
    assert {p.name for p in scrapyd.cwd.iterdir()} <= {"scrapyd.conf", "twistd.pid"}


def test_cancel_keeps_the_checkpoint_and_the_next_schedule_resumes(
    scrapyd: Scrapyd, sandbox: SandboxProcess, tmp_path: Path, world_pages: dict[int, set[str]]
) -> None:
    sandbox.set_faults(weibo_latency_ms=150)
    settings = job_settings(sandbox, tmp_path)
    first = scrapyd.schedule(settings, uid=UID)
    wait_until(watermark_at_least(tmp_path, 3), "watermark 3", detail=lambda: scrapyd.job_log(first)[-3000:])
    assert scrapyd.cancel(first)["prevstate"] == "running"
    assert scrapyd.wait_finished(first, timeout=20) < 15  # in-flight pages finish; no stall here
    log = scrapyd.job_log(first)
    assert "Received SIGTERM, shutting down gracefully" in log
    assert "Spider closed (shutdown)" in log and "checkpoint kept" in log, log[-3000:]
    assert "Graceful stop took longer" not in log  # it ended by itself, not by SHUTDOWN_GRACE
    cp = checkpoint(tmp_path)
    assert cp is not None and 3 <= cp.watermark < PAGES, cp

    sandbox.reset()
    second = scrapyd.schedule(settings, uid=UID)
    scrapyd.wait_finished(second)
    log = scrapyd.job_log(second)
    assert "Spider closed (finished)" in log, log[-3000:]
    assert f"resuming at page {cp.watermark + 1}" in log
    assert listing_pages(sandbox)[0] == cp.watermark + 1
    assert_exactly_once(post_ids([scrapyd.items_path(first), scrapyd.items_path(second)]), all_posts(world_pages))
    assert checkpoint(tmp_path) is None


def _an_image_path(sandbox: SandboxProcess, page: int) -> str:
    """Path of the first picture on a timeline page, read from the sandbox's own API answer."""
    query = urllib.parse.urlencode({"containerid": f"107603{UID}", "page": page})
    with urllib.request.urlopen(f"{sandbox.weibo_url}/api/container/getIndex?{query}", timeout=10) as response:
        cards = json.loads(response.read())["data"]["cards"]
    for card in cards:
        for pic in (card.get("mblog") or {}).get("pics") or []:
            return urllib.parse.urlsplit(pic["large"]["url"]).path
    pytest.fail(f"no picture on page {page}")


def test_stalled_media_bound_the_graceful_stop_and_a_second_cancel_forces_it(
    scrapyd: Scrapyd, sandbox: SandboxProcess, tmp_path: Path, world_pages: dict[int, set[str]]
) -> None:
    stalled = _an_image_path(sandbox, 2)
    sandbox.reset()
    # The picture's GETs send half the body, then nothing, connection open: the download only ends at
    # DOWNLOAD_TIMEOUT (60 s) x retries. Page 2 can never complete while it stalls.
    sandbox.set_faults(media_stall_paths={stalled: 100}, weibo_latency_ms=100)
    settings = job_settings(sandbox, tmp_path)

    def stall_gets() -> int:
        return sum(1 for e in sandbox.requests() if e["path"] == stalled)

    # One cancel: the graceful stop waits SHUTDOWN_GRACE for the stalled download, then stops.
    first = scrapyd.schedule({**settings, "SHUTDOWN_GRACE": 2}, uid=UID)
    wait_until(lambda: stall_gets() >= 1 and watermark_at_least(tmp_path, 1)(), "the stalled GET",
               detail=lambda: scrapyd.job_log(first)[-3000:])
    scrapyd.cancel(first)
    took = scrapyd.wait_finished(first, timeout=20)
    log = scrapyd.job_log(first)
    assert "Graceful stop took longer than SHUTDOWN_GRACE=2 s" in log, log[-3000:]
    assert 2 <= took < 10, took
    cp = checkpoint(tmp_path)
    assert cp is not None and cp.watermark == 1, cp  # page 2 holds the stalled post

    # Two cancels: the second one stops at once, without waiting for the (long) grace.
    gets = stall_gets()
    second = scrapyd.schedule({**settings, "SHUTDOWN_GRACE": 120}, uid=UID)
    wait_until(lambda: stall_gets() > gets, "the stalled GET again",
               detail=lambda: scrapyd.job_log(second)[-3000:])
    scrapyd.cancel(second)
    wait_until(lambda: "Closing spider (shutdown)" in scrapyd.job_log(second), "the graceful stop to begin")
    scrapyd.cancel(second)
    assert scrapyd.wait_finished(second, timeout=20) < 10
    log = scrapyd.job_log(second)
    assert "Received SIGTERM twice, forcing unclean shutdown" in log, log[-3000:]
    assert "Spider closed" not in log
    cp2 = checkpoint(tmp_path)
    assert cp2 is not None and cp2.watermark == 1, cp2  # still readable, still at the last completed page

    # With the picture back, the next schedule resumes at page 2 and every post is stored exactly once.
    sandbox.reset()
    third = scrapyd.schedule(settings, uid=UID)
    scrapyd.wait_finished(third)
    log = scrapyd.job_log(third)
    assert "Spider closed (finished)" in log and "resuming at page 2" in log, log[-3000:]
    jobs = (first, second, third)
    assert_exactly_once(post_ids(scrapyd.items_path(j) for j in jobs), all_posts(world_pages))
    assert checkpoint(tmp_path) is None


def test_shutdown_grace_zero_turns_the_bound_off() -> None:
    from scrapy.exceptions import NotConfigured
    from scrapy.utils.misc import build_from_crawler
    from scrapy.utils.test import get_crawler

    from mediacrawler.extensions.shutdown import ShutdownGraceExtension

    def crawler(grace: float) -> Any:
        return get_crawler(settings_dict={"SHUTDOWN_GRACE": grace, "SHUTDOWN_POLL_INTERVAL": 0.5})

    assert build_from_crawler(ShutdownGraceExtension, crawler(30)).grace == 30
    with pytest.raises(NotConfigured):
        build_from_crawler(ShutdownGraceExtension, crawler(0))
