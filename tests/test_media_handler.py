"""The download handler of mediacrawler.media.handler: the body sink (pure parts), then real downloads.

The download tests run a real Scrapy engine (asyncio reactor) with the project's settings in a subprocess — this
module run as a script, see :func:`_main` — against the sandbox on 127.0.0.1. Each run performs a list of steps
(one ranged GET into a sink each) and writes what it saw to a JSON file: the body's SHA-256, how many bytes were
read straight from the socket, the error of a failed step. The sandbox's request log says which connection each
request used and how many bytes went out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request, Spider, signals
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.test import get_crawler
from twisted.internet import main
from twisted.internet.defer import Deferred
from twisted.web import _newclient

from mediacrawler.media.handler import (
    META_BODY_SINK,
    BodySink,
    _direct_reads_problem,
    _DirectReads,
    _hook_available,
)
from mediacrawler.sandbox.media import blob_read
from mediacrawler.sandbox.process import SandboxProcess

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


def test_sink_collects_chunks_in_its_own_buffer() -> None:
    buffer = bytearray(10)
    sink = BodySink(buffer)
    assert sink.write(b"abcd") == 4 and sink.write(b"efg") == 3
    assert bytes(sink.view()) == b"abcdefg" and sink.size == 7 and not sink.overflow
    assert sink.getvalue() == b""  # Scrapy's Response.body stays empty: the bytes are here
    assert buffer[:7] == b"abcdefg" and sink.buffer is buffer and sink.capacity == 10


def test_sink_overflow_is_flagged_and_bounded() -> None:
    sink = BodySink(bytearray(5))
    sink.write(b"abc")
    assert sink.write(b"defgh") == 2
    assert sink.overflow and bytes(sink.view()) == b"abcde"


def test_sink_truncate_and_reset_forget_a_cut_attempt() -> None:
    sink = BodySink(bytearray(8))
    sink.write(b"12345678")
    sink.attached, sink.direct = True, 5
    assert sink.truncate(0) == 0 and sink.size == 0  # what Scrapy does past download_maxsize
    with pytest.raises(ValueError):
        sink.truncate(3)
    sink.write(b"xy")
    sink.reset()
    assert (sink.size, sink.overflow, sink.attached, sink.direct, bytes(sink.view())) == (0, False, False, 0, b"")


def test_scrapy_internals_the_hook_needs_are_there() -> None:
    # Fails on a Scrapy or Twisted upgrade that moves them: large downloads would silently lose their fast path.
    assert _hook_available() is None
    assert _direct_reads_problem() is None


# --- _DirectReads on a real socket pair, with Twisted's real body decoder ------------------------------------
class _Connection:
    """The part of a Twisted TCP connection the handler uses: its socket, and Twisted's own ``doRead``."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self.twisted_reads = 0

    def doRead(self) -> str:  # noqa: N802 - Twisted's name
        self.twisted_reads += 1
        return "twisted"


@pytest.fixture
def direct() -> Iterator[Callable[..., tuple[_DirectReads, _Connection, socket.socket]]]:
    """``make(length, capacity=, maxsize=, warnsize=)`` → (handler installed on a connection, connection, peer)."""
    opened: list[socket.socket] = []

    def make(length: int, *, capacity: int | None = None, maxsize: int = 0,
             warnsize: int = 0) -> tuple[_DirectReads, _Connection, socket.socket]:
        ours, peer = socket.socketpair()
        opened.extend((ours, peer))
        ours.setblocking(False)
        connection = _Connection(ours)
        decoder = _newclient._IdentityTransferDecoder(length, lambda data: None, lambda rest: None)
        parser = SimpleNamespace(bodyDecoder=decoder)
        reader = SimpleNamespace(_finished=Deferred(), _bytes_received=0, _maxsize=maxsize, _warnsize=warnsize,
                                 _reached_warnsize=False)
        handler = _DirectReads(connection=connection, protocol=SimpleNamespace(_parser=parser), parser=parser,
                               decoder=decoder, txresponse=SimpleNamespace(_state="CONNECTED"), reader=reader,
                               sink=BodySink(bytearray(capacity or length)), crawler=get_crawler(Spider))
        connection.doRead = handler.doRead  # type: ignore[method-assign]
        return handler, connection, peer

    yield make
    for sock in opened:
        sock.close()


