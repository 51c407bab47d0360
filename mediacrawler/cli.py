"""The ``mediacrawler`` command: ``demo``, ``verify``, ``checkpoints``, ``retry``, ``status``.

Crawls themselves run with ``scrapy crawl <platform> -a …`` (from a directory with scrapy.cfg, or anywhere with
``SCRAPY_SETTINGS_MODULE=mediacrawler.settings``); this command holds what is not a crawl. Each subcommand parses its
own arguments and returns an exit status: 0 ok, 1 something is wrong, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _demo(argv: Sequence[str]) -> int:
    from mediacrawler.demo import main as demo_main

    return demo_main(argv)


def _verify(argv: Sequence[str]) -> int:
    from mediacrawler.commands.verify import main as verify_main

    return verify_main(argv)


def _checkpoints(argv: Sequence[str]) -> int:
    from mediacrawler.commands.checkpoints import main as checkpoints_main

    return checkpoints_main(argv)


def _status(argv: Sequence[str]) -> int:
    from mediacrawler.status import main as status_main

    return status_main(argv)


def _retry(argv: Sequence[str]) -> int:
    from mediacrawler.commands.retry import main as retry_main

    return retry_main(argv)


def _enqueue(argv: Sequence[str]) -> int:
    from mediacrawler.commands.enqueue import main as enqueue_main

    return enqueue_main(argv)


COMMANDS = {
    "demo": (_demo, "start the bundled sandbox and crawl it with every spider (no account needed)"),
    "verify": (_verify, "re-hash every stored media file; report corrupt, missing and orphan files"),
    "checkpoints": (_checkpoints, "list, show or reset the resume checkpoints of crawl jobs"),
    "enqueue": (_enqueue, "queue a crawl job in Redis for the workers (scrapy crawl <platform> -s REDIS_URL=…)"),
    "retry": (_retry, "retry the media assets that failed in earlier crawls [--platform P] [-s NAME=VALUE]"),
    "status": (_status, "checkpoints per source and, with REDIS_URL, queues, workers and leases"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mediacrawler`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("SCRAPY_SETTINGS_MODULE", "mediacrawler.settings")
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
    return COMMANDS[name][0](rest)
