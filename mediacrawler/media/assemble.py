"""Fragments → one verified MP4, with PyAV and without re-encoding: :func:`ordered_parts` (completeness is our
accounting, never the muxer's), :func:`decrypt_aes128`, :func:`remux_to_mp4`, :func:`concat_mp4` (whole files in a
row), :func:`chapter_entries` (chapters written into either), :func:`verify_mp4` (docs/media.md, "Video").
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import io
import itertools
import logging
import math
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import av.error
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

logger = logging.getLogger(__name__)

# What PyAV/FFmpeg raise on bad media (FFmpegError subclasses also derive from ValueError/OSError).
_AV_ERRORS: tuple[type[BaseException], ...] = (av.error.FFmpegError, ValueError, OSError, EOFError)
#: Chapters written into one MP4 (a real video has a handful; the cap bounds a hostile list), and a title's length.
MAX_CHAPTERS = 500
MAX_CHAPTER_TITLE = 200
_CHAPTER_TIME_BASE = Fraction(1, 1000)
_MAX_CHAPTER_SECONDS = 10**7  # far past any video, well inside the muxer's 64-bit times


class AssemblyError(Exception):
    """Fragments that cannot become a valid MP4; ``reason`` goes on the asset as its failure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def decrypt_aes128(data: bytes, *, key: bytes, iv: bytes) -> bytes:
    """Decrypt one HLS ``METHOD=AES-128`` segment: AES-128-CBC over the whole segment, PKCS#7 padded (RFC 8216
    §5.2). A wrong key or a truncated segment shows up as bad padding → :class:`AssemblyError`."""
    if len(key) != 16:
        raise AssemblyError(f"AES-128 key is {len(key)} bytes, not 16")
    if not data or len(data) % 16:
        raise AssemblyError(f"encrypted segment is {len(data)} bytes, not a positive multiple of 16")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    padded = decryptor.update(data) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise AssemblyError("AES-128 segment has bad padding (wrong key or IV, or truncated)") from None


def ordered_parts(*, count: int, parts: Mapping[int, Path]) -> list[Path]:
    """The fragments ``0..count-1`` in order, each present and non-empty; else :class:`AssemblyError` naming the
    missing ones. This is the check that keeps an incomplete set from ever reaching the muxer."""
    if count <= 0:
        raise AssemblyError("no fragments expected")
    missing = [i for i in range(count) if i not in parts or not _nonempty(parts[i])]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" …" if len(missing) > 10 else "")
        raise AssemblyError(f"{len(missing)} of {count} fragments missing: {shown}")
    extra = sorted(set(parts) - set(range(count)))
    if extra:
        raise AssemblyError(f"unexpected fragment indexes: {extra[:10]}")
    return [parts[i] for i in range(count)]


def _nonempty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


