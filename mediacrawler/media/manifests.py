"""Video manifests (HLS, DASH; renditions a platform API listed and progressive URLs in media/renditions.py) → one
model of renditions, and the rule that picks one. Pure parsers that refuse hostile input before expanding it
(:class:`ManifestLimits`); scope and policy (one Period, VOD, AES-128 only): docs/media.md, "Video".
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, TypeAlias
from urllib.parse import urljoin, urlsplit

import m3u8

from mediacrawler.config import default, setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

Kind = Literal["video", "audio"]
Source = Literal["hls", "dash", "renditions", "progressive"]


class ManifestError(ValueError):
    """A manifest we refuse or cannot understand; ``reason`` says why (it goes on the asset as its failure)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ManifestLimits:
    """Caps applied to every manifest before it is expanded (``MEDIA_MANIFEST_*``; what each bounds:
    docs/media.md, "Manifest reference")."""

    max_segments: int = default("MEDIA_MANIFEST_MAX_SEGMENTS")
    max_duration: float = float(default("MEDIA_MANIFEST_MAX_DURATION"))
    max_bytes: int = default("MEDIA_MANIFEST_MAX_BYTES")
    max_chars: int = default("MEDIA_MANIFEST_MAX_CHARS")
    max_tags: int = default("MEDIA_MANIFEST_MAX_TAGS")
    max_renditions: int = default("MEDIA_MANIFEST_MAX_RENDITIONS")
    allowed_schemes: frozenset[str] = frozenset({"http", "https"})

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> ManifestLimits:
        """The limits from the ``MEDIA_MANIFEST_*`` settings."""
        return cls(**{f.name: type(f.default)(setting(settings, f"MEDIA_MANIFEST_{f.name.upper()}"))
                      for f in fields(cls) if f.name != "allowed_schemes"})

    def check_url(self, url: str, *, what: str) -> str:
        """``url`` if its scheme is allowed and it names a host; else :class:`ManifestError`."""
        if _CONTROL.search(url):
            raise ManifestError(f"{what} URL contains whitespace or control characters: {url[:100]!r}")
        parts = urlsplit(url)
        if parts.scheme.lower() not in self.allowed_schemes:
            raise ManifestError(f"{what} URL scheme {parts.scheme or '(none)'!r} not allowed: {url[:100]!r}")
        if not parts.hostname:
            raise ManifestError(f"{what} URL has no host: {url[:100]!r}")
        return url

    def check_count(self, count: int, *, what: str) -> None:
        _cap(count, self.max_segments, f"{what}: {count} segments")

    def check_duration(self, seconds: float | None, *, what: str) -> None:
        if seconds is not None and not (0 <= seconds <= self.max_duration):
            raise ManifestError(f"{what}: duration {seconds:.0f} s outside 0..{self.max_duration:.0f} s")


def _cap(value: int, cap: int, said: str) -> None:
    if value > cap:
        raise ManifestError(f"{said}, over the cap of {cap}")


_DEFAULT_LIMITS = ManifestLimits()
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
# A relative reference that joins by plain concatenation: no scheme (no ":"), not absolute, no dot segments.
_PLAIN_RELATIVE = re.compile(r"(?![./])[A-Za-z0-9_\-~%!$&'()*+,;=@]+(?:/[A-Za-z0-9_\-~%!$&'()*+,;=@]+)*"
                             r"(?:\.[A-Za-z0-9_\-~%!$&'()*+,;=@]+)*(?:\?[^#\s]*)?")


def _resolver(base_url: str, *, limits: ManifestLimits, what: str) -> Callable[[str], str]:
    """``urljoin(base, ref)`` + the scheme check, with a fast path for the common case of thousands of plain
    relative segment names (``seg-00042.ts``): concatenation onto the base's directory, checked once."""
    split = urlsplit(base_url)
    folder = base_url.split("?", 1)[0].split("#", 1)[0].rsplit("/", 1)[0] + "/"
    fast = split.scheme.lower() in limits.allowed_schemes and bool(split.hostname) and "//" in folder

    def resolve(ref: str) -> str:
        ref = ref.strip()
        if fast and _PLAIN_RELATIVE.fullmatch(ref) and "/." not in ref:
            return folder + ref
        return limits.check_url(urljoin(base_url, ref), what=what)

    return resolve


