"""Assembly from real fragments: a clip encoded with PyAV (tests/media_clips.py), packaged as MPEG-TS segments and
fragmented MP4, described by manifests our own parsers read, "fetched" from disk by URL, decrypted, remuxed and
verified. No mocks: the only stand-in is the network (a URL → file map)."""

from __future__ import annotations

import math
import os
import random
import shutil
from fractions import Fraction
from pathlib import Path
from urllib.parse import urlsplit

import av
import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from mediacrawler.media.assemble import (
    MAX_CHAPTERS,
    AssemblyError,
    ConcatReader,
    chapter_entries,
    concat_mp4,
    decrypt_aes128,
    ordered_parts,
    remux_to_mp4,
    verify_mp4,
)
from mediacrawler.media.manifests import (
    Rendition,
    SegmentedFetch,
    parse_dash,
    parse_hls_media,
    select,
)
from tests.media_clips import Clip, session_clip

KEY = bytes.fromhex("000102030405060708090a0b0c0d0e0f")


def encrypt_aes128(data: bytes, *, key: bytes, iv: bytes) -> bytes:
    """What an HLS packager does to a segment (the test's side; the code under test only decrypts)."""
    padder = padding.PKCS7(128).padder()
    padded = padder.update(data) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return encryptor.update(padded) + encryptor.finalize()


