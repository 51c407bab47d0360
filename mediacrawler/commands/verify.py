"""``mediacrawler verify [--store PATH] [--repair]``: prove that the media store holds what the index says: re-hash
every object, compare with the index, and with ``--repair`` fix what can be fixed (docs/media.md, "mediacrawler
verify"); then that every file of the library links to a stored object (docs/records.md, "Library"). Exit 0
when all is well, 1 when anything is (still) wrong, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sqlite3
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

from scrapy.exceptions import NotConfigured

from mediacrawler.commands.options import add_settings_option, checked_settings, missing_dir
from mediacrawler.config import setting
from mediacrawler.fsutil import free_bytes
from mediacrawler.library import check_library, default_library_dir
from mediacrawler.media.index import (MediaIndex, ObjectRecord, SourceRecord, SQLiteMediaIndex, index_class,
                                      is_corruption, object_record_of)
from mediacrawler.media.store import ContentAddressedStore, StoreError, hash_file, parse_object_relpath
from mediacrawler.media.urls import allowed_schemes
from mediacrawler.records.read import RecordsUnreadable, open_records, stored_objects

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

EXIT_OK = 0
EXIT_PROBLEMS = 1
#: Bytes per read of a repair download (the memory a repair needs, whatever the file size).
_CHUNK = 1024 * 1024


#: Fetches a URL's body for a repair: ``fetch(url, referer, dest)`` writes the body into the binary file ``dest``
#: (raises on any failure).
Fetcher = Callable[[str, "str | None", IO[bytes]], None]
#: Called after each file: ``progress(done_files, total_files, done_bytes)``.
ProgressCallback = Callable[[int, int, int], None]


@dataclass
class VerifyReport:
    """The outcome of a verify run. Paths are relative to the store root."""

    checked: int = 0
    bytes_checked: int = 0
    ok: int = 0
    corrupt: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    unrepaired: dict[str, str] = field(default_factory=dict)  # path -> why it could not be repaired
    seconds: float = 0.0
    index_problem: str | None = None  # what was wrong with the (SQLite) index file
    index_rebuilt: str | None = None  # where the damaged index file was moved before the rebuild
    index_repaired: bool = False  # the rebuild counts as a repair (--repair was given)
    # The library (LIBRARY_DIR), relative to it: links whose object is gone, files that link to no object.
    library_missing: list[str] = field(default_factory=list)
    library_stray: list[str] = field(default_factory=list)
    # The records database (RECORDS_DB): "<platform> <kind> <key> → <path>" of rows whose object is not stored.
    records_missing: list[str] = field(default_factory=list)
    records_problem: str | None = None  # the database could not be read

    @property
    def clean(self) -> bool:
        """True when nothing is wrong now: no problems, or every problem repaired."""
        fixed = set(self.repaired) | set(self.adopted) | set(self.quarantined)
        return (not self.unrepaired and {*self.corrupt, *self.missing, *self.orphans} <= fixed
                and (not self.index_problem or self.index_repaired)
                and not self.library_missing and not self.library_stray
                and not self.records_missing and not self.records_problem)


def run_verify(*, store: ContentAddressedStore, index: MediaIndex, repair: bool = False,
               fetch: Fetcher | None = None, referer_for: Callable[[SourceRecord], str | None] | None = None,
               progress: ProgressCallback | None = None, allowed_schemes: Sequence[str] = ("http", "https"),
               ) -> VerifyReport:
    """Re-hash every object of ``store``, compare with ``index``, and with ``repair`` fix what can be fixed:
    ``fetch`` downloads a source (``referer_for`` gives its Referer); only ``allowed_schemes`` are fetched."""
    started = time.monotonic()
    report = VerifyReport()
    indexed: dict[str, ObjectRecord] = {rec.path: rec for rec in index.iter_objects()}
    files = list(store.iter_objects())
    for n, relpath in enumerate(files, 1):
        path = store.root / relpath
        try:
            name_sha, _ = parse_object_relpath(relpath)
        except StoreError:
            name_sha = None
        try:
            digest, size = hash_file(path)
        except OSError as exc:
            report.corrupt.append(relpath)
            report.unrepaired[relpath] = f"unreadable: {exc}"
            continue
        report.checked += 1
        report.bytes_checked += size
        if name_sha is None or os.path.islink(path):
            report.orphans.append(relpath)
        elif digest != name_sha:
            report.corrupt.append(relpath)
        elif relpath not in indexed:
            report.orphans.append(relpath)
        else:
            report.ok += 1
        if progress is not None:
            progress(n, len(files), report.bytes_checked)
    report.missing = sorted(set(indexed) - set(files))

    if repair:
        if fetch is None:
            raise ValueError("a repair needs a fetch function")
        for relpath in report.corrupt + report.missing:
            if relpath in report.unrepaired:
                continue  # unreadable
            if relpath in report.corrupt:
                report.quarantined.append(relpath)
                store.quarantine(relpath)
            record = indexed.get(relpath)
            _refetch(relpath, store=store, index=index, fetch=fetch, referer_for=referer_for,
                     allowed_schemes=allowed_schemes, report=report, size=record.size if record else None)
        for relpath in report.orphans:
            _settle_orphan(relpath, store=store, index=index, report=report)
    report.seconds = time.monotonic() - started
    return report


def _refetch(relpath: str, *, store: ContentAddressedStore, index: MediaIndex, fetch: Fetcher,
             referer_for: Callable[[SourceRecord], str | None] | None, allowed_schemes: Sequence[str],
             report: VerifyReport, size: int | None = None) -> None:
    try:
        sha, ext = parse_object_relpath(relpath)
    except StoreError:
        report.unrepaired[relpath] = "not an object path"
        return
    sources = index.sources(sha)
    if not sources:
        report.unrepaired[relpath] = "no recorded URL"
        return
    if size is not None:
        free = free_bytes(store.tmp_dir)
        if free is not None and size > free:
            report.unrepaired[relpath] = f"{size} bytes to download, {free} free"
            return
    errors = []
    for source in sources:
        if urlsplit(source.url).scheme.lower() not in allowed_schemes:
            errors.append(f"{source.url}: scheme not allowed")
            continue
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(prefix="repair.", suffix=".part", dir=store.tmp_dir)
            with os.fdopen(fd, "wb") as raw:
                # Never more than the object the index knows: a wrong or endless body stops at that size.
                dest = _HashingWriter(raw, limit=size)
                fetch(source.url, referer_for(source) if referer_for else None, dest)
            if dest.digest.hexdigest() != sha:
                errors.append(f"{source.url}: served different bytes")
                continue
            store.publish_file(tmp, ext=ext, sha256=sha)  # a rename; the temp file is gone afterwards
        except Exception as exc:  # noqa: BLE001 - any failure of one source (network, disk): try the next
            errors.append(f"{source.url}: {type(exc).__name__}: {exc}")
            continue
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        report.repaired.append(relpath)
        return
    report.unrepaired[relpath] = "; ".join(errors)


class _HashingWriter:
    """The ``dest`` a fetcher writes into: SHA-256s what goes through to the file, and refuses to write past
    ``limit`` bytes (the size of the object being repaired)."""

    def __init__(self, raw: IO[bytes], *, limit: int | None = None) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.limit = limit
        self.written = 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        if self.limit is not None and self.written > self.limit:
            raise OSError(f"body larger than the {self.limit} bytes of the object")
        self.digest.update(data)
        return self.raw.write(data)


def _settle_orphan(relpath: str, *, store: ContentAddressedStore, index: MediaIndex,
                   report: VerifyReport) -> None:
    if relpath in report.corrupt:
        return
    try:
        obj = object_record_of(store.root, relpath)
    except StoreError:
        # Not something the store ever writes: move it out of objects/ (never delete: it may be evidence).
        dest = store.quarantine_dir / f"orphan.{time.time_ns()}.{os.path.basename(relpath)}"
        os.replace(store.root / relpath, dest)
        report.quarantined.append(relpath)
        return
    index.record(obj=obj, key=None, url=None)
    report.adopted.append(relpath)


def fetch_url(url: str, referer: str | None, dest: IO[bytes], *, timeout: float = 60.0,
              max_bytes: int = 16 * 1024**3, user_agent: str = "mediacrawler-verify") -> None:
    """GET ``url`` (http/https only) and stream the body into ``dest`` in 1 MiB reads; raises on a non-200
    status, a body larger than ``max_bytes`` or shorter than its ``Content-Length``."""
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        raise ValueError(f"refusing to fetch {url!r}")
    headers = {"User-Agent": user_agent, "Accept-Encoding": "identity"}
    if referer:
        headers["Referer"] = referer
    req = urllib.request.Request(url, headers=headers)  # noqa: S310 - scheme checked above
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        if resp.status != 200:
            raise OSError(f"HTTP {resp.status}")
        declared = resp.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise OSError(f"body of {declared} bytes is larger than {max_bytes}")
        received = 0
        # Bounded: each pass reads at least one byte, and at most max_bytes + 1 are accepted.
        while chunk := resp.read(_CHUNK):
            received += len(chunk)
            if received > max_bytes:
                raise OSError(f"body larger than {max_bytes} bytes")
            dest.write(chunk)
    if declared is not None and declared.isdigit() and received != int(declared):
        raise OSError(f"body ended after {received} of {declared} bytes")


class Progress:
    """A progress display on ``stream``: one self-overwriting line on a terminal, a line every few seconds
    otherwise (logs stay readable)."""

    def __init__(self, stream: TextIO, *, interval: float = 0.2, log_interval: float = 5.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = interval if self.tty else log_interval
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int, nbytes: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < self.interval:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        pct = 100.0 * done / total if total else 100.0
        line = (f"verify: {done}/{total} files ({pct:5.1f}%), {nbytes / 2**20:.1f} MiB, "
                f"{nbytes / 2**20 / elapsed:.1f} MiB/s")
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done >= total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def format_report(report: VerifyReport, *, repair: bool) -> list[str]:
    """The lines printed after a run: one per problem, then a summary."""
    lines = []
    if report.index_problem:
        line = f"index    corrupt: {report.index_problem}"
        if report.index_rebuilt:
            line += (f"; moved aside to {report.index_rebuilt} and rebuilt from the objects "
                     "(their post and URL rows are lost)")
        lines.append(line)
    lines += [f"corrupt  {p}" for p in report.corrupt]
    lines += [f"missing  {p}" for p in report.missing]
    lines += [f"orphan   {p}" for p in report.orphans]
    lines += [f"library  missing object: {p}" for p in report.library_missing]
    lines += [f"library  stray: {p}" for p in report.library_stray]
    lines += [f"records  missing object: {p}" for p in report.records_missing]
    if report.records_problem:
        lines.append(f"records  unreadable: {report.records_problem}")
    if repair:
        lines += [f"repaired {p}" for p in report.repaired]
        lines += [f"adopted  {p}" for p in report.adopted]
        lines += [f"quarantined {p}" for p in report.quarantined]
        lines += [f"UNREPAIRED {p}: {why}" for p, why in report.unrepaired.items()]
    summary = (f"verify: {report.checked} objects, {report.bytes_checked / 2**20:.1f} MiB in "
               f"{report.seconds:.1f}s: {report.ok} ok, {len(report.corrupt)} corrupt, "
               f"{len(report.missing)} missing, {len(report.orphans)} orphan")
    if repair:
        summary += (f"; repaired {len(report.repaired)}, adopted {len(report.adopted)}, "
                    f"quarantined {len(report.quarantined)}, unrepaired {len(report.unrepaired)}")
    if report.library_missing or report.library_stray:
        summary += (f"; library: {len(report.library_missing)} missing objects, {len(report.library_stray)} stray "
                    "(mediacrawler library rebuild --prune relinks and removes them)")
    if report.records_missing:
        summary += (f"; records: {len(report.records_missing)} rows name an object the store does not hold "
                    "(--repair fetches it again when the index has its URL; else crawl its post again)")
    lines.append(summary)
    if repair and report.unrepaired:
        # A video assembled from a manifest cannot be fetched back from one URL; its post can.
        lines.append("verify: an unrepaired object (e.g. a video assembled from HLS/DASH fragments) is out of the "
                     "store now; crawling its post again downloads it again")
    lines.append("verify: OK" if report.clean else "verify: PROBLEMS FOUND")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``verify`` options to ``parser`` (the CLI's subparser, or a parser of its own)."""
    parser.add_argument("--store", metavar="PATH", help="media store root (default: FILES_STORE)")
    parser.add_argument("--repair", action="store_true",
                        help="quarantine corrupt files and re-download them (and missing ones) from recorded URLs")
    parser.add_argument("--index", choices=("sqlite", "redis"), help="index backend (default: from settings)")
    parser.add_argument("--redis-url", metavar="URL", help="Redis of the shared index (default: REDIS_URL)")
    parser.add_argument("--library", metavar="PATH",
                        help="library to check (default: LIBRARY_DIR, or library/ beside the store)")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    return add_settings_option(parser)


