"""``mediacrawler library rebuild [--output-dir DIR] [--prune] [-s NAME=VALUE]``: link every stored file of the
records in OUTPUT_DIR/<spider>/*.jsonl into LIBRARY_DIR again (docs/records.md, "Library"). The records database
(issue #25) will be read instead once it exists. Exit 0 ok, 1 some files could not be linked, 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from scrapy.exceptions import UsageError

from mediacrawler.commands.export import latest, read_records
from mediacrawler.commands.options import add_settings_option, command_settings, missing_dir
from mediacrawler.config import setting, settings_problem
from mediacrawler.library import check_library, library_from_settings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mediacrawler library", description="The library of stored files.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    rebuild = sub.add_parser("rebuild", help="link every stored file of the JSON Lines records into LIBRARY_DIR")
    rebuild.add_argument("--output-dir", help="the crawl's JSON Lines root (default: OUTPUT_DIR)")
    rebuild.add_argument("--prune", action="store_true",
                         help="then remove what is no link to a stored object (stray files, dangling links)")
    add_settings_option(rebuild)
    try:
        opts = parser.parse_args(list(argv or []))
        if opts.action is None:
            parser.print_usage(sys.stderr)
            return 2
        settings = command_settings(opts.set)
    except SystemExit as e:
        return int(e.code or 0)
    except UsageError as e:
        print(f"mediacrawler library: {e}", file=sys.stderr)
        return 2
    problem = settings_problem(settings)
    if problem:
        print(f"mediacrawler library: error: {problem}", file=sys.stderr)
        return 2
    output_dir = opts.output_dir or str(setting(settings, "OUTPUT_DIR"))
    missing = missing_dir(output_dir, setting="OUTPUT_DIR",
                          given=f"--output-dir {opts.output_dir}" if opts.output_dir else None)
    if missing:
        print(f"mediacrawler library: no records: {missing}", file=sys.stderr)
        return 2
    library = library_from_settings(settings)
    totals: dict[str, int] = {}
    failed = 0
    records = latest(read_records(Path(output_dir)))
    # Posts first: a comment's pictures go under its post's folder.
    for record in sorted(records, key=lambda r: r.get("comment_id") is not None):
        try:
            counts = library.place(record)
        except (OSError, ValueError) as exc:
            failed += 1
            which = f"{record.get('platform')} {record.get('comment_id') or record.get('post_id')}"
            print(f"mediacrawler library: {which}: {exc}", file=sys.stderr)
            continue
        for outcome, n in counts.items():
            totals[outcome] = totals.get(outcome, 0) + n
    pruned = 0
    if opts.prune and library.root.is_dir():
        found = check_library(library.root, store_root=library.store_root)
        for rel in [*(found.stray or []), *(found.missing or [])]:
            os.unlink(library.root / rel)
            pruned += 1
    said = ", ".join(f"{n} {outcome}" for outcome, n in totals.items() if n) or "nothing to link"
    removed = f"; {pruned} removed" if opts.prune else ""
    print(f"library {library.root}: {len(records)} records: {said}{removed}")
    return 1 if failed or totals.get("missing") else 0
