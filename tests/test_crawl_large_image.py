"""End-to-end: an image above MEDIA_SEGMENT_THRESHOLD leaves the one-request path for Range segments.

Real crawls (``scrapy runspider tests/spiders.py``, as in test_crawl_video) against the sandbox's ``/media/big/``
noise PNGs, with a small threshold so that a few hundred KiB count as large. Checks are on the stored file (hash,
Pillow), the record, the crawl's stats and the sandbox's request log.
"""

from __future__ import annotations

import hashlib
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

from mediacrawler.items import MediaAsset
from mediacrawler_sandbox import media
from mediacrawler_sandbox.process import SandboxProcess

from .test_crawl_video import post, run_crawl

KiB = 1024
SMALL = {"MEDIA_SEGMENT_THRESHOLD": 256 * KiB, "MEDIA_SEGMENT_SIZE": 128 * KiB}
SIDE = 400  # a 400x400 noise PNG: about 470 KiB


def big_url(sb: SandboxProcess, name: str, side: int = SIDE) -> str:
    return f"{sb.url}/media/big/{name}.png?side={side}"


def big_log(sb: SandboxProcess, name: str) -> list[dict]:
    return [e for e in sb.requests() if e["path"] == f"/media/big/{name}.png" and e["method"] == "GET"]


@pytest.mark.slow
def test_large_image_is_fetched_in_segments_and_checked(tmp_path: Path, fresh_sandbox: SandboxProcess) -> None:
    sb = fresh_sandbox
    expected = media.big_image("large1", SIDE)
    assert len(expected) > SMALL["MEDIA_SEGMENT_THRESHOLD"]
    small = MediaAsset(kind="image", key="small1", url=f"{sb.url}/media/img/7.jpg")
    large = MediaAsset(kind="image", key="large1", url=big_url(sb, "large1"))
    crawl = run_crawl(tmp_path / "w", [post("p1", small, large)], store=tmp_path / "store", listing=sb.url,
                      settings=SMALL)
    got = crawl.asset("p1", 1)
    assert got["status"] == "downloaded", got
    assert got["sha256"] == hashlib.sha256(expected).hexdigest() and got["size"] == len(expected)
    assert (got["mime"], got["width"], got["height"]) == ("image/png", SIDE, SIDE)
    stored = tmp_path / "store" / got["path"]
    assert stored.read_bytes() == expected and stored.suffix == ".png"
    with Image.open(BytesIO(stored.read_bytes())) as img:
        assert img.size == (SIDE, SIDE)
    # The first GET was stopped at its headers; then a ranged probe and Range segments, every byte once.
    log = big_log(sb, "large1")
    assert log[0]["range"] is None
    ranged = [e for e in log if e["range"]]
    assert len(ranged) == 1 + -(-(len(expected) - SMALL["MEDIA_SEGMENT_THRESHOLD"]) // SMALL["MEDIA_SEGMENT_SIZE"])
    assert sum(e["bytes"] for e in ranged) == len(expected) and {e["status"] for e in ranged} == {206}
    assert crawl.stats["media/large_images"] == 1
    # The small image stayed on the one-request path.
    assert crawl.asset("p1", 0)["status"] == "downloaded"
    assert not [e for e in sb.requests() if e["path"] == "/media/img/7.jpg" and e["range"]]
    assert not list((tmp_path / "store" / "spool").glob("*"))


@pytest.mark.slow
@pytest.mark.parametrize(("url_of", "settings", "reason"), [
    # Over the pixel cap: rejected from the file's header, before any decoding.
    (lambda sb: big_url(sb, "bomb"), {"MEDIA_MAX_IMAGE_PIXELS": 10_000}, "image-too-large"),
    # Random bytes declared as an image.
    (lambda sb: f"{sb.url}/media/blob/noise?size={400 * KiB}", {}, "not-media"),
], ids=["pixel-cap", "not-an-image"])
def test_bad_large_image_fails_and_stores_nothing(tmp_path: Path, fresh_sandbox: SandboxProcess, url_of,
                                                  settings: dict, reason: str) -> None:
    asset = MediaAsset(kind="image", key="bad1", url=url_of(fresh_sandbox))
    crawl = run_crawl(tmp_path / "w", [post("p1", asset)], store=tmp_path / "store", listing=fresh_sandbox.url,
                      settings={**SMALL, **settings})
    got = crawl.asset("p1", 0)
    assert got["status"] == "failed" and got["error"].startswith(reason), got
    assert crawl.objects() == []
    assert not list((tmp_path / "store" / "spool").glob("*"))
    assert crawl.stats[f"media/failed/{reason}"] == 1
    assert crawl.stats["media/large_images"] == 1  # judged on the spooled file, not in memory
