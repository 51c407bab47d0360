"""Manifest parsing and rendition selection, from fixture files (tests/fixtures/manifests/), and the hostile-manifest
guards (reliability F5): each hostile case must be refused, quickly, before anything is expanded."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from mediacrawler.media.manifests import (
    ByteRange,
    InitSection,
    KeyInfo,
    Manifest,
    ManifestError,
    ManifestLimits,
    PlaylistRef,
    Rendition,
    Segment,
    SegmentedFetch,
    SingleFile,
    codec_family,
    iv_for_sequence,
    parse_dash,
    parse_hls,
    parse_hls_media,
    select,
    with_fetch,
)
from mediacrawler.media.renditions import manifest_from_renditions, progressive_variants
from mediacrawler.parsers import bilibili
from mediacrawler.parsers._common import PlatformError

FIXTURES = Path(__file__).parent / "fixtures" / "manifests"
MPD_URL = "https://cdn.example.com/d/manifest.mpd"
#: A guard is a handful of operations; 0.5 s is a loose bound that still fails if anything gets expanded.
GUARD_SECONDS = 0.5


def text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def payload(name: str) -> Any:
    return json.loads(text(name))


def segments(rendition: Rendition) -> list[Segment]:
    assert isinstance(rendition.fetch, SegmentedFetch)
    return rendition.fetch.segments()


def by_id(manifest: Manifest, rid: str) -> Rendition:
    return next(r for r in manifest.video + manifest.audio if r.id == rid)


@contextmanager
def refused(match: str) -> Iterator[None]:
    """Assert a ManifestError matching ``match``, raised within GUARD_SECONDS."""
    started = time.perf_counter()
    with pytest.raises(ManifestError, match=match):
        yield
    elapsed = time.perf_counter() - started
    assert elapsed < GUARD_SECONDS, f"guard took {elapsed:.3f} s"


# ------------------------------------------------------------------------------------------------------- HLS


def test_hls_master_variants() -> None:
    m = parse_hls(text("hls_master.m3u8"), base_url="https://cdn.example.com/v/master.m3u8?sig=1")
    assert m.source == "hls" and m.duration is None and m.audio == ()
    assert [(r.height, r.codec, r.bandwidth) for r in m.video] == [
        (1080, "avc1", 4_800_000),  # AVERAGE-BANDWIDTH preferred over the peak
        (720, "hevc", 2_400_000),
        (720, "avc1", 2_800_000),
        (480, "avc1", 1_100_000),
    ]
    assert [r.fetch for r in m.video] == [
        PlaylistRef("https://cdn.example.com/v/1080p/index.m3u8"),
        PlaylistRef("https://cdn.example.com/v/720p-hevc/index.m3u8"),
        PlaylistRef("https://cdn.example.com/v/720p/index.m3u8?token=abc"),
        PlaylistRef("https://cdn2.example.com/v/480p/index.m3u8"),
    ]
    assert all(r.has_audio for r in m.video)  # mp4a in CODECS, no separate audio group
    assert m.video[0].frame_rate == pytest.approx(29.97) and m.video[0].width == 1920


def test_hls_master_audio_groups() -> None:
    m = parse_hls(text("hls_master_audio_groups.m3u8"), base_url="https://cdn.example.com/v/master.m3u8")
    assert [(r.height, r.has_audio, r.group) for r in m.video] == [(720, False, "aac-hi"), (360, False, "aac-lo")]
    assert [(a.group, a.codec, a.fetch) for a in m.audio] == [
        ("aac-hi", "mp4a", PlaylistRef("https://cdn.example.com/v/audio/hi/index.m3u8")),
        ("aac-lo", "mp4a", PlaylistRef("https://cdn.example.com/v/audio/lo/index.m3u8")),
    ]
    # The audio comes from the chosen variant's group.
    assert select(m, max_height=1080).audio.group == "aac-hi"  # type: ignore[union-attr]
    assert select(m, max_height=480).audio.group == "aac-lo"  # type: ignore[union-attr]


def test_hls_media_aes128_keys_and_ivs() -> None:
    m = parse_hls(text("hls_media_aes.m3u8"), base_url="https://cdn.example.com/v/720/index.m3u8")
    (r,) = m.video
    assert r.container == "ts" and r.has_audio and m.duration == pytest.approx(13.75)
    assert isinstance(r.fetch, SegmentedFetch) and r.fetch.count == 4 and r.fetch.init is None
    k1 = "https://cdn.example.com/v/720/keys/k1.bin"
    assert segments(r) == [
        # No IV attribute: the media sequence number (7, 8) is the IV.
        Segment(0, "https://cdn.example.com/v/720/seg-7.ts", 4.0, None, KeyInfo("AES-128", k1, iv_for_sequence(7))),
        Segment(1, "https://cdn.example.com/v/720/seg-8.ts", 4.0, None, KeyInfo("AES-128", k1, iv_for_sequence(8))),
        Segment(2, "https://cdn.example.com/abs/seg-9.ts", 3.5, None,
                KeyInfo("AES-128", "https://keys.example.com/k2.bin", bytes(range(16)))),
        Segment(3, "https://other.example.com/seg-10.ts", 2.25, None, None),  # METHOD=NONE
    ]
    assert iv_for_sequence(8) == b"\x00" * 15 + b"\x08"


def test_hls_media_byteranges_and_map() -> None:
    m = parse_hls(text("hls_media_byterange.m3u8"), base_url="https://cdn.example.com/v/720/index.m3u8")
    (r,) = m.video
    main = "https://cdn.example.com/v/720/main.mp4"
    assert r.container == "mp4"
    assert isinstance(r.fetch, SegmentedFetch)
    assert r.fetch.init == InitSection(main, ByteRange(0, 720))
    assert [(s.url, s.byte_range, s.duration) for s in segments(r)] == [
        (main, ByteRange(720, 100_000), 2.0),
        (main, ByteRange(100_720, 90_000), 2.0),  # no offset: right after the previous range
        (main, ByteRange(300_000, 50_000), 1.0),
    ]
    assert ByteRange(720, 100_000).header() == "bytes=720-100719"


def test_hls_master_then_media_playlist() -> None:
    master = parse_hls(text("hls_master.m3u8"), base_url="https://cdn.example.com/v/master.m3u8")
    chosen = select(master, max_height=720).video
    assert isinstance(chosen.fetch, PlaylistRef)
    media = parse_hls_media(text("hls_media_aes.m3u8"), base_url=chosen.fetch.url)
    resolved = with_fetch(chosen, media)
    assert resolved.height == 720 and resolved.codec == "avc1" and resolved.container == "ts"
    assert segments(resolved)[0].url == "https://cdn.example.com/v/720p/seg-7.ts"


@pytest.mark.parametrize(
    ("name", "match"),
    [("hls_live.m3u8", "live HLS"), ("hls_sample_aes.m3u8", "unsupported HLS encryption SAMPLE-AES")],
)
def test_hls_refused_kinds(name: str, match: str) -> None:
    with refused(match):
        parse_hls(text(name), base_url="https://cdn.example.com/v/index.m3u8")


# ------------------------------------------------------------------------------------------------------ DASH


def test_dash_segment_template_number() -> None:
    m = parse_dash(text("dash_number.mpd"), base_url=MPD_URL)
    assert m.source == "dash" and m.duration == pytest.approx(9.5)
    assert [r.id for r in m.video] == ["v1080", "v720-hevc", "v720", "v360"]
    assert [r.id for r in m.audio] == ["a128", "a64"]  # the text AdaptationSet is skipped
    v = by_id(m, "v1080")
    assert (v.codec, v.width, v.height, v.bandwidth, v.container) == ("avc1", 1920, 1080, 4_500_000, "mp4")
    assert v.frame_rate == pytest.approx(29.97, abs=1e-3)
    assert isinstance(v.fetch, SegmentedFetch)
    assert v.fetch.init == InitSection("https://cdn.example.com/d/v1080/init.mp4")
    assert v.fetch.count == 5  # ceil(9.5 s / 2 s)
    segs = segments(v)
    assert [s.url for s in segs] == [f"https://cdn.example.com/d/v1080/seg-{n:05d}.m4s" for n in range(5, 10)]
    assert [s.duration for s in segs] == [2.0, 2.0, 2.0, 2.0, 1.5]
    assert [s.index for s in segs] == [0, 1, 2, 3, 4]
    # A Representation-level SegmentTemplate overrides the AdaptationSet's; $Bandwidth$ is substituted.
    low = segments(by_id(m, "v360"))
    assert low[0].url == "https://cdn.example.com/d/low/v360-1-700000.m4s"
    assert by_id(m, "v360").fetch.init == InitSection("https://cdn.example.com/d/low/v360-init.mp4")  # type: ignore[union-attr]
    assert by_id(m, "a128").fetch.count == 5  # type: ignore[union-attr]


def test_dash_segment_timeline_time_and_repeats() -> None:
    m = parse_dash(text("dash_timeline.mpd"), base_url=MPD_URL)
    (v,) = m.video
    (a,) = m.audio
    # S t=0 d=2 s r=3 → 4 segments; S d=1 s r=-1 → repeat to the Period end (10 s) → 2 more.
    assert [s.url.rsplit("/", 1)[1] for s in segments(v)] == [
        "0.m4s", "180000.m4s", "360000.m4s", "540000.m4s", "720000.m4s", "810000.m4s"
    ]
    assert [s.duration for s in segments(v)] == [2.0, 2.0, 2.0, 2.0, 1.0, 1.0]
    assert v.fetch.duration == pytest.approx(10.0)  # type: ignore[union-attr]
    # r=-1 up to the next S@t (384000), then r=-1 to the Period end; $Number$ from startNumber=0 alongside $Time$.
    assert [s.url.rsplit("/", 1)[1] for s in segments(a)] == [
        "0-0.m4s", "96000-1.m4s", "192000-2.m4s", "288000-3.m4s", "384000-4.m4s", "432000-5.m4s"
    ]
    assert a.fetch.init == InitSection("https://cdn.example.com/d/a/init.mp4")  # type: ignore[union-attr]


def test_dash_baseurl_levels_segment_list_and_segment_base() -> None:
    m = parse_dash(text("dash_baseurl.mpd"), base_url=MPD_URL)
    root = "https://cdn.example.com/root/period1/video/"
    lst = by_id(m, "list-720")
    assert isinstance(lst.fetch, SegmentedFetch)
    assert lst.fetch.init == InitSection(root + "v720/init.mp4", ByteRange(0, 800))
    assert [(s.url, s.byte_range, s.duration) for s in segments(lst)] == [
        (root + "v720/s1.m4s", ByteRange(800, 100_000), 2.0),
        (root + "v720/s2.m4s", None, 2.0),
        ("https://cdn.example.com/abs/s3.m4s", None, 2.0),
    ]
    base = by_id(m, "base-480")
    assert base.fetch == SingleFile(
        urls=(root + "v480.mp4", "https://backup.example.org/v480.mp4"),  # the second BaseURL is a backup
        init_range=ByteRange(0, 900),
        index_range=ByteRange(900, 400),
    )
    assert by_id(m, "audio-file").fetch == SingleFile(urls=("https://audio.example.net/track.m4a",))


def test_dash_refuses_live_and_multi_period() -> None:
    with refused("live MPD"):
        parse_dash(text("dash_dynamic.mpd"), base_url=MPD_URL)
    period = '<Period duration="PT1S"><AdaptationSet mimeType="video/mp4"/></Period>'
    many = f'<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static">{period * 3000}</MPD>'
    with refused("multi-period MPD"):
        parse_dash(many, base_url=MPD_URL)


# ------------------------------------------------------------------------------- renditions (Bilibili playurl)


def listed(name_or_payload: str | dict[str, Any], *, limits: ManifestLimits = ManifestLimits()) -> Manifest:
    """A playurl answer as the media path gets it: read by ``parsers/bilibili.py`` into ``MediaAsset.renditions``
    (and its duration), then :func:`manifest_from_renditions`."""
    data = payload(name_or_payload) if isinstance(name_or_payload, str) else name_or_payload
    return manifest_from_renditions(bilibili.parse_playurl(data), duration=bilibili.playurl_duration(data),
                                    limits=limits)


def test_renditions_from_bilibili_playurl_dash() -> None:
    m = listed("bilibili_playurl.json")
    assert m.source == "renditions" and m.duration == pytest.approx(212.354)  # timelength (ms) beats dash.duration
    assert [(r.id, r.height, r.codec) for r in m.video] == [
        ("80-7", 1080, "avc1"), ("80-12", 1080, "hevc"), ("80-13", 1080, "av01"),
        ("64-12", 720, "hevc"), ("64-7", 720, "avc1"), ("32-7", 480, "avc1"),
    ]
    avc = m.video[0]
    assert isinstance(avc.fetch, SingleFile)
    assert len(avc.fetch.urls) == 3 and avc.fetch.urls[0].startswith("https://upos-sz-mirrorcos.bilivideo.com/")
    assert avc.fetch.urls[1].startswith("https://upos-sz-mirror08c.bilivideo.com/")
    assert avc.fetch.init_range == ByteRange(0, 1001) and avc.fetch.index_range == ByteRange(1001, 500)
    assert avc.frame_rate == pytest.approx(29.97) and avc.bandwidth == 412_345 and not avc.has_audio
    assert (avc.width, avc.codecs, avc.container) == (1920, "avc1.640032", "mp4")
    assert m.video[2].fetch.urls == (m.video[2].fetch.urls[0],)  # type: ignore[union-attr]  # backupUrl null
    assert [(a.id, a.bandwidth, a.codec, a.width) for a in m.audio] == [
        ("30280", 319_112, "mp4a", None), ("30216", 67_125, "mp4a", None)
    ]


def test_renditions_snake_case_only_and_codec_without_codecs() -> None:
    data = payload("bilibili_playurl.json")["data"]
    for entry in data["dash"]["video"] + data["dash"]["audio"]:
        for key in ("baseUrl", "backupUrl", "SegmentBase", "mimeType", "frameRate", "codecs"):
            entry.pop(key, None)
    m = listed(data)  # the bare data object, as in window.__playinfo__.data
    # No "codecs": the family comes from the parser's plain "codec" (Bilibili's codecid, read in parsers/).
    assert [r.codec for r in m.video] == ["avc1", "hevc", "av01", "hevc", "avc1", "avc1"]
    assert m.video[0].fetch.index_range == ByteRange(1001, 500)  # type: ignore[union-attr]
    assert m.video[0].frame_rate == pytest.approx(29.97)
    assert [a.codec for a in m.audio] == [None, None]  # audio has no codec id to go by
    # "codecs" wins over "codec" when both are given; an unknown plain codec is kept unknown.
    (r,) = manifest_from_renditions([{"kind": "video", "url": "https://v.example/a.m4s", "codecs": "hev1.1.6.L150",
                                      "codec": "avc1"}]).video
    assert r.codec == "hevc"
    (r,) = manifest_from_renditions([{"kind": "video", "url": "https://v.example/a.m4s", "codec": "xyz"}]).video
    assert (r.codec, r.id, r.height, r.container) == (None, "video-0", None, "mp4")


def test_renditions_durl_and_errors() -> None:
    m = listed("bilibili_durl.json")
    (r,) = m.video
    assert (r.height, r.has_audio, r.container, m.audio) == (720, True, "mp4", ())
    assert r.id == "progressive-64" and m.duration == pytest.approx(212.354)
    assert r.fetch == SingleFile(
        urls=(
            "https://upos-sz-mirrorcos.bilivideo.com/upgcxcode/47/17/1234567/1234567-1-192.mp4?deadline=1766990000&platform=html5",
            "https://upos-sz-mirror08c.bilivideo.com/upgcxcode/47/17/1234567/1234567-1-192.mp4?deadline=1766990000&platform=html5",
        ),
        size=15_834_567,
    )
    assert select(m).audio is None
    # An error envelope never reaches the media path: the parser refuses it.
    with pytest.raises(PlatformError) as caught:
        bilibili.parse_playurl(payload("bilibili_risk.json"))
    assert caught.value.code == -352
    with refused("no video stream"):
        manifest_from_renditions([])
    audio_only = [r for r in bilibili.parse_playurl(payload("bilibili_playurl.json")) if r["kind"] == "audio"]
    with refused("no video stream"):
        manifest_from_renditions(audio_only)
    for bad, reason in ((None, "not a list"), ("https://v.example/a", "not a list"), ([1], "not an object"),
                        ([{"kind": "subtitle", "url": "https://v.example/a"}], "unknown kind"),
                        ([{"kind": "video"}], "no URL"),
                        ([{"kind": "video", "url": "https://v.example/a", "alternates": "x"}], "not a list"),
                        ([{"kind": "video", "url": "https://v.example/a", "height": "tall"}], "not an integer"),
                        ([{"kind": "video", "url": "https://v.example/a", "segment_base": {"index_range": "9-1"}}],
                         "bad byte range")):
        with refused(reason):
            manifest_from_renditions(bad)  # type: ignore[arg-type]


def test_a_bad_listed_rendition_is_left_out_and_the_good_ones_kept() -> None:
    good = {"kind": "video", "url": "https://v.example/480.m4s", "height": 480, "quality": 32}
    m = manifest_from_renditions([
        {"kind": "video", "url": "file:///etc/passwd", "height": 720, "quality": 64},  # a bad URL
        {"kind": "video", "url": "https://v.example/1080.m4s", "height": "tall"},  # a bad shape
        7, good, {"kind": "audio", "url": "https://v.example/a.m4s", "quality": 30280}])
    assert [r.height for r in m.video] == [480] and len(m.audio) == 1
    assert len(m.skipped) == 3 and "renditions[1]" in m.skipped[1] and "not an integer" in m.skipped[1]
    assert select(m).video.height == 480


# ----------------------------------------------------------------------------------------------- progressive


def test_progressive_weibo_media_info() -> None:
    info = payload("weibo_media_info.json")
    m = progressive_variants(info, duration=info["duration"])
    assert m.duration == pytest.approx(58.4)
    # Same URL under two labels is kept once (with the larger height); non-URL fields are ignored.
    assert [(r.id, r.height) for r in m.video] == [("mp4_sd_url", 360), ("stream_url_hd", 480), ("mp4_720p_mp4", 720)]
    assert all(r.has_audio and isinstance(r.fetch, SingleFile) for r in m.video)
    assert select(m, max_height=1080).video.id == "mp4_720p_mp4"
    assert select(m, max_height=480).video.height == 480
    pairs = [("h264_1080p", "https://v.example.com/a.mp4"), ("hevc_1080p", "https://v.example.com/b.mp4"),
             ("stream", "https://v.example.com/c.m3u8")]
    m2 = progressive_variants(pairs)
    assert [(r.height, r.codec) for r in m2.video] == [(1080, None), (1080, "hevc")]  # the .m3u8 is skipped


# ------------------------------------------------------------------------------------------------- selection


def test_select_rule_height_then_codec_then_bandwidth() -> None:
    dash = parse_dash(text("dash_number.mpd"), base_url=MPD_URL)
    assert select(dash).video.id == "v1080"
    assert select(dash, max_height=720).video.id == "v720"  # avc1 preferred over the hevc 720p
    assert select(dash, max_height=720, codec_preference=["hevc", "avc1"]).video.id == "v720-hevc"
    assert select(dash, max_height=719).video.id == "v360"
    assert select(dash, max_height=100).video.id == "v360"  # nothing fits: the smallest
    sel = select(dash, max_height=720)
    assert sel.audio is not None and sel.audio.id == "a128"  # best audio = highest bandwidth
    assert sel.describe() == {
        "height": 720, "width": 1280, "codec": "avc1", "codecs": "avc1.64001f", "bitrate": 2_500_000,
        "frame_rate": 30.0, "rendition": "v720", "audio_codec": "mp4a", "audio_bitrate": 128_000,
        "audio_rendition": "a128",
    }

    bili = listed("bilibili_playurl.json")
    assert select(bili).video.id == "80-7"
    assert select(bili, codec_preference=("av01", "hevc", "avc1")).video.id == "80-13"
    assert select(bili, codec_preference=("h265",)).video.id == "80-12"  # alias; unlisted codecs rank after
    assert select(bili, max_height=720).video.id == "64-7"
    assert select(bili, max_height=720).audio.id == "30280"  # type: ignore[union-attr]

    hls = parse_hls(text("hls_master.m3u8"), base_url="https://cdn.example.com/v/master.m3u8")
    assert select(hls, max_height=720).video.codec == "avc1"
    assert select(hls, max_height=720).audio is None  # muxed


def test_select_among_equal_height_and_codec_takes_highest_bandwidth() -> None:
    def rendition(rid: str, height: int | None, bandwidth: int | None) -> Rendition:
        return Rendition(kind="video", id=rid, fetch=SingleFile(urls=("https://x.example/a",)), codec="avc1",
                         height=height, bandwidth=bandwidth)

    m = Manifest(source="progressive", video=(rendition("a", 720, 1), rendition("b", 720, 9), rendition("c", None, 99)))
    assert select(m).video.id == "b"
    m = Manifest(source="progressive", video=(rendition("lo", 1440, 1), rendition("hi", 1440, 2)))
    assert select(m, max_height=1080).video.id == "lo"  # over the cap: the least of it


def test_codec_family() -> None:
    assert codec_family("avc1.640032") == "avc1"
    assert codec_family("avc3.4d401e,mp4a.40.2") == "avc1"
    assert codec_family("hev1.1.6.L150.90") == codec_family("hvc1.2.4.L120") == "hevc"
    assert codec_family("av01.0.08M.08") == "av01"
    assert codec_family("mp4a.40.2") == "mp4a"
    assert codec_family("") is None and codec_family("xyz1") is None


# -------------------------------------------------------------------------------------------- hostile (F5)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("hostile_r1e9.mpd", "over the cap of 20000"),
        ("hostile_r1e9_float.mpd", "over the cap of 20000"),
        ("hostile_tiny_duration.mpd", "over the cap of 20000"),
        ("hostile_long.mpd", "duration"),
        ("hostile_entities.mpd", "DTD or entities"),
        ("hostile_xxe.mpd", "DTD or entities"),
        ("hostile_file_baseurl.mpd", "scheme 'file' not allowed"),
        ("hostile_template_scheme.mpd", "scheme 'data' not allowed"),
    ],
)
def test_hostile_mpd(name: str, match: str) -> None:
    with refused(match):
        parse_dash(text(name), base_url=MPD_URL)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("hostile_file_scheme.m3u8", "scheme 'file' not allowed"),
        ("hostile_data_key.m3u8", "HLS key URL scheme 'data' not allowed"),
        ("hostile_gopher_variant.m3u8", "scheme 'gopher' not allowed"),
        ("hostile_ftp_init.m3u8", "HLS init URL scheme 'ftp' not allowed"),
    ],
)
def test_hostile_m3u8(name: str, match: str) -> None:
    with refused(match):
        parse_hls(text(name), base_url="https://cdn.example.com/v/index.m3u8")


def test_hostile_m3u8_million_entries() -> None:
    million = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n" + "#EXTINF:1.000,\nseg-000.ts\n" * 1_000_000 + "#EXT-X-ENDLIST\n"
    with refused("over the cap of 20000"):
        parse_hls(million, base_url="https://cdn.example.com/v/index.m3u8", limits=ManifestLimits(
            max_chars=64 * 1024 * 1024))  # past the size cap, the #EXTINF count must still refuse it
    with refused("characters, over the cap"):
        parse_hls(million, base_url="https://cdn.example.com/v/index.m3u8")
    long = "#EXTM3U\n#EXT-X-TARGETDURATION:99999\n" + "#EXTINF:99999,\ns.ts\n" * 300 + "#EXT-X-ENDLIST\n"
    with refused("duration"):
        parse_hls(long, base_url="https://cdn.example.com/v/index.m3u8")


def test_hostile_mpd_many_entries_refused_before_xml_parsing() -> None:
    entries = '<SegmentURL media="s.m4s"/>' * 500_000  # 13 MB: under the size cap, over the tag budget
    mpd = (f'<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT10S"><Period>'
           f'<AdaptationSet mimeType="video/mp4"><Representation id="v" bandwidth="1"><SegmentList duration="1">'
           f'{entries}</SegmentList></Representation></AdaptationSet></Period></MPD>')
    with refused("tags, over the cap"):
        parse_dash(mpd, base_url=MPD_URL)


def test_hostile_json_sources() -> None:
    renditions = bilibili.parse_playurl(payload("bilibili_playurl.json"))
    hostile = [dict(renditions[0], alternates=[*renditions[0]["alternates"], "file:///etc/passwd"])]
    # The stream with a file:// backup is left out (never fetched, not even its good URL); the others are kept.
    kept = manifest_from_renditions(hostile + renditions[1:])
    assert "scheme 'file' not allowed" in kept.skipped[0]
    assert all("file:" not in u for r in kept.video + kept.audio for u in r.fetch.urls)  # type: ignore[union-attr]
    assert len(kept.video) + len(kept.audio) == len(renditions) - 1
    with refused("scheme 'file' not allowed"):
        manifest_from_renditions(hostile)
    for url in ("javascript:alert(1)", "http:///no-host", "https://v.example/a b"):
        with refused("URL"):
            manifest_from_renditions([{"kind": "progressive", "url": url}])
    with refused("scheme 'javascript' not allowed"):
        progressive_variants({"mp4_720p_mp4": "javascript:alert(1)"})
    huge = payload("bilibili_durl.json")
    huge["data"]["durl"][0]["size"] = 10**15
    with refused("declared bytes"):
        listed(huge)
    with refused("outside 0..100 s"):  # the asset's duration is held to MEDIA_MANIFEST_MAX_DURATION too
        manifest_from_renditions(bilibili.parse_playurl(payload("bilibili_playurl.json")), duration=212.354,
                                 limits=ManifestLimits(max_duration=100))
    with refused("duration"):
        manifest_from_renditions(renditions[:1], duration=float("nan"))
    many = [dict(renditions[0]) for _ in range(65)]
    with refused("65 entries, over the cap of 64"):
        manifest_from_renditions(many)
    one = dict(renditions[0], alternates=[renditions[0]["url"]] * 65)
    with refused("65 alternates, over the cap of 64"):
        manifest_from_renditions([one])
    assert len(manifest_from_renditions(many[:64]).video) == 64  # at the cap: kept, ids made unique
    assert len({r.id for r in manifest_from_renditions(many[:64]).video}) == 64


def test_internal_http_hosts_pass_this_layer() -> None:
    """127.0.0.1 and 169.254.169.254 are http URLs: this layer allows them; the connect-time SSRF guard (F6) is
    what refuses private addresses, so that redirects and DNS rebinding are covered too. ``../../x`` resolves on
    the manifest's own host."""
    m3u8_text = ("#EXTM3U\n#EXTINF:1,\nhttp://127.0.0.1:6379/\n#EXTINF:1,\nhttp://169.254.169.254/latest/meta-data/\n"
                 "#EXTINF:1,\n../../x\n#EXT-X-ENDLIST\n")
    (r,) = parse_hls(m3u8_text, base_url="https://cdn.example.com/a/b/index.m3u8").video
    assert [s.url for s in segments(r)][2] == "https://cdn.example.com/x"


