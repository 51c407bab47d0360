"""The library: a browsable view of the media store, one readable path per stored file (docs/records.md,
"Library").

Paths come from ``LIBRARY_TEMPLATE`` (``{platform}/{author_name} ({author_id})/{date:%Y-%m-%d}
{post_id}/{index:02d} {kind}.{ext}``), made safe on every OS by :func:`safe_component`. Entries are hard links to
the content-addressed objects (a symlink where the filesystem refuses one), never a second copy; their mtime is the
post's publish time.
The store stays the truth: the library can be deleted and rebuilt from the records at any time.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import string
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from itemadapter import ItemAdapter, is_item

logger = logging.getLogger(__name__)

#: The fields a template may use.
FIELDS = frozenset({"platform", "author_name", "author_id", "date", "post_id", "index", "kind", "ext"})
#: Bytes (UTF-8) of one path component (ext4, APFS and NTFS all allow 255); a longer one is cut at a character.
COMPONENT_MAX_BYTES = 200
#: Bytes (UTF-8) of one field's value (an author name) inside a component, so that the rest (the id) survives.
FIELD_MAX_BYTES = 120
#: The folder of a post's comment media.
COMMENTS_DIR = "comments"
#: Most post folders listed when a comment's post is looked for on disk.
MAX_INDEXED = 1_000_000
#: Post folders remembered by one process (the oldest forgotten first: a worker runs for months).
MAX_REMEMBERED = 200_000
#: Most comments kept waiting for their post's folder (a comment past it is counted ``unplaced``).
MAX_WAITING_COMMENTS = 20_000
#: Characters no Windows name may hold, each replaced by its full-width twin (readable, and never a separator).
_RESERVED = {c: chr(ord(c) + 0xFEE0) for c in '<>:"/\\|?*'}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WINDOWS_NAMES = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{n}" for n in "123456789¹²³"),
                            *(f"LPT{n}" for n in "123456789¹²³")})
#: Mark the fields left open (:meth:`LibraryTemplate.pattern`), one each; control characters, never in a safe value.
_WILDS = "\x01\x02\x03\x04\x05\x06\x07\x08"


class _Wild:
    """A field value that formats, whatever its spec, as its mark."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __format__(self, spec: str) -> str:
        return self.mark


class _Undated:
    """The ``date`` of a post without a publish time."""

    def __format__(self, spec: str) -> str:
        return "undated"


def safe_component(name: str, *, max_bytes: int = COMPONENT_MAX_BYTES, keep_ext: bool = False,
                   keep: str = "") -> str:
    """*name* as one path component safe on Linux, macOS and Windows: NFC; reserved characters full-width, control
    characters ``_``; no trailing spaces, trailing dots full-width (so never ``.``/``..``); never empty (``_``); a
    reserved Windows name (``CON``, ``com1.txt``) prefixed with ``_``; at most *max_bytes* UTF-8 bytes, cut at a
    character (*keep_ext*: the cut spares the last ``.ext``). Characters in *keep* pass untouched (the marks of a
    pattern)."""
    name = unicodedata.normalize("NFC", name)
    name = "".join(c if c in keep else _RESERVED.get(c, c) for c in name)
    name = "".join("_" if _CONTROL.fullmatch(c) and c not in keep else c for c in name)
    name = name.strip(" ")
    stem, dot, ext = name.rpartition(".") if keep_ext and "." in name.rstrip(".") else (name, "", "")
    budget = max_bytes - len((dot + ext).encode())
    if budget < 4:  # an "extension" as long as the name: cut the whole
        stem, dot, ext, budget = name, "", "", max_bytes
    name = _ends(_cut(stem, budget - 3)) + dot + _ends(ext) if len(stem.encode()) > budget else (
        _ends(stem) + dot + _ends(ext) if ext else _ends(stem))
    if not name:
        name = "_"
    if name.split(".", 1)[0].rstrip(" ").upper() in _WINDOWS_NAMES:
        name = "_" + name
    return _cut(name, max_bytes)


def _ends(text: str) -> str:
    """No trailing space, and trailing dots full-width (Windows drops both; ``..`` becomes ``．．``)."""
    text = text.rstrip(" ")
    bare = text.rstrip(".")
    return bare + "\uff0e" * (len(text) - len(bare))


def _cut(text: str, max_bytes: int) -> str:
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")  # a partial last character is dropped


