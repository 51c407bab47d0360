"""Feed exporters: JSON that writes dataclass items without ItemAdapter's per-value probing, byte for byte what
Scrapy's own exporters write (docs/records.md, "Export"), and CSV in flat documented columns ("CSV columns")."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
from typing import Any

from scrapy.exporters import BaseItemExporter, JsonItemExporter, JsonLinesItemExporter
from scrapy.utils.python import to_bytes
from scrapy.utils.serialize import ScrapyJSONEncoder

from mediacrawler.compat import exporter_kwargs
from mediacrawler.items import field_names

@functools.cache
def _plain_fields(cls: type) -> tuple[str, ...] | None:
    """:func:`~mediacrawler.items.field_names`, or ``None`` when a field asks for a ``serializer`` (Scrapy's path
    applies it)."""
    names = field_names(cls)
    if names is None or any("serializer" in f.metadata for f in dataclasses.fields(cls)):
        return None
    return names


class DataclassJSONEncoder(ScrapyJSONEncoder):
    """Scrapy's JSON encoder, with nested dataclasses as shallow dicts (the same JSON as ``ItemAdapter.asdict``,
    which applies no serializer to nested items either)."""

    def default(self, o: Any) -> Any:
        names = field_names(type(o))
        if names is not None:
            return {name: getattr(o, name) for name in names}
        return super().default(o)


class JsonLinesExporter(JsonLinesItemExporter):
    """``jsonlines``/``jsonl``/``jl`` feeds (``FEED_EXPORTERS``): a plain dataclass item is a dict of its fields."""

    def __init__(self, file: Any, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.encoder = DataclassJSONEncoder(**exporter_kwargs(self))

    def export_item(self, item: Any) -> None:
        names = _plain_fields(type(item)) if self.fields_to_export is None else None
        if names is None:
            super().export_item(item)
            return
        fields = {name: getattr(item, name) for name in names}
        self.file.write(to_bytes(self.encoder.encode(fields) + "\n", self.encoding))


class JsonExporter(JsonItemExporter):
    """``json`` feeds (``FEED_EXPORTERS``): nested dataclasses through :class:`DataclassJSONEncoder`."""

    def __init__(self, file: Any, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.encoder = DataclassJSONEncoder(**exporter_kwargs(self))


# --- CSV: flat rows (docs/records.md, "CSV columns") -------------------------------------------------------------
#: Columns of a post row.
POST_COLUMNS = ("platform", "post_id", "url", "author_id", "author_name", "created_at", "text", "likes",
                "comments", "reposts", "views", "media_count", "media_stored", "first_image", "media_paths",
                "media_urls", "reposted_post_id", "deleted", "job", "fetched_at")
#: Columns of a comment row.
COMMENT_COLUMNS = ("platform", "comment_id", "post_id", "parent_id", "root_id", "author_id", "author_name",
                   "created_at", "text", "likes", "replies", "pinned", "deleted", "media_count", "media_paths",
                   "job", "fetched_at")
#: Columns of a media row (one per asset of a post or comment, its reposted original's included).
MEDIA_COLUMNS = ("platform", "post_id", "comment_id", "number", "kind", "key", "url", "status", "error",
                 "sha256", "size", "mime", "width", "height", "duration", "object_path", "library_path",
                 "cover_of", "live_of")
COLUMNS = {"posts": POST_COLUMNS, "comments": COMMENT_COLUMNS, "media": MEDIA_COLUMNS}
#: Joins several paths or URLs in one cell: a character no library path holds (library.safe_component).
LIST_SEPARATOR = "|"
_STORED = ("downloaded", "deduplicated", "uptodate")


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _paths(media: list[Any], paths: list[list[str]] | None) -> list[str]:
    """The path of each asset's own file: in the library when *paths* are given, else in the store."""
    if paths is not None:
        return [each[0] if each else "" for each in paths]
    return [str(_get(m, "path") or "") if _get(m, "status") in _STORED else "" for m in media]


def post_row(record: Any, paths: list[list[str]] | None = None) -> dict[str, Any]:
    """The flat row of a post (a Post or its JSON record); *paths*: :meth:`Library.media_paths` of it."""
    media = list(_get(record, "media") or [])
    where = _paths(media, paths)
    stored = [p for p in where if p]
    images = [(m, p) for m, p in zip(media, where) if p and _get(m, "kind") == "image"]
    first = next((p for m, p in images if not _get(m, "cover_of")), images[0][1] if images else "")
    author, metrics, source = _get(record, "author"), _get(record, "metrics"), _get(record, "source")
    row = {"platform": _get(record, "platform"), "post_id": _get(record, "post_id"), "url": _get(record, "url"),
           "author_id": _get(author, "id"), "author_name": _get(author, "name"),
           "created_at": _get(record, "created_at"), "text": _get(record, "text"),
           "likes": _get(metrics, "likes"), "comments": _get(metrics, "comments"),
           "reposts": _get(metrics, "shares"), "views": _get(metrics, "views"), "media_count": len(media),
           "media_stored": len(stored), "first_image": first, "media_paths": LIST_SEPARATOR.join(stored),
           "media_urls": LIST_SEPARATOR.join(str(_get(m, "url") or "") for m in media),
           "reposted_post_id": _get(_get(record, "reposted"), "post_id"), "deleted": _get(record, "deleted"),
           "job": _get(source, "job"), "fetched_at": _get(record, "fetched_at")}
    return {k: _cell(v) for k, v in row.items()}