class ConcatReader(io.RawIOBase):
    """A read-only, seekable file over several files back to back (init + fragments, or TS segments)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._paths = [Path(p) for p in paths]
        self._starts = list(itertools.accumulate((p.stat().st_size for p in self._paths), initial=0))
        self.size = self._starts[-1]
        self._pos = 0
        self._open_index = -1
        self._file: io.BufferedReader | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        pos = offset + {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self.size:
            # The last part starting at or before the position: empty parts are skipped.
            index = bisect.bisect_right(self._starts, self._pos) - 1
            if index != self._open_index or self._file is None:
                if self._file is not None:
                    self._file.close()
                self._file = open(self._paths[index], "rb")  # noqa: SIM115 - closed in close()/on switch
                self._open_index = index
            self._file.seek(self._pos - self._starts[index])
            want = min(len(view) - done, self._starts[index + 1] - self._pos)
            got = self._file.readinto(view[done : done + want])
            if not got:
                raise OSError(f"{self._paths[index]} shrank while being read")
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


def chapter_entries(chapters: Sequence[Mapping[str, Any]] | None, *,
                    duration: float | None = None) -> list[dict[str, Any]]:
    """``MediaAsset.chapters`` (``{"start", "end", "title"}``, seconds) as PyAV's chapter dicts (milliseconds),
    in time order. An entry without a finite ``0 <= start < end`` (within 10^7 s) is left out, an end
    past the next start or past ``duration`` is cut there, at most :data:`MAX_CHAPTERS`: a bad entry costs itself,
    never the video. The result depends on the input only: the same inputs give the same bytes (docs/media.md)."""
    spans: list[tuple[int, int, str]] = []
    for entry in list(chapters or ())[:MAX_CHAPTERS]:
        if not isinstance(entry, Mapping):
            continue
        start, end, title = entry.get("start"), entry.get("end"), entry.get("title")
        if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
                   and abs(t) <= _MAX_CHAPTER_SECONDS for t in (start, end)):
            continue
        title = title.strip()[:MAX_CHAPTER_TITLE] if isinstance(title, str) else ""  # untitled: still a chapter
        if 0 <= round(start * 1000) < round(end * 1000):
            spans.append((round(start * 1000), round(end * 1000), title))
    limit = round(duration * 1000) if duration and math.isfinite(duration) and duration > 0 else None
    spans.sort(key=lambda span: (span[0], span[1]))
    out: list[dict[str, Any]] = []
    for n, (start, end, title) in enumerate(spans):
        if n + 1 < len(spans) and spans[n + 1][0] > start:
            end = min(end, spans[n + 1][0])
        if limit is not None:
            end = min(end, limit)
        if end <= start:  # starts at or past the end of the video
            continue
        out.append({"id": len(out) + 1, "start": start, "end": end, "time_base": _CHAPTER_TIME_BASE,
                    "metadata": {"title": title}})
    return out


def remux_to_mp4(video_parts: Sequence[Path], audio_parts: Sequence[Path] | None, out: Path, *,
                 init_video: Path | None = None, init_audio: Path | None = None,
                 chapters: Sequence[Mapping[str, Any]] | None = None) -> Path:
    """Stream-copy the video track (``init_video`` + ``video_parts``) and the audio track, if given (else the video
    track's own audio), into ``out`` as one faststart MP4, with ``chapters`` (:func:`chapter_entries`, already
    converted); :class:`AssemblyError` (docs/media.md, "Assembly")."""
    if not video_parts:
        raise AssemblyError("no video fragments")
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    with contextlib.ExitStack() as stack:
        try:
            vin = stack.enter_context(_open_track([init_video, *video_parts]))
            vstream = _first(vin.streams.video, "video track has no video stream")
            sources: list[tuple[Any, list[Any]]]
            if audio_parts:
                ain = stack.enter_context(_open_track([init_audio, *audio_parts]))
                astream = _first(ain.streams.audio, "audio track has no audio stream")
                sources = [(vin, [vstream]), (ain, [astream])]
            else:
                astream = vin.streams.audio[0] if vin.streams.audio else None
                sources = [(vin, [vstream, *([astream] if astream else [])])]
            output = stack.enter_context(av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"}))
            mapping = {id(s): output.add_stream_from_template(s) for _, streams in sources for s in streams}
            output.set_chapters(list(chapters or ()))  # before the first packet: the header counts them
            counts = {id(s): 0 for _, streams in sources for s in streams}
            feeds = [_packets(container, streams) for container, streams in sources]
            # Interleave by dts ourselves: the muxer's interleaving queue would otherwise hold a whole track.
            merged = heapq.merge(*feeds, key=lambda item: item[0])
            for _, packet, in_stream in merged:
                packet.stream = mapping[id(in_stream)]
                output.mux(packet)
                counts[id(in_stream)] += 1
            if counts[id(vstream)] == 0:
                raise AssemblyError("video track has no packets")
            if astream is not None and counts[id(astream)] == 0:
                raise AssemblyError("audio track has no packets")
        except (AssemblyError, *_AV_ERRORS) as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, AssemblyError):
                raise
            raise AssemblyError(f"remux failed: {exc}") from None
    os.replace(tmp, out)
    logger.debug("remuxed %d video + %d audio parts into %s", len(video_parts), len(audio_parts or ()), out)
    return out


def concat_mp4(files: Sequence[Path], out: Path, *, chapters: Sequence[Mapping[str, Any]] | None = None) -> Path:
    """Stream-copy whole media files played one after another (Bilibili's segmented ``durl``: each with its own
    header and timestamps from 0) into ``out`` as one faststart MP4, each file's timestamps moved past the end of
    the one before; the streams are the first file's video and audio, ``chapters`` as in :func:`remux_to_mp4`.
    :class:`AssemblyError` when a file is not media, or lacks a stream the first one has."""
    if not files:
        raise AssemblyError("no files to join")
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    try:
        with av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"}) as output:
            mapping: dict[str, Any] = {}
            ends: dict[str, float] = {}  # per stream type: end time (s) of what is muxed so far
            last: dict[str, Fraction] = {}  # per stream type: the last dts muxed (s)
            for n, path in enumerate(files):
                if not _nonempty(Path(path)):
                    raise AssemblyError(f"empty or missing file {n + 1} of {len(files)}")
                with av.open(str(path), "r") as container:
                    streams = [*container.streams.video[:1], *container.streams.audio[:1]]
                    if n == 0:
                        mapping = {s.type: output.add_stream_from_template(s) for s in streams}
                        output.set_chapters(list(chapters or ()))
                    elif {s.type for s in streams} != set(mapping):
                        raise AssemblyError(f"file {n + 1} of {len(files)} has other streams than the first")
                    start = max(ends.values(), default=0.0)
                    for _, packet, stream in _packets(container, streams):
                        shift = round(start / stream.time_base)
                        packet.pts += shift
                        packet.dts += shift
                        if stream.type in last and packet.dts * stream.time_base <= last[stream.type]:
                            # A file's first packets can reach back before its 0 (an AAC priming packet, B-frame
                            # delay) onto the previous file's last: one tick later, as ffmpeg's muxing does.
                            packet.dts = math.floor(last[stream.type] / stream.time_base) + 1
                            packet.pts = max(packet.pts, packet.dts)
                        last[stream.type] = packet.dts * stream.time_base
                        end = float((packet.pts + (packet.duration or 0)) * stream.time_base)
                        ends[stream.type] = max(ends.get(stream.type, 0.0), end)
                        packet.stream = mapping[stream.type]
                        output.mux(packet)
    except (AssemblyError, *_AV_ERRORS) as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, AssemblyError):
            raise
        raise AssemblyError(f"join failed: {exc}") from None
    os.replace(tmp, out)
    return out


@contextlib.contextmanager
def _open_track(parts: Sequence[Path | None]) -> Iterator[Any]:
    paths = [p for p in parts if p is not None]  # an absent init section
    for path in paths:
        if not _nonempty(Path(path)):
            raise AssemblyError(f"empty or missing fragment {path}")
    with contextlib.closing(ConcatReader(paths)) as reader, av.open(reader, "r") as container:
        yield container


def _first(streams: Sequence[Any], missing: str) -> Any:
    if not streams:
        raise AssemblyError(missing)
    return streams[0]


def _packets(container: Any, streams: list[Any]) -> Iterator[tuple[float, Any, Any]]:
    """``(dts in seconds, packet, input stream)``, timestamps moved back so that the input starts at 0."""
    shift = container.start_time / av.time_base if container.start_time is not None else 0.0
    offsets = {id(s): round(shift / s.time_base) if s.time_base else 0 for s in streams}
    by_index = {s.index: s for s in streams}
    for packet in container.demux(*streams):
        if packet.dts is None and packet.pts is None:
            continue  # the demuxer's flush packet
        stream = by_index[packet.stream_index]
        offset = offsets[id(stream)]
        if packet.pts is None:
            packet.pts = packet.dts
        if packet.dts is None:
            packet.dts = packet.pts
        packet.pts -= offset
        packet.dts -= offset
        yield float(packet.dts * stream.time_base), packet, stream


@dataclass(frozen=True, slots=True)
class VideoInfo:
    """What :func:`verify_mp4` found: recorded on the asset next to the selection."""

    duration: float
    width: int
    height: int
    video_codec: str
    audio_codec: str | None
    faststart: bool


def verify_mp4(path: Path, *, expect_audio: bool, expected_duration: float | None, tolerance: float = 0.02,
               max_gap: float | None = None) -> VideoInfo:
    """Check an assembled MP4 before it is stored (boxes tile the file, MP4 with video, audio when
    ``expect_audio``, duration within ``tolerance`` of ``expected_duration``, no timestamp hole over ``max_gap``,
    first frame decodes: docs/media.md, "Assembly"); :class:`AssemblyError` with the first problem found."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise AssemblyError(f"no file to verify: {exc}") from None
    boxes = _top_level_boxes(path, size)
    if b"moov" not in boxes:
        raise AssemblyError("not an MP4: no moov box")
    try:
        with av.open(str(path), "r") as container:
            if "mp4" not in container.format.name.split(","):
                raise AssemblyError(f"not an MP4 container: {container.format.name}")
            if not container.streams.video:
                raise AssemblyError("no video stream")
            video = container.streams.video[0]
            audio = container.streams.audio[0] if container.streams.audio else None
            if expect_audio and audio is None:
                raise AssemblyError("no audio stream")
            declared = [float(s.duration * s.time_base) for s in container.streams if s.duration and s.time_base]
            if (container.duration or 0) > 0:
                declared = [container.duration / av.time_base]  # the container's own duration wins
            duration = max(declared, default=None)
            if duration is None:
                raise AssemblyError("MP4 declares no duration")
            if expected_duration and abs(duration - expected_duration) > tolerance * expected_duration:
                raise AssemblyError(f"duration {duration:.3f} s differs from the manifest's "
                                    f"{expected_duration:.3f} s by more than {tolerance:.0%}")
            frame = next(container.decode(video), None)
            if frame is None:
                raise AssemblyError("first video frame does not decode")
            if max_gap is not None:  # the largest step between consecutive presentation times of the video
                container.seek(0)
                times = sorted(p.pts for p in container.demux(video) if p.pts is not None)
                gap = max((float((b - a) * video.time_base) for a, b in itertools.pairwise(times)), default=0.0)
                if gap > max_gap:
                    raise AssemblyError(f"video has a {gap:.3f} s hole in its timestamps "
                                        f"(allowed {max_gap:.3f} s)")
            info = VideoInfo(duration=duration, width=video.codec_context.width, height=video.codec_context.height,
                             video_codec=video.codec_context.name,
                             audio_codec=audio.codec_context.name if audio is not None else None,
                             faststart=b"mdat" not in boxes or boxes.index(b"moov") < boxes.index(b"mdat"))
    except _AV_ERRORS as exc:  # AssemblyError is none of these: it passes through
        raise AssemblyError(f"unreadable MP4: {exc}") from None
    return info


