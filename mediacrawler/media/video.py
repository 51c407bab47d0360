"""Videos from manifests: the plan that joins :mod:`manifests`, :mod:`segments`, :mod:`assemble` and the store.

DESIGN STUB. The pure parts exist and are tested (``manifests.py``, ``assemble.py``); this module is where the
media pipeline will drive them. The flow for one video asset (a ``MediaAsset`` whose ``kind`` is ``video`` and
whose source is a manifest URL, a Bilibili playurl payload or a set of progressive variants):

1. **Resolve** — the payload becomes a :class:`~mediacrawler.media.manifests.Manifest` through the matching pure
   parser: ``parse_hls`` / ``parse_dash`` on the fetched manifest text (one Scrapy request, through the rate
   budget, ``DOWNLOAD_MAXSIZE`` capped at ``MEDIA_MANIFEST_MAX_CHARS``), ``parse_bilibili_playurl`` on the item's
   playurl JSON, ``progressive_variants`` on e.g. Weibo ``media_info``. All caps of :class:`ManifestLimits` apply
   here, so a hostile manifest fails the asset (``status="failed"``, ``reason=ManifestError.reason``) before a
   single segment request exists.

2. **Select** — ``select(manifest, max_height=…, codec_preference=…)`` with :class:`VideoSettings` (settings,
   overridden per crawl by ``-a max_height=720`` / ``-a video_codecs=hevc,avc1`` through the spider's typed
   args). An HLS variant (``PlaylistRef``) costs one more request for its media playlist, then ``with_fetch``.
   ``Selection.describe()`` goes on the asset (height, codec, bitrate, rendition ids).

3. **Fetch** — per track:

   - ``SingleFile`` (Bilibili DASH, SegmentBase, progressive MP4): the existing large-file path,
     :class:`~mediacrawler.media.segments.SegmentedDownloader` (Range segments, ledger, If-Range, resume,
     backups from ``urls[1:]`` tried in order on failure, ``refresh_media_url`` for Bilibili's 120-minute URLs).
   - ``SegmentedFetch`` (HLS, DASH templates/lists): one Scrapy request per fragment (``Range`` header when the
     segment has a byte range), at most ``MEDIA_FRAGMENT_CONCURRENCY`` in flight per video, each retried by
     Scrapy's RetryMiddleware and then up to ``MEDIA_FRAGMENT_RETRIES`` more times; sent through
     ``engine.download_async()`` and the shared rate budget like any media request. Keys (``KeyInfo.url``) are
     fetched once per video and held in memory only. Each fragment body is decrypted
     (``decrypt_aes128(data, key=…, iv=seg.key.iv)``) and written to the video's spool directory as
     ``<track>/<index>.part`` by temp name + fsync + rename; then the **fragment ledger** records it.

   The fragment ledger is the segment ledger's sibling (same atomic save, same "untrusted → start over" rule):
   ``<FILES_STORE>/spool/<sha256 of asset key>.video/ledger.json`` holding the selection (rendition ids, fragment
   counts, a fingerprint of the segment URL list without query strings, since signed query strings change
   between runs) and, per track, the indexes done with their sizes. A restart re-parses the manifest, re-selects
   (deterministic), and fetches only indexes missing from the ledger whose ``.part`` files exist with the
   recorded size. If the fingerprint differs (another rendition, a re-encoded video) the spool starts over.

4. **Account** — ``ordered_parts(count=fetch.count, parts=ledger_parts)`` per track. A fragment still failing
   after retries fails the asset with ``reason="fragment <i> of <n> failed: <why>"``; nothing is assembled from
   an incomplete set, the spool is kept for the next run, and the crawl goes on (the asset is the unit of
   failure, never the crawl).

5. **Assemble** — ``remux_to_mp4(video_parts, audio_parts, out, init_video=…, init_audio=…)`` in a worker thread
   (``scrapy.utils.asyncio.run_in_thread``): PyAV stream copy, ``movflags=faststart``, written as ``.part`` and
   renamed. Init sections are fetched like fragment 0 of their track (index ``-1`` in the ledger).

6. **Verify** — ``verify_mp4(out, expect_audio=…, expected_duration=manifest.duration or fetch.duration,
   tolerance=MEDIA_VIDEO_DURATION_TOLERANCE, max_gap=MEDIA_VIDEO_MAX_GAP)``; an ``AssemblyError`` fails the asset
   with its reason and quarantines the output. ``VideoInfo`` joins ``Selection.describe()`` on the asset.

7. **Store** — the verified MP4 goes into the content-addressed store like any other file (hash while copying,
   ``objects/ab/cd/<sha256>.mp4``, index entry for the asset key), then the video's spool directory is removed.
   A progressive single-file MP4 skips 4–5 only if it already verifies as faststart MP4; otherwise it is remuxed
   too, so every stored video is a faststart MP4 that PyAV has opened.

Stats (namespaced): ``media/video/selected/<height>``, ``media/video/fragments``, ``media/video/fragments_resumed``,
``media/video/failed/<reason-kind>``, ``media/video/manifest_refused``, ``media/video/assembled``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mediacrawler.media.manifests import DEFAULT_CODEC_PREFERENCE, DEFAULT_MAX_HEIGHT, ManifestLimits

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: MEDIA_FRAGMENT_CONCURRENCY: fragments of one video in flight at once (yt-dlp's ``-N``).
DEFAULT_FRAGMENT_CONCURRENCY = 4
#: MEDIA_FRAGMENT_RETRIES: attempts per fragment after Scrapy's RetryMiddleware gave up.
DEFAULT_FRAGMENT_RETRIES = 3
#: MEDIA_VIDEO_DURATION_TOLERANCE: relative difference allowed between the MP4's duration and the manifest's.
DEFAULT_DURATION_TOLERANCE = 0.02
#: MEDIA_VIDEO_MAX_GAP: seconds; a larger jump between consecutive video timestamps fails verification.
DEFAULT_MAX_GAP = 5.0


@dataclass(frozen=True, slots=True)
class VideoSettings:
    """The knobs of the video path.

    ``max_height`` (MEDIA_VIDEO_MAX_HEIGHT, default 1080) and ``codecs`` (MEDIA_VIDEO_CODECS, default
    ``["avc1", "hevc", "av01"]``) feed :func:`~mediacrawler.media.manifests.select`; a spider's ``max_height`` /
    ``video_codecs`` arguments override them for one crawl. ``limits`` are the MEDIA_MANIFEST_* caps.
    """

    max_height: int = DEFAULT_MAX_HEIGHT
    codecs: tuple[str, ...] = DEFAULT_CODEC_PREFERENCE
    fragment_concurrency: int = DEFAULT_FRAGMENT_CONCURRENCY
    fragment_retries: int = DEFAULT_FRAGMENT_RETRIES
    duration_tolerance: float = DEFAULT_DURATION_TOLERANCE
    max_gap: float = DEFAULT_MAX_GAP
    limits: ManifestLimits = field(default_factory=ManifestLimits)

    @classmethod
    def from_settings(cls, settings: BaseSettings, *, spider_args: Any = None) -> VideoSettings:
        """Settings first, then the crawl's own ``max_height`` / ``video_codecs`` when the spider's args have
        them (``-a max_height=720``)."""
        max_height = settings.getint("MEDIA_VIDEO_MAX_HEIGHT", DEFAULT_MAX_HEIGHT)
        codecs = tuple(settings.getlist("MEDIA_VIDEO_CODECS", list(DEFAULT_CODEC_PREFERENCE)))
        if spider_args is not None:
            max_height = int(getattr(spider_args, "max_height", None) or max_height)
            override = getattr(spider_args, "video_codecs", None)
            if override:
                codecs = tuple(override.split(",") if isinstance(override, str) else override)
        if max_height <= 0:
            raise ValueError(f"MEDIA_VIDEO_MAX_HEIGHT must be positive, not {max_height}")
        return cls(
            max_height=max_height,
            codecs=codecs,
            fragment_concurrency=settings.getint("MEDIA_FRAGMENT_CONCURRENCY", DEFAULT_FRAGMENT_CONCURRENCY),
            fragment_retries=settings.getint("MEDIA_FRAGMENT_RETRIES", DEFAULT_FRAGMENT_RETRIES),
            duration_tolerance=settings.getfloat("MEDIA_VIDEO_DURATION_TOLERANCE", DEFAULT_DURATION_TOLERANCE),
            max_gap=settings.getfloat("MEDIA_VIDEO_MAX_GAP", DEFAULT_MAX_GAP),
            limits=ManifestLimits.from_settings(settings),
        )