def comment_row(record: Any, paths: list[list[str]] | None = None) -> dict[str, Any]:
    """The flat row of a comment (a Comment or its JSON record)."""
    media = list(_get(record, "media") or [])
    stored = [p for p in _paths(media, paths) if p]
    author, metrics, source = _get(record, "author"), _get(record, "metrics"), _get(record, "source")
    row = {name: _get(record, name) for name in ("platform", "comment_id", "post_id", "parent_id", "root_id",
                                                   "created_at", "text", "pinned", "deleted", "fetched_at")}
    row.update({"author_id": _get(author, "id"), "author_name": _get(author, "name"),
                "likes": _get(metrics, "likes"), "replies": _get(metrics, "replies"), "media_count": len(media),
                "media_paths": LIST_SEPARATOR.join(stored), "job": _get(source, "job")})
    return {k: _cell(row[k]) for k in COMMENT_COLUMNS}


def media_rows(record: Any, paths: list[list[str]] | None = None,
               reposted_paths: list[list[str]] | None = None) -> list[dict[str, Any]]:
    """One flat row per media asset of a post or comment (its reposted original's after its own)."""
    rows = []
    owners = [(record, paths)]
    if _get(record, "reposted") is not None:
        owners.append((_get(record, "reposted"), reposted_paths))
    for owner, owner_paths in owners:
        media = list(_get(owner, "media") or [])
        library = owner_paths or [[] for _ in media]
        for n, (asset, where) in enumerate(zip(media, library), 1):
            row = {name: _get(asset, name) for name in ("kind", "key", "url", "status", "error", "sha256", "size",
                                                          "mime", "width", "height", "duration", "cover_of",
                                                          "live_of")}
            row.update({"platform": _get(owner, "platform"), "post_id": _get(owner, "post_id"),
                        "comment_id": _get(owner, "comment_id"), "number": n,
                        "object_path": _get(asset, "path") if _get(asset, "status") in _STORED else None,
                        "library_path": where[0] if where else None})
            rows.append({k: _cell(row[k]) for k in MEDIA_COLUMNS})
    return rows


def rows_of(record: Any, kind: str, library: Any = None, *, lookup: bool = False) -> list[dict[str, Any]]:
    """The rows of *kind* (``posts``, ``comments``, ``media``) that *record* gives (none when it is another kind);
    *library*: a :class:`mediacrawler.library.Library` for the library paths (None: the store's paths)."""
    is_comment = _get(record, "comment_id") is not None
    paths = library.media_paths(record, lookup=lookup) if library is not None else None
    if kind == "posts":
        return [post_row(record, paths)] if not is_comment else []
    if kind == "comments":
        return [comment_row(record, paths)] if is_comment else []
    reposted = _get(record, "reposted")
    again = library.media_paths(reposted) if library is not None and reposted is not None else None
    return media_rows(record, paths, again)


def csv_bytes(rows: list[dict[str, Any]], columns: tuple[str, ...], *, header: bool = False) -> bytes:
    """*rows* as CSV (RFC 4180 quoting, ``\\r\\n`` line ends), UTF-8; with *header*, the BOM and the column line
    first (spreadsheet programs read Chinese text right only with the BOM)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    if header:
        buf.write("\ufeff")
        writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


class CsvExporter(BaseItemExporter):
    """``csv`` feeds (``FEED_EXPORTERS``; ``-O posts.csv``): flat documented columns, never Python reprs. The feed
    option ``item_export_kwargs: {"kind": "comments"|"media"}`` picks the rows (default ``posts``; items of
    another kind are left out of the file); ``fields`` (FEED_EXPORT_FIELDS) picks and orders columns among ours.
    Library paths when LIBRARY_ENABLED, else the store's object paths."""

    def __init__(self, file: Any, *, kind: str = "posts", library: Any = None, **kwargs: Any) -> None:
        super().__init__(dont_fail=True, **kwargs)
        if kind not in COLUMNS:
            raise ValueError(f"CSV feed kind {kind!r}: expected one of {', '.join(COLUMNS)}")
        self.file = file
        self.kind = kind
        self.columns = COLUMNS[kind]
        if self.fields_to_export:  # FEED_EXPORT_FIELDS / the feed's "fields": some of our columns, in that order
            wanted = tuple(self.fields_to_export)
            unknown = [name for name in wanted if name not in self.columns]
            if unknown:
                raise ValueError(f"CSV {kind} columns {unknown}: expected some of {', '.join(self.columns)}")
            self.columns = wanted
        self.library = library

    @classmethod
    def from_crawler(cls, crawler: Any, file: Any, **kwargs: Any) -> CsvExporter:
        from mediacrawler.config import setting
        from mediacrawler.library import library_from_settings

        settings = crawler.settings
        library = library_from_settings(settings) if setting(settings, "LIBRARY_ENABLED") else None
        return cls(file, library=library, **kwargs)

    def start_exporting(self) -> None:
        try:
            fresh = self.file.tell() == 0
        except (OSError, ValueError):
            fresh = True
        # Appended to (-o): the BOM and the header are already at the start of the file.
        if fresh:
            self.file.write(csv_bytes([], self.columns, header=True))

    def export_item(self, item: Any) -> None:
        rows = rows_of(item, self.kind, self.library)
        if rows:
            self.file.write(csv_bytes(rows, self.columns))
