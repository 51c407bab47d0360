"""Real H.264/AAC video for the sandbox, packaged the ways platforms serve it: HLS (TS, fMP4, AES-128, byte
ranges), DASH (SegmentTemplate ``$Number$``, SegmentTimeline ``$Time$``, SegmentBase with a real ``sidx``),
single-file fMP4 (Bilibili) and progressive faststart MP4.

Reference: docs/sandbox.md, "video.py".
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .bilibili_ids import BVID_RE, BVIDS, cid_for
from .det import stable_hex, stable_int

__all__ = [
    "AES_MEDIA_SEQUENCE",
    "AUDIO_BILI_ID",
    "BILI_MIRRORS",
    "DURATION",
    "FPS",
    "RENDITIONS",
    "SEGMENT_COUNT",
    "SEGMENT_SECONDS",
    "VIDEOS",
    "VIDEO_ID_RE",
    "AudioInfo",
    "RenditionInfo",
    "RenditionSpec",
    "VideoCatalog",
    "VideoPackage",
    "aes_iv",
    "aes_key",
    "encode_tone",
    "paint_frame",
    "video_catalog",
    "video_file",
    "video_package",
    "video_urls",
]

FPS = 25
SEGMENT_SECONDS = 1
SEGMENT_COUNT = 4
DURATION = float(SEGMENT_SECONDS * SEGMENT_COUNT)
SAMPLE_RATE = 48000
AAC_FRAME = 1024
#: AAC frames encoded: 187 × 1024 samples (3.99 s) + the encoder's priming frame = 188 packets, which cut into
#: exactly four 47-packet fragments of ~1 s. (192000 samples would leave a 5th, one-packet fragment.)
AUDIO_FRAMES = 187
AUDIO_BITRATE = 128_000
AUDIO_BILI_ID = 30280
AES_MEDIA_SEQUENCE = 7
#: MPEG-TS timestamps start here (real segmenters start around 1.4 s; positive dts for the AAC priming frame).
TS_OFFSET_SECONDS = 10

VIDEO_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The Bilibili CDN mounts below ``/media/bili/`` (the ``os=`` of a stream URL): same bytes on each.
BILI_MIRRORS: tuple[str, ...] = ("cos", "bak", "ali")
#: The ids the sandbox advertises (any id matching :data:`VIDEO_ID_RE` works). Bilibili bvids are ids too: the
#: Bilibili API serves the video whose id is the bvid.
VIDEOS: tuple[str, ...] = ("sbxvid001", "sbxvid002", *BVIDS)


@dataclass(frozen=True)
class RenditionSpec:
    """A video rendition's fixed properties: ``name`` (``720p``), pixel size, Bilibili quality number ``qn``."""

    name: str
    width: int
    height: int
    qn: int

    @property
    def bili_stream_id(self) -> int:
        """The number in Bilibili's file name for this quality's AVC stream (``…-1-30064.m4s``)."""
        return 30000 + self.qn


RENDITIONS: tuple[RenditionSpec, ...] = (
    RenditionSpec("360p", 640, 360, 16),
    RenditionSpec("480p", 854, 480, 32),
    RenditionSpec("720p", 1280, 720, 64),
)
_BY_NAME = {r.name: r for r in RENDITIONS}

CONTENT_TYPES = {
    "m3u8": "application/vnd.apple.mpegurl",
    "mpd": "application/dash+xml",
    "ts": "video/mp2t",
    "m4s": "video/iso.segment",
    "mp4": "video/mp4",
    "bin": "application/octet-stream",
}


# --------------------------------------------------------------------------------------------- the catalog


@dataclass(frozen=True)
class RenditionInfo:
    """What a client should find for one video rendition.

    ``bandwidth`` is the peak bitrate of its video-only fMP4 fragments (DASH, Bilibili), ``average_bandwidth`` the
    mean; ``hls_bandwidth`` the peak of its A/V TS segments. ``codecs`` is read from the encoded SPS (avcC).
    ``progressive_sha256``/``progressive_size`` describe ``/media/progressive/{id}/{name}.mp4``.
    """

    name: str
    width: int
    height: int
    codecs: str
    bandwidth: int
    average_bandwidth: int
    hls_bandwidth: int
    frame_rate: float
    qn: int
    bili_stream_id: int
    frames: int
    progressive_sha256: str
    progressive_size: int


@dataclass(frozen=True)
class AudioInfo:
    """The audio rendition: AAC-LC (``mp4a.40.2``), stereo, 48 kHz."""

    name: str
    codecs: str
    bandwidth: int
    sample_rate: int
    channels: int
    bili_id: int


@dataclass(frozen=True)
class VideoCatalog:
    """Everything a test needs to know about one video id without talking to the server."""

    video_id: str
    duration: float
    segment_seconds: float
    segment_count: int
    video: tuple[RenditionInfo, ...]
    audio: AudioInfo
    key_hex: str

    def rendition(self, height: int) -> RenditionInfo:
        """The rendition of ``height`` pixels."""
        for r in self.video:
            if r.height == height:
                return r
        raise KeyError(height)


