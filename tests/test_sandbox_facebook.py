"""The sandbox's Graph API over real HTTP: token handling, paging with the token echoed in ``next``, the video
node, error envelopes from the ``facebook_api`` knob, real media behind the URLs, and a token-free request log.

Everything runs against the sandbox subprocess; expectations come from the pure world model
(:mod:`mediacrawler_sandbox.facebook`), and every payload goes through the real parser
(:mod:`mediacrawler.parsers.facebook`), so these tests also prove the two speak the same Graph.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from PIL import Image

from mediacrawler.parsers import facebook as parser
from mediacrawler.parsers._common import PlatformError
from mediacrawler_sandbox import facebook
from mediacrawler_sandbox.process import SandboxProcess

TOKEN = facebook.DEFAULT_TOKEN
PAGE = facebook.PAGE_ID
FIELDS = ("id,message,created_time,permalink_url,"
          "attachments{media_type,media,subattachments,target,url,type,title,description}")
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def world() -> facebook.FacebookWorld:
    return facebook.build_facebook_world(seed=1)


def graph(sb: SandboxProcess) -> str:
    return sb.url + "/facebook/v19.0"


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    """(status, headers, body) without raising on 4xx/5xx."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def posts_url(sb: SandboxProcess, **params: Any) -> str:
    return f"{graph(sb)}/{PAGE}/posts?" + urlencode({"fields": FIELDS, **params})


def crawl(sb: SandboxProcess, limit: int) -> list[tuple[parser.Page, dict[str, Any]]]:
    """Follow the pages the way the spider will: next URL built from next_request_params on our own base."""
    pages, params = [], {"fields": FIELDS, "limit": str(limit)}
    for _ in range(20):
        status, _, body = fetch(f"{graph(sb)}/{PAGE}/posts?" + urlencode(params), AUTH)
        payload = json.loads(body)
        assert status == 200, payload
        pages.append((parser.parse_posts(payload, source=None, fetched_at=None), payload))
        nxt = parser.next_request_params(payload)
        if nxt is None:
            return pages
        assert "access_token" not in nxt
        params = nxt
    raise AssertionError("paging never ended")


def test_three_pages_of_four_with_every_attachment_kind(fresh_sandbox: SandboxProcess,
                                                         world: facebook.FacebookWorld) -> None:
    pages = crawl(fresh_sandbox, limit=4)
    assert [len(p.posts) + len(p.incomplete) for p, _ in pages] == [4, 4, 4]
    assert [p.is_last for p, _ in pages] == [False, False, True]
    ids = [pid for p, payload in pages for pid in (d["id"] for d in payload["data"])]
    assert ids == [post.id for post in world.posts(PAGE)]
    records = {post.post_id: post for p, _ in pages for post in p.posts}
    incomplete = {pid: raw for p, _ in pages for pid, raw in p.incomplete.items()}
    for post in world.posts(PAGE):
        if post.kind == "video" and post.video is not None and not post.video.source_in_post:
            assert post.id in incomplete
            continue
        record = records[post.id]
        assert record.text == post.message and record.created_at == post.created.strftime("%Y-%m-%dT%H:%M:%SZ")
        # Each photo; a video followed by its cover (the attachment's thumbnail), which names it.
        assert [m.key for m in record.media] == ([f"photo:{ph.id}" for ph in post.photos] + (
            [f"video:{post.video.id}", f"cover:{post.video.id}"] if post.video else []))
        assert [m.cover_of for m in record.media if m.cover_of] == ([f"video:{post.video.id}"] if post.video else [])
        for asset, photo in zip(record.media, post.photos, strict=False):
            assert (asset.width, asset.height) == (photo.width, photo.height)
        if post.kind == "share":
            assert record.extra["link"] == post.link
    assert {raw["attachments"]["data"][0]["target"]["id"] for raw in incomplete.values()} == {
        v.id for v in world.videos.values() if not v.source_in_post}


def test_paging_next_echoes_the_token_like_graph(fresh_sandbox: SandboxProcess) -> None:
    status, _, body = fetch(posts_url(fresh_sandbox, limit=4), AUTH)
    payload = json.loads(body)
    nxt = payload["paging"]["next"]
    assert status == 200 and f"access_token={TOKEN}" in nxt
    assert "next" not in json.loads(fetch(posts_url(fresh_sandbox, limit=100), AUTH)[2])["paging"]
    stripped = parser.strip_token(nxt)
    assert "access_token" not in stripped
    # The token-free URL needs the token again (from the header), and then answers the same page.
    assert fetch(stripped)[0] == 400
    assert json.loads(fetch(stripped, AUTH)[2]) == json.loads(fetch(nxt)[2])


def test_limit_default_and_past_the_end(fresh_sandbox: SandboxProcess) -> None:
    payload = json.loads(fetch(posts_url(fresh_sandbox), AUTH)[2])
    assert len(payload["data"]) == 12 and "next" not in payload["paging"]  # default limit 25
    last = payload["paging"]["cursors"]["after"]
    assert json.loads(fetch(posts_url(fresh_sandbox, after=last), AUTH)[2]) == {"data": []}


