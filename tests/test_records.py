"""The records database (docs/records.md, "Records database"): the one upsert path on SQLite and on a real
PostgreSQL server (tests/plugins/postgres_server.py), and real ``scrapy crawl weibo`` runs against a sandbox whose
counts grow between two runs (control ``weibo/engage``): one row per post, counts updated, two history rows, the
second run (``-a refresh``) downloading nothing and writing no feed line; the same rows in SQLite and PostgreSQL;
two processes writing one PostgreSQL database at once lose and duplicate nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mediacrawler.pipelines.records import records_problem
from mediacrawler.records.rows import Rows, add_record
from mediacrawler.records.schema import SCHEMA_VERSION, SchemaTooNew
from mediacrawler.records.store import RUN_COUNTS, open_store
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.world import build_world
from tests.sync_crawls import ROOT, control, crawl_command, media_paths, records, run
from tests.utils import project_crawler, weibo_sandbox

UID = 7365120894
KEY = f"weibo-uid-{UID}"
PAGES, PER_PAGE = 1, 6
NOW = "2026-12-02T00:00:00Z"

sb = weibo_sandbox(UID, PAGES, PER_PAGE)


def _post(post_id: str, likes: int | None, *, media: bool = True) -> dict[str, Any]:
    return {"platform": "weibo", "post_id": post_id, "url": f"https://weibo.com/1/{post_id}",
            "author": {"id": "1", "name": "A"}, "created_at": "2026-11-28T01:00:00Z", "text": "t",
            "metrics": {"likes": likes, "comments": 3, "shares": None, "views": None},
            "media": [{"kind": "image", "key": f"p{post_id}", "url": f"https://m.test/{post_id}.jpg",
                       "sha256": "ab" * 32 if media else None, "path": "objects/ab/x.jpg" if media else None,
                       "status": "downloaded" if media else None}],
            "source": {"spider": "weibo", "job": KEY}, "extra": {"bid": post_id, "refresh_only": True}}


def _write(store: Any, run_id: str, seen_at: str, *posts: dict[str, Any], with_results: bool = True) -> Any:
    rows = Rows()
    for post in posts:
        add_record(rows, post, with_results=with_results)
    return store.write(rows, run_id=run_id, seen_at=seen_at)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "records.sqlite3")
    return str(request.getfixturevalue("postgres_url"))


def test_upsert_counts_history_and_results(store_uri: str) -> None:
    store = open_store(store_uri, now=NOW)
    try:
        assert _write(store, "r1", "2026-12-02T00:00:01Z", _post("1", 5)).history == 1
        again = _write(store, "r2", "2026-12-02T00:00:02Z", _post("1", 5, media=False), with_results=False)
        assert (again.posts, again.history) == (1, 0)  # same counts: no history row
        assert _write(store, "r3", "2026-12-02T00:00:03Z", _post("1", None)).history == 0  # unknown: kept
        assert _write(store, "r4", "2026-12-02T00:00:04Z", _post("1", 9, media=False)).history == 1
        [post] = store.table("posts")
        assert (post["likes"], post["comments"], post["first_seen_at"], post["last_seen_at"]) == (
            9, 3, "2026-12-02T00:00:01Z", "2026-12-02T00:00:04Z")
        assert json.loads(post["extra"]) == {"bid": "1"}  # the pipelines' flag is never stored
        assert [(h["run_id"], h["likes"]) for h in store.table("metrics_history")] == [("r1", 5), ("r4", 9)]
        [asset] = store.table("media")
        assert (asset["sha256"], asset["status"]) == ("ab" * 32, "downloaded")  # later sightings kept them
        assert store.table("post_media", ["post_id", "position", "key"]) == [
            {"post_id": "1", "position": 0, "key": "p1"}]
        assert store.table("authors", ["author_id", "name"]) == [{"author_id": "1", "name": "A"}]
    finally:
        store.close()


def test_a_newer_schema_is_refused_in_one_line(store_uri: str, tmp_path: Path) -> None:
    store = open_store(store_uri, now=NOW)
    store._begin()  # as a newer mediacrawler's migration would leave it
    store._execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (SCHEMA_VERSION + 1, NOW))
    store._commit()
    store.close()
    with pytest.raises(SchemaTooNew):
        open_store(store_uri, now=NOW)
    problem = records_problem(project_crawler(RECORDS_DB=store_uri).settings)
    assert problem is not None and "\n" not in problem
    assert f"schema version {SCHEMA_VERSION + 1}, newer than this mediacrawler reads" in problem


def test_a_new_sqlite_database_opened_by_several_at_once_opens_for_each(tmp_path: Path) -> None:
    """Workers started together open a new records file at the same moment: switching it to WAL needs a lock
    SQLite does not wait for, and one of them failed with 'database is locked' (~1 open in 40 here)."""
    import threading

    outcomes: list[str] = []
    for trial in range(40):
        path, gate = str(tmp_path / f"{trial}.sqlite3"), threading.Barrier(4)

        def open_it(path: str = path, gate: threading.Barrier = gate) -> None:
            gate.wait(10)
            try:
                store = open_store(path, now=NOW)
            except Exception as exc:  # noqa: BLE001 - the outcome is the assertion
                outcomes.append(f"{type(exc).__name__}: {exc}")
                return
            outcomes.append(f"schema {store.version()}")
            store.close()

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert outcomes == [f"schema {SCHEMA_VERSION}"] * 160


def test_an_unreachable_postgres_is_one_line_without_its_password() -> None:
    problem = records_problem(project_crawler(RECORDS_DB="postgresql://crawler:s3cret-pw@127.0.0.1:1/db").settings)
    assert problem is not None and "\n" not in problem and "s3cret-pw" not in problem
    assert problem.startswith("RECORDS_DB=postgresql://crawler:***@127.0.0.1:1/db cannot be opened: ")


def _comment(comment_id: str, *pictures: str, likes: int = 1) -> dict[str, Any]:
    return {"platform": "weibo", "comment_id": comment_id, "post_id": "1", "parent_id": None,
            "root_id": comment_id, "author": {"id": "9", "name": "评论者"}, "text": "好",
            "created_at": "2026-11-28T02:00:00Z",
            "metrics": {"likes": likes, "replies": 0}, "source": {"spider": "weibo", "job": KEY},
            "media": [{"kind": "image", "key": key, "url": f"https://m.test/{key}.jpg", "sha256": "cd" * 32,
                       "path": f"objects/cd/{key}.jpg", "status": "downloaded"} for key in pictures]}


def test_comments_and_their_pictures_are_upserted_and_linked(store_uri: str) -> None:
    store = open_store(store_uri, now=NOW)
    try:
        written = _write(store, "r1", "2026-12-02T00:00:01Z", _post("1", 5), _comment("c1", "m1", "m2"),
                         _comment("c2"))
        assert (written.posts, written.comments) == (1, 2)
        _write(store, "r2", "2026-12-02T00:00:02Z", _comment("c1", "m2", likes=7))  # seen again: one picture
        rows = store.table("comments", ["comment_id", "post_id", "likes", "job", "first_seen_at", "last_seen_at"])
        assert rows == [
            {"comment_id": "c1", "post_id": "1", "likes": 7, "job": KEY, "first_seen_at": "2026-12-02T00:00:01Z",
             "last_seen_at": "2026-12-02T00:00:02Z"},
            {"comment_id": "c2", "post_id": "1", "likes": 1, "job": KEY, "first_seen_at": "2026-12-02T00:00:01Z",
             "last_seen_at": "2026-12-02T00:00:01Z"}]
        assert store.table("comment_media", ["comment_id", "position", "key"]) == [
            {"comment_id": "c1", "position": 0, "key": "m2"}]
        assert {m["key"]: m["path"] for m in store.table("media")} == {
            "p1": "objects/ab/x.jpg", "m1": "objects/cd/m1.jpg", "m2": "objects/cd/m2.jpg"}
        assert store.table("post_media", ["post_id", "key"]) == [{"post_id": "1", "key": "p1"}]  # no comment's
    finally:
        store.close()


def test_a_version_1_database_is_migrated_with_its_rows_kept(store_uri: str) -> None:
    store = open_store(store_uri, now=NOW)
    store._begin()  # back to what version 1 made: no comment_media, comments without spider and job
    for statement in ("DROP TABLE comment_media", "DROP INDEX posts_job", "DELETE FROM schema_version",
                      "ALTER TABLE comments DROP COLUMN job", "ALTER TABLE comments DROP COLUMN spider",
                      "DROP TABLE runs"):
        store._execute(statement)
    store._execute("INSERT INTO schema_version (version, applied_at) VALUES (1, ?)", (NOW,))
    store._execute("INSERT INTO comments (platform, comment_id, post_id, text, pinned, deleted, extra, "
                   "first_seen_at, last_seen_at) VALUES ('weibo', 'old', '1', 'kept', 0, 0, '{}', ?, ?)",
                   (NOW, NOW))
    store._commit()
    store.close()
    store = open_store(store_uri, now=NOW)
    try:
        assert store.version() == SCHEMA_VERSION == 3
        assert [r["version"] for r in store.table("schema_version")] == [1, 2, 3]
        _write(store, "r1", "2026-12-02T00:00:01Z", _comment("c1", "m1"))
        assert store.table("comments", ["comment_id", "text", "job"]) == [
            {"comment_id": "c1", "text": "好", "job": KEY}, {"comment_id": "old", "text": "kept", "job": None}]
        assert len(store.table("comment_media")) == 1
    finally:
        store.close()


def _run_row(run_id: str, **figures: Any) -> dict[str, Any]:
    return {"run_id": run_id, "spider": "weibo", "job": KEY, "host": "h", "worker": None, "pid": 1,
            "started_at": NOW, "updated_at": NOW, "finished_at": None, "finish_reason": None,
            "update_interval": 5.0,
            **dict.fromkeys(RUN_COUNTS, 0), **figures}


def test_a_version_2_database_gains_the_runs_table_and_a_finished_run_stays_finished(store_uri: str) -> None:
    store = open_store(store_uri, now=NOW)
    _write(store, "r1", "2026-12-02T00:00:01Z", _post("1", 5))
    store._begin()  # back to what version 2 made: no runs table
    for statement in ("DROP TABLE runs", "DELETE FROM schema_version WHERE version = 3"):
        store._execute(statement)
    store._commit()
    assert store.version() == 2
    store.close()
    store = open_store(store_uri, now=NOW)
    try:
        assert [r["version"] for r in store.table("schema_version")] == [1, 2, 3]
        assert [r["post_id"] for r in store.table("posts")] == ["1"] and store.table("runs") == []
        store.write_run(_run_row("a", pages=1))
        store.write_run(_run_row("a", pages=4, posts=30, updated_at="2026-12-02T00:00:05Z"))
        store.write_run(_run_row("a", pages=5, finished_at="2026-12-02T00:00:06Z", finish_reason="finished"))
        store.write_run(_run_row("a", pages=9, updated_at="2026-12-02T00:00:07Z"))  # late: a finished run stays
        (row,) = store.table("runs")
        assert (row["pages"], row["posts"], row["finish_reason"], row["updated_at"]) == (
            5, 0, "finished", NOW)
    finally:
        store.close()


#: A crawl whose spider yields a post and a comment with a picture each, as the comment-reading spiders do, through
#: the records pipeline alone: Comment dataclass items upserted as a crawl upserts them (ItemAdapter, the writer
#: thread, the media results at item_scraped).
ITEMS_CRAWL = """
import sys
import scrapy
from scrapy.crawler import AsyncCrawlerProcess
from mediacrawler.items import Author, Comment, CommentMetrics, MediaAsset, Metrics, Post, Source

