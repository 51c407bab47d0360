"""The records database behind one upsert path: SQLite (a file, the default) or PostgreSQL (``postgresql://…``, for
many workers on several machines); docs/records.md, "Records database".

Calls block (disk, network): callers run them in a worker thread, one writer per process
(pipelines/records.py). A store is used by one thread at a time.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mediacrawler.config import setting
from mediacrawler.records.rows import MEDIA_RESULTS, POST_COUNTS, Rows
from mediacrawler.records.schema import MIGRATIONS, SCHEMA_VERSION, VERSION_TABLE, SchemaTooNew
from mediacrawler.scrub import mask_url

T = TypeVar("T")

#: The file name of the default SQLite database, in CHECKPOINT_DIR.
DEFAULT_FILE = "records.sqlite3"
#: URI schemes of PostgreSQL (libpq's two spellings).
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
#: Times a batch that PostgreSQL aborted for a deadlock or a serialization failure is tried again.
PG_RETRIES = 3
#: Key of the advisory lock that serializes migrations of one PostgreSQL database.
PG_MIGRATION_LOCK = 7_365_120_894


def resolve_uri(value: str | None, checkpoint_dir: str) -> str:
    """``RECORDS_DB`` as a store URI: empty → ``<checkpoint_dir>/records.sqlite3``; ``sqlite:///path`` or a path
    → that SQLite file; ``postgresql://…`` as it is."""
    text = (value or "").strip()
    if not text:
        return str(Path(checkpoint_dir or "checkpoints") / DEFAULT_FILE)
    return text


def records_uri(settings: Any) -> str:
    """The store URI that ``RECORDS_DB`` and ``CHECKPOINT_DIR`` of *settings* name."""
    return resolve_uri(setting(settings, "RECORDS_DB"), str(setting(settings, "CHECKPOINT_DIR")))


def is_postgres(uri: str) -> bool:
    return uri.startswith(POSTGRES_SCHEMES)


def shown(uri: str) -> str:
    """The URI as logs may show it (password masked)."""
    return mask_url(uri) if is_postgres(uri) else uri


@dataclass
class Written:
    """What one batch wrote: rows upserted per table, and history rows added or updated."""

    posts: int = 0
    media: int = 0
    comments: int = 0
    history: int = 0


def _upsert(table: str, columns: Sequence[str], key: Sequence[str], updates: dict[str, str],
            returning: str = "") -> str:
    """``INSERT … ON CONFLICT (key) DO UPDATE SET …`` (SQLite >= 3.35 and PostgreSQL read it alike)."""
    values = ", ".join("?" for _ in columns)
    sets = ", ".join(f"{column} = {expr}" for column, expr in updates.items())
    action = f"DO UPDATE SET {sets}" if sets else "DO NOTHING"
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}) "
            f"ON CONFLICT ({', '.join(key)}) {action}" + (f" RETURNING {returning}" if returning else ""))


def _keep_known(table: str, *columns: str) -> dict[str, str]:
    """A value the new sighting does not know (NULL) keeps the one stored."""
    return {c: f"COALESCE(excluded.{c}, {table}.{c})" for c in columns}


# A count changed when the new sighting knows it and it differs from the stored one.
_CHANGED = " OR ".join(f"(excluded.{c} IS NOT NULL AND (posts.{c} IS NULL OR excluded.{c} <> posts.{c}))"
                       for c in POST_COUNTS)

AUTHOR_COLUMNS = ("platform", "author_id", "name", "first_seen_at", "last_seen_at")
AUTHOR_SQL = _upsert("authors", AUTHOR_COLUMNS, ("platform", "author_id"),
                     {**_keep_known("authors", "name"), "last_seen_at": "excluded.last_seen_at"})

POST_COLUMNS = ("platform", "post_id", "url", "author_id", "created_at", "text", "text_html", *POST_COUNTS,
                "reposted_id", "deleted", "spider", "job", "fetched_at", "extra",
                "first_seen_at", "last_seen_at", "metrics_changed_at", "metrics_run")