@pytest.mark.parametrize("headers,query,message", [
    ({}, {}, "An access token is required"),
    ({"Authorization": "Bearer wrong"}, {}, "Invalid OAuth access token"),
    ({}, {"access_token": "wrong"}, "Invalid OAuth access token"),
])
def test_missing_or_wrong_token_is_code_190(fresh_sandbox: SandboxProcess, headers: dict[str, str],
                                            query: dict[str, str], message: str) -> None:
    status, _, body = fetch(posts_url(fresh_sandbox, **query), headers)
    payload = json.loads(body)
    assert status == 400 and payload["error"]["code"] == 190 and message in payload["error"]["message"]
    with pytest.raises(PlatformError) as info:
        parser.raise_for_error(payload, status)
    assert info.value.kind == "login_required" and "wrong" not in str(info.value)


def test_token_as_query_parameter_works_and_is_configurable(fresh_sandbox: SandboxProcess) -> None:
    assert fetch(posts_url(fresh_sandbox, access_token=TOKEN))[0] == 200
    fresh_sandbox.set_faults(facebook_token="EAAJotherSandboxToken")
    assert fetch(posts_url(fresh_sandbox), AUTH)[0] == 400
    assert fetch(posts_url(fresh_sandbox), {"Authorization": "OAuth EAAJotherSandboxToken"})[0] == 200


def test_the_token_never_reaches_the_request_log(fresh_sandbox: SandboxProcess) -> None:
    fetch(posts_url(fresh_sandbox, access_token=TOKEN, limit=4))
    fetch(posts_url(fresh_sandbox, limit=4), AUTH)
    log = [e for e in fresh_sandbox.requests() if e["path"].startswith("/facebook/")]
    assert len(log) == 2 and TOKEN not in json.dumps(fresh_sandbox.requests())
    assert "access_token=[redacted]" in log[0]["query"]
    assert [e["authorization"] for e in log] == [False, True]
    assert TOKEN not in fresh_sandbox.stderr_tail(100_000)


def test_video_node_and_its_media_are_real(fresh_sandbox: SandboxProcess, world: facebook.FacebookWorld) -> None:
    video_id = next(v.id for v in world.videos.values() if not v.source_in_post)
    status, _, body = fetch(f"{graph(fresh_sandbox)}/{video_id}?fields=source,length,format", AUTH)
    payload = json.loads(body)
    assert status == 200 and set(payload) == {"id", "source", "length", "format"}
    assert [f["filter"] for f in payload["format"]] == ["130x130", "480x480", "native"]
    source, length = parser.parse_video_node(payload)
    assert urlsplit(source).netloc == urlsplit(fresh_sandbox.url).netloc and length == 4.0
    status, headers, mp4 = fetch(source)
    assert status == 200 and headers["Content-Type"] == "video/mp4" and mp4[4:8] == b"ftyp"
    # Unknown ids: Graph's unknown-object envelope, which the parser calls not_found.
    status, _, body = fetch(f"{graph(fresh_sandbox)}/999?fields=source", AUTH)
    assert status == 400 and parser.classify_error(json.loads(body), status)[0] == "not_found"


def test_photo_urls_serve_images_of_the_declared_size(fresh_sandbox: SandboxProcess) -> None:
    page = parser.parse_posts(json.loads(fetch(posts_url(fresh_sandbox, limit=2), AUTH)[2]),
                              source=None, fetched_at=None)
    assets = [m for post in page.posts for m in post.media]
    assert len(assets) == 4  # one photo, then an album of three
    for asset in assets:
        status, _, body = fetch(asset.url)
        assert status == 200 and Image.open(io.BytesIO(body)).size == (asset.width, asset.height)


@pytest.mark.parametrize("kind", ["4", "17", "32", "613"])
def test_rate_limit_knob_on_one_page(fresh_sandbox: SandboxProcess, kind: str) -> None:
    fresh_sandbox.set_faults(facebook_api=[{"kind": kind, "page": 2, "times": 1}])
    assert fetch(posts_url(fresh_sandbox, limit=4), AUTH)[0] == 200  # page 1 untouched
    first = json.loads(fetch(posts_url(fresh_sandbox, limit=4), AUTH)[2])
    url = f"{graph(fresh_sandbox)}/{PAGE}/posts?" + urlencode(parser.next_request_params(first) or {})
    status, headers, body = fetch(url, AUTH)
    assert status == 400 and headers["X-App-Usage"]
    assert parser.classify_error(json.loads(body), status)[0] == "rate_limited"
    assert json.loads(body)["error"]["code"] == int(kind)
    assert fetch(url, AUTH)[0] == 200  # times: 1


@pytest.mark.parametrize("kind,status,expected", [("190", 400, "login_required"), ("100", 400, "not_found"),
                                                  ("5xx", 503, "error")])
def test_other_error_knobs(fresh_sandbox: SandboxProcess, kind: str, status: int, expected: str) -> None:
    fresh_sandbox.set_faults(facebook_api={"kind": kind, "endpoint": "any", "status": 503})
    got, _, body = fetch(posts_url(fresh_sandbox, limit=4), AUTH)
    assert got == status and parser.classify_error(json.loads(body), got)[0] == expected
    fresh_sandbox.reset()
    assert fetch(posts_url(fresh_sandbox, limit=4), AUTH)[0] == 200


def test_bad_knob_is_refused(fresh_sandbox: SandboxProcess) -> None:
    with pytest.raises(Exception, match="facebook_api"):
        fresh_sandbox.set_faults(facebook_api={"kind": "999"})

