"""HTTP download handler: Scrapy's HTTP/1.1 handler, with bodies that can land in a caller's buffer.

Scrapy collects a response body chunk by chunk in a ``BytesIO`` and copies it into a new ``bytes`` object at the
end. For a 16 MiB Range segment of a large video that is two copies into fresh memory (page faults, ``realloc``
copies as the buffer grows); measured on 2 cores it was a third of the reactor thread's time while downloading a
1 GiB file (``benchmarks/bench_large_file.py``), and the reactor thread is what bounds the transfer.

A request whose ``meta`` carries a :class:`BodySink` under :data:`META_BODY_SINK` has the body of a ``206`` answer
(identity-encoded) written into the sink's preallocated, reusable buffer instead; ``Response.body`` is then empty
and the caller reads :meth:`BodySink.view`. Any other answer to such a request (``200``, ``416``, an error page)
keeps the usual ``Response.body``. Everything else — connection pool, TLS, proxies, timeouts,
``download_maxsize``, the ``bytes_received`` signal, data-loss handling, downloader middlewares — is Scrapy's own
code path: the reader Scrapy creates simply writes into the sink.

On a plain-TCP connection (``http``, or ``http`` through a proxy; not TLS) the body goes one step further: while it
lasts, the connection's read handler is swapped for :class:`_DirectReads`, which ``recv_into()``s the socket
straight into the sink — no ``bytes`` object per read, no copy, none of the seven Python frames Twisted and Scrapy
run per read — and counts the bytes in Twisted's body decoder and Scrapy's reader as if they had passed through
them. The body's last byte always takes the ordinary path, so the response ends, and the connection goes back to
the pool, exactly as before. With ``benchmarks/bench_large_file.py`` this took the transfer of 1 GiB on 2 cores
from 2.1-2.4 s to 1.6-1.9 s (the reactor thread's CPU from ~1.0 s to ~0.7 s). While anything listens to the
``bytes_received`` signal (which would miss those bytes) the body flows through Scrapy's reader as above, and a
direct read never goes past the body, the sink's size, ``download_maxsize`` or ``download_warnsize``. The bytes
read this way are counted in the ``media/handler/direct_read_bytes`` stat.

The hook uses private parts of ``scrapy.core.downloader.handlers.http11`` (the agent class, the reader's body
buffer) and of ``twisted.web._newclient`` (the parser's body decoder), checked when the handler starts: if an
upgrade moved them, the handler logs a warning once and behaves exactly like Scrapy's (sinks stay unattached,
callers fall back to ``Response.body``), or, for the Twisted parts, reads through the parser as before.
``test_scrapy_internals_the_hook_needs_are_there`` fails in that case. Scrapy and Twisted are pinned in
requirements.txt. Wired through ``DOWNLOAD_HANDLERS`` in settings.py for ``http`` and ``https``.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from pydispatch import dispatcher
from scrapy import signals
from scrapy.core.downloader.handlers import http11
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import main, tcp
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import ISSLTransport
from twisted.web import _newclient

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
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

    __slots__ = ("_view", "attached", "buffer", "direct", "overflow", "size")

    def __init__(self, buffer: bytearray) -> None:
        #: The buffer itself (to reuse it for the next request once this one's bytes are consumed).
        self.buffer = buffer
        self._view = memoryview(buffer)
        self.size = 0
        self.overflow = False
        #: True when the handler put the current attempt's body here (False: read ``Response.body``).
        self.attached = False
        #: Bytes of the current attempt read from the socket straight into the buffer (see :class:`_DirectReads`).
        self.direct = 0

    @property
    def capacity(self) -> int:
        return len(self._view)

    def reset(self) -> None:
        self.size = 0
        self.overflow = False
        self.attached = False
        self.direct = 0

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


def _listened(crawler: Crawler, signal: object) -> bool:
    """Whether any live receiver is connected to ``signal`` of ``crawler`` (what ``send_catch_log`` would call)."""
    sender = getattr(crawler.signals, "sender", dispatcher.Anonymous)
    return any(True for _ in dispatcher.liveReceivers(dispatcher.getAllReceivers(sender, signal)))


class _DirectReads:
    """The read handler of a plain-TCP connection while a sink body arrives (see the module docstring).

    Installed as the connection's ``doRead`` (an instance attribute, so removing it restores Twisted's method).
    Each call reads what the socket has, up to the body's end minus one byte, into the sink, and decrements the
    body decoder's remaining length and Scrapy's byte count by the same amount, so both see the body as if it had
    gone through them: a connection that closes early is still data loss. It hands back to Twisted's own
    ``doRead`` — and is removed — as soon as anything is off: the response ended, was cancelled (timeout, size
    limit) or replaced, someone started listening to ``bytes_received``, or the next read would reach the body's
    last byte or the sink's end. Those bytes then take the ordinary path and its checks. It is also removed when
    Scrapy's reader finishes, whichever way (a short body may end without another read), so a connection back in
    the pool never carries it.

    Scrapy's ``download_maxsize`` and ``download_warnsize`` are settled from ``Content-Length`` before the body
    starts, and a direct read never goes past ``Content-Length``; the limits are still honoured here (a read
    stops short of them) in case a Scrapy version checks them only per chunk.
    """

    __slots__ = ("connection", "crawler", "decoder", "parser", "protocol", "read", "reader", "sink", "socket",
                 "txresponse")

    def __init__(self, *, connection: Any, protocol: Any, parser: Any, decoder: Any, txresponse: Any,
                 reader: Any, sink: BodySink, crawler: Crawler) -> None:
        self.connection = connection
        self.socket = connection.socket
        self.protocol = protocol
        self.parser = parser
        self.decoder = decoder
        self.txresponse = txresponse
        self.reader = reader
        self.sink = sink
        self.crawler = crawler
        #: Bytes this handler read (counted into the ``media/handler/direct_read_bytes`` stat when removed).
        self.read = 0

    @classmethod
    def attach(cls, txresponse: TxResponse, reader: Any, sink: BodySink, crawler: Crawler) -> bool:
        """Install on ``txresponse``'s connection when it is plain TCP with a known body length."""
        if _DIRECT_READS_PROBLEM is not None or _listened(crawler, signals.bytes_received):
            return False
        finished = getattr(reader, "_finished", None)
        if not isinstance(finished, Deferred) or finished.called:
            return False
        connection: Any = getattr(getattr(txresponse, "_transport", None), "_producer", None)
        if not isinstance(connection, tcp.Connection) or "doRead" in vars(connection):
            return False
        # Never under TLS (the socket carries ciphertext): neither a TLS connection nor one that started TLS
        # later (HTTPS through a proxy's CONNECT tunnel).
        if getattr(connection, "TLS", False) or ISSLTransport.providedBy(connection):
            return False
        # Plain TCP: the HTTP protocol sits right on the socket.
        protocol = getattr(connection.protocol, "_wrappedProtocol", connection.protocol)
        if not isinstance(protocol, _newclient.HTTP11ClientProtocol):
            return False
        parser = getattr(protocol, "_parser", None)
        decoder = getattr(parser, "bodyDecoder", None)
        if (getattr(parser, "response", None) is not txresponse
                or type(decoder) is not _newclient._IdentityTransferDecoder
                or not isinstance(decoder.contentLength, int)
                or not isinstance(getattr(reader, "_bytes_received", None), int)):
            return False
        handler = cls(connection=connection, protocol=protocol, parser=parser, decoder=decoder,
                      txresponse=txresponse, reader=reader, sink=sink, crawler=crawler)
        connection.doRead = handler.doRead  # type: ignore[method-assign]
        # First in the chain of that Deferred (Scrapy adds its own callbacks after deliverBody returns).
        finished.addBoth(handler._reader_finished)
        return True

    def _reader_finished(self, result: Any) -> Any:
        self.detach()
        return result

    def detach(self) -> None:
        """Give the connection back its own ``doRead`` (if this handler is still the one installed)."""
        installed = vars(self.connection).get("doRead")
        if getattr(installed, "__self__", None) is self:
            del vars(self.connection)["doRead"]
        if self.read and self.crawler.stats is not None:
            self.crawler.stats.inc_value("media/handler/direct_read_bytes", self.read)
            self.read = 0

    def _room(self) -> int:
        # How many bytes may be read directly now (<= 0: hand back to Twisted).
        reader, decoder, sink = self.reader, self.decoder, self.sink
        if (decoder.dataCallback is None or self.protocol._parser is not self.parser
                or reader._finished.called or self.txresponse._state != "CONNECTED"
                or _listened(self.crawler, signals.bytes_received)):
            return 0
        room = min(decoder.contentLength - 1, sink.capacity - sink.size)
        if reader._maxsize:
            room = min(room, reader._maxsize - reader._bytes_received)
        if reader._warnsize and not reader._reached_warnsize:
            room = min(room, reader._warnsize - reader._bytes_received)
        return room

    def doRead(self) -> Any:  # noqa: N802 - Twisted's name
        room = self._room()
        if room <= 0:
            # Twisted's own method from here on: the last byte, or whatever went wrong, goes through the parser
            # and Scrapy's reader.
            self.detach()
            return self.connection.doRead()
        sink = self.sink
        start = sink.size
        try:
            n = self.socket.recv_into(sink._view[start : start + room])
        except BlockingIOError:
            return None
        except OSError:
            return main.CONNECTION_LOST  # as Twisted's doRead
        if not n:
            return main.CONNECTION_DONE  # the peer closed: the decoder, still short, reports data loss
        self.decoder.contentLength -= n
        self.reader._bytes_received += n
        sink.size = start + n
        sink.direct += n
        self.read += n
        return None