def test_direct_reads_stop_one_byte_short_of_the_body(direct: Any) -> None:
    handler, connection, peer = direct(10_000)
    assert connection.doRead() is None and connection.twisted_reads == 0  # nothing to read yet: not an error
    peer.sendall(b"x" * 10_000)
    for _ in range(10):  # bounded: a socket pair delivers 10 kB in one or two reads
        if handler.decoder.contentLength == 1:
            break
        assert connection.doRead() is None
    assert (handler.sink.size, handler.sink.direct, handler.reader._bytes_received) == (9_999, 9_999, 9_999)
    assert handler.decoder.contentLength == 1 and bytes(handler.sink.view()) == b"x" * 9_999
    assert connection.doRead() == "twisted" and connection.twisted_reads == 1  # the last byte: Twisted's path
    assert "doRead" not in vars(connection)


@pytest.mark.parametrize(("limits", "stop_at"), [({"maxsize": 4096}, 4096), ({"warnsize": 3000}, 3000),
                                                ({"capacity": 5000}, 5000)])
def test_direct_reads_stop_at_size_limits_and_the_sink_end(direct: Any, limits: dict[str, int],
                                                            stop_at: int) -> None:
    handler, connection, peer = direct(10_000, **limits)
    peer.sendall(b"y" * 10_000)
    for _ in range(10):
        if connection.doRead() == "twisted":
            break
    assert handler.sink.size == stop_at and connection.twisted_reads == 1 and "doRead" not in vars(connection)


def test_direct_reads_report_an_early_close_and_hand_back_when_finished(direct: Any) -> None:
    handler, connection, peer = direct(10_000)
    peer.sendall(b"z" * 100)
    peer.close()
    assert connection.doRead() is None and handler.sink.size == 100
    assert connection.doRead() is main.CONNECTION_DONE  # the decoder, 9,900 bytes short, reports data loss
    assert handler.decoder.contentLength == 9_900
    handler, connection, _ = direct(10_000)
    handler.reader._finished.callback(None)  # cancelled (timeout) or done: Twisted's path from now on
    assert connection.doRead() == "twisted" and "doRead" not in vars(connection)


def test_direct_reads_hand_back_to_a_bytes_received_listener(direct: Any) -> None:
    handler, connection, peer = direct(10_000)
    peer.sendall(b"w" * 10_000)
    handler.crawler.signals.connect(lambda **kwargs: None, signal=signals.bytes_received, weak=False)
    assert connection.doRead() == "twisted" and handler.sink.size == 0


