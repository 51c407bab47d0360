"""Reads of the records database for the web pages and the JSON API (docs/web.md): one SQL text for SQLite and
PostgreSQL (``?`` placeholders, ``LOWER``/``LIKE … ESCAPE``, ``SUBSTR``), values bound, never formatted in.

Every function takes an open :class:`~mediacrawler.records.store.RecordStore` and returns plain JSON-ready dicts;
the stored objects are named by their SHA-256 (served by ``/files/<sha256>``), never by a path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mediacrawler.records.rows import POST_COUNTS
from mediacrawler.records.store import RUN_COUNTS, RecordStore

#: Posts per page of the grid and of ``/api/posts`` (``per_page`` may ask for fewer, never more than MAX_PER_PAGE).
PER_PAGE = 24
MAX_PER_PAGE = 200
#: Replies nested deeper than this are shown at this depth (a thread is a tree; its rendering stays bounded).
MAX_THREAD_DEPTH = 12
#: A run whose row was not written for this many of its intervals is taken as stopped (killed, or its machine gone:
#: no ``spider_closed`` wrote its end).
STALE_INTERVALS = 3
#: Runs without an end older than this are not looked at for live progress (a crawl killed long ago).
OPEN_RUNS_WINDOW = timedelta(days=2)

_POST_FIELDS = ("p.platform, p.post_id, p.url, p.author_id, a.name AS author_name, p.created_at, p.text, "
                "p.likes, p.comments, p.shares, p.views, p.reposted_id, p.deleted, p.spider, p.job, p.fetched_at, "
                "p.first_seen_at, p.last_seen_at")
_POST_FROM = "FROM posts p LEFT JOIN authors a ON a.platform = p.platform AND a.author_id = p.author_id"


class BadFilter(ValueError):
    """A filter value that cannot be read (the message names it)."""


@dataclass(frozen=True)
class PostFilter:
    """The filters of the posts grid and of ``/api/posts``; times are ISO 8601 UTC text, as the rows hold them."""

    platform: str | None = None
    author: str | None = None  # an author id or name
    author_id: str | None = None  # an author id only (the author page)
    since: str | None = None
    until: str | None = None
    q: str | None = None
    page: int = 1
    per_page: int = PER_PAGE

    @classmethod
    def parse(cls, params: Any) -> PostFilter:
        """From query parameters (a mapping of strings); :class:`BadFilter` names a value that is not usable."""
        def text(name: str) -> str | None:
            value = str(params.get(name) or "").strip()
            return value[:500] or None

        return cls(platform=text("platform"), author=text("author"),
                   since=_when(text("since"), "since", end=False), until=_when(text("until"), "until", end=True),
                   q=text("q"), page=_int(params.get("page"), "page", 1, 1, 10**6),
                   per_page=_int(params.get("per_page"), "per_page", PER_PAGE, 1, MAX_PER_PAGE))

    def query(self) -> dict[str, str]:
        """The filters as query parameters (for links to other pages of the same list)."""
        return {n: getattr(self, n) for n in ("platform", "author", "since", "until", "q") if getattr(self, n)}


def _int(value: Any, name: str, default: int, low: int, high: int) -> int:
    if value in (None, ""):
        return default
    try:
        number = int(str(value))
    except ValueError:
        raise BadFilter(f"{name}={str(value)[:40]!r}: expected an integer") from None
    if not low <= number <= high:
        raise BadFilter(f"{name}={number}: expected {low} to {high}")
    return number


def _when(value: str | None, name: str, *, end: bool) -> str | None:
    """A date (``2026-11-27``) or a time as the ISO UTC text rows hold; a date as ``until`` means its whole day."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadFilter(f"{name}={value[:40]!r}: expected a date (2026-11-27) or a time (2026-11-27T08:00:00Z)"
                        ) from None
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    if end and len(value) <= 10:
        when += timedelta(days=1) - timedelta(seconds=1)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _where(f: PostFilter) -> tuple[str, list[Any]]:
    clauses, params = [], []
    if f.platform:
        clauses.append("p.platform = ?")
        params.append(f.platform)
    if f.author:
        clauses.append("(p.author_id = ? OR a.name = ?)")
        params += [f.author, f.author]
    if f.author_id:
        clauses.append("p.author_id = ?")
        params.append(f.author_id)
    if f.since:
        clauses.append("p.created_at >= ?")
        params.append(f.since)
    if f.until:
        clauses.append("p.created_at <= ?")
        params.append(f.until)
    if f.q:
        clauses.append("LOWER(p.text) LIKE ? ESCAPE '\\'")
        params.append(_like(f.q))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _post(row: dict[str, Any]) -> dict[str, Any]:
    return {"platform": row["platform"], "post_id": row["post_id"], "url": row["url"],
            "author": {"id": row["author_id"], "name": row["author_name"]} if row["author_id"] else None,
            "created_at": row["created_at"], "text": row["text"],
            "counts": {name: row[name] for name in POST_COUNTS}, "reposted_id": row["reposted_id"],
            "deleted": bool(row["deleted"]), "spider": row["spider"], "job": row["job"],
            "fetched_at": row["fetched_at"], "first_seen_at": row["first_seen_at"],
            "last_seen_at": row["last_seen_at"]}


