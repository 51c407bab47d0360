"""``mediacrawler library rebuild [--prune] [-s NAME=VALUE]``: link every stored file of the records database
(RECORDS_DB) into LIBRARY_DIR again, posts before comments (docs/records.md, "Library"). Where there is no
database, the JSON Lines outputs (``--output-dir``, default OUTPUT_DIR) are read instead, said once. Exit 0 ok, 1 some files
could not be linked, 2 usage or nothing to read.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from mediacrawler.commands.export import load
from mediacrawler.commands.options import add_settings_option, checked_settings
from mediacrawler.library import check_library, library_from_settings
from mediacrawler.records.read import Selection


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mediacrawler library", description="The library of stored files.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    rebuild = sub.add_parser("rebuild", help="link every stored file of the records database into LIBRARY_DIR")
    rebuild.add_argument("--output-dir", help="the JSON Lines root read when there is no records database "
                         "(default: OUTPUT_DIR)")
    rebuild.add_argument("--prune", action="store_true",
                         help="then remove what is no link to a stored object (stray files, dangling links)")
    add_settings_option(rebuild)
    parsed = checked_settings(parser, argv)
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    if opts.action is None:
        parser.print_usage(sys.stderr)
        return 2
    loaded = load(parser.prog, settings, "media", Selection(), opts.output_dir)
    if isinstance(loaded, int):
        return loaded
    records, _ = loaded
    library = library_from_settings(settings)
    totals: dict[str, int] = {}
    failed = 0
    for record in records:  # posts first: a comment's pictures go under its post's folder
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