POST_SQL = _upsert(
    "posts", POST_COLUMNS, ("platform", "post_id"),
    {
        **{c: f"excluded.{c}" for c in ("url", "text", "text_html", "deleted", "extra")},
        **_keep_known("posts", "author_id", "created_at", "reposted_id", "spider", "job", "fetched_at",
                      *POST_COUNTS),
        "last_seen_at": "excluded.last_seen_at",
        "metrics_changed_at": f"CASE WHEN {_CHANGED} THEN excluded.last_seen_at ELSE posts.metrics_changed_at END",
        "metrics_run": f"CASE WHEN {_CHANGED} THEN excluded.metrics_run ELSE posts.metrics_run END",
    },
    returning="metrics_run, " + ", ".join(POST_COUNTS),
)

# New results replace the stored ones, except that a failure never replaces a stored object.
_TAKE_RESULTS = "excluded.status IS NOT NULL AND (excluded.sha256 IS NOT NULL OR media.sha256 IS NULL)"
MEDIA_COLUMNS = ("platform", "kind", "key", "url", "width", "height", "duration", "live_of", "cover_of", "derived",
                 *MEDIA_RESULTS, "first_seen_at", "last_seen_at")
MEDIA_SQL = _upsert(
    "media", MEDIA_COLUMNS, ("platform", "kind", "key"),
    {
        "url": "excluded.url",
        **_keep_known("media", "width", "height", "duration", "live_of", "cover_of", "derived"),
        **{c: f"CASE WHEN {_TAKE_RESULTS} THEN excluded.{c} ELSE media.{c} END" for c in MEDIA_RESULTS},
        "last_seen_at": "excluded.last_seen_at",
    },
)

LINK_COLUMNS = ("platform", "post_id", "position", "kind", "key")
LINK_DELETE = "DELETE FROM post_media WHERE platform = ? AND post_id = ?"
LINK_SQL = _upsert("post_media", LINK_COLUMNS, ("platform", "post_id", "position"),
                   {"kind": "excluded.kind", "key": "excluded.key"})

COMMENT_COLUMNS = ("platform", "comment_id", "post_id", "parent_id", "root_id", "author_id", "text", "created_at",
                   "likes", "replies", "pinned", "deleted", "spider", "job", "fetched_at", "extra",
                   "first_seen_at", "last_seen_at")
COMMENT_SQL = _upsert(
    "comments", COMMENT_COLUMNS, ("platform", "comment_id"),
    {
        **{c: f"excluded.{c}" for c in ("post_id", "text", "pinned", "deleted", "extra")},
        **_keep_known("comments", "parent_id", "root_id", "author_id", "created_at", "likes", "replies",
                      "spider", "job", "fetched_at"),
        "last_seen_at": "excluded.last_seen_at",
    },
)

COMMENT_LINK_COLUMNS = ("platform", "comment_id", "position", "kind", "key")
COMMENT_LINK_DELETE = "DELETE FROM comment_media WHERE platform = ? AND comment_id = ?"
COMMENT_LINK_SQL = _upsert("comment_media", COMMENT_LINK_COLUMNS, ("platform", "comment_id", "position"),
                           {"kind": "excluded.kind", "key": "excluded.key"})

HISTORY_COLUMNS = ("platform", "post_id", "run_id", "seen_at", *POST_COUNTS)
HISTORY_SQL = _upsert("metrics_history", HISTORY_COLUMNS, ("platform", "post_id", "run_id"),
                      {c: f"excluded.{c}" for c in ("seen_at", *POST_COUNTS)})

#: The figures of a run (``runs``), from the crawl's stats by ``extensions.metrics.crawl_figures``.
RUN_COUNTS = ("pages", "pages_failed", "posts", "posts_dropped", "comments", "media", "media_failed", "bytes",
              "errors")
RUN_COLUMNS = ("run_id", "spider", "job", "host", "worker", "pid", "started_at", "updated_at", "finished_at",
               "finish_reason", "update_interval", *RUN_COUNTS)
# A run's row is written whole each time (opened, every interval, finished): the latest write wins, except that a
# finished run stays finished.
RUN_SQL = _upsert("runs", RUN_COLUMNS, ("run_id",), {
    c: f"CASE WHEN runs.finished_at IS NULL THEN excluded.{c} ELSE runs.{c} END"
    for c in RUN_COLUMNS if c not in ("run_id", "started_at")})

