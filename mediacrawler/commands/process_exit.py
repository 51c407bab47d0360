"""The end of a crawl process: the interpreter's exit without its three collections of the whole heap
(docs/operations.md, "Process exit"). For ``scrapy crawl`` (commands/crawl.py) and the test spiders' ``scrapy
runspider`` processes; never for a process that goes on after its crawls (a test runner, ``mediacrawler demo``).
"""

from __future__ import annotations

import atexit
import gc

__all__ = ["collect_once_at_exit"]


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
    atexit.unregister(_collect_then_freeze)
    atexit.register(_collect_then_freeze)


def _collect_then_freeze() -> None:
    gc.collect()
    gc.freeze()  # out of every later collection: the interpreter's at exit