def run_from_args(args: argparse.Namespace, *, settings: BaseSettings, out: TextIO | None = None,
                  err: TextIO | None = None) -> int:
    """Run ``verify`` for parsed ``args`` and the settings of :func:`main` (checked there); the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    conf = settings.copy()  # the index's settings, with --index and --redis-url over them
    for name, given in (("MEDIA_INDEX", args.index), ("REDIS_URL", args.redis_url)):
        if given:
            conf.set(name, given, priority="cmdline")
    root = args.store or setting(settings, "FILES_STORE")
    missing = missing_dir(str(root).split("://", 1)[-1], setting="FILES_STORE",
                          given=f"--store {args.store}" if args.store else None)
    if missing:
        err.write(f"verify: no media store: {missing}\n")
        return 2
    store = ContentAddressedStore(root)
    try:
        # A corrupt SQLite index is moved aside and rebuilt from the objects here (one WARNING on stderr).
        index = index_class(conf).from_settings(conf, store_root=store.root)
    except NotConfigured as exc:
        err.write(f"verify: {exc}\n")
        return 2
    except sqlite3.Error as exc:
        err.write(f"verify: cannot open the media index: {exc}\n")
        return EXIT_PROBLEMS
    allowed = tuple(allowed_schemes(settings))
    user_agent = setting(settings, "USER_AGENT")

    def referer_for(source: SourceRecord) -> str | None:
        platform = (source.key or "").split("/", 1)[0]
        return settings.get(f"{platform.upper()}_MEDIA_REFERER") if platform else None

    def fetch(url: str, referer: str | None, dest: IO[bytes]) -> None:
        # Streamed to disk, so the cap is the large-file one, not DOWNLOAD_MAXSIZE (a limit on memory).
        fetch_url(url, referer, dest, user_agent=user_agent,
                  max_bytes=setting(settings, "MEDIA_SEGMENT_MAX_FILE_SIZE"))

    def verify() -> VerifyReport:
        return run_verify(store=store, index=index, repair=args.repair, fetch=fetch, referer_for=referer_for,
                          progress=None if args.no_progress else Progress(err), allowed_schemes=allowed)

    try:
        problem, rebuilt = _check_index(index, repair=args.repair)
        try:
            report = verify()
        except sqlite3.DatabaseError as exc:
            # Damage that neither check saw (e.g. in the WAL written since): rebuilt on demand, then once more.
            if not (is_corruption(exc) and args.repair and isinstance(index, SQLiteMediaIndex)):
                err.write(f"verify: the media index is damaged ({exc}); 'mediacrawler verify --repair' "
                          "rebuilds it from the objects\n")
                return EXIT_PROBLEMS
            problem, rebuilt = str(exc), _rebuild(index, str(exc))
            report = verify()
    except sqlite3.Error as exc:
        err.write(f"verify: media index error: {exc}\n")
        return EXIT_PROBLEMS
    finally:
        with contextlib.suppress(sqlite3.Error):
            index.close()
    report.index_problem, report.index_rebuilt = problem, rebuilt
    library = args.library or (setting(settings, "LIBRARY_DIR") or default_library_dir(str(store.root))
                               if setting(settings, "LIBRARY_ENABLED") else None)
    if library and os.path.isdir(library):
        found = check_library(library, store_root=store.root)
        report.library_missing, report.library_stray = found.missing or [], found.stray or []
    report.index_repaired = bool(rebuilt) and args.repair
    report.records_missing, report.records_problem = check_records(settings, store.root)
    for line in format_report(report, repair=args.repair):
        out.write(line + "\n")
    return EXIT_OK if report.clean else EXIT_PROBLEMS


def check_records(settings: BaseSettings, store_root: str | os.PathLike[str]) -> tuple[list[str], str | None]:
    """The media rows of the records database whose object (or a derived one) is not in the store under
    *store_root*, as ``"<platform> <kind> <key> → <path>"``; and why the database could not be read. Nothing to
    check where there is no database (RECORDS_ENABLED off, its SQLite file not made yet)."""
    try:
        db, _ = open_records(settings)
    except RecordsUnreadable as exc:
        return [], str(exc)
    if db is None:
        return [], None
    try:
        return [f"{asset} → {path}" for asset, path in stored_objects(db)
                if not os.path.isfile(os.path.join(store_root, path))], None
    finally:
        db.close()


def _check_index(index: MediaIndex, *, repair: bool) -> tuple[str | None, str | None]:
    """``(what is wrong with the index file, where it was moved aside)``: rebuilt on open already, or found by
    the full check now (and rebuilt with ``repair``)."""
    if not isinstance(index, SQLiteMediaIndex):
        return None, None
    if index.moved_aside is not None:
        return index.corruption, index.moved_aside.name
    problem = index.check()
    if problem is None or not repair:
        return problem, None
    return problem, _rebuild(index, problem)


def _rebuild(index: SQLiteMediaIndex, reason: str) -> str:
    index.rebuild(reason)
    assert index.moved_aside is not None
    return index.moved_aside.name


def main(argv: Sequence[str] | None = None) -> int:
    """``mediacrawler verify`` as a standalone entry point: parse ``argv`` and run; returns the exit status."""
    parser = add_arguments(argparse.ArgumentParser(
        prog="mediacrawler verify", description="Re-hash every stored media file; report corrupt, missing and "
        "orphan files (--repair: quarantine, re-download, adopt)."))
    parsed = checked_settings(parser, argv)
    if isinstance(parsed, int):
        return parsed
    args, settings = parsed
    return run_from_args(args, settings=settings)

