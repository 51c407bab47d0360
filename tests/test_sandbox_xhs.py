"""The sandbox's XiaoHongShu pages over real HTTP: note and profile pages whose state is a JavaScript literal,
unavailable notes, the ``xhs_web`` rate-limit knob, and real media behind every URL.

Everything runs against the sandbox subprocess; expectations come from the pure world model
(:mod:`mediacrawler_sandbox.xhs`), and every page goes through the real parser (:mod:`mediacrawler.parsers.xhs`),
so these tests also prove the two speak the same site.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

import av
import pytest
from PIL import Image

from mediacrawler.parsers import xhs as parser
from mediacrawler.parsers._common import PlatformError
from mediacrawler_sandbox import xhs
from mediacrawler_sandbox.process import SandboxProcess


@pytest.fixture(scope="module")
def world() -> xhs.XhsWorld:
    return xhs.build_xhs_world(seed=1)


@pytest.fixture
def sb(sandbox: SandboxProcess) -> SandboxProcess:
    sandbox.reset()
    return sandbox


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    """(status, headers, body) without raising on 4xx/5xx."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def note_url(sb: SandboxProcess, note_id: str, token: str | None) -> str:
    query = {"xsec_token": token, "xsec_source": "pc_feed"} if token else {}
    return f"{sb.url}/xhs/explore/{note_id}" + (f"?{urlencode(query)}" if query else "")


def test_every_note_page_parses_to_its_note_with_real_images(sb: SandboxProcess, world: xhs.XhsWorld) -> None:
    assert len(world.order) == xhs.NOTE_COUNT
    for note in world.user_notes():
        status, headers, body = fetch(note_url(sb, note.id, note.xsec_token))
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert parser.classify_page(status, body) == "ok"
        post = parser.parse_note_page(body.decode("utf-8"), note_id=note.id)
        assert not post.deleted and post.extra["title"] == note.title and post.text == note.desc
        assert post.author is not None and post.author.id == xhs.USER_ID
        assert post.metrics.likes == parser.parse_count(note.liked) and post.metrics.likes is not None
        assert post.created_at is not None
        images = [m for m in post.media if m.kind == "image"]
        assert [m.url.split("?")[0] for m in images] == [f"{sb.url}/media/img/{i.n}.jpg" for i in note.images]
        assert all("sc=dft" in m.url and "sc=prv" in m.alternates[0] for m in images)
        for asset, image in zip(images, note.images, strict=True):
            assert (asset.width, asset.height) == (image.width, image.height)
        status, _, data = fetch(images[0].url)
        assert status == 200 and Image.open(io.BytesIO(data)).size == (images[0].width, images[0].height)


def test_a_video_note_lists_h264_streams_that_are_real_mp4s_at_their_heights(
        sb: SandboxProcess, world: xhs.XhsWorld) -> None:
    note = next(n for n in world.user_notes() if n.kind == "video")
    _, _, body = fetch(note_url(sb, note.id, note.xsec_token))
    post = parser.parse_note_page(body.decode("utf-8"), note_id=note.id)
    video = next(m for m in post.media if m.kind == "video")
    assert video.renditions is not None
    assert [(r["codec"], r["height"]) for r in video.renditions] == [("avc1", 720), ("avc1", 480), ("avc1", 360)]
    assert video.duration == 4.0 and len(post.media) == 2  # the cover image and the video
    rendition = video.renditions[1]
    status, _, data = fetch(rendition["url"])
    _, _, backup = fetch(rendition["alternates"][0])
    assert status == 200 and data == backup
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.height, stream.codec_context.name) == (480, "h264")


def test_the_state_is_a_javascript_literal(sb: SandboxProcess, world: xhs.XhsWorld) -> None:
    note = world.user_notes()[0]
    _, _, body = fetch(note_url(sb, note.id, note.xsec_token))
    literal = body.decode("utf-8").split("window.__INITIAL_STATE__=", 1)[1].split("</script>", 1)[0]
    assert ":undefined" in literal and "\\u002F" in literal and "/" not in literal
    with pytest.raises(ValueError):
        json.loads(literal)