def _asset(row: dict[str, Any]) -> dict[str, Any]:
    derived = json.loads(row["derived"]) if row.get("derived") else None
    srt = derived.get("srt") if isinstance(derived, dict) else None
    return {"kind": row["kind"], "key": row["key"], "width": row["width"], "height": row["height"],
            "duration": row["duration"], "live_of": row["live_of"], "cover_of": row["cover_of"],
            "sha256": row["sha256"], "size": row["size"], "mime": row["mime"], "status": row["status"],
            "error": row["error"], "file": f"/files/{row['sha256']}" if row["sha256"] else None,
            "vtt": f"/files/{srt['sha256']}.vtt" if isinstance(srt, dict) and srt.get("sha256") else None}


def _media_of(store: RecordStore, keys: list[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The assets of each (platform, post id), in the post's order."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in keys}
    for start in range(0, len(keys), 100):
        chunk = keys[start:start + 100]
        pairs = " OR ".join("(pm.platform = ? AND pm.post_id = ?)" for _ in chunk)
        rows = store.select(
            "SELECT pm.platform AS post_platform, pm.post_id, pm.position, m.* FROM post_media pm "
            "JOIN media m ON m.platform = pm.platform AND m.kind = pm.kind AND m.key = pm.key "
            f"WHERE {pairs} ORDER BY pm.platform, pm.post_id, pm.position", [v for k in chunk for v in k])
        for row in rows:
            found[(row["post_platform"], row["post_id"])].append(_asset(row))
    return found


def first_image(media: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first stored picture that is not a cover, else the first stored cover (as the CSV's ``first_image``)."""
    images = [m for m in media if m["kind"] == "image" and m["sha256"]]
    return next((m for m in images if not m["cover_of"]), images[0] if images else None)


def list_posts(store: RecordStore, f: PostFilter) -> dict[str, Any]:
    """One page of posts, newest first, each with its first image; ``total`` counts every match."""
    where, params = _where(f)
    total = store.select(f"SELECT COUNT(*) AS n {_POST_FROM}{where}", params)[0]["n"]
    rows = store.select(
        f"SELECT {_POST_FIELDS} {_POST_FROM}{where} ORDER BY p.created_at DESC, p.platform, p.post_id "
        f"LIMIT ? OFFSET ?", [*params, f.per_page, (f.page - 1) * f.per_page])
    posts = [_post(row) for row in rows]
    media = _media_of(store, [(p["platform"], p["post_id"]) for p in posts])
    for post in posts:
        assets = media[(post["platform"], post["post_id"])]
        post["first_image"] = first_image(assets)
        post["media_count"] = len(assets)
    pages = max(1, -(-int(total) // f.per_page))
    return {"posts": posts, "total": int(total), "page": f.page, "per_page": f.per_page, "pages": pages,
            "filters": f.query()}


def comment_thread(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Comments as a tree by ``parent_id``: top-level ones in order (pinned first), each with its ``replies``.

    A reply whose parent is not stored hangs under its ``root_id`` when that is stored, else at the top; a loop
    of parents (never from a platform, but a database can hold anything) is cut where it closes; nesting deeper
    than :data:`MAX_THREAD_DEPTH` is shown at that depth."""
    by_id = {r["comment_id"]: {**r, "replies": []} for r in rows}

    def parent(c: dict[str, Any]) -> str | None:
        for candidate in (c.get("parent_id"), c.get("root_id")):
            if candidate and candidate != c["comment_id"] and candidate in by_id:
                return str(candidate)
        return None

    children: dict[str | None, list[dict[str, Any]]] = {}
    for c in by_id.values():
        children.setdefault(parent(c), []).append(c)
    top: list[dict[str, Any]] = []
    placed: set[str] = set()

    def attach(nodes: list[dict[str, Any]], into: list[dict[str, Any]], depth: int) -> None:
        stack = [(n, into, depth) for n in reversed(nodes)]
        while stack:
            node, target, level = stack.pop()
            if node["comment_id"] in placed:
                continue
            placed.add(node["comment_id"])
            target.append(node)
            kids = children.get(node["comment_id"], [])
            deeper = node["replies"] if level < MAX_THREAD_DEPTH else target
            stack += [(k, deeper, min(level + 1, MAX_THREAD_DEPTH)) for k in reversed(kids)]

    attach(children.get(None, []), top, 1)
    # What no root reaches (a loop of parents) goes at the top, cut where the loop closes.
    attach([c for c in by_id.values() if c["comment_id"] not in placed], top, 1)
    return top


def _comments(store: RecordStore, platform: str, post_id: str) -> tuple[list[dict[str, Any]], int]:
    rows = store.select(
        "SELECT c.comment_id, c.parent_id, c.root_id, c.author_id, a.name AS author_name, c.text, c.created_at, "
        "c.likes, c.replies AS reply_count, c.pinned, c.deleted FROM comments c LEFT JOIN authors a "
        "ON a.platform = c.platform AND a.author_id = c.author_id WHERE c.platform = ? AND c.post_id = ? "
        "ORDER BY c.pinned DESC, c.created_at, c.comment_id", [platform, post_id])
    shaped = [{"comment_id": r["comment_id"], "parent_id": r["parent_id"], "root_id": r["root_id"],
               "author": {"id": r["author_id"], "name": r["author_name"]} if r["author_id"] else None,
               "text": r["text"], "created_at": r["created_at"],
               "counts": {"likes": r["likes"], "replies": r["reply_count"]},
               "pinned": bool(r["pinned"]), "deleted": bool(r["deleted"])} for r in rows]
    return comment_thread(shaped), len(shaped)


def get_post(store: RecordStore, platform: str, post_id: str) -> dict[str, Any] | None:
    """A post with its media, comments (a thread), counts history and the post it reposts; None: not stored."""
    rows = store.select(f"SELECT {_POST_FIELDS}, p.extra {_POST_FROM} WHERE p.platform = ? AND p.post_id = ?",
                        [platform, post_id])
    if not rows:
        return None
    post = _post(rows[0])
    post["extra"] = json.loads(rows[0]["extra"] or "{}")
    post["media"] = _media_of(store, [(platform, post_id)])[(platform, post_id)]
    post["comments"], post["comment_count"] = _comments(store, platform, post_id)
    post["history"] = store.select(
        "SELECT run_id, seen_at, likes, comments, shares, views FROM metrics_history "
        "WHERE platform = ? AND post_id = ? ORDER BY seen_at, run_id", [platform, post_id])
    post["reposted"] = None
    if post["reposted_id"]:
        original = store.select(f"SELECT {_POST_FIELDS} {_POST_FROM} WHERE p.platform = ? AND p.post_id = ?",
                                [platform, post["reposted_id"]])
        post["reposted"] = _post(original[0]) if original else None
    return post


def get_author(store: RecordStore, platform: str, author_id: str, f: PostFilter) -> dict[str, Any] | None:
    """An author, a page of their posts, and their posts per month (oldest first); None: not stored."""
    rows = store.select("SELECT platform, author_id, name, first_seen_at, last_seen_at FROM authors "
                        "WHERE platform = ? AND author_id = ?", [platform, author_id])
    if not rows:
        return None
    months = store.select(
        "SELECT SUBSTR(created_at, 1, 7) AS month, COUNT(*) AS posts FROM posts WHERE platform = ? AND "
        "author_id = ? AND created_at IS NOT NULL GROUP BY SUBSTR(created_at, 1, 7) ORDER BY month",
        [platform, author_id])
    listing = list_posts(store, PostFilter(platform=platform, author_id=author_id, page=f.page,
                                           per_page=f.per_page))
    return {"author": rows[0], "months": [{"month": m["month"], "posts": int(m["posts"])} for m in months],
            **listing}


def platforms(store: RecordStore) -> list[str]:
    return [r["platform"] for r in store.select("SELECT DISTINCT platform FROM posts ORDER BY platform")]


def sparkline(history: list[dict[str, Any]], name: str, *, width: int = 240, height: int = 48) -> str:
    """SVG polyline points of count ``name`` over ``history`` (empty when fewer than one known value)."""
    values = [(i, h[name]) for i, h in enumerate(history) if h.get(name) is not None]
    if not values:
        return ""
    low, high = min(v for _, v in values), max(v for _, v in values)
    span, last = (high - low) or 1, max(1, len(history) - 1)
    points = [(2 + (width - 4) * i / last, height - 2 - (height - 4) * (v - low) / span) for i, v in values]
    if len(points) == 1:
        points.append((width - 2, points[0][1]))
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def arrange_media(media: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A post's stored assets as the post page shows them: pictures; videos with their cover as poster and their
    subtitles as tracks; Live Photos as the still with its motion clip; audio; other documents as links."""
    stored = [m for m in media if m["file"]]
    by_key = {m["key"]: m for m in stored}
    covers = {m["cover_of"]: m for m in stored if m["cover_of"]}
    clips = {m["live_of"]: m for m in stored if m["live_of"]}
    videos = [m for m in stored if m["kind"] == "video" and not m["live_of"]]
    tracks: dict[str, list[dict[str, Any]]] = {}
    for m in stored:
        if m["kind"] == "subtitle" and m["vtt"]:
            video_key, _, lang = m["key"].rpartition(":")
            owner = video_key if video_key in by_key else (videos[0]["key"] if videos else None)
            if owner:
                tracks.setdefault(owner, []).append({**m, "lang": lang or "und"})
    shown: list[dict[str, Any]] = []
    for m in stored:
        if m["cover_of"] and m["cover_of"] in by_key:
            continue  # shown as its video's poster
        if m["kind"] == "image":
            clip = clips.get(m["key"])
            shown.append({"type": "live" if clip else "image", "asset": m, "clip": clip})
        elif m["kind"] == "video" and not (m["live_of"] and m["live_of"] in by_key):
            shown.append({"type": "video", "asset": m, "poster": covers.get(m["key"]),
                          "tracks": tracks.get(m["key"], [])})
        elif m["kind"] == "audio":
            shown.append({"type": "audio", "asset": m})
        elif m["kind"] not in ("subtitle", "video"):
            shown.append({"type": "other", "asset": m})
    return shown


def _time(text: str | None) -> datetime | None:
    try:
        when = datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


def run_state(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A ``runs`` row as the jobs page shows it: its state (``running``; ``stopped``: no end written and no update
    for :data:`STALE_INTERVALS` intervals; ``finished``: ended, ``reason`` says how) and its figures with the rates
    since it started (to its end, or to its last update)."""
    updated, started = _time(row["updated_at"]), _time(row["started_at"])
    if row["finished_at"]:
        state = "finished"
    elif updated is None or (now - updated).total_seconds() > STALE_INTERVALS * float(row["update_interval"]):
        state = "stopped"
    else:
        state = "running"
    progress: dict[str, Any] = {name: int(row[name] or 0) for name in RUN_COUNTS}
    end = _time(row["finished_at"]) or updated
    if started is not None and end is not None:
        minutes = max(1 / 60, (end - started).total_seconds() / 60)
        progress.update(minutes=round(minutes, 4), pages_per_minute=round(progress["pages"] / minutes, 1),
                        posts_per_minute=round(progress["posts"] / minutes, 1),
                        mib_per_minute=round(progress["bytes"] / 2**20 / minutes, 2))
    progress.update(source="runs", live=state == "running")
    return {"run_id": row["run_id"], "spider": row["spider"], "job": row["job"], "host": row["host"],
            "worker": row["worker"], "pid": int(row["pid"]), "started_at": row["started_at"],
            "updated_at": row["updated_at"], "finished_at": row["finished_at"], "reason": row["finish_reason"],
            "state": state, "progress": progress}


def job_runs(store: RecordStore, *, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    """Per job key of the ``runs`` table: ``last`` (its newest run, :func:`run_state`), ``running`` (its runs
    still writing: several workers may serve one job at once) and ``runs`` (how many it had)."""
    now = now or datetime.now(UTC)
    found: dict[str, dict[str, Any]] = {}
    for row in store.select("SELECT job, COUNT(*) AS n FROM runs GROUP BY job"):
        found[row["job"]] = {"last": None, "running": [], "runs": int(row["n"])}
    newest = store.select("SELECT * FROM runs r WHERE r.started_at = (SELECT MAX(q.started_at) FROM runs q "
                          "WHERE q.job = r.job) ORDER BY r.job, r.run_id")
    for row in newest:
        found[row["job"]]["last"] = run_state(row, now)
    since = (now - OPEN_RUNS_WINDOW).strftime("%Y-%m-%dT%H:%M:%S")
    for row in store.select("SELECT * FROM runs WHERE finished_at IS NULL AND updated_at >= ? ORDER BY job, "
                            "started_at", [since]):
        run = run_state(row, now)
        if run["state"] == "running" and row["job"] in found:
            found[row["job"]]["running"].append(run)
    return found
