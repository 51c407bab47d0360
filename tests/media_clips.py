"""A real H.264/AAC clip, encoded once per test session with PyAV, and packaged by hand the ways streaming servers
package it: MPEG-TS segments (HLS), fragmented-MP4 init + fragments per track (HLS fMP4, DASH SegmentTemplate).

A test module declares its own session fixture around :func:`session_clip` (``pytest_plugins`` is only allowed in
the root conftest); the clip itself is made once per session whichever module asks first.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import av
import pytest
from PIL import Image, ImageDraw

SECONDS = 2
FPS = 24
GOP = 12  # a keyframe every 0.5 s: four TS segments / fMP4 fragments per clip
WIDTH, HEIGHT = 160, 120
SAMPLE_RATE = 48000
# MPEG-TS timestamps start well above zero on real servers (FFmpeg's segmenter starts at 1.4 s); starting at 10 s
# also keeps B-frame dts positive in every segment, so no muxer shifts one segment on its own.
TS_OFFSET_SECONDS = 10


@dataclass(frozen=True)
class Clip:
    """The generated clip and its packagings; durations in seconds."""

    mp4: Path
    duration: float
    ts_segments: list[Path]
    ts_durations: list[float]
    video_init: Path
    video_fragments: list[Path]
    audio_init: Path
    audio_fragments: list[Path]
    video_only_ts: list[Path]
    audio_only_ts: list[Path]


def encode_clip(path: Path, *, seconds: int = SECONDS, width: int = WIDTH, height: int = HEIGHT) -> Path:
    """A ``seconds`` long H.264 (B-frames, GOP 12) + AAC (stereo 48 kHz) MP4 with a moving box and a tone."""
    with av.open(str(path), "w", format="mp4") as out:
        video = out.add_stream("libx264", rate=FPS, options={"preset": "superfast", "g": str(GOP),
                                                             "keyint_min": str(GOP), "sc_threshold": "0"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.codec_context.thread_count = 1
        audio = out.add_stream("aac", rate=SAMPLE_RATE)
        audio.layout = "stereo"  # type: ignore[union-attr]
        for i in range(seconds * FPS):
            image = Image.new("RGB", (width, height), (20 + i * 4 % 200, 60, 140))
            ImageDraw.Draw(image).rectangle(
                (i * width // 60, height // 3, i * width // 60 + width // 8, height // 3 + height // 6),
                fill=(250, 220, 40),
            )
            frame = av.VideoFrame.from_image(image)
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode())
        n = 1024
        for start in range(0, SAMPLE_RATE * seconds, n):
            samples = struct.pack(
                f"<{n}f", *(0.2 * math.sin(2 * math.pi * 440 * (start + k) / SAMPLE_RATE) for k in range(n))
            )
            frame = av.AudioFrame(format="fltp", layout="stereo", samples=n)
            frame.planes[0].update(samples)
            frame.planes[1].update(samples)
            frame.sample_rate, frame.pts = SAMPLE_RATE, start
            out.mux(audio.encode(frame))
        out.mux(audio.encode())
    return path


def split_ts(clip: Path, out_dir: Path, *, segment_seconds: float = 0.5, streams: str = "va",
             prefix: str = "seg") -> tuple[list[Path], list[float]]:
    """Cut ``clip`` into MPEG-TS segments at video keyframes (every ``segment_seconds``), each a standalone TS
    file with its own PAT/PMT, timestamps continuing across segments (as an HLS segmenter writes them).
    ``streams`` picks ``v``ideo, ``a``udio or both; audio-only segments are cut every ``segment_seconds``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    starts: list[float] = []
    with av.open(str(clip)) as src:
        chosen = ([src.streams.video[0]] if "v" in streams else []) + (
            [src.streams.audio[0]] if "a" in streams else [])
        cut_on = src.streams.video[0] if "v" in streams else src.streams.audio[0]
        out = None
        mapping: dict[int, av.stream.Stream] = {}
        boundary = 0.0
        for packet in src.demux(*chosen):
            if packet.dts is None:
                continue
            stream = packet.stream
            seconds = float(packet.pts * stream.time_base)
            if out is None or (stream is cut_on and packet.is_keyframe and seconds >= boundary - 1e-6):
                if out is not None:
                    out.close()
                path = out_dir / f"{prefix}{len(paths):03d}.ts"
                out = av.open(str(path), "w", format="mpegts")
                mapping = {s.index: out.add_stream_from_template(s) for s in chosen}
                paths.append(path)
                starts.append(max(seconds, 0.0))
                boundary = seconds + segment_seconds
            offset = round(TS_OFFSET_SECONDS / stream.time_base)
            packet.pts += offset
            packet.dts += offset
            packet.stream = mapping[stream.index]
            out.mux(packet)
        if out is not None:
            out.close()
        total = float(src.duration / av.time_base)
    durations = [b - a for a, b in zip(starts, starts[1:] + [total], strict=True)]
    return paths, durations


