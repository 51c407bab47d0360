"""Project signals, sent by the platform spiders (see spiders/_base.py) for components beside the item chain, and
Scrapy's item signals sent again synchronously (:func:`forward_item_signals`).

Handlers receive keyword arguments; connect with ``crawler.signals.connect(handler, signal=page_parsed)``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from pydispatch.dispatcher import Any as AnySender
from pydispatch.dispatcher import WEAKREF_TYPES, getAllReceivers, getReceivers, liveReceivers
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


#: A receiver of a ``*_sync`` signal as called: the reference PyDispatcher holds, whether it is a weak one, and the
#: names of the arguments it takes (None: every one, it has ``**kwargs``).
_Plan = list[tuple[Any, bool, tuple[str, ...] | None]]


def _names(receiver: Callable[..., Any]) -> tuple[str, ...] | None:
    """The keyword arguments PyDispatcher's ``robustApply`` (Scrapy's ``send_catch_log``) would pass *receiver*."""
    call = getattr(receiver, "__call__", None)
    if call is not None and (hasattr(call, "__func__") or hasattr(call, "__code__")):
        receiver = call
    func = getattr(receiver, "__func__", receiver)
    code = func.__code__
    if code.co_flags & inspect.CO_VARKEYWORDS:
        return None
    return code.co_varnames[int(func is not receiver):code.co_argcount]


class _ItemSignals:
    """The one receiver of each of Scrapy's item signals in a crawler; sends the ``*_sync`` signal.

    As Scrapy's ``send_catch_log`` does (each receiver given the arguments it names, an exception logged and the
    other receivers still run), without looking up the receivers and their arguments again for every item: the
    plan of a signal is made again when its receivers change (a component connected or gone)."""

    def __init__(self, crawler: Any) -> None:
        self.signals = crawler.signals
        self.sender = crawler.signals.sender
        self._plans: dict[object, tuple[tuple[Any, ...], _Plan]] = {}

    def _plan(self, signal: object) -> _Plan:
        # PyDispatcher's own lists of this signal's receivers, which it changes on connect and disconnect (and when
        # a weakly held receiver dies): the plan stands while they hold the same references.
        key = (*getReceivers(self.sender, signal), None, *getReceivers(AnySender, signal))
        cached = self._plans.get(signal)
        if cached is not None and cached[0] == key:
            return cached[1]
        plan: _Plan = []
        for ref in getAllReceivers(self.sender, signal):
            for receiver in liveReceivers([ref]):
                plan.append((ref, isinstance(ref, WEAKREF_TYPES), _names(receiver)))
        self._plans[signal] = (key, plan)
        return plan

    def _send(self, signal: object, **kwargs: Any) -> None:
        kwargs["signal"], kwargs["sender"] = signal, self.sender
        for ref, weak, names in self._plan(signal):
            receiver = ref() if weak else ref
            if receiver is None:
                continue  # gone since the plan was made
            try:
                result = receiver(**(kwargs if names is None else {k: kwargs[k] for k in names if k in kwargs}))
            except Exception:
                logger.error("Error caught on signal handler: %(receiver)s", {"receiver": receiver}, exc_info=True,
                             extra={"spider": kwargs.get("spider")})
                continue
            if result is not None and inspect.isawaitable(result):
                # It would never run: its work belongs on Scrapy's own signal.
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
