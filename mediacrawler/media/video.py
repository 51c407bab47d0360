"""Videos (and large files) from manifests, listed renditions or one URL into the content-addressed store: resolve,
select, fetch (Range spool or fragments with a resumable ledger), assemble, verify, store. The steps, the fragment
ledger, failure reasons and stats: docs/media.md, "Video".
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from scrapy.http import Request, Response
from scrapy.http.request import NO_CALLBACK

from mediacrawler.config import setting
from mediacrawler.contracts import META_VIDEO, download_error_reason
from mediacrawler.fsutil import write_atomic
from mediacrawler.media.assemble import (AssemblyError, chapter_entries, concat_mp4, decrypt_aes128, ordered_parts,
                                         remux_to_mp4, verify_mp4)
from mediacrawler.media.index import ObjectRecord
from mediacrawler.media.integrity import BodyCheck, MediaRejected, check_body
from mediacrawler.media.manifests import (
    ByteRange,
    Manifest,
    ManifestError,
    ManifestLimits,
    PlaylistRef,
    Rendition,
    Segment,
    SegmentedFetch,
    Selection,
    SingleFile,
    parse_manifest,
    select,
    split_codecs,
    with_fetch,
)
from mediacrawler.media.renditions import manifest_from_renditions, progressive_variants
from mediacrawler.media.segments import (
    SegmentedDownloader,
    SegmentError,
    SpoolResult,
    download_piece,
)
from mediacrawler.media.sniff import SNIFF_BYTES
from mediacrawler.media.spool import (
    INIT,
    LOCK_NAME,
    CoalescingSaver,
    FragmentLedger,
    drain,
    gather_all,
    load_ledger,
    lock_path,
    parse_content_range,
    save_ledger,
    video_dir_for,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from mediacrawler.media.assemble import VideoInfo
    from mediacrawler.media.index import MediaIndex
    from mediacrawler.media.store import ContentAddressedStore, Persisted

logger = logging.getLogger(__name__)

LEDGER_NAME = "ledger.json"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class VideoSettings:
    """The MEDIA_VIDEO_*, MEDIA_FRAGMENT_CONCURRENCY and MEDIA_MANIFEST_* settings (a spider's ``max_height`` /
    ``video_codecs`` arguments override the first two for one crawl)."""

    max_height: int
    codecs: tuple[str, ...]
    fragment_concurrency: int
    duration_tolerance: float
    max_gap: float
    limits: ManifestLimits

    @classmethod
    def from_settings(cls, settings: BaseSettings, *, spider_args: Any = None) -> VideoSettings:
        """Settings first, then the crawl's own ``max_height`` / ``video_codecs`` (``-a max_height=720``)."""
        max_height = int(getattr(spider_args, "max_height", None) or setting(settings, "MEDIA_VIDEO_MAX_HEIGHT"))
        codecs = getattr(spider_args, "video_codecs", None) or setting(settings, "MEDIA_VIDEO_CODECS")
        if max_height <= 0:
            raise ValueError(f"MEDIA_VIDEO_MAX_HEIGHT must be positive, not {max_height}")
        if setting(settings, "MEDIA_FRAGMENT_CONCURRENCY") < 1:
            raise ValueError("MEDIA_FRAGMENT_CONCURRENCY must be at least 1")
        return cls(max_height=max_height, codecs=tuple(codecs.split(",") if isinstance(codecs, str) else codecs),
                   fragment_concurrency=setting(settings, "MEDIA_FRAGMENT_CONCURRENCY"),
                   duration_tolerance=setting(settings, "MEDIA_VIDEO_DURATION_TOLERANCE"),
                   max_gap=setting(settings, "MEDIA_VIDEO_MAX_GAP"), limits=ManifestLimits.from_settings(settings))


#: Failures that another rendition would not mend: they end the asset (see _VideoJob._from_manifest).
_FATAL_REASONS = frozenset({"spool-busy", "disk-full", "store-error"})


class VideoError(SegmentError):
    """A video asset that cannot be stored; ``reason`` is a slug (``fragment-missing``, ``manifest-http-404``,
    ``key-invalid``, ``spool-busy``…), the message adds the detail."""


@dataclass(frozen=True, slots=True)
class VideoOutcome:
    """What :meth:`VideoDownloader.fetch` produced: a stored object (``obj``; ``created`` False when the bytes were
    already in the store) or an ``error`` (``"<reason>: <detail>"``), plus the rendition and measured duration."""

    obj: ObjectRecord | None = None
    created: bool = False
    rendition: dict[str, Any] | None = None
    duration: float | None = None
    error: str | None = None


