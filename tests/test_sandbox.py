"""The platform sandbox over real HTTP: Weibo shapes and escaping, paging, faults, media semantics, the log.

Everything runs against the subprocess started by the ``sandbox`` fixtures; expectations come from the pure world
model (:mod:`mediacrawler_sandbox.weibo`) and media generators, never from the server itself.
"""

from __future__ import annotations

import http.client
import io
import json
import re
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit

import av
import pytest
from PIL import Image

from mediacrawler_sandbox import media
from mediacrawler_sandbox.process import SandboxProcess
from mediacrawler_sandbox.weibo import build_weibo_world, count_value, mid_to_bid
from mediacrawler_sandbox.weibo_api import END_OF_LIST

UID = 7365120894
OTHER = 1669879400
REFERER = {"Referer": "https://m.weibo.cn/"}


@pytest.fixture(scope="module")
def world():  # type: ignore[no-untyped-def]
    return build_weibo_world(seed=1, users=(UID, OTHER), pages=5, per_page=10)


def fetch(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, Any, bytes]:
    """(status, headers, body) without raising on 4xx/5xx."""
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def get_json(url: str) -> Any:
    status, headers, body = fetch(url)
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    return json.loads(body)


def raw_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes, bool]:
    """GET with http.client, tolerating a dropped connection: (status, headers, body received, complete?)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {})
        response = conn.getresponse()
        try:
            return response.status, dict(response.getheaders()), response.read(), True
        except http.client.IncompleteRead as exc:
            return response.status, dict(response.getheaders()), exc.partial, False
    finally:
        conn.close()


def timeline_url(sb: SandboxProcess, uid: int = UID, **params: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"containerid": f"107603{uid}", **params}.items())
    return f"{sb.weibo_url}/api/container/getIndex?{query}"


def mblogs(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Posts of a getIndex page in order, from top-level cards and card_group nesting."""
    out = []
    for card in payload["data"]["cards"]:
        for item in [card, *card.get("card_group", [])]:
            if item.get("card_type") == 9 and "mblog" in item:
                out.append(item["mblog"])
    return out


# ---------------------------------------------------------------------------------------------- process


def test_cli_prints_the_url_first_and_exits_0_on_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-u", "-m", "mediacrawler_sandbox", "--host", "127.0.0.1",
                             "--port", "0", "--weibo-pages", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)  # bounded wait for the first line
        assert ready, "no URL line within 30 s"
        line = proc.stdout.readline().decode()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+\n", line)
        assert fetch(line.strip() + "/_sandbox/stats")[0] == 200
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_fixture_url_and_info(sandbox: SandboxProcess) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", sandbox.url)
    assert sandbox.weibo_url == sandbox.url + "/weibo"
    info = sandbox.info()
    assert info["seed"] == 1 and info["weibo_users"] == [UID, OTHER] and info["weibo_pages"] == 5


def test_the_root_lists_every_mount_the_settings_and_ids_that_exist(sandbox: SandboxProcess) -> None:
    status, headers, body = fetch(sandbox.url + "/")
    text = body.decode("utf-8")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for mount in ("/weibo", "/bilibili", "/facebook/v19.0", "/xhs", "/douyin", "/media", "/hostile", "/_sandbox"):
        assert f"  {mount} " in text
    assert f"-s WEIBO_BASE_URL={sandbox.url}/weibo" in text and f"-s DOUYIN_SHORT_URL={sandbox.url}/douyin/v" in text
    assert f"uid=<one of {UID},{OTHER}>" in text and "FACEBOOK_ACCESS_TOKEN=sandbox-token" in text
    assert "docs/sandbox.md" in text
    # Every id the page offers answers: the Weibo users it names serve a first page.
    status, _, page = fetch(f"{sandbox.url}/weibo/api/container/getIndex?containerid=107603{UID}&page=1")
    assert status == 200 and json.loads(page)["ok"] == 1


# ---------------------------------------------------------------------------------------------- world model