#: Primary keys, for reading a table in a fixed order.
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "authors": ("platform", "author_id"), "posts": ("platform", "post_id"), "media": ("platform", "kind", "key"),
    "post_media": ("platform", "post_id", "position"), "metrics_history": ("platform", "post_id", "run_id"),
    "comments": ("platform", "comment_id"), "comment_media": ("platform", "comment_id", "position"),
    "runs": ("run_id",), "schema_version": ("version",),
}


class RecordStore:
    """One records database. :func:`open_store` picks the backend from the URI and brings the schema up to
    :data:`SCHEMA_VERSION` (refusing a newer one)."""

    uri: str

    # --- What each backend provides ---------------------------------------------------------------------------
    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def _execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """One statement for many rows (a batch's index rows: one call, not one per row)."""
        raise NotImplementedError

    def _begin(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    def _rollback(self) -> None:
        raise NotImplementedError

    def _lock_migrations(self) -> None:
        """Inside the migration transaction: keep other processes from migrating at the same time."""

    def _retryable(self, exc: BaseException) -> bool:
        return False

    def close(self) -> None:
        raise NotImplementedError

    # --- Shared ---------------------------------------------------------------------------------------------
    def version(self) -> int:
        """The highest migration applied (0: an empty database)."""
        row = self._execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def migrate(self, *, now: str) -> int:
        """Apply the migrations this database lacks, each in its own transaction; the version it is at."""
        self._begin()
        try:
            self._lock_migrations()
            self._execute(VERSION_TABLE)
            current = self.version()
            if current > SCHEMA_VERSION:
                raise SchemaTooNew(f"the records database {shown(self.uri)} has schema version {current}, newer "
                                   f"than this mediacrawler reads ({SCHEMA_VERSION}): upgrade mediacrawler")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    self._execute(statement)
                self._execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, now))
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return SCHEMA_VERSION

    def write(self, rows: Rows, *, run_id: str, seen_at: str) -> Written:
        """Upsert every row of ``rows`` in one transaction (tried again on a deadlock), and a ``metrics_history``
        row for each post whose counts this run changed."""
        return self._transaction(lambda: self._write(rows, run_id=run_id, seen_at=seen_at))

    def write_run(self, row: dict[str, Any]) -> None:
        """Upsert one ``runs`` row (every column of :data:`RUN_COLUMNS`) in its own transaction."""
        self._transaction(lambda: self._execute(RUN_SQL, [row[c] for c in RUN_COLUMNS]))

    def _transaction(self, work: Callable[[], T]) -> T:
        """``work()`` in one transaction, tried again when PostgreSQL aborted it for a deadlock."""
        for attempt in range(PG_RETRIES + 1):
            self._begin()
            try:
                result = work()
                self._commit()
                return result
            except BaseException as exc:
                self._rollback()
                if attempt >= PG_RETRIES or not self._retryable(exc):
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def _write(self, rows: Rows, *, run_id: str, seen_at: str) -> Written:
        # Tables and rows in a fixed order: two processes writing the same posts take their locks in the same
        # order (no deadlock between workers on one PostgreSQL).
        written = Written()
        self._execute_many(AUTHOR_SQL, ([*(row[c] for c in AUTHOR_COLUMNS[:3]), seen_at, seen_at]
                                        for _, row in sorted(rows.authors.items())))
        for (platform, post_id), row in sorted(rows.posts.items()):
            values = [*(row[c] for c in POST_COLUMNS[:-4]), seen_at, seen_at, seen_at, run_id]
            changed_by, *counts = self._execute(POST_SQL, values).fetchone()
            written.posts += 1
            if changed_by == run_id and any(c is not None for c in counts):
                self._execute(HISTORY_SQL, [platform, post_id, run_id, seen_at, *counts])
                written.history += 1
        self._execute_many(MEDIA_SQL, ([*(row[c] for c in MEDIA_COLUMNS[:-2]), seen_at, seen_at]
                                       for _, row in sorted(rows.media.items())))
        written.media += len(rows.media)
        self._execute_many(LINK_DELETE, sorted({(platform, post_id) for platform, post_id, _ in rows.post_media}))
        self._execute_many(LINK_SQL, ([row[c] for c in LINK_COLUMNS]
                                      for _, row in sorted(rows.post_media.items())))
        self._execute_many(COMMENT_SQL, ([*(row[c] for c in COMMENT_COLUMNS[:-2]), seen_at, seen_at]
                                         for _, row in sorted(rows.comments.items())))
        written.comments += len(rows.comments)
        # A comment's pictures as its post's: the links of each comment seen are rewritten with it.
        self._execute_many(COMMENT_LINK_DELETE,
                           sorted({(platform, cid) for platform, cid, _ in rows.comment_media}))
        self._execute_many(COMMENT_LINK_SQL, ([row[c] for c in COMMENT_LINK_COLUMNS]
                                              for _, row in sorted(rows.comment_media.items())))
        return written

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of a query as dicts (``?`` placeholders on both backends)."""
        cursor = self._execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def end_read(self) -> None:
        """End the transaction a read opened (PostgreSQL keeps one open from the first SELECT until told; a
        long-lived reader such as ``mediacrawler web`` would hold it idle). SQLite reads in autocommit."""
        self._rollback()

    def table(self, name: str, columns: Iterable[str] = ("*",)) -> list[dict[str, Any]]:
        """Every row of table ``name`` in primary-key order."""
        return self.select(f"SELECT {', '.join(columns)} FROM {name} ORDER BY {', '.join(PRIMARY_KEYS[name])}")


#: Seconds a SQLite connection waits for another process's lock (its busy timeout).
SQLITE_BUSY_TIMEOUT = 30.0


def _set_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode=WAL``, waiting as long as the busy timeout for the lock it takes. Switching a new
    file to WAL needs an exclusive lock and SQLite does not call its busy handler for it: two processes opening a
    new database at once (workers started together) saw ``database is locked`` at once. So: tried again, with
    a growing pause, until the busy timeout has passed."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT
    pause = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


class SQLiteRecordStore(RecordStore):
    """A SQLite file in WAL mode (readers never wait for the writer); one writer per process."""

    def __init__(self, path: str) -> None:
        self.uri = path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Autocommit at the driver, transactions taken explicitly (BEGIN IMMEDIATE: the write lock up front, so
        # two processes on one file queue on busy_timeout instead of failing mid-transaction).
        self.conn = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT, isolation_level=None,
                                    check_same_thread=False)
        try:
            _set_wal(self.conn)
            self.conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            self.conn.close()
            raise

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(sql, tuple(params))

    def _execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(sql, (tuple(row) for row in rows))

    def _begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self.conn.execute("COMMIT")

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()


class PostgresRecordStore(RecordStore):
    """A PostgreSQL database through psycopg 3 (imported only when one is configured)."""

    def __init__(self, uri: str, *, connect_timeout: float = 10.0) -> None:
        import psycopg

        self.uri = uri
        self._errors = psycopg.errors
        self.conn = psycopg.connect(uri, autocommit=False, connect_timeout=max(1, int(connect_timeout)))

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(sql.replace("?", "%s"), tuple(params))

    def _execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        params = [tuple(row) for row in rows]
        if params:  # psycopg sends the batch in one pipeline
            self.conn.cursor().executemany(sql.replace("?", "%s"), params)

    def _begin(self) -> None:
        pass  # psycopg opens a transaction with the first statement

    def _commit(self) -> None:
        self.conn.commit()

    def _rollback(self) -> None:
        self.conn.rollback()

    def _lock_migrations(self) -> None:
        self._execute("SELECT pg_advisory_xact_lock(?)", (PG_MIGRATION_LOCK,))

    def _retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, (self._errors.DeadlockDetected, self._errors.SerializationFailure))

    def close(self) -> None:
        self.conn.close()


def open_store(uri: str, *, now: str, connect_timeout: float = 10.0) -> RecordStore:
    """The store at ``uri`` (see :func:`resolve_uri`), migrated to :data:`SCHEMA_VERSION`. Raises
    :class:`SchemaTooNew` for a database of a newer schema, the driver's error when it cannot be reached."""
    store: RecordStore
    if is_postgres(uri):
        store = PostgresRecordStore(uri, connect_timeout=connect_timeout)
    else:
        store = SQLiteRecordStore(uri.removeprefix("sqlite://") if uri.startswith("sqlite://") else uri)
    try:
        store.migrate(now=now)
    except BaseException:
        store.close()
        raise
    return store
