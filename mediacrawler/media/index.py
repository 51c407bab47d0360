"""The media index: what was fetched from where. Objects (sha256 -> path, size, mime, dimensions), assets (asset
key -> sha256) and URLs (canonical URL -> sha256, key). Backends: SQLite here (embedded, one file per store) and
Redis (mediacrawler/distributed/media_index.py, shared by many workers). All calls block; docs/media.md, "The
media index".
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from scrapy.exceptions import NotConfigured
from w3lib.url import canonicalize_url

from mediacrawler.config import default, setting
from mediacrawler.contracts import backend_class
from mediacrawler.media.sniff import SNIFF_BYTES, sniff
from mediacrawler.media.store import ContentAddressedStore, StoreError, parse_object_relpath

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: SQLite file name, relative to FILES_STORE.
SQLITE_FILENAME = "index.sqlite3"
#: SQLite's primary result codes for a damaged file: SQLITE_CORRUPT, SQLITE_NOTADB.
_CORRUPT_CODES = frozenset({11, 26})
#: MEDIA_INDEX's short names (any other value is an import path): the index classes, each with ``from_settings``.
MEDIA_INDEX_BACKENDS: dict[str, str] = {
    "sqlite": "mediacrawler.media.index.SQLiteMediaIndex",
    "redis": "mediacrawler.distributed.media_index.RedisMediaIndex",
}


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """One stored object as the index knows it. ``path`` is relative to FILES_STORE; times are epoch seconds."""

    sha256: str
    path: str
    size: int
    mime: str | None = None
    width: int | None = None
    height: int | None = None
    first_seen: float | None = None
    last_seen: float | None = None


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """A URL an object was fetched from (as requested: signatures may depend on the exact query) and its key."""

    url: str
    key: str | None = None


@lru_cache(maxsize=8192)
def canonical_media_url(url: str) -> str:
    """The URL under which the index remembers a download: query sorted, fragment dropped (cached: each URL is
    canonicalised twice, lookup then record)."""
    return canonicalize_url(url, keep_fragments=False)


def object_record_of(root: Path, relpath: str) -> ObjectRecord:
    """The record of the object file at ``relpath`` under ``root``, from the disk (size from stat, mime sniffed;
    not re-hashed); StoreError for a name outside the grammar or a symlink (never the store's own writing)."""
    sha, _ = parse_object_relpath(relpath)
    if (root / relpath).is_symlink():
        raise StoreError(f"{relpath} is a symlink")
    with open(root / relpath, "rb") as f:
        return ObjectRecord(sha256=sha, path=relpath, size=os.fstat(f.fileno()).st_size,
                            mime=sniff(f.read(SNIFF_BYTES)).mime)


class MediaIndex(Protocol):
    """The contract of every index backend (docs/media.md, "The media index"); blocking and thread-safe."""

    @classmethod
    def from_settings(cls, settings: BaseSettings | Mapping[str, Any], *, store_root: str | Path) -> MediaIndex:
        """The index for these settings and the store at ``store_root``."""

    def lookup(self, *, key: str | None, url: str | None) -> ObjectRecord | None:
        """The object stored for asset ``key`` or, failing that, for canonical ``url``."""

    def record(self, *, obj: ObjectRecord, key: str | None, url: str | None, seen_at: float | None = None) -> None:
        """Remember that asset ``key`` fetched from ``url`` is ``obj`` (upsert; first_seen is kept)."""

    def record_many(self, records: Iterable[tuple[ObjectRecord, str | None, str | None]], *,
                    seen_at: float | None = None) -> None:
        """:meth:`record` for several ``(obj, key, url)``, **durable when it returns** (one transaction)."""

    def get(self, sha256: str) -> ObjectRecord | None: ...

    def iter_objects(self) -> Iterator[ObjectRecord]: ...

    def sources(self, sha256: str) -> list[SourceRecord]:
        """Where this object was fetched from, most recently seen first."""

    def close(self) -> None: ...


class SQLiteMediaIndex:
    """The embedded index, one SQLite database (WAL) per store: :meth:`record_many` commits synced, :meth:`record`
    queues rows committed unsynced (docs/media.md, "The media index"); corruption, rebuild: docs/operations.md."""

    _SCHEMA = """
    CREATE TABLE IF NOT EXISTS objects (
        sha256 TEXT PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL, mime TEXT,
        width INTEGER, height INTEGER, first_seen REAL, last_seen REAL);
    CREATE TABLE IF NOT EXISTS assets (
        key TEXT PRIMARY KEY, sha256 TEXT NOT NULL, url TEXT, first_seen REAL, last_seen REAL);
    CREATE TABLE IF NOT EXISTS urls (
        url TEXT PRIMARY KEY, sha256 TEXT NOT NULL, key TEXT, first_seen REAL, last_seen REAL, raw TEXT);
    CREATE INDEX IF NOT EXISTS urls_by_sha256 ON urls (sha256, last_seen);
    """
    # Conflict target and update of each table's upsert: a flush sends one multi-row INSERT per table and chunk
    # (one sqlite3_step, so one GIL hand-over, instead of one per row).
    _UPSERTS = {
        "objects": ("sha256", "path = excluded.path, size = excluded.size, mime = COALESCE(excluded.mime, mime), "
                    "width = COALESCE(excluded.width, width), height = COALESCE(excluded.height, height), "
                    "last_seen = MAX(last_seen, excluded.last_seen)"),
        "assets": ("key", "sha256 = excluded.sha256, url = excluded.url, last_seen = excluded.last_seen"),
        "urls": ("url", "sha256 = excluded.sha256, key = COALESCE(excluded.key, key), "
                 "last_seen = excluded.last_seen, raw = excluded.raw"),
    }
    _BY_KEY = "SELECT o.* FROM assets a JOIN objects o ON o.sha256 = a.sha256 WHERE a.key = ?"
    _BY_URL = "SELECT o.* FROM urls u JOIN objects o ON o.sha256 = u.sha256 WHERE u.url = ?"

    #: Queued :meth:`record` rows are committed at this many, or after this many seconds.
    batch_size, max_delay = 100, 1.0

    def __init__(self, path: str | Path, *, store_root: str | Path | None = None,
                 busy_timeout: float = default("MEDIA_INDEX_BUSY_TIMEOUT")) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        #: The store this index describes: a corrupt index is rebuilt from its ``objects/`` (None: raise instead).
        self.store_root = Path(store_root) if store_root is not None else None
        self.busy_timeout = busy_timeout
        #: Where the corrupt file went when this index was rebuilt on open or by :meth:`rebuild` (else None).
        self.moved_aside: Path | None = None
        #: Why it was rebuilt (SQLite's error, or the failed check), when it was.
        self.corruption: str | None = None
        # _state guards the queues (held for microseconds); _write the writing connection and every flush;
        # _read the lookup connection. Order when nested: _write, then _state.
        self._state = threading.Lock()
        self._write = threading.Lock()
        self._read = threading.Lock()
        self._rows: dict[str, list[tuple[Any, ...]]] = {table: [] for table in self._UPSERTS}  # queued, by table
        # Queued rows as lookups need them; an entry stays until its row is committed.
        self._by_key: dict[str, ObjectRecord] = {}
        self._by_url: dict[str, ObjectRecord] = {}
        self._last_flush = time.monotonic()
        # check_same_thread=False: the pipeline calls in from several threads; the locks serialise.
        try:
            self._open_connections(check=True)
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
            self._recover(str(exc))

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=self.busy_timeout, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            db.close()
            raise
        return db

    def _open_connections(self, *, check: bool) -> None:
        """Open both connections and the schema; with ``check``, a ``quick_check`` of every page first."""
        self._db = self._connect()
        try:
            if check:
                # Reads every page once (measured: 3 s for 300,000 objects, a 286 MiB index): a damaged page
                # found here is a rebuild at start-up, not a crash in the middle of a crawl.
                problem = self._db.execute("PRAGMA quick_check(1)").fetchone()
                if problem is None or problem[0] != "ok":
                    raise sqlite3.DatabaseError(f"quick_check: {problem[0] if problem else 'no answer'}")
            with self._write:
                self._db.executescript(self._SCHEMA)
            self._rdb = self._connect()
        except BaseException:
            self._db.close()
            raise

    def check(self) -> str | None:
        """What ``integrity_check`` finds wrong with the file, or None."""
        try:
            with self._write:
                self._flush_write_locked(durable=True)
                row = self._db.execute("PRAGMA integrity_check(1)").fetchone()
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
            return str(exc)
        return None if row is not None and row[0] == "ok" else str(row[0] if row else "no answer")

    def rebuild(self, reason: str) -> int:
        """Move the database aside, rebuild it from the store's objects; the number indexed (queued rows drop)."""
        with self._write:
            with self._state:
                self._rows = {table: [] for table in self._UPSERTS}
                self._by_key.clear()
                self._by_url.clear()
            with self._read:
                self._rdb.close()
            self._db.close()
        return self._recover(reason)

    def _recover(self, reason: str) -> int:
        """Move the damaged file (and its -wal/-shm) aside, open a fresh one, index every object of the store."""
        if self.store_root is None:
            raise IndexCorrupt(f"media index {self.path} is corrupt ({reason}), no store to rebuild it from")
        base = f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
        aside = self.path.with_name(base)
        for n in range(1, 1000):  # never over an earlier one: it may be the only copy of the asset rows
            if not any(Path(f"{aside}{suffix}").exists() for suffix in ("", "-wal", "-shm")):
                break
            aside = self.path.with_name(f"{base}.{n}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.path}{suffix}")
            if src.exists():
                os.replace(src, f"{aside}{suffix}")
        self.moved_aside = aside
        self.corruption = reason
        self._open_connections(check=False)
        count = self._index_store_objects()
        logger.warning(
            "Media index %s was corrupt (%s): moved aside to %s and rebuilt from the store with %d objects; "
            "which posts and URLs those objects came from is lost (crawling the posts again links them as "
            "'deduplicated', nothing is stored twice)", self.path, reason, aside.name, count)
        return count

    def _index_store_objects(self, chunk: int = 1000) -> int:
        """Index every well-named object file of the store (:func:`object_record_of`), ``chunk`` rows a write."""
        assert self.store_root is not None  # checked by _recover
        count = 0
        rows: list[tuple[ObjectRecord, str | None, str | None]] = []
        for relpath in ContentAddressedStore(self.store_root, fsync=False).iter_objects():
            try:
                rows.append((object_record_of(self.store_root, relpath), None, None))
            except (StoreError, OSError):
                continue  # verify reports it
            if len(rows) >= chunk:
                self.record_many(rows)
                count, rows = count + len(rows), []
        self.record_many(rows)
        return count + len(rows)

    @classmethod
    def from_settings(cls, settings: BaseSettings, *, store_root: str | Path) -> SQLiteMediaIndex:
        """The index at MEDIA_INDEX_PATH or ``<store_root>/index.sqlite3`` (a corrupt one is moved aside and
        rebuilt from the objects under ``store_root``, one WARNING)."""
        return cls(setting(settings, "MEDIA_INDEX_PATH") or Path(store_root) / SQLITE_FILENAME,
                   store_root=store_root, busy_timeout=setting(settings, "MEDIA_INDEX_BUSY_TIMEOUT"))

    def __repr__(self) -> str:
        return f"SQLiteMediaIndex({str(self.path)!r})"

    def lookup(self, *, key: str | None, url: str | None) -> ObjectRecord | None:
        # Queued rows first, then the database: a row leaves the queue only after its commit, so it is always
        # visible in one or the other.
        for name, queued, query in ((key, self._by_key, self._BY_KEY),
                                    (url and canonical_media_url(url), self._by_url, self._BY_URL)):
            if not name:
                continue
            with self._state:
                hit = queued.get(name)
            if hit is not None:
                return hit
            with self._read:
                row = self._rdb.execute(query, (name,)).fetchone()
            if row is not None:
                return ObjectRecord(*row)
        return None

    def record(self, *, obj: ObjectRecord, key: str | None, url: str | None, seen_at: float | None = None) -> None:
        now = time.time() if seen_at is None else seen_at
        with self._state:
            self._queue_locked(obj, key, url, now)
            due = (len(self._rows["objects"]) >= self.batch_size
                   or time.monotonic() - self._last_flush >= self.max_delay)
        # A flush already running on another thread (the batch committer) will not take these rows, but the
        # next one will; never wait for it here (this may be the reactor thread).
        if due and self._write.acquire(blocking=False):
            try:
                self._flush_write_locked(durable=False)
            finally:
                self._write.release()

    def record_many(self, records: Iterable[tuple[ObjectRecord, str | None, str | None]], *,
                    seen_at: float | None = None) -> None:
        now = time.time() if seen_at is None else seen_at
        with self._write:
            with self._state:
                for obj, key, url in records:
                    self._queue_locked(obj, key, url, now)
            self._flush_write_locked(durable=True)

    def _queue_locked(self, obj: ObjectRecord, key: str | None, url: str | None, now: float) -> None:
        canonical = canonical_media_url(url) if url else None
        queued = ObjectRecord(obj.sha256, obj.path, obj.size, obj.mime, obj.width, obj.height,
                              obj.first_seen if obj.first_seen is not None else now, now)
        self._rows["objects"].append((obj.sha256, obj.path, obj.size, obj.mime, obj.width, obj.height, now, now))
        if key:
            self._rows["assets"].append((key, obj.sha256, url, now, now))
            self._by_key[key] = queued
        if canonical:
            self._rows["urls"].append((canonical, obj.sha256, key, now, now, url))
            self._by_url[canonical] = queued

    def flush(self) -> None:
        """Write every queued record now (one transaction, synced)."""
        with self._write:
            self._flush_write_locked(durable=True)

    def _flush_write_locked(self, *, durable: bool) -> None:
        """Commit the queued rows (caller holds ``_write``); ``durable``: sync the WAL before returning."""
        with self._state:
            self._last_flush = time.monotonic()
            if not self._rows["objects"]:
                return
            rows, self._rows = self._rows, {table: [] for table in self._UPSERTS}
            pending = (dict(self._by_key), dict(self._by_url))
        db = self._db
        try:
            if durable:
                db.execute("PRAGMA synchronous=FULL")
            try:
                # Inside the try: a BEGIN that fails (locked past the busy timeout) must requeue the rows too.
                db.execute("BEGIN IMMEDIATE")
                for table, (target, update) in self._UPSERTS.items():
                    for start in range(0, len(rows[table]), 256):
                        part = rows[table][start:start + 256]
                        values = ", ".join(["(" + ", ".join("?" * len(part[0])) + ")"] * len(part))
                        db.execute(f"INSERT INTO {table} VALUES {values} ON CONFLICT ({target}) DO UPDATE SET "
                                   f"{update}", [v for row in part for v in row])
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                with self._state:  # back in the queue, ahead of anything queued meanwhile
                    for table, queued in rows.items():
                        self._rows[table][:0] = queued
                raise
        finally:
            if durable:
                db.execute("PRAGMA synchronous=NORMAL")
        with self._state:
            # Committed: drop the lookup entries of these rows, unless a newer record replaced them meanwhile.
            for found, before in zip((self._by_key, self._by_url), pending, strict=True):
                for name, rec in before.items():
                    if found.get(name) is rec:
                        del found[name]

    def _query(self, sql: str, *args: Any) -> list[Any]:
        """The rows of ``sql`` after a flush (they include every queued row)."""
        with self._write:
            self._flush_write_locked(durable=False)
            return self._db.execute(sql, args).fetchall()

    def get(self, sha256: str) -> ObjectRecord | None:
        rows = self._query("SELECT * FROM objects WHERE sha256 = ?", sha256)
        return ObjectRecord(*rows[0]) if rows else None

    def iter_objects(self) -> Iterator[ObjectRecord]:
        return (ObjectRecord(*row) for row in self._query("SELECT * FROM objects ORDER BY sha256"))

    def sources(self, sha256: str) -> list[SourceRecord]:
        query = "SELECT COALESCE(raw, url), key FROM urls WHERE sha256 = ? ORDER BY last_seen DESC"
        return [SourceRecord(url=url, key=key) for url, key in self._query(query, sha256)]

    def close(self) -> None:
        with self._write:
            try:
                self._flush_write_locked(durable=True)
            except sqlite3.Error as exc:
                # Already reported where it mattered (the committer fails the assets of a failed write);
                # the connections are released all the same.
                with self._state:
                    lost = len(self._rows["objects"])
                logger.error("Media index %s: %d queued rows not written at close (%s)", self.path, lost, exc)
            finally:
                with self._read:
                    self._rdb.close()
                self._db.close()


class IndexCorrupt(sqlite3.DatabaseError):
    """The SQLite index file is damaged and there is no store to rebuild it from."""


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` says the database file is damaged (not merely busy, locked or read-only)."""
    if isinstance(exc, IndexCorrupt):
        return True
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        # OperationalError: locked, busy, read-only, disk I/O, out of memory; nothing a rebuild cures.
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _CORRUPT_CODES
    # Raised by us (a quick_check that is not "ok") or by an SQLite without extended codes.
    text = str(exc)
    return text.startswith("quick_check:") or "malformed" in text or "not a database" in text


def index_class(settings: BaseSettings) -> type[MediaIndex]:
    """The backend MEDIA_INDEX names (a short name of :data:`MEDIA_INDEX_BACKENDS` or an import path); empty:
    ``redis`` when REDIS_URL is set, else ``sqlite``. NotConfigured when it names nothing usable."""
    name = str(setting(settings, "MEDIA_INDEX") or ("redis" if setting(settings, "REDIS_URL") else "sqlite"))
    if name.lower() == "redis" and not setting(settings, "REDIS_URL"):
        raise NotConfigured("MEDIA_INDEX=redis needs REDIS_URL")
    cls: type[MediaIndex] = backend_class("MEDIA_INDEX", name, MEDIA_INDEX_BACKENDS)
    return cls
