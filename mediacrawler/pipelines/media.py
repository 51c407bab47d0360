"""The media pipeline: every MediaAsset of a Post downloaded, checked, and stored once by its SHA-256.

A ``scrapy.pipelines.media.MediaPipeline`` subclass that owns its download path: ``process_item`` runs each
request's steps (``media_to_download``, the download through ``crawler.engine.download_async``,
``media_downloaded`` or ``media_failed``) as coroutines on the reactor's asyncio loop, then ``item_completed``. The
steps of one asset and the results on the record: docs/media.md, "What happens to one asset".
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any, NoReturn, cast

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import NotConfigured, StopDownload
from scrapy.http import Headers, Request, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.pipelines.media import FileException, FileInfo, FileInfoOrError, MediaPipeline
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.reactor import is_asyncio_reactor_installed
from twisted.python.failure import Failure

from mediacrawler.config import setting
from mediacrawler.contracts import (META_ASSET, META_LARGE, META_SEGMENT, RequestRefused, asset_index_key,
                                    asset_key_of, download_error_reason, media_referer, walk_assets)
from mediacrawler.media.sniff import SNIFF_BYTES, sniff
from mediacrawler.media.store import STORE_SCHEMES, ContentAddressedStore, StoreError, object_relpath, store_scheme
from mediacrawler.media.urls import allowed_schemes, media_url_problem, strip_userinfo
from mediacrawler.scrub import scrub

# The media engine (committer, index, integrity checks with Pillow, the video flow with m3u8 and PyAV) is imported
# by the methods that use it: Scrapy imports this module for every crawl, MEDIA_ENABLED=0 too (docs/benchmarks.md,
# "Start-up").
if TYPE_CHECKING:
    from mediacrawler.media.committer import BatchCommitter, CommitJob
    from mediacrawler.media.index import MediaIndex, ObjectRecord
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Seconds between two looks at an asset whose spool another request holds (MEDIA_SPOOL_BUSY_WAIT bounds the wait).
SPOOL_BUSY_POLL = 0.5
# request.meta key: the Content-Encoding the body had on the wire (set at headers_received, see _on_headers).
_META_WIRE_CODING = "_media_wire_coding"


class MediaResult(FileInfo, total=False):
    """What the pipeline learns about one asset; FileInfo's ``checksum`` is the sha256 here."""

    sha256: str | None
    size: int | None
    mime: str | None
    width: int | None
    height: int | None
    error: str | None
    # Video path (mediacrawler.media.video): the chosen rendition and the measured duration.
    rendition: dict[str, Any] | None
    duration: float | None
    # Document path: objects derived from the body, by extension (a subtitle's SRT).
    derived: dict[str, dict[str, Any]] | None