# --- the driver: a real crawl performing sink downloads -------------------------------------------------------
class SinkSpider(Spider):
    """Runs ``steps`` (JSON list) one after the other from ``start()`` and writes the outcome of each to ``out``.

    A step: ``{"url", "start", "end" (exclusive), "capacity", "meta": {...}, "listen": bool}``; ``listen``
    connects a ``bytes_received`` receiver for that step, which counts the bytes it is told about. Each outcome
    also says how many bytes the handler read directly during the step (its stat, so failed attempts count too)
    and how many pooled connections still carry a direct-read handler afterwards.
    """

    name = "sink_driver"

    def __init__(self, *args: Any, steps: str = "[]", out: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[dict[str, Any]] = json.loads(steps)
        self.out = out

    async def start(self) -> AsyncIterator[Any]:
        assert self.crawler.engine is not None
        results = []
        for step in self.steps:
            sink = BodySink(bytearray(step["capacity"]))
            heard: list[int] = []

            def on_bytes(data: bytes, request: Request, spider: Spider, heard: list[int] = heard) -> None:
                heard.append(len(data))

            if step.get("listen"):
                self.crawler.signals.connect(on_bytes, signal=signals.bytes_received)
            request = Request(step["url"], headers={"Range": f"bytes={step['start']}-{step['end'] - 1}"},
                              meta={**step.get("meta", {}), META_BODY_SINK: sink}, callback=NO_CALLBACK,
                              dont_filter=True)
            result: dict[str, Any] = {}
            stats = self.crawler.stats
            assert stats is not None
            before = stats.get_value("media/handler/direct_read_bytes", 0)
            try:
                response = await self.crawler.engine.download_async(request)
            except Exception as exc:  # noqa: BLE001 - the outcome under test
                result["error"] = type(exc).__name__
            else:
                body = bytes(sink.view()) if sink.attached else response.body
                result.update(status=response.status, size=len(body), sha256=hashlib.sha256(body).hexdigest(),
                              attached=sink.attached, direct=sink.direct, overflow=sink.overflow,
                              flags=response.flags)
            finally:
                if step.get("listen"):
                    self.crawler.signals.disconnect(on_bytes, signal=signals.bytes_received)
            result["heard"] = sum(heard)
            result["direct_stat"] = stats.get_value("media/handler/direct_read_bytes", 0) - before
            result["stale"] = self._stale_handlers()
            results.append(result)
        tmp = self.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(results, f)
        os.replace(tmp, self.out)
        return
        yield

    def _stale_handlers(self) -> int:
        # Idle pooled connections whose read handler is still an instance attribute (a _DirectReads left behind).
        assert self.crawler.engine is not None
        handler = self.crawler.engine.downloader.handlers._handlers.get("http")
        pool = getattr(handler, "_pool", None)
        idle = [p for conns in getattr(pool, "_connections", {}).values() for p in conns]
        return sum(1 for p in idle if "doRead" in vars(p.transport))


def _main() -> None:
    from scrapy.crawler import CrawlerProcess

    sys.path.insert(0, str(ROOT))
    from tests.utils import project_settings_dict

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    settings = project_settings_dict(
        DOWNLOAD_DELAY=0, AUTOTHROTTLE_ENABLED=False, RANDOMIZE_DOWNLOAD_DELAY=False, LOG_LEVEL="INFO",
        RETRY_ENABLED=False, ITEM_PIPELINES={}, TELNETCONSOLE_ENABLED=False,
        FILES_STORE=str(Path(args.out).parent))
    settings.pop("ADDONS", None)
    process = CrawlerProcess(settings, install_root_handler=True)
    process.crawl(SinkSpider, steps=args.steps, out=args.out)
    process.start()


def run_steps(tmp_path: Path, steps: list[dict[str, Any]],
              timeout: float = 60) -> tuple[list[dict[str, Any]], str]:
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "tests.test_media_handler", "--steps", json.dumps(steps),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), f"driver wrote nothing (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text()), proc.stderr


def blob_step(sb: SandboxProcess, name: str, start: int, end: int, **extra: Any) -> dict[str, Any]:
    return {"url": f"{sb.url}/media/blob/{name}?size={8 * MiB}", "start": start, "end": end,
            "capacity": end - start, **extra}


def digest(name: str, start: int, end: int) -> str:
    return hashlib.sha256(blob_read(name, start, end - start)).hexdigest()


def blob_log(sb: SandboxProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in sb.requests() if e["path"] == f"/media/blob/{name}"]