def test_an_empty_note_entry_is_an_unreadable_page_not_a_deleted_note(sb: SandboxProcess) -> None:
    status, _, body = fetch(note_url(sb, xhs.EMPTY_NOTE, None))
    assert status == 200 and parser.classify_page(status, body) == "ok"
    with pytest.raises(ValueError, match="holds no note"):
        parser.parse_note_page(body.decode("utf-8"), note_id=xhs.EMPTY_NOTE)


@pytest.mark.parametrize("case", ["gone", "unknown", "wrong_token"])
def test_unavailable_notes_are_records_with_a_reason(sb: SandboxProcess, world: xhs.XhsWorld, case: str) -> None:
    note_id, token = {"gone": (xhs.GONE_NOTE, None),
                      "unknown": ("0123456789abcdef01234567", None),
                      "wrong_token": (world.order[0], "ABwrong=")}[case]
    status, _, body = fetch(note_url(sb, note_id, token))
    assert status == 200 and parser.classify_page(status, body) == "ok"
    post = parser.parse_note_page(body.decode("utf-8"), note_id=note_id)
    assert post.deleted and post.extra["unavailable"] and post.media == []


def test_a_missing_token_is_accepted(sb: SandboxProcess, world: xhs.XhsWorld) -> None:
    note_id = world.order[2]
    _, _, body = fetch(note_url(sb, note_id, None))
    assert not parser.parse_note_page(body.decode("utf-8"), note_id=note_id).deleted


def test_the_profile_page_carries_the_first_notes_with_their_tokens(sb: SandboxProcess, world: xhs.XhsWorld) -> None:
    status, _, body = fetch(f"{sb.url}/xhs/user/profile/{xhs.USER_ID}")
    assert status == 200
    profile = parser.parse_profile_page(body.decode("utf-8"), user_id=xhs.USER_ID)
    expected = world.user_notes()[:xhs.PROFILE_NOTES]
    assert [(n.note_id, n.xsec_token) for n in profile.notes] == [(n.id, n.xsec_token) for n in expected]
    assert profile.has_more and profile.user is not None and profile.user.name == xhs.USER_NAME
    _, _, other = fetch(f"{sb.url}/xhs/user/profile/0123456789abcdef01234567")
    gone = parser.parse_profile_page(other.decode("utf-8"), user_id="0123456789abcdef01234567")
    assert gone.unavailable and not gone.notes


def test_rate_limit_knob_answers_461_and_code_300012(sb: SandboxProcess, world: xhs.XhsWorld) -> None:
    note = world.user_notes()[0]
    url = note_url(sb, note.id, note.xsec_token)
    sb.set_faults(xhs_web=[{"kind": "461", "times": 1}, {"kind": "300012", "times": 1},
                           {"kind": "300012_json", "times": 1}])
    status, headers, body = fetch(url)
    assert status == 461 and headers["verifytype"] and parser.classify_page(status, body) == "rate_limited"
    status, _, body = fetch(url)
    assert status == 200 and parser.classify_page(status, body) == "rate_limited"
    with pytest.raises(PlatformError) as err:
        parser.parse_note_page(body.decode("utf-8"), note_id=note.id)
    assert err.value.code == 300012
    status, _, body = fetch(url)
    assert status == 200 and json.loads(body)["code"] == 300012 and parser.classify_page(status, body) == "rate_limited"
    status, _, body = fetch(url)  # every rule's budget is spent
    assert status == 200 and parser.classify_page(status, body) == "ok"
    assert sum(1 for r in sb.requests() if r["path"] == f"/xhs/explore/{note.id}") == 4


def test_bad_paths_and_bad_knobs(sb: SandboxProcess) -> None:
    assert fetch(f"{sb.url}/xhs/explore/not-an-id")[0] == 404
    assert fetch(f"{sb.url}/xhs/nothing")[0] == 404
    with pytest.raises(Exception, match="400|kind must be"):
        sb.set_faults(xhs_web={"kind": "999"})
