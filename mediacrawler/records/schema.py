"""The tables of the records database and the migrations that make them (docs/records.md, "Records database").

One schema for SQLite and PostgreSQL: types both read the same way (TEXT, BIGINT, DOUBLE PRECISION; flags as 0/1
integers; times as ISO 8601 UTC text, which sorts as time; JSON as text). ``schema_version`` has one row per
migration applied; a database whose highest version is above :data:`SCHEMA_VERSION` was made by a newer
mediacrawler and is refused (:class:`SchemaTooNew`).
"""

from __future__ import annotations

#: The version this code writes; migrations ``1..SCHEMA_VERSION`` make a database of it from nothing.
SCHEMA_VERSION = 3

_V1 = [
    """CREATE TABLE IF NOT EXISTS authors (
        platform TEXT NOT NULL, author_id TEXT NOT NULL, name TEXT,
        first_seen_at TEXT NOT NULL, last_seen_at TEXT NOT NULL,
        PRIMARY KEY (platform, author_id))""",
    """CREATE TABLE IF NOT EXISTS posts (
        platform TEXT NOT NULL, post_id TEXT NOT NULL, url TEXT, author_id TEXT, created_at TEXT,
        text TEXT NOT NULL, text_html TEXT NOT NULL,
        likes BIGINT, comments BIGINT, shares BIGINT, views BIGINT,
        reposted_id TEXT, deleted INTEGER NOT NULL, spider TEXT, job TEXT, fetched_at TEXT, extra TEXT NOT NULL,
        first_seen_at TEXT NOT NULL, last_seen_at TEXT NOT NULL,
        metrics_changed_at TEXT NOT NULL, metrics_run TEXT NOT NULL,
        PRIMARY KEY (platform, post_id))""",
    "CREATE INDEX IF NOT EXISTS posts_author ON posts (platform, author_id, created_at)",
    "CREATE INDEX IF NOT EXISTS posts_created ON posts (created_at)",
    """CREATE TABLE IF NOT EXISTS media (
        platform TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, url TEXT,
        width BIGINT, height BIGINT, duration DOUBLE PRECISION, live_of TEXT, cover_of TEXT, derived TEXT,
        sha256 TEXT, path TEXT, size BIGINT, mime TEXT, status TEXT, error TEXT,
        first_seen_at TEXT NOT NULL, last_seen_at TEXT NOT NULL,
        PRIMARY KEY (platform, kind, key))""",
    "CREATE INDEX IF NOT EXISTS media_sha256 ON media (sha256)",
    """CREATE TABLE IF NOT EXISTS post_media (
        platform TEXT NOT NULL, post_id TEXT NOT NULL, position INTEGER NOT NULL, kind TEXT NOT NULL,
        key TEXT NOT NULL,
        PRIMARY KEY (platform, post_id, position))""",
    "CREATE INDEX IF NOT EXISTS post_media_asset ON post_media (platform, kind, key)",
    """CREATE TABLE IF NOT EXISTS metrics_history (
        platform TEXT NOT NULL, post_id TEXT NOT NULL, run_id TEXT NOT NULL, seen_at TEXT NOT NULL,
        likes BIGINT, comments BIGINT, shares BIGINT, views BIGINT,
        PRIMARY KEY (platform, post_id, run_id))""",
    "CREATE INDEX IF NOT EXISTS metrics_history_seen ON metrics_history (seen_at)",
    """CREATE TABLE IF NOT EXISTS comments (
        platform TEXT NOT NULL, comment_id TEXT NOT NULL, post_id TEXT NOT NULL, parent_id TEXT, root_id TEXT,
        author_id TEXT, text TEXT NOT NULL, created_at TEXT, likes BIGINT, replies BIGINT,
        pinned INTEGER NOT NULL, deleted INTEGER NOT NULL, fetched_at TEXT, extra TEXT NOT NULL,
        first_seen_at TEXT NOT NULL, last_seen_at TEXT NOT NULL,
        PRIMARY KEY (platform, comment_id))""",
    "CREATE INDEX IF NOT EXISTS comments_post ON comments (platform, post_id)",
]

# Version 2: the pictures of comments (``comment_media``, as ``post_media`` for posts), and the spider and job that
# last saw a comment (``mediacrawler export --job`` selects comments as it selects posts).
_V2 = [
    """CREATE TABLE IF NOT EXISTS comment_media (
        platform TEXT NOT NULL, comment_id TEXT NOT NULL, position INTEGER NOT NULL, kind TEXT NOT NULL,
        key TEXT NOT NULL,
        PRIMARY KEY (platform, comment_id, position))""",
    "CREATE INDEX IF NOT EXISTS comment_media_asset ON comment_media (platform, kind, key)",
    "ALTER TABLE comments ADD COLUMN spider TEXT",
    "ALTER TABLE comments ADD COLUMN job TEXT",
    "CREATE INDEX IF NOT EXISTS posts_job ON posts (job)",
]

# Version 3: one row per crawl run (``runs``, written by extensions/runs.py), so the web page knows the last run of
# every job and the progress of one running, whoever started it.
_V3 = [
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT NOT NULL, spider TEXT NOT NULL, job TEXT NOT NULL, host TEXT NOT NULL, worker TEXT,
        pid BIGINT NOT NULL, started_at TEXT NOT NULL, updated_at TEXT NOT NULL, finished_at TEXT,
        finish_reason TEXT, update_interval DOUBLE PRECISION NOT NULL,
        pages BIGINT NOT NULL, pages_failed BIGINT NOT NULL, posts BIGINT NOT NULL, posts_dropped BIGINT NOT NULL,
        comments BIGINT NOT NULL, media BIGINT NOT NULL, media_failed BIGINT NOT NULL, bytes BIGINT NOT NULL,
        errors BIGINT NOT NULL,
        PRIMARY KEY (run_id))""",
    "CREATE INDEX IF NOT EXISTS runs_job ON runs (job, started_at)",
]

#: version → the statements that take a database from the version before it to this one (run in one transaction
#: with the ``schema_version`` row that records it). A new version appends here; none is ever edited.
MIGRATIONS: dict[int, list[str]] = {1: _V1, 2: _V2, 3: _V3}

VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"


class SchemaTooNew(Exception):
    """The database was made by a newer mediacrawler (its schema version is above :data:`SCHEMA_VERSION`)."""