@pytest.mark.slow
def test_sink_bodies_are_read_straight_from_the_socket(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    ranges = [(0, 2 * MiB), (2 * MiB, 5 * MiB), (5 * MiB, 8 * MiB - 7)]
    steps = [blob_step(fresh_sandbox, "direct", a, b) for a, b in ranges]
    # A body short enough to arrive with its headers ends without another read: the handler must still go.
    results, _ = run_steps(tmp_path, [*steps, blob_step(fresh_sandbox, "direct", 100, 1100)])
    short = results.pop()
    assert short["sha256"] == digest("direct", 100, 1100) and short["stale"] == 0, short
    for (a, b), result in zip(ranges, results, strict=True):
        assert result["status"] == 206 and result["attached"] and not result["overflow"], result
        assert result["size"] == b - a and result["sha256"] == digest("direct", a, b)
        # Nearly all of it came straight from the socket; the last byte always takes Twisted's own path.
        assert b - a - 256 * 1024 < result["direct"] < b - a, result
        assert result["direct_stat"] == result["direct"] and result["stale"] == 0
        assert result["flags"] == []
    served = blob_log(fresh_sandbox, "direct")
    assert [e["bytes"] for e in served] == [*(b - a for a, b in ranges), 1000]
    assert not any(e["aborted"] for e in served)
    # Each response ended properly, so its connection went back to the pool and carried the next request.
    assert len({e["client_port"] for e in served}) == 1, served


@pytest.mark.slow
def test_bytes_received_listeners_still_hear_every_byte(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    steps = [blob_step(fresh_sandbox, "heard", 0, 3 * MiB, listen=True),
             blob_step(fresh_sandbox, "heard", 3 * MiB, 6 * MiB)]
    (listened, plain), _ = run_steps(tmp_path, steps)
    assert listened["sha256"] == digest("heard", 0, 3 * MiB)
    assert plain["sha256"] == digest("heard", 3 * MiB, 6 * MiB)
    assert listened["direct"] == 0 and listened["heard"] == 3 * MiB  # the signal saw the whole body
    assert plain["direct"] > 0 and plain["heard"] == 0


@pytest.mark.slow
def test_a_cut_during_direct_reads_is_data_loss(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    fresh_sandbox.set_faults(media_cut_paths={"/media/blob/cut": 1}, media_cut_fraction=0.75)
    steps = [blob_step(fresh_sandbox, "cut", 0, 4 * MiB), blob_step(fresh_sandbox, "cut", 0, 4 * MiB)]
    (cut, again), _ = run_steps(tmp_path, steps)
    assert cut["error"] == "ResponseDataLossError" and cut["heard"] == 0
    assert 2 * MiB < cut["direct_stat"] < 3 * MiB  # the attempt that was cut was being read directly
    assert again["sha256"] == digest("cut", 0, 4 * MiB) and again["direct"] > 0
    served = blob_log(fresh_sandbox, "cut")
    assert served[0]["aborted"] and served[0]["bytes"] == 3 * MiB and not served[1]["aborted"]


@pytest.mark.slow
def test_size_limits_still_apply_to_sink_bodies(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    # Scrapy settles both limits from Content-Length, before the first body byte (the direct reads' own bounds
    # are unit-tested below).
    steps = [
        # The sink could take it all, but download_maxsize says 1 MiB: Scrapy cancels it (from Content-Length).
        blob_step(fresh_sandbox, "limits", 0, 3 * MiB, capacity=4 * MiB, meta={"download_maxsize": MiB}),
        # download_warnsize 1 MiB: one warning, the body arrives whole, still mostly read directly.
        blob_step(fresh_sandbox, "limits", 0, 3 * MiB, meta={"download_warnsize": MiB}),
        # A sink smaller than the body: flagged as overflow (a segment request also sets maxsize to its size).
        blob_step(fresh_sandbox, "limits", 0, 3 * MiB, capacity=2 * MiB),
    ]
    (capped, warned, small), log = run_steps(tmp_path, steps)
    assert capped["error"] == "DownloadCancelledError" and capped["direct_stat"] == 0
    assert "larger than download max size (1048576)" in log
    assert warned["sha256"] == digest("limits", 0, 3 * MiB) and warned["direct"] > MiB
    assert log.count("larger than download warn size (1048576)") == 1
    assert small["overflow"] and small["size"] == 2 * MiB and small["sha256"] == digest("limits", 0, 2 * MiB)


@pytest.mark.slow
def test_a_stalled_body_times_out(fresh_sandbox: SandboxProcess, tmp_path: Path) -> None:
    fresh_sandbox.set_faults(media_stall_paths={"/media/blob/stall": 1}, media_cut_fraction=0.5)
    steps = [blob_step(fresh_sandbox, "stall", 0, 4 * MiB, meta={"download_timeout": 1.5}),
             blob_step(fresh_sandbox, "stall", 0, 4 * MiB)]
    (stalled, again), _ = run_steps(tmp_path, steps)
    assert stalled["error"] == "DownloadTimeoutError" and stalled["heard"] == 0
    assert MiB < stalled["direct_stat"] < 2 * MiB and again["stale"] == 0  # read directly until it went silent
    assert again["sha256"] == digest("stall", 0, 4 * MiB) and again["direct"] > 0
    assert fresh_sandbox.stats()["stalls"] == 1


if __name__ == "__main__":
    _main()
