"""``mediacrawler status``: what the crawler knows about each source, without running a crawl.

Local part: every checkpoint of the checkpoint store (``CHECKPOINT_BACKEND``/``CHECKPOINT_DIR``, or ``--dir``): job
key, spider, watermark, what fetches the next page (page number and cursor), failed pages, posts stored past the
watermark, when it was written and how long ago. Fields the checkpoint document gains later are passed through in
``--json`` as they are. Then per source its high-water mark (newest post completely stored, when) and its media
assets pending retry (how many, of how many posts, by reason): from the stores ``MARKS_BACKEND`` and
``RETRY_MEDIA_BACKEND`` name (``--dir``: the files beside those checkpoints) and, with ``REDIS_URL``, from the
Redis stores too (:func:`document_status`).

Then the records database (``RECORDS_DB``, where there is one): its schema version and rows per table
(:func:`records_status`).

Distributed part (with ``REDIS_URL``): :func:`distributed_status` asks ``mediacrawler.distributed.status`` for
its figures (queue depth per spider, live workers, leases, jobs; the keys it reads are documented in
docs/operations.md).

Exit status: 0, or 1 when a checkpoint or the records database cannot be read; 2 on a usage error, an invalid
setting or a REDIS_URL that cannot be used (one line, its password masked). See docs/operations.md, "Metrics and
status".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured

from mediacrawler.checkpoints.model import CheckpointCorrupt
from mediacrawler.checkpoints.store import CheckpointStore, FileCheckpointStore, store_from_settings
from mediacrawler.commands.options import add_settings_option, checked_settings, missing_dir
from mediacrawler.config import setting
from mediacrawler.extensions.marks import (
    FileMarkStore,
    Mark,
    MarkCorrupt,
    MarkStore,
    RedisMarkStore,
    mark_store_from_settings,
)
from mediacrawler.extensions.retries import (
    FileRetryStore,
    RedisRetryStore,
    RetryCorrupt,
    RetrySet,
    RetryStore,
    retry_store_from_settings,
)
from mediacrawler.records.read import RecordsUnreadable, open_records
from mediacrawler.records.store import records_uri, shown

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

# Keys of Checkpoint.to_dict() shown under their own names; any other key is passed through as it is.
_SHOWN = {"schema", "key", "spider", "watermark", "next", "stored", "failed_pages", "last_page", "feeds", "seq",
          "updated_at"}


def _age_seconds(updated_at: str | None, now: datetime) -> int | None:
    if not updated_at:
        return None
    try:
        then = datetime.fromisoformat(updated_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return max(0, int((now - then).total_seconds()))


def checkpoint_status(store: CheckpointStore, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """One entry per checkpoint of *store*, by job key; an unreadable one is ``{"job", "location", "error"}``."""
    now = now or datetime.now(UTC)
    entries: list[dict[str, Any]] = []
    for key in store.keys():
        try:
            cp = store.load(key)
        except CheckpointCorrupt as e:
            entries.append({"job": key, "location": store.location(key), "error": str(e)})
            continue
        if cp is None:  # deleted since keys() was read: a crawl just completed its source
            continue
        doc = cp.to_dict()
        entry: dict[str, Any] = {
            "job": cp.key,
            "spider": cp.spider,
            "watermark": cp.watermark,
            "next_page": cp.next_page,
            "next_cursor": cp.next_cursor,
            "failed_pages": sorted(cp.failed_pages),
            "stored_past_watermark": len(cp.stored_ids()),
            "last_page": cp.last_page,
            "updated_at": cp.updated_at,
            "age_seconds": _age_seconds(cp.updated_at, now),
            "location": store.location(key),
        }
        entry.update({k: v for k, v in doc.items() if k not in _SHOWN})
        entries.append(entry)
    return entries


def _mark_entry(mark: Mark, now: datetime) -> dict[str, Any]:
    return {"job": mark.key, "spider": mark.spider, "post_id": mark.post_id, "created_at": mark.created_at,
            "seq": mark.seq, "updated_at": mark.updated_at, "age_seconds": _age_seconds(mark.updated_at, now)}


def _retry_entry(retry_set: RetrySet, now: datetime) -> dict[str, Any]:
    reasons: dict[str, int] = {}
    for asset in retry_set.assets.values():
        reason = str(asset.get("reason") or "unknown")
        reasons[reason] = reasons.get(reason, 0) + 1
    last = max((str(a.get("last_failed") or "") for a in retry_set.assets.values()), default="") or None
    return {"job": retry_set.key, "spider": retry_set.spider, "pending": len(retry_set.assets),
            "posts": len(retry_set.post_ids()), "reasons": dict(sorted(reasons.items())), "last_failed": last,
            "age_seconds": _age_seconds(last, now)}


def documents_of(store: MarkStore | RetryStore, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """One entry per mark or retry set of *store* (an empty retry set is left out); an unreadable one is
    ``{"job", "location", "error"}``, a damaged one a crawl moved aside ``{"job", "location", "moved_aside"}``."""
    now = now or datetime.now(UTC)
    entries: list[dict[str, Any]] = []
    try:
        keys = store.keys()
        aside = store.set_aside()
    except OSError as e:
        return [{"job": "*", "location": type(store).__name__, "error": str(e)}]
    entries += [{"job": key, "location": where, "moved_aside": True} for key, where in aside]
    for key in keys:
        try:
            doc = store.load(key)
        except (MarkCorrupt, RetryCorrupt, OSError) as e:
            entries.append({"job": key, "location": store.location(key), "error": str(e)})
            continue
        if isinstance(doc, Mark):
            entries.append({**_mark_entry(doc, now), "location": store.location(key)})
        elif isinstance(doc, RetrySet) and doc.assets:
            entries.append({**_retry_entry(doc, now), "location": store.location(key)})
    return entries


def document_status(settings: BaseSettings, directory: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """``{"marks": […], "retries": […]}`` per source: from the configured stores (or the files under
    *directory*, a checkpoint directory) and, with ``REDIS_URL``, the Redis stores when they are not those."""
    marks: list[MarkStore] = []
    retries: list[RetryStore] = []
    if directory:
        marks.append(FileMarkStore(f"{directory}/{FileMarkStore.subdir}"))
        retries.append(FileRetryStore(f"{directory}/{FileRetryStore.subdir}"))
    else:
        marks.append(mark_store_from_settings(settings))
        retries.append(retry_store_from_settings(settings))
    if setting(settings, "REDIS_URL"):
        if not isinstance(marks[0], RedisMarkStore):
            marks.append(RedisMarkStore.from_settings(settings))
        if not isinstance(retries[0], RedisRetryStore):
            retries.append(RedisRetryStore.from_settings(settings))
    return {"marks": [e for store in marks for e in documents_of(store)],
            "retries": [e for store in retries for e in documents_of(store)]}


def distributed_status(settings: BaseSettings) -> dict[str, Any] | None:
    """The Redis-held figures (queue depth per spider, workers, leases, jobs); ``None`` without ``REDIS_URL``.

    The seam to ``mediacrawler.distributed``: its ``status.distributed_status(settings)`` returns a JSON-ready
    dict. Until it exists this returns ``{"available": False, "reason": …}``.
    """
    if not setting(settings, "REDIS_URL"):
        return None
    try:
        from mediacrawler.distributed.status import distributed_status as read  # type: ignore[import-not-found]
    except ImportError as e:
        return {"available": False, "reason": f"mediacrawler.distributed.status is not available ({e})"}
    result: dict[str, Any] = {"available": True, **read(settings)}
    return result


def records_status(settings: BaseSettings) -> dict[str, Any] | None:
    """The records database (RECORDS_DB): where, its schema version, rows per table and the last sighting of a
    post; None where there is none (RECORDS_ENABLED off, its SQLite file not made yet); ``error`` when it cannot
    be read."""
    try:
        store, where = open_records(settings)
    except RecordsUnreadable as exc:
        return {"database": shown(records_uri(settings)), "error": str(exc)}
    if store is None:
        return None
    try:
        counts = {table: store.select(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]
                  for table in ("posts", "comments", "authors", "media", "metrics_history")}
        stored = store.select("SELECT COUNT(*) AS n FROM media WHERE sha256 IS NOT NULL")[0]["n"]
        last = store.select("SELECT MAX(last_seen_at) AS t FROM posts")[0]["t"]
        return {"database": where, "schema_version": store.version(), **counts, "media_stored": stored,
                "last_seen_at": last}
    finally:
        store.close()


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _moved_aside(entries: list[dict[str, Any]]) -> list[str]:
    return [f"  {e['job']}  DAMAGED, moved aside: {e['location']} (inspect it, then delete it)" for e in entries
            if e.get("moved_aside")]


def format_documents(documents: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The marks and pending retries, one indented table each."""
    marks, retries = documents["marks"], documents["retries"]
    lines = [f"high-water marks: {sum(1 for e in marks if not e.get('moved_aside'))}"]
    rows = [("JOB", "SPIDER", "POST", "CREATED", "UPDATED", "AGE", "WHERE")]
    rows += [(e["job"], e["spider"], e["post_id"], e["created_at"] or "?", e["updated_at"] or "?",
              _age(e["age_seconds"]), e["location"]) for e in marks if "error" not in e and "moved_aside" not in e]
    if len(rows) > 1:
        lines += _table(rows)
    lines += [f"  {e['job']}  UNREADABLE: {e['error']} ({e['location']})" for e in marks if "error" in e]
    lines += _moved_aside(marks)
    lines.append(f"media pending retry: {sum(e.get('pending', 0) for e in retries)} assets")
    rows = [("JOB", "SPIDER", "ASSETS", "POSTS", "REASONS", "LAST FAILED", "WHERE")]
    rows += [(e["job"], e["spider"], str(e["pending"]), str(e["posts"]),
              ",".join(f"{r}:{n}" for r, n in e["reasons"].items()), e["last_failed"] or "?", e["location"])
             for e in retries if "error" not in e and "moved_aside" not in e]
    if len(rows) > 1:
        lines += _table(rows)
    lines += [f"  {e['job']}  UNREADABLE: {e['error']} ({e['location']})" for e in retries if "error" in e]
    lines += _moved_aside(retries)
    return lines