class Origin:
    """The remote server, on disk: ``https://cdn.example.com/<path>`` is ``root/<path>``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def url(self, relpath: str) -> str:
        return f"https://cdn.example.com/{relpath}"

    def put(self, relpath: str, data: bytes) -> None:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def get(self, url: str) -> bytes:
        parts = urlsplit(url)
        assert parts.scheme == "https" and parts.hostname == "cdn.example.com", url
        return (self.root / parts.path.lstrip("/")).read_bytes()


def fetch_segments(
    origin: Origin, rendition: Rendition, into: Path, *, skip: frozenset[int] = frozenset()
) -> dict[int, Path]:
    """Download (from the origin), decrypt where the manifest says so, and store each fragment by its index:
    what the fragment ledger will hold. ``skip`` simulates fragments that failed for good."""
    assert isinstance(rendition.fetch, SegmentedFetch)
    into.mkdir(parents=True, exist_ok=True)
    keys: dict[str, bytes] = {}
    parts: dict[int, Path] = {}
    for seg in rendition.fetch.segments():
        if seg.index in skip:
            continue
        data = origin.get(seg.url)
        if seg.byte_range is not None:
            data = data[seg.byte_range.start : seg.byte_range.end + 1]
        if seg.key is not None:
            key = keys.setdefault(seg.key.url, origin.get(seg.key.url))
            data = decrypt_aes128(data, key=key, iv=seg.key.iv)
        path = into / f"{seg.index:06d}.part"
        path.write_bytes(data)
        parts[seg.index] = path
    return parts


def init_path(origin: Origin, rendition: Rendition, into: Path) -> Path | None:
    assert isinstance(rendition.fetch, SegmentedFetch)
    if rendition.fetch.init is None:
        return None
    path = into / "init.part"
    path.write_bytes(origin.get(rendition.fetch.init.url))
    return path


@pytest.fixture(scope="session")
def media_clip(tmp_path_factory: pytest.TempPathFactory) -> Clip:
    return session_clip(tmp_path_factory)


@pytest.fixture
def origin(tmp_path: Path) -> Origin:
    return Origin(tmp_path / "origin")


# ----------------------------------------------------------------------------------------------- decryption


def test_decrypt_aes128_roundtrip_and_failures(media_clip: Clip) -> None:
    data = media_clip.ts_segments[0].read_bytes()
    iv = (7).to_bytes(16, "big")
    encrypted = encrypt_aes128(data, key=KEY, iv=iv)
    assert encrypted != data and len(encrypted) % 16 == 0
    assert decrypt_aes128(encrypted, key=KEY, iv=iv) == data
    try:  # a wrong key gives garbage, almost always with invalid padding (≈1/256 passes the padding check)
        assert decrypt_aes128(encrypted, key=bytes(16), iv=iv) != data
    except AssemblyError as exc:
        assert "padding" in exc.reason
    with pytest.raises(AssemblyError, match="multiple of 16"):
        decrypt_aes128(encrypted[:-3], key=KEY, iv=iv)
    with pytest.raises(AssemblyError, match="key is 8 bytes"):
        decrypt_aes128(encrypted, key=KEY[:8], iv=iv)


# ------------------------------------------------------------------------------------------ source kinds


def test_hls_ts_with_encrypted_segments(media_clip: Clip, origin: Origin, tmp_path: Path) -> None:
    """HLS TS, muxed audio, segments 1 and 2 AES-128 (implicit and explicit IV) → one verified MP4."""
    explicit_iv = bytes(range(16, 32))
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-TARGETDURATION:1", "#EXT-X-MEDIA-SEQUENCE:40",
             "#EXT-X-PLAYLIST-TYPE:VOD"]
    origin.put("keys/k.bin", KEY)
    for i, (seg, duration) in enumerate(zip(media_clip.ts_segments, media_clip.ts_durations, strict=True)):
        data = seg.read_bytes()
        if i == 1:
            lines.append('#EXT-X-KEY:METHOD=AES-128,URI="/keys/k.bin"')
            data = encrypt_aes128(data, key=KEY, iv=(40 + i).to_bytes(16, "big"))
        elif i == 2:
            lines.append(f'#EXT-X-KEY:METHOD=AES-128,URI="/keys/k.bin",IV=0x{explicit_iv.hex()}')
            data = encrypt_aes128(data, key=KEY, iv=explicit_iv)
        elif i == 3:
            lines.append("#EXT-X-KEY:METHOD=NONE")
        origin.put(f"hls/ts/{seg.name}", data)
        lines += [f"#EXTINF:{duration:.6f},", seg.name]
    lines.append("#EXT-X-ENDLIST")

    manifest = parse_hls_media("\n".join(lines), base_url=origin.url("hls/ts/index.m3u8"))
    sel = select(manifest)
    assert sel.audio is None and sel.video.container == "ts"
    assert isinstance(sel.video.fetch, SegmentedFetch)
    parts = fetch_segments(origin, sel.video, tmp_path / "frags")
    out = remux_to_mp4(ordered_parts(count=sel.video.fetch.count, parts=parts), None, tmp_path / "out.mp4")
    info = verify_mp4(out, expect_audio=True, expected_duration=manifest.duration)
    assert (info.video_codec, info.audio_codec, info.width, info.height) == ("h264", "aac", 160, 120)
    assert info.faststart
    assert info.duration == pytest.approx(media_clip.duration, rel=0.02)
    assert not (tmp_path / "out.mp4.part").exists()


def test_dash_fmp4_separate_audio(media_clip: Clip, origin: Origin, tmp_path: Path) -> None:
    """DASH SegmentTemplate ($Number$), two video renditions and one audio: the selected video's init +
    fragments and the audio's init + fragments become one MP4 with both streams."""
    for track, init, frags in (("video", media_clip.video_init, media_clip.video_fragments),
                               ("audio", media_clip.audio_init, media_clip.audio_fragments)):
        origin.put(f"dash/{track}/init.mp4", init.read_bytes())
        for frag in frags:
            origin.put(f"dash/{track}/{frag.name}", frag.read_bytes())
    assert len(media_clip.video_fragments) == len(media_clip.audio_fragments) == 4
    mpd = """<?xml version="1.0"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT2S">
  <Period>
    <AdaptationSet contentType="video" mimeType="video/mp4">
      <SegmentTemplate timescale="1000" duration="500" startNumber="1"
                       initialization="$RepresentationID$/init.mp4" media="$RepresentationID$/frag-$Number%03d$.m4s"/>
      <Representation id="video" codecs="avc1.64000c" width="160" height="120" bandwidth="30000"/>
      <Representation id="video-1080" codecs="avc1.640028" width="1920" height="1080" bandwidth="5000000"/>
    </AdaptationSet>
    <AdaptationSet contentType="audio" mimeType="audio/mp4" codecs="mp4a.40.2">
      <SegmentTemplate timescale="1000" duration="500" startNumber="1"
                       initialization="audio/init.mp4" media="audio/frag-$Number%03d$.m4s"/>
      <Representation id="audio" bandwidth="128000"/>
    </AdaptationSet>
  </Period>
</MPD>"""
    manifest = parse_dash(mpd, base_url=origin.url("dash/manifest.mpd"))
    sel = select(manifest, max_height=720)
    assert sel.video.id == "video" and sel.audio is not None and sel.audio.id == "audio"
    assert isinstance(sel.video.fetch, SegmentedFetch) and isinstance(sel.audio.fetch, SegmentedFetch)
    v_parts = fetch_segments(origin, sel.video, tmp_path / "v")
    a_parts = fetch_segments(origin, sel.audio, tmp_path / "a")
    out = remux_to_mp4(
        ordered_parts(count=sel.video.fetch.count, parts=v_parts),
        ordered_parts(count=sel.audio.fetch.count, parts=a_parts),
        tmp_path / "out.mp4",
        init_video=init_path(origin, sel.video, tmp_path / "v"),
        init_audio=init_path(origin, sel.audio, tmp_path / "a"),
    )
    info = verify_mp4(out, expect_audio=True, expected_duration=manifest.duration)
    assert (info.video_codec, info.audio_codec, info.height, info.faststart) == ("h264", "aac", 120, True)
    with av.open(str(out)) as container:  # stream copy: packet counts match the source
        assert sum(1 for p in container.demux(container.streams.video[0]) if p.size) == 48