def _boxes(data: bytes) -> list[tuple[bytes, bytes]]:
    """Top-level ISO-BMFF boxes as (type, whole box bytes)."""
    boxes, pos = [], 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8 : pos + 16])[0]
        elif size == 0:
            size = len(data) - pos
        boxes.append((kind, data[pos : pos + size]))
        pos += size
    return boxes


def split_fmp4(clip: Path, out_dir: Path, *, kind: str) -> tuple[Path, list[Path]]:
    """One track of ``clip`` as fragmented MP4, cut into ``init.mp4`` (ftyp+moov) and ``frag-NNN.m4s``
    (moof+mdat) files, as a DASH SegmentTemplate / HLS fMP4 server stores them. Video fragments start at each
    keyframe; audio fragments every 0.5 s."""
    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    if kind == "video":
        options = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}
    else:
        options = {"movflags": "empty_moov+default_base_moof", "frag_duration": "500000"}
    with av.open(str(clip)) as src, av.open(buf, "w", format="mp4", options=options) as out:
        stream = src.streams.video[0] if kind == "video" else src.streams.audio[0]
        ostream = out.add_stream_from_template(stream)
        for packet in src.demux(stream):
            if packet.dts is None:
                continue
            packet.stream = ostream
            out.mux(packet)
    boxes = _boxes(buf.getvalue())
    init = b"".join(box for k, box in boxes if k in (b"ftyp", b"moov"))
    fragments: list[bytes] = []
    pending = b""
    for k, box in boxes:
        if k in (b"styp", b"sidx"):
            pending += box
        elif k == b"moof":
            fragments.append(pending + box)
            pending = b""
        elif k == b"mdat":
            fragments[-1] += box
        # ftyp/moov went into the init; a trailing mfra is an optional index and is dropped
    init_path = out_dir / "init.mp4"
    init_path.write_bytes(init)
    paths = []
    for i, fragment in enumerate(fragments):
        path = out_dir / f"frag-{i + 1:03d}.m4s"
        path.write_bytes(fragment)
        paths.append(path)
    return init_path, paths


def make_clip(root: Path) -> Clip:
    mp4 = encode_clip(root / "clip.mp4")
    with av.open(str(mp4)) as c:
        duration = float(c.duration / av.time_base)
    ts, ts_durations = split_ts(mp4, root / "ts")
    video_only_ts, _ = split_ts(mp4, root / "ts-video", streams="v")
    audio_only_ts, _ = split_ts(mp4, root / "ts-audio", streams="a")
    video_init, video_fragments = split_fmp4(mp4, root / "fmp4-video", kind="video")
    audio_init, audio_fragments = split_fmp4(mp4, root / "fmp4-audio", kind="audio")
    return Clip(
        mp4=mp4,
        duration=duration,
        ts_segments=ts,
        ts_durations=ts_durations,
        video_init=video_init,
        video_fragments=video_fragments,
        audio_init=audio_init,
        audio_fragments=audio_fragments,
        video_only_ts=video_only_ts,
        audio_only_ts=audio_only_ts,
    )


_CLIP: Clip | None = None


def session_clip(tmp_path_factory: pytest.TempPathFactory) -> Clip:
    """The clip, made once per test session (≈0.2 s) and shared by every module that asks for it."""
    global _CLIP
    if _CLIP is None or not _CLIP.mp4.exists():
        _CLIP = make_clip(tmp_path_factory.mktemp("media-clip"))
    return _CLIP