def format_text(where: str, entries: list[dict[str, Any]], distributed: dict[str, Any] | None,
                documents: dict[str, list[dict[str, Any]]] | None = None, *,
                records: dict[str, Any] | None = None) -> str:
    lines = [f"checkpoints in {where}: {len(entries)}"]
    rows = [("JOB", "SPIDER", "WATERMARK", "NEXT", "FAILED", "UPDATED", "AGE")]
    unreadable = [f"{e['job']}  UNREADABLE: {e['error']} ({e['location']})" for e in entries if "error" in e]
    for e in entries:
        if "error" in e:
            continue
        nxt = f"page {e['next_page']}" + (f" cursor {e['next_cursor']}" if e["next_cursor"] else "")
        rows.append((e["job"], e["spider"], str(e["watermark"]), nxt,
                     ",".join(map(str, e["failed_pages"])) or "-", e["updated_at"] or "?", _age(e["age_seconds"])))
    if entries:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += unreadable
    if documents is not None:
        lines += format_documents(documents)
    if records is not None and "error" in records:
        lines.append(f"records database {records['database']}: UNREADABLE: {records['error']}")
    elif records is not None:
        lines.append(f"records database {records['database']} (schema {records['schema_version']}): "
                     f"{records['posts']} posts, {records['comments']} comments, {records['authors']} authors, "
                     f"{records['media']} media ({records['media_stored']} stored), {records['metrics_history']} "
                     f"history rows; last post seen {records['last_seen_at'] or '-'}")
    if distributed is None:
        lines.append("distributed state: REDIS_URL is not set (everything is local)")
    elif not distributed.get("available"):
        lines.append("distributed state: not available")
    else:
        lines.append("distributed state:")
        lines += [f"  {k}: {json.dumps(v, ensure_ascii=False, default=str)}" for k, v in distributed.items()
                  if k != "available"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``mediacrawler status [--dir DIR] [-s NAME=VALUE …] [--json]``."""
    parser = argparse.ArgumentParser(prog="mediacrawler status",
                                     description="Checkpoints per source and, with REDIS_URL, the shared state.")
    parser.add_argument("--dir", help="checkpoint directory (default: the CHECKPOINT_DIR/CHECKPOINT_BACKEND "
                                      "settings)")
    add_settings_option(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")
    # A bad setting or a REDIS_URL that cannot be used is one line, not a traceback halfway through the report.
    parsed = checked_settings(parser, argv, redis=True)
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    store: CheckpointStore
    if opts.dir:
        store = FileCheckpointStore(opts.dir)
    else:
        try:
            store = store_from_settings(settings)
        except NotConfigured as e:
            print(f"mediacrawler status: {e}", file=sys.stderr)
            return 2
    if isinstance(store, FileCheckpointStore):
        # Nothing to report is an answer; nothing there at all is a wrong place, and says where it looked.
        missing = missing_dir(store.directory, setting="CHECKPOINT_DIR",
                              given=f"--dir {opts.dir}" if opts.dir else None)
        if missing:
            print(f"mediacrawler status: no checkpoint directory: {missing}", file=sys.stderr)
    where = str(store.directory) if isinstance(store, FileCheckpointStore) else type(store).__name__
    entries = checkpoint_status(store)
    try:
        documents = document_status(settings, opts.dir)
    except NotConfigured as e:
        print(f"mediacrawler status: {e}", file=sys.stderr)
        return 2
    distributed = distributed_status(settings)
    records = records_status(settings)
    if opts.json:
        json.dump({"checkpoint_store": where, "checkpoints": entries, **documents, "records": records,
                   "distributed": distributed}, sys.stdout, ensure_ascii=False, indent=2, default=str)
        print()
    else:
        print(format_text(where, entries, distributed, documents, records=records))
    unreadable = [e for e in (*entries, *documents["marks"], *documents["retries"], *filter(None, [records]))
                  if "error" in e]
    return 1 if unreadable else 0
