"""``mediacrawler web``'s JSON API and pages in-process (Starlette's TestClient) over a database filled by a
sandbox crawl (tests/plugins/web_data.py): every endpoint and filter, media by SHA-256 with Range, subtitles as
WebVTT, comments as a thread, and hostile input (``../`` in ids and names, ``<script>`` text, a Range past the
end, a missing object, a media row whose path leaves the store, a form posted from another site)."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from mediacrawler.commands import web as web_command
from mediacrawler.commands.options import command_settings
from mediacrawler_sandbox.weibo import build_weibo_world
from mediacrawler.web.app import build_app
from mediacrawler.web.queries import comment_thread
from tests.plugins.web_data import (BVID, HOSTILE_AUTHOR, HOSTILE_ID, HOSTILE_TEXT, SHOWCASE_UID, THREAD_POST,
                                    WebData)

SECRET = "sekrit-token-4711"


@pytest.fixture(scope="module")
def client(web_data: WebData, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    pairs = [*web_data.settings, f"FACEBOOK_ACCESS_TOKEN={SECRET}"]
    app = build_app(command_settings(pairs), overrides=pairs, crawl_dir=str(tmp_path_factory.mktemp("crawls")))
    with TestClient(app) as c:
        yield c


def showcase_ids() -> list[str]:
    return [p.id for p in build_weibo_world().timeline(int(SHOWCASE_UID))]


def ids(answer: dict[str, Any]) -> list[str]:
    return [p["post_id"] for p in answer["posts"]]


def test_posts_lists_every_crawled_post_newest_first(client: TestClient) -> None:
    answer = client.get("/api/posts").json()
    assert answer["total"] == 5 and answer["page"] == 1 and answer["pages"] == 1
    assert sorted(ids(answer)) == sorted([*showcase_ids(), BVID, HOSTILE_ID])
    times = [p["created_at"] for p in answer["posts"]]
    assert times == sorted(times, reverse=True)
    first = {p["post_id"]: p["first_image"] for p in answer["posts"]}
    assert all(first[i] and first[i]["file"] == f"/files/{first[i]['sha256']}" for i in [*showcase_ids(), BVID])


@pytest.mark.parametrize(("query", "expected"), [
    ("platform=bilibili", [BVID]),
    (f"author={SHOWCASE_UID}", "showcase"),
    ("author=nobody", []),
    ("since=2026-11-27&until=2026-11-27", "showcase-27"),
    ("since=2026-11-28T00:00:00Z", "showcase-28"),
    ("until=2021-01-01", [HOSTILE_ID]),
    ("q=SANDBOX+VIDEO", [BVID]),  # case-insensitive
    ("q=100%25", []),  # % is a character, not a wildcard
    ("platform=weibo&q=script", [HOSTILE_ID]),
])
def test_filters(client: TestClient, query: str, expected: Any) -> None:
    days = {p.id: p.created_at.astimezone(UTC).strftime("%Y-%m-%d")
            for p in build_weibo_world().timeline(int(SHOWCASE_UID))}
    named = {"showcase": list(days), "showcase-27": [i for i, d in days.items() if d == "2026-11-27"],
             "showcase-28": [i for i, d in days.items() if d >= "2026-11-28"]}
    want = named.get(expected, expected) if isinstance(expected, str) else expected
    assert want or expected == [] or query.startswith("author=nobody")
    answer = client.get(f"/api/posts?{query}").json()
    assert sorted(ids(answer)) == sorted(want) and answer["total"] == len(want)


def test_author_name_filter_and_pagination(client: TestClient) -> None:
    name = client.get(f"/api/posts?author={SHOWCASE_UID}").json()["posts"][0]["author"]["name"]
    assert sorted(ids(client.get("/api/posts", params={"author": name}).json())) == sorted(showcase_ids())
    pages = [client.get(f"/api/posts?per_page=2&page={n}").json() for n in (1, 2, 3)]
    assert [len(p["posts"]) for p in pages] == [2, 2, 1] and {p["pages"] for p in pages} == {3}
    seen = [i for p in pages for i in ids(p)]
    assert len(set(seen)) == 5 and seen == ids(client.get("/api/posts").json())
    assert client.get("/api/posts?per_page=2&page=4").json()["posts"] == []


@pytest.mark.parametrize("query", ["since=yesterday", "page=0", "per_page=100000", "page=x"])
def test_unreadable_filters_are_400_with_the_reason(client: TestClient, query: str) -> None:
    answer = client.get(f"/api/posts?{query}")
    assert answer.status_code == 400 and query.split("=")[0] in answer.json()["error"]


def test_a_post_with_its_media_served_by_hash(client: TestClient) -> None:
    newest = showcase_ids()[0]
    post = client.get(f"/api/posts/weibo/{newest}").json()
    assert post["post_id"] == newest and post["author"]["id"] == SHOWCASE_UID
    assert len(post["history"]) == 1 and post["history"][0]["likes"] == post["counts"]["likes"]
    stored = [m for m in post["media"] if m["file"]]
    assert stored and len(stored) == len(post["media"])
    for asset in stored:
        body = client.get(asset["file"])
        assert body.status_code == 200 and hashlib.sha256(body.content).hexdigest() == asset["sha256"]
        assert body.headers["content-type"].startswith(asset["mime"]) and len(body.content) == asset["size"]
    assert {m["kind"] for m in stored} >= {"image", "video"}


def test_range_requests_and_past_the_end(client: TestClient) -> None:
    video = next(m for m in client.get(f"/api/posts/bilibili/{BVID}").json()["media"] if m["kind"] == "video")
    whole = client.get(video["file"]).content
    part = client.get(video["file"], headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == whole[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(whole)}"
    tail = client.get(video["file"], headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == whole[-10:]
    past = client.get(video["file"], headers={"Range": f"bytes={len(whole)}-"})
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{len(whole)}"


def test_subtitles_become_webvtt(client: TestClient) -> None:
    post = client.get(f"/api/posts/bilibili/{BVID}").json()
    subtitles = [m for m in post["media"] if m["kind"] == "subtitle"]
    assert len(subtitles) == 2 and all(m["vtt"] for m in subtitles)
    vtt = client.get(subtitles[0]["vtt"])
    assert vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
    lines = vtt.text.splitlines()
    assert lines[0] == "WEBVTT" and any(" --> " in line and "." in line and "," not in line for line in lines)
    assert "<" not in vtt.text.replace("-->", "")  # cue text escaped: markup in a subtitle is shown as text
    html = client.get(f"/posts/bilibili/{BVID}").text
    assert html.count('<track kind="subtitles"') == 2 and "<video class=\"player\"" in html


def test_comments_are_a_thread(client: TestClient) -> None:
    post = client.get(f"/api/posts/weibo/{THREAD_POST}").json()
    assert post["comment_count"] == 4

    def shape(nodes: list[dict[str, Any]]) -> list[Any]:
        return [(n["comment_id"], shape(n["replies"])) for n in nodes]

    assert shape(post["comments"]) == [("1", [("11", [("111", [])])]), ("2", [])]
    assert post["comments"][0]["pinned"] is True
    html = client.get(f"/posts/weibo/{THREAD_POST}").text
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html and "<b>not bold</b>" not in html


def test_a_thread_with_a_loop_of_parents_and_a_missing_parent_is_bounded() -> None:
    rows = [{"comment_id": "a", "parent_id": "b", "root_id": None}, {"comment_id": "b", "parent_id": "a"},
            {"comment_id": "c", "parent_id": "gone", "root_id": "gone"}]
    rows += [{"comment_id": f"d{n}", "parent_id": f"d{n - 1}" if n else None} for n in range(50)]
    top = comment_thread(rows)
    flat, stack, depth = [], [(n, 1) for n in top], 0
    while stack:
        node, level = stack.pop()
        flat.append(node["comment_id"])
        depth = max(depth, level)
        stack += [(r, level + 1) for r in node["replies"]]
    assert sorted(flat) == sorted(r["comment_id"] for r in rows) and depth <= 12


def test_the_author_page(client: TestClient) -> None:
    author = client.get(f"/api/authors/weibo/{SHOWCASE_UID}").json()
    assert author["author"]["author_id"] == SHOWCASE_UID and sorted(ids(author)) == sorted(showcase_ids())
    assert sum(m["posts"] for m in author["months"]) == 3 and author["months"][0]["month"] == "2026-11"
    assert client.get(f"/authors/weibo/{SHOWCASE_UID}").status_code == 200


def test_script_text_is_escaped_everywhere(client: TestClient) -> None:
    assert client.get(f"/api/posts/weibo/{HOSTILE_ID}").json()["text"] == HOSTILE_TEXT  # JSON: the text as is
    for page in ("/", f"/posts/weibo/{HOSTILE_ID}", "/authors/weibo/..%2F..%2Fetc", "/?q=%3Cscript%3E"):
        html = client.get(page).text
        assert "<script>document" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
        assert "&lt;script&gt;" in html or page.startswith("/authors"), page
        assert "javascript:" not in html  # a URL that is not http(s) is never a link
    assert HOSTILE_AUTHOR in client.get("/authors/weibo/..%2F..%2Fetc").text


@pytest.mark.parametrize("path", [
    "/api/posts/weibo/..%2F..%2Fetc%2Fpasswd", "/api/posts/..%2F..%2F/1", "/posts/weibo/..%2F..%2Fsettings.py",
    "/api/authors/weibo/..%2F..%2F", "/files/..%2F..%2F..%2Fetc%2Fpasswd", "/files/" + "0" * 64,
    "/files/" + "f" * 64, "/files/" + "0" * 64 + ".vtt", "/files/..%2Fobjects", "/api/crawls/..%2F..%2Frecords",
    "/crawls/" + "a" * 32, "/static/..%2F..%2Fapp.py",
])
def test_hostile_and_missing_paths_are_404(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404, (path, answer.text[:200])
    assert "root:" not in answer.text and "import" not in answer.text


def test_a_symlink_planted_in_the_store_is_not_followed(client: TestClient, web_data: WebData,
                                                       tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("outside the store")
    sha = "ab" * 32
    folder = web_data.root / "files" / "objects" / sha[:2] / sha[2:4]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{sha}.jpg").symlink_to(outside)
    try:
        assert client.get(f"/files/{sha}").status_code == 404
    finally:
        (folder / f"{sha}.jpg").unlink()


def test_a_document_object_is_never_a_page_of_the_site(client: TestClient) -> None:
    media = client.get(f"/api/posts/bilibili/{BVID}").json()["media"]
    subtitle = next(m for m in media if m["kind"] == "subtitle")
    answer = client.get(subtitle["file"])
    assert answer.status_code == 200 and answer.headers["content-disposition"] == "attachment"
    assert answer.headers["content-security-policy"] == "sandbox"


def test_jobs_and_the_start_api(client: TestClient, web_data: WebData) -> None:
    jobs = {j["job"]: j for j in client.get("/api/jobs").json()["jobs"]}
    mark = jobs[f"weibo-uid-{SHOWCASE_UID}"]["mark"]
    assert mark["post_id"] == showcase_ids()[0]
    assert client.get("/api/jobs").json()["distributed"] is None

    bad = client.post("/api/crawls", json={"spider": "weibo", "args": {"uid": "abc"}})
    assert bad.status_code == 400
    assert bad.json()["errors"] == {"uid": "must be a numeric Weibo user id, e.g. 7365120894"}
    assert client.post("/api/crawls", json={"spider": "weibo", "args": {}}).json()["errors"] == {
        "": "give exactly one of -a uid=<digits>, -a keyword=<text> or -a post=<mid, bid or link>[,…]"}
    assert "spider" in client.post("/api/crawls", json={"spider": "../sh", "args": {}}).json()["errors"]
    not_json = client.post("/api/crawls", content=b"[", headers={"content-type": "application/json"})
    assert not_json.status_code == 400
    started = client.post("/api/crawls", json={"spider": "weibo", "args": {"uid": SHOWCASE_UID, "full": "true"}})
    assert started.status_code == 201
    crawl_id = started.json()["crawl"]
    deadline = time.monotonic() + 150
    crawl = client.get(f"/api/crawls/{crawl_id}").json()
    while crawl["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
        crawl = client.get(f"/api/crawls/{crawl_id}").json()
    crawl = client.get(f"/api/crawls/{crawl_id}?log=1").json()
    assert crawl["state"] == "finished", crawl["log"][-3000:]
    assert crawl["job"] == f"weibo-uid-{SHOWCASE_UID}" and crawl["args"] == {"uid": SHOWCASE_UID, "full": "true"}
    assert crawl["progress"]["source"] == "textfile" and crawl["progress"]["pages"] >= 1
    figures = crawl["progress"]
    assert figures["posts_per_minute"] == pytest.approx(figures["posts"] / figures["minutes"], rel=0.01, abs=0.1)
    assert [c["id"] for c in client.get("/api/crawls").json()["crawls"]] == [crawl_id]
    # Its run (the runs table) is the job's last one, and links to the crawl's log: the page started it.
    last = {j["job"]: j for j in client.get("/api/jobs").json()["jobs"]}[crawl["job"]]["last_run"]
    assert (last["crawl"], last["pid"], last["state"], last["reason"]) == (crawl_id, crawl["pid"], "finished",
                                                                          "finished")
    assert last["progress"]["posts"] == figures["posts"] and last["progress"]["pages"] == figures["pages"]
    assert f'<a href="/crawls/{crawl_id}" class="state finished">' in client.get("/jobs").text
    # No credential is ever rendered: not the -s value given to the app, not in the log it shows.
    for text in (client.get("/api/crawls").text, client.get(f"/crawls/{crawl_id}").text, client.get("/jobs").text,
                 client.get(f"/api/crawls/{crawl_id}?log=1").text):
        assert SECRET not in text
    assert "FACEBOOK_ACCESS_TOKEN=***" in client.get("/api/crawls").text


def test_the_start_form_says_what_is_wrong_beside_the_field(client: TestClient) -> None:
    answer = client.post("/start", data={"spider": "bilibili", "arg:mid": "12x", "arg:max_pages": "0"})
    assert answer.status_code == 400
    assert 'data-field="mid">must be a numeric' in answer.text
    assert 'data-field="max_pages">Input should be greater than or equal to 1' in answer.text
    assert client.post("/start", data={"spider": "weibo", "arg:uid": "1"},
                       headers={"origin": "https://elsewhere.example"}).status_code == 403


def test_the_start_form_takes_a_pasted_link(client: TestClient) -> None:
    answer = client.post("/start", data={"link": "https://example.com/nothing"})
    assert answer.status_code == 400 and 'data-field="link">https://example.com/nothing: not a link of' in answer.text
    bad = client.post("/api/crawls", json={"link": "ftp://weibo.com/1/2"})
    assert bad.status_code == 400 and "not an http(s) link" in bad.json()["errors"]["link"]
    # A link routed as `mediacrawler get` routes it: its spider and target, then the spider's own checks.
    answer = client.post("/start", data={"link": f"https://weibo.com/u/{SHOWCASE_UID}", "arg:max_pages": "0"})
    assert answer.status_code == 400 and 'data-field="max_pages">' in answer.text


def test_basic_auth(web_data: WebData, tmp_path: Path) -> None:
    app = build_app(command_settings(web_data.settings), overrides=web_data.settings, auth="ann:pw:with:colons",
                    crawl_dir=str(tmp_path))
    with TestClient(app) as c:
        assert c.get("/api/posts").status_code == 401
        assert c.get("/files/" + "0" * 64).status_code == 401
        assert c.get("/api/posts", auth=("ann", "wrong")).status_code == 401
        assert c.get("/api/posts", auth=("ann", "pw:with:colons")).status_code == 200


def test_another_address_requires_web_auth(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("WEB_AUTH", raising=False)
    assert web_command.main(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert "set WEB_AUTH=user:password" in capsys.readouterr().err
    monkeypatch.setenv("WEB_AUTH", "nocolon")
    assert web_command.main(["--host", "0.0.0.0"]) == 2
    assert "WEB_AUTH must be user:password" in capsys.readouterr().err
    assert web_command.auth_problem("127.0.0.1", None) is None and web_command.auth_problem("::1", None) is None
    assert web_command.auth_problem("10.0.0.1", "a:b") is None


def test_postgresql_answers_as_sqlite(client: TestClient, web_data: WebData, postgres_url: str,
                                      tmp_path: Path) -> None:
    import psycopg

    from mediacrawler.records.store import PRIMARY_KEYS, open_store

    # The same rows in both: every table of the SQLite database copied into a PostgreSQL one of the same schema.
    sqlite, pg_store = open_store(web_data.records_db, now="2026-12-01T00:00:00Z"), open_store(
        postgres_url, now="2026-12-01T00:00:00Z")
    pg_store.close()
    try:
        with psycopg.connect(postgres_url) as conn:
            for table in PRIMARY_KEYS:
                if table == "schema_version":
                    continue
                for row in sqlite.table(table):
                    conn.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
                                 list(row.values()))
    finally:
        sqlite.close()
    pairs = [*web_data.settings, f"RECORDS_DB={postgres_url}"]
    with TestClient(build_app(command_settings(pairs), overrides=pairs, crawl_dir=str(tmp_path))) as pg:
        for path in ("/api/posts", "/api/posts?q=SANDBOX&per_page=1", f"/api/posts?author={SHOWCASE_UID}",
                     "/api/posts?since=2026-11-27&until=2026-11-27", f"/api/posts/weibo/{THREAD_POST}",
                     f"/api/posts/bilibili/{BVID}", f"/api/authors/weibo/{SHOWCASE_UID}", "/api/posts?q=100%25"):
            mine, theirs = client.get(path), pg.get(path)
            assert mine.status_code == theirs.status_code == 200
            assert theirs.json() == mine.json(), path
        first = pg.get("/api/posts").json()["posts"][0]["first_image"]
        assert pg.get(f"/files/{first['sha256']}").status_code == 200


def test_with_redis_the_form_queues_a_job(web_data: WebData, redis_url: str, tmp_path: Path) -> None:
    from mediacrawler.distributed.jobs import JobBoard

    pairs = [*web_data.settings, f"REDIS_URL={redis_url}"]
    settings = command_settings(pairs)
    with TestClient(build_app(settings, overrides=pairs, crawl_dir=str(tmp_path))) as c:
        answer = c.post("/api/crawls", json={"spider": "weibo", "args": {"uid": "7365120894", "max_pages": "1"}})
        assert answer.status_code == 201 and answer.json() == {"queued": "weibo-uid-7365120894"}
        again = c.post("/api/crawls", json={"spider": "weibo", "args": {"uid": "7365120894"}})
        assert again.status_code == 400 and "already queued" in again.json()["errors"][""]
        assert c.get("/api/jobs").json()["distributed"]["available"] is True
        assert c.get("/api/crawls").json() == {"crawls": []}  # nothing runs here: a worker takes it
    job = JobBoard(settings, "weibo", worker="test").take()
    assert job is not None and job.key == "weibo-uid-7365120894" and job.args == {"uid": "7365120894",
                                                                                   "max_pages": "1"}


def test_a_running_crawl_shows_its_live_figures(sandbox_factory: Any, tmp_path: Path) -> None:
    from tests.plugins.web_data import crawl_settings

    slow = sandbox_factory(latency_ms=200)  # every answer 200 ms late: the crawl runs for seconds
    pairs = crawl_settings(tmp_path, slow)
    with TestClient(build_app(command_settings(pairs), overrides=pairs, crawl_dir=str(tmp_path / "c"))) as c:
        crawl_id = c.post("/api/crawls", json={"spider": "weibo", "args": {"uid": "1669879400", "max_pages": "2"}}
                          ).json()["crawl"]
        live, deadline = [], time.monotonic() + 150
        crawl = c.get(f"/api/crawls/{crawl_id}").json()
        while crawl["state"] == "running" and time.monotonic() < deadline:
            if crawl["progress"]:
                live.append(crawl["progress"])
            time.sleep(0.2)
            crawl = c.get(f"/api/crawls/{crawl_id}").json()
        assert crawl["state"] == "finished"
        assert live and {p["source"] for p in live} == {"endpoint"}
        # 1 while the crawl runs; 0 from spider_closed until the endpoint shuts down (up to ~0.5 s in which the
        # process still runs): once 0, never 1 again.
        ups = [p["up"] for p in live]
        assert ups[0] == 1 and ups == sorted(ups, reverse=True) and set(ups) <= {0, 1}
        posts = [p["posts"] for p in live]
        assert posts == sorted(posts) and posts[-1] <= crawl["progress"]["posts"] == 20


def test_a_records_database_that_cannot_be_opened_is_one_line(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEB_AUTH", raising=False)
    code = web_command.main(["--port", "0", "-s", "RECORDS_DB=postgresql://ann:pw-4711@127.0.0.1:1/media",
                             "-s", "RECORDS_CONNECT_TIMEOUT=2"])
    err = capsys.readouterr().err
    assert code == 2 and "RECORDS_DB=postgresql://ann:***@127.0.0.1:1/media cannot be opened" in err
    assert "pw-4711" not in err and len(err.strip().splitlines()) == 1


def test_srt_to_vtt_and_shown_settings() -> None:
    from mediacrawler.web.crawls import shown_setting
    from mediacrawler.web.files import srt_to_vtt

    srt = "\ufeff1\r\n00:00:01,500 --> 00:00:02,000\r\nA & B <i>\r\n\r\n2\r\n01:02:03,004 --> 01:02:04,005\r\nend\r\n"
    assert srt_to_vtt(srt) == ("WEBVTT\n\n1\n00:00:01.500 --> 00:00:02.000\nA &amp; B &lt;i&gt;\n\n2\n"
                               "01:02:03.004 --> 01:02:04.005\nend\n")
    assert shown_setting("WEIBO_COOKIE=SUB=abc") == "WEIBO_COOKIE=***"
    assert shown_setting("REDIS_URL=redis://:pw@h:6379/0") == "REDIS_URL=redis://:***@h:6379/0"
    assert shown_setting("FILES_STORE=/srv/files") == "FILES_STORE=/srv/files"