_FIRST_BOXES = {b"ftyp", b"styp", b"moov", b"free", b"skip", b"wide", b"mdat", b"pdin", b"uuid"}


def _top_level_boxes(path: Path, size: int) -> list[bytes]:
    """The types of the top-level ISO-BMFF boxes, which must tile the file exactly: a box running past the end
    is a truncated file (the ``moov`` of a faststart file can be intact while ``mdat`` is cut short)."""
    kinds: list[bytes] = []
    with open(path, "rb") as fh:
        offset = 0
        while offset < size:
            fh.seek(offset)
            header = fh.read(16)
            if len(header) < 8:
                raise AssemblyError(f"truncated MP4: {size - offset} stray bytes at the end")
            box_size, kind = struct.unpack(">I4s", header[:8])
            if box_size == 1:
                if len(header) < 16:
                    raise AssemblyError("truncated MP4: cut inside a box header")
                box_size = struct.unpack(">Q", header[8:16])[0]
            elif box_size == 0:
                box_size = size - offset  # "to the end of the file"
            if offset == 0 and kind not in _FIRST_BOXES:
                raise AssemblyError(f"not an MP4 file (starts with {header[:8].hex()})")
            if box_size < 8:
                raise AssemblyError(f"corrupt MP4: box {kind!r} of size {box_size} at {offset}")
            if offset + box_size > size:
                raise AssemblyError(f"truncated MP4: box {kind.decode('latin-1')!r} at {offset} needs {box_size} "
                                    f"bytes, {size - offset} left")
            kinds.append(kind)
            offset += box_size
    return kinds