@dataclass(frozen=True, slots=True)
class ByteRange:
    """``length`` bytes from ``start`` (HLS ``len@off``; DASH ``first-last`` is converted)."""

    start: int
    length: int

    @property
    def end(self) -> int:
        """The last byte, inclusive (as in an HTTP ``Range`` header)."""
        return self.start + self.length - 1

    def header(self) -> str:
        return f"bytes={self.start}-{self.end}"


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """How a segment is encrypted: AES-128-CBC with the 16-byte key at ``url`` and this 16-byte ``iv``."""

    method: str
    url: str
    iv: bytes


@dataclass(frozen=True, slots=True)
class InitSection:
    """The initialization segment of fragmented MP4 (HLS ``EXT-X-MAP``, DASH ``Initialization``)."""

    url: str
    byte_range: ByteRange | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    """One media segment, in playback order; ``index`` is its 0-based position (the ledger's key)."""

    index: int
    url: str
    duration: float | None
    byte_range: ByteRange | None = None
    key: KeyInfo | None = None


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A DASH ``SegmentTemplate`` reduced to what expansion needs: ``media`` with the per-Representation
    identifiers filled in; ``runs`` are ``(t, d, n)``: ``n`` segments of ``d`` ticks from tick ``t``."""

    base_url: str
    media: str
    start_number: int
    timescale: int
    runs: tuple[tuple[int, int, int], ...]
    last_duration: float | None = None  # the final segment of a fixed-@duration template may be shorter


@dataclass(frozen=True, slots=True)
class SegmentedFetch:
    """Segments (plus an optional init section); ``count`` and ``duration`` are known without expansion."""

    count: int
    duration: float | None
    init: InitSection | None = None
    explicit: tuple[Segment, ...] = ()
    template: TemplateSpec | None = None
    limits: ManifestLimits = field(default=_DEFAULT_LIMITS, repr=False, compare=False)

    def segments(self) -> list[Segment]:
        """The segments in playback order (``index`` 0..count-1)."""
        return list(_expand_template(self.template, limits=self.limits) if self.template else self.explicit)


@dataclass(frozen=True, slots=True)
class SingleFile:
    """One file: ``urls[0]`` is the primary URL, the rest are backups serving the same bytes."""

    urls: tuple[str, ...]
    size: int | None = None
    init_range: ByteRange | None = None
    index_range: ByteRange | None = None


@dataclass(frozen=True, slots=True)
class PlaylistRef:
    """An HLS media playlist still to be fetched (a master playlist's variant or alternative audio)."""

    url: str


Fetch: TypeAlias = SingleFile | SegmentedFetch | PlaylistRef


@dataclass(frozen=True, slots=True)
class Rendition:
    """One encoding of the video or of its audio (fields: docs/media.md, "Manifest reference")."""

    kind: Kind
    id: str
    fetch: Fetch
    codecs: str | None = None
    codec: str | None = None
    width: int | None = None
    height: int | None = None
    bandwidth: int | None = None
    frame_rate: float | None = None
    has_audio: bool = False
    container: str | None = None
    group: str | None = None
    default: bool = False


@dataclass(frozen=True, slots=True)
class Manifest:
    """All renditions of one video; ``duration`` in seconds where the manifest declares it."""

    source: Source
    video: tuple[Rendition, ...]
    audio: tuple[Rendition, ...] = ()
    duration: float | None = None
    skipped: tuple[str, ...] = ()  # why listed renditions were left out (manifest_from_renditions)


def with_fetch(rendition: Rendition, media: Manifest) -> Rendition:
    """``rendition`` (a :class:`PlaylistRef`) with the segments of its fetched media playlist ``media`` (what
    :func:`parse_hls_media` returns: one rendition, never none)."""
    inner = media.video[0]
    return replace(rendition, fetch=inner.fetch, container=inner.container or rendition.container)


_VIDEO_FAMILIES = {"avc1": "avc1", "avc3": "avc1", "h264": "avc1", "hvc1": "hevc", "hev1": "hevc", "hevc": "hevc",
                   "h265": "hevc", "av01": "av01", "av1": "av01", "vp09": "vp9", "vp9": "vp9", "vp08": "vp8",
                   "vp8": "vp8", "dvh1": "dvh1", "dvhe": "dvh1"}
_AUDIO_FAMILIES = {"mp4a": "mp4a", "aac": "mp4a", "ac-3": "ac-3", "ec-3": "ec-3", "opus": "opus", "flac": "flac",
                   "mp3": "mp3"}


def codec_family(codecs: str | None) -> str | None:
    """The family of the first codec in an RFC 6381 list: ``avc1.640032`` → ``avc1``, ``hev1.1.6.L150.90`` →
    ``hevc``, ``mp4a.40.2`` → ``mp4a``; None when unknown."""
    prefix = (codecs or "").split(",")[0].strip().split(".")[0].lower()
    return _VIDEO_FAMILIES.get(prefix) or _AUDIO_FAMILIES.get(prefix)


def split_codecs(codecs: str | None) -> tuple[str | None, str | None]:
    """(video codecs entry, audio codecs entry) of an RFC 6381 list."""
    video = audio = None
    for entry in (codecs or "").split(","):
        entry = entry.strip()
        prefix = entry.split(".")[0].lower()
        if prefix in _VIDEO_FAMILIES and video is None:
            video = entry
        elif prefix in _AUDIO_FAMILIES and audio is None:
            audio = entry
    return video, audio


def iv_for_sequence(sequence: int) -> bytes:
    """The implicit AES-128 IV of an HLS segment: its media sequence number, big-endian in 16 bytes (RFC 8216
    §5.2)."""
    return sequence.to_bytes(16, "big")


def _parse_iv(value: str) -> bytes:
    text = value.strip().removeprefix("0x").removeprefix("0X")
    try:
        raw = bytes.fromhex(text.rjust(32, "0"))
    except ValueError:
        raise ManifestError(f"bad EXT-X-KEY IV {value!r}") from None
    if len(raw) != 16:
        raise ManifestError(f"EXT-X-KEY IV is not 16 bytes: {value!r}")
    return raw


def _int(value: Any, *, what: str) -> int:
    """An integer attribute; tolerates ``1e9``-style spellings (so a huge count is *refused*, not misparsed)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    with contextlib.suppress(ValueError):
        return int(str(value).strip())
    with contextlib.suppress(ValueError):
        number = float(str(value).strip())  # "True" and "None" fail here too
        if math.isfinite(number) and number.is_integer():
            return int(number)
    raise ManifestError(f"{what}: not an integer: {value!r}")


def _opt_int(value: Any, *, what: str) -> int | None:
    if value is None or value == "":
        return None
    return _int(value, what=what)


def _frame_rate(value: Any) -> float | None:
    """``29.970``, ``30000/1001`` or a number → frames per second (None when absent, unreadable or not positive;
    a Fraction is always finite)."""
    try:
        rate = float(Fraction(str(value).strip()))
    except (ValueError, ZeroDivisionError):  # None, "", "inf", "nan", "x/0"
        return None
    return rate if rate > 0 else None


_ISO_DURATION = re.compile(r"P(?:(?P<d>\d+(?:\.\d+)?)D)?"
                           r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?")


def _iso_duration(value: str | None) -> float | None:
    """An xs:duration (``PT1H2M3.5S``, ``P1DT2H``) in seconds; years and months are refused (not fixed length)."""
    if value is None:
        return None
    match = _ISO_DURATION.fullmatch(value.strip())
    if not match or value.strip() in ("P", "PT"):
        raise ManifestError(f"unsupported duration {value!r}")
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    return parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]


def _dash_range(value: str | None, *, what: str) -> ByteRange | None:
    """A DASH ``first-last`` byte range (inclusive) → :class:`ByteRange`."""
    if not value:
        return None
    first, sep, last = str(value).strip().partition("-")
    if not sep:
        raise ManifestError(f"{what}: bad byte range {value!r}")
    start, end = _int(first, what=what), _int(last, what=what)
    if start < 0 or end < start:
        raise ManifestError(f"{what}: bad byte range {value!r}")
    return ByteRange(start, end - start + 1)


def parse_hls(text: str, *, base_url: str, limits: ManifestLimits = _DEFAULT_LIMITS) -> Manifest:
    """An HLS master or media playlist → :class:`Manifest` (docs/media.md, "Manifest reference")."""
    _cap(len(text), limits.max_chars, f"HLS playlist is {len(text)} characters")
    if not text.lstrip("\ufeff").startswith("#EXTM3U"):
        raise ManifestError("not an HLS playlist (no #EXTM3U)")
    if "#EXT-X-STREAM-INF" not in text:
        return parse_hls_media(text, base_url=base_url, limits=limits)
    variant_lines = text.count("#EXT-X-STREAM-INF") + text.count("#EXT-X-MEDIA:")
    _cap(variant_lines, limits.max_renditions, f"HLS master: {variant_lines} renditions")
    playlist = _m3u8(text, what="master")
    audio_media = [m for m in playlist.media if (m.type or "").upper() == "AUDIO" and m.uri]
    groups_with_uri = {m.group_id for m in audio_media}
    group_codecs: dict[str, str] = {}
    video: list[Rendition] = []
    for i, variant in enumerate(playlist.playlists):
        info = variant.stream_info
        url = limits.check_url(urljoin(base_url, variant.uri.strip()), what="HLS variant")
        vcodec, acodec = split_codecs(info.codecs)
        if acodec and info.audio:
            group_codecs.setdefault(info.audio, acodec)
        width, height = info.resolution if info.resolution else (None, None)
        if vcodec is None and acodec is not None and info.resolution is None:
            continue  # an audio-only variant; alternatives come from EXT-X-MEDIA
        separate_audio = bool(info.audio) and info.audio in groups_with_uri
        video.append(Rendition(
            kind="video", id=f"hls-{i}", fetch=PlaylistRef(url), codecs=info.codecs, codec=codec_family(vcodec),
            width=width, height=height, frame_rate=_frame_rate(info.frame_rate),
            bandwidth=_opt_int(info.average_bandwidth or info.bandwidth, what="BANDWIDTH"),
            has_audio=not separate_audio and (acodec is not None or not info.codecs),
            group=info.audio if separate_audio else None))
    audio = [Rendition(kind="audio", id=f"hls-audio-{m.group_id}-{m.name or i}",
                       fetch=PlaylistRef(limits.check_url(urljoin(base_url, m.uri.strip()), what="HLS audio")),
                       codecs=group_codecs.get(m.group_id), codec=codec_family(group_codecs.get(m.group_id)),
                       group=m.group_id, default=(m.default or "").upper() == "YES")
             for i, m in enumerate(audio_media)]
    if not video:
        raise ManifestError("HLS master playlist has no video variant")
    return Manifest(source="hls", video=tuple(video), audio=tuple(audio), duration=None)


def _m3u8(text: str, *, what: str) -> m3u8.M3U8:
    try:
        return m3u8.loads(text)
    except Exception as exc:  # noqa: BLE001 - the library raises assorted types on malformed input
        raise ManifestError(f"unparsable HLS {what} playlist: {exc}") from None


def _hls_range(value: str, *, after: int, what: str) -> ByteRange:
    """``len[@off]``; an omitted offset is ``after`` (the end of the previous range of the same URI)."""
    length_text, _, offset_text = str(value).partition("@")
    length = _int(length_text, what=what)
    offset = _int(offset_text, what=what) if offset_text else after
    if length <= 0 or offset < 0:
        raise ManifestError(f"bad {what} {value!r}")
    return ByteRange(offset, length)


def parse_hls_media(text: str, *, base_url: str, limits: ManifestLimits = _DEFAULT_LIMITS) -> Manifest:
    """An HLS media playlist → one rendition whose fetch is a :class:`SegmentedFetch` (BYTERANGE, MAP, AES-128;
    the ``#EXTINF`` count is checked before the m3u8 library parses anything)."""
    _cap(len(text), limits.max_chars, f"HLS playlist is {len(text)} characters")
    limits.check_count(text.count("#EXTINF"), what="HLS media playlist")
    playlist = _m3u8(text, what="media")
    if playlist.is_variant:
        raise ManifestError("expected an HLS media playlist, got a master playlist")
    limits.check_count(len(playlist.segments), what="HLS media playlist")
    if not playlist.is_endlist:
        raise ManifestError("live HLS playlist (no #EXT-X-ENDLIST) is not supported")
    total = sum(float(s.duration or 0) for s in playlist.segments)
    limits.check_duration(total, what="HLS media playlist")
    if not playlist.segments:
        raise ManifestError("HLS media playlist has no segments")
    sequence0 = int(playlist.media_sequence or 0)
    segments: list[Segment] = []
    init: InitSection | None = None
    inits: set[InitSection] = set()
    declared_bytes = 0
    last_end: dict[str, int] = {}
    key_urls: dict[str, str] = {}
    resolve = _resolver(base_url, limits=limits, what="HLS segment")
    for i, seg in enumerate(playlist.segments):
        url = resolve(seg.uri)
        byte_range = None
        if seg.byterange:
            byte_range = _hls_range(seg.byterange, after=last_end.get(url, 0), what="EXT-X-BYTERANGE")
            last_end[url] = byte_range.start + byte_range.length
            declared_bytes += byte_range.length
        key = None
        if seg.key is not None and (seg.key.method or "NONE").upper() != "NONE":
            if seg.key.method.upper() != "AES-128" or (seg.key.keyformat and seg.key.keyformat != "identity"):
                raise ManifestError(f"unsupported HLS encryption {seg.key.method} {seg.key.keyformat or ''}"
                                    .strip())
            if not seg.key.uri:
                raise ManifestError("EXT-X-KEY AES-128 without a URI")
            if seg.key.uri not in key_urls:
                key_urls[seg.key.uri] = limits.check_url(urljoin(base_url, seg.key.uri.strip()), what="HLS key")
            iv = _parse_iv(seg.key.iv) if seg.key.iv else iv_for_sequence(sequence0 + i)
            key = KeyInfo(method="AES-128", url=key_urls[seg.key.uri], iv=iv)
        if seg.init_section is not None:
            init_range = None
            if seg.init_section.byterange:
                init_range = _hls_range(seg.init_section.byterange, after=0, what="EXT-X-MAP")
            section = InitSection(limits.check_url(urljoin(base_url, seg.init_section.uri.strip()),
                                                   what="HLS init"), init_range)
            inits.add(section)
            init = init or section
        segments.append(Segment(index=i, url=url, duration=float(seg.duration or 0), byte_range=byte_range,
                                key=key))
    if len(inits) > 1:
        # A mid-stream EXT-X-MAP change (a discontinuity) cannot be remuxed as one init + fragments.
        raise ManifestError("HLS playlist changes EXT-X-MAP mid-stream")
    _cap(declared_bytes, limits.max_bytes, f"HLS media playlist: {declared_bytes} declared bytes")
    fetch = SegmentedFetch(count=len(segments), duration=total, init=init, explicit=tuple(segments), limits=limits)
    rendition = Rendition(kind="video", id="hls-media", fetch=fetch, has_audio=True,
                          container="mp4" if init else "ts")
    return Manifest(source="hls", video=(rendition,), audio=(), duration=total)


def parse_manifest(data: bytes, *, kind: str, base_url: str, limits: ManifestLimits = _DEFAULT_LIMITS) -> Manifest:
    """A fetched manifest body of ``kind`` (``hls``, ``dash``, or ``hls-media``: a variant's media playlist) →
    :class:`Manifest`."""
    _cap(len(data), limits.max_chars, f"{kind} manifest is {len(data)} bytes")
    parse = {"hls": parse_hls, "dash": parse_dash, "hls-media": parse_hls_media}[kind]
    return parse(data.decode("utf-8", "replace"), base_url=base_url, limits=limits)


_XML_DECL = re.compile(r"<!\s*(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_TEMPLATE_ID = re.compile(r"\$(RepresentationID|Number|Time|Bandwidth)(?:%0(\d{1,2})d)?\$|\$\$")


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _children(elem: ET.Element | None, name: str) -> list[ET.Element]:
    return [] if elem is None else [c for c in elem if _local(c.tag) == name]


def _child(elem: ET.Element | None, name: str) -> ET.Element | None:
    return next(iter(_children(elem, name)), None)


def _substitute(template: str, *, rep_id: str, bandwidth: int | None, number: int | None, time_: int | None,
                partial: bool = False) -> str:
    """Fill a DASH template's identifiers; ``partial`` leaves ``$Number$``/``$Time$``/``$$`` for a second pass."""

    def repl(match: re.Match[str]) -> str:
        name, width = match.group(1), match.group(2)
        if name is None:
            return "$$" if partial else "$"
        if partial and name in ("Number", "Time"):
            return match.group(0)
        if name == "RepresentationID":
            return rep_id
        value = {"Number": number, "Time": time_, "Bandwidth": bandwidth}[name]
        if value is None:
            raise ManifestError(f"SegmentTemplate uses ${name}$ but the manifest gives no value for it")
        return f"{value:0{width}d}" if width else str(value)

    return _TEMPLATE_ID.sub(repl, template)


def _expand_template(spec: TemplateSpec, *, limits: ManifestLimits) -> Iterator[Segment]:
    # Per segment only digits go in, then the URL is resolved (and scheme-checked, unless it is a plain relative
    # name on an already-checked base).
    resolve = _resolver(spec.base_url, limits=limits, what="DASH segment")
    index = 0
    total = sum(n for _, _, n in spec.runs)
    for t, d, n in spec.runs:
        for k in range(n):
            url = resolve(_substitute(spec.media, rep_id="", bandwidth=None, number=spec.start_number + index,
                                      time_=t + k * d))
            duration = d / spec.timescale
            if index == total - 1 and spec.last_duration is not None:
                duration = spec.last_duration
            yield Segment(index=index, url=url, duration=duration)
            index += 1


def _nearest(levels: Sequence[ET.Element], *path: str) -> ET.Element | None:
    """The element at ``path`` under the lowest of ``levels`` (Period, AdaptationSet, Representation) that has
    one: how SegmentTemplate, SegmentList and SegmentBase are inherited."""
    for level in reversed(levels):
        found: ET.Element | None = level
        for name in path:
            found = _child(found, name)
        if found is not None:  # not ``if found``: an Element without children is falsy
            return found
    return None


def _base_urls(elem: ET.Element, parent: str) -> list[str]:
    """The ``BaseURL`` children of ``elem`` resolved against ``parent``; ``[parent]`` when it has none."""
    texts = [(b.text or "").strip() for b in _children(elem, "BaseURL")]
    return [urljoin(parent, text) for text in texts if text] or [parent]


def _timeline_runs(timeline: ET.Element, *, timescale: int, period_end: int | None, limits: ManifestLimits,
                   what: str) -> tuple[tuple[int, int, int], ...]:
    """``SegmentTimeline`` → ``(t, d, n)`` runs, counted arithmetically: nothing is expanded here, and the count
    is checked after every ``S``, so ``r="1000000000"`` costs a few integer operations."""
    entries = _children(timeline, "S")
    limits.check_count(len(entries), what=what)
    runs: list[tuple[int, int, int]] = []
    total = 0
    cursor = 0
    for i, s in enumerate(entries):
        t = _int(s.get("t"), what=f"{what} S@t") if s.get("t") is not None else cursor
        d = _int(s.get("d"), what=f"{what} S@d")
        r = _int(s.get("r", "0"), what=f"{what} S@r")
        if d <= 0 or t < 0:
            raise ManifestError(f"{what}: bad SegmentTimeline entry t={t} d={d}")
        if r < -1:
            raise ManifestError(f"{what}: bad SegmentTimeline repeat r={r}")
        if r == -1:
            next_t = entries[i + 1].get("t") if i + 1 < len(entries) else None
            end = _int(next_t, what=f"{what} S@t") if next_t is not None else period_end
            if end is None:
                raise ManifestError(f"{what}: S@r=-1 with no known end")
            n = max(0, -(-(end - t) // d))  # ceil
        else:
            n = r + 1
        total += n
        limits.check_count(total, what=what)
        runs.append((t, d, n))
        cursor = t + d * n
    if runs:
        limits.check_duration((cursor - runs[0][0]) / timescale, what=what)
    return tuple(runs)


def parse_dash(xml_text: str, *, base_url: str, limits: ManifestLimits = _DEFAULT_LIMITS) -> Manifest:
    """A static, single-Period DASH MPD → :class:`Manifest` (what it reads and refuses: docs/media.md,
    "Manifest reference")."""
    _cap(len(xml_text), limits.max_chars, f"MPD is {len(xml_text)} characters")
    if _XML_DECL.search(xml_text):
        raise ManifestError("MPD declares a DTD or entities; refused")
    tags = xml_text.count("<")  # every element costs at least one; a few ms for 16 MiB
    _cap(tags, limits.max_tags, f"MPD has {tags} tags")
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ManifestError(f"unparsable MPD: {exc}") from None
    if _local(root.tag) != "MPD":
        raise ManifestError(f"not an MPD (root element {_local(root.tag)!r})")
    if (root.get("type") or "static") != "static":
        raise ManifestError("live MPD (type=dynamic) is not supported")
    periods = _children(root, "Period")
    if len(periods) != 1:
        raise ManifestError(f"multi-period MPD ({len(periods)} Periods) is not supported" if periods
                            else "MPD has no Period")
    period = periods[0]
    duration = _iso_duration(root.get("mediaPresentationDuration"))
    period_start = _iso_duration(period.get("start")) or 0.0
    period_duration = _iso_duration(period.get("duration"))
    if period_duration is None and duration is not None:
        period_duration = max(0.0, duration - period_start)
    limits.check_duration(duration, what="MPD")
    limits.check_duration(period_duration, what="MPD Period")
    representations = sum(len(_children(a, "Representation")) for a in _children(period, "AdaptationSet"))
    _cap(representations, limits.max_renditions, f"MPD: {representations} Representations")

    mpd_base = _base_urls(root, base_url)[0]
    period_base = _base_urls(period, mpd_base)[0]
    video: list[Rendition] = []
    audio: list[Rendition] = []
    for aset in _children(period, "AdaptationSet"):
        aset_base = _base_urls(aset, period_base)[0]
        for rep in _children(aset, "Representation"):
            kind = _dash_kind(aset, rep)
            if kind is None:
                continue  # text, images, unknown
            rep_id = rep.get("id") or f"rep-{len(video) + len(audio)}"
            what = f"MPD Representation {rep_id!r}"
            rep_urls = [limits.check_url(url, what=f"{what} BaseURL") for url in _base_urls(rep, aset_base)]
            bandwidth = _opt_int(rep.get("bandwidth"), what=f"{what} bandwidth")
            fetch = _dash_fetch([period, aset, rep], urls=rep_urls, rep_id=rep_id, bandwidth=bandwidth,
                                period_duration=period_duration, limits=limits, what=what)
            codecs = rep.get("codecs") or aset.get("codecs")
            mime = rep.get("mimeType") or aset.get("mimeType") or ""
            (video if kind == "video" else audio).append(Rendition(
                kind=kind, id=rep_id, fetch=fetch, codecs=codecs, codec=codec_family(codecs), bandwidth=bandwidth,
                width=_opt_int(rep.get("width") or aset.get("width"), what=f"{what} width"),
                height=_opt_int(rep.get("height") or aset.get("height"), what=f"{what} height"),
                frame_rate=_frame_rate(rep.get("frameRate") or aset.get("frameRate")),
                container=mime.split("/", 1)[1] if "/" in mime else None))
    if not video:
        raise ManifestError("MPD has no video Representation")
    if duration is None:
        durations = [r.fetch.duration for r in video if isinstance(r.fetch, SegmentedFetch) and r.fetch.duration]
        duration = period_duration if period_duration is not None else max(durations, default=None)
    return Manifest(source="dash", video=tuple(video), audio=tuple(audio), duration=duration)


def _dash_kind(aset: ET.Element, rep: ET.Element) -> Kind | None:
    content = (aset.get("contentType") or "").lower()
    mime = (rep.get("mimeType") or aset.get("mimeType") or "").lower()
    codecs = rep.get("codecs") or aset.get("codecs")
    for candidate in (content, mime.split("/")[0]):
        if candidate in ("video", "audio"):
            return candidate  # type: ignore[return-value]
    family = codec_family(codecs)  # a family is either a video or an audio one
    return None if family is None else "video" if family in _VIDEO_FAMILIES.values() else "audio"


def _dash_fetch(levels: list[ET.Element], *, urls: list[str], rep_id: str, bandwidth: int | None,
                period_duration: float | None, limits: ManifestLimits, what: str) -> Fetch:
    base = urls[0]
    attrs = {k: v for level in levels for k, v in getattr(_child(level, "SegmentTemplate"), "attrib", {}).items()}
    if attrs.get("media"):
        timescale = _int(attrs.get("timescale", "1"), what=f"{what} timescale")
        if timescale <= 0:
            raise ManifestError(f"{what}: bad timescale {timescale}")
        start_number = _int(attrs.get("startNumber", "1"), what=f"{what} startNumber")
        pto = _int(attrs.get("presentationTimeOffset", "0"), what=f"{what} presentationTimeOffset")
        init_elem = _nearest(levels, "SegmentTemplate", "Initialization")
        init_template = attrs.get("initialization") or getattr(init_elem, "attrib", {}).get("sourceURL")
        fill = functools.partial(_substitute, rep_id=rep_id, bandwidth=bandwidth, number=None, time_=None)
        init = InitSection(limits.check_url(urljoin(base, fill(init_template)), what=f"{what} initialization")
                           ) if init_template else None
        last_duration = None
        timeline = _nearest(levels, "SegmentTemplate", "SegmentTimeline")
        if timeline is not None:
            period_end = None
            if period_duration is not None:
                period_end = pto + math.ceil(period_duration * timescale - 1e-6)
            runs = _timeline_runs(timeline, timescale=timescale, period_end=period_end, limits=limits, what=what)
            total_ticks = sum(d * n for _, d, n in runs)
            seconds = total_ticks / timescale
        else:
            if "$Time$" in attrs["media"]:
                raise ManifestError(f"{what}: $Time$ template without a SegmentTimeline")
            seg_ticks = _int(attrs.get("duration"), what=f"{what} SegmentTemplate@duration")
            if seg_ticks <= 0:
                raise ManifestError(f"{what}: bad SegmentTemplate@duration {seg_ticks}")
            if period_duration is None:
                raise ManifestError(f"{what}: SegmentTemplate@duration without a known Period duration")
            # Count arithmetically (duration and count are both capped) before anything is built.
            count = max(1, math.ceil(period_duration * timescale / seg_ticks - 1e-9))
            limits.check_count(count, what=what)
            runs = ((pto, seg_ticks, count),)
            seconds = period_duration
            last_duration = period_duration - (count - 1) * seg_ticks / timescale
        count = sum(n for _, _, n in runs)
        if count == 0:
            raise ManifestError(f"{what}: no segments")
        spec = TemplateSpec(base_url=base, media=fill(attrs["media"], partial=True), start_number=start_number,
                            timescale=timescale, runs=runs, last_duration=last_duration)
        # Check the scheme on a sample now, so a hostile template fails at parse time, not at fetch time.
        next(_expand_template(replace(spec, runs=(runs[0][:2] + (1,),)), limits=limits))
        return SegmentedFetch(count=count, duration=seconds, init=init, template=spec, limits=limits)

    seglist = _nearest(levels, "SegmentList")
    if seglist is not None:
        entries = _children(seglist, "SegmentURL")
        limits.check_count(len(entries), what=what)
        timescale = _int(seglist.get("timescale", "1"), what=f"{what} timescale")
        list_ticks = _opt_int(seglist.get("duration"), what=f"{what} SegmentList@duration")
        seg_duration = list_ticks / timescale if list_ticks and timescale > 0 else None
        init_elem = _child(seglist, "Initialization")
        init = None if init_elem is None else InitSection(
            limits.check_url(urljoin(base, init_elem.get("sourceURL") or ""), what=f"{what} initialization"),
            _dash_range(init_elem.get("range"), what=f"{what} Initialization"))
        segments = []
        declared = 0
        for i, entry in enumerate(entries):
            byte_range = _dash_range(entry.get("mediaRange"), what=f"{what} mediaRange")
            declared += byte_range.length if byte_range else 0
            url = limits.check_url(urljoin(base, entry.get("media") or ""), what=f"{what} SegmentURL")
            segments.append(Segment(index=i, url=url, duration=seg_duration, byte_range=byte_range))
        _cap(declared, limits.max_bytes, f"{what}: {declared} declared bytes")
        if not segments:
            raise ManifestError(f"{what}: empty SegmentList")
        list_seconds = seg_duration * len(segments) if seg_duration else period_duration
        limits.check_duration(list_seconds, what=what)
        return SegmentedFetch(count=len(segments), duration=list_seconds, init=init, explicit=tuple(segments),
                              limits=limits)

    init_range = index_range = None
    segment_base = _nearest(levels, "SegmentBase")
    if segment_base is not None:
        index_range = _dash_range(segment_base.get("indexRange"), what=f"{what} indexRange")
        init_elem = _child(segment_base, "Initialization")
        if init_elem is not None:
            init_range = _dash_range(init_elem.get("range"), what=f"{what} Initialization@range")
    return SingleFile(urls=tuple(urls), init_range=init_range, index_range=index_range)


@dataclass(frozen=True, slots=True)
class Selection:
    """The renditions chosen for one video; ``audio`` is None when the video carries its own (or none exists)."""

    video: Rendition
    audio: Rendition | None

    def describe(self) -> dict[str, Any]:
        """What is recorded on the asset about the choice."""
        video, audio = self.video, self.audio
        return {"height": video.height, "width": video.width, "codec": video.codec, "codecs": video.codecs,
                "bitrate": video.bandwidth, "frame_rate": video.frame_rate, "rendition": video.id,
                "audio_codec": audio.codec if audio else None, "audio_bitrate": audio.bandwidth if audio else None,
                "audio_rendition": audio.id if audio else None}


def select(manifest: Manifest, *, max_height: int = default("MEDIA_VIDEO_MAX_HEIGHT"),
           codec_preference: Sequence[str] = tuple(default("MEDIA_VIDEO_CODECS"))) -> Selection:
    """Pick one video rendition and, if it has no audio of its own, one audio rendition; deterministic (the
    rules: docs/media.md, "Manifest reference"); every parser refuses a manifest without video."""
    preference = [_VIDEO_FAMILIES.get(p.strip().lower(), p.strip().lower()) for p in codec_preference]

    def codec_rank(r: Rendition) -> int:
        return preference.index(r.codec) if r.codec in preference else len(preference)

    # min() returns the first of equals: ties go to the manifest's order.
    fitting = [r for r in manifest.video if r.height is None or r.height <= max_height]
    if fitting:
        video = min(fitting, key=lambda r: (-(r.height or 0), codec_rank(r), -(r.bandwidth or 0)))
    else:
        video = min(manifest.video, key=lambda r: (r.height or 0, codec_rank(r), r.bandwidth or 0))
    audio = None
    if not video.has_audio and manifest.audio:
        pool = [a for a in manifest.audio if video.group and a.group == video.group] or list(manifest.audio)
        audio = min(pool, key=lambda a: (-(a.bandwidth or 0), not a.default))
    return Selection(video=video, audio=audio)