def detect_manifest(head: bytes) -> str | None:
    """``"hls"`` or ``"dash"`` when the first bytes of a response are a manifest rather than a media file; ``None``
    otherwise (a JSON body too: platform API answers are read by ``parsers/``, not here)."""
    text = head[:SNIFF_BYTES].lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"#EXTM3U"):
        return "hls"
    if text.startswith(b"<") and b"<MPD" in text:
        return "dash"
    return None


def progressive_label(url: str) -> str:
    """A quality label for a progressive URL (``progressive_variants``): a ``label`` query argument
    (``…/abc.mp4?label=mp4_720p`` → ``mp4_720p``: CDNs that name files by hash), else the file name (``…/720p.mp4``
    → ``720p``; ``…/123_720.mp4`` → ``123_720 720p``)."""
    parts = urlsplit(url)
    label = next((v for k, v in parse_qsl(parts.query) if k == "label" and v), None)
    if label is not None and re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", label):
        return label
    name = parts.path.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    if not re.search(r"(?<![0-9])\d{3,4}p(?![a-z])", stem, re.IGNORECASE):
        match = re.search(r"(?:^|[_\-.])(\d{3,4})$", stem)
        if match:
            return f"{stem} {match.group(1)}p"
    return stem


@dataclass(frozen=True, slots=True)
class FragmentPlan:
    """The fragments of one segmented track: its media ``segments`` and an init section (index ``INIT``) if any."""

    track: str
    rendition_id: str
    init: Segment | None
    segments: list[Segment]

    def all(self) -> list[Segment]:
        return ([self.init] if self.init else []) + self.segments


def plan_fingerprint(plans: Sequence[FragmentPlan]) -> str:
    """What must not change for a spool to be resumed: rendition ids, counts, URLs without query strings, ranges,
    encryption key URLs (without query)."""
    def _strip_query(url: str) -> str:
        return url.split("?", 1)[0].split("#", 1)[0]

    data = [
        [p.track, p.rendition_id, len(p.segments),
         [[f.index, _strip_query(f.url), [f.byte_range.start, f.byte_range.length] if f.byte_range else None,
          _strip_query(f.key.url) if f.key else None, f.key.iv.hex() if f.key else None] for f in p.all()]]
        for p in plans
    ]
    return hashlib.sha256(json.dumps(data, separators=(",", ":")).encode()).hexdigest()


def part_path(video_dir: Path, track: str, index: int) -> Path:
    """Where fragment ``index`` of ``track`` is kept (``init.part`` for the init section)."""
    return video_dir / track / ("init.part" if index == INIT else f"{index}.part")


def _existing_parts(video_dir: Path, ledger: FragmentLedger) -> dict[str, dict[int, int]]:
    """(Store executor.) The ledger's entries whose part file is there with the recorded size."""
    def there(track: str, index: int, size: int) -> bool:
        with contextlib.suppress(OSError):
            return part_path(video_dir, track, index).stat().st_size == size
        return False

    return {t: {i: s for i, s in d.items() if there(t, i, s)} for t, d in ledger.done.items()}


def _reset_dir(video_dir: Path) -> None:
    """(Store executor.) Empty a video spool directory, keeping its lock file (held by the caller)."""
    for child in video_dir.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        elif child.name != LOCK_NAME:
            child.unlink(missing_ok=True)


def _lock_dir(video_dir: Path) -> int:
    video_dir.mkdir(parents=True, exist_ok=True)
    fd = lock_path(video_dir / LOCK_NAME)
    if fd is None:
        raise VideoError("spool-busy", f"{video_dir} is being downloaded by another request")
    # Temp files of writes a killed run did not finish: every writer of this directory holds its lock.
    for stray in [*video_dir.glob(".*.tmp"), *video_dir.glob("*/.*.tmp")]:
        with contextlib.suppress(OSError):
            stray.unlink()
    return fd