def video_catalog(video_id: str) -> VideoCatalog:
    """The catalog of ``video_id`` (encodes it on first use, like the server)."""
    return video_package(video_id).catalog


def video_urls(base_url: str, video_id: str, *, bilibili_api: str | None = None) -> dict[str, Any]:
    """Entry-point URLs of ``video_id`` per source kind. ``base_url`` is the sandbox origin
    (``http://127.0.0.1:PORT``); ``bilibili_playurl``/``bilibili_view`` use the Bilibili API mount
    (``{base_url}/bilibili`` unless ``bilibili_api`` is given) and are ``None`` unless the id is a bvid."""
    base = base_url.rstrip("/")
    is_bvid = BVID_RE.fullmatch(video_id) is not None
    hls, dash = f"{base}/media/hls/{video_id}", f"{base}/media/dash/{video_id}"
    api = (bilibili_api or f"{base}/bilibili").rstrip("/")
    return {
        "hls": f"{hls}/master.m3u8",
        "hls_fmp4": f"{hls}/master_fmp4.m3u8",
        "hls_aes": f"{hls}/master_aes.m3u8",
        "hls_byterange": f"{hls}/master_byterange.m3u8",
        "dash": f"{dash}/manifest.mpd",
        "dash_timeline": f"{dash}/manifest_timeline.mpd",
        "dash_segmentbase": f"{dash}/manifest_segmentbase.mpd",
        "bilibili_playurl": (f"{api}/x/player/wbi/playurl?bvid={video_id}&cid={cid_for(video_id)}&fnval=16"
                             if is_bvid else None),
        "bilibili_view": f"{api}/x/web-interface/view?bvid={video_id}" if is_bvid else None,
        "progressive": {r.name: f"{base}/media/progressive/{video_id}/{r.name}.mp4" for r in RENDITIONS},
    }


# ------------------------------------------------------------------------------------------- the package


@dataclass
class Track:
    """One track as fragmented MP4: init section, fragments, their decode times/durations (track timescale),
    and the single-file form (init + sidx + fragments) with its byte ranges."""

    init: bytes
    fragments: list[bytes]
    timescale: int
    times: list[int]
    durations: list[int]
    full: bytes = b""
    init_range: tuple[int, int] = (0, 0)  # inclusive byte ranges, as DASH writes them
    index_range: tuple[int, int] = (0, 0)


@dataclass
class VideoPackage:
    """All bytes served for one video id (see the module docstring), plus its :class:`VideoCatalog`."""

    video_id: str
    catalog: VideoCatalog
    tracks: dict[str, Track]  # rendition name or "audio"
    ts: dict[str, list[bytes]]  # A/V muxed TS segments per rendition
    ts_durations: list[float]
    aes_ts: dict[str, list[bytes]]
    progressive: dict[str, bytes]
    key: bytes
    files: dict[tuple[str, ...], tuple[bytes, str]] = field(default_factory=dict)


def aes_key(video_id: str) -> bytes:
    """The AES-128 key of ``video_id``'s encrypted HLS variant (served at ``key.bin``)."""
    return bytes.fromhex(stable_hex("hls-key", video_id, length=32))


def aes_iv(video_id: str, rendition: str, index: int) -> bytes:
    """The IV that encrypts segment ``index`` of ``rendition`` in the AES variant (explicit for 720p,
    implicit = media sequence number for the others)."""
    if rendition == "720p":
        return bytes.fromhex(stable_hex("hls-iv", video_id, length=32))
    return (AES_MEDIA_SEQUENCE + index).to_bytes(16, "big")


#: A directory where packages are kept between processes (docs/sandbox.md, "video.py"): the test suite sets it
#: for its session so that its many sandboxes encode each id once, not once each.
CACHE_ENV = "MEDIACRAWLER_SANDBOX_VIDEO_CACHE"


@lru_cache(maxsize=32)  # ≈2 MB each
def video_package(video_id: str) -> VideoPackage:
    """Encode and package ``video_id`` (cached in memory, and in :data:`CACHE_ENV`'s directory when set; raises
    ``ValueError`` for an id not matching :data:`VIDEO_ID_RE`)."""
    if not VIDEO_ID_RE.fullmatch(video_id):
        raise ValueError(f"bad video id {video_id!r}")
    cache = os.environ.get(CACHE_ENV)
    if not cache:
        return _package(video_id)
    import pickle

    # The directory is the caller's own (a test session's temporary directory), written only by this function:
    # its pickles are as trusted as this module. The encoding is deterministic, so a kept package is the bytes
    # this process would make.
    path = os.path.join(cache, f"{video_id}.pickle")
    try:
        with open(path, "rb") as f:
            return pickle.load(f)  # type: ignore[no-any-return]
    except FileNotFoundError:
        pass
    package = _package(video_id)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{video_id}.")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(package, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # whole or absent: two processes encoding one id both publish the same bytes
    return package


