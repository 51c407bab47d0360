"""HTTP download handler: Scrapy's own, with a connection pool as large as the media slots, and segment bodies
received straight into their buffers (docs/media.md, "Concurrency" and "Large files and video: the download
layer").

Scrapy's HTTP/1.1 handler keeps at most CONCURRENT_REQUESTS_PER_DOMAIN idle connections per host (4 here, the
APIs' pace). Media slots run MEDIA_CONCURRENCY_PER_HOST requests (32) to one CDN host, so most media requests would
open a new connection (a TLS handshake each over HTTPS). Scrapy has no setting for the pool size yet (scrapy#5618;
scrapy#7932 proposes one): this subclass sets it through the pool that mediacrawler/compat.py reaches, and
tests/test_compat.py fails when it moves.

A request whose ``meta`` carries a :class:`~mediacrawler.contracts.BodySink` (the Range segments of a large file,
media/segments.py) is fetched by :class:`SinkFetcher` instead: Twisted's ``Agent`` on a pool of its own, through
public Twisted APIs only (``Agent.request``, ``IResponse.deliverBody``, a ``Protocol`` for the body). The body of a
``206`` goes into the sink as it arrives, one copy per socket read; Scrapy's reader would collect it in a
``BytesIO``, copy it into ``bytes`` at the end, and send ``bytes_received`` for each read (~0.4 s of CPU per GiB:
docs/benchmarks.md, "Session 8"). Any other answer keeps
its body in ``Response.body``. Downloader middlewares, retries, DOWNLOAD_TIMEOUT, ``download_maxsize``,
``headers_received`` (StopDownload included) and data loss behave as on Scrapy's path; ``bytes_received`` is not
sent for a sink's body. Requests through a proxy or with a bind address take Scrapy's path.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.exceptions import (CannotResolveHostError, DownloadCancelledError, DownloadConnectionRefusedError,
                               DownloadFailedError, DownloadTimeoutError, ResponseDataLossError, StopDownload)
from scrapy.http import Headers, Response
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import error as net
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool, ResponseDone, ResponseFailed, ResponseNeverReceived
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers as TxHeaders
from twisted.web.iweb import UNKNOWN_LENGTH

from mediacrawler.compat import connection_pool, tls_policy
from mediacrawler.config import setting
from mediacrawler.contracts import META_BODY_SINK, BodySink

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request
    from twisted.web.iweb import IPolicyForHTTPS, IResponse


class PooledHTTPDownloadHandler(HTTP11DownloadHandler):
    """HTTP11DownloadHandler keeping up to HTTP_POOL_PER_HOST idle connections per host (at least
    CONCURRENT_REQUESTS_PER_DOMAIN, Scrapy's own figure); sink requests go to :class:`SinkFetcher`."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        per_host = max(setting(settings, "HTTP_POOL_PER_HOST"),
                       setting(settings, "CONCURRENT_REQUESTS_PER_DOMAIN"))
        connection_pool(self).maxPersistentPerHost = per_host
        # The TLS policy Scrapy built from its settings (no certificate checks unless
        # DOWNLOAD_VERIFY_CERTIFICATES), so a sink's HTTPS connection is set up exactly like Scrapy's own.
        self.sinks = SinkFetcher(crawler, per_host=per_host, tls_policy=tls_policy(self))

    async def download_request(self, request: Request) -> Response:
        sink = request.meta.get(META_BODY_SINK)
        if sink is None or request.method != "GET" or request.meta.get("proxy") or request.meta.get("bindaddress"):
            return await super().download_request(request)
        return await self.sinks.download(request, sink)

    async def close(self) -> None:
        await super().close()
        await self.sinks.close()


