"""Project signals, sent by the platform spiders (see spiders/_base.py) for components beside the item chain, and
Scrapy's item signals sent again synchronously (:func:`forward_item_signals`).

Handlers receive keyword arguments; connect with ``crawler.signals.connect(handler, signal=page_parsed)``.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any
from weakref import WeakKeyDictionary

from scrapy import signals

logger = logging.getLogger(__name__)

#: A listing page was parsed. Arguments: ``spider``, ``page`` (int), ``cursor`` (the cursor that fetched it, or
#: None), ``next_cursor`` (what fetches the next page, or None), ``post_ids`` (list[str]: every post the page will
#: emit, including those still waiting for a second request), ``is_last`` (the platform said this is the end).
page_parsed = object()

#: A listing page failed for good (retries exhausted, unparseable, platform error). Arguments: ``spider``,
#: ``page``, ``cursor``, ``reason`` (str).
page_failed = object()

#: A requested item of an ``items`` job was answered and parsed. Arguments: ``spider``, ``item`` (its key, as in
#: ``JobState.items``), ``post_ids`` (list[str]: every post it will emit; none when it names a post already named).
requested_item_parsed = object()

#: A requested item failed for good. Arguments: ``spider``, ``item``, ``reason`` (str).
requested_item_failed = object()

#: A comment thread moved (spiders/_threads.py). Arguments: ``spider``, ``post_id``, ``state`` (the thread's
#: ``ThreadState`` as plain JSON: the one that fetches the page just read again; at the end its final state, or
#: ``None`` after an error), ``comment_ids`` (the comments that page emits, sent before any of them), ``done``
#: (the thread ended: its post is emitted next), ``mark`` (at the end of a complete walk: ``[id, created_at]`` of
#: the thread's newest top-level comment, else None).
thread_progress = object()

#: A worker (distributed/worker.py) starts serving a job. Arguments: ``spider``, ``job`` (the job key). Here, not
#: in distributed/jobs.py, so that the extensions keeping per-job state connect to it without importing redis-py.
job_started = object()

#: The job a worker served is finished everywhere. Arguments: ``spider``, ``job``.
job_finished = object()

#: Scrapy's ``item_scraped``, ``item_dropped`` and ``item_error``, sent again synchronously (``send_catch_log``)
#: by one receiver of each (:func:`forward_item_signals`), with the same arguments. The project's components that
#: act on every item leaving the pipelines (checkpoint, marks, retries, records, the spider) connect here:
#: Scrapy runs each receiver of its own signal as a coroutine of its own, which cost more than most of them do
#: (docs/benchmarks.md, "Weibo timeline"). Receivers return nothing: one that must wait for something
#: (dedupe waits for its batch of commits) stays on Scrapy's signal.
item_scraped_sync = object()
item_dropped_sync = object()
item_error_sync = object()


class _ItemSignals:
    """The one receiver of each of Scrapy's item signals in a crawler; sends the ``*_sync`` signal."""

    def __init__(self, crawler: Any) -> None:
        self.signals = crawler.signals

    def _send(self, signal: object, **kwargs: Any) -> None:
        for receiver, result in self.signals.send_catch_log(signal, **kwargs):
            if inspect.isawaitable(result):  # it would never run: its work belongs on Scrapy's own signal
                if inspect.iscoroutine(result):
                    result.close()
                logger.error("%r returned an awaitable from a synchronous item signal (mediacrawler.signals)",
                             receiver)

    def item_scraped(self, item: Any, response: Any, spider: Any) -> None:
        self._send(item_scraped_sync, item=item, response=response, spider=spider)

    def item_dropped(self, item: Any, response: Any, spider: Any, exception: BaseException) -> None:
        self._send(item_dropped_sync, item=item, response=response, spider=spider, exception=exception)

    def item_error(self, item: Any, response: Any, spider: Any, failure: Any) -> None:
        self._send(item_error_sync, item=item, response=response, spider=spider, failure=failure)


_FORWARDERS: WeakKeyDictionary[Any, _ItemSignals] = WeakKeyDictionary()


def forward_item_signals(crawler: Any) -> None:
    """Have *crawler* send :data:`item_scraped_sync`, :data:`item_dropped_sync` and :data:`item_error_sync`
    (once per crawler, whoever asks first); call it before connecting to them."""
    if crawler in _FORWARDERS:
        return
    forwarder = _FORWARDERS[crawler] = _ItemSignals(crawler)  # kept alive here: signals hold receivers weakly
    crawler.signals.connect(forwarder.item_scraped, signal=signals.item_scraped)
    crawler.signals.connect(forwarder.item_dropped, signal=signals.item_dropped)
    crawler.signals.connect(forwarder.item_error, signal=signals.item_error)