def safe_value(value: Any) -> str:
    """A field value as text for a component: :func:`safe_component` of it, capped at :data:`FIELD_MAX_BYTES`."""
    return safe_component(str(value), max_bytes=FIELD_MAX_BYTES)


def parse_template(template: str) -> LibraryTemplate:
    """The template, or ValueError naming what is wrong with it (the check of LIBRARY_TEMPLATE in settings.py)."""
    return LibraryTemplate(template)


class LibraryTemplate:
    """A parsed LIBRARY_TEMPLATE: directory components (the last of which holds ``{post_id}``, the post's folder)
    and the file name."""

    def __init__(self, template: str) -> None:
        if not isinstance(template, str) or not template.strip():
            raise ValueError("the template is empty")
        if template.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", template):
            raise ValueError(f"{template!r} is absolute: a library path is relative to LIBRARY_DIR")
        parts = template.split("/")
        if len(parts) < 2:
            raise ValueError(f"{template!r} has no folder: its folders name each post (…/{{post_id}}/…)")
        for part in parts:
            if part.strip() in ("", ".", ".."):
                raise ValueError(f"{template!r} has an empty, '.' or '..' component")
            for _, name, _, conversion in string.Formatter().parse(part):
                if name is None:
                    continue
                if name not in FIELDS:
                    known = ", ".join(sorted(FIELDS))
                    raise ValueError(f"{template!r}: unknown field {{{name}}} (fields: {known})")
                if conversion:
                    raise ValueError(f"{template!r}: no conversions (!r, !s) in a field")
        post = [n for n, part in enumerate(parts[:-1]) if "{post_id" in part]
        if not post:
            raise ValueError(f"{template!r}: a folder must hold {{post_id}} (each post has its own folder)")
        self.template = template
        # The folders down to the post's (what follows it is more folders under the post, then the file).
        self.dirs = parts[:-1]
        self.post_level = post[0]
        self.file = parts[-1]
        self.author_level = next((n for n, part in enumerate(self.dirs) if "{author_id" in part), None)
        try:
            self.render_dirs(_sample())
            self.render_file(_sample())
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"{template!r}: {exc}") from None

    def render_dirs(self, fields: dict[str, Any]) -> list[str]:
        """The folder components of a post's files."""
        values = _values(fields)
        return [safe_component(part.format_map(values)) for part in self.dirs]

    def render_file(self, fields: dict[str, Any]) -> str:
        """The file name; without an ``ext`` (an object stored without one) the template's ``.{ext}`` is left out."""
        if fields.get("ext"):
            return safe_component(self.file.format_map(_values(fields)), keep_ext=True)
        name = safe_component(self.file.format_map(_values({**fields, "ext": "ext"})), keep_ext=True)
        return name.removesuffix(".ext") or "_"

    def pattern(self, level: int, fields: dict[str, Any], *, open_fields: tuple[str, ...]) -> re.Pattern[str]:
        """A regex matching folder component *level* for *fields* whatever the *open_fields* are, each a named
        group (``(?P<author_id>.+)``)."""
        marks = dict(zip(open_fields, _WILDS, strict=False))
        values = {**_values(fields), **{name: _Wild(mark) for name, mark in marks.items()}}
        rendered = safe_component(self.dirs[level].format_map(values), keep=_WILDS)
        regex, seen = [], set()
        for c in rendered:
            name = next((n for n, m in marks.items() if m == c), None)
            if name is None:
                regex.append(re.escape(c))
            else:
                regex.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+)")
                seen.add(name)
        return re.compile("".join(regex))


def _values(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, (_Wild, _Undated, datetime, int)) and not isinstance(value, bool):
            out[name] = value
        else:
            out[name] = safe_value(value)
    return out


def _sample() -> dict[str, Any]:
    return {"platform": "p", "author_name": "a", "author_id": "1", "date": datetime(2026, 1, 1), "post_id": "1",
            "index": 1, "kind": "image", "ext": "jpg"}


def publish_time(created_at: Any) -> datetime | None:
    """The post's publish time (ISO 8601, UTC as normalize writes it), or None."""
    if not isinstance(created_at, str) or not created_at:
        return None
    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Entry:
    """One file of the library: where (``folder`` components, then ``name``), which object (its path in the
    store) and the mtime (the post's publish time, seconds)."""

    folder: tuple[str, ...]
    name: str
    object: str
    mtime: float | None

    @property
    def relpath(self) -> str:
        return "/".join((*self.folder, self.name))


def _file_kind(asset: ItemAdapter) -> str:
    if asset.get("cover_of"):
        return "cover"
    if asset.get("live_of"):
        return "live"
    return str(asset.get("kind") or "file")


