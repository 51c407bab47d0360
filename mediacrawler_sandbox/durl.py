"""Segmented Bilibili ``durl``: one progressive MP4 of :mod:`.video` cut at keyframes into ``n`` standalone MP4s.

Bilibili lists a long video that has no DASH streams as several ``durl`` entries, each a self-contained file with
its own ``length`` (ms) and ``size``, to be played one after the other. The ``bilibili_durl_segments`` knob
(:mod:`.faults`) makes playurl answer so. Served as ``/media/bili/{mirror}/{id}/{cid}-1-{qn}-{k}of{n}.mp4``
(``k`` from 1). Pure (no Twisted); the pieces are cut once per (id, rendition, n) and kept.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Sequence
from functools import lru_cache

from .bilibili_ids import cid_for
from .video import BILI_MIRRORS, DURATION, RENDITIONS, VIDEO_ID_RE, video_package

__all__ = ["SEGMENT_NAME_RE", "durl_file", "durl_segments", "is_segment_path", "segment_file", "segment_name"]

#: The file name of one durl segment.
SEGMENT_NAME_RE = re.compile(r"(\d+)-1-(\d+)-([1-9])of([2-9])\.mp4")
MAX_SEGMENTS = 9


def segment_name(cid: int, qn: int, k: int, n: int) -> str:
    return f"{cid}-1-{qn}-{k}of{n}.mp4"


@lru_cache(maxsize=32)
def durl_segments(video_id: str, rendition: str, n: int) -> tuple[tuple[bytes, int], ...]:
    """``n`` pieces ``(faststart MP4 bytes, length in ms)`` of the progressive MP4 of ``video_id`` at
    ``rendition``, cut at whole seconds (a keyframe every second), each starting at timestamp 0."""
    import av

    if not 1 <= n <= min(MAX_SEGMENTS, int(DURATION)):
        raise ValueError(f"durl segments: {n} not in 1..{min(MAX_SEGMENTS, int(DURATION))}")
    source = video_package(video_id).progressive[rendition]
    cuts = [round(DURATION * k / n) for k in range(n + 1)]  # whole seconds: keyframes
    out: list[tuple[bytes, int]] = []
    for start, end in zip(cuts, cuts[1:], strict=False):
        fd, path = tempfile.mkstemp(prefix="sandbox-durl-", suffix=".mp4")
        os.close(fd)
        try:
            with av.open(io.BytesIO(source)) as src, \
                    av.open(path, "w", format="mp4", options={"movflags": "+faststart"}) as dst:
                streams = [*src.streams.video[:1], *src.streams.audio[:1]]
                mapping = {s.index: dst.add_stream_from_template(s) for s in streams}
                for packet in src.demux(*streams):
                    if packet.dts is None:
                        continue
                    tb = packet.stream.time_base
                    at = float(packet.pts * tb)
                    if not start <= at < end:
                        continue
                    shift = round(start / tb)
                    packet.pts -= shift
                    packet.dts -= shift
                    packet.stream = mapping[packet.stream_index]
                    dst.mux(packet)
            with open(path, "rb") as fh:
                out.append((fh.read(), (end - start) * 1000))
        finally:
            os.unlink(path)
    return tuple(out)


def is_segment_path(parts: Sequence[str]) -> bool:
    """Whether a ``/media`` path split into parts names a segment of a segmented durl
    (``bili/{cdn}/{id}/{cid}-1-{qn}-{k}of{n}.mp4``); every other video path is :func:`video.video_file`'s."""
    return (len(parts) == 4 and parts[0] == "bili" and parts[1] in BILI_MIRRORS and "of" in parts[3]
            and VIDEO_ID_RE.fullmatch(parts[2]) is not None)


def durl_file(parts: Sequence[str]) -> tuple[bytes, str] | None:
    """``(bytes, content type)`` of the durl segment at ``parts`` (:func:`is_segment_path`), ``None`` when there
    is no such segment."""
    found = segment_file(parts[2], parts[3])
    return None if found is None else (found, "video/mp4")


def segment_file(video_id: str, name: str) -> bytes | None:
    """The bytes of durl segment file ``name`` of ``video_id`` (``None``: no such segment)."""
    match = SEGMENT_NAME_RE.fullmatch(name)
    if match is None:
        return None
    cid, qn, k, n = (int(g) for g in match.groups())
    spec = next((r for r in RENDITIONS if r.qn == qn), None)
    if spec is None or cid != cid_for(video_id) or not 1 <= k <= n:
        return None
    try:
        return durl_segments(video_id, spec.name, n)[k - 1][0]
    except ValueError:
        return None