def test_world_is_deterministic_and_has_every_feature(world: Any) -> None:
    again = build_weibo_world(seed=1, users=(UID, OTHER), pages=5, per_page=10)
    assert [p.id for p in again.timeline(UID)] == [p.id for p in world.timeline(UID)]
    assert again.pics == world.pics
    other_seed = build_weibo_world(seed=2, users=(UID, OTHER), pages=5, per_page=10)
    assert {p.id for p in other_seed.timeline(UID)}.isdisjoint(p.id for p in world.timeline(UID))
    posts = world.timeline(UID)
    assert len(posts) == 50 and len(world.timeline(OTHER)) == 50
    assert [p.created_at for p in posts] == sorted((p.created_at for p in posts), reverse=True)
    assert all(len(p.id) == 16 and p.bid == mid_to_bid(p.id) and len(p.bid) == 9 for p in posts)
    assert sum(p.is_long_text for p in posts) == 10 and sum(p.is_repost for p in posts) == 10
    assert any(world.posts[p.retweeted_id].deleted for p in posts if p.retweeted_id)
    assert len(world.duplicate_pids) == 3 and not world.bad_pids
    pids = world.timeline_pids(UID)
    assert world.distinct_contents(pids) == len(pids) - 3
    formats = {world.pics[p].ext for p in pids}
    assert "jpg" in formats and formats & {"png", "webp"}
    bad = build_weibo_world(seed=1, users=(UID, OTHER), pages=5, per_page=10, bad_media=True)
    assert [p.id for p in bad.timeline(UID)] == [p.id for p in posts]
    assert sorted(bad.bad_pids.values()) == ["bomb", "html", "truncated"]
    assert count_value("12.6万") == 126000 and count_value("1万+") == 10000 and count_value("100万+") == 10**6


# ---------------------------------------------------------------------------------------------- weibo API


def test_timeline_envelope_and_php_escaping(fresh_sandbox: SandboxProcess, world: Any) -> None:
    status, headers, body = fetch(timeline_url(fresh_sandbox, page=1))
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    assert body.isascii() and b"\\/" in body and b"\\u" in body
    assert re.search(rb"(?<!\\)/", body) is None  # every slash escaped
    payload = json.loads(body)
    info = payload["data"]["cardlistInfo"]
    assert payload["ok"] == 1 and info["containerid"] == f"107603{UID}" and info["v_p"] == 42
    assert info["page"] == 1 and info["total"] != 50  # unreliable on purpose
    assert info["since_id"] == int(world.timeline(UID)[9].id)
    types = [c["card_type"] for c in payload["data"]["cards"]]
    assert types.count(11) >= 1 and len([t for t in types if t not in (9, 11)]) >= 3
    nested = [c for c in payload["data"]["cards"] if c["card_type"] == 11][0]["card_group"]
    assert {c["card_type"] for c in nested} >= {9, 4}
    assert [m["id"] for m in mblogs(payload)] == [p.id for p in world.page(UID, 1)]
    media_url = next(m["pics"][0]["url"] for m in mblogs(payload) if m.get("pics"))
    assert media_url.startswith(fresh_sandbox.url + "/media/weibo/orj360/")


def test_page_paging_since_id_paging_and_end_of_list(fresh_sandbox: SandboxProcess, world: Any) -> None:
    by_page = []
    for page in range(1, 7):
        payload = get_json(timeline_url(fresh_sandbox, page=page))
        if payload["ok"] != 1:
            assert page == 6 and payload == END_OF_LIST
            break
        by_page += [m["id"] for m in mblogs(payload)]
    assert by_page == [p.id for p in world.timeline(UID)]
    by_cursor, params = [], {}
    for _ in range(10):
        payload = get_json(timeline_url(fresh_sandbox, uid=UID, **params))
        if payload["ok"] != 1:
            assert payload == {"ok": 0, "msg": "这里还没有内容", "data": {"cards": []}}
            break
        by_cursor += [m["id"] for m in mblogs(payload)]
        params = {"since_id": payload["data"]["cardlistInfo"]["since_id"]}
    assert by_cursor == by_page
    second = get_json(f"{fresh_sandbox.weibo_url}/api/container/getIndex?containerid=230413{UID}&page=2")
    assert [m["id"] for m in mblogs(second)] == [p.id for p in world.page(UID, 2)]


