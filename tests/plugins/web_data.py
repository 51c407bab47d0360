"""The data the web tests browse (tests/test_web_api.py, tests/test_web_browser.py): two small sandbox crawls per
test process (run at once), then a few rows no crawl makes yet, written through the records store's own upsert
path.

- ``weibo -a uid=6000000001`` (the sandbox's showcase: pictures, Live Photos, videos with covers; 3 posts) and
  ``bilibili -a bvid=BV1Up0002010 -a subtitles=true`` (a video with its cover and two subtitle tracks).
- A comment thread on the showcase's newest post (the spiders do not walk comments yet): two top-level comments,
  a reply and a reply to the reply, one pinned.
- A hostile post: ``<script>`` text, a ``javascript:`` URL, an author id and name with ``../``, a media row whose
  path leaves the store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mediacrawler.records.rows import Rows, add_record
from mediacrawler.records.store import open_store
from mediacrawler_sandbox.process import SandboxProcess

ROOT = Path(__file__).resolve().parent.parent.parent
SHOWCASE_UID = "6000000001"
BVID = "BV1Up0002010"
THREAD_POST = "5370137436868173"
HOSTILE_ID = "666"
HOSTILE_TEXT = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'
HOSTILE_AUTHOR = "../../etc"


@dataclass
class WebData:
    root: Path
    settings: list[str]  # the -s pairs of the crawls, for the web app (and the crawls it starts)
    sandbox_url: str

    @property
    def records_db(self) -> str:
        return str(self.root / "checkpoints" / "records.sqlite3")


def crawl_settings(root: Path, sandbox: SandboxProcess) -> list[str]:
    return [f"WEIBO_BASE_URL={sandbox.weibo_url}", f"BILIBILI_API_URL={sandbox.url}/bilibili",
            f"CHECKPOINT_DIR={root / 'checkpoints'}", f"FILES_STORE={root / 'files'}",
            f"OUTPUT_DIR={root / 'output'}", "DOWNLOAD_DELAY=0", "AUTOTHROTTLE_ENABLED=0", "LOG_LEVEL=INFO"]


def _crawls(root: Path, pairs: list[str], *crawls: tuple[str, ...]) -> None:
    """Run the crawls ``(spider, *args)`` at once (two processes on one records store and one media store, as two
    workers of a machine are); each must exit 0."""
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}
    env.pop("REDIS_URL", None)
    started = []
    for spider, *args in crawls:
        command = [sys.executable, "-m", "scrapy", "crawl", spider, *args]
        for pair in pairs:
            command += ["-s", pair]
        log = root / f"{spider}.log"
        with log.open("wb") as out:
            started.append((subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT), log))
    try:
        for proc, log in started:
            assert proc.wait(timeout=180) == 0, log.read_text("utf-8", "replace")[-3000:]
    finally:
        for proc, _ in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _extra_rows(uri: str) -> None:
    def comment(cid: str, parent: str | None, root: str, text: str, *, pinned: bool = False) -> dict[str, object]:
        return {"platform": "weibo", "comment_id": cid, "post_id": THREAD_POST, "parent_id": parent,
                "root_id": root, "author": {"id": f"u{cid}", "name": f"commenter {cid}"}, "text": text,
                "created_at": f"2026-11-28T0{len(cid)}:00:00Z", "metrics": {"likes": int(cid), "replies": 0},
                "pinned": pinned, "deleted": False, "fetched_at": "2026-11-28T10:00:00Z", "extra": {}}

    rows = Rows()
    for record in (comment("1", None, "1", "first top-level comment", pinned=True),
                   comment("11", "1", "1", "a reply to the first"),
                   comment("111", "11", "1", "a reply to the reply"),
                   comment("2", None, "2", "second top-level comment <b>not bold</b>")):
        add_record(rows, record)
    add_record(rows, {"platform": "weibo", "post_id": HOSTILE_ID, "url": "javascript:alert(1)",
                      "author": {"id": HOSTILE_AUTHOR, "name": HOSTILE_AUTHOR}, "created_at": "2020-01-01T00:00:00Z",
                      "text": HOSTILE_TEXT, "text_html": HOSTILE_TEXT, "metrics": {"likes": 1},
                      "media": [{"kind": "image", "key": "weibo:hostile", "url": "https://x.invalid/a.jpg",
                                 "sha256": "0" * 64, "path": "../../../../etc/passwd", "status": "downloaded"}],
                      "source": {"spider": "weibo", "job": "weibo-uid-666"}, "fetched_at": "2020-01-01T00:00:00Z",
                      "extra": {}})
    store = open_store(uri, now="2026-12-01T00:00:00.000000Z")
    try:
        store.write(rows, run_id="web-test", seen_at="2026-12-01T00:00:00.000000Z")
    finally:
        store.close()


@pytest.fixture(scope="session")
def web_data(sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebData]:
    root = tmp_path_factory.mktemp("web")
    pairs = crawl_settings(root, sandbox)
    _crawls(root, pairs, ("weibo", "-a", f"uid={SHOWCASE_UID}"),
            ("bilibili", "-a", f"bvid={BVID}", "-a", "subtitles=true"))
    data = WebData(root=root, settings=pairs, sandbox_url=sandbox.url)
    _extra_rows(data.records_db)
    yield data