def _ext(path: str) -> str:
    return path.rsplit("/", 1)[-1].partition(".")[2]


def post_fields(post: ItemAdapter) -> dict[str, Any]:
    """The template fields of a post (a Post item or its JSON record)."""
    author = post.get("author")
    author = ItemAdapter(author) if is_item(author) else {}
    date = publish_time(post.get("created_at"))
    author_id = author.get("id")
    return {"platform": post.get("platform") or "unknown", "post_id": post.get("post_id") or "unknown",
            "author_id": author_id if author_id not in (None, "") else "unknown",
            "author_name": author.get("name") or author_id or "unknown",
            "date": date if date is not None else _Undated()}


def file_names(template: LibraryTemplate, fields: dict[str, Any], media: list[ItemAdapter]) -> list[list[str]]:
    """The names of each asset's files in its post's folder: first the asset's own object, then its derived ones
    (a subtitle's SRT), in ``derived`` order; ``[]`` for an asset with nothing stored.

    Covers (``cover_of``) and Live Photo clips (``live_of``) take the number of what they belong to; a subtitle or
    danmaku of a video is named after that video's file (``01 video.zh-CN.json``, ``01 video.danmaku.xml``), so
    players find it. Names repeated within the post get `` (2)``, `` (3)``… in the order of the media.
    """
    number: dict[str, int] = {}
    n = 0
    for asset in media:
        if not asset.get("cover_of") and not asset.get("live_of") and asset.get("kind") not in ("subtitle",
                                                                                               "danmaku"):
            n += 1
            number.setdefault(str(asset.get("key")), n)
    video_stem: dict[str, str] = {}
    names: list[list[str]] = []
    for asset in media:
        path = asset.get("path")
        if not path or asset.get("status") not in ("downloaded", "deduplicated", "uptodate"):
            names.append([])
            continue
        kind, key = asset.get("kind"), str(asset.get("key"))
        owner = asset.get("cover_of") or asset.get("live_of")
        own: str
        if kind in ("subtitle", "danmaku"):
            video, _, lang = key.rpartition(":") if kind == "subtitle" else (key, "", "")
            stem = video_stem.get(video)
            if stem is None:
                n += 1
                stem = template.render_file({**fields, "index": n, "kind": kind, "ext": ""})
            tail = safe_value(lang) if kind == "subtitle" and lang else kind
            own = safe_component(f"{stem}.{tail}.{_ext(path)}", keep_ext=True)
        else:
            index = number.get(str(owner)) if owner else None
            if index is None:
                index = number.get(key)
            if index is None:
                n += 1
                index = n
            own = template.render_file({**fields, "index": index, "kind": _file_kind(asset), "ext": _ext(path)})
            if kind == "video":
                video_stem.setdefault(key, own.rsplit(".", 1)[0] if "." in own else own)
        stem = own.rsplit(".", 1)[0] if "." in own else own
        derived = asset.get("derived") or {}
        names.append([own, *(safe_component(f"{stem}.{ext}", keep_ext=True) for ext in derived)])
    seen: dict[str, int] = {}
    for group in names:
        for i, name in enumerate(group):
            count = seen[name.lower()] = seen.get(name.lower(), 0) + 1
            if count > 1:
                stem, dot, ext = name.rpartition(".") if "." in name else (name, "", "")
                group[i] = safe_component(f"{stem} ({count}){dot}{ext}", keep_ext=True)
    return names


def _objects(asset: ItemAdapter) -> list[str]:
    derived = asset.get("derived") or {}
    return [str(asset.get("path")), *(str(d.get("path")) for d in derived.values())]


def posts_of(item: Any) -> Iterator[ItemAdapter]:
    """A post and the post it reposts (each has its own folder: the original under its own author)."""
    post: Any = item
    for _ in range(8):  # the same cap as contracts.walk_assets
        if post is None or not is_item(post):
            return
        adapter = ItemAdapter(post)
        yield adapter
        post = adapter.get("reposted")


def is_comment(item: Any) -> bool:
    return is_item(item) and "comment_id" in ItemAdapter(item)