def test_separate_ts_audio_and_video(media_clip: Clip, tmp_path: Path) -> None:
    """HLS with an alternative audio playlist: video-only TS + audio-only TS."""
    out = remux_to_mp4(media_clip.video_only_ts, media_clip.audio_only_ts, tmp_path / "out.mp4")
    info = verify_mp4(out, expect_audio=True, expected_duration=sum(media_clip.ts_durations))
    assert info.audio_codec == "aac" and info.faststart


def test_progressive_single_file(media_clip: Clip, tmp_path: Path) -> None:
    """A progressive MP4 (or a DASH SegmentBase file) is one part; the remux only rewrites it faststart."""
    out = remux_to_mp4([media_clip.mp4], None, tmp_path / "out.mp4")
    info = verify_mp4(out, expect_audio=True, expected_duration=media_clip.duration)
    assert info.faststart and info.duration == pytest.approx(media_clip.duration, rel=0.02)


# ------------------------------------------------------------------------------------- failure accounting


def test_missing_middle_fragment_is_caught_by_accounting(media_clip: Clip, origin: Origin, tmp_path: Path) -> None:
    for seg in media_clip.ts_segments:
        origin.put(f"ts/{seg.name}", seg.read_bytes())
    playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n" + "".join(
        f"#EXTINF:{d:.6f},\n{s.name}\n" for s, d in zip(media_clip.ts_segments, media_clip.ts_durations, strict=True)
    ) + "#EXT-X-ENDLIST\n"
    manifest = parse_hls_media(playlist, base_url=origin.url("ts/index.m3u8"))
    (rendition,) = manifest.video
    parts = fetch_segments(origin, rendition, tmp_path / "frags", skip=frozenset({2}))
    with pytest.raises(AssemblyError, match=r"1 of 4 fragments missing: 2"):
        ordered_parts(count=4, parts=parts)

    # Why the accounting has to be ours: muxed anyway, the gap keeps the surviving timestamps, so the file opens,
    # decodes and even has the right duration. Only a timestamp-gap scan notices afterwards.
    sloppy = remux_to_mp4([parts[i] for i in sorted(parts)], None, tmp_path / "sloppy.mp4")
    info = verify_mp4(sloppy, expect_audio=True, expected_duration=manifest.duration)
    assert info.duration == pytest.approx(manifest.duration, rel=0.02)
    with pytest.raises(AssemblyError, match="hole in its timestamps"):
        verify_mp4(sloppy, expect_audio=True, expected_duration=manifest.duration, max_gap=0.25)

    empty = tmp_path / "empty.part"
    empty.write_bytes(b"")
    with pytest.raises(AssemblyError, match="missing: 1"):
        ordered_parts(count=2, parts={0: parts[0], 1: empty})  # a zero-byte fragment is not a fragment
    with pytest.raises(AssemblyError, match="unexpected fragment indexes"):
        ordered_parts(count=1, parts={0: parts[0], 1: parts[1]})