class MediaDownloadFailed(FileException):
    """A download that produced no usable body (transport error, filtered request, store error)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# --- pure helpers -------------------------------------------------------------------------------------------
def pending_assets(item: Any) -> list[tuple[str, ItemAdapter]]:
    """``(platform, asset)`` for every MediaAsset of a Post and of the Post it reposts, in a fixed order, minus
    assets another component already settled (their ``status`` is set).

    get_media_requests and item_completed both walk this list; that is how results are matched to assets.
    """
    return [(platform, asset) for platform, asset, _ in walk_assets(item) if asset.get("status") is None]


def find_asset(item: Any, *, url: str, index_key: str | None) -> tuple[str, dict[str, Any]]:
    """``(platform, fields)`` of the MediaAsset of ``item`` (a Post, reposts included) that a media request is for:
    its ``manifest``, ``alternates``, declared ``duration``, listed ``renditions`` and ``chapters``.
    ``("unknown", {})`` when not found."""
    for platform, asset, _ in walk_assets(item):
        if asset.get("url") != url or (index_key is not None and asset_key_of(platform, asset) != index_key):
            continue
        renditions = asset.get("renditions")
        return platform, {"manifest": asset.get("manifest"), "alternates": list(asset.get("alternates") or []),
                          "duration": asset.get("duration"),
                          "renditions": list(renditions) if renditions is not None else None,
                          "chapters": asset.get("chapters")}
    return "unknown", {}


def build_media_request(*, url: str, platform: str, kind: str, key: str, referer: str | None) -> Request:
    """The download request of one asset, identity in ``meta`` (plain data only, so it can be serialised).

    ``Accept-Encoding: identity``: media are compressed formats already, and an identity body keeps
    Content-Length comparable with the body (and rules out HTTP decompression bombs). A failure is reported once,
    as the asset's WARNING, so RetryMiddleware gives up at DEBUG.
    """
    headers = {"Accept-Encoding": "identity"}
    if referer:
        headers["Referer"] = referer
    meta = {META_ASSET: {"index_key": asset_index_key(platform=platform, kind=kind, key=key), "kind": kind,
                         "key": key, "platform": platform},
            "give_up_log_level": "DEBUG"}
    return Request(url, headers=headers, meta=meta, callback=NO_CALLBACK)


def result_from_record(*, url: str, obj: ObjectRecord, status: str) -> MediaResult:
    """The pipeline result for an object already in the store."""
    return MediaResult(url=url, path=obj.path, checksum=obj.sha256, status=status, sha256=obj.sha256,
                       size=obj.size, mime=obj.mime, width=obj.width, height=obj.height, error=None)


def failed_result(*, url: str, reason: str) -> MediaResult:
    """The pipeline result for an asset that was rejected."""
    return MediaResult(url=url, path="", checksum=None, status="failed", sha256=None, size=None, mime=None,
                       width=None, height=None, error=scrub(reason))  # the record keeps it: no secret


#: Settings of earlier versions that no longer do anything, and what took their place (a WARNING when set).
REMOVED_SETTINGS = {
    "MEDIA_SLOT_CONCURRENCY": "MEDIA_CONCURRENCY_PER_HOST sizes the media downloader slots too",
    "MEDIA_COMMIT_PROCESS": "the file work runs on the media store's executor (docs/media.md, \"Concurrency\")",
}


class MediaStorePipeline(MediaPipeline):
    """Downloads every MediaAsset of a Post into the content-addressed store (docs/media.md; its settings: the
    MEDIA_* and FILES_STORE entries of mediacrawler/settings.py, where their defaults live)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "MEDIA_ENABLED"):
            raise NotConfigured("MEDIA_ENABLED is off: records are crawled without downloading media")
        # Only MEDIA_ENABLED switches the pipeline off: a setting it cannot work with fails the crawl (ValueError,
        # one line naming it; commands/crawl.py refuses these before the crawl already, config.settings_problem).
        uri = str(setting(settings, "FILES_STORE"))
        if not uri:
            raise ValueError("FILES_STORE is empty: the media store needs a local directory")
        if store_scheme(uri) not in STORE_SCHEMES:
            raise ValueError(f"FILES_STORE={uri!r}: the media store supports local paths only")
        from mediacrawler.media.index import SQLiteMediaIndex, index_class
        from mediacrawler.media.video import VideoDownloader

        try:
            self.index_class = index_class(settings)  # now, not at open, when MEDIA_INDEX is unusable
        except NotConfigured as exc:
            raise ValueError(str(exc)) from None
        self.max_image_pixels = setting(settings, "MEDIA_MAX_IMAGE_PIXELS")
        self.max_image_decode_bytes = setting(settings, "MEDIA_MAX_IMAGE_DECODE_BYTES")
        self.concurrency_per_host = setting(settings, "MEDIA_CONCURRENCY_PER_HOST")
        if self.concurrency_per_host < 1:
            raise ValueError("MEDIA_CONCURRENCY_PER_HOST must be at least 1")
        self.inline_check_bytes = setting(settings, "MEDIA_INLINE_CHECK_BYTES")
        self.commit_batch = setting(settings, "MEDIA_COMMIT_BATCH")
        self.allowed_schemes = allowed_schemes(settings)
        for name, instead in REMOVED_SETTINGS.items():
            if settings.get(name) is not None:
                logger.warning("%s is no longer used: %s", name, instead)
        super().__init__(crawler=crawler)  # MEDIA_ALLOW_REDIRECTS: allow_redirects, handle_httpstatus_list
        store_class = STORE_SCHEMES[store_scheme(uri)]
        self.cas: ContentAddressedStore = store_class(uri, fsync=setting(settings, "MEDIA_FSYNC"))
        self.stats = crawler.stats
        self.index: MediaIndex | None = None
        self.index_is_local = self.index_class is SQLiteMediaIndex
        self.committer: BatchCommitter | None = None
        self._slots: dict[str, asyncio.Semaphore] = {}
        # Results by request fingerprint, for the crawl (as MediaPipeline keeps them): a request seen before gets
        # the same result object, and an asset reporting an object already reported is "uptodate" (_apply).
        self._downloaded: dict[bytes, MediaResult | BaseException] = {}
        self._downloading: dict[bytes, asyncio.Future[None]] = {}
        # ids of results already written to an asset (see item_completed).
        self._reported: set[int] = set()
        # --- video and large files (mediacrawler.media.video): spool under FILES_STORE/spool ---
        self.video = VideoDownloader(crawler, store=self.cas, spool_dir=self.cas.root / "spool")  # ValueError: bad
        # Images above MEDIA_SEGMENT_THRESHOLD leave the one-request path for the Range-segment one as soon as
        # their headers say so (see _stop_large_image): never a whole large body in memory.
        self.segment_threshold: int = setting(settings, "MEDIA_SEGMENT_THRESHOLD")
        self.spool_busy_wait = setting(settings, "MEDIA_SPOOL_BUSY_WAIT")
        crawler.signals.connect(self._on_headers, signal=signals.headers_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MediaStorePipeline:
        return cls(crawler)

    # --- lifecycle ------------------------------------------------------------------------------------------
    def open_spider(self) -> None:
        if not is_asyncio_reactor_installed():
            # One concurrency model: coroutines on the asyncio loop (Scrapy's default reactor).
            raise ValueError("TWISTED_REACTOR: the media pipeline needs "
                             "twisted.internet.asyncioreactor.AsyncioSelectorReactor")
        super().open_spider()
        from mediacrawler.media.committer import BatchCommitter

        self.index = self.index_class.from_settings(self.crawler.settings, store_root=self.cas.root)
        self.committer = BatchCommitter(store=self.cas, index=self.index, max_image_pixels=self.max_image_pixels,
                                        max_image_decode_bytes=self.max_image_decode_bytes,
                                        max_batch=self.commit_batch, inline_bytes=self.inline_check_bytes)
        self._require_redirect_checks()
        swept = self.cas.sweep_tmp()
        if swept:
            logger.info("Removed %d stale temporary files from %s", swept, self.cas.tmp_dir)
        logger.info("Media store at %s, index %r", self.cas.root, self.index)

    async def close_spider(self) -> None:
        if self.committer is not None:
            committer, self.committer = self.committer, None
            await committer.close()
        if self.index is not None:
            self.index.close()
            self.index = None
        self.cas.close()

    def _require_redirect_checks(self) -> None:
        """MEDIA_ALLOW_REDIRECTS without MediaRedirectMiddleware would follow hops nobody checks (credentials,
        hosts, no bound of ours): then redirects are not followed, and a 3xx fails the asset (``http-3xx``)."""
        from mediacrawler.middlewares.media_redirects import MediaRedirectMiddleware  # it imports this module

        if not self.allow_redirects:
            return
        try:
            checks = self.crawler.get_downloader_middleware(MediaRedirectMiddleware)
        except RuntimeError:  # no engine (a component test): nothing is downloaded
            return
        if checks is None:
            logger.warning("MEDIA_ALLOW_REDIRECTS is on but MediaRedirectMiddleware is not enabled: "
                           "media redirects are not followed")
            self.allow_redirects = False
            self.handle_httpstatus_list = None

    # --- MediaPipeline surface ------------------------------------------------------------------------------
    async def process_item(self, item: Any) -> Any:
        """Each media request of ``item`` through :meth:`_result_of`, concurrently; then :meth:`item_completed`."""
        info = self.spiderinfo
        checked = self._checked_assets(item)  # walked once for both ends (a third of the pipeline's own CPU)
        outcomes = await asyncio.gather(*(self._result_of(r, info, item) for r in self._requests(checked)),
                                        return_exceptions=True)
        results: list[FileInfoOrError] = [(False, Failure(o)) if isinstance(o, BaseException) else (True, o)
                                          for o in outcomes]
        return self._completed(results, checked, item)

    def get_media_requests(self, item: Any, info: MediaPipeline.SpiderInfo) -> list[Request]:
        return self._requests(self._checked_assets(item))

    def _checked_assets(self, item: Any) -> list[tuple[str, ItemAdapter, str | None]]:
        """``(platform, asset, problem of its URL or None)`` for each of :func:`pending_assets`."""
        return [(platform, asset, media_url_problem(asset.get("url"), allowed_schemes=self.allowed_schemes))
                for platform, asset in pending_assets(item)]

    def _requests(self, checked: list[tuple[str, ItemAdapter, str | None]]) -> list[Request]:
        return [build_media_request(url=asset["url"], platform=platform, kind=asset["kind"], key=str(asset["key"]),
                                    referer=media_referer(self.crawler.settings, platform=platform))
                for platform, asset, problem in checked if problem is None]

    async def media_to_download(self, request: Request, info: MediaPipeline.SpiderInfo, *,
                                item: Any = None) -> MediaResult | None:
        """The stored object's result when the index has this asset and the store its bytes; else ``None``."""
        ident = request.meta.get(META_ASSET) or {}
        try:
            if self.index_is_local:
                # SQLite: a primary-key read of a local file (tens of microseconds) costs less than the
                # executor hand-off would.
                stored = self._stored_object(key=ident.get("index_key"), url=request.url)
            else:
                stored = await self.cas.run(self._stored_object, key=ident.get("index_key"), url=request.url)
        except Exception as exc:
            # An unreachable index costs a download, never the asset.
            self.stats.inc_value("media/index/errors")
            logger.warning("Media index lookup failed for %s (%s); downloading", request.url, exc)
            stored = None
        if stored is not None and ident.get("kind") not in _DOCUMENT_KINDS:
            # A document is read again (it is small): what is derived from it (a subtitle's SRT) needs its bytes.
            logger.debug("Media up to date: %s is %s", request.url, stored.path)
            return result_from_record(url=request.url, obj=stored, status="uptodate")
        return None

    async def _result_of(self, request: Request, info: MediaPipeline.SpiderInfo, item: Any) -> MediaResult:
        """The result of ``request``: the one of an earlier request with its fingerprint (awaited while that one
        runs), else :meth:`_fetch`'s. A failure that is not an asset's (a bug) is logged once, as an ERROR."""
        fp = self.crawler.request_fingerprinter.fingerprint(request)
        if fp not in self._downloaded:
            running = self._downloading.get(fp)
            if running is not None:
                await asyncio.shield(running)
            else:
                done = self._downloading[fp] = asyncio.get_running_loop().create_future()
                try:
                    self._downloaded[fp] = await self._fetch(request, info, item)
                except Exception as exc:
                    logger.exception("Media request %s failed", strip_userinfo(request.url))
                    self._downloaded[fp] = exc.with_traceback(None)  # cached: no frames kept alive
                finally:
                    self._downloading.pop(fp, None)
                    done.set_result(None)
        result = self._downloaded[fp]
        if isinstance(result, BaseException):
            raise result
        return result

    async def _fetch(self, request: Request, info: MediaPipeline.SpiderInfo, item: Any) -> MediaResult:
        """One asset: the index, then the download within the host's slot, then its checks and storing. An
        ordinary failure (a 404, a corrupt body, a refused redirect) becomes a failed result, reported once, as
        the asset's WARNING (_apply)."""
        stored = await self.media_to_download(request, info, item=item)
        if stored is not None:
            return stored
        ident = request.meta.get(META_ASSET) or {}
        # --- video/audio: manifests, Range segments, resumable spool (mediacrawler.media.video) -------------
        if ident.get("kind") in ("video", "audio"):
            async with self._host_slot(request):
                return await self._download_video(request, item=item, ident=ident)
        # --- images and documents: one request, media_downloaded --------------------------------------------
        if self.handle_httpstatus_list:
            # As MediaPipeline does: MEDIA_ALLOW_REDIRECTS leaves 3xx to RedirectMiddleware (hops re-checked by
            # middlewares/media_redirects.py), every other status reaches media_downloaded.
            request.meta["handle_httpstatus_list"] = self.handle_httpstatus_list
        else:
            request.meta["handle_httpstatus_all"] = True
        try:
            async with self._host_slot(request):
                response = await self.crawler.engine.download_async(request)
        except Exception as exc:
            return self._failed(exc, request, info)
        try:
            return await self.media_downloaded(response, request, info, item=item)
        except MediaDownloadFailed as exc:
            return self._failed(exc, request, info)

    def _web_referer(self, platform: str) -> str | None:
        """``<PLATFORM>_WEB_URL`` + ``/``: the Referer of a video request that has none (some CDNs answer 403
        without one)."""
        web = self.crawler.settings.get(f"{platform.upper()}_WEB_URL")
        return web.rstrip("/") + "/" if web else None

    async def _download_video(self, request: Request, *, item: Any, ident: dict[str, Any]) -> MediaResult:
        """The video/large-file path of one asset (:class:`~mediacrawler.media.video.VideoDownloader`)."""
        platform, fields = find_asset(item, url=request.url, index_key=ident.get("index_key"))
        sent = request.headers.get("Referer")
        referer = sent.decode("latin-1") if sent else self._web_referer(ident.get("platform") or platform)
        deadline = time.monotonic() + self.spool_busy_wait
        while True:
            outcome = await self.video.fetch(
                request.url, key=ident.get("index_key") or request.url, kind=ident.get("kind", "video"),
                index=self.index, manifest=fields.get("manifest"), alternates=fields.get("alternates") or (),
                referer=referer,
                duration=_number_or_none(fields.get("duration")), renditions=fields.get("renditions"),
                chapters=fields.get("chapters"))
            if outcome.obj is not None or not (outcome.error or "").startswith("spool-busy"):
                break
            # Another request holds this asset's spool: another worker on a shared FILES_STORE, or another post of
            # this crawl with the same asset under another URL. Wait for it, then take its object from the index.
            if time.monotonic() > deadline:
                break
            self.stats.inc_value("media/spool_busy_waits")
            await asyncio.sleep(SPOOL_BUSY_POLL)
            stored = await self.cas.run(self._stored_object, key=ident.get("index_key"), url=request.url)
            if stored is not None:
                return result_from_record(url=request.url, obj=stored, status="deduplicated")
        if outcome.obj is None:
            return failed_result(url=request.url, reason=outcome.error or "video-failed")
        result = result_from_record(url=request.url, obj=outcome.obj,
                                    status="downloaded" if outcome.created else "deduplicated")
        result["rendition"] = outcome.rendition
        result["duration"] = outcome.duration
        if outcome.created:
            self.stats.inc_value("media/stored_bytes", outcome.obj.size)
        return result

    def _on_headers(self, headers: Headers, body_length: int, request: Request, **kwargs: Any) -> None:
        """``headers_received`` of an asset request: note a content coding the server applied anyway (the
        compression middleware inflates the body later, and Content-Length counts the coded bytes); stop an image
        download whose Content-Length is above MEDIA_SEGMENT_THRESHOLD: :meth:`media_downloaded` then fetches it
        in Range segments (a body of unknown length stays on the one-request path, within DOWNLOAD_MAXSIZE)."""
        ident = request.meta.get(META_ASSET)
        if not ident or META_SEGMENT in request.meta:
            return
        coding = headers.get("Content-Encoding")
        if coding and coding.strip().lower() != b"identity":
            request.meta[_META_WIRE_CODING] = coding.decode("latin-1")
        elif (ident.get("kind") == "image" and isinstance(body_length, int)
              and body_length > self.segment_threshold):
            request.meta[META_LARGE] = body_length
            raise StopDownload(fail=False)

    async def _download_large_image(self, request: Request, *, item: Any, ident: dict[str, Any]) -> MediaResult:
        async with self._host_slot(request):
            logger.debug("Large image (%d bytes): %s goes in Range segments", request.meta[META_LARGE],
                         request.url)
            self.stats.inc_value("media/large_images")
            return await self._download_video(request, item=item, ident=ident)

    async def media_downloaded(self, response: Response, request: Request,
                               info: MediaPipeline.SpiderInfo, *, item: Any = None) -> MediaResult:
        """Check, store and index one response's body (the committer's round), or hand a large image on to the
        Range-segment path; raises :class:`MediaDownloadFailed` for a store failure."""
        from mediacrawler.media.committer import CommitJob
        from mediacrawler.media.integrity import MediaRejected, check_body, check_http

        # After a redirect the stopped request is the last hop (response.request), a copy of ``request``.
        last = response.request if response.request is not None else request
        if last.meta.get(META_LARGE) and "download_stopped" in response.flags:
            request.meta[META_LARGE] = last.meta[META_LARGE]
            return await self._download_large_image(request, item=item, ident=request.meta.get(META_ASSET) or {})
        body = response.body
        url = request.url
        self.stats.inc_value("media/response_count")
        self.stats.inc_value("media/response_bytes", len(body))
        ident = request.meta.get(META_ASSET) or {}
        kind = ident.get("kind", "image")
        content_length = _header(response, "Content-Length")
        if last.meta.get(_META_WIRE_CODING) and response.headers.get("Content-Encoding") is None:
            # Inflated by the compression middleware: Content-Length counts the coded bytes, which the download
            # handler already held against what arrived (short: a failure or the dataloss flag); the inflated
            # body has no announced length to compare with.
            content_length = None
            self.stats.inc_value("media/decoded")
        try:
            check_http(status=response.status, body_size=len(body), content_length=content_length,
                       content_range=_header(response, "Content-Range"), flags=response.flags)
            derived: dict[str, bytes] = {}
            if kind in _DOCUMENT_KINDS:
                body, derived = self._document_bodies(kind, body)
            checked = None
            if len(body) > self.inline_check_bytes:
                # A big decode would hold up the committer's whole round: checked in a worker thread first.
                checked = await self.cas.run(check_body, body, kind=kind, max_image_pixels=self.max_image_pixels,
                                             max_image_decode_bytes=self.max_image_decode_bytes)
            # Checks, hash, write, syncs and the index row: the batch committer, in one round with whatever else
            # arrived meanwhile; the job comes back once its object and its index row are durable.
            job = CommitJob(body, kind=kind, key=ident.get("index_key"), url=url, checked=checked)
            await self._commit(job)
        except MediaRejected as exc:
            logger.debug("Media rejected: %s: %s", url, exc)
            return failed_result(url=url, reason=str(exc))
        except (OSError, StoreError) as exc:
            raise _store_failure(exc) from exc
        if job.error is not None:
            if isinstance(job.error, MediaRejected):
                logger.debug("Media rejected: %s: %s", url, job.error)
                return failed_result(url=url, reason=str(job.error))
            if isinstance(job.error, (OSError, StoreError)):
                raise _store_failure(job.error) from job.error
            raise job.error
        obj = job.obj
        assert obj is not None
        if job.created:
            self.stats.inc_value("media/stored_bytes", obj.size)
        result = result_from_record(url=url, obj=obj, status="downloaded" if job.created else "deduplicated")
        if derived:
            result["derived"] = await self._store_derived(derived, kind=kind, key=ident.get("index_key"), url=url)
        logger.debug("Media %s: %s -> %s", result["status"], url, obj.path)
        return result

    def _document_bodies(self, kind: str, body: bytes) -> tuple[bytes, dict[str, bytes]]:
        """The body to store for a document asset and the objects derived from it, by extension, from the spider's
        :meth:`~mediacrawler.spiders._base.PlatformSpider.document_bodies` (the platform's formats live there)."""
        hook = getattr(self.crawler.spider, "document_bodies", None)
        if hook is None:
            return body, {}
        try:
            return cast(tuple[bytes, dict[str, bytes]], hook(kind=kind, body=body))
        except ValueError as exc:
            from mediacrawler.media.integrity import MediaRejected

            raise MediaRejected("not-document", str(exc)) from None

    async def _store_derived(self, derived: dict[str, bytes], *, kind: str, key: str | None,
                             url: str) -> dict[str, dict[str, Any]]:
        """Store each derived object like any body (checked, content-addressed, indexed as ``<key>#<ext>``); a
        refused one is left out of the record (the original is stored)."""
        from mediacrawler.media.committer import CommitJob

        out: dict[str, dict[str, Any]] = {}
        for ext, data in derived.items():
            job = CommitJob(data, kind=kind, key=f"{key}#{ext}" if key else None, url=f"{url}#{ext}")
            await self._commit(job)
            if job.error is not None or job.obj is None:
                logger.warning("Media: the %s derived from %s was not stored: %s", ext, url, job.error)
                continue
            out[ext] = {"sha256": job.obj.sha256, "path": job.obj.path, "size": job.obj.size}
        return out

    def media_failed(self, failure: Failure, request: Request,
                     info: MediaPipeline.SpiderInfo) -> NoReturn:
        """Raise the :class:`MediaDownloadFailed` of a failed download, its reason a slug."""
        exc = failure.value
        if isinstance(exc, MediaDownloadFailed):
            raise exc
        if isinstance(exc, RequestRefused):
            raise MediaDownloadFailed(exc.reason, exc.detail) from exc
        reason = download_error_reason(exc)
        logger.debug("Media download failed: %s: %s: %s", request.url, type(exc).__name__, exc)
        raise MediaDownloadFailed(reason, f"{type(exc).__name__}: {exc}") from exc

    def _failed(self, exc: BaseException, request: Request, info: MediaPipeline.SpiderInfo) -> MediaResult:
        """The failed result of a download that ended with ``exc`` (reason as media_failed gives it)."""
        try:
            self.media_failed(Failure(exc), request, info)
        except MediaDownloadFailed as failed:
            return failed_result(url=request.url, reason=str(failed))

    def item_completed(self, results: list[FileInfoOrError], item: Any,
                       info: MediaPipeline.SpiderInfo) -> Any:
        return self._completed(results, self._checked_assets(item), item)

    def _completed(self, results: list[FileInfoOrError], checked: list[tuple[str, ItemAdapter, str | None]],
                   item: Any) -> Any:
        pending = iter(results)
        for _, asset, problem in checked:
            url = asset.get("url")
            repeat = False
            if problem is not None:
                result = failed_result(url=str(url), reason=problem)
                if problem == "credentials-in-url":
                    asset["url"] = strip_userinfo(url)  # never the password in the record
            else:
                ok, value = next(pending)
                if ok:
                    result = cast(MediaResult, value)
                    # Every request with the same fingerprint gets the same cached result object (kept alive
                    # in _downloaded, so ids are stable); only the first asset that reports it caused the
                    # download.
                    repeat = id(result) in self._reported
                    self._reported.add(id(result))
                else:
                    result = failed_result(url=url, reason=_failure_reason(cast(Failure, value)))
            self._apply(asset, result, repeat=repeat)
        return item

    def file_path(self, request: Request, response: Response | None = None,
                  info: MediaPipeline.SpiderInfo | None = None, *, item: Any = None) -> str:
        """The object path of a response's body. Content-addressed: without the response there is no path."""
        if response is None:
            raise ValueError("a content-addressed path depends on the bytes: pass the response")
        body = response.body
        return object_relpath(sha256=hashlib.sha256(body).hexdigest(), ext=sniff(body[:SNIFF_BYTES]).ext)

    # --- internals ------------------------------------------------------------------------------------------
    def _stored_object(self, *, key: str | None, url: str) -> ObjectRecord | None:
        """(Worker thread.) The indexed object for this asset if it is still in the store with its size; the
        sighting (maybe a new URL for a known key) is recorded."""
        assert self.index is not None
        obj = self.index.lookup(key=key, url=url)
        if obj is None or self.cas.stat(obj.path) != obj.size:
            return None
        self.index.record(obj=obj, key=key, url=url)
        return obj

    async def _commit(self, job: CommitJob) -> CommitJob:
        """``job`` through the batch committer's next round: back once its object and index row are durable."""
        if self.committer is None:
            raise MediaDownloadFailed("store-error", "the media store is closed")
        return await self.committer.commit(job)

    def _host_slot(self, request: Request) -> asyncio.Semaphore:
        """The host's semaphore (MEDIA_CONCURRENCY_PER_HOST), held around a download: ``async with``."""
        host = urlparse_cached(request).netloc.lower()
        sem = self._slots.get(host)
        if sem is None:
            sem = self._slots[host] = asyncio.Semaphore(self.concurrency_per_host)
        return sem

    def _apply(self, asset: ItemAdapter, result: MediaResult, *, repeat: bool) -> None:
        status = result["status"]
        if repeat and status in ("downloaded", "deduplicated"):
            status = "uptodate"
        if status == "failed":
            asset["status"] = "failed"
            asset["error"] = result.get("error")
            reason = (result.get("error") or "unknown").split(":", 1)[0]
            self.stats.inc_value("media/failed")
            self.stats.inc_value(f"media/failed/{reason}")
            logger.warning("Media asset %s failed: %s", strip_userinfo(str(asset.get("url"))), result.get("error"))
            return
        asset["sha256"] = result.get("sha256")
        asset["path"] = result.get("path")
        asset["size"] = result.get("size")
        asset["mime"] = result.get("mime")
        asset["status"] = status
        asset["error"] = None
        for dim in ("width", "height"):
            if asset.get(dim) is None and result.get(dim) is not None:
                asset[dim] = result.get(dim)
        # Video results (mediacrawler.media.video): the rendition chosen and the measured duration.
        if result.get("rendition") is not None:
            asset["rendition"] = result.get("rendition")
        if result.get("duration") is not None:
            asset["duration"] = result.get("duration")
        if result.get("derived"):
            asset["derived"] = result.get("derived")
        self.stats.inc_value(f"media/{status}")
        if status == "deduplicated":
            self.stats.inc_value("media/dedup/content")


#: Asset kinds stored as documents, not media (media/integrity.py check_document).
_DOCUMENT_KINDS = ("subtitle", "danmaku")


def _store_failure(exc: BaseException) -> MediaDownloadFailed:
    reason = "disk-full" if isinstance(exc, OSError) and exc.errno == errno.ENOSPC else "store-error"
    return MediaDownloadFailed(reason, f"{type(exc).__name__}: {exc}")


def _number_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _header(response: Response, name: str) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value is not None else None


def _failure_reason(failure: Failure) -> str:
    from mediacrawler.media.integrity import MediaRejected

    exc = failure.value
    if isinstance(exc, (MediaDownloadFailed, MediaRejected)):
        return str(exc)
    return f"download-error: {type(exc).__name__}: {exc}"
