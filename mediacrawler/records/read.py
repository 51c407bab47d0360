"""The records database read back as records: each post and comment as the plain dict its JSON Lines record is
(``platform``, ``post_id``, ``author: {id, name}``, ``metrics``, ``media: [...]``, ``source: {spider, job}``…),
with the latest counts and media results, for ``mediacrawler export`` and ``mediacrawler library rebuild``
(docs/records.md, "Records database"). One shape in, one shape out: the CSV columns and the library paths are made
from these dicts by the same code as from a crawl's items (exporters.py, library.py).

What the database does not keep is not in them: an asset's ``alternates``, ``renditions``, ``chapters`` and
``rendition``, a post's ``source.page``. Selections are SQL (``platform``, ``job``, ``created_at`` at or after a
time); rows come in primary-key order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mediacrawler.config import setting
from mediacrawler.parsers._common import utc_now_iso
from mediacrawler.records.store import RecordStore, is_postgres, open_store, records_uri, shown
from mediacrawler.scrub import scrub

#: Keys per ``IN (…)`` list (SQLite's default limit of host parameters is 999 on old builds).
CHUNK = 400
#: The columns of a ``media`` row that an asset of a record carries.
ASSET_COLUMNS = ("kind", "key", "url", "width", "height", "duration", "live_of", "cover_of", "derived", "sha256",
                 "path", "size", "mime", "status", "error")


class RecordsUnreadable(Exception):
    """The records database cannot be opened (unreachable, refused, damaged, of a newer schema): one line, its
    password masked."""


def open_records(settings: Any) -> tuple[RecordStore | None, str]:
    """The records database of *settings* and where it is (its password masked), or None where there is none to
    read (RECORDS_ENABLED off, a SQLite file not made yet) with the line that says so. Raises
    :class:`RecordsUnreadable`."""
    if not setting(settings, "RECORDS_ENABLED"):
        return None, "RECORDS_ENABLED is off"
    uri = records_uri(settings)
    path = Path(uri.removeprefix("sqlite://"))
    if not is_postgres(uri) and not path.is_file():
        return None, f"no records database at {path.resolve()} (RECORDS_DB)"
    try:
        store = open_store(uri, now=utc_now_iso(), connect_timeout=setting(settings, "RECORDS_CONNECT_TIMEOUT"))
    except Exception as exc:  # the drivers' errors (sqlite3.Error, psycopg.Error), a newer schema, OSError
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise RecordsUnreadable(f"RECORDS_DB={shown(uri)} cannot be read: {scrub(reason)}") from exc
    return store, shown(uri)


@dataclass(frozen=True)
class Selection:
    """Which records: all of them by default; each field given narrows it (``since``: published at or after)."""

    platform: str | None = None
    job: str | None = None
    since: datetime | None = None

    def where(self, table: str) -> tuple[str, list[Any]]:
        clauses, params = [], []
        if self.platform:
            clauses.append(f"{table}.platform = ?")
            params.append(self.platform)
        if self.job:
            clauses.append(f"{table}.job = ?")
            params.append(self.job)
        if self.since is not None:
            # created_at is ISO 8601 UTC text as normalize writes it (…Z): it sorts as time.
            clauses.append(f"{table}.created_at >= ?")
            params.append(self.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _chunks(keys: Sequence[tuple[str, str]]) -> Iterator[tuple[str, list[str]]]:
    """``(platform, ids)`` in lists of at most :data:`CHUNK`."""
    by_platform: dict[str, list[str]] = {}
    for platform, ident in keys:
        by_platform.setdefault(platform, []).append(ident)
    for platform, ids in sorted(by_platform.items()):
        for start in range(0, len(ids), CHUNK):
            yield platform, ids[start:start + CHUNK]


def _assets(store: RecordStore, links: str, owner: str, keys: Sequence[tuple[str, str]]
            ) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The assets of each owner (``post_media``/``post_id`` or ``comment_media``/``comment_id``), in order."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    columns = ", ".join(f"m.{c}" for c in ASSET_COLUMNS)
    for platform, ids in _chunks(keys):
        marks = ", ".join("?" for _ in ids)
        rows = store.select(
            f"SELECT l.{owner} AS owner, {columns} FROM {links} l JOIN media m "
            f"ON m.platform = l.platform AND m.kind = l.kind AND m.key = l.key "
            f"WHERE l.platform = ? AND l.{owner} IN ({marks}) ORDER BY l.{owner}, l.position", [platform, *ids])
        for row in rows:
            asset = {c: row[c] for c in ASSET_COLUMNS}
            asset["derived"] = json.loads(asset["derived"]) if asset["derived"] else None
            found.setdefault((platform, str(row["owner"])), []).append(asset)
    return found


def _author(row: dict[str, Any]) -> dict[str, Any] | None:
    return {"id": row["author_id"], "name": row["author_name"]} if row["author_id"] else None


def _posts(store: RecordStore, where: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    return store.select(
        "SELECT p.*, a.name AS author_name FROM posts p LEFT JOIN authors a "
        f"ON a.platform = p.platform AND a.author_id = p.author_id{where} ORDER BY p.platform, p.post_id", params)


def _post_record(row: dict[str, Any], media: list[dict[str, Any]]) -> dict[str, Any]:
    return {"platform": row["platform"], "post_id": row["post_id"], "url": row["url"], "author": _author(row),
            "created_at": row["created_at"], "text": row["text"], "text_html": row["text_html"],
            "metrics": {c: row[c] for c in ("likes", "comments", "shares", "views")}, "reposted": None,
            "media": media, "source": {"spider": row["spider"], "job": row["job"]} if row["job"] else None,
            "fetched_at": row["fetched_at"], "deleted": bool(row["deleted"]), "extra": json.loads(row["extra"])}


def read_posts(store: RecordStore, selection: Selection = Selection()) -> list[dict[str, Any]]:
    """The selected posts as records, each repost with its original nested (``reposted``, one level: the
    original is also a post of its own, selected or not by its own row)."""
    where, params = selection.where("p")
    rows = _posts(store, where, params)
    keys = [(r["platform"], r["post_id"]) for r in rows]
    wanted = sorted({(r["platform"], r["reposted_id"]) for r in rows if r["reposted_id"]} - set(keys))
    originals = {}
    for platform, ids in _chunks(wanted):
        marks = ", ".join("?" for _ in ids)
        for row in _posts(store, f" WHERE p.platform = ? AND p.post_id IN ({marks})", [platform, *ids]):
            originals[(row["platform"], row["post_id"])] = row
    media = _assets(store, "post_media", "post_id", [*keys, *originals])
    records = {key: _post_record(row, media.get(key, [])) for key, row in zip(keys, rows, strict=True)}
    for key, row in originals.items():
        records.setdefault(key, _post_record(row, media.get(key, [])))
    out = []
    for key, row in zip(keys, rows, strict=True):
        record = dict(records[key])
        original = records.get((row["platform"], row["reposted_id"])) if row["reposted_id"] else None
        if row["reposted_id"]:
            record["reposted"] = original or {"platform": row["platform"], "post_id": row["reposted_id"]}
        out.append(record)
    return out


def read_comments(store: RecordStore, selection: Selection = Selection()) -> list[dict[str, Any]]:
    """The selected comments (``since``: by the comment's own time) as records, with their pictures."""
    where, params = selection.where("c")
    rows = store.select(
        "SELECT c.*, a.name AS author_name FROM comments c LEFT JOIN authors a "
        f"ON a.platform = c.platform AND a.author_id = c.author_id{where} ORDER BY c.platform, c.comment_id",
        params)
    media = _assets(store, "comment_media", "comment_id", [(r["platform"], r["comment_id"]) for r in rows])
    return [{"platform": r["platform"], "comment_id": r["comment_id"], "post_id": r["post_id"],
             "parent_id": r["parent_id"], "root_id": r["root_id"], "author": _author(r), "text": r["text"],
             "created_at": r["created_at"], "metrics": {"likes": r["likes"], "replies": r["replies"]},
             "media": media.get((r["platform"], r["comment_id"]), []), "pinned": bool(r["pinned"]),
             "deleted": bool(r["deleted"]),
             "source": {"spider": r["spider"], "job": r["job"]} if r["job"] else None,
             "fetched_at": r["fetched_at"], "extra": json.loads(r["extra"])} for r in rows]


def stored_objects(store: RecordStore) -> Iterator[tuple[str, str]]:
    """``(asset, object path)`` of every object the ``media`` rows say is stored (an asset's own and its derived
    ones, e.g. a subtitle's SRT), for ``mediacrawler verify``; the asset as ``platform kind key``."""
    rows = store.select("SELECT platform, kind, key, path, derived FROM media "
                        "WHERE sha256 IS NOT NULL AND path IS NOT NULL ORDER BY platform, kind, key")
    for row in rows:
        asset = f"{row['platform']} {row['kind']} {row['key']}"
        yield asset, row["path"]
        for other in (json.loads(row["derived"]) if row["derived"] else {}).values():
            if isinstance(other, dict) and other.get("path"):
                yield asset, str(other["path"])