class Library:
    """The library under *root* for the store under *store_root*: :meth:`place` links an item's stored files.

    Thread-safe (one lock: renames of author folders must not race); all its work is file work, run off the
    reactor thread by pipelines/library.py.
    """

    def __init__(self, root: str | os.PathLike[str], *, store_root: str | os.PathLike[str],
                 template: str | LibraryTemplate) -> None:
        self.root = Path(root)
        self.store_root = Path(store_root)
        self.template = template if isinstance(template, LibraryTemplate) else LibraryTemplate(template)
        self._lock = threading.Lock()
        self._authors: dict[tuple[str, ...], str] = {}  # author folder resolved this process (parent + id)
        self._author_dirs: dict[tuple[str, ...], dict[str, list[str]]] = {}  # parent -> id -> folders on disk
        self._posts: dict[tuple[str, str], tuple[str, ...]] = {}  # (platform, post id) -> post folder
        self._indexed: set[str] = set()  # platforms whose post folders on disk are in _posts
        #: Comments with media whose post is not placed yet, by post: a walked thread's post comes after its
        #: comments (spiders/_threads.py), and they are placed with it (at most MAX_WAITING_COMMENTS in all).
        self._waiting: dict[tuple[str, str], list[Any]] = {}
        self._waiting_total = 0
        self.symlinks = False  # hard links refused once: symlinks from then on (said once)

    # --- planning (no file work) -------------------------------------------------------------------------
    def entries(self, item: Any) -> list[Entry]:
        """The library files of a post item (its reposted original included), given its folders as the template
        names them today (no lookup of renamed folders: :meth:`place` does that)."""
        out: list[Entry] = []
        for post in posts_of(item):
            fields = post_fields(post)
            folder = tuple(self.template.render_dirs(fields))
            out.extend(self._post_entries(folder, fields, post))
        return out

    def _post_entries(self, folder: tuple[str, ...], fields: dict[str, Any], post: ItemAdapter) -> list[Entry]:
        media = [ItemAdapter(m) for m in post.get("media") or []]
        date = fields["date"]
        mtime = date.timestamp() if isinstance(date, datetime) else None
        out = []
        for asset, names in zip(media, file_names(self.template, fields, media)):
            out.extend(Entry(folder, name, obj, mtime) for name, obj in zip(names, _objects(asset)))
        return out

    def comment_entries(self, item: Any, post_folder: tuple[str, ...]) -> list[Entry]:
        """The files of a comment's media in its post's ``comments/`` folder: ``<comment id> <file name>``."""
        comment = ItemAdapter(item)
        date = publish_time(comment.get("created_at"))
        media = [ItemAdapter(m) for m in comment.get("media") or []]
        out = []
        for asset, names in zip(media, self._comment_names(comment, media)):
            out.extend(Entry((*post_folder, COMMENTS_DIR), name, obj, date.timestamp() if date else None)
                       for name, obj in zip(names, _objects(asset)))
        return out

    def _comment_names(self, comment: ItemAdapter, media: list[ItemAdapter]) -> list[list[str]]:
        prefix = safe_value(comment.get("comment_id") or "unknown")
        return [[safe_component(f"{prefix} {name}", keep_ext=True) for name in names]
                for names in file_names(self.template, post_fields(comment), media)]

    def media_paths(self, item: Any, *, lookup: bool = False) -> list[list[str]]:
        """The library paths (relative to the root, ``/``-separated) of each asset of *item*'s own media (not its
        reposted original's): the asset's object first, then its derived ones; ``[]`` for an asset with nothing
        stored. A comment's need its post's folder: known when the post came before (this instance saw it), or
        found on disk with *lookup*; else ``[]``. What :meth:`place` makes, but for the rename of an author folder
        (the record's author name is the one shown)."""
        adapter = ItemAdapter(item)
        media = [ItemAdapter(m) for m in adapter.get("media") or []]
        with self._lock:
            if is_comment(item):
                key = (str(adapter.get("platform")), str(adapter.get("post_id")))
                folder = self._posts.get(key)
                if folder is None and lookup and media:
                    folder = self._post_folder(*key)
                if folder is None:
                    return [[] for _ in media]
                return [["/".join((*folder, COMMENTS_DIR, name)) for name in names]
                        for names in self._comment_names(adapter, media)]
            fields = post_fields(adapter)
            folder = tuple(self.template.render_dirs(fields))
            self._remember((str(fields["platform"]), str(fields["post_id"])), folder)
        named = file_names(self.template, fields, media)
        return [["/".join((*folder, name)) for name in names] for names in named]

    # --- file work -------------------------------------------------------------------------------------------
    def place(self, item: Any) -> dict[str, int]:
        """Link the stored files of *item* (a Post or a Comment, a dataclass or its JSON record); counts by
        outcome: ``created``, ``replaced``, ``kept``, ``moved`` (author folders renamed), ``unplaced`` (comments
        of a post the library does not hold yet), ``missing`` (an object not in the store)."""
        counts = {"created": 0, "replaced": 0, "kept": 0, "moved": 0, "unplaced": 0, "missing": 0}
        with self._lock:
            if is_comment(item):
                adapter = ItemAdapter(item)
                if not adapter.get("media"):
                    return counts
                key = (str(adapter.get("platform")), str(adapter.get("post_id")))
                folder = self._post_folder(*key)
                if folder is None and self._waiting_total < MAX_WAITING_COMMENTS:
                    self._waiting.setdefault(key, []).append(item)  # placed when its post is
                    self._waiting_total += 1
                    return counts
                if folder is None:
                    counts["unplaced"] += sum(1 for m in adapter.get("media") or [] if ItemAdapter(m).get("path"))
                    return counts
                entries = self.comment_entries(item, folder)
            else:
                entries = []
                for post in posts_of(item):
                    fields = post_fields(post)
                    folder = self._resolve(fields, counts)
                    key = (str(fields["platform"]), str(fields["post_id"]))
                    self._remember(key, folder)
                    entries.extend(self._post_entries(folder, fields, post))
                    for comment in self._waiting.pop(key, ()):
                        self._waiting_total -= 1
                        entries.extend(self.comment_entries(comment, folder))
            for entry in entries:
                counts[self._link(entry)] += 1
        return counts

    def _resolve(self, fields: dict[str, Any], counts: dict[str, int]) -> tuple[str, ...]:
        """The post's folder; an author folder under another name (the author was renamed) is renamed first."""
        folder = self.template.render_dirs(fields)
        level = self.template.author_level
        if level is None:
            return tuple(folder)
        key = (*folder[:level], str(fields["author_id"]))
        known = self._authors.get(key)
        if known == folder[level]:
            return tuple(folder)
        parent = self.root.joinpath(*folder[:level])
        wanted = parent / folder[level]
        if not wanted.exists() and parent.is_dir():
            # The folders of this level by author id, listed once per process (not once per new author).
            by_id = self._author_dirs.get(key[:-1])
            if by_id is None:
                by_id = self._author_dirs[key[:-1]] = {}
                both = self.template.pattern(level, fields, open_fields=("author_name", "author_id"))
                for child in sorted(os.listdir(parent)):
                    match = both.fullmatch(child)
                    if match is not None:
                        by_id.setdefault(match.group("author_id"), []).append(child)
            pattern = self.template.pattern(level, fields, open_fields=("author_name",))
            author_id = safe_value(fields["author_id"])
            for old in by_id.get(author_id, []):
                if old != wanted.name and pattern.fullmatch(old) and (parent / old).is_dir():
                    try:
                        os.rename(parent / old, wanted)
                    except OSError as exc:  # another worker renamed it first, or the name is taken
                        logger.warning("Library: could not rename %s to %s: %s", parent / old, wanted.name, exc)
                    else:
                        logger.info("Library: author folder %s renamed to %s", old, wanted.name)
                        counts["moved"] += 1
                    break
            by_id[author_id] = [wanted.name]
        self._authors[key] = folder[level]
        return tuple(folder)

    def _post_folder(self, platform: str, post_id: str) -> tuple[str, ...] | None:
        """The folder of a post placed before: in this process, or found on disk by its id (the platform's post
        folders are listed once per process, at the first comment whose post this process did not see)."""
        known = self._posts.get((platform, post_id))
        if known is not None or platform in self._indexed:
            return known
        self._indexed.add(platform)
        fields = {"platform": platform}
        unknown = ("post_id", "author_name", "author_id", "date")
        found: list[Path] = [self.root]
        for level in range(self.template.post_level + 1):
            pattern = self.template.pattern(level, fields, open_fields=unknown)
            found = [child for parent in found if parent.is_dir() for child in sorted(parent.iterdir())
                     if pattern.fullmatch(child.name) and child.is_dir()][:MAX_INDEXED]
        last = self.template.pattern(self.template.post_level, fields, open_fields=unknown)
        for path in found:
            match = last.fullmatch(path.name)
            if match is not None and (platform, match.group("post_id")) not in self._posts:
                self._remember((platform, match.group("post_id")), path.relative_to(self.root).parts)
        return self._posts.get((platform, post_id))

    def _remember(self, key: tuple[str, str], folder: tuple[str, ...]) -> None:
        self._posts.pop(key, None)
        self._posts[key] = folder
        if len(self._posts) > MAX_REMEMBERED:
            forgotten = next(iter(self._posts))
            del self._posts[forgotten]
            self._indexed.discard(forgotten[0])  # a later miss lists that platform's folders again

    def _link(self, entry: Entry) -> str:
        target = self.store_root / entry.object
        dest = self.root.joinpath(*entry.folder, entry.name)
        try:
            target_stat = target.stat()
        except FileNotFoundError:
            logger.warning("Library: %s has no object %s in the store", entry.relpath, entry.object)
            return "missing"
        if not _inside(dest.parent, self.root):  # before anything is made: a symlinked folder pointing away
            raise ValueError(f"library path {entry.relpath!r} resolves outside {self.root}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        outcome = "kept"
        try:
            st = dest.lstat()
        except FileNotFoundError:
            st = None
        if st is None or not self._same(dest, st, target, target_stat):
            outcome = "created" if st is None else "replaced"
            # Unique to this call (workers on several machines may share the library and a pid).
            tmp = dest.with_name(f".{dest.name[:40]}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
            try:
                self._make_link(target, tmp)
                os.replace(tmp, dest)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        if entry.mtime is not None:
            # One inode, one mtime: a file shared by several posts carries the earliest of their publish times.
            st = dest.lstat()
            if st.st_mtime > entry.mtime:
                os.utime(dest, (st.st_atime, entry.mtime), follow_symlinks=False)
        return outcome

    def _same(self, dest: Path, st: os.stat_result, target: Path, target_stat: os.stat_result) -> bool:
        if dest.is_symlink():
            try:
                return os.path.samefile(dest, target)
            except OSError:
                return False
        return (st.st_dev, st.st_ino) == (target_stat.st_dev, target_stat.st_ino)

    def _make_link(self, target: Path, dest: Path) -> None:
        if not self.symlinks:
            try:
                os.link(target, dest)
                return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EMLINK, errno.EACCES):
                    raise
                self.symlinks = True
                logger.warning("Library: %s refuses hard links into %s (%s): symlinks from now on",
                               self.root, self.store_root, exc)
        os.symlink(os.path.relpath(target, dest.parent), dest)


def _inside(path: Path, root: Path) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def library_from_settings(settings: Any) -> Library:
    """The library that LIBRARY_DIR, FILES_STORE and LIBRARY_TEMPLATE name (ValueError: a bad template)."""
    from mediacrawler.config import setting

    store = str(setting(settings, "FILES_STORE")).removeprefix("file://")
    root = str(setting(settings, "LIBRARY_DIR") or "").removeprefix("file://") or default_library_dir(store)
    return Library(root, store_root=store, template=setting(settings, "LIBRARY_TEMPLATE"))


def default_library_dir(files_store: str) -> str:
    """``library/`` beside FILES_STORE (``demo-output/files`` -> ``demo-output/library``)."""
    store = Path(str(files_store).removeprefix("file://")).expanduser()
    return str(store.parent / "library")


@dataclass
class LibraryCheck:
    """What ``verify`` finds in the library (paths relative to it)."""

    files: int = 0
    missing: list[str] | None = None  # links whose object is not in the store
    stray: list[str] | None = None  # files that are no link to any stored object


def check_library(root: str | os.PathLike[str], *, store_root: str | os.PathLike[str]) -> LibraryCheck:
    """Every file under *root* must be a hard link to an object under *store_root* (same inode) or a symlink to
    one: a symlink to nothing is ``missing``, anything else ``stray`` (among them a hard link whose object was
    removed from the store: the library holds the last copy)."""
    root, store = Path(root), Path(store_root)
    objects_dir = store / "objects"
    inodes = set()
    if objects_dir.is_dir():
        for dirpath, _, files in os.walk(objects_dir):
            for name in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(dirpath, name))
                    inodes.add((st.st_dev, st.st_ino))
    report = LibraryCheck(missing=[], stray=[])
    assert report.missing is not None and report.stray is not None
    base = os.path.realpath(objects_dir)
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            report.files += 1
            st = os.lstat(path)
            if os.path.islink(path):
                real = os.path.realpath(path)
                if not real.startswith(base + os.sep):
                    report.stray.append(rel)
                elif not os.path.exists(real):
                    report.missing.append(rel)
            elif (st.st_dev, st.st_ino) not in inodes:
                report.stray.append(rel)
    report.missing.sort()
    report.stray.sort()
    return report