class VideoDownloader:
    """The video and large-file path of the media pipeline into ``store``, spooling under ``spool_dir``."""

    def __init__(self, crawler: Crawler, *, store: ContentAddressedStore,
                 spool_dir: str | os.PathLike[str]) -> None:
        self.crawler = crawler
        self.settings = crawler.settings
        self.store = store
        self.spool_dir = Path(spool_dir)
        self.segments = SegmentedDownloader(crawler, store=store, spool_dir=self.spool_dir)
        self.fsync = setting(self.settings, "MEDIA_FSYNC")
        self.max_image_pixels = setting(self.settings, "MEDIA_MAX_IMAGE_PIXELS")
        self.max_image_decode_bytes = setting(self.settings, "MEDIA_MAX_IMAGE_DECODE_BYTES")
        VideoSettings.from_settings(self.settings)  # fail early (ValueError) on bad settings
        #: The settings with the arguments they were made with (a worker's spider gets new ones with each job).
        self._config: tuple[Any, VideoSettings] | None = None

    @property
    def config(self) -> VideoSettings:
        """The settings with the running spider's ``args`` applied (read again when the spider's job changes)."""
        args = getattr(getattr(self.crawler, "spider", None), "args", None)
        if self._config is None or self._config[0] is not args:
            self._config = (args, VideoSettings.from_settings(self.settings, spider_args=args))
        return self._config[1]

    def _inc(self, key: str, count: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"media/video/{key}", count)

    async def fetch(self, url: str, *, key: str, kind: str, index: MediaIndex | None, manifest: str | None = None,
                    alternates: Sequence[str] = (), referer: str | None = None, duration: float | None = None,
                    renditions: Sequence[Mapping[str, Any]] | None = None,
                    chapters: Sequence[Mapping[str, Any]] | None = None) -> VideoOutcome:
        """Download, check and store one ``video``/``audio`` asset (index key ``key``) from ``url``; never raises
        for a bad asset (the outcome carries the error). ``index`` records the stored object. ``renditions``
        (``MediaAsset.renditions``): the streams to select from, instead of reading ``url``; ``chapters``
        (``MediaAsset.chapters``): written into the MP4 (a progressive file is then remuxed, not stored as is)."""
        started = time.monotonic()
        headers = {"Referer": referer} if referer else {}
        try:
            job = _VideoJob(self, url=url, key=key, kind=kind, headers=headers, chapters=chapters)
            outcome = await job.run(manifest=manifest, alternates=alternates, duration=duration,
                                    renditions=renditions)
            if outcome.obj is not None and index is not None:
                try:
                    await self.store.run(index.record_many, [(outcome.obj, key, url)])  # durable, outage grace
                except Exception as exc:
                    # The file is safe in the store; verify lists it as an orphan until a later run indexes it.
                    logger.error("Media index write failed for %s (%s)", url, exc)
        except ManifestError as exc:
            elapsed_ms = int((time.monotonic() - started) * 1000)
            self._inc("manifest_refused")
            if self.crawler.stats is not None:
                self.crawler.stats.max_value("media/video/manifest_refused_max_ms", elapsed_ms)
            logger.debug("Manifest of %s refused after %d ms: %s", url, elapsed_ms, exc.reason)
            return self._failed("manifest-refused", exc.reason)
        except (SegmentError, MediaRejected) as exc:
            return self._failed(exc.reason, exc.detail)
        except AssemblyError as exc:
            return self._failed("assembly-failed", exc.reason)
        except OSError as exc:
            return self._failed("disk-full" if exc.errno == errno.ENOSPC else "store-error",
                                f"{type(exc).__name__}: {exc}")
        logger.debug("Video %s stored as %s in %.2fs (%s)", url, outcome.obj.path if outcome.obj else None,
                     time.monotonic() - started, outcome.rendition)
        return outcome

    def _failed(self, reason: str, detail: str) -> VideoOutcome:
        self._inc(f"failed/{reason}")
        return VideoOutcome(error=f"{reason}: {detail}" if detail else reason)