def test_limits_from_settings() -> None:
    limits = ManifestLimits.from_settings(Settings({"MEDIA_MANIFEST_MAX_SEGMENTS": 10,
                                                    "MEDIA_MANIFEST_MAX_DURATION": 60}))
    assert (limits.max_segments, limits.max_duration) == (10, 60.0)
    assert limits.max_bytes == ManifestLimits().max_bytes
    with refused("over the cap of 10"):
        parse_dash(text("dash_timeline.mpd").replace('r="3"', 'r="30"'), base_url=MPD_URL, limits=limits)




@pytest.mark.parametrize(
    "base", ["https://cdn.example.com/a/b/index.m3u8?sig=1&x=/y", "https://cdn.example.com/", "http://h.example/x"]
)
def test_segment_urls_resolve_exactly_like_urljoin(base: str) -> None:
    """The fast path for plain segment names must give what ``urljoin`` gives, and anything unusual must take
    the checked path."""
    from urllib.parse import urljoin

    refs = ["seg-1.ts", "v/seg_2.m4s?token=a/b&c=d", "a.b.c", "../up.ts", "./here.ts", "/abs.ts",
            "//other.example.com/x.ts", "https://x.example/y.ts", "seg%20x.ts", "a/./b.ts", "a/../b.ts", "x.ts#f",
            "name@host.ts", "$weird(1).ts"]
    lines = "".join(f"#EXTINF:1,\n{ref}\n" for ref in refs)
    (r,) = parse_hls(f"#EXTM3U\n{lines}#EXT-X-ENDLIST\n", base_url=base).video
    assert [s.url for s in segments(r)] == [urljoin(base, ref) for ref in refs]
    for bad in ("file:/etc/passwd", "file:passwd", "data:,x", "javascript:alert(1)", "gopher://h/x"):
        with refused("not allowed"):
            parse_hls(f"#EXTM3U\n#EXTINF:1,\n{bad}\n#EXT-X-ENDLIST\n", base_url=base)
