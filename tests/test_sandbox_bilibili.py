"""The sandbox's Bilibili API over real HTTP: WBI-checked listings (``arc/search``, ``search/type``), multi-part
videos whose every cid has its own playurl and real media, and the ``bilibili_wbi`` knob.

Requests are signed and answers read with the crawler's own parser (:mod:`mediacrawler.parsers.bilibili`), so
these tests also prove the sandbox speaks what the client understands; expectations come from the pure model
(:mod:`mediacrawler_sandbox.bilibili`).
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest

from mediacrawler.media.renditions import manifest_from_renditions
from mediacrawler.parsers import bilibili as parser
from mediacrawler.parsers._common import PlatformError
from mediacrawler_sandbox import bilibili, video
from mediacrawler_sandbox.process import SandboxProcess

MIXIN = parser.mixin_key(bilibili.WBI_IMG_KEY, bilibili.WBI_SUB_KEY)
ARC = "/x/space/wbi/arc/search"
SEARCH = "/x/web-interface/wbi/search/type"


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """(status, body) without raising on 4xx/5xx."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def api(sb: SandboxProcess, route: str, params: dict[str, Any], *, sign: bool = True) -> Any:
    """GET a Bilibili API route, WBI-signed like the crawler signs, and decode the JSON."""
    query = parser.sign_params(params, MIXIN, wts=int(time.time())) if sign else params
    status, body = fetch(f"{sb.url}/bilibili{route}?{urlencode(query, quote_via=quote, safe='')}")
    assert status == 200, (route, status, body[:200])
    return json.loads(body)


# ----------------------------------------------------------------------------------------------- pure


@pytest.mark.parametrize("params", [
    {"mid": "2", "pn": "1", "ps": "4"},
    {"keyword": "猫 (cute)! it's*", "search_type": "video", "page": "1"},
    {"keyword": "a&b=c/d?e#f%g+h ~._-", "search_type": "video"},
    {},
])
def test_sandbox_checker_agrees_with_the_crawler_signer(params: dict[str, str]) -> None:
    signed = parser.sign_params(params, MIXIN, wts=1764400000)
    assert bilibili.wbi_signature_ok(signed)
    assert not bilibili.wbi_signature_ok({**signed, "w_rid": "0" * 32})
    assert not bilibili.wbi_signature_ok({**signed, "extra": "1"})
    assert not bilibili.wbi_signature_ok({k: v for k, v in signed.items() if k != "wts"})


def test_creator_catalog_shapes() -> None:
    assert len(bilibili.creator_uploads(2)) == 10 and len(bilibili.creator_uploads(4)) == 45
    assert bilibili.UNION_BVID in {u.bvid for u in bilibili.creator_uploads(2)}
    assert bilibili.UPLOADS[bilibili.UNION_BVID].owner == 3
    parts = bilibili.parts_of(bilibili.MULTIPART_BVID)
    assert [m for _, m in parts] == [bilibili.MULTIPART_BVID, f"{bilibili.MULTIPART_BVID}-p2",
                                     f"{bilibili.MULTIPART_BVID}-p3"]
    assert parts[0][0] == bilibili.cid_for(bilibili.MULTIPART_BVID) and len({c for c, _ in parts}) == 3
    assert bilibili.parts_of(bilibili.BVIDS[0]) == [(bilibili.cid_for(bilibili.BVIDS[0]), bilibili.BVIDS[0])]


# ---------------------------------------------------------------------------------------------- HTTP


