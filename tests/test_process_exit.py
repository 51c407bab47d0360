"""``collect_once_at_exit`` (mediacrawler/commands/process_exit.py; docs/operations.md, "Process exit"), in a real
interpreter that exits: what the crawl left in reference cycles is still finalized, with logging up, and the
interpreter's own collections at exit find nothing left to scan."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import atexit, gc, logging, sys

    logging.basicConfig(stream=sys.stdout, format="%(message)s", level=logging.INFO)
    # Registered first, so run last among the atexit handlers: after the one collected at exit.
    atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0, flush=True))

    from mediacrawler.commands.process_exit import collect_once_at_exit

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            logging.getLogger("child").info("finalized with logging up")

    def crawl():
        Cycle()  # garbage in a reference cycle, as a closed crawler's object graph is

    gc.disable()  # no collection before the exit's
    crawl()
    if sys.argv[1] == "on":
        collect_once_at_exit()
        collect_once_at_exit()  # idempotent: one handler
    print("crawl done", flush=True)
""")


def run_child(mode: str, script: str = CHILD) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", script, mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_cycles_left_by_the_crawl_are_finalized_then_the_heap_is_frozen_for_the_exit() -> None:
    assert run_child("on") == ["crawl done", "finalized with logging up", "frozen True"]


def test_without_it_the_exit_is_python_s_own() -> None:
    # The cycle is finalized by the interpreter's collections, after every atexit handler (logging's shutdown too).
    assert run_child("off") == ["crawl done", "frozen False", "finalized with logging up"]


STARTED = textwrap.dedent("""
    import gc, sys

    from scrapy import signals
    from scrapy.utils.test import get_crawler

    from mediacrawler.commands.process_exit import YOUNG_THRESHOLD, collect_once_at_exit, freeze_once_started

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            print("finalized", flush=True)

    crawler = get_crawler()
    freeze_once_started(crawler)
    old = Cycle()
    gc.collect()  # reachable: survives into the oldest generation
    del old  # garbage there, in a cycle, when the engine starts
    crawler.signals.send_catch_log(signals.engine_started)
    print("frozen", gc.get_freeze_count() > 0, "young", gc.get_threshold()[0] == YOUNG_THRESHOLD, flush=True)
    gc.collect()
    print("collected during the crawl", flush=True)
    if sys.argv[1] == "clean":
        collect_once_at_exit()
""")


def test_the_heap_of_a_started_crawl_is_frozen_and_unfrozen_at_a_clean_exit() -> None:
    # The frozen cycle is out of every collection of the crawl, and finalized by the exit's one collection.
    assert run_child("clean", STARTED) == ["frozen True young True", "collected during the crawl", "finalized"]


def test_the_heap_of_a_started_crawl_is_unfrozen_for_python_s_own_exit() -> None:
    # After a forced stop (no collect_once_at_exit), the interpreter's collections at exit still reach it.
    assert run_child("forced", STARTED) == ["frozen True young True", "collected during the crawl", "finalized"]