def asset(key):
    return MediaAsset(kind="image", key=key, url=f"https://m.test/{key}.jpg", sha256="ef" * 32,
                      path=f"objects/ef/{key}.jpg", size=3, status="downloaded")

class Items(scrapy.Spider):
    name = "items"

    async def start(self):
        source = Source(spider="weibo", job="weibo-uid-1")
        yield Post(platform="weibo", post_id="1", url="https://weibo.com/1/1", author=Author(id="1", name="A"),
                   created_at="2026-11-28T01:00:00Z", metrics=Metrics(likes=2), media=[asset("p1")], source=source)
        yield Comment(platform="weibo", comment_id="c1", post_id="1", parent_id=None, root_id="c1",
                      author=Author(id="9", name="B"), text="hi", created_at="2026-11-28T02:00:00Z",
                      metrics=CommentMetrics(likes=4, replies=1), media=[asset("m1")], source=source)

process = AsyncCrawlerProcess({"RECORDS_DB": sys.argv[1], "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False,
                               "ITEM_PIPELINES": {"mediacrawler.pipelines.records.RecordsPipeline": 150}})
process.crawl(Items)
process.start()
"""


def test_a_crawl_upserts_its_comment_items_with_their_pictures(tmp_path: Path) -> None:
    uri = str(tmp_path / "records.sqlite3")
    done = subprocess.run([sys.executable, "-c", ITEMS_CRAWL, uri], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "'records/comments': 1" in done.stderr, done.stderr[-3000:]
    store = open_store(uri, now=NOW)
    try:
        assert store.table("comments", ["comment_id", "post_id", "author_id", "likes", "replies", "job"]) == [
            {"comment_id": "c1", "post_id": "1", "author_id": "9", "likes": 4, "replies": 1, "job": "weibo-uid-1"}]
        assert store.table("comment_media", ["comment_id", "key"]) == [{"comment_id": "c1", "key": "m1"}]
        assert {m["key"]: (m["status"], m["path"]) for m in store.table("media")} == {
            "p1": ("downloaded", "objects/ef/p1.jpg"), "m1": ("downloaded", "objects/ef/m1.jpg")}
        assert store.table("authors", ["author_id", "name"]) == [{"author_id": "1", "name": "A"},
                                                                 {"author_id": "9", "name": "B"}]
    finally:
        store.close()


WRITER = """
import sys
from mediacrawler.records.rows import Rows, add_record
from mediacrawler.records.store import RUN_COUNTS, open_store
uri, run_id, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = open_store(uri, now="2026-12-02T00:00:00Z")
for start in range(first, last, 10):  # small batches, so the two writers interleave
    rows = Rows()
    for n in range(start, min(start + 10, last)):
        add_record(rows, {"platform": "weibo", "post_id": str(n), "url": f"https://weibo.com/1/{n}",
                          "author": {"id": str(n % 7)}, "metrics": {"likes": n}, "media": [
                              {"kind": "image", "key": f"p{n}", "url": "https://m.test/x.jpg"}]})
    store.write(rows, run_id=run_id, seen_at=f"2026-12-02T00:00:{start % 60:02d}Z")