def test_mblog_fields_match_m_weibo_cn(fresh_sandbox: SandboxProcess, world: Any) -> None:
    all_mblogs = []
    for page in range(1, 6):
        all_mblogs += mblogs(get_json(timeline_url(fresh_sandbox, page=page)))
    for m in all_mblogs:
        assert re.fullmatch(r"[A-Z][a-z]{2} [A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \+0800 \d{4}", m["created_at"])
        assert m["mid"] == m["id"] and isinstance(m["user"]["id"], int) and m["user"]["screen_name"]
    counts = [m[k] for m in all_mblogs for k in ("reposts_count", "comments_count", "attitudes_count")]
    assert any(isinstance(c, int) for c in counts) and any(isinstance(c, str) for c in counts)
    text = "".join(m["text"] for m in all_mblogs)
    assert "<br />" in text and 'class="url-icon"' in text and "href='/n/" in text and "surl-text\">#" in text
    long_ones = [m for m in all_mblogs if m["isLongText"]]
    assert long_ones and all(re.search(r'\.\.\.<a href="/status/\d+">全文</a>$', m["text"]) for m in long_ones)
    videos = [m["page_info"] for m in all_mblogs if m.get("page_info", {}).get("type") == "video"]
    assert videos and all(v["page_pic"]["url"] for v in videos)
    fields = ("stream_url", "stream_url_hd", "mp4_720p_mp4", "mp4_hd_url", "mp4_sd_url")
    assert any(v["media_info"][f] == "" for v in videos for f in fields)
    assert any(m.get("page_info", {}).get("type") == "webpage" for m in all_mblogs)
    pics = [p for m in all_mblogs for p in m.get("pics", [])]
    assert all(p["size"] == "orj360" and p["large"]["size"] == "large" and "/large/" in p["large"]["url"]
               and {"width", "height"} <= set(p["geo"]) for p in pics)
    reposts = [m for m in all_mblogs if "retweeted_status" in m]
    deleted = [m["retweeted_status"] for m in reposts if m["retweeted_status"].get("deleted") == "1"]
    assert len(reposts) == 10 and deleted and all(d["user"] is None and d["created_at"] == "" for d in deleted)
    assert all("visible" in d and d["text"].startswith("抱歉，此微博已被作者删除") for d in deleted)


def test_extend_gives_the_full_text(fresh_sandbox: SandboxProcess, world: Any) -> None:
    post = next(p for p in world.timeline(UID) if p.is_long_text)
    payload = get_json(f"{fresh_sandbox.weibo_url}/statuses/extend?id={post.id}")
    assert payload["ok"] == 1 and payload["data"]["ok"] == 1
    assert payload["data"]["longTextContent"] == post.text
    assert payload["data"]["attitudes_count"] == post.attitudes_count
    assert len(post.text) > len(post.truncated_text())


def test_search_pages_and_grouping(fresh_sandbox: SandboxProcess, world: Any) -> None:
    keyword = "猫"
    containerid = quote(f"100103type=1&q={keyword}", safe="")
    seen = []
    for page in range(1, 6):
        url = f"{fresh_sandbox.weibo_url}/api/container/getIndex?containerid={containerid}" \
              f"&page_type=searchall&page={page}"
        payload = get_json(url)
        if payload["ok"] != 1:
            assert payload == END_OF_LIST and page == world.search_pages + 1
            break
        cards = payload["data"]["cards"]
        top = sum(c["card_type"] == 9 for c in cards)
        assert top < len(mblogs(payload)) / 2  # mostly nested in card_type 11 groups
        assert payload["data"]["cardlistInfo"]["containerid"] == f"100103type=1&q={keyword}"
        seen += [m["id"] for m in mblogs(payload)]
    assert seen == [p.id for p in world.search(keyword)]
    assert len({world.posts[i].user_id for i in seen}) >= 3


# ---------------------------------------------------------------------------------------------- weibo faults