def test_nav_keys_sign_the_listings(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    nav = api(sb, "/x/web-interface/nav", {}, sign=False)
    assert nav["code"] == -101 and parser.wbi_keys(nav) == (bilibili.WBI_IMG_KEY, bilibili.WBI_SUB_KEY)
    params = {"mid": 2, "pn": 1, "ps": 4}
    for route in (ARC, SEARCH):
        assert api(sb, route, params, sign=False) == bilibili.WBI_REJECTED
        assert api(sb, route, {**params, "wts": "1764400000", "w_rid": "0123456789abcdef" * 2},
                   sign=False)["code"] == -403
    signed = parser.sign_params(params, MIXIN, wts=int(time.time()))
    assert api(sb, ARC, signed, sign=False)["code"] == 0
    assert api(sb, ARC, {**signed, "pn": "2"}, sign=False)["code"] == -403  # tampered after signing
    status, body = fetch(f"{sb.url}/bilibili{ARC}?{urlencode(signed)}&mid=3")  # a repeated parameter
    assert json.loads(body)["code"] == -403
    with pytest.raises(PlatformError) as e:
        parser.raise_for_envelope(bilibili.WBI_REJECTED)
    assert e.value.kind == "not_found"


def test_arc_search_pages_through_a_creator(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    seen: list[str] = []
    lasts = []
    for pn in (1, 2, 3):
        payload = api(sb, ARC, {"mid": 2, "pn": pn, "ps": 4, "order": "pubdate", "platform": "web"})
        assert payload["data"]["page"] == {"pn": pn, "ps": 4, "count": 10}
        page = parser.parse_arc_search(payload)
        assert not page.posts and page.next_cursor is None
        seen.extend(page.incomplete)
        lasts.append(page.is_last)
    assert lasts == [False, False, True]
    assert seen == [u.bvid for u in bilibili.creator_uploads(2)]
    union = parser.parse_arc_search(api(sb, ARC, {"mid": 2, "pn": 1, "ps": 4}))\
        .incomplete[bilibili.UNION_BVID]
    assert union["is_union_video"] and union["mid"] == "3" and union["author"] == "旅行的鱼"
    multi = parser.parse_arc_search(api(sb, ARC, {"mid": 2, "pn": 1, "ps": 4})).incomplete[bilibili.MULTIPART_BVID]
    assert multi["length"] == 12  # 3 parts of 4 s

    past = parser.parse_arc_search(api(sb, ARC, {"mid": 2, "pn": 4, "ps": 4}))
    assert past.is_last and not past.incomplete
    big = parser.parse_arc_search(api(sb, ARC, {"mid": 4}))  # default ps=30 of 45
    assert len(big.incomplete) == 30 and not big.is_last
    assert api(sb, ARC, {"mid": 999})["code"] == -404
    assert api(sb, ARC, {"mid": 2, "ps": 51})["code"] == -400
    # What the listing says agrees with /view.
    post = parser.parse_view(api(sb, "/x/web-interface/view", {"bvid": bilibili.UNION_BVID}, sign=False))
    assert post.author is not None and (post.author.id, post.author.name) == ("3", "旅行的鱼")
    assert post.created_at == union["created_at"] and post.extra["title"] == union["title"]


def test_search_type_titles_pages_and_protocol_relative_covers(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    payload = api(sb, SEARCH, {"search_type": "video", "keyword": "猫", "page": 1})
    titles = [r["title"] for r in payload["data"]["result"]]
    assert '<em class="keyword">猫</em>咪日常' in titles
    first = payload["data"]["result"][0]
    assert first["pic"].startswith("//127.0.0.1:") and ":" in first["duration"]
    page = parser.parse_search(payload)
    assert page.is_last and "猫咪日常" in [v["title"] for v in page.incomplete.values()]
    assert all(v["pic"].startswith("https://127.0.0.1:") for v in page.incomplete.values())

    lasts, found = [], 0
    for n in (1, 2, 3):
        p = parser.parse_search(api(sb, SEARCH, {"search_type": "video", "keyword": "日常", "page": n}))
        lasts.append(p.is_last)
        found += len(p.incomplete)
    assert lasts == [False, False, True] and found == 46
    # The signer strips !'()* from values; the sandbox searches what it was sent.
    odd = parser.parse_search(api(sb, SEARCH, {"search_type": "video", "keyword": "(测试)"}))
    assert [v["title"] for v in odd.incomplete.values()] == ["(测试) 标题!"]
    amp = api(sb, SEARCH, {"search_type": "video", "keyword": "cat"})
    assert amp["data"]["result"][0]["title"] == '<em class="keyword">Cat</em> &amp; 狗'
    assert [v["title"] for v in parser.parse_search(amp).incomplete.values()] == ["Cat & 狗"]
    none = api(sb, SEARCH, {"search_type": "video", "keyword": "没有这个"})
    assert "result" not in none["data"] and none["data"]["numPages"] == 0 and parser.parse_search(none).is_last
    assert api(sb, SEARCH, {"search_type": "bili_user", "keyword": "猫"})["code"] == -400


def test_multipart_video_every_cid_has_its_own_media(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    bvid = bilibili.MULTIPART_BVID
    status, raw = fetch(f"{sb.url}/bilibili/x/web-interface/view?bvid={bvid}")
    post = parser.parse_view(json.loads(raw))
    videos = [m for m in post.media if m.kind == "video"]
    assert [m.key for m in videos] == [f"{bvid}:{cid}" for cid, _ in bilibili.parts_of(bvid)]
    assert [p["page"] for p in post.extra["parts"]] == [1, 2, 3] and all(m.duration == 4.0 for m in videos)
    cover = next(m for m in post.media if m.kind == "image")
    assert fetch(cover.url)[0] == 200

    referer = {"Referer": f"https://www.bilibili.com/video/{bvid}"}
    digests = []
    for (cid, media_id), asset in zip(bilibili.parts_of(bvid), videos, strict=True):
        status, raw = fetch(f"{sb.url}/bilibili/x/player/wbi/playurl?"
                            + urlencode(parser.sign_params({"bvid": bvid, "cid": cid, "fnval": 16}, MIXIN,
                                                           wts=int(time.time()))))
        assert b"\\u0026" in raw and b"&" not in raw  # Go's escapes, as Bilibili sends them
        renditions = parser.parse_playurl(json.loads(raw))
        assert [r["kind"] for r in renditions] == ["video"] * 3 + ["audio"]
        listed = manifest_from_renditions(renditions, duration=parser.playurl_duration(json.loads(raw)))
        assert (listed.duration, len(listed.video), len(listed.audio)) == (4.0, 3, 1)
        audio = renditions[-1]
        assert len(audio["alternates"]) == 2 and "/ali/" in audio["alternates"][1]
        assert str(cid) in audio["url"] and f"/{media_id}/" in audio["url"]
        body = fetch(audio["url"], referer)[1]
        assert all(fetch(u, referer)[1] == body for u in audio["alternates"])  # mirrors: the same bytes
        assert body == video.video_package(media_id).tracks["audio"].full
        digests.append(hashlib.sha256(body).hexdigest())
    assert len(set(digests)) == 3  # three parts, three different media
    other = bilibili.parts_of(bvid)[1][0]
    status, raw = fetch(f"{sb.url}/bilibili/x/player/playurl?bvid={bilibili.BVIDS[0]}&cid={other}")
    assert json.loads(raw)["code"] == -404  # a cid of another video


def test_wbi_knob_and_listing_faults(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    vid = bilibili.BVIDS[0]
    unsigned = {"bvid": vid, "cid": bilibili.cid_for(vid), "fnval": 16}
    assert api(sb, "/x/player/wbi/playurl", unsigned, sign=False)["code"] == 0  # default: playurl unchecked
    sb.set_faults(bilibili_wbi="all")
    assert api(sb, "/x/player/wbi/playurl", unsigned, sign=False)["code"] == -403
    assert api(sb, "/x/player/wbi/playurl", unsigned)["code"] == 0
    assert api(sb, "/x/player/playurl", unsigned, sign=False)["code"] == 0  # the legacy route is not /wbi/
    sb.set_faults(bilibili_wbi="off")
    assert api(sb, ARC, {"mid": 3}, sign=False)["code"] == 0
    with pytest.raises(Exception, match="HTTP 400"):
        sb.set_faults(bilibili_wbi="sometimes")
    sb.reset()
    assert api(sb, ARC, {"mid": 3}, sign=False)["code"] == -403

    sb.set_faults(bilibili_api=[{"kind": "-352", "endpoint": "arc_search", "times": 1},
                                {"kind": "-412", "endpoint": "search", "times": 1}])
    with pytest.raises(PlatformError) as e:
        parser.parse_arc_search(api(sb, ARC, {"mid": 3}))
    assert e.value.kind == "rate_limited" and e.value.code == -352
    assert parser.parse_arc_search(api(sb, ARC, {"mid": 3})).is_last
    with pytest.raises(PlatformError) as e:
        parser.parse_search(api(sb, SEARCH, {"search_type": "video", "keyword": "猫"}))
    assert e.value.code == -412
    assert api(sb, SEARCH, {"search_type": "video", "keyword": "猫"})["code"] == 0


def test_stream_urls_expire_after_n_gets_and_a_new_playurl_signs_them_afresh(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    vid = bilibili.BVIDS[0]
    cid = bilibili.cid_for(vid)
    referer = {"Referer": f"https://www.bilibili.com/video/{vid}"}
    plain = parser.parse_playurl(api(sb, "/x/player/wbi/playurl", {"bvid": vid, "cid": cid, "fnval": 16}))
    assert all("trid=" not in u for r in plain for u in (r["url"], *r["alternates"]))  # off by default
    sb.set_faults(bilibili_stream_url_uses=2)

    def streams() -> list[dict[str, Any]]:
        return parser.parse_playurl(api(sb, "/x/player/wbi/playurl", {"bvid": vid, "cid": cid, "fnval": 16}))

    def tokens(renditions: list[dict[str, Any]]) -> list[str]:
        return [parse_qs(urlsplit(u).query)["trid"][0] for r in renditions for u in (r["url"], *r["alternates"])]

    first = streams()
    assert set(tokens(first)) == {"1"}  # one token per path: the backups are other paths
    audio = first[-1]
    body = video.video_package(vid).tracks["audio"].full
    ranged = {**referer, "Range": "bytes=0-99"}
    assert fetch(audio["url"], ranged) == (206, body[:100])
    assert fetch(audio["url"], referer) == (200, body)
    status, page = fetch(audio["url"], ranged)  # its third GET: used up
    assert status == 403 and b"403" in page
    assert fetch(audio["alternates"][0], ranged)[0] == 206  # the backup's token is its own
    unsigned = audio["url"].split("&trid=")[0]
    assert fetch(unsigned, ranged)[0] == 403
    assert fetch(unsigned + "&trid=9", ranged)[0] == 403  # never issued
    second = streams()
    assert set(tokens(second)) == {"2"}
    assert fetch(second[-1]["url"], ranged) == (206, body[:100])
    assert fetch(audio["url"], ranged)[0] == 403  # the old token stays expired
    head = urllib.request.Request(second[0]["url"], headers=referer, method="HEAD")
    for _ in range(3):  # HEAD requests do not use a token up
        with urllib.request.urlopen(head, timeout=30) as response:
            assert response.status == 200
    assert fetch(second[0]["url"], ranged)[0] == 206
    log = [r for r in sb.requests() if r["path"] == urlsplit(audio["url"]).path]
    assert [r["status"] for r in log] == [206, 200, 403, 403, 403, 206, 403]
    with pytest.raises(Exception, match="HTTP 400"):
        sb.set_faults(bilibili_stream_url_uses=-1)


def test_a_playurl_fault_can_start_after_the_first_answers(fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    vid = bilibili.BVIDS[0]
    params = {"bvid": vid, "cid": bilibili.cid_for(vid), "fnval": 16}
    sb.set_faults(bilibili_api=[{"kind": "-404", "endpoint": "playurl", "bvid": vid, "after": 1, "times": 2}])
    codes = [api(sb, "/x/player/wbi/playurl", params)["code"] for _ in range(4)]
    assert codes == [0, -404, -404, 0]
    with pytest.raises(Exception, match="HTTP 400"):
        sb.set_faults(bilibili_api=[{"kind": "-404", "after": -1}])


def test_the_upload_without_dash_answers_a_segmented_durl_whatever_fnval_asks(
        fresh_sandbox: SandboxProcess) -> None:
    from mediacrawler_sandbox.durl import durl_segments

    sb = fresh_sandbox
    bvid = bilibili.DURL_BVID
    assert bvid in {u.bvid for u in bilibili.creator_uploads(2)}
    [(cid, media_id)] = bilibili.parts_of(bvid)
    data = api(sb, "/x/player/wbi/playurl", {"bvid": bvid, "cid": cid, "fnval": 16})["data"]
    assert "dash" not in data and [e["order"] for e in data["durl"]] == list(range(1, bilibili.DURL_SEGMENTS + 1))
    assert sum(e["length"] for e in data["durl"]) == video.DURATION * 1000
    [rendition] = parser.parse_playurl({"code": 0, "data": data})
    assert len(rendition["segments"]) == bilibili.DURL_SEGMENTS
    name = next(r.name for r in video.RENDITIONS if r.qn == data["quality"])
    pieces = durl_segments(media_id, name, bilibili.DURL_SEGMENTS)
    for segment, (body, length) in zip(rendition["segments"], pieces, strict=True):
        status, got = fetch(segment["url"], {"Referer": f"https://www.bilibili.com/video/{bvid}"})
        assert status == 200 and got == body and segment["size"] == len(body) and segment["length"] == length
    # Every other video keeps its DASH streams.
    [(other, _)] = bilibili.parts_of(bilibili.BVIDS[0])
    params = {"bvid": bilibili.BVIDS[0], "cid": other, "fnval": 16}
    assert "dash" in api(sb, "/x/player/wbi/playurl", params)["data"]