def _direct_reads_problem() -> str | None:
    """Why :class:`_DirectReads` cannot work with this Twisted/Scrapy (``None`` when it can)."""
    decoder = getattr(_newclient, "_IdentityTransferDecoder", None)
    if decoder is None or not {"contentLength", "dataCallback"} <= set(getattr(decoder, "__slots__", ())):
        return "twisted.web._newclient._IdentityTransferDecoder has changed"
    if not callable(getattr(tcp.Connection, "doRead", None)):
        return "twisted.internet.tcp.Connection has no doRead"
    protocol = getattr(_newclient, "HTTP11ClientProtocol", None)
    if protocol is None or "_parser" not in protocol._finishResponse_WAITING.__code__.co_names:
        return "twisted.web._newclient.HTTP11ClientProtocol no longer keeps its parser in _parser"
    if "bodyDecoder" not in _newclient.HTTPParser.rawDataReceived.__code__.co_names:
        return "twisted.web._newclient.HTTPParser no longer passes the body to bodyDecoder"
    if "_state" not in _newclient.Response._deliverBody_INITIAL.__code__.co_names:
        return "twisted.web._newclient.Response no longer keeps its state in _state"
    reader = getattr(http11, "_ResponseReader", None)
    names = set(reader.__init__.__code__.co_names) if reader is not None else set()
    wanted = {"_finished", "_bytes_received", "_maxsize", "_warnsize", "_reached_warnsize"}
    if not wanted <= names:
        return f"Scrapy's _ResponseReader lacks {sorted(wanted - names)}"
    return None


_DIRECT_READS_PROBLEM = _direct_reads_problem()


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
                    # Body bytes that came in the same read as the headers are decoded after this returns; the
                    # direct reads count from the decoder's remaining length at each read, so they agree.
                    _DirectReads.attach(txresponse, protocol, sink, self._crawler)

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
        elif _DIRECT_READS_PROBLEM is not None:
            logger.warning("Segment bodies are read through Twisted's parser (%s); large downloads are slower",
                           _DIRECT_READS_PROBLEM)

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
