"""``mediacrawler checkpoints [--dir DIR] [-s NAME=VALUE] [list | show KEY | reset KEY]`` (docs/operations.md,
"Checkpoints")."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from scrapy.exceptions import NotConfigured

from mediacrawler.checkpoints.model import Checkpoint, CheckpointCorrupt, check_key
from mediacrawler.checkpoints.store import CheckpointStore, FileCheckpointStore, store_from_settings
from mediacrawler.commands.options import add_settings_option, checked_settings, missing_dir


def _summary(cp: Checkpoint) -> str:
    if cp.kind == "items":
        failed = f" failed={','.join(sorted(cp.failed_items))}" if cp.failed_items else ""
        return f"{cp.key}\titems: {len(cp.done)} done{failed}\tupdated {cp.updated_at or '?'}"
    cursor = f" cursor={cp.next_cursor}" if cp.next_cursor else ""
    failed = f" failed={','.join(map(str, sorted(cp.failed_pages)))}" if cp.failed_pages else ""
    return (f"{cp.key}\tnext page {cp.next_page}{cursor}\t{len(cp.stored_ids())} stored past page "
            f"{cp.watermark}{failed}\tupdated {cp.updated_at or '?'}")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 ok, 1 not found/unreadable, 2 usage."""
    parser = argparse.ArgumentParser(prog="mediacrawler checkpoints",
                                     description="List, show or reset the resume checkpoints of crawl jobs.")
    parser.add_argument("--dir", help="checkpoint directory (default: the CHECKPOINT_DIR setting)")
    add_settings_option(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("list", help="one line per checkpoint (the default)")
    show = sub.add_parser("show", help="print one checkpoint as JSON")
    show.add_argument("key", help="job key, e.g. weibo-uid-7365120894")
    reset = sub.add_parser("reset", help="delete one checkpoint: the next run starts at page 1")
    reset.add_argument("key")
    parsed = checked_settings(parser, argv)
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    if opts.dir:
        store: CheckpointStore = FileCheckpointStore(opts.dir)
    else:
        try:
            store = store_from_settings(settings)
        except NotConfigured as e:
            print(f"mediacrawler checkpoints: {e}", file=sys.stderr)
            return 2
    if isinstance(store, FileCheckpointStore):
        missing = missing_dir(store.directory, setting="CHECKPOINT_DIR",
                              given=f"--dir {opts.dir}" if opts.dir else None)
        if missing:
            print(f"mediacrawler checkpoints: no checkpoints: {missing}", file=sys.stderr)
            return 0 if (opts.action or "list") == "list" else 1
    action = opts.action or "list"
    if action == "list":
        return _list(store)
    try:
        check_key(opts.key)
    except ValueError as e:
        print(f"mediacrawler checkpoints: {e}", file=sys.stderr)
        return 2
    if action == "show":
        try:
            cp = store.load(opts.key)
        except CheckpointCorrupt as e:
            print(f"{opts.key}: unreadable checkpoint {store.location(opts.key)}: {e}", file=sys.stderr)
            return 1
        if cp is None:
            print(f"{opts.key}: no checkpoint", file=sys.stderr)
            return 1
        json.dump(cp.to_dict(), sys.stdout, ensure_ascii=False, indent=2)
        print()
        return 0
    if store.delete(opts.key):
        print(f"{opts.key}: checkpoint deleted; the next run starts at page 1")
        return 0
    print(f"{opts.key}: no checkpoint", file=sys.stderr)
    return 1


def _list(store: CheckpointStore) -> int:
    status = 0
    any_key = False
    for key in store.keys():
        any_key = True
        try:
            cp = store.load(key)
        except CheckpointCorrupt as e:
            print(f"{key}\tUNREADABLE: {e}")
            status = 1
            continue
        if cp is not None:
            print(_summary(cp))
    if not any_key:
        print("no checkpoints", file=sys.stderr)
    return status
