"""The ``mediacrawler`` command: ``demo``, ``get``, ``verify``, ``checkpoints``, ``retry``, ``export``,
``library``, ``web``, ``status``.

Crawls themselves run with ``scrapy crawl <platform> -a …`` (from a directory with scrapy.cfg, or anywhere with
``SCRAPY_SETTINGS_MODULE=mediacrawler.settings``); this command holds what is not a crawl. Each subcommand
parses its own arguments (``-s NAME=VALUE`` among them), finds the project's settings from any directory and
checks them as a crawl does (``checked_settings`` in mediacrawler/commands/options.py); it returns an exit status: 0 ok, 1 something is wrong, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from scrapy.utils.misc import load_object


#: name -> (the import path of its ``main(argv) -> int``, imported only when run; its help line).
COMMANDS = {
    "demo": ("mediacrawler.demo.main",
             "start the bundled sandbox and crawl it with every spider (no account needed)"),
    "get": ("mediacrawler.commands.get.main",
            "crawl share links (posts, videos, accounts, lists; short links followed) with the right spider"),
    "verify": ("mediacrawler.commands.verify.main",
               "re-hash every stored media file; report corrupt, missing and orphan files"),
    "checkpoints": ("mediacrawler.commands.checkpoints.main",
                    "list, show or reset the resume checkpoints of crawl jobs"),
    "enqueue": ("mediacrawler.commands.enqueue.main",
                "queue a crawl job in Redis for the workers (scrapy crawl <platform> -s REDIS_URL=…)"),
    "retry": ("mediacrawler.commands.retry.main",
              "retry the media assets that failed in earlier crawls (records: <job>.retry-<time>.jsonl)"),
    "export": ("mediacrawler.commands.export.main",
               "the crawled records as flat CSV (UTF-8 with BOM) or JSON Lines: posts, comments or media"),
    "library": ("mediacrawler.commands.library.main",
                "library rebuild: link every stored file under its readable path in LIBRARY_DIR again"),
    "web": ("mediacrawler.commands.web.main",
            "a web page to browse the collected posts and media, and to watch and start crawls"),
    "status": ("mediacrawler.status.main",
               "checkpoints per source and, with REDIS_URL, queues, workers and leases"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mediacrawler`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="mediacrawler",
        description="mediacrawler: tools around the crawls. Crawl with: scrapy crawl <platform> -a …",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        parser.print_usage(sys.stderr)
        print(f"mediacrawler: error: unknown command {name!r} (choose from {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    command: Callable[[list[str]], int] = load_object(COMMANDS[name][0])
    return command(rest)
