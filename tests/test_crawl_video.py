"""End-to-end: videos through the media pipeline (``mediacrawler.media.video``), real crawls against the sandbox.

Each crawl is ``scrapy runspider tests/spiders.py`` in a subprocess (Scrapy defaults + ``-a``/``-s``), yielding
``Post`` items whose video assets point at the sandbox's HLS/DASH/progressive entry points or carry the renditions
that ``parsers/bilibili.py`` read from the sandbox's playurl answer. Expectations come from the pure sandbox
catalog (:mod:`mediacrawler_sandbox.video`); every check is on files on disk (opened with PyAV), records in the
feed, the crawl's stats and the sandbox's request log.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import av
import pytest

from mediacrawler.contracts import asset_index_key
from mediacrawler.items import MediaAsset, Post
from mediacrawler.media.manifests import Segment
from mediacrawler.media.renditions import progressive_variants
from mediacrawler.media.spool import FragmentLedger, load_ledger, save_ledger, video_dir_for
from mediacrawler.media.video import (
    LEDGER_NAME,
    FragmentPlan,
    detect_manifest,
    plan_fingerprint,
    progressive_label,
)
from mediacrawler.parsers import bilibili as bilibili_parser
from mediacrawler.pipelines.media import find_asset
from mediacrawler_sandbox import bilibili, video
from mediacrawler_sandbox.media_site import HOSTILE
from mediacrawler_sandbox.process import SandboxProcess

ROOT = Path(__file__).resolve().parents[1]
SPIDERS = ROOT / "tests" / "spiders.py"
VID = bilibili.BVIDS[0]  # a bvid: every source kind, Bilibili playurl included, serves this one video
DROP_VID = "sbxvid002"  # fragment faults and detection
KILL_VID = "sbxvid001"  # kill/resume
KINDS = {  # video_urls() name → MediaAsset.manifest (bilibili_playurl: the asset carries renditions instead)
    "hls": "hls", "hls_fmp4": "hls", "hls_aes": "hls", "hls_byterange": "hls",
    "dash": "dash", "dash_timeline": "dash", "dash_segmentbase": "dash",
    "bilibili_playurl": None, "progressive": None,
}
# Scrapy defaults apart from these (no project settings: the crawl runs outside the project directory).
BASE_SETTINGS = {"MEDIA_FSYNC": "False", "LOG_LEVEL": "INFO", "RETRY_TIMES": "1",
                 "BILIBILI_WEB_URL": "https://www.bilibili.com"}


@pytest.fixture
def sb(fresh_sandbox: SandboxProcess) -> SandboxProcess:
    """The session sandbox, reset (its request log is this test's to count)."""
    return fresh_sandbox


class Crawl:
    def __init__(self, items: list[dict[str, Any]], stats: dict[str, Any], store: Path, log: str,
                 seconds: float) -> None:
        self.items, self.stats, self.store, self.log, self.seconds = items, stats, store, log, seconds

    def asset(self, post_id: str, index: int = 0) -> dict[str, Any]:
        return next(i for i in self.items if i["post_id"] == post_id)["media"][index]

    def objects(self) -> list[Path]:
        root = self.store / "objects"
        return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def crawl_command(workdir: Path, posts: list[Post], *, store: Path, listing: str,
                  args: dict[str, Any] | None = None, settings: dict[str, Any] | None = None) -> list[str]:
    """``scrapy runspider tests/spiders.py``: the posts come from the callback of ``listing`` (the sandbox root)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "posts.json").write_text(json.dumps([asdict(p) for p in posts]))
    command = [sys.executable, "-m", "scrapy", "runspider", str(SPIDERS), "-a", "posts=posts.json",
               "-a", "stats=stats.json", "-a", f"listing={listing}", "-O", "items.jsonl",
               "-s", f"FILES_STORE={store}"]
    for name, value in (args or {}).items():
        command += ["-a", f"{name}={value}"]
    for name, value in {**BASE_SETTINGS, **(settings or {})}.items():
        command += ["-s", f"{name}={value}"]
    return command


def crawl_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    return env


def run_crawl(workdir: Path, posts: list[Post], *, store: Path, listing: str, args: dict[str, Any] | None = None,
              settings: dict[str, Any] | None = None) -> Crawl:
    command = crawl_command(workdir, posts, store=store, listing=listing, args=args, settings=settings)
    started = time.monotonic()
    proc = subprocess.run(command, cwd=workdir, env=crawl_env(), capture_output=True, text=True, timeout=180)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-4000:]
    items = [json.loads(line) for line in (workdir / "items.jsonl").read_text().splitlines()]
    stats = json.loads((workdir / "stats.json").read_text())
    return Crawl(items, stats, store, proc.stderr, seconds)


def post(post_id: str, *assets: MediaAsset, platform: str = "sandbox") -> Post:
    return Post(platform=platform, post_id=post_id, url=f"https://example.invalid/{post_id}", author=None,
                created_at=None, media=list(assets))


def playurl_asset(base_url: str, vid: str, *, key: str) -> MediaAsset:
    """The video asset a Bilibili spider emits: the streams of the sandbox's playurl answer for ``vid``, read by
    ``parsers/bilibili.py`` (what the spider's API request would get; the media path never fetches a playurl)."""
    payload = bilibili.playurl_response(vid, bilibili.cid_for(vid), base=base_url.rstrip("/"))
    renditions = bilibili_parser.parse_playurl(payload)
    return MediaAsset(kind="video", key=key, url=renditions[0]["url"], renditions=renditions,
                      duration=bilibili_parser.playurl_duration(payload))


def source_posts(base_url: str, vid: str) -> list[Post]:
    """One post per source kind of ``vid`` (progressive: the 720p URL with 480p/360p as alternates)."""
    urls = video.video_urls(base_url, vid)
    posts = []
    for name, manifest in KINDS.items():
        if name == "progressive":
            prog = urls["progressive"]
            asset = MediaAsset(kind="video", key=f"{vid}-{name}", url=prog["720p"],
                               alternates=[prog["480p"], prog["360p"]])
        elif name == "bilibili_playurl":
            asset = playurl_asset(base_url, vid, key=f"{vid}-{name}")
        else:
            asset = MediaAsset(kind="video", key=f"{vid}-{name}", url=urls[name], manifest=manifest)
        posts.append(post(name, asset, platform="bilibili" if name.startswith("bilibili") else "sandbox"))
    return posts


def media_paths(sb: SandboxProcess) -> list[str]:
    return [e["path"] for e in sb.requests() if e["path"].startswith("/media/")]


def assert_playable(path: Path, *, height: int, duration: float) -> None:
    """PyAV opens it: H.264 at ``height`` plus AAC, the catalog's duration (±2 %), the first frame decodes."""
    with av.open(str(path)) as container:
        kinds = {s.type: s.codec_context.name for s in container.streams}
        assert kinds == {"video": "h264", "audio": "aac"}, (path, kinds)
        vstream = container.streams.video[0]
        assert vstream.codec_context.height == height, (path, vstream.codec_context.height)
        seconds = container.duration / 1e6
        assert abs(seconds - duration) <= 0.02 * duration, (path, seconds)
        assert next(container.decode(vstream), None) is not None


@pytest.mark.parametrize("max_height", [None, 480])
@pytest.mark.slow
def test_every_source_kind_stores_one_verified_mp4_at_the_selected_height(
        tmp_path: Path, sb: SandboxProcess, max_height: int | None) -> None:
    catalog = video.video_catalog(VID)
    height = 720 if max_height is None else max_height
    expected = catalog.rendition(height)
    # A missing fragment of every rendition of DROP_VID's fMP4 HLS, for good (times: null).
    sb.set_faults(fragment_drop=[{"path_regex": rf"^/media/hls/{DROP_VID}/[^/]+/seg2\.m4s$", "times": None}])
    drop_urls = video.video_urls(sb.url, DROP_VID)
    posts = source_posts(sb.url, VID)
    posts += [
        # manifest=None: the pipeline finds out from the response that this is an HLS master playlist.
        post("detected", MediaAsset(kind="video", key=f"{DROP_VID}-detected", url=drop_urls["hls"])),
        # A post whose video has a permanently missing fragment, and a picture that must not suffer for it.
        post("dropped", MediaAsset(kind="video", key=f"{DROP_VID}-dropped", url=drop_urls["hls_fmp4"],
                                   manifest="hls"),
             MediaAsset(kind="image", key="img-1", url=f"{sb.url}/media/img/1.jpg")),
    ]
    args = {"max_height": max_height} if max_height else {}
    settings: dict[str, Any] = {}
    if max_height is None:
        # Small enough that the progressive MP4 (and the single-file DASH/Bilibili tracks) go through segments.
        settings = {"MEDIA_SEGMENT_THRESHOLD": 32 * 1024, "MEDIA_SEGMENT_SIZE": 16 * 1024}
    result = run_crawl(tmp_path / "crawl", posts, store=tmp_path / "files", listing=sb.url + "/", args=args,
                       settings=settings)

    stored: set[str] = set()
    for name in [*KINDS, "detected"]:
        asset = result.asset(name)
        assert asset["status"] in ("downloaded", "deduplicated"), (name, asset["error"])
        assert asset["path"].endswith(".mp4") and asset["mime"] == "video/mp4"
        assert asset["rendition"]["height"] == height, (name, asset["rendition"])
        assert asset["height"] == height and abs(asset["duration"] - catalog.duration) <= 0.02 * catalog.duration
        path = result.store / asset["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == asset["sha256"]
        assert_playable(path, height=height, duration=catalog.duration)
        stored.add(asset["path"])
    # The progressive file is stored byte for byte (a faststart MP4 needs no remux).
    assert result.asset("progressive")["sha256"] == expected.progressive_sha256
    # The audio of separate-audio sources was selected and recorded.
    assert result.asset("dash")["rendition"]["audio_rendition"] == "audio"
    assert result.asset("hls_aes")["rendition"]["rendition"] == f"hls-{[360, 480, 720].index(height)}"
    # The Bilibili video was selected among the renditions its post carries: stream and audio by their ids, and no
    # request to the platform's API from the media path (a playurl is the spider's API request).
    bili = result.asset("bilibili_playurl")["rendition"]
    assert (bili["rendition"], bili["audio_rendition"]) == (f"{expected.qn}-7", str(catalog.audio.bili_id)), bili
    assert not [e for e in sb.requests() if e["path"].startswith("/bilibili/")]
    assert any(p.startswith(f"/media/bili/cos/{VID}/") for p in media_paths(sb))

    dropped, picture = result.asset("dropped", 0), result.asset("dropped", 1)
    assert dropped["status"] == "failed" and dropped["path"] is None
    assert dropped["error"].startswith("fragment-missing: video fragment 2 of 4 failed: http-404"), dropped["error"]
    assert picture["status"] == "downloaded"
    # No MP4 of the dropped video anywhere: the store holds exactly the objects the records point at.
    assert {p.relative_to(result.store).as_posix() for p in result.objects()} == stored | {picture["path"]}
    assert result.stats["media/failed/fragment-missing"] == 1

    log = media_paths(sb)
    drop_rendition = expected.name
    # One try: a 404 is not in RETRY_HTTP_CODES, and fragments follow Scrapy's retry rules (counted once).
    assert log.count(f"/media/hls/{DROP_VID}/{drop_rendition}/seg2.m4s") == 1
    # Only the selected rendition's fragments were fetched.
    others = {r.name for r in catalog.video} - {expected.name}
    assert not [p for p in log if p.startswith(f"/media/hls/{VID}/") and p.split("/")[4] in others]
    if max_height is None:
        # The progressive MP4 came as Range segments (probe + 16 KiB pieces) and is byte-identical.
        ranged = [e for e in sb.requests() if e["path"] == f"/media/progressive/{VID}/720p.mp4"]
        assert len(ranged) == 1 + -(-(expected.progressive_size - 32 * 1024) // (16 * 1024))
        assert all(e["range"] and e["status"] == 206 for e in ranged)
        assert result.stats["media/segments/requests"] >= len(ranged)


def ledger_of(store: Path, key: str) -> Path:
    return video_dir_for(store / "spool", key=asset_index_key(platform="sandbox", kind="video", key=key)) / LEDGER_NAME


def done_in_ledger(ledger_file: Path) -> int:
    try:
        data = json.loads(ledger_file.read_text())
    except (OSError, ValueError):
        return 0
    return sum(len(v) for v in data["done"].values())


def kill_mid_video(sb: SandboxProcess, workdir: Path, posts: list[Post], *, store: Path, ledger_file: Path,
                   at_least: int) -> int:
    """Crawl with slow media, SIGKILL the crawl once ``at_least`` fragments are in the ledger; return how many
    the ledger holds afterwards."""
    sb.set_faults(media_latency_ms=300)
    command = crawl_command(workdir, posts, store=store, listing=sb.url + "/")
    with open(workdir / "stderr.log", "w") as err:
        proc = subprocess.Popen(command, cwd=workdir, env=crawl_env(), stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 60
            while done_in_ledger(ledger_file) < at_least and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)  # bounded by the deadline
            assert proc.poll() is None, "the crawl ended before it could be killed"
            assert done_in_ledger(ledger_file) >= at_least, "no fragment in the ledger within 60 s"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    return done_in_ledger(ledger_file)


@pytest.mark.slow
def test_killed_crawl_resumes_and_fetches_only_missing_fragments(tmp_path: Path, sb: SandboxProcess) -> None:
    catalog = video.video_catalog(KILL_VID)
    url = video.video_urls(sb.url, KILL_VID)["dash"]
    posts = [post("kill", MediaAsset(kind="video", key=f"{KILL_VID}-kill", url=url, manifest="dash"))]
    store = tmp_path / "files"
    fragment = re.compile(rf"^/media/dash/{KILL_VID}/(720p|audio)/(init\.mp4|seg\d+\.m4s)$")
    total = 2 * (1 + catalog.segment_count)  # video + audio: init + fragments
    ledger_file = ledger_of(store, f"{KILL_VID}-kill")

    kept = kill_mid_video(sb, tmp_path / "first", posts, store=store, ledger_file=ledger_file, at_least=3)
    assert 3 <= kept < total
    first_log = [p for p in media_paths(sb) if fragment.match(p)]

    sb.reset()
    result = run_crawl(tmp_path / "second", posts, store=store, listing=sb.url + "/")
    asset = result.asset("kill")
    assert asset["status"] == "downloaded", asset["error"]
    assert_playable(store / asset["path"], height=720, duration=catalog.duration)
    second_log = [p for p in media_paths(sb) if fragment.match(p)]
    assert result.stats["media/video/fragments_resumed"] == kept
    assert result.stats["media/video/fragments"] == total - kept == len(second_log)
    counts = Counter(first_log + second_log)
    assert len(counts) == total  # every fragment was fetched…
    # …once, except those in flight (or written but not yet in the ledger) when the crawl was killed.
    assert sum(counts.values()) - total <= len(first_log) - kept
    assert len(first_log) - kept <= 4 + 1  # MEDIA_FRAGMENT_CONCURRENCY + the save that was under way
    assert not ledger_file.parent.exists()  # the spool is gone once the MP4 is stored


@pytest.mark.slow
def test_another_rendition_on_resume_starts_the_spool_over(tmp_path: Path, sb: SandboxProcess) -> None:
    catalog = video.video_catalog(KILL_VID)
    url = video.video_urls(sb.url, KILL_VID)["dash_timeline"]
    posts = [post("switch", MediaAsset(kind="video", key=f"{KILL_VID}-switch", url=url, manifest="dash"))]
    store = tmp_path / "files"
    ledger_file = ledger_of(store, f"{KILL_VID}-switch")
    kept = kill_mid_video(sb, tmp_path / "first", posts, store=store, ledger_file=ledger_file, at_least=2)
    assert kept >= 2 and (ledger_file.parent / "video").is_dir()

    sb.reset()
    result = run_crawl(tmp_path / "second", posts, store=store, listing=sb.url + "/", args={"max_height": 480})
    asset = result.asset("switch")
    assert asset["status"] == "downloaded" and asset["rendition"]["height"] == 480, asset
    assert_playable(store / asset["path"], height=480, duration=catalog.duration)
    assert "media/video/fragments_resumed" not in result.stats  # nothing of the 720p spool was reused
    assert result.stats["media/video/fragments"] == 2 * (1 + catalog.segment_count)
    assert not [p for p in media_paths(sb) if "/720p/" in p]


@pytest.mark.slow
def test_hostile_manifests_are_refused_quickly_without_a_segment_request(tmp_path: Path,
                                                                        sb: SandboxProcess) -> None:
    posts = []
    for case in HOSTILE:
        manifest = None if case == "gopher.mpd" else ("dash" if case.endswith(".mpd") else "hls")
        posts.append(post(case, MediaAsset(kind="video", key=f"hostile-{case}", url=f"{sb.url}/media/hostile/{case}",
                                           manifest=manifest)))
    result = run_crawl(tmp_path / "crawl", posts, store=tmp_path / "files", listing=sb.url + "/")
    for case in HOSTILE:
        asset = result.asset(case)
        assert asset["status"] == "failed" and asset["error"].startswith("manifest-refused: "), (case, asset)
    assert "segments" in result.asset("million.m3u8")["error"] and "20000" in result.asset("million.m3u8")["error"]
    assert "1000000001 segments" in result.asset("huge_timeline.mpd")["error"]
    for case, scheme in (("file_uri.m3u8", "file"), ("data_uri.m3u8", "data"), ("gopher.m3u8", "gopher"),
                         ("gopher.mpd", "gopher")):
        assert f"scheme '{scheme}' not allowed" in result.asset(case)["error"]
    assert result.stats["media/video/manifest_refused"] == len(HOSTILE)
    # Each refusal took well under a second, from the first request to the verdict.
    assert result.stats["media/video/manifest_refused_max_ms"] < 1000
    # Only the manifests themselves were requested: no segment, init or key of any of them.
    assert sorted(media_paths(sb)) == sorted(f"/media/hostile/{case}" for case in HOSTILE)
    assert not result.objects()


@pytest.mark.slow
def test_progressive_video_is_held_to_its_declared_duration(tmp_path: Path, sb: SandboxProcess) -> None:
    prog = video.video_urls(sb.url, VID)["progressive"]["480p"]
    actual = video.video_catalog(VID).duration
    posts = [post("right", MediaAsset(kind="video", key="dur-right", url=prog, duration=actual)),
             post("wrong", MediaAsset(kind="video", key="dur-wrong", url=prog + "?x=1", duration=actual * 3))]
    result = run_crawl(tmp_path / "crawl", posts, store=tmp_path / "files", listing=sb.url + "/")
    assert result.asset("right")["status"] == "downloaded"
    wrong = result.asset("wrong")
    assert wrong["status"] == "failed" and wrong["error"].startswith("assembly-failed"), wrong
    assert "duration" in wrong["error"]
    assert len(result.objects()) == 1


@pytest.mark.slow
def test_fragments_are_not_paced_like_the_api(tmp_path: Path, sb: SandboxProcess) -> None:
    # DOWNLOAD_DELAY paces the platform APIs; at 3 s per request this video's 10 media requests would take 27 s+.
    hls = video.video_urls(sb.url, VID)["hls"]
    result = run_crawl(tmp_path / "crawl", [post("paced", MediaAsset(kind="video", key="paced", url=hls,
                                                                     manifest="hls"))],
                       store=tmp_path / "files", listing=sb.url + "/",
                       settings={"DOWNLOAD_DELAY": 3, "RANDOMIZE_DOWNLOAD_DELAY": "False"})
    assert result.asset("paced")["status"] == "downloaded"
    assert len(media_paths(sb)) >= 6 and result.seconds < 15, (len(media_paths(sb)), result.seconds)


@pytest.mark.slow
def test_fragments_beyond_the_byte_cap_stop_the_video(tmp_path: Path, sb: SandboxProcess) -> None:
    # A plain HLS playlist declares no sizes: the bytes actually stored are what the cap counts.
    hls = video.video_urls(sb.url, VID)["hls"]
    result = run_crawl(tmp_path / "crawl", [post("big", MediaAsset(kind="video", key="capped", url=hls,
                                                                   manifest="hls"))],
                       store=tmp_path / "files", listing=sb.url + "/", settings={"MEDIA_MANIFEST_MAX_BYTES": 20_000})
    asset = result.asset("big")
    assert asset["status"] == "failed" and asset["error"].startswith("too-large: "), asset
    assert "MEDIA_MANIFEST_MAX_BYTES" in asset["error"]
    assert not result.objects()
    assert result.stats["media/video/failed/too-large"] == 1


def test_a_playurl_is_not_a_manifest_of_the_media_path(tmp_path: Path, sb: SandboxProcess) -> None:
    """A platform API answer reaches the media path only as renditions its parser read: a playurl URL as the
    asset's file is JSON, not media; ``manifest="bilibili"`` is no kind the media path knows (never fetched)."""
    url = video.video_urls(sb.url, VID)["bilibili_playurl"]
    posts = [post("sniffed", MediaAsset(kind="video", key=f"{VID}-sniffed", url=url), platform="bilibili"),
             post("declared", MediaAsset(kind="video", key=f"{VID}-declared", url=url + "&qn=32",
                                         manifest="bilibili"), platform="bilibili")]
    result = run_crawl(tmp_path / "crawl", posts, store=tmp_path / "files", listing=sb.url + "/")
    sniffed, declared = result.asset("sniffed"), result.asset("declared")
    assert sniffed["status"] == "failed" and sniffed["error"].startswith("not-media"), sniffed["error"]
    assert declared["status"] == "failed" and declared["error"].startswith("manifest-unknown"), declared["error"]
    assert not result.objects()
    assert len([e for e in sb.requests() if e["path"].startswith("/bilibili/")]) == 1  # the sniffed one only
    assert not media_paths(sb)


# --- pure helpers (fast) ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("head", "kind"), [
    (b"#EXTM3U\n#EXT-X-VERSION:3\n", "hls"),
    (b"\xef\xbb\xbf#EXTM3U\n", "hls"),
    (b'<?xml version="1.0"?>\n<MPD xmlns="urn:mpeg:dash:schema:mpd:2011">', "dash"),
    (b'{"code":0,"data":{"dash":{}}}', None),  # a platform API answer is read by parsers/, never as a manifest
    (b"\x00\x00\x00\x20ftypisom", None),
    (b"<html><body>403</body></html>", None),
])
def test_detect_manifest(head: bytes, kind: str | None) -> None:
    assert detect_manifest(head) == kind


def test_find_asset_hands_listed_renditions_and_chapters_to_the_video_path() -> None:
    listed = [{"kind": "progressive", "url": "https://v.example/a.mp4", "height": 720}]
    chapters = [{"start": 0, "end": 2, "title": "开场"}]
    item = post("p", MediaAsset(kind="video", key="a", url="https://v.example/a.mp4", renditions=listed,
                                chapters=chapters),
                MediaAsset(kind="video", key="b", url="https://v.example/b.mp4", manifest="hls"))
    found = find_asset(item, url="https://v.example/a.mp4", index_key=None)[1]
    assert found["renditions"] == listed and found["chapters"] == chapters
    assert find_asset(item, url="https://v.example/b.mp4", index_key=None)[1] == {
        "manifest": "hls", "alternates": [], "duration": None, "renditions": None, "chapters": None}


@pytest.mark.parametrize(("url", "height"), [
    ("http://h/media/progressive/x/720p.mp4", 720),
    ("http://h/media/weibo/video/5368968988906173_720.mp4?sig=1", 720),
    ("http://h/media/weibo/video/5368968988906173_hd.mp4", 480),
    ("http://h/media/weibo/video/5368968988906173_sd.mp4", 360),
    ("http://h/v/clip.mp4", None),
    # Weibo's CDN: hashed (or misleading) file names, the quality in the label argument.
    ("https://f.video.weibocdn.com/o0/hd.mp4?label=mp4_720p&Expires=1", 720),
    ("https://f.video.weibocdn.com/o0/Abc123.mp4?Expires=1&label=mp4_hd", 480),
    ("https://f.video.weibocdn.com/o0/720.mp4?label=mp4_ld&ssig=x", 240),
])
def test_progressive_label_gives_the_height(url: str, height: int | None) -> None:
    manifest = progressive_variants([(progressive_label(url), url)])
    assert manifest.video[0].height == height


@pytest.mark.parametrize(("max_height", "label"), [(None, "mp4_720p"), (480, "mp4_ld")])
def test_max_height_applies_to_a_parsed_weibo_video(max_height: int | None, label: str) -> None:
    # The parser keeps URLs only; their label arguments must still drive the choice (was: 720p at any cap).
    from mediacrawler.media.manifests import select

    from .test_parsers_weibo import FIXTURES, run_case

    posts = run_case(FIXTURES / "video_page_info")["posts"]
    asset = next(m for p in posts for m in p["media"] if m["kind"] == "video" and m["alternates"])
    urls = [asset["url"], *asset["alternates"]]
    variants = progressive_variants([(progressive_label(u), u) for u in urls])
    chosen = select(variants, **({"max_height": max_height} if max_height else {}))
    assert f"label={label}" in chosen.video.fetch.urls[0]


def test_fragment_ledger_round_trip_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_NAME
    ledger = FragmentLedger(key="sandbox/video/a", fingerprint="f" * 64, done={"video": {-1: 10, 0: 20, 3: 5}})
    save_ledger(path, ledger, fsync=False)
    loaded = load_ledger(path, key="sandbox/video/a", parse=FragmentLedger.from_json)
    assert loaded is not None and loaded.done == ledger.done and loaded.fingerprint == ledger.fingerprint
    # Another asset's ledger:
    assert load_ledger(path, key="sandbox/video/b", parse=FragmentLedger.from_json) is None
    path.write_text('{"version": 1, "key": "sandbox/video/a", "fingerprint": "x", "done": {"video": {"0": -1}}}')
    assert load_ledger(path, key="sandbox/video/a", parse=FragmentLedger.from_json) is None  # untrusted
    assert load_ledger(tmp_path / "missing.json", key="k", parse=FragmentLedger.from_json) is None


def test_fingerprint_ignores_signed_queries_but_not_renditions() -> None:
    def plan(rendition: str, query: str) -> FragmentPlan:
        segments = [Segment(i, f"http://cdn/{rendition}/seg{i}.m4s?{query}", 2.0) for i in range(3)]
        return FragmentPlan("video", rendition, Segment(-1, f"http://cdn/{rendition}/init.mp4", None), segments)

    assert plan_fingerprint([plan("720p", "sig=1")]) == plan_fingerprint([plan("720p", "sig=2")])
    assert plan_fingerprint([plan("720p", "sig=1")]) != plan_fingerprint([plan("480p", "sig=1")])


def test_video_dir_never_holds_a_remote_string(tmp_path: Path) -> None:
    path = video_dir_for(tmp_path, key="weibo/video/../../etc/passwd")
    assert path.parent == tmp_path and re.fullmatch(r"[0-9a-f]{64}\.video", path.name)


def test_taking_a_video_dir_clears_what_killed_writes_left(tmp_path: Path) -> None:
    from mediacrawler.media.video import VideoError, _lock_dir

    video_dir = tmp_path / "abc.video"
    (video_dir / "video").mkdir(parents=True)
    kept = [video_dir / LEDGER_NAME, video_dir / "video" / "3.part"]
    stray = [video_dir / f".{LEDGER_NAME}.x1.tmp", video_dir / "video" / ".4.part.x2.tmp"]
    for path in kept + stray:
        path.write_bytes(b"bytes")
    fd = _lock_dir(video_dir)
    try:
        assert all(p.exists() for p in kept) and not any(p.exists() for p in stray)
        with pytest.raises(VideoError):  # and while it is held, nobody else gets it (or cleans under it)
            _lock_dir(video_dir)
    finally:
        os.close(fd)


def test_an_asset_whose_spool_another_request_holds_waits_and_takes_its_object(tmp_path: Path,
                                                                                sb: SandboxProcess) -> None:
    # Two posts carry one video (one key) under two URLs: two requests for one spool, as two workers on a shared
    # FILES_STORE have. The second waits for the first and takes its object; it never fails as spool-busy.
    sb.set_faults(media_latency_ms=150)  # every segment slow: the first download holds the spool for a while
    prog = video.video_urls(sb.url, VID)["progressive"]["480p"]
    posts = [post("first", MediaAsset(kind="video", key="shared-video", url=prog)),
             post("second", MediaAsset(kind="video", key="shared-video", url=prog + "?copy=2"))]
    result = run_crawl(tmp_path / "crawl", posts, store=tmp_path / "files", listing=sb.url + "/",
                       settings={"MEDIA_SEGMENT_THRESHOLD": 65536, "MEDIA_SEGMENT_SIZE": 65536,
                                 "MEDIA_SPOOL_BUSY_WAIT": 60})
    first, second = result.asset("first"), result.asset("second")
    assert {first["status"], second["status"]} == {"downloaded", "deduplicated"}, (first, second)
    assert first["sha256"] == second["sha256"] and len(result.objects()) == 1
    assert result.stats.get("media/spool_busy_waits", 0) >= 1
