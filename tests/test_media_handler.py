"""The body sink of mediacrawler.media.handler (pure parts; the handler itself runs in test_media_segments)."""

from __future__ import annotations

import pytest

from mediacrawler.media.handler import BodySink, _hook_available


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
    sink.attached = True
    assert sink.truncate(0) == 0 and sink.size == 0  # what Scrapy does past download_maxsize
    with pytest.raises(ValueError):
        sink.truncate(3)
    sink.write(b"xy")
    sink.reset()
    assert (sink.size, sink.overflow, sink.attached, bytes(sink.view())) == (0, False, False, b"")


def test_scrapy_internals_the_hook_needs_are_there() -> None:
    # Fails on a Scrapy upgrade that moves them: large downloads would silently lose their fast path.
    assert _hook_available() is None
