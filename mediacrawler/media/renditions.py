"""Renditions a platform API lists (Bilibili's DASH streams, Douyin's bit rates, XHS's streams) and progressive URLs
→ the :class:`~mediacrawler.media.manifests.Manifest` model the HLS and DASH parsers give: the platform-JSON
manifest format. Pure, with the same limits; docs/media.md, "Video".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from mediacrawler.media.manifests import (
    _DEFAULT_LIMITS,
    Manifest,
    ManifestError,
    ManifestLimits,
    Rendition,
    SingleFile,
    _cap,
    _dash_range,
    _frame_rate,
    _opt_int,
    codec_family,
)


def manifest_from_renditions(renditions: Sequence[Mapping[str, Any]], *, duration: float | None = None,
                             limits: ManifestLimits = _DEFAULT_LIMITS) -> Manifest:
    """Streams a platform API listed (``MediaAsset.renditions``, plain JSON) → :class:`Manifest` of
    :class:`SingleFile` renditions (the entry keys: docs/media.md, "Manifest reference")."""
    if isinstance(renditions, (str, bytes)) or not isinstance(renditions, Sequence):
        raise ManifestError("renditions: not a list")
    _cap(len(renditions), limits.max_renditions, f"renditions: {len(renditions)} entries")
    if duration is not None and not (isinstance(duration, (int, float)) and math.isfinite(duration)):
        raise ManifestError(f"renditions: bad duration {duration!r}")
    limits.check_duration(duration, what="renditions")
    video: list[Rendition] = []
    audio: list[Rendition] = []
    seen: set[str] = set()
    bad: list[str] = []  # one bad stream (URL, shape) is skipped: the others may be good (docs/media.md)
    for i, entry in enumerate(renditions):
        kind = entry.get("kind") if isinstance(entry, Mapping) else "not an object"
        try:
            if kind not in ("video", "audio", "progressive"):
                raise ManifestError(f"renditions[{i}]: unknown kind {kind!r}")
            rendition = _rendition_entry(entry, kind=kind, index=i, limits=limits)  # type: ignore[arg-type]
        except ManifestError as exc:
            bad.append(exc.reason)
            continue
        rendition = replace(rendition, id=f"{rendition.id}#{i}") if rendition.id in seen else rendition
        seen.add(rendition.id)
        (audio if rendition.kind == "audio" else video).append(rendition)
    if not video:
        raise ManifestError("; ".join(bad) or "renditions: no video stream (neither video nor progressive)")
    return Manifest(source="renditions", video=tuple(video), audio=tuple(audio), duration=duration,
                    skipped=tuple(bad))


def _rendition_entry(entry: Mapping[str, Any], *, kind: str, index: int, limits: ManifestLimits) -> Rendition:
    what = f"renditions[{index}] ({kind})"
    primary = entry.get("url")
    alternates = entry.get("alternates") or []
    if not isinstance(primary, str) or not primary.strip():
        raise ManifestError(f"{what}: no URL")
    if isinstance(alternates, (str, bytes)) or not isinstance(alternates, Sequence):
        raise ManifestError(f"{what}: alternates is not a list")
    _cap(len(alternates), limits.max_renditions, f"{what}: {len(alternates)} alternates")
    urls: list[str] = []
    for url in [primary, *alternates]:
        if not isinstance(url, str):
            raise ManifestError(f"{what}: a URL is not a string: {url!r:.100}")
        url = limits.check_url(url.strip(), what=what)
        if url not in urls:
            urls.append(url)
    size = _natural(entry.get("size"), what=f"{what} size")
    _cap(size or 0, limits.max_bytes, f"{what}: {size} declared bytes")
    init_range = index_range = None
    seg_base = entry.get("segment_base")
    if seg_base is not None:
        if not isinstance(seg_base, Mapping):
            raise ManifestError(f"{what}: segment_base is not an object")
        init_range = _dash_range(seg_base.get("initialization"), what=f"{what} initialization")
        index_range = _dash_range(seg_base.get("index_range"), what=f"{what} index_range")
    codecs = entry.get("codecs")
    if codecs is not None and not isinstance(codecs, str):
        raise ManifestError(f"{what}: codecs is not a string")
    plain_codec = entry.get("codec")
    family = codec_family(codecs) or (codec_family(plain_codec) if isinstance(plain_codec, str) else None)
    mime = entry.get("mime")
    subtype = mime.partition("/")[2].split(";", 1)[0].strip().lower() if isinstance(mime, str) else ""
    container = subtype.removeprefix("x-") or "mp4"  # video/x-flv → flv
    names = [str(_opt_int(entry.get(k), what=f"{what} {k}")) for k in ("quality", "codecid")
             if entry.get(k) is not None and (k == "quality" or kind != "audio")]
    name = "-".join(names)  # "80-7": quality and codec id of a video stream; "30280": an audio stream
    if kind == "progressive" or not name:
        name = f"{kind}-{name or index}"
    return Rendition(
        kind="audio" if kind == "audio" else "video", id=name, codecs=codecs or None, codec=family,
        fetch=SingleFile(urls=tuple(urls), size=size, init_range=init_range, index_range=index_range),
        width=_natural(entry.get("width"), what=f"{what} width") or None,  # 0: the platforms' "unknown"
        height=_natural(entry.get("height"), what=f"{what} height") or None,
        bandwidth=_opt_int(entry.get("bandwidth"), what=f"{what} bandwidth"),
        frame_rate=_frame_rate(entry.get("frame_rate")), has_audio=kind == "progressive", container=container)


def _natural(value: Any, *, what: str) -> int | None:
    """A non-negative integer (a size, a width or height), or None when absent."""
    if (number := _opt_int(value, what=what)) is not None and number < 0:
        raise ManifestError(f"{what}: negative {number}")
    return number


#: Nominal heights of named qualities (``mp4_hd_url``/``mp4_sd_url``/``mp4_ld_mp4``: ``hd`` is below 720p where
#: such labels are used). Labels with an explicit ``720p``/``1080p`` win over these.
_NAMED_HEIGHTS = {"8k": 4320, "4k": 2160, "uhd": 2160, "2k": 1440, "qhd": 1440, "fhd": 1080, "hd": 480, "sd": 360,
                  "ld": 240}
_HEIGHT_IN_LABEL = re.compile(r"(?<![0-9])(\d{3,4})p(?![a-z])", re.IGNORECASE)


def progressive_variants(variants: Mapping[str, Any] | Iterable[tuple[str, Any]], *, duration: float | None = None,
                         limits: ManifestLimits = _DEFAULT_LIMITS) -> Manifest:
    """Progressive MP4 URLs keyed by a quality label (a map or ``(label, url)`` pairs) → :class:`Manifest` of
    muxed single-file renditions (heights from labels: docs/media.md, "Manifest reference")."""
    limits.check_duration(duration, what="progressive")
    pairs = list(variants.items()) if isinstance(variants, Mapping) else list(variants)
    best: dict[str, Rendition] = {}
    for label, url in pairs:
        if not isinstance(url, str) or not url.strip():
            continue
        url = url.strip()
        if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", url):
            continue  # not a URL at all (media_info also holds "horizontal", "12万次观看", …)
        limits.check_url(url, what=f"progressive {label}")
        if ".m3u8" in urlsplit(url).path.lower():
            continue
        tokens = re.split(r"[^a-z0-9]+", str(label).lower())
        named = [_NAMED_HEIGHTS[t] for t in tokens if t in _NAMED_HEIGHTS]  # the first named quality counts
        match = _HEIGHT_IN_LABEL.search(str(label))  # an explicit "720p" wins over a name
        height = int(match.group(1)) if match else (named[0] if named else None)
        rendition = Rendition(kind="video", id=str(label), fetch=SingleFile(urls=(url,)), height=height,
                              has_audio=True, container="mp4",
                              codec="hevc" if {"hevc", "h265"}.intersection(tokens) else None)
        known = best.get(url)
        if known is None or (height or 0) > (known.height or 0):
            best[url] = rendition
        if len(best) > limits.max_renditions:
            raise ManifestError(f"progressive: over {limits.max_renditions} variants")
    if not best:
        raise ManifestError("no progressive MP4 variant")
    return Manifest(source="progressive", video=tuple(best.values()), duration=duration)
