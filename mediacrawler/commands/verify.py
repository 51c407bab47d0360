"""``mediacrawler verify [--store PATH] [--repair]``: the command line around
:func:`mediacrawler.media.verify.run_verify` (docs/media.md, "mediacrawler verify"). Exit 0 when all is well, 1
when anything is (still) wrong, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
import time
import urllib.request
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from scrapy.exceptions import NotConfigured

from mediacrawler import settings as defaults
from mediacrawler.media.index import MediaIndex, SourceRecord, SQLiteMediaIndex, index_class, is_corruption
from mediacrawler.media.store import ContentAddressedStore
from mediacrawler.media.urls import allowed_schemes
from mediacrawler.media.verify import VerifyReport, run_verify

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

EXIT_OK = 0
EXIT_PROBLEMS = 1
#: Bytes per read of a repair download (the memory a repair needs, whatever the file size).
_CHUNK = 1024 * 1024


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
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    return parser


def run_from_args(args: argparse.Namespace, *, settings: BaseSettings | None = None,
                  out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``verify`` for parsed ``args``; return the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    if settings is None:
        from scrapy.utils.project import get_project_settings  # noqa: PLC0415 - only the CLI needs it

        settings = get_project_settings()
    conf: dict[str, Any] = {
        "MEDIA_INDEX": args.index or settings.get("MEDIA_INDEX"),
        "REDIS_URL": args.redis_url or settings.get("REDIS_URL"),
        "MEDIA_INDEX_PATH": settings.get("MEDIA_INDEX_PATH"),
        "MEDIA_INDEX_REDIS_PREFIX": settings.get("MEDIA_INDEX_REDIS_PREFIX"),
        "MEDIA_INDEX_BUSY_TIMEOUT": settings.get("MEDIA_INDEX_BUSY_TIMEOUT"),
    }
    root = args.store or settings.get("FILES_STORE") or "files"
    if not os.path.isdir(str(root).split("://", 1)[-1]):
        err.write(f"verify: no media store at {root}\n")
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
    user_agent = settings.get("USER_AGENT") or "mediacrawler-verify"

    def referer_for(source: SourceRecord) -> str | None:
        platform = (source.key or "").split("/", 1)[0]
        return settings.get(f"{platform.upper()}_MEDIA_REFERER") if platform else None

    def fetch(url: str, referer: str | None, dest: IO[bytes]) -> None:
        # Streamed to disk, so the cap is the large-file one, not DOWNLOAD_MAXSIZE (a limit on memory).
        fetch_url(url, referer, dest, user_agent=user_agent,
                  max_bytes=settings.getint("MEDIA_SEGMENT_MAX_FILE_SIZE", defaults.MEDIA_SEGMENT_MAX_FILE_SIZE))

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
    report.index_repaired = bool(rebuilt) and args.repair
    for line in format_report(report, repair=args.repair):
        out.write(line + "\n")
    return EXIT_OK if report.clean else EXIT_PROBLEMS


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
    args = parser.parse_args(argv)
    return run_from_args(args)

