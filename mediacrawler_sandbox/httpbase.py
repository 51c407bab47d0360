"""Twisted plumbing shared by every mounted platform: the logging request, the base resource and the body producer.

Only the server process imports this module (it touches ``twisted.web``); world models and media generators stay
importable without Twisted so a test process never gets a reactor installed behind Scrapy's back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from twisted.internet.interfaces import IPullProducer, IReactorTime
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource
from zope.interface import implementer

from .state import SandboxState

logger = logging.getLogger(__name__)

__all__ = ["BodyProducer", "SandboxRequest", "SandboxResource", "finish_with", "origin_of"]


def _header(request: server.Request, name: bytes) -> str | None:
    value = request.getHeader(name)
    return None if value is None else value.decode("latin-1")


def query_arg(request: server.Request, name: bytes) -> str | None:
    """The first value of query parameter ``name``, decoded; ``None`` when absent."""
    values = request.args.get(name)
    return values[0].decode("utf-8", "replace") if values else None


def query_int(request: server.Request, name: bytes, default: int | None = None) -> int | None:
    """Query parameter ``name`` as an int; ``default`` when absent, empty or not a number."""
    value = query_arg(request, name)
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


def origin_of(request: server.Request) -> str:
    """``http://host:port`` as the client addressed us, so media URLs in payloads point back at this sandbox."""
    host = _header(request, b"host")
    if not host:
        addr = request.getHost()
        host = f"{addr.host}:{addr.port}"
    return f"http://{host}"


def _area(path: str) -> str:
    return path.lstrip("/").split("/", 1)[0]


class SandboxRequest(server.Request):
    """A request that records itself in the sandbox log: headers of interest, status and body bytes sent.

    Control requests (``/_sandbox/…``) are not recorded, so polling the log does not change it.
    """

    entry: dict[str, Any] | None = None
    _state: SandboxState | None = None
    _media = False

    def process(self) -> None:  # called once the whole request has been received
        state: SandboxState = self.channel.site.state
        path = self.path.decode("latin-1")
        if not path.startswith("/_sandbox"):
            self._state = state
            self._media = _area(path) == "media"
            self.entry = state.log.start(
                method=self.method.decode("latin-1"),
                path=path,
                query=self.uri.partition(b"?")[2].decode("latin-1"),
                range=_header(self, b"range"),
                if_range=_header(self, b"if-range"),
                referer=_header(self, b"referer"),
                cookie=self.requestHeaders.hasHeader(b"cookie"),  # presence only: never log a credential
                user_agent=_header(self, b"user-agent"),
                # Which connection: requests that share a client port came over one persistent connection.
                client_port=getattr(self.getClientAddress(), "port", None),
                started=state.now(),
                ended=None,
            )
            state.count("requests")
            state.count("media_requests" if self._media else "api_requests")
            state.in_flight += 1
            self.notifyFinish().addBoth(self._logged_finish)
        super().process()

    def write(self, data: bytes) -> None:
        entry, state = self.entry, self._state
        if entry is not None and state is not None and not self.finished and not self._disconnected:
            if not self.startedWriting:
                entry["status"] = self.code
            if data and self.method != b"HEAD":
                entry["bytes"] += len(data)
                state.count("bytes_sent", len(data))
                if self._media:
                    state.count("media_bytes_sent", len(data))
        super().write(data)

    def _logged_finish(self, result: object) -> None:
        entry, state = self.entry, self._state
        assert entry is not None and state is not None
        entry["finished"] = True
        entry["aborted"] = isinstance(result, Failure)
        entry["ended"] = state.now()
        if entry["status"] is None and self.startedWriting:
            entry["status"] = self.code
        if entry["status"] is not None:
            state.by_status[entry["status"]] += 1
        state.in_flight -= 1
        # Returning None swallows the "connection lost" failure: for the sandbox it is an outcome, not an error.


def finish_with(request: server.Request, body: bytes) -> None:
    """Send ``body`` (headers only for HEAD) and finish, unless the client already went away."""
    if request._disconnected or request.finished:  # noqa: SLF001 (Twisted has no public flag)
        return
    if not request.responseHeaders.hasHeader(b"content-length"):
        request.setHeader(b"content-length", str(len(body)).encode())
    request.write(b"" if request.method == b"HEAD" else body)
    request.finish()


class SandboxResource(Resource):
    """A leaf resource mounted under a prefix: applies the latency knob, then calls :meth:`handle`.

    Subclasses implement ``handle(request) -> bytes | NOT_DONE_YET`` and route on ``request.postpath``.
    """

    isLeaf = True
    area = "other"

    def __init__(self, state: SandboxState, reactor: IReactorTime) -> None:
        super().__init__()
        self.state = state
        self.reactor = reactor

    def render(self, request: server.Request) -> bytes | int:
        delay = self.state.faults.latency(self.area)
        if delay <= 0:
            return self._handle_safely(request)
        call = self.reactor.callLater(delay, self._render_later, request)
        request.notifyFinish().addErrback(lambda _: call.cancel() if call.active() else None)
        return server.NOT_DONE_YET

    def _render_later(self, request: server.Request) -> None:
        if request._disconnected:  # noqa: SLF001
            return
        body = self._handle_safely(request)
        if body is not server.NOT_DONE_YET:
            assert isinstance(body, bytes)
            finish_with(request, body)

    def _handle_safely(self, request: server.Request) -> bytes | int:
        try:
            return self.handle(request)
        except Exception:  # a sandbox bug must show as a 500 with a log line, not a hung request
            logger.exception("sandbox handler failed for %s", request.uri)
            request.setResponseCode(500)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"sandbox internal error\n"

    def handle(self, request: server.Request) -> bytes | int:
        """Answer ``request``; return the body, or ``NOT_DONE_YET`` after arranging to finish it."""
        raise NotImplementedError


@implementer(IPullProducer)
class BodyProducer:
    """Streams a body in pieces with backpressure; optionally drops the connection after ``cut_after`` bytes, or
    with ``stall`` stops sending there and leaves the connection open (until the client gives up).

    Registered as a pull producer: the transport asks for the next piece only once it has flushed the previous
    one, so a multi-GiB blob occupies one piece of memory at a time.
    """

    def __init__(self, request: server.Request, pieces: Iterator[bytes], cut_after: int | None = None, *,
                 stall: bool = False) -> None:
        self.request = request
        self.pieces = pieces
        self.cut_after = cut_after
        self.stall = stall
        self.sent = 0
        self.stopped = False

    def start(self) -> None:
        """Register with the request and start streaming."""
        self.request.registerProducer(self, False)

    def resumeProducing(self) -> None:
        if self.stopped:
            return
        piece = next(self.pieces, None)
        if piece is not None and self.cut_after is not None:
            piece = piece[: max(0, self.cut_after - self.sent)] or None
        if piece is None:
            self.stopped = True
            self.request.unregisterProducer()
            if self.stall:
                self.request.channel.site.state.count("stalls")
            elif self.cut_after is not None:
                cut_connection(self.request)
            elif not self.request._disconnected:  # noqa: SLF001
                self.request.finish()
            return
        self.sent += len(piece)
        self.request.write(piece)

    def stopProducing(self) -> None:
        self.stopped = True


def cut_connection(request: server.Request) -> None:
    """Drop the TCP connection after what has been written so far (headers promised more)."""
    state: SandboxState = request.channel.site.state
    state.count("cuts")
    # loseConnection (not abort): the partial body already written is flushed, then FIN. The client sees fewer
    # bytes than Content-Length, exactly like a CDN edge dying mid-transfer.
    request.channel.transport.loseConnection()
