"""Prove that the media store holds what the index says: re-hash every object, compare with the index, and with
``repair`` fix what can be fixed. What each finding means: docs/media.md, "mediacrawler verify"; the command line:
mediacrawler/commands/verify.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO
from urllib.parse import urlsplit

from mediacrawler.fsutil import free_bytes
from mediacrawler.media.index import MediaIndex, ObjectRecord, SourceRecord, object_record_of
from mediacrawler.media.store import ContentAddressedStore, StoreError, hash_file, parse_object_relpath

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

    @property
    def clean(self) -> bool:
        """True when nothing is wrong now: no problems, or every problem repaired."""
        fixed = set(self.repaired) | set(self.adopted) | set(self.quarantined)
        return (not self.unrepaired and {*self.corrupt, *self.missing, *self.orphans} <= fixed
                and (not self.index_problem or self.index_repaired))


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
