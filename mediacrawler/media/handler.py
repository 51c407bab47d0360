"""HTTP download handler: Scrapy's HTTP/1.1 handler, with bodies that can land in a caller's buffer.

Scrapy collects a response body chunk by chunk in a ``BytesIO`` and copies it into a new ``bytes`` object at the
end. For an 8 MiB Range segment of a large video that is two copies into fresh memory (page faults, ``realloc``
copies as the buffer grows); measured on 2 cores it was a third of the reactor thread's time while downloading a
1 GiB file (``benchmarks/bench_large_file.py``), and the reactor thread is what bounds the transfer.

A request whose ``meta`` carries a :class:`BodySink` under :data:`META_BODY_SINK` has the body of a ``206`` answer
(identity-encoded) written into the sink's preallocated, reusable buffer instead; ``Response.body`` is then empty
and the caller reads :meth:`BodySink.view`. Any other answer to such a request (``200``, ``416``, an error page)
keeps the usual ``Response.body``. Everything else — connection pool, TLS, proxies, timeouts,
``download_maxsize``, the ``bytes_received`` signal, data-loss handling, downloader middlewares — is Scrapy's own
code path: the reader Scrapy creates simply writes into the sink.

The hook uses two private parts of ``scrapy.core.downloader.handlers.http11`` (the agent class and the body buffer
attribute of its reader), checked when the handler starts: if a Scrapy upgrade moved them, the handler logs a
warning once and behaves exactly like Scrapy's (sinks stay unattached, callers fall back to ``Response.body``).
Wired through ``DOWNLOAD_HANDLERS`` in settings.py for ``http`` and ``https``.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from scrapy.core.downloader.handlers import http11
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.utils.defer import maybe_deferred_to_future

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from twisted.internet.defer import Deferred
    from twisted.web.client import Response as TxResponse

logger = logging.getLogger(__name__)

#: Bytes per socket read on a connection that delivers into a sink (Twisted's default is 64 KiB).
RECV_BUFFER = 256 * 1024
#: request.meta key of a :class:`BodySink` (never serialized: sink requests bypass the scheduler).
META_BODY_SINK = "media_body_sink"


class BodySink:
    """A preallocated buffer that receives the body of one ``206`` answer (see the module docstring).

    It quacks like the ``BytesIO`` Scrapy's reader writes to: :meth:`write`, :meth:`truncate` (Scrapy truncates
    when ``download_maxsize`` is exceeded, then cancels the download) and :meth:`getvalue` (empty: the bytes stay
    here). A sink is reset at the start of every attempt of its request, so a retry never sees the bytes of a cut
    attempt. Bytes beyond the buffer are dropped and :attr:`overflow` is set; the caller must treat that answer
    as wrong (a segment request also sets ``download_maxsize`` to the buffer size, so Scrapy cancels it).

    One contiguous buffer, not a list of the socket's chunks: the copy costs the reactor thread less than what
    chunks cost the thread that writes and hashes them (two GIL hand-overs per chunk instead of a few per
    segment; measured with ``benchmarks/bench_large_file.py``).
    """

    __slots__ = ("_view", "attached", "buffer", "overflow", "size")

    def __init__(self, buffer: bytearray) -> None:
        #: The buffer itself (to reuse it for the next request once this one's bytes are consumed).
        self.buffer = buffer
        self._view = memoryview(buffer)
        self.size = 0
        self.overflow = False
        #: True when the handler put the current attempt's body here (False: read ``Response.body``).
        self.attached = False

    @property
    def capacity(self) -> int:
        return len(self._view)

    def reset(self) -> None:
        self.size = 0
        self.overflow = False
        self.attached = False

    def write(self, data: bytes) -> int:
        end = self.size + len(data)
        if end > len(self._view):
            self.overflow = True
            data = data[: len(self._view) - self.size]
            end = len(self._view)
        self._view[self.size : end] = data
        self.size = end
        return len(data)

    def truncate(self, size: int | None = None) -> int:
        # Scrapy only ever truncates to nothing (past download_maxsize).
        if size:
            raise ValueError("a BodySink can only be truncated to 0")
        self.size = 0
        return 0

    def getvalue(self) -> bytes:
        return b""

    def view(self) -> memoryview:
        """The body received so far (valid until the next :meth:`reset` or write)."""
        return self._view[: self.size]


def _widen_reads(txresponse: TxResponse) -> None:
    # Twisted reads a socket 64 KiB at a time and runs the whole HTTP parser chain per read; for a long body a
    # larger read means a quarter of the Python calls per byte. Only this (persistent) connection is changed.
    connection: Any = getattr(getattr(txresponse, "_transport", None), "_producer", None)
    size = getattr(connection, "bufferSize", None)
    if isinstance(size, int) and size < RECV_BUFFER:
        connection.bufferSize = RECV_BUFFER


def _hook_available() -> str | None:
    """Why the sink hook cannot work with this Scrapy (``None`` when it can)."""
    agent = getattr(http11, "_ScrapyAgent", None)
    reader = getattr(http11, "_ResponseReader", None)
    if agent is None or reader is None or not callable(getattr(agent, "_cb_bodyready", None)):
        return "scrapy.core.downloader.handlers.http11 has no _ScrapyAgent._cb_bodyready / _ResponseReader"
    if "_bodybuf" not in reader.__init__.__code__.co_names:
        return "Scrapy's _ResponseReader no longer keeps its body in _bodybuf"
    params = inspect.signature(agent.__init__).parameters
    wanted = {"contextFactory", "bindAddress", "pool", "maxsize", "warnsize", "fail_on_dataloss", "crawler",
              "tls_verbose_logging"}
    if not wanted <= set(params):
        return f"_ScrapyAgent() lacks {sorted(wanted - set(params))}"
    return None


if _hook_available() is None:

    class _SinkAgent(http11._ScrapyAgent):
        """Scrapy's agent, delivering an eligible body into the request's :class:`BodySink`."""

        def _cb_bodyready(self, txresponse: TxResponse, request: Request) -> Any:
            sink = request.meta.get(META_BODY_SINK)
            encoding = txresponse.headers.getRawHeaders(b"Content-Encoding") or [b"identity"]
            if (isinstance(sink, BodySink) and txresponse.code == 206
                    and all(e.strip().lower() == b"identity" for e in encoding)):
                deliver = txresponse.deliverBody

                def deliver_into_sink(protocol: Any) -> None:
                    protocol._bodybuf = sink  # Scrapy's reader writes every chunk here, then getvalue() == b""
                    sink.attached = True
                    _widen_reads(txresponse)
                    deliver(protocol)

                txresponse.deliverBody = deliver_into_sink  # type: ignore[method-assign]
            return super()._cb_bodyready(txresponse, request)


class MediaDownloadHandler(HTTP11DownloadHandler):
    """``http``/``https`` download handler: Scrapy's HTTP/1.1 handler plus :class:`BodySink` delivery."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._sink_problem = _hook_available()
        missing = [a for a in ("_contextFactory", "_bind_address", "_pool", "_crawler") if not hasattr(self, a)]
        if self._sink_problem is None and missing:
            self._sink_problem = f"HTTP11DownloadHandler lacks {missing}"
        if self._sink_problem is not None:
            logger.warning("Media bodies go through memory as usual (%s); large downloads are slower",
                           self._sink_problem)

    async def download_request(self, request: Request) -> Response:
        sink = request.meta.get(META_BODY_SINK)
        if not isinstance(sink, BodySink):
            return await super().download_request(request)
        sink.reset()
        if self._sink_problem is not None:
            return await super().download_request(request)
        # The agent Scrapy's handler builds, from the same parts (per-request maxsize/warnsize come from meta).
        agent = _SinkAgent(
            contextFactory=self._contextFactory,
            bindAddress=self._bind_address,
            pool=self._pool,
            maxsize=self._default_maxsize,
            warnsize=self._default_warnsize,
            fail_on_dataloss=self._fail_on_dataloss,
            crawler=self._crawler,
            tls_verbose_logging=self._tls_verbose_logging,
        )
        try:
            with http11.wrap_twisted_exceptions():
                deferred: Deferred[Response] = agent.download_request(request)
                return await maybe_deferred_to_future(deferred)
        except BaseException as exc:
            sink.reset()  # a failed attempt leaves nothing for the caller to mistake for a body
            if isinstance(exc, http11.ResponseDataLossError) and not self._fail_on_dataloss_warned:
                logger.warning(http11.get_dataloss_msg(request.url))
                self._fail_on_dataloss_warned = True
            raise
