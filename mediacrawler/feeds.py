"""SyncedFileFeedStorage: local feed files that a checkpoint can flush and fsync before it advances, so it never
counts records a hard kill could still lose (docs/architecture.md, "Checkpoints")."""

from __future__ import annotations

import logging
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from scrapy.exporters import JsonLinesItemExporter
from scrapy.extensions.feedexport import FileFeedStorage
from scrapy.utils.misc import load_object

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

#: Sent by :class:`SyncedFileFeedStorage` right after it opened a feed file, before the exporter writes to it.
#: Arguments: ``path`` (str, absolute), ``size`` (int, its size at opening).
feed_opened = object()

#: Feed formats with one record per line, whose torn tail can be cut without touching whole records (any format
#: whose exporter is a JsonLinesItemExporter counts too).
LINE_FORMATS = frozenset({"jsonlines", "jsonl", "jl"})


def is_line_format(format_: str, crawler: Crawler | None) -> bool:
    """Whether feeds of *format_* hold one JSON record per line."""
    if format_.lower() in LINE_FORMATS:
        return True
    if crawler is None:
        return False
    path = crawler.settings.getwithbase("FEED_EXPORTERS").get(format_)
    try:
        exporter = load_object(path) if path else None
    except (ImportError, NameError, ValueError):
        return False
    return isinstance(exporter, type) and issubclass(exporter, JsonLinesItemExporter)


@dataclass
class FeedMark:
    """How far a local feed file is durable: ``size`` bytes of ``path`` are on disk (after :func:`sync_feeds`)."""

    path: str
    size: int
    line_format: bool = True
    synced: bool = True


@dataclass
class _OpenFeed:
    path: Path
    file: IO[bytes]
    line_format: bool
    synced: bool


# Per crawler, every feed file its storages opened in this process (closed ones too: their last size is still a
# mark). Weak keys: a finished crawler takes its list with it.
_FEEDS: weakref.WeakKeyDictionary[Any, list[_OpenFeed]] = weakref.WeakKeyDictionary()


def repair_torn_tail(path: Path | str) -> int:
    """Cut a JSON Lines file back to its last complete line; returns the number of bytes removed.

    A kill in the middle of a buffer flush can leave a partial record at the end of the file; appending to it would
    glue the next record onto it and make both unreadable.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with path.open("r+b") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # Walk back in blocks to the last newline (records are small, one block is the usual case).
        end = size
        keep = 0
        block = 64 * 1024
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            chunk = f.read(end - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            end = start
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return size - keep


def sync_feeds(crawler: Crawler) -> list[FeedMark]:
    """Flush and fsync every feed file opened for *crawler*; return where each one is durable up to.

    Files already closed were fsynced on close (:meth:`SyncedFileFeedStorage.store`); their mark is their size.
    """
    marks: list[FeedMark] = []
    for feed in _FEEDS.get(crawler, []):
        if not feed.file.closed:
            feed.file.flush()
            if feed.synced:
                os.fsync(feed.file.fileno())
            size = os.fstat(feed.file.fileno()).st_size
        else:
            try:
                size = feed.path.stat().st_size
            except FileNotFoundError:
                continue
        marks.append(FeedMark(str(feed.path), size, feed.line_format, feed.synced))
    return marks


def has_feeds(crawler: Crawler) -> bool:
    """Whether a :class:`SyncedFileFeedStorage` opened a file for *crawler* yet (feeds open at the first item)."""
    return bool(_FEEDS.get(crawler))


class SyncedFileFeedStorage(FileFeedStorage):
    """A local file feed storage whose open files :func:`sync_feeds` can flush and fsync (docs/architecture.md)."""

    def __init__(self, uri: str, *, feed_options: dict[str, Any] | None = None, crawler: Crawler | None = None):
        super().__init__(uri, feed_options=feed_options)
        feed_options = feed_options or {}
        self.crawler = crawler
        self.line_format = is_line_format(str(feed_options.get("format", "")), crawler)
        # A postprocessing plugin (gzip, lzma…) buffers on its own; flushing the file under it is not enough.
        self.synced = not feed_options.get("postprocessing")

    @classmethod
    def from_crawler(cls, crawler: Crawler, uri: str, *, feed_options: dict[str, Any] | None = None) -> Self:
        return cls(uri, feed_options=feed_options, crawler=crawler)

    def open(self, spider: Spider) -> IO[bytes]:
        path = Path(self.path)
        if self.write_mode == "ab" and self.line_format:
            removed = repair_torn_tail(path)
            if removed:
                logger.warning("feed %s ended with a torn record (%d bytes, left by a hard kill); cut it off",
                               path, removed)
        file = super().open(spider)
        if self.crawler is not None:
            _FEEDS.setdefault(self.crawler, []).append(_OpenFeed(path.resolve(), file, self.line_format,
                                                                 self.synced))
            # The buffer may spill records to disk before the next checkpoint write; whoever keeps marks must
            # know where this file started first (a kill in between would otherwise hide those records).
            self.crawler.signals.send_catch_log(signal=feed_opened, path=str(path.resolve()),
                                                size=os.fstat(file.fileno()).st_size)
        return file

    def store(self, file: IO[bytes]) -> Deferred[None] | None:
        # close() flushes to the OS but does not reach the disk; the feed is durable only once fsynced.
        if not file.closed:
            file.flush()
            os.fsync(file.fileno())
        return super().store(file)
