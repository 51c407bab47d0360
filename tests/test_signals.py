"""mediacrawler.signals.forward_item_signals: Scrapy's item signals sent again synchronously, by one receiver."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
from scrapy import signals
from scrapy.utils.test import get_crawler

from mediacrawler import signals as mc_signals


def test_one_receiver_per_scrapy_signal_forwards_each_item_to_every_sync_receiver() -> None:
    crawler = get_crawler()
    got: list[tuple[str, Any]] = []

    def scraped(item: Any, spider: Any) -> None:
        got.append(("scraped", item))

    def scraped_too(item: Any, response: Any, **kwargs: Any) -> None:
        got.append(("scraped too", (item, response, sorted(kwargs))))

    def dropped(item: Any, exception: BaseException) -> None:
        got.append(("dropped", (item, str(exception))))

    def failed(item: Any, failure: Any) -> None:
        got.append(("error", (item, failure)))

    for receiver, signal in ((scraped, mc_signals.item_scraped_sync), (scraped_too, mc_signals.item_scraped_sync),
                             (dropped, mc_signals.item_dropped_sync), (failed, mc_signals.item_error_sync)):
        mc_signals.forward_item_signals(crawler)  # each component asks; the first one installs it
        crawler.signals.connect(receiver, signal=signal)
    results = crawler.signals.send_catch_log(signals.item_scraped, item=1, response="r", spider=None)
    # Scrapy sees one receiver of ours (beside its CoreStats), however many components listen.
    assert [type(getattr(r, "__self__", None)).__name__ for r, _ in results] == ["CoreStats", "_ItemSignals"]
    crawler.signals.send_catch_log(signals.item_dropped, item=2, response=None, spider=None,
                                   exception=ValueError("x"))
    crawler.signals.send_catch_log(signals.item_error, item=3, response=None, spider=None, failure="f")
    assert got == [("scraped", 1), ("scraped too", (1, "r", ["sender", "signal", "spider"])),
                   ("dropped", (2, "x")), ("error", (3, "f"))]
    # Another crawler has its own forwarder: nothing crosses over.
    other = get_crawler()
    mc_signals.forward_item_signals(other)
    other.signals.send_catch_log(signals.item_scraped, item=4, response=None, spider=None)
    assert len(got) == 4


def test_a_receiver_that_raises_or_returns_a_coroutine_is_logged_and_the_others_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    crawler = get_crawler()
    got: list[Any] = []

    def broken(item: Any) -> None:
        raise RuntimeError("boom")

    async def waits(item: Any) -> None:
        got.append("never")

    def works(item: Any) -> None:
        got.append(item)

    mc_signals.forward_item_signals(crawler)
    for receiver in (broken, waits, works):
        crawler.signals.connect(receiver, signal=mc_signals.item_scraped_sync)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine never awaited would warn: it is closed
        with caplog.at_level(logging.ERROR):
            crawler.signals.send_catch_log(signals.item_scraped, item=5, response=None, spider=None)
    assert got == [5]
    assert "Error caught on signal handler" in caplog.text and "boom" in caplog.text
    assert "returned an awaitable from a synchronous item signal" in caplog.text


def test_receivers_connected_later_disconnected_or_gone_are_followed_and_not_kept_alive() -> None:
    import gc
    import weakref

    crawler = get_crawler()
    mc_signals.forward_item_signals(crawler)
    got: list[tuple[str, Any]] = []

    class Component:
        def __init__(self, name: str) -> None:
            self.name = name
            crawler.signals.connect(self.item_scraped, signal=mc_signals.item_scraped_sync)

        def item_scraped(self, item: Any, spider: Any = None) -> None:
            got.append((self.name, item))

    def send(item: Any) -> None:
        crawler.signals.send_catch_log(signals.item_scraped, item=item, response=None, spider=None)

    first = Component("first")
    send(1)
    second = Component("second")  # after the first item: reached from the next one
    send(2)
    crawler.signals.disconnect(first.item_scraped, signal=mc_signals.item_scraped_sync)
    send(3)
    gone = weakref.ref(second)
    del second
    gc.collect()
    assert gone() is None  # the forwarder holds its receivers as weakly as Scrapy's signals do
    send(4)
    assert got == [("first", 1), ("first", 2), ("second", 2), ("second", 3)]
    del first