store.close()
"""


def test_two_processes_writing_one_postgres_lose_and_duplicate_nothing(postgres_url: str) -> None:
    open_store(postgres_url, now=NOW).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, postgres_url, run_id, first, last], cwd=ROOT)
             for run_id, first, last in (("w1", "0", "300"), ("w2", "150", "450"))]
    assert [p.wait(120) for p in procs] == [0, 0]
    store = open_store(postgres_url, now=NOW)
    try:
        posts = store.table("posts", ["post_id", "likes"])
        assert sorted(int(p["post_id"]) for p in posts) == list(range(450))  # each once
        assert all(int(p["post_id"]) == p["likes"] for p in posts)
        history = store.select("SELECT post_id, COUNT(*) AS n FROM metrics_history GROUP BY post_id")
        assert sorted(int(h["post_id"]) for h in history) == list(range(450))
        assert {h["n"] for h in history} == {1}  # the second writer of a post changed no count
        assert len(store.table("media")) == 450 and len(store.table("post_media")) == 450
        assert len(store.table("authors")) == 7
    finally:
        store.close()


def test_refresh_keeps_young_posts_below_the_mark_and_walks_on_while_there_are_any(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from scrapy.utils.test import get_crawler

    from mediacrawler.contracts import REFRESH_ONLY, HighWaterMark
    from mediacrawler.items import Post, Source
    from mediacrawler.parsers._common import Page, iso_utc
    from mediacrawler.spiders.weibo import WeiboSpider

    def ago(days: float) -> str:
        return iso_utc(datetime.now(UTC) - timedelta(days=days))

    def post(post_id: str, created_at: str) -> Post:
        return Post(platform="weibo", post_id=post_id, url=f"https://weibo.com/1/{post_id}", author=None,
                    created_at=created_at, source=Source(spider="weibo", job="weibo-uid-1", page=1))

    settings = {"CHECKPOINT_DIR": str(tmp_path), "WEIBO_BASE_URL": "http://127.0.0.1:9"}
    spider = WeiboSpider.from_crawler(get_crawler(WeiboSpider, settings), uid="1",
                                      refresh="7")
    spider.job_state.mark = HighWaterMark(post_id="100")
    page = Page(posts=[post("120", ago(0.5)), post("100", ago(2)), post("90", ago(8))], incomplete={"95": {
        "created_at": ago(3)}})
    assert spider._apply_mark(page, 1) is False  # a young post below the mark: the walk goes on
    assert [(p.post_id, p.extra.get(REFRESH_ONLY)) for p in page.posts] == [("120", None), ("100", True)]
    assert list(page.incomplete) == ["95"]  # flagged when its chain ends
    mblog = {"id": "95", "bid": "x", "user": {"id": 1, "screen_name": "a"}, "text": "hi", "isLongText": True,
             "created_at": "Sat Nov 28 10:00:00 +0800 2026"}
    chain = spider.start_chain("95", mblog, page.posts[0].source)  # a request for its long text...
    assert not isinstance(chain, Post) and chain.meta["mc_chain"]["refresh"] is True
    chained = spider._advance_chain(spider.chain_type.from_json(chain.meta["mc_chain"]), page.posts[0].source,
                                    missing="test")
    assert isinstance(chained, Post) and chained.extra.get(REFRESH_ONLY) is True
    page = Page(posts=[post("80", ago(8)), post("70", ago(9))])
    assert spider._apply_mark(page, 2) is True and page.posts == []  # all older than 7 days: stop here


# --- Real crawls ----------------------------------------------------------------------------------------------

#: Columns that differ between two databases of the same crawls (times, run ids).
VOLATILE = {"first_seen_at", "last_seen_at", "metrics_changed_at", "metrics_run", "run_id", "seen_at",
            "fetched_at", "applied_at"}


def _crawl(sb: SandboxProcess, workdir: Path, name: str, uri: str, *args: str) -> list[dict[str, Any]]:
    workdir.mkdir(exist_ok=True)
    code, log = run(crawl_command("weibo", sb, workdir, "-a", f"uid={UID}", "-s", f"RECORDS_DB={uri}", *args,
                                  run=name), workdir, name=name)
    assert code == 0, log[-3000:]
    return records(workdir / name / "weibo" / f"{KEY}.jsonl")


def _contents(uri: str) -> dict[str, list[dict[str, Any]]]:
    store = open_store(uri, now=NOW)
    try:
        return {table: [{k: v for k, v in row.items() if k not in VOLATILE} for row in store.table(table)]
                for table in ("authors", "posts", "media", "post_media", "metrics_history", "comments",
                              "comment_media")}
    finally:
        store.close()


@pytest.mark.slow
def test_two_runs_with_grown_counts_into_sqlite_and_postgres(tmp_path: Path, sb: SandboxProcess,
                                                              postgres_url: str) -> None:
    sb.reset()
    world = build_world(weibo_users=(UID,), weibo_pages=PAGES, weibo_per_page=PER_PAGE).weibo
    timeline = world.timeline(UID)
    uris = {"sqlite": str(tmp_path / "sqlite" / "records.sqlite3"), "postgresql": postgres_url}
    for backend, uri in uris.items():
        first = _crawl(sb, tmp_path / backend, "run1", uri)
        assert sorted(r["post_id"] for r in first) == sorted(p.id for p in timeline)
    grown = control(sb, "weibo/engage", {"uid": UID, "likes": 7, "comments": 2})["counts"]
    before = len(sb.requests())
    for backend, uri in uris.items():
        # Everything is at or below the mark; -a refresh reads it all again for its counts.
        second = _crawl(sb, tmp_path / backend, "run2", uri, "-a", "refresh=36500")
        assert second == []  # no feed line
    assert [e for e in sb.requests()[before:] if e["path"].startswith("/media/")] == []  # nothing downloaded
    contents = {backend: _contents(uri) for backend, uri in uris.items()}
    assert contents["sqlite"] == contents["postgresql"]  # the same rows in both
    got = contents["sqlite"]
    posts = {p["post_id"]: p for p in got["posts"] if p["post_id"] in grown}
    assert sorted(posts) == sorted(p.id for p in timeline)  # one row per post
    for post_id, (reposts, comments, likes) in grown.items():
        assert (posts[post_id]["likes"], posts[post_id]["comments"], posts[post_id]["shares"]) == (
            likes, comments, reposts)
    history: dict[str, list[int]] = {}
    for row in got["metrics_history"]:
        history.setdefault(row["post_id"], []).append(row["likes"])
    for post_id, (_, _, likes) in grown.items():
        assert sorted(history[post_id]) == [likes - 7, likes]  # two runs, two history rows
    assert got["media"] and all(m["sha256"] and m["status"] == "downloaded" for m in got["media"])


@pytest.mark.slow
def test_dedupe_no_longer_hides_a_reseen_post_from_the_database(tmp_path: Path, sb: SandboxProcess,
                                                                redis_url: str) -> None:
    sb.reset()
    uri = str(tmp_path / "records.sqlite3")

    def crawl(name: str, *args: str) -> list[dict[str, Any]]:
        code, log = run(crawl_command("weibo", sb, tmp_path, "-a", f"uid={UID}", "-s", f"RECORDS_DB={uri}", *args,
                                      run=name), tmp_path, name=name, redis_url=redis_url)
        assert code == 0, log[-3000:]
        return records(tmp_path / name / "weibo" / f"{KEY}.jsonl")

    first = crawl("run1")
    grown = control(sb, "weibo/engage", {"uid": UID, "likes": 1})["counts"]
    assert crawl("run2", "-a", "full=true") == []  # every post dropped by dedupe (seen in Redis)...
    store = open_store(uri, now=NOW)
    try:
        likes = {p["post_id"]: p["likes"] for p in store.table("posts")}
        history = store.select("SELECT post_id, COUNT(*) AS n FROM metrics_history GROUP BY post_id")
    finally:
        store.close()
    assert sorted(r["post_id"] for r in first) == sorted(grown)
    assert {i: likes[i] for i in grown} == {i: c[2] for i, c in grown.items()}  # ...after the database saw it
    assert {h["post_id"]: h["n"] for h in history if h["post_id"] in grown} == dict.fromkeys(grown, 2)


def test_records_that_come_while_a_transaction_runs_go_together_in_the_next(tmp_path: Path) -> None:
    from scrapy.utils.test import get_crawler
    from twisted.internet.defer import Deferred

    from mediacrawler.pipelines.records import RecordsPipeline
    from mediacrawler.records.store import Written

    pipeline = RecordsPipeline.from_crawler(get_crawler(settings_dict={"CHECKPOINT_DIR": str(tmp_path)}))
    transactions: list[tuple[int, Deferred[Any]]] = []

    class Writer:  # the writer thread, held: each call is a transaction that ends when the test says
        def call(self, func: Any, entries: list[Any]) -> Deferred[Any]:
            transactions.append((len(entries), Deferred()))
            return transactions[-1][1]

    pipeline.writer = Writer()  # type: ignore[assignment]

    def enqueue(post_id: str) -> Deferred[None]:
        return pipeline._enqueue(_post(post_id, 1), media_only=False)

    first = [enqueue("1"), enqueue("2")]
    assert pipeline._scheduled is not None
    pipeline._scheduled.cancel()
    pipeline._flush()  # the reactor turn ends: its records in one transaction
    later = [enqueue(str(n)) for n in range(3, 6)]  # three more turns while it runs
    assert pipeline._scheduled is None and [n for n, _ in transactions] == [2]
    transactions[0][1].callback(Written(posts=2))
    assert [n for n, _ in transactions] == [2, 3]  # the next transaction holds all three
    assert all(d.called for d in first) and not any(d.called for d in later)
    transactions[1][1].callback(Written(posts=3))
    assert all(d.called for d in later) and pipeline.stats.get_value("records/posts") == 5