def test_weibo_fault_answers(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    sb.set_faults(weibo_api=[{"kind": "errno", "page": 2, "times": 2}, {"kind": "418", "page": 3, "times": 1},
                             {"kind": "432", "page": 4, "times": 1}, {"kind": "429", "page": 5, "times": 1},
                             {"kind": "login", "page": 1, "uid": OTHER}])
    for _ in range(2):
        assert get_json(timeline_url(sb, page=2)) == {"ok": 0, "errno": "100005", "msg": "请求过于频繁，歇歇吧"}
    assert get_json(timeline_url(sb, page=2))["ok"] == 1
    assert fetch(timeline_url(sb, page=3))[0] == 418 and fetch(timeline_url(sb, page=3))[0] == 200
    assert fetch(timeline_url(sb, page=4))[0] == 432
    status, headers, _ = fetch(timeline_url(sb, page=5))
    assert status == 429 and headers["Retry-After"] == "1"
    login = get_json(timeline_url(sb, uid=OTHER, page=1))
    assert login["ok"] == -100
    assert login["url"].startswith("https://passport.weibo.cn/signin/welcome?entry=mweibo&r=")
    assert get_json(timeline_url(sb, page=1))["ok"] == 1  # other uid unaffected
    raw_body = fetch(timeline_url(sb, page=2))[2]
    assert b"\\u8bf7" not in raw_body  # the errno budget is spent
    sb.set_faults(weibo_5xx_rate=1.0)
    assert fetch(timeline_url(sb, page=1))[0] == 503
    sb.set_faults(weibo_5xx_rate=0.5)
    statuses = [fetch(timeline_url(sb, page=1))[0] for _ in range(20)]
    assert 0 < statuses.count(503) < 20
    sb.reset()
    sb.set_faults(weibo_5xx_rate=0.5)
    assert [fetch(timeline_url(sb, page=1))[0] for _ in range(20)] == statuses  # seeded: same sequence
    logged = [(r["status"], r["query"]) for r in sb.requests()]
    assert len(logged) == 20 and logged[0][1] == f"containerid=107603{UID}&page=1"
    status, _, body = fetch(sb.url + "/_sandbox/faults", method="POST")  # empty body: no change
    assert status == 200
    with pytest.raises(Exception, match="unknown fault knob"):
        sb.set_faults(no_such_knob=1)


def test_latency_knob(fresh_sandbox: SandboxProcess) -> None:
    fresh_sandbox.set_faults(latency_ms=300)
    started = time.monotonic()
    assert fetch(timeline_url(fresh_sandbox, page=1))[0] == 200
    assert 0.3 <= time.monotonic() - started < 5
    started = time.monotonic()
    assert fetch(fresh_sandbox.url + "/_sandbox/stats")[0] == 200  # control endpoints are never delayed
    assert time.monotonic() - started < 0.3


# ---------------------------------------------------------------------------------------------- media


def test_weibo_images_need_a_referer_and_decode(fresh_sandbox: SandboxProcess, world: Any) -> None:
    pid = world.timeline_pids(UID)[0]
    pic = world.pics[pid]
    url = fresh_sandbox.url + pic.path("large")
    assert fetch(url)[0] == 403
    status, headers, body = fetch(url, REFERER)
    assert status == 200 and headers["Content-Type"] == "image/jpeg"
    assert Image.open(io.BytesIO(body)).size == (pic.width, pic.height)
    assert body == media.image_bytes(f"weibo:{pid}", "jpg", pic.width, pic.height)  # computable by tests
    thumb = fetch(fresh_sandbox.url + pic.path("orj360"), REFERER)[2]
    assert Image.open(io.BytesIO(thumb)).size == pic.thumb_size
    for ext in ("png", "webp"):
        alt = next((p for p in world.pics.values() if p.ext == ext and not p.bad), None)
        if alt is not None:
            status, headers, body = fetch(fresh_sandbox.url + alt.path("large"), REFERER)
            assert headers["Content-Type"] == f"image/{ext}" and Image.open(io.BytesIO(body)).format == ext.upper()
    dup, canonical = next(iter(world.duplicate_pids.items()))
    assert dup != canonical
    assert fetch(fresh_sandbox.url + world.pics[dup].path("large"), REFERER)[2] == \
        fetch(fresh_sandbox.url + world.pics[canonical].path("large"), REFERER)[2]
    one, two = fetch(fresh_sandbox.url + "/media/img/1.jpg")[2], fetch(fresh_sandbox.url + "/media/img/2.jpg")[2]
    assert one != two and Image.open(io.BytesIO(one)).format == "JPEG"
    log = fresh_sandbox.requests()
    assert [r["status"] for r in log[:2]] == [403, 200] and log[1]["referer"] == REFERER["Referer"]


def test_video_is_a_real_h264_aac_mp4(fresh_sandbox: SandboxProcess, world: Any) -> None:
    # Each Weibo quality is the sandbox video's progressive MP4 at its declared height: 720 → 720p, hd → 480p,
    # sd → 360p (mediacrawler_sandbox.video, 4 s).
    video = next(v for v in world.videos.values() if len(v.qualities) > 1)
    status, headers, body = fetch(fresh_sandbox.url + video.best_path(), REFERER)
    assert status == 200 and headers["Content-Type"] == "video/mp4"
    heights = {"720": 720, "hd": 480, "sd": 360}
    for quality in video.qualities:
        data = body if video.path(quality) == video.best_path() else fetch(fresh_sandbox.url + video.path(quality),
                                                                            REFERER)[2]
        with av.open(io.BytesIO(data)) as container:
            kinds = {s.type: s.codec_context.name for s in container.streams}
            assert kinds == {"video": "h264", "audio": "aac"}
            assert container.streams.video[0].codec_context.height == heights[quality]
            assert 3.9 < container.duration / 1e6 < 4.1
    other = fetch(fresh_sandbox.url + video.path("sd"), REFERER)[2]
    assert other != body


def test_range_if_range_head_and_etag(fresh_sandbox: SandboxProcess) -> None:
    sb, size = fresh_sandbox, 1000
    url = f"{sb.url}/media/blob/alpha?size={size}"
    expected = media.blob_read("alpha", 0, size)
    status, headers, body = fetch(url)
    assert status == 200 and body == expected and headers["Content-Length"] == str(size)
    assert headers["Accept-Ranges"] == "bytes" and headers["Last-Modified"]
    etag = headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    for rng, (a, b) in {"bytes=10-19": (10, 19), "bytes=990-": (990, 999), "bytes=-5": (995, 999),
                        "bytes=900-5000": (900, 999)}.items():
        status, headers, body = fetch(url, {"Range": rng})
        assert status == 206 and body == expected[a : b + 1]
        assert headers["Content-Range"] == f"bytes {a}-{b}/{size}"
    status, headers, body = fetch(url, {"Range": "bytes=1000-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{size}" and body == b""
    assert fetch(url, {"Range": "bytes=0-9", "If-Range": etag})[0] == 206
    status, _, body = fetch(url, {"Range": "bytes=0-9", "If-Range": '"stale"'})
    assert status == 200 and body == expected
    status, headers, body = fetch(url, method="HEAD")
    assert status == 200 and body == b"" and headers["Content-Length"] == str(size) and headers["ETag"] == etag
    sb.set_faults(media_etag_generation=1)
    status, headers, body = fetch(url, {"Range": "bytes=0-9", "If-Range": etag})
    assert status == 200 and headers["ETag"] != etag and body == media.blob_read("alpha", 0, size, 1)
    sb.set_faults(media_ignore_range=True)
    status, headers, body = fetch(url, {"Range": "bytes=0-9"})
    assert status == 200 and len(body) == size
    log = sb.requests()
    assert log[1]["range"] == "bytes=10-19" and log[1]["status"] == 206 and log[1]["bytes"] == 10
    assert any(r["if_range"] == etag for r in log)
    assert [r for r in log if r["method"] == "HEAD"][0]["bytes"] == 0


def test_media_cut_and_error_knobs(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    url = f"{sb.url}/media/blob/cut?size=400000"  # > one write: goes through the streaming producer
    sb.set_faults(media_cut_paths={"/media/blob/cut": 1}, media_cut_fraction=0.25)
    status, headers, body, complete = raw_get(url)
    assert status == 200 and headers["Content-Length"] == "400000" and not complete and len(body) == 100000
    assert body == media.blob_read("cut", 0, 100000)
    assert raw_get(url)[3] is True
    sb.set_faults(media_cut_first=2, media_cut_fraction=0.5)
    small = f"{sb.url}/media/img/7.jpg"
    results = [raw_get(small) for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert len(results[0][2]) == int(len(results[2][2]) * 0.5)
    sb.set_faults(media_cut_first=0, media_cut_paths={}, media_cut_rate=1.0)
    assert raw_get(f"{sb.url}/media/img/8.jpg")[3] is False
    sb.set_faults(media_cut_rate=0.0, media_errors=[{"status": 429, "times": 1}, {"status": 503, "times": 1}])
    status, headers, _ = fetch(small)
    assert status == 429 and headers["Retry-After"] == "1"
    assert fetch(small)[0] == 503 and fetch(small)[0] == 200
    log = sb.requests()
    cut = log[0]
    assert cut["aborted"] and cut["bytes"] == 100000 and cut["status"] == 200
    assert sb.stats()["cuts"] == 4


def test_bad_media_bodies(sandbox_factory: Any) -> None:
    sb = sandbox_factory(weibo_pages=1, bad_media=True)
    world = build_weibo_world(seed=1, users=(UID, OTHER), pages=1, per_page=10, bad_media=True)
    by_kind = {kind: world.pics[pid] for pid, kind in world.bad_pids.items()}
    status, headers, body = fetch(sb.url + by_kind["html"].path("large"), REFERER)
    assert status == 200 and headers["Content-Type"] == "image/jpeg" and body.startswith(b"<!DOCTYPE html>")
    status, headers, body, complete = raw_get(sb.url + by_kind["truncated"].path("large"), REFERER)
    assert not complete and len(body) == int(headers["Content-Length"]) // 2
    status, headers, body = fetch(sb.url + by_kind["bomb"].path("large"), REFERER)
    assert headers["Content-Type"] == "image/png" and len(body) < 16_000
    assert int.from_bytes(body[16:20], "big") == 50_000 and int.from_bytes(body[20:24], "big") == 50_000
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(body))
    first_page = get_json(f"{sb.weibo_url}/api/container/getIndex?containerid=107603{UID}&page=1")
    served = {p["pid"] for m in mblogs(first_page) for p in m.get("pics", [])}
    assert set(world.bad_pids) <= served


def test_request_log_and_stats(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    fetch(timeline_url(sb, page=1), {"Cookie": "SUB=secret-value", "Referer": "https://m.weibo.cn/"})
    fetch(f"{sb.url}/media/blob/logged?size=100", {"Range": "bytes=0-49", "If-Range": '"x"'})
    log = sb.requests()
    assert len(log) == 2
    api, blob = log
    assert api["method"] == "GET" and api["path"] == "/weibo/api/container/getIndex"
    assert api["cookie"] is True and api["referer"] == "https://m.weibo.cn/" and api["status"] == 200
    assert "secret-value" not in json.dumps(log)
    assert blob["query"] == "size=100" and blob["range"] == "bytes=0-49" and blob["if_range"] == '"x"'
    assert blob["status"] == 200 and blob["bytes"] == 100 and blob["finished"] and not blob["aborted"]
    stats = sb.stats()
    assert stats["requests"] == 2 and stats["media_bytes_sent"] == 100 and stats["by_status"] == {"200": 2}
    sb.reset()
    assert sb.requests() == [] and sb.stats()["requests"] == 0 and sb.stats()["lifetime"]["requests"] > 0


def test_large_blob_streams_with_little_memory(fresh_sandbox: SandboxProcess) -> None:
    psutil = pytest.importorskip("psutil")
    size = 256 * 1024 * 1024
    server = psutil.Process(fresh_sandbox.info()["pid"])
    # The session's sandbox holds whatever earlier tests made it generate (video packages, bombs): what counts is
    # how much serving this body adds.
    baseline = server.memory_info().rss
    parts = urlsplit(fresh_sandbox.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    received, peak = 0, 0
    try:
        conn.request("GET", f"/media/blob/big?size={size}")
        response = conn.getresponse()
        assert response.status == 200 and int(response.headers["Content-Length"]) == size
        while chunk := response.read(4 * 1024 * 1024):
            received += len(chunk)
            if received % (64 * 1024 * 1024) < len(chunk):
                peak = max(peak, server.memory_info().rss)
    finally:
        conn.close()
    assert received == size
    assert peak - baseline < 64 * 1024 * 1024  # the whole body would be 256 MiB on its own
    assert fresh_sandbox.stats()["media_bytes_sent"] == size
