"""``mediacrawler export --format csv|jsonl [--kind posts|comments|media] [--platform P] [--job J] [--since D]
[--out FILE] [-s NAME=VALUE]``: the records database (RECORDS_DB: one row per post with its latest counts) as flat
CSV or JSON Lines, in the columns of the CSV feed (exporters.COLUMNS; docs/records.md, "CSV columns";
docs/operations.md, "Exporting"). Where there is no database (RECORDS_ENABLED off, or its SQLite file not made yet)
the JSON Lines outputs (OUTPUT_DIR/<spider>/*.jsonl, the latest record of each post) are read instead, said once.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from mediacrawler.commands.options import add_settings_option, checked_settings, missing_dir
from mediacrawler.config import setting
from mediacrawler.exporters import COLUMNS, csv_bytes, rows_of
from mediacrawler.fsutil import loads_bounded
from mediacrawler.library import library_from_settings, publish_time
from mediacrawler.records.read import RecordsUnreadable, Selection, open_records, read_comments, read_posts

#: Nesting a record may have (a post, its original, their media): deeper lines are skipped as unreadable.
MAX_DEPTH = 64


def read_records(output_dir: Path, *, errors: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every record of OUTPUT_DIR/<spider>/*.jsonl, file by file in name order; an unreadable line is skipped
    (and named in *errors*)."""
    for path in sorted(output_dir.glob("*/*.jsonl")):
        with path.open("rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = loads_bounded(line, max_depth=MAX_DEPTH)
                except ValueError as exc:
                    if errors is not None:
                        errors.append(f"{path}:{n}: {exc}")
                    continue
                if isinstance(record, dict):
                    yield record


def latest(records: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per post or comment (platform and id): the one fetched last (the later line on a tie), in the
    order each was first seen."""
    kept: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        kind = "comment" if record.get("comment_id") is not None else "post"
        key = (str(record.get("platform")), kind, str(record.get("comment_id") or record.get("post_id")))
        old = kept.get(key)
        if old is None or str(record.get("fetched_at") or "") >= str(old.get("fetched_at") or ""):
            kept[key] = record
    return list(kept.values())


def _since(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r}: expected a date (2026-11-01) or a time (2026-11-01T08:00:00Z)"
                         ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def select(records: list[dict[str, Any]], *, platform: str | None, job: str | None,
           since: datetime | None) -> list[dict[str, Any]]:
    out = []
    for record in records:
        if platform and record.get("platform") != platform:
            continue
        if job and (record.get("source") or {}).get("job") != job:
            continue
        if since is not None:
            when = publish_time(record.get("created_at"))
            if when is None or when < since:
                continue
        out.append(record)
    return out


def load(prog: str, settings: BaseSettings, kind: str, selection: Selection,
         output_dir: str | None = None) -> tuple[list[dict[str, Any]], str] | int:
    """The records of *kind* (``media``: posts and comments) that *selection* picks, posts first (a comment's
    library path is under its post's folder), and where they came from; or exit status 2 after one line. From the
    records database, else from the JSON Lines under *output_dir* (default OUTPUT_DIR), said once on stderr."""
    try:
        store, where = open_records(settings)
    except RecordsUnreadable as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if store is not None:
        try:
            records = read_posts(store, selection) if kind != "comments" else []
            if kind != "posts":
                records += read_comments(store, selection)
        finally:
            store.close()
        return records, where
    directory = output_dir or str(setting(settings, "OUTPUT_DIR"))
    missing = missing_dir(directory, setting="OUTPUT_DIR",
                          given=f"--output-dir {output_dir}" if output_dir else None)
    if missing:
        print(f"{prog}: no records: {where}, and {missing}", file=sys.stderr)
        return 2
    print(f"{prog}: {where}: reading the JSON Lines under {directory} instead", file=sys.stderr)
    errors: list[str] = []
    found = select(latest(read_records(Path(directory), errors=errors)), platform=selection.platform,
                   job=selection.job, since=selection.since)
    for line in errors[:10]:
        print(f"{prog}: skipped an unreadable line: {line}", file=sys.stderr)
    wanted = {"posts": (False,), "comments": (True,), "media": (False, True)}[kind]
    records = [r for r in found if (r.get("comment_id") is not None) in wanted]
    return sorted(records, key=lambda r: r.get("comment_id") is not None), directory


def write_export(records: list[dict[str, Any]], out: IO[bytes], *, fmt: str, kind: str, library: Any) -> int:
    """Write the rows of *kind* of *records* as *fmt* (CSV with its BOM and header, or one JSON object per row
    with the same columns); the number of rows."""
    rows, seen = [], set()
    for record in records:
        for row in rows_of(record, kind, library, lookup=True):
            if kind == "media":
                # A repost's original is a post of its own in the database: its assets once.
                key = (row["platform"], row["post_id"], row["comment_id"], row["number"])
                if key in seen:
                    continue
                seen.add(key)
            rows.append(row)
    if fmt == "csv":
        out.write(csv_bytes(rows, COLUMNS[kind], header=True))
    else:
        out.write(b"".join(json.dumps(row, ensure_ascii=False).encode() + b"\n" for row in rows))
    return len(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 ok, 2 usage, a database that cannot be read, or nothing to read."""
    parser = argparse.ArgumentParser(prog="mediacrawler export", description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="csv (the default) or jsonl")
    parser.add_argument("--kind", choices=tuple(COLUMNS), default="posts", help="rows: posts (default), "
                        "comments, or media (one per asset)")
    parser.add_argument("--platform", help="only this platform (weibo, bilibili, …)")
    parser.add_argument("--job", help="only the records of this job (e.g. weibo-uid-7365120894)")
    parser.add_argument("--since", help="only posts published at or after this date or time (UTC)")
    parser.add_argument("--out", "-o", help="file to write (default: standard output)")
    parser.add_argument("--output-dir", help="the JSON Lines root read when there is no records database "
                        "(default: OUTPUT_DIR)")
    add_settings_option(parser)
    parsed = checked_settings(parser, argv)
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    try:
        since = _since(opts.since) if opts.since else None
    except UsageError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2
    loaded = load(parser.prog, settings, opts.kind, Selection(opts.platform, opts.job, since), opts.output_dir)
    if isinstance(loaded, int):
        return loaded
    records, where = loaded
    library = library_from_settings(settings) if setting(settings, "LIBRARY_ENABLED") else None
    if opts.out:
        with open(opts.out, "wb") as f:
            count = write_export(records, f, fmt=opts.format, kind=opts.kind, library=library)
    else:
        count = write_export(records, sys.stdout.buffer, fmt=opts.format, kind=opts.kind, library=library)
        sys.stdout.flush()
    print(f"{parser.prog}: {count} {opts.kind} rows from {len(records)} records in {where}"
          + (f" to {opts.out}" if opts.out else ""), file=sys.stderr)
    return 0