def test_corrupt_fragments_fail(media_clip: Clip, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.ts"
    garbage.write_bytes(random.Random(5).randbytes(64 * 1024))
    out = tmp_path / "out.mp4"
    with pytest.raises(AssemblyError):
        remux_to_mp4([garbage], None, out)
    assert not out.exists() and not (tmp_path / "out.mp4.part").exists()

    # An fMP4 track whose init section is replaced by random bytes.
    with pytest.raises(AssemblyError):
        remux_to_mp4(media_clip.video_fragments, None, out, init_video=garbage)
    # Audio parts that are video-only.
    with pytest.raises(AssemblyError, match="no audio stream"):
        remux_to_mp4(media_clip.video_only_ts, media_clip.video_only_ts, out)
    assert not out.exists()


def test_verify_rejects(media_clip: Clip, tmp_path: Path) -> None:
    good = remux_to_mp4(media_clip.ts_segments, None, tmp_path / "good.mp4")
    with pytest.raises(AssemblyError, match="differs from the manifest"):
        verify_mp4(good, expect_audio=True, expected_duration=media_clip.duration * 1.05)
    video_only = remux_to_mp4(media_clip.video_only_ts, None, tmp_path / "video.mp4")
    assert verify_mp4(video_only, expect_audio=False, expected_duration=2.0).audio_codec is None
    with pytest.raises(AssemblyError, match="no audio stream"):
        verify_mp4(video_only, expect_audio=True, expected_duration=2.0)
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 3])  # moov first (faststart), mdat cut
    with pytest.raises(AssemblyError):
        verify_mp4(truncated, expect_audio=True, expected_duration=media_clip.duration)
    with pytest.raises(AssemblyError, match="not an MP4"):
        verify_mp4(media_clip.ts_segments[0], expect_audio=False, expected_duration=None)
    with pytest.raises(AssemblyError, match="no file"):
        verify_mp4(tmp_path / "nothing.mp4", expect_audio=False, expected_duration=None)


def test_concat_reader(tmp_path: Path) -> None:
    paths = []
    for i, chunk in enumerate([b"abc", b"", b"defgh", b"ij"]):
        path = tmp_path / f"{i}.bin"
        path.write_bytes(chunk)
        paths.append(path)
    with ConcatReader(paths) as reader:
        assert reader.size == 10 and reader.read() == b"abcdefghij"
        reader.seek(2)
        assert reader.read(4) == b"cdef"
        reader.seek(-3, os.SEEK_END)
        assert reader.read(10) == b"hij" and reader.read(1) == b""
        reader.seek(-8, os.SEEK_CUR)
        assert reader.tell() == 2 and reader.read(1) == b"c"


def test_copy_of_clip_is_stable(media_clip: Clip, tmp_path: Path) -> None:
    """Fragments read twice through different paths give the same result (no state leaks between remuxes)."""
    copies = [Path(shutil.copy(p, tmp_path / p.name)) for p in media_clip.ts_segments]
    a = remux_to_mp4(copies, None, tmp_path / "a.mp4")
    b = remux_to_mp4(media_clip.ts_segments, None, tmp_path / "b.mp4")
    assert a.read_bytes() == b.read_bytes()


# --- chapters (Bilibili's view_points, MediaAsset.chapters) ------------------------------------------------------
TWO_CHAPTERS = [{"start": 1, "end": 2, "title": "结尾 & 彩蛋"}, {"start": 0, "end": 1, "title": "开场"}]


def chapters_of(path: Path) -> list[tuple[str, float, float]]:
    """``(title, start s, end s)`` of each chapter, as a player reads them from the file."""
    with av.open(str(path)) as container:
        return [(c["metadata"].get("title", ""), float(c["start"] * c["time_base"]),
                 float(c["end"] * c["time_base"])) for c in container.chapters()]