class _VideoJob:
    """The state of one :meth:`VideoDownloader.fetch` call."""

    def __init__(self, owner: VideoDownloader, *, url: str, key: str, kind: str, headers: dict[str, str],
                 chapters: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.owner = owner
        self.crawler = owner.crawler
        self.config = owner.config
        self.limits = self.config.limits
        self.url = url
        self.key = key
        self.kind = kind
        self.headers = headers
        self.chapters = list(chapters or ()) if kind == "video" else []
        self.video_dir = video_dir_for(owner.spool_dir, key=key)
        self._keys: dict[str, bytes] = {}
        self.offload = owner.store.run  # every blocking file operation, on the store's executor

    async def _fetch_text(self, url: str, *, what: str) -> bytes:
        """A manifest body (one request with Scrapy's retries, size-capped)."""
        self.owner._inc("manifests")
        response = await self._get(url, what=what, error="manifest", track=what, maxsize=self.limits.max_chars)
        if response.status != 200:
            raise VideoError(f"manifest-http-{response.status}", url)
        return response.body

    async def _get(self, url: str, *, what: str, error: str, track: str, byte_range: ByteRange | None = None,
                   maxsize: int | None = None, index: int | None = None) -> Response:
        """One body (a ``manifest``, or a ``fragment``: media, init section or key, as it is on the wire) through
        :func:`~mediacrawler.media.segments.download_piece` (a fragment's short or wrong body retried within
        RETRY_TIMES); failures by exception type."""
        self.owner._inc("requests")
        headers = {**self.headers, **({"Accept-Encoding": "identity"} if error == "fragment" else {})}
        if byte_range is not None:
            headers["Range"] = byte_range.header()
        meta: dict[str, Any] = {META_VIDEO: {"key": self.key, "track": track, "index": index},
                                "download_warnsize": 0}
        if maxsize is not None:
            meta["download_maxsize"] = maxsize
        request = Request(url, headers=headers, meta=meta, callback=NO_CALLBACK, dont_filter=True)
        # A short, cut or mislabelled 2xx body is retried; a status outside RETRY_HTTP_CODES is not (Scrapy's).
        check = (lambda r: _response_problem(r, byte_range) if error == "fragment" and r.status in (200, 206)
                 else None)
        try:
            response = await download_piece(self.crawler, request, check)
        except Exception as exc:
            reason = download_error_reason(exc)
            if error == "manifest" and reason == "too-large":
                raise ManifestError(f"{what} larger than MEDIA_MANIFEST_MAX_CHARS "
                                    f"({self.limits.max_chars})") from None
            raise VideoError(f"{error}-{'missing' if error == 'fragment' else reason}",
                             f"{what}: {type(exc).__name__}: {exc}") from exc
        retried = response.request.meta.get("retry_times", 0) if response.request else 0
        if retried > 0 and error == "fragment":
            self.owner._inc("fragment_retries", retried)
        return response

    async def run(self, *, manifest: str | None, alternates: Sequence[str], duration: float | None = None,
                  renditions: Sequence[Mapping[str, Any]] | None = None) -> VideoOutcome:
        if renditions is not None:
            joined = next((r for r in renditions if isinstance(r, Mapping) and r.get("segments")), None)
            if joined is not None:
                return await self._segmented(joined, duration=duration)
            return await self._from_manifest(manifest_from_renditions(renditions, duration=duration,
                                                                      limits=self.limits))
        if manifest is not None and manifest not in ("hls", "dash"):
            raise VideoError("manifest-unknown", f"MediaAsset.manifest={manifest!r}")
        if manifest is not None:
            body = await self._fetch_text(self.url, what=f"{manifest} manifest")
            return await self._from_manifest(await self._parse(body, kind=manifest, url=self.url))
        # An image's alternates are other sizes of it, never a better choice than the URL the record names.
        chosen, selection = (self.url, None) if self.kind == "image" else self._choose_progressive(alternates)
        spooled = await self.owner.segments.download(chosen, key=self.key, headers=self.headers)
        detected = detect_manifest(spooled.head)
        if detected is None:
            # A progressive video is held to the duration its post declares (``MediaAsset.duration``), like an
            # assembled one to its manifest's.
            declared = duration if self.kind == "video" and duration and duration > 0 else None
            return await self._progressive(spooled, selection=selection, expected_duration=declared)
        try:
            if spooled.size > self.limits.max_chars:
                raise ManifestError(f"{detected} manifest is {spooled.size} bytes, over the cap")
            body = await self.offload(Path(spooled.path).read_bytes)
        finally:
            await self.owner.segments.discard(spooled)
        return await self._from_manifest(await self._parse(body, kind=detected, url=chosen))

    async def _segmented(self, entry: Mapping[str, Any], *, duration: float | None) -> VideoOutcome:
        """One rendition listed as files played in a row (Bilibili's segmented ``durl``): each spooled in order
        (backups tried in order), joined by :func:`concat_mp4`, held to the sum of the listed ``length``s (ms)."""
        segments = entry.get("segments")
        if not isinstance(segments, Sequence) or isinstance(segments, (str, bytes)):
            raise ManifestError("segments: not a list")
        shared = {k: entry.get(k) for k in ("height", "width", "quality", "mime")}
        parsed = manifest_from_renditions(  # the limits of any listed rendition, per segment
            [{**shared, "kind": "progressive", "url": s.get("url"), "alternates": s.get("alternates") or [],
              "size": s.get("size")} if isinstance(s, Mapping) else s for s in segments], limits=self.limits)
        if parsed.skipped:
            raise ManifestError(f"segmented rendition: {parsed.skipped[0]}")
        lengths = [s.get("length") for s in segments]
        if all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths):
            duration = sum(lengths) / 1000
        self.limits.check_duration(duration, what="segmented rendition")
        lock = await self.offload(_lock_dir, self.video_dir)
        try:
            spools: list[SpoolResult] = []
            try:
                for n, rendition in enumerate(parsed.video, start=1):  # in order, one at a time
                    assert isinstance(rendition.fetch, SingleFile)
                    spools.append(await self._single_file(f"part{n}", rendition.fetch, suffix=True))
            except BaseException:
                for spooled in spools:
                    await self.owner.segments.discard(spooled)
                raise
            self.owner._inc("joined_segments", len(spools))
            return await self._assemble_store({"video": ([s.path for s in spools], None)}, spools,
                                              selection=Selection(video=parsed.video[0], audio=None),
                                              duration=duration, expect_audio=False, join=True)
        finally:
            os.close(lock)

    async def _parse(self, body: bytes, *, kind: str, url: str) -> Manifest:
        return await self.offload(parse_manifest, body, kind=kind, base_url=url, limits=self.limits)

    def _choose_progressive(self, alternates: Sequence[str]) -> tuple[str, Selection | None]:
        """The URL to fetch for an asset without a declared manifest: among ``url`` + ``alternates`` (progressive
        qualities) the selected one; the asset's own URL when there is nothing to choose."""
        urls = [u for u in dict.fromkeys([self.url, *alternates]) if isinstance(u, str) and u]
        if len(urls) < 2:
            return self.url, None
        try:
            variants = progressive_variants([(progressive_label(u), u) for u in urls], limits=self.limits)
        except ManifestError:
            return self.url, None
        selection = select(variants, max_height=self.config.max_height, codec_preference=self.config.codecs)
        fetch = selection.video.fetch
        assert isinstance(fetch, SingleFile)
        return fetch.urls[0], selection

    async def _from_manifest(self, parsed: Manifest) -> VideoOutcome:
        """The selected renditions, stored; when the selected video rendition cannot be fetched or is bad, the
        next best one (each tried once; a full disk, a store error or a busy spool end the asset)."""
        for skipped in parsed.skipped:
            logger.warning("Video %s: a listed rendition is unusable and left out: %s", self.key, skipped)
        for _ in range(len(parsed.video)):  # bounded: every failure removes one rendition
            selection = select(parsed, max_height=self.config.max_height, codec_preference=self.config.codecs)
            try:
                return await self._from_selection(parsed, selection)
            except (SegmentError, MediaRejected, AssemblyError) as exc:
                rest = tuple(r for r in parsed.video if r is not selection.video)
                if not rest or exc.reason in _FATAL_REASONS:
                    raise
                logger.warning("Video %s: rendition %s failed (%s); trying the next best", self.key,
                               selection.video.id, exc)
                self.owner._inc("rendition_fallbacks")
                parsed = dataclasses.replace(parsed, video=rest)
        raise VideoError("no-rendition", "every rendition failed")

    async def _from_selection(self, parsed: Manifest, selection: Selection) -> VideoOutcome:
        duration = parsed.duration
        video, audio = selection.video, selection.audio
        media: dict[str, Manifest] = {}

        async def playlist(name: str, rendition: Rendition | None) -> None:
            # HLS: the selected variant's media playlist and its audio group's, fetched side by side.
            if rendition is not None and isinstance(rendition.fetch, PlaylistRef):
                body = await self._fetch_text(rendition.fetch.url, what=f"{name} playlist")
                media[name] = await self._parse(body, kind="hls-media", url=rendition.fetch.url)

        await gather_all([playlist("video", video), playlist("audio", audio)])
        if "video" in media:
            video, duration = with_fetch(video, media["video"]), duration or media["video"].duration
        if audio is not None and "audio" in media:
            audio = with_fetch(audio, media["audio"])
        selection = Selection(video=video, audio=audio)
        if video.height is not None:
            self.owner._inc(f"selected/{video.height}")
        if isinstance(video.fetch, SegmentedFetch):
            duration = duration or video.fetch.duration
        tracks: list[tuple[str, Rendition]] = [("video", video)] + ([("audio", audio)] if audio else [])
        if audio is None and isinstance(video.fetch, SingleFile):
            # One muxed file (progressive, a listed muxed stream, a SegmentBase without audio): large-file path.
            spooled = await self._single_file("video", video.fetch, suffix=False)
            return await self._progressive(spooled, selection=selection, expected_duration=duration)
        # Templates are expanded here, for the selected renditions only.
        plans = [FragmentPlan(name, r.id, Segment(INIT, r.fetch.init.url, None, r.fetch.init.byte_range)
                              if r.fetch.init else None, r.fetch.segments())
                 for name, r in tracks if isinstance(r.fetch, SegmentedFetch)]
        lock = await self.offload(_lock_dir, self.video_dir)
        try:
            parts = await self._fetch_fragments(plans) if plans else {}
            spools: dict[str, SpoolResult] = {}

            async def single(name: str, fetch: SingleFile) -> None:
                spools[name] = await self._single_file(name, fetch, suffix=True)

            await gather_all(single(n, r.fetch) for n, r in tracks if isinstance(r.fetch, SingleFile))
            inputs = {name: ([spooled.path], None) for name, spooled in spools.items()}
            for plan in plans:
                got = parts[plan.track]
                init = got.pop(INIT, None)
                if plan.init is not None and init is None:
                    raise VideoError("fragment-missing", f"{plan.track} init section missing")
                try:
                    ordered = ordered_parts(count=len(plan.segments), parts=got)
                except AssemblyError as exc:
                    raise VideoError("fragment-missing", f"{plan.track}: {exc.reason}") from None
                inputs[plan.track] = (ordered, init)
            return await self._assemble_store(inputs, list(spools.values()), selection=selection,
                                              duration=duration, expect_audio=audio is not None
                                              or _declares_audio(video))
        finally:
            os.close(lock)

    def _verify(self, path: Path, *, expect_audio: bool, duration: float | None) -> VideoInfo:
        """(Store executor.) :func:`verify_mp4` with the configured tolerances."""
        return verify_mp4(path, expect_audio=expect_audio, expected_duration=duration,
                          tolerance=self.config.duration_tolerance, max_gap=self.config.max_gap)

    def _remux(self, inputs: dict[str, tuple[list[Path], Path | None]], out: Path, *, expect_audio: bool,
               duration: float | None, join: bool = False) -> VideoInfo:
        """(Store executor.) Remux the tracks into ``out`` (``join``: whole files in a row) with the asset's
        chapters, and verify it."""
        video_parts, init_video = inputs["video"]
        chapters = chapter_entries(self.chapters, duration=duration)
        if join:
            concat_mp4(video_parts, out, chapters=chapters)
            return self._verify(out, expect_audio=expect_audio, duration=duration)
        audio_parts, init_audio = inputs.get("audio", (None, None))
        remux_to_mp4(video_parts, audio_parts, out, init_video=init_video, init_audio=init_audio,
                     chapters=chapters)
        return self._verify(out, expect_audio=expect_audio, duration=duration)

    async def _assemble_store(self, inputs: dict[str, tuple[list[Path], Path | None]], spools: list[SpoolResult],
                              *, selection: Selection | None, duration: float | None,
                              expect_audio: bool, join: bool = False) -> VideoOutcome:
        """(Video directory locked.) Remux ``inputs`` into one verified MP4 and store it. The spools go either way;
        the video directory goes once stored, or when the bytes are corrupt (not worth resuming: the next run
        starts this video over); a store error keeps its fragments for the next run."""
        out = self.video_dir / "assembled.mp4"
        try:
            info = await self.offload(self._remux, inputs, out, expect_audio=expect_audio, duration=duration,
                                       join=join)
        except AssemblyError:
            await self.offload(shutil.rmtree, self.video_dir, True)
            raise
        finally:
            for spooled in spools:
                await self.owner.segments.discard(spooled)
        self.owner._inc("assembled")
        persisted = await self.offload(self.owner.store.publish_file, out, ext=".mp4")
        await self.offload(shutil.rmtree, self.video_dir, True)
        return self._outcome(persisted, info, selection, mime="video/mp4")

    async def _checked(self, spooled: SpoolResult, check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``check(*args, **kwargs)`` on the store's executor; a spool it rejects is discarded."""
        try:
            return await self.offload(check, *args, **kwargs)
        except BaseException:
            await self.owner.segments.discard(spooled)
            raise

    async def _single_file(self, track: str, fetch: SingleFile, *, suffix: bool) -> SpoolResult:
        """Spool one file through the large-file path, trying the backup URLs in order."""
        key = f"{self.key}#{track}" if suffix else self.key
        last: SegmentError | None = None
        for url in fetch.urls:  # bounded by the manifest's URL list (≤ a handful)
            try:
                spooled = await self.owner.segments.download(url, key=key, headers=self.headers)
            except SegmentError as exc:
                if exc.reason in _FATAL_REASONS:
                    raise
                logger.debug("%s of %s failed from %s (%s); trying the next URL", track, self.key, url, exc)
                last = exc
                continue
            await self._checked(spooled, check_body, spooled.head, kind="audio" if track == "audio" else self.kind)
            return spooled
        assert last is not None
        raise last

    async def _progressive(self, spooled: SpoolResult, *, selection: Selection | None,
                           expected_duration: float | None = None) -> VideoOutcome:
        """A complete media file in the spool: check, verify (remux when not a faststart MP4), publish."""
        if self.kind == "image":
            # A large image (the media pipeline sends images above MEDIA_SEGMENT_THRESHOLD here): the checks of a
            # small one, on the file (magic bytes, pixel cap before any decoding, full decode).
            checked: BodyCheck = await self._checked(
                spooled, check_body, spooled.path, kind="image", max_image_pixels=self.owner.max_image_pixels,
                max_image_decode_bytes=self.owner.max_image_decode_bytes)
            persisted = await self._store_as_is(spooled, checked.sniffed.ext)
            obj = ObjectRecord(sha256=persisted.sha256, path=persisted.relpath, size=persisted.size,
                               mime=checked.sniffed.mime, width=checked.width, height=checked.height)
            return VideoOutcome(obj=obj, created=persisted.created)
        checked = await self._checked(spooled, check_body, spooled.head, kind=self.kind)
        if self.kind != "video":
            persisted = await self._store_as_is(spooled, checked.sniffed.ext)
            return self._outcome(persisted, None, selection, mime=checked.sniffed.mime)
        expect_audio = selection is not None and _declares_audio(selection.video)
        try:
            info = await self.offload(self._verify, spooled.path, expect_audio=expect_audio,
                                       duration=expected_duration)
        except AssemblyError:
            info = None  # not an MP4 we can store as it is (FLV, TS, fragmented…): remux below
        # With chapters to write, even a faststart MP4 is remuxed (stream copy) to carry them.
        if info is not None and info.faststart and checked.sniffed.ext == ".mp4" and not self.chapters:
            persisted = await self._store_as_is(spooled, ".mp4")
            return self._outcome(persisted, info, selection, mime="video/mp4")
        lock = await self.offload(_lock_dir, self.video_dir)
        try:
            return await self._assemble_store({"video": ([spooled.path], None)}, [spooled], selection=selection,
                                              duration=expected_duration, expect_audio=expect_audio)
        finally:
            os.close(lock)

    async def _store_as_is(self, spooled: SpoolResult, ext: str | None) -> Persisted:
        self.owner._inc("stored_as_is")
        return await self.owner.segments.publish(spooled, ext=ext)

    def _outcome(self, persisted: Persisted, info: VideoInfo | None, selection: Selection | None, *,
                 mime: str | None) -> VideoOutcome:
        rendition = selection.describe() if selection is not None else {}
        if info is not None:
            # The selection says what the manifest declared; fill what it did not (HLS media playlists, labels).
            for name, value in (("width", info.width), ("height", info.height), ("codec", info.video_codec),
                                ("audio_codec", info.audio_codec)):
                if rendition.get(name) is None:
                    rendition[name] = value
        obj = ObjectRecord(sha256=persisted.sha256, path=persisted.relpath, size=persisted.size, mime=mime,
                           width=info.width if info else None, height=info.height if info else None)
        return VideoOutcome(obj=obj, created=persisted.created, rendition=rendition or None,
                            duration=round(info.duration, 3) if info else None)

    async def _fetch_fragments(self, plans: list[FragmentPlan]) -> dict[str, dict[int, Path]]:
        """Fetch every fragment of ``plans`` not already in the ledger; return ``{track: {index: path}}`` of all
        fragments on disk. Raises VideoError(``fragment-missing``) when one fails for good."""
        fingerprint = plan_fingerprint(plans)
        ledger_file = self.video_dir / LEDGER_NAME
        ledger = await self.offload(load_ledger, ledger_file, key=self.key, parse=FragmentLedger.from_json)
        if ledger is not None and ledger.fingerprint != fingerprint:
            logger.info("Video %s changed rendition or segments since the spool was started: starting over",
                        self.key)
            ledger = None
        if ledger is None:
            await self.offload(_reset_dir, self.video_dir)
            ledger = FragmentLedger(key=self.key, fingerprint=fingerprint)
        else:
            ledger.done = await self.offload(_existing_parts, self.video_dir, ledger)
            resumed = sum(len(d) for d in ledger.done.values())
            if resumed:
                self.owner._inc("fragments_resumed", resumed)
                logger.info("Resuming video %s: %d fragments already in %s", self.key, resumed, self.video_dir)
        saver = CoalescingSaver(
            snapshot=lambda: FragmentLedger(key=ledger.key, fingerprint=ledger.fingerprint,
                                            done={t: dict(d) for t, d in ledger.done.items()}),
            save=lambda snap: save_ledger(ledger_file, snap, fsync=self.owner.fsync), run=self.offload,
        )
        pending = [(p, f) for p in plans for f in p.all() if f.index not in ledger.done.get(p.track, {})]
        for url in dict.fromkeys(f.key.url for _, f in pending if f.key is not None):  # once per video, in memory
            response = await self._get(url, what="key", error="fragment", track="key", maxsize=1024)
            if (problem := _response_problem(response, None)) is not None:
                raise VideoError("fragment-missing", f"key: {problem}")
            if len(response.body) != 16:
                raise VideoError("key-invalid", f"AES-128 key at {url} is {len(response.body)} bytes, not 16")
            self._keys[url] = response.body
            self.owner._inc("keys")
        # A manifest need not declare sizes: the bytes actually stored are capped too (MEDIA_MANIFEST_MAX_BYTES),
        # so an endless or enormous rendition stops early instead of filling the disk.
        stored = [sum(sum(d.values()) for d in ledger.done.values())]

        async def one(item: tuple[FragmentPlan, Segment]) -> None:
            plan, fragment = item
            size = await self._fragment(plan, fragment)
            stored[0] += size
            if stored[0] > self.limits.max_bytes:
                raise VideoError("too-large", f"{stored[0]} bytes of fragments stored, over the cap of "
                                              f"{self.limits.max_bytes} (MEDIA_MANIFEST_MAX_BYTES)")
            ledger.done.setdefault(plan.track, {})[fragment.index] = size
            saver.request()

        if pending:
            saver.request()  # the ledger (with its fingerprint) exists before the first fragment is in
        errors = await drain(pending, one, workers=self.config.fragment_concurrency)
        await saver.flush()
        if errors:
            raise errors[0]
        return {p.track: {i: part_path(self.video_dir, p.track, i) for i in ledger.done.get(p.track, {})}
                for p in plans}

    async def _fragment(self, plan: FragmentPlan, fragment: Segment) -> int:
        """Fetch, decrypt and write one fragment of ``plan``; return its size on disk."""
        what = f"{plan.track} " + ("init section" if fragment.index == INIT
                                  else f"fragment {fragment.index} of {len(plan.segments)}")
        response = await self._get(fragment.url, what=what, error="fragment", track=plan.track,
                                   byte_range=fragment.byte_range, index=fragment.index)
        if (problem := _response_problem(response, fragment.byte_range)) is not None:
            raise VideoError("fragment-missing", f"{what} failed: {problem}")
        data, byte_range = response.body, fragment.byte_range
        if byte_range is not None and response.status == 200:  # the server ignored Range: cut the range out
            data = data[byte_range.start : byte_range.start + byte_range.length]
        del response
        path = part_path(self.video_dir, plan.track, fragment.index)
        try:
            size = await self.offload(_decrypt_and_write, data, path, fsync=self.owner.fsync, key=(
                (self._keys[fragment.key.url], fragment.key.iv) if fragment.key is not None else None))
        except AssemblyError as exc:
            raise VideoError("fragment-corrupt", f"{what}: {exc.reason}") from None
        self.owner._inc("fragments")
        return size


def _declares_audio(rendition: Rendition) -> bool:
    """Whether a muxed rendition's declared codecs name an audio codec (then the MP4 must have audio)."""
    return rendition.kind == "video" and rendition.has_audio and split_codecs(rendition.codecs)[1] is not None


def _response_problem(response: Response, byte_range: ByteRange | None) -> str | None:
    """Why a fragment response is unusable, or ``None``."""
    if "dataloss" in response.flags or "download_stopped" in response.flags:
        return "incomplete body"
    if response.status == 206 and byte_range is not None:
        parsed = parse_content_range(response.headers.get(b"Content-Range"))
        if parsed is None or parsed[0] != byte_range.start or len(response.body) != byte_range.length:
            return f"206 with Content-Range {response.headers.get(b'Content-Range')!r} for {byte_range.header()}"
        return None
    if response.status != 200:
        return f"http-{response.status}"
    if byte_range is not None and len(response.body) < byte_range.start + byte_range.length:
        return "200 without the requested range"
    return None if response.body else "empty body"


def _decrypt_and_write(data: bytes, path: Path, *, key: tuple[bytes, bytes] | None, fsync: bool) -> int:
    if key is not None:
        data = decrypt_aes128(data, key=key[0], iv=key[1])
    write_atomic(path, data, fsync=fsync)  # temp name + fsync + rename
    return len(data)
