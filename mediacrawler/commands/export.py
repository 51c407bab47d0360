"""``mediacrawler export --format csv|jsonl [--kind posts|comments|media] [--platform P] [--job J] [--since D]
[--out FILE] [-s NAME=VALUE]``: the records of the JSON Lines outputs (OUTPUT_DIR/<spider>/*.jsonl) as flat CSV
or as JSON Lines, one row per post (its latest record) (docs/records.md, "CSV columns"; docs/operations.md,
"Exporting"). The records database (issue #25) will be read instead once it exists.
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

from mediacrawler.commands.options import add_settings_option, command_settings, missing_dir
from mediacrawler.config import setting, settings_problem
from mediacrawler.exporters import COLUMNS, csv_bytes, rows_of
from mediacrawler.fsutil import loads_bounded
from mediacrawler.library import library_from_settings, publish_time

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


def write_export(records: list[dict[str, Any]], out: IO[bytes], *, fmt: str, kind: str, library: Any) -> int:
    """Write *records* as *fmt* rows of *kind*; the number of rows."""
    # Posts first: a comment's library path is under its post's folder.
    ordered = sorted(records, key=lambda r: r.get("comment_id") is not None)
    rows = [row for record in ordered for row in rows_of(record, kind, library, lookup=True)]
    if fmt == "csv":
        out.write(csv_bytes(rows, COLUMNS[kind], header=True))
    elif kind == "media":
        out.write(b"".join(json.dumps(row, ensure_ascii=False).encode() + b"\n" for row in rows))
    else:
        wanted = [r for r in records if (r.get("comment_id") is not None) == (kind == "comments")]
        out.write(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in wanted))
        return len(wanted)
    return len(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 ok, 2 usage or no output directory."""
    parser = argparse.ArgumentParser(prog="mediacrawler export", description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="csv (the default) or jsonl")
    parser.add_argument("--kind", choices=tuple(COLUMNS), default="posts", help="rows: posts (default), "
                        "comments, or media (one per asset)")
    parser.add_argument("--platform", help="only this platform (weibo, bilibili, …)")
    parser.add_argument("--job", help="only the records of this job (e.g. weibo-uid-7365120894)")
    parser.add_argument("--since", help="only posts published at or after this date or time (UTC)")
    parser.add_argument("--out", "-o", help="file to write (default: standard output)")
    parser.add_argument("--output-dir", help="the crawl's JSON Lines root (default: OUTPUT_DIR)")
    add_settings_option(parser)
    try:
        opts = parser.parse_args(list(argv or []))
        settings = command_settings(opts.set)
        since = _since(opts.since) if opts.since else None
    except SystemExit as e:
        return int(e.code or 0)
    except UsageError as e:
        print(f"mediacrawler export: {e}", file=sys.stderr)
        return 2
    problem = settings_problem(settings)
    if problem:
        print(f"mediacrawler export: error: {problem}", file=sys.stderr)
        return 2
    output_dir = opts.output_dir or str(setting(settings, "OUTPUT_DIR"))
    missing = missing_dir(output_dir, setting="OUTPUT_DIR",
                          given=f"--output-dir {opts.output_dir}" if opts.output_dir else None)
    if missing:
        print(f"mediacrawler export: no records: {missing}", file=sys.stderr)
        return 2
    errors: list[str] = []
    records = select(latest(read_records(Path(output_dir), errors=errors)), platform=opts.platform, job=opts.job,
                     since=since)
    library = library_from_settings(settings) if setting(settings, "LIBRARY_ENABLED") else None
    if opts.out:
        with open(opts.out, "wb") as f:
            count = write_export(records, f, fmt=opts.format, kind=opts.kind, library=library)
    else:
        count = write_export(records, sys.stdout.buffer, fmt=opts.format, kind=opts.kind, library=library)
        sys.stdout.flush()
    for line in errors[:10]:
        print(f"mediacrawler export: skipped an unreadable line: {line}", file=sys.stderr)
    print(f"mediacrawler export: {count} {opts.kind} rows from {len(records)} records in {output_dir}"
          + (f" to {opts.out}" if opts.out else ""), file=sys.stderr)
    return 0