def _package(video_id: str) -> VideoPackage:
    audio_plain = _encode_audio(video_id)
    tracks: dict[str, Track] = {"audio": _fragment(audio_plain, "audio")}
    ts: dict[str, list[bytes]] = {}
    progressive: dict[str, bytes] = {}
    infos: list[RenditionInfo] = []
    ts_durations: list[float] = []
    for spec in RENDITIONS:
        plain, codecs, frames = _encode_video(video_id, spec)
        track = tracks[spec.name] = _fragment(plain, "video")
        ts[spec.name], ts_durations = _ts_segments(plain, audio_plain)
        progressive[spec.name] = _progressive(plain, audio_plain)
        ts_rates = [len(s) * 8 / d for s, d in zip(ts[spec.name], ts_durations, strict=True)]
        infos.append(RenditionInfo(
            name=spec.name, width=spec.width, height=spec.height, codecs=codecs,
            bandwidth=_peak_bitrate(track), average_bandwidth=math.ceil(sum(map(len, track.fragments)) * 8 / DURATION),
            hls_bandwidth=math.ceil(max(ts_rates)), frame_rate=float(FPS), qn=spec.qn,
            bili_stream_id=spec.bili_stream_id, frames=frames,
            progressive_sha256=hashlib.sha256(progressive[spec.name]).hexdigest(),
            progressive_size=len(progressive[spec.name]),
        ))
    for track in tracks.values():
        if len(track.fragments) != SEGMENT_COUNT:  # the layout every manifest declares
            raise RuntimeError(f"packaging produced {len(track.fragments)} fragments, not {SEGMENT_COUNT}")
        _single_file(track)
    key = aes_key(video_id)
    catalog = VideoCatalog(
        video_id=video_id, duration=DURATION, segment_seconds=float(SEGMENT_SECONDS), segment_count=SEGMENT_COUNT,
        video=tuple(infos),
        audio=AudioInfo(name="audio", codecs="mp4a.40.2", bandwidth=_peak_bitrate(tracks["audio"]),
                        sample_rate=SAMPLE_RATE, channels=2, bili_id=AUDIO_BILI_ID),
        key_hex=key.hex(),
    )
    aes_ts = {name: [_encrypt(seg, key, aes_iv(video_id, name, i)) for i, seg in enumerate(segs)]
              for name, segs in ts.items()}
    package = VideoPackage(video_id=video_id, catalog=catalog, tracks=tracks, ts=ts, ts_durations=ts_durations,
                           aes_ts=aes_ts, progressive=progressive, key=key)
    package.files = _file_table(package)
    return package


def _peak_bitrate(track: Track) -> int:
    """The highest bitrate (bits/s) of any fragment of ``track``: what BANDWIDTH/@bandwidth promise."""
    seconds = [d / track.timescale for d in track.durations]
    return math.ceil(max(len(f) * 8 / s for f, s in zip(track.fragments, seconds, strict=True)))


def video_file(parts: Sequence[str]) -> tuple[bytes, str] | None:
    """``(bytes, content type)`` of a path below ``/media`` split into parts (``["hls", id, "master.m3u8"]``),
    or ``None`` when no such file exists. Encodes the id on first use. The segments of a segmented Bilibili
    durl are :func:`mediacrawler_sandbox.durl.durl_file`'s."""
    if len(parts) < 3 or parts[0] not in ("hls", "dash", "bili", "progressive"):
        return None
    if parts[0] == "bili":
        if len(parts) != 4 or parts[1] not in BILI_MIRRORS:
            return None
        video_id, rest = parts[2], ("bili", parts[3])
    else:
        video_id, rest = parts[1], (parts[0], *parts[2:])
    if not VIDEO_ID_RE.fullmatch(video_id):
        return None
    return video_package(video_id).files.get(rest)


def is_video_path(parts: Sequence[str]) -> bool:
    """Whether a ``/media`` path (split) belongs to the video mounts (fragment faults apply to these)."""
    return bool(parts) and parts[0] in ("hls", "dash", "bili", "progressive")


# --------------------------------------------------------------------------------------------- encoding


