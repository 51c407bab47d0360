"""The garbage collector of a crawl process: the heap built before the crawl frozen out of the collections that run
during it, and the interpreter's exit without its three collections of the whole heap (docs/operations.md,
"Process exit"). For ``scrapy crawl`` (commands/crawl.py) and the test spiders' ``scrapy runspider`` processes;
never for a process that goes on after its crawls (a test runner, ``mediacrawler demo``).
"""

from __future__ import annotations

import atexit
import gc
from typing import Any

from scrapy import signals

__all__ = ["collect_once_at_exit", "freeze_once_started"]

#: Allocations between two collections of the youngest generation during a crawl (CPython's default: 700).
YOUNG_THRESHOLD = 5000

#: Every crawl of the process closed cleanly (:func:`collect_once_at_exit` was called).
_clean = False


def freeze_once_started(crawler: Any) -> None:
    """Once *crawler*'s engine has started: what the process holds then (modules, settings, components, the
    opened spider: ~100,000 objects that live until the exit) frozen out of the collections that run during the
    crawl, which otherwise walk all of it at every collection of the oldest generation.

    The exit sees the heap as before: an ``atexit`` handler unfreezes it first, so the interpreter's own
    collections (after a forced stop) or the one of :func:`collect_once_at_exit` (after a clean close) reach every
    object again. A reference cycle that became garbage before the freeze is collected then, not earlier. The
    youngest generation is collected every :data:`YOUNG_THRESHOLD` allocations from then on."""
    crawler.signals.connect(_engine_started, signal=signals.engine_started)
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)


def _engine_started() -> None:
    gc.collect(1)  # the young garbage of the start-up, not frozen with the rest
    gc.freeze()
    # A post lives from its listing page to its records write and feed line, past the default 700 allocations
    # between two young collections: each collection walked the posts in flight and moved them to the older
    # generations, whose collections walked them again (2,000 posts: 0.39 -> 0.21 s of collections). Cyclic
    # garbage waits for a few thousand allocations more; memory freed by reference counting is not affected.
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def collect_once_at_exit() -> None:
    """After a clean close of this process's crawls: at exit, one collection, then what is left frozen out of the
    collections the interpreter runs while it exits. Idempotent.

    Python collects the whole heap three times in its own finalization (once after ``atexit``, twice while it tears
    modules down): ~0.25 s of CPU for the ~100,000 objects of a crawl process, a quarter of a one-video crawl's.
    Run first among the ``atexit`` handlers (registered last), the one collection here finds the crawlers' object
    graphs unreachable and runs their finalizers while logging is still up; then the other ``atexit`` handlers
    (logging's flush and close), module teardown and every object freed by its reference count run as before. Only
    a reference cycle among objects still reachable from a module when the interpreter exits is left to the OS with
    its finalizer unrun, which Python does not promise to run either. Not after a forced stop: its components did
    not close, and their open files may still be flushed by those collections."""
    global _clean
    _clean = True
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)


def _at_exit() -> None:
    gc.unfreeze()  # what freeze_once_started froze is collected at exit like the rest
    if _clean:
        gc.collect()
        gc.freeze()  # out of every later collection: the interpreter's at exit
