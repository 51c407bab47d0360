"""The media pipeline: every MediaAsset of a Post downloaded, checked, and stored once by its SHA-256.

A FilesPipeline subclass overriding only its documented surface. The steps of one asset (identity, index lookup,
download, checks, store, record) and the results on the record: docs/media.md, "What happens to one asset".
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import time
from os import PathLike
from typing import TYPE_CHECKING, Any, NoReturn, cast

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import NotConfigured, StopDownload
from scrapy.http import Headers, Request, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.pipelines.files import FilesPipeline
from scrapy.pipelines.media import FileException, FileInfo, FileInfoOrError
from scrapy.utils.asyncio import is_asyncio_available, run_in_thread
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred, DeferredSemaphore
from twisted.internet.task import deferLater
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
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.pipelines.media import MediaPipeline as _ScrapyMediaPipeline

logger = logging.getLogger(__name__)

#: Seconds between two looks at an asset whose spool another request holds (MEDIA_SPOOL_BUSY_WAIT bounds the wait).
SPOOL_BUSY_POLL = 0.5
# request.meta key marking that this request holds a per-host download slot (released exactly once).
_META_SLOT = "_media_slot"
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


class MediaStorePipeline(FilesPipeline):
    """Downloads every MediaAsset of a Post into the content-addressed store (docs/media.md; its settings: the
    MEDIA_* and FILES_STORE entries of mediacrawler/settings.py, where their defaults live)."""

    MEDIA_NAME = "media"
    # Local paths get the content-addressed store; other FilesPipeline schemes stay listed because
    # FilesPipeline.from_crawler configures them by name, but __init__ refuses them.
    STORE_SCHEMES = {**FilesPipeline.STORE_SCHEMES, **STORE_SCHEMES}

    def __init__(self, store_uri: str | PathLike[str] | None, download_func: None = None, *,
                 crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "MEDIA_ENABLED"):
            raise NotConfigured("MEDIA_ENABLED is off: records are crawled without downloading media")
        # Only MEDIA_ENABLED switches the pipeline off: a setting it cannot work with fails the crawl (ValueError,
        # one line naming it; commands/crawl.py refuses these before the crawl already, config.settings_problem).
        uri = str(store_uri or setting(settings, "FILES_STORE"))
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
        self.commit_process = setting(settings, "MEDIA_COMMIT_PROCESS")
        self.allowed_schemes = allowed_schemes(settings)
        super().__init__(uri, crawler=crawler)
        # FilesPipeline built it from STORE_SCHEMES; the scheme check above makes it ours.
        self.cas: ContentAddressedStore = cast(ContentAddressedStore, self.store)
        self.cas.fsync = setting(settings, "MEDIA_FSYNC")
        self.stats = crawler.stats
        self.index: MediaIndex | None = None
        self.index_is_local = self.index_class is SQLiteMediaIndex
        self.committer: BatchCommitter | None = None
        # The reactor's asyncio loop when coroutines run on asyncio (decided on the first response), else None.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_checked = False
        self._slots: dict[str, DeferredSemaphore] = {}
        # ids of results already written to an asset (see item_completed).
        self._reported: set[int] = set()
        # --- video and large files (mediacrawler.media.video): spool under FILES_STORE/spool ---
        self.video = VideoDownloader(crawler, store=self.cas, spool_dir=self.cas.root / "spool")  # ValueError: bad
        # Images above MEDIA_SEGMENT_THRESHOLD leave the one-request path for the Range-segment one as soon as
        # their headers say so (see _stop_large_image): never a whole large body in memory.
        self.segment_threshold: int = setting(settings, "MEDIA_SEGMENT_THRESHOLD")
        self.spool_busy_wait = setting(settings, "MEDIA_SPOOL_BUSY_WAIT")
        crawler.signals.connect(self._on_headers, signal=signals.headers_received)

    # --- lifecycle ------------------------------------------------------------------------------------------
    def open_spider(self, spider: Spider | None = None) -> None:
        super().open_spider()
        from mediacrawler.media.committer import BatchCommitter

        self.index = self.index_class.from_settings(self.crawler.settings, store_root=self.cas.root)
        self.committer = BatchCommitter(store=self.cas, index=self.index, deliver=self._deliver,
                                        max_image_pixels=self.max_image_pixels,
                                        max_image_decode_bytes=self.max_image_decode_bytes,
                                        max_batch=self.commit_batch, isolated=self.commit_process)
        self.committer.start()
        self._require_redirect_checks()
        swept = self.cas.sweep_tmp()
        if swept:
            logger.info("Removed %d stale temporary files from %s", swept, self.cas.tmp_dir)
        logger.info("Media store at %s, index %r", self.cas.root, self.index)

    def close_spider(self, spider: Spider | None = None) -> None:
        if self.committer is not None:
            self.committer.close()
            self.committer = None
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

    # --- FilesPipeline surface ------------------------------------------------------------------------------
    def get_media_requests(self, item: Any, info: _ScrapyMediaPipeline.SpiderInfo) -> list[Request]:
        requests = []
        for platform, asset in pending_assets(item):
            if media_url_problem(asset.get("url"), allowed_schemes=self.allowed_schemes) is None:
                referer = media_referer(self.crawler.settings, platform=platform)
                requests.append(build_media_request(url=asset["url"], platform=platform, kind=asset["kind"],
                                                    key=str(asset["key"]), referer=referer))
        return requests

    async def media_to_download(self, request: Request, info: _ScrapyMediaPipeline.SpiderInfo, *,
                                item: Any = None) -> MediaResult | None:
        ident = request.meta.get(META_ASSET) or {}
        try:
            if self.index_is_local:
                # SQLite: a primary-key read of a local file (tens of microseconds) costs less than the
                # thread hand-off would.
                stored = self._stored_object(key=ident.get("index_key"), url=request.url)
            else:
                stored = await run_in_thread(self._stored_object, key=ident.get("index_key"), url=request.url)
        except Exception as exc:
            # An unreachable index costs a download, never the asset.
            self.stats.inc_value("media/index/errors")
            logger.warning("Media index lookup failed for %s (%s); downloading", request.url, exc)
            stored = None
        if stored is not None and ident.get("kind") not in _DOCUMENT_KINDS:
            # A document is read again (it is small): what is derived from it (a subtitle's SRT) needs its bytes.
            logger.debug("Media up to date: %s is %s", request.url, stored.path)
            return result_from_record(url=request.url, obj=stored, status="uptodate")
        await self._acquire_slot(request)
        # --- video/audio: manifests, Range segments, resumable spool (mediacrawler.media.video) -------------
        if ident.get("kind") in ("video", "audio"):
            try:
                return await self._download_video(request, item=item, ident=ident)
            finally:
                self._release_slot(request)
        # --- end of the video hook; images: one request, media_downloaded ---------------------------------
        # Downloaded here, not by MediaPipeline, which logs whatever media_failed raises as an ERROR with a
        # traceback: an ordinary failure (a 404, a corrupt body, a refused redirect) becomes a failed result,
        # reported once, as the asset's WARNING (_apply).
        if self.handle_httpstatus_list:
            # As MediaPipeline does: MEDIA_ALLOW_REDIRECTS leaves 3xx to RedirectMiddleware (hops re-checked by
            # middlewares/media_redirects.py), every other status reaches media_downloaded.
            request.meta["handle_httpstatus_list"] = self.handle_httpstatus_list
        else:
            request.meta["handle_httpstatus_all"] = True
        try:
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
            from twisted.internet import reactor  # the installed reactor, at call time

            await maybe_deferred_to_future(deferLater(reactor, SPOOL_BUSY_POLL, lambda: None))
            stored = await run_in_thread(self._stored_object, key=ident.get("index_key"), url=request.url)
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
        await self._acquire_slot(request)
        try:
            logger.debug("Large image (%d bytes): %s goes in Range segments", request.meta[META_LARGE],
                         request.url)
            self.stats.inc_value("media/large_images")
            return await self._download_video(request, item=item, ident=ident)
        finally:
            self._release_slot(request)

    async def media_downloaded(self, response: Response, request: Request,
                               info: _ScrapyMediaPipeline.SpiderInfo, *, item: Any = None) -> MediaResult:
        from mediacrawler.media.committer import CommitJob
        from mediacrawler.media.integrity import MediaRejected, check_body, check_http

        self._release_slot(request)
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
                checked = await run_in_thread(check_body, body, kind=kind, max_image_pixels=self.max_image_pixels,
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
                     info: _ScrapyMediaPipeline.SpiderInfo) -> NoReturn:
        self._release_slot(request)
        exc = failure.value
        if isinstance(exc, MediaDownloadFailed):
            raise exc
        if isinstance(exc, RequestRefused):
            raise MediaDownloadFailed(exc.reason, exc.detail) from exc
        reason = download_error_reason(exc)
        logger.debug("Media download failed: %s: %s: %s", request.url, type(exc).__name__, exc)
        raise MediaDownloadFailed(reason, f"{type(exc).__name__}: {exc}") from exc

    def _failed(self, exc: BaseException, request: Request, info: _ScrapyMediaPipeline.SpiderInfo) -> MediaResult:
        """The failed result of a download that ended with ``exc`` (reason as media_failed gives it)."""
        try:
            self.media_failed(Failure(exc), request, info)
        except MediaDownloadFailed as failed:
            return failed_result(url=request.url, reason=str(failed))

    def item_completed(self, results: list[FileInfoOrError], item: Any,
                       info: _ScrapyMediaPipeline.SpiderInfo) -> Any:
        pending = iter(results)
        for _, asset in pending_assets(item):
            url = asset.get("url")
            problem = media_url_problem(url, allowed_schemes=self.allowed_schemes)
            repeat = False
            if problem is not None:
                result = failed_result(url=str(url), reason=problem)
                if problem == "credentials-in-url":
                    asset["url"] = strip_userinfo(url)  # never the password in the record
            else:
                ok, value = next(pending)
                if ok:
                    result = cast(MediaResult, value)
                    # FilesPipeline hands the same cached result object to every request with the same
                    # fingerprint (kept alive in its cache, so ids are stable); only the first asset that
                    # reports it caused the download.
                    repeat = id(result) in self._reported
                    self._reported.add(id(result))
                else:
                    result = failed_result(url=url, reason=_failure_reason(cast(Failure, value)))
            self._apply(asset, result, repeat=repeat)
        return item

    def file_path(self, request: Request, response: Response | None = None,
                  info: _ScrapyMediaPipeline.SpiderInfo | None = None, *, item: Any = None) -> str:
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

    def _commit(self, job: CommitJob) -> Any:
        """Queue ``job`` with the batch committer; an awaitable of the finished job (an asyncio future when
        coroutines run on asyncio, a Deferred otherwise)."""
        if not self._loop_checked:
            self._loop = asyncio.get_running_loop() if is_asyncio_available() else None
            self._loop_checked = True
        if self.committer is None:
            raise MediaDownloadFailed("store-error", "the media store is closed")
        waiter: Any = self._loop.create_future() if self._loop is not None else Deferred()
        job.waiter = waiter
        self.committer.submit(job)
        return waiter

    def _deliver(self, jobs: list[CommitJob]) -> None:
        """(Committer thread.) Hand a finished round to the reactor thread: one wake-up per round."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(_resolve, jobs)
        else:
            from twisted.internet import reactor  # the installed reactor, at call time

            reactor.callFromThread(_resolve, jobs)  # type: ignore[attr-defined]

    async def _acquire_slot(self, request: Request) -> None:
        host = urlparse_cached(request).netloc.lower()
        sem = self._slots.get(host)
        if sem is None:
            sem = self._slots[host] = DeferredSemaphore(self.concurrency_per_host)
        await maybe_deferred_to_future(sem.acquire())
        request.meta[_META_SLOT] = host

    def _release_slot(self, request: Request) -> None:
        # Called from media_downloaded and media_failed; FilesPipeline calls media_failed also when
        # media_downloaded raised, so the slot is released by whichever runs first.
        host = request.meta.pop(_META_SLOT, None)
        if host is not None:
            self._slots[host].release()

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


def _resolve(jobs: list[CommitJob]) -> None:
    """(Reactor thread.) Wake the coroutine waiting for each job."""
    for job in jobs:
        waiter, job.waiter = job.waiter, None
        if isinstance(waiter, Deferred):
            waiter.callback(job)
        elif waiter is not None and not waiter.done():
            waiter.set_result(job)


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