def test_chapters_are_written_into_the_remuxed_mp4_the_same_bytes_every_time(media_clip: Clip,
                                                                              tmp_path: Path) -> None:
    """DASH-style init + fragments per track, remuxed with two chapters: a player sees both with their titles and
    times; the file still verifies; the same inputs give the same bytes (the store names files by their hash)."""
    chapters = chapter_entries(TWO_CHAPTERS, duration=media_clip.duration)
    outs = [remux_to_mp4(media_clip.video_fragments, media_clip.audio_fragments, tmp_path / f"{n}.mp4",
                         init_video=media_clip.video_init, init_audio=media_clip.audio_init, chapters=chapters)
            for n in ("a", "b")]
    assert chapters_of(outs[0]) == [("开场", 0.0, 1.0), ("结尾 & 彩蛋", 1.0, 2.0)]
    info = verify_mp4(outs[0], expect_audio=True, expected_duration=media_clip.duration, max_gap=1.0)
    assert (info.video_codec, info.audio_codec, info.faststart) == ("h264", "aac", True)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    plain = remux_to_mp4(media_clip.video_fragments, media_clip.audio_fragments, tmp_path / "plain.mp4",
                         init_video=media_clip.video_init, init_audio=media_clip.audio_init)
    assert chapters_of(plain) == [] and plain.read_bytes() != outs[0].read_bytes()
    with av.open(str(outs[0])) as container:  # the chapters cost no packet of the media
        assert sum(1 for p in container.demux(container.streams.video[0]) if p.size) == 48


def test_joined_files_carry_chapters_across_the_joins(media_clip: Clip, tmp_path: Path) -> None:
    """Three whole files in a row (a segmented durl): one MP4 of the full duration with a chapter per file. Each
    file's AAC priming packet and B-frame delay reach back before its 0, onto the file before: moved one tick
    later, not refused by the muxer (which failed the join before)."""
    files = [Path(shutil.copy(media_clip.mp4, tmp_path / f"part{n}.mp4")) for n in (1, 2, 3)]
    d = media_clip.duration
    chapters = chapter_entries([{"start": round(n * d, 3), "end": round((n + 1) * d, 3), "title": f"第{n + 1}段"}
                                for n in range(3)], duration=3 * d)
    out = concat_mp4(files, tmp_path / "joined.mp4", chapters=chapters)
    info = verify_mp4(out, expect_audio=True, expected_duration=3 * d, max_gap=1.0)
    assert info.duration == pytest.approx(3 * d, rel=0.02)
    got = chapters_of(out)
    assert [t for t, _, _ in got] == ["第1段", "第2段", "第3段"]
    assert [s for _, s, _ in got] == pytest.approx([0, d, 2 * d], abs=0.002)
    assert got[-1][2] == pytest.approx(3 * d, abs=0.002)
    assert concat_mp4(files, tmp_path / "again.mp4", chapters=chapters).read_bytes() == out.read_bytes()


def test_chapter_entries_keep_what_a_player_can_show_and_drop_the_rest() -> None:
    ms = Fraction(1, 1000)
    got = chapter_entries([
        {"start": 95, "end": 301, "title": "  正片 "},
        {"start": 0, "end": 120, "title": "开场 & 介绍"},  # runs into the next one: cut at its start
        {"start": 301, "end": 900, "title": None},  # untitled: still a chapter; past the video: cut at its end
        {"start": 5, "end": 5, "title": "empty"},
        {"start": 10, "end": 3, "title": "backwards"},
        {"start": -1, "end": 3, "title": "before the start"},
        {"start": True, "end": 3, "title": "a bool"},
        {"start": math.nan, "end": 3, "title": "nan"},
        {"start": 0, "end": 1e300, "title": "huge"},
        {"start": "0", "end": "3", "title": "strings"},
        "not an object",
    ], duration=600.5)
    assert got == [
        {"id": 1, "start": 0, "end": 95_000, "time_base": ms, "metadata": {"title": "开场 & 介绍"}},
        {"id": 2, "start": 95_000, "end": 301_000, "time_base": ms, "metadata": {"title": "正片"}},
        {"id": 3, "start": 301_000, "end": 600_500, "time_base": ms, "metadata": {"title": ""}},
    ]
    assert chapter_entries(None) == [] and chapter_entries([]) == []
    many = chapter_entries([{"start": i, "end": i + 1, "title": "x" * 1000} for i in range(MAX_CHAPTERS + 10)])
    assert len(many) == MAX_CHAPTERS and all(len(c["metadata"]["title"]) == 200 for c in many)