def _encode_video(video_id: str, spec: RenditionSpec) -> tuple[bytes, str, int]:
    """A plain MP4 with the video track of ``spec``; returns (bytes, RFC 6381 codecs, frame count)."""
    import av

    w, h = spec.width, spec.height
    rng = stable_int("video-colours", video_id, bits=48)
    background = ((rng >> 40) & 0xFF, (rng >> 32) & 0xFF, (rng >> 24) & 0xFF)
    box = (255 - background[0], (rng >> 16) & 0xFF, (rng >> 8) & 0xFF)
    total = FPS * SEGMENT_COUNT * SEGMENT_SECONDS
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=FPS, options={
            "preset": "ultrafast", "crf": "32", "g": str(FPS * SEGMENT_SECONDS),
            "keyint_min": str(FPS * SEGMENT_SECONDS), "sc_threshold": "0", "bf": "0",
        })
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.thread_count = 1  # deterministic bytes
        for i in range(total):
            x = i * (w - w // 8) // total
            second = i // FPS
            frame = paint_frame(w, h, background, [
                (x, h // 3, x + w // 8, h // 3 + h // 6, box),
                (0, h - h // 12, (second + 1) * w // SEGMENT_COUNT, h - 1, (240, 240, 240)),
            ])
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
        extradata = bytes(stream.codec_context.extradata or b"")
    codecs = f"avc1.{extradata[1:4].hex().upper()}" if len(extradata) >= 4 and extradata[0] == 1 else "avc1.42C01F"
    return buf.getvalue(), codecs, total


def _encode_audio(video_id: str) -> bytes:
    """A plain MP4 with a stereo AAC tone whose pitch derives from ``video_id``."""
    import av

    period = 80 + stable_int("tone", video_id, bits=16) % 80  # samples per cycle: 300–600 Hz
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("aac", rate=SAMPLE_RATE)
        stream.layout = "stereo"  # type: ignore[union-attr]
        stream.bit_rate = AUDIO_BITRATE
        encode_tone(out, stream, frames=AUDIO_FRAMES, frame_samples=AAC_FRAME, rate=SAMPLE_RATE, period=period)
    return buf.getvalue()


#: A filled rectangle of a frame: left, top, right, bottom (inclusive, as PIL's ``rectangle``), RGB colour.
Box = tuple[int, int, int, int, tuple[int, int, int]]


def paint_frame(width: int, height: int, background: tuple[int, int, int], boxes: Sequence[Box]) -> Any:
    """A ``yuv420p`` ``av.VideoFrame`` of ``background`` with ``boxes`` painted on it, written into its planes
    directly (a third of the CPU of drawing an RGB image with Pillow and converting it, which was a quarter of
    encoding a video). Colours are converted with BT.601's limited-range matrix, as the encoder expects."""
    import av

    frame = av.VideoFrame(width, height, "yuv420p")
    fill = _yuv(background)
    painted = [(left, top, right, bottom, _yuv(colour)) for left, top, right, bottom, colour in boxes]
    for index, plane in enumerate(frame.planes):
        shift = 1 if index else 0  # the two chroma planes are half size both ways
        stride, rows, cols = plane.line_size, plane.height, plane.width
        pixels = bytearray((fill[index],)) * plane.buffer_size
        for left, top, right, bottom, yuv in painted:
            first, last = max(left >> shift, 0), min((right >> shift) + 1, cols)
            if first >= last:
                continue
            run = bytes((yuv[index],)) * (last - first)
            for row in range(max(top >> shift, 0), min((bottom >> shift) + 1, rows)):
                pixels[row * stride + first:row * stride + last] = run
        plane.update(pixels)
    return frame


def _yuv(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    r, g, b = rgb
    return (round(16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255),
            round(128 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255),
            round(128 + (112.0 * r - 93.786 * g - 18.214 * b) / 255))


def encode_tone(out: Any, stream: Any, *, frames: int, frame_samples: int, rate: int, period: int) -> None:
    """Mux ``frames`` stereo frames of a sine tone (``period`` samples a cycle) through the audio ``stream`` of
    ``out``, then flush the encoder."""
    import av

    cycle = [0.2 * math.sin(2 * math.pi * k / period) for k in range(period)]
    for f in range(frames):
        samples = struct.pack(f"<{frame_samples}f",
                              *(cycle[(f * frame_samples + i) % period] for i in range(frame_samples)))
        frame = av.AudioFrame(format="fltp", layout="stereo", samples=frame_samples)
        frame.planes[0].update(samples)
        frame.planes[1].update(samples)
        frame.sample_rate, frame.pts = rate, f * frame_samples
        out.mux(stream.encode(frame))
    out.mux(stream.encode())


# -------------------------------------------------------------------------------------------- packaging


def _demux(container: Any, stream: Any) -> list[Any]:
    return [p for p in container.demux(stream) if p.dts is not None]


def _fragment(plain: bytes, kind: str) -> Track:
    """One track of ``plain`` as fragmented MP4 (a fragment per keyframe for video, per ~1 s for audio)."""
    import av

    if kind == "video":
        options = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}
    else:
        options = {"movflags": "empty_moov+default_base_moof", "frag_duration": str(SEGMENT_SECONDS * 1_000_000)}
    buf = io.BytesIO()
    with av.open(io.BytesIO(plain)) as src, av.open(buf, "w", format="mp4", options=options) as out:
        stream = src.streams.video[0] if kind == "video" else src.streams.audio[0]
        ostream = out.add_stream_from_template(stream)
        for packet in _demux(src, stream):
            packet.stream = ostream
            out.mux(packet)
    data = buf.getvalue()
    init, fragments = b"", []
    for kind_, start, size in _boxes(data):
        box = data[start : start + size]
        if kind_ in (b"ftyp", b"moov"):
            init += box
        elif kind_ == b"moof":
            fragments.append(box)
        elif kind_ == b"mdat":
            fragments[-1] += box
        # the trailing mfra (random access index) is dropped, as DASH packagers do
    timescale, default_duration = _init_info(init)
    times, durations = [], []
    for fragment in fragments:
        t, d = _fragment_timing(fragment, default_duration)
        times.append(t)
        durations.append(d)
    return Track(init=init, fragments=fragments, timescale=timescale, times=times, durations=durations)


def _single_file(track: Track) -> None:
    """Fill ``track.full``: init + a ``sidx`` indexing every fragment + the fragments (DASH on-demand profile,
    Bilibili's layout), and its Initialization/indexRange byte ranges."""
    refs = b"".join(
        struct.pack(">III", len(f) & 0x7FFFFFFF, d, 0x90000000)  # starts_with_SAP=1, SAP_type=1, delta 0
        for f, d in zip(track.fragments, track.durations, strict=True)
    )
    body = struct.pack(">IIIIIHH", 0, 1, track.timescale, track.times[0], 0, 0, len(track.fragments)) + refs
    sidx = struct.pack(">I4s", 8 + len(body), b"sidx") + body  # version 0, flags 0 (first 4 bytes of body)
    track.full = track.init + sidx + b"".join(track.fragments)
    track.init_range = (0, len(track.init) - 1)
    track.index_range = (len(track.init), len(track.init) + len(sidx) - 1)


def _ts_segments(video_plain: bytes, audio_plain: bytes) -> tuple[list[bytes], list[float]]:
    """A/V muxed MPEG-TS segments cut at every keyframe (each one standalone: PAT/PMT first), timestamps
    continuing across segments from :data:`TS_OFFSET_SECONDS`; returns (segments, durations)."""
    import av

    with av.open(io.BytesIO(video_plain)) as vsrc, av.open(io.BytesIO(audio_plain)) as asrc:
        vstream, astream = vsrc.streams.video[0], asrc.streams.audio[0]
        items = []
        for packet in _demux(vsrc, vstream):
            items.append((float(packet.dts * vstream.time_base), 0, packet, vstream))
        for packet in _demux(asrc, astream):
            items.append((float(packet.dts * astream.time_base), 1, packet, astream))
        items.sort(key=lambda it: (it[0], it[1]))
        buckets: list[list[Any]] = [[] for _ in range(SEGMENT_COUNT)]
        for seconds, _, packet, stream in items:
            index = min(SEGMENT_COUNT - 1, max(0, math.floor(seconds / SEGMENT_SECONDS + 1e-9)))
            buckets[index].append((packet, stream))
        segments = []
        for bucket in buckets:
            buf = io.BytesIO()
            with av.open(buf, "w", format="mpegts") as out:
                mapping = {id(vstream): out.add_stream_from_template(vstream),
                           id(astream): out.add_stream_from_template(astream)}
                for packet, stream in bucket:
                    offset = round(TS_OFFSET_SECONDS / stream.time_base)
                    packet.pts += offset
                    packet.dts += offset
                    packet.stream = mapping[id(stream)]
                    out.mux(packet)
            segments.append(buf.getvalue())
    return segments, [float(SEGMENT_SECONDS)] * SEGMENT_COUNT


def _progressive(video_plain: bytes, audio_plain: bytes) -> bytes:
    """A faststart MP4 with both tracks (the muxer's faststart pass needs a real file: a temporary one)."""
    import av

    fd, path = tempfile.mkstemp(prefix="sandbox-video-", suffix=".mp4")
    os.close(fd)
    try:
        with av.open(io.BytesIO(video_plain)) as vsrc, av.open(io.BytesIO(audio_plain)) as asrc, \
                av.open(path, "w", format="mp4", options={"movflags": "+faststart"}) as out:
            vstream, astream = vsrc.streams.video[0], asrc.streams.audio[0]
            vout, aout = out.add_stream_from_template(vstream), out.add_stream_from_template(astream)
            items = [(float(p.dts * vstream.time_base), 0, p, vout) for p in _demux(vsrc, vstream)]
            items += [(float(p.dts * astream.time_base), 1, p, aout) for p in _demux(asrc, astream)]
            for _, _, packet, ostream in sorted(items, key=lambda it: (it[0], it[1])):
                packet.stream = ostream
                out.mux(packet)
        with open(path, "rb") as fh:
            return fh.read()
    finally:
        os.unlink(path)


def _encrypt(data: bytes, key: bytes, iv: bytes) -> bytes:
    """AES-128-CBC with PKCS#7 padding over a whole segment (RFC 8216 §4.3.2.4)."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    padder = padding.PKCS7(128).padder()
    padded = padder.update(data) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return encryptor.update(padded) + encryptor.finalize()


# ------------------------------------------------------------------------------------------- ISO-BMFF


def _boxes(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[bytes, int, int]]:
    """``(type, offset, size)`` of the boxes in ``data[start:end]`` (sizes include the header)."""
    end = len(data) if end is None else end
    out, pos = [], start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8 : pos + 16])[0]
        elif size == 0:
            size = end - pos
        out.append((kind, pos, size))
        pos += size
    return out


def _find(data: bytes, path: Sequence[bytes], start: int = 0, end: int | None = None) -> tuple[int, int] | None:
    """``(payload offset, box end)`` of the first box along ``path`` (container boxes only)."""
    for kind, offset, size in _boxes(data, start, end):
        if kind == path[0]:
            if len(path) == 1:
                return offset + 8, offset + size
            return _find(data, path[1:], offset + 8, offset + size)
    return None


def _init_info(init: bytes) -> tuple[int, int]:
    """(media timescale from ``mdhd``, default sample duration from ``trex``) of an init section."""
    mdhd = _find(init, [b"moov", b"trak", b"mdia", b"mdhd"])
    assert mdhd is not None
    at = mdhd[0] + (20 if init[mdhd[0]] == 1 else 12)  # after version/flags and the creation/modification times
    timescale = struct.unpack(">I", init[at : at + 4])[0]
    trex = _find(init, [b"moov", b"mvex", b"trex"])
    default_duration = struct.unpack(">I", init[trex[0] + 12 : trex[0] + 16])[0] if trex else 0
    return timescale, default_duration


def _fragment_timing(fragment: bytes, trex_duration: int) -> tuple[int, int]:
    """(``tfdt`` base media decode time, total sample duration) of one ``moof``+``mdat``."""
    tfdt = _find(fragment, [b"moof", b"traf", b"tfdt"])
    tfhd = _find(fragment, [b"moof", b"traf", b"tfhd"])
    trun = _find(fragment, [b"moof", b"traf", b"trun"])
    assert tfdt is not None and tfhd is not None and trun is not None
    if fragment[tfdt[0]] == 1:
        base = struct.unpack(">Q", fragment[tfdt[0] + 4 : tfdt[0] + 12])[0]
    else:
        base = struct.unpack(">I", fragment[tfdt[0] + 4 : tfdt[0] + 8])[0]
    flags = int.from_bytes(fragment[tfhd[0] + 1 : tfhd[0] + 4], "big")
    pos = tfhd[0] + 8 + (8 if flags & 0x1 else 0) + (4 if flags & 0x2 else 0)
    default_duration = struct.unpack(">I", fragment[pos : pos + 4])[0] if flags & 0x8 else trex_duration
    tflags = int.from_bytes(fragment[trun[0] + 1 : trun[0] + 4], "big")
    count = struct.unpack(">I", fragment[trun[0] + 4 : trun[0] + 8])[0]
    pos = trun[0] + 8 + (4 if tflags & 0x1 else 0) + (4 if tflags & 0x4 else 0)
    per_sample = 4 * (tflags & 0xF00).bit_count()
    if not tflags & 0x100:
        return base, default_duration * count
    total = 0
    for _ in range(count):
        total += struct.unpack(">I", fragment[pos : pos + 4])[0]
        pos += per_sample
    return base, total


# ------------------------------------------------------------------------------------------- manifests


def _file_table(p: VideoPackage) -> dict[tuple[str, ...], tuple[bytes, str]]:
    """Every served file of a package keyed by its path parts (with the id left out)."""
    ct = CONTENT_TYPES
    files: dict[tuple[str, ...], tuple[bytes, str]] = {}
    hls: dict[tuple[str, ...], bytes | str] = {}
    hls[("master.m3u8",)] = _hls_master(p, "index.m3u8", fmp4=False)
    hls[("master_fmp4.m3u8",)] = _hls_master(p, "fmp4.m3u8", fmp4=True)
    hls[("master_aes.m3u8",)] = _hls_master(p, "aes.m3u8", fmp4=False)
    hls[("master_byterange.m3u8",)] = _hls_master(p, "byterange.m3u8", fmp4=False)
    hls[("key.bin",)] = p.key
    for name in [r.name for r in RENDITIONS] + ["audio"]:
        track = p.tracks[name]
        hls[(name, "fmp4.m3u8")] = _hls_media(
            [(f"seg{i}.m4s", d / track.timescale, None) for i, d in enumerate(track.durations)], init="init.mp4")
        hls[(name, "init.mp4")] = track.init
        for i, fragment in enumerate(track.fragments):
            hls[(name, f"seg{i}.m4s")] = fragment
        files[("dash", name, "init.mp4")] = (track.init, ct["mp4"])
        files[("dash", name, "full.mp4")] = (track.full, ct["mp4"])
        for i, (fragment, t) in enumerate(zip(track.fragments, track.times, strict=True)):
            files[("dash", name, f"seg{i + 1}.m4s")] = (fragment, ct["m4s"])
            files[("dash", name, f"t{t}.m4s")] = (fragment, ct["m4s"])
    for name, segments in p.ts.items():
        hls[(name, "index.m3u8")] = _hls_media([(f"seg{i}.ts", d, None) for i, d in enumerate(p.ts_durations)])
        offsets, pos = [], 0
        for i, segment in enumerate(segments):
            hls[(name, f"seg{i}.ts")] = segment
            offsets.append((pos, len(segment)))
            pos += len(segment)
        hls[(name, "all.ts")] = b"".join(segments)
        hls[(name, "byterange.m3u8")] = _hls_media(
            [("all.ts", d, f"{length}@{off}") for d, (off, length) in zip(p.ts_durations, offsets, strict=True)])
        for i, segment in enumerate(p.aes_ts[name]):
            hls[(name, f"enc{i}.ts")] = segment
        explicit = aes_iv(p.video_id, name, 0) if name == "720p" else None
        hls[(name, "aes.m3u8")] = _hls_media(
            [(f"enc{i}.ts", d, None) for i, d in enumerate(p.ts_durations)],
            key=("../key.bin", explicit), sequence=AES_MEDIA_SEQUENCE)
    for parts, body in hls.items():
        data = body.encode() if isinstance(body, str) else body
        ext = parts[-1].rsplit(".", 1)[-1]
        files[("hls", *parts)] = (data, ct[ext])
    for kind in ("number", "timeline", "segmentbase"):
        name = {"number": "manifest.mpd", "timeline": "manifest_timeline.mpd",
                "segmentbase": "manifest_segmentbase.mpd"}[kind]
        files[("dash", name)] = (_mpd(p, kind).encode(), ct["mpd"])
    cid = cid_for(p.video_id)
    for spec in RENDITIONS:
        files[("bili", f"{cid}-1-{spec.bili_stream_id}.m4s")] = (p.tracks[spec.name].full, ct["mp4"])
        files[("bili", f"{cid}-1-{spec.qn}.mp4")] = (p.progressive[spec.name], ct["mp4"])
        files[("progressive", f"{spec.name}.mp4")] = (p.progressive[spec.name], ct["mp4"])
    files[("bili", f"{cid}-1-{AUDIO_BILI_ID}.m4s")] = (p.tracks["audio"].full, ct["mp4"])
    return files


def _hls_master(p: VideoPackage, playlist: str, *, fmp4: bool) -> str:
    lines = ["#EXTM3U", "#EXT-X-VERSION:7" if fmp4 else "#EXT-X-VERSION:4", "#EXT-X-INDEPENDENT-SEGMENTS"]
    audio = p.catalog.audio
    if fmp4:
        lines.append('#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aac",NAME="default",LANGUAGE="und",DEFAULT=YES,'
                     f'AUTOSELECT=YES,CHANNELS="{audio.channels}",URI="audio/{playlist}"')
    for info in p.catalog.video:
        bandwidth = info.bandwidth + audio.bandwidth if fmp4 else info.hls_bandwidth
        attrs = (f"BANDWIDTH={bandwidth},RESOLUTION={info.width}x{info.height},"
                 f'CODECS="{info.codecs},{audio.codecs}",FRAME-RATE={info.frame_rate:.3f}')
        if fmp4:
            attrs += ',AUDIO="aac"'
        lines += [f"#EXT-X-STREAM-INF:{attrs}", f"{info.name}/{playlist}"]
    return "\n".join(lines) + "\n"


def _hls_media(segments: list[tuple[str, float, str | None]], *, init: str | None = None,
               key: tuple[str, bytes | None] | None = None, sequence: int = 0) -> str:
    # RFC 8216 §4.3.3.1: every EXTINF rounded to the nearest integer is at most the target duration.
    target = max(1, math.floor(max(d for _, d, _ in segments) + 0.5))
    lines = ["#EXTM3U", "#EXT-X-VERSION:7" if init else "#EXT-X-VERSION:4", f"#EXT-X-TARGETDURATION:{target}",
             f"#EXT-X-MEDIA-SEQUENCE:{sequence}", "#EXT-X-PLAYLIST-TYPE:VOD"]
    if init:
        lines.append(f'#EXT-X-MAP:URI="{init}"')
    if key:
        iv = f",IV=0x{key[1].hex().upper()}" if key[1] is not None else ""
        lines.append(f'#EXT-X-KEY:METHOD=AES-128,URI="{key[0]}"{iv}')
    for uri, duration, byterange in segments:
        lines.append(f"#EXTINF:{duration:.5f},")
        if byterange:
            lines.append(f"#EXT-X-BYTERANGE:{byterange}")
        lines.append(uri)
    lines.append("#EXT-X-ENDLIST")
    return "\n".join(lines) + "\n"


def _iso(seconds: float) -> str:
    return f"PT{seconds:.3f}S"


def _timeline_runs(track: Track) -> list[tuple[int, int, int]]:
    """The fragments of ``track`` as SegmentTimeline ``(t, d, r)`` runs (``r`` = extra repeats)."""
    runs: list[list[int]] = []
    for t, d in zip(track.times, track.durations, strict=True):
        if runs and runs[-1][1] == d and runs[-1][0] + d * (runs[-1][2] + 1) == t:
            runs[-1][2] += 1
        else:
            runs.append([t, d, 0])
    return [(t, d, r) for t, d, r in runs]


def _mpd_addressing(kind: str, name: str, track: Track, indent: str) -> list[str]:
    """The segment addressing element(s) of one Representation (or AdaptationSet) of an MPD of ``kind``."""
    if kind == "number":
        return [(f'{indent}<SegmentTemplate timescale="{track.timescale}" duration="{track.durations[0]}" '
                 'startNumber="1" initialization="$RepresentationID$/init.mp4" '
                 'media="$RepresentationID$/seg$Number$.m4s"/>')]
    if kind == "timeline":
        lines = [(f'{indent}<SegmentTemplate timescale="{track.timescale}" '
                  'initialization="$RepresentationID$/init.mp4" media="$RepresentationID$/t$Time$.m4s">'),
                 f"{indent}  <SegmentTimeline>"]
        for i, (t, d, r) in enumerate(_timeline_runs(track)):
            start = f't="{t}" ' if i == 0 else ""
            repeat = f' r="{r}"' if r else ""
            lines.append(f'{indent}    <S {start}d="{d}"{repeat}/>')
        return [*lines, f"{indent}  </SegmentTimeline>", f"{indent}</SegmentTemplate>"]
    # segmentbase: one file per Representation, indexed by its sidx
    return [f"{indent}<BaseURL>{name}/full.mp4</BaseURL>",
            (f'{indent}<SegmentBase timescale="{track.timescale}" '
             f'indexRange="{track.index_range[0]}-{track.index_range[1]}" indexRangeExact="true">'),
            f'{indent}  <Initialization range="{track.init_range[0]}-{track.init_range[1]}"/>',
            f"{indent}</SegmentBase>"]


def _mpd(p: VideoPackage, kind: str) -> str:
    """The MPD of ``kind``: ``number`` ($Number$ template, inherited from the AdaptationSet), ``timeline``
    ($Time$ + SegmentTimeline per Representation), ``segmentbase`` (single files with sidx)."""
    cat = p.catalog
    on_demand = kind == "segmentbase"
    profile = "isoff-on-demand" if on_demand else "isoff-live"
    duration = _iso(cat.duration)
    out = ['<?xml version="1.0" encoding="utf-8"?>',
           (f'<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:{profile}:2011" '
            f'type="static" mediaPresentationDuration="{duration}" minBufferTime="PT1.5S">'),
           f'  <Period id="0" start="PT0S" duration="{duration}">']
    top = cat.video[-1]
    out.append(f'    <AdaptationSet id="0" contentType="video" mimeType="video/mp4" segmentAlignment="true" '
               f'startWithSAP="1" maxWidth="{top.width}" maxHeight="{top.height}" frameRate="{FPS}" par="16:9">')
    if kind == "number":  # every video track has the same timescale and fragment duration
        out += _mpd_addressing(kind, "", p.tracks[RENDITIONS[0].name], "      ")
    for info in cat.video:
        head = (f'      <Representation id="{info.name}" codecs="{info.codecs}" width="{info.width}" '
                f'height="{info.height}" bandwidth="{info.bandwidth}" frameRate="{FPS}" sar="1:1"')
        if kind == "number":
            out.append(head + "/>")
        else:
            out += [head + ">", *_mpd_addressing(kind, info.name, p.tracks[info.name], "        "),
                    "      </Representation>"]
    out.append("    </AdaptationSet>")
    audio, track = cat.audio, p.tracks["audio"]
    channels = "urn:mpeg:dash:23003:3:audio_channel_configuration:2011"
    out += [('    <AdaptationSet id="1" contentType="audio" mimeType="audio/mp4" lang="und" '
             'segmentAlignment="true" startWithSAP="1">'),
            f'      <AudioChannelConfiguration schemeIdUri="{channels}" value="{audio.channels}"/>']
    head = (f'      <Representation id="audio" codecs="{audio.codecs}" bandwidth="{audio.bandwidth}" '
            f'audioSamplingRate="{audio.sample_rate}"')
    if on_demand:
        out += [head + ">", *_mpd_addressing(kind, "audio", track, "        "), "      </Representation>"]
    else:
        out += [*_mpd_addressing(kind, "", track, "      "), head + "/>"]
    out += ["    </AdaptationSet>", "  </Period>", "</MPD>"]
    return "\n".join(out) + "\n"