class SinkFetcher:
    """GET requests whose ``206`` body goes into a :class:`~mediacrawler.contracts.BodySink` (module docstring)."""

    def __init__(self, crawler: Crawler, *, per_host: int, tls_policy: IPolicyForHTTPS) -> None:
        from twisted.internet import reactor

        self.crawler = crawler
        self.reactor: Any = reactor
        self.pool = HTTPConnectionPool(reactor, persistent=True)
        self.pool.maxPersistentPerHost = per_host
        self.agent = Agent(reactor, contextFactory=tls_policy, pool=self.pool)
        settings = crawler.settings
        self.timeout = setting(settings, "DOWNLOAD_TIMEOUT")
        self.maxsize = settings.getint("DOWNLOAD_MAXSIZE")
        self.fail_on_dataloss = settings.getbool("DOWNLOAD_FAIL_ON_DATALOSS")

    async def download(self, request: Request, sink: BodySink) -> Response:
        sink.reset()
        timeout = request.meta.get("download_timeout") or self.timeout
        started = time.monotonic()
        fetch: Deferred[Response] = self.agent.request(b"GET", request.url.split("#", 1)[0].encode("ascii"),
                                                       TxHeaders(request.headers), None)
        fetch.addCallback(self._on_headers, request, sink, started)
        timer = self.reactor.callLater(timeout, fetch.cancel)
        try:
            return await maybe_deferred_to_future(fetch)
        except Exception as exc:
            error = (DownloadTimeoutError(f"Getting {request.url} took longer than {timeout} seconds.")
                     if not timer.active() else _scrapy_error(exc))
            if error is exc:
                raise
            raise error from exc
        finally:
            if timer.active():
                timer.cancel()

    def _on_headers(self, txresponse: IResponse, request: Request, sink: BodySink,
                    started: float) -> Response | Deferred[Response]:
        request.meta["download_latency"] = time.monotonic() - started
        headers = Headers(dict(txresponse.headers.getAllRawHeaders()))
        if txresponse.length != UNKNOWN_LENGTH:
            headers[b"Content-Length"] = str(txresponse.length).encode()
        version = txresponse.version
        respond = {"url": request.url, "status": txresponse.code, "headers": headers, "request": request,
                   "protocol": f"{version[0].decode()}/{version[1]}.{version[2]}"}
        results = self.crawler.signals.send_catch_log(signal=signals.headers_received, headers=headers,
                                                      body_length=txresponse.length, request=request,
                                                      spider=self.crawler.spider)
        stop = next((r.value for _, r in results if isinstance(r, Failure) and isinstance(r.value, StopDownload)),
                    None)
        if stop is not None:
            txresponse.deliverBody(_Discard())
            response = Response(**respond, flags=["download_stopped"])
            if stop.fail:
                stop.response = response
                raise stop
            return response
        maxsize = request.meta.get("download_maxsize", self.maxsize)
        if maxsize and txresponse.length != UNKNOWN_LENGTH and txresponse.length > maxsize:
            txresponse.deliverBody(_Discard())
            raise DownloadCancelledError(f"Expected response size {txresponse.length} larger than download max "
                                         f"size {maxsize} for {request.url}")
        if txresponse.length == 0:  # deliverBody would never end for an empty body
            return Response(**respond)
        reader = _BodyReader(sink if txresponse.code == 206 else None, maxsize, request.url,
                             fail_on_dataloss=request.meta.get("download_fail_on_dataloss", self.fail_on_dataloss))
        txresponse.deliverBody(reader)
        return reader.done.addCallback(lambda got: Response(**respond, body=got[0], flags=got[1]))

    async def close(self) -> None:
        closing = self.pool.closeCachedConnections()
        # As Scrapy's handler does: closeCachedConnections can hang on a dead server (twisted#7738).
        timer = self.reactor.callLater(1, closing.callback, None)
        try:
            await maybe_deferred_to_future(closing)
        finally:
            if timer.active():
                timer.cancel()


def _scrapy_error(exc: Exception) -> Exception:
    """The Scrapy exception Scrapy's own handler raises for a Twisted one (RETRY_EXCEPTIONS names Scrapy's)."""
    for types, scrapy_error in ((CancelledError, DownloadCancelledError),
                                (net.ConnectionRefusedError, DownloadConnectionRefusedError),
                                (net.DNSLookupError, CannotResolveHostError),
                                (net.TimeoutError, DownloadTimeoutError),
                                ((ResponseFailed, ResponseNeverReceived), DownloadFailedError)):
        if isinstance(exc, types):
            return scrapy_error(str(exc))
    return exc


class _Discard(Protocol):
    """A body nobody wants: stop it and drop the connection."""

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.stopProducing()


class _BodyReader(Protocol):
    """A body into its sink (``sink`` set) or into ``bytes``; ``done`` fires with ``(body, flags)``."""

    def __init__(self, sink: BodySink | None, maxsize: int, url: str, *, fail_on_dataloss: bool) -> None:
        self.sink = sink
        self.maxsize = maxsize
        self.url = url
        self.fail_on_dataloss = fail_on_dataloss
        self.chunks: list[bytes] = []
        self.size = 0
        self.done: Deferred[tuple[bytes, list[str]]] = Deferred(lambda _: self._stop())
        if sink is not None:
            sink.attached = True

    def _stop(self) -> None:
        if self.transport is not None:
            self.transport.stopProducing()

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:  # cancelled, with data still buffered
            return
        self.size += len(data)
        fits = not self.maxsize or self.size <= self.maxsize
        if self.sink is not None:
            fits = self.sink.write(data) and fits
        else:
            self.chunks.append(data)
        if not fits:
            self._stop()
            self.chunks.clear()
            self.done.errback(DownloadCancelledError(f"Received {self.size} bytes, larger than the download max "
                                                     f"size {self.maxsize} or its buffer, for {self.url}"))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.done.called:
            return
        body = b"".join(self.chunks)
        self.chunks.clear()
        if reason.check(ResponseDone):
            self.done.callback((body, []))
        elif reason.check(PotentialDataLoss):  # no Content-Length, no chunking: the close ended it
            self.done.callback((body, ["partial"]))
        elif self.fail_on_dataloss:
            self.done.errback(ResponseDataLossError(f"Connection lost after {self.size} bytes of {self.url}"))
        else:
            self.done.callback((body, ["dataloss"]))
