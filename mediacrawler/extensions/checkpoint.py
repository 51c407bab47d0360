"""Per-job resume checkpoints: a page/cursor watermark that advances only when a page's posts are really stored.

One checkpoint per job, keyed by spider and target (``PlatformSpider.job``, e.g. ``weibo-uid-7365120894``,
``weibo-keyword-<slug>``), so two crawls of one platform never share one. With the ``file`` backend it is
``CHECKPOINT_DIR/<job>.json``, always a complete JSON document (temp file + fsync + rename + fsync of the
directory), schema version :data:`SCHEMA_VERSION`::

    {"schema": 1, "key": "weibo-uid-7365120894", "spider": "weibo",
     "watermark": 12,                        # every page <= 12 parsed and all its posts out of the pipelines
     "next": {"page": 13, "cursor": null},   # what fetches page 13 (cursor for since_id/after/max_cursor APIs)
     "stored": {"13": ["5012…", …]},         # posts of pages past the watermark already stored
     "failed_pages": [], "last_page": null,
     "feeds": [{"path": "/abs/output/weibo/weibo-uid-7365120894.jsonl", "size": 48213}],
     "seq": 41, "updated_at": "2026-11-28T02:00:00Z"}

How the watermark moves (:class:`CheckpointExtension`):

- ``page_parsed`` (sent by the spider before it yields the page's posts) opens a page with the ids it will emit;
  ``item_scraped``/``item_dropped`` close them one by one. When every page up to N is closed, N is the watermark.
- ``page_failed`` and ``item_error`` pin the page: the watermark never passes it in this run, so the next run
  fetches it again (posts of later pages it already stored are in ``stored`` and are not emitted twice).
- Before every write, every local feed file is flushed and fsynced (:mod:`mediacrawler.extensions.feeds`): the
  checkpoint never claims more than the export holds on disk. ``feeds`` records how far each file was durable, so
  the next run can also recognise records written after the last checkpoint and before a hard kill.

At start (``spider_opened``): ``-a start=N`` wins; else ``-a reset_checkpoint=true`` deletes the checkpoint and the
crawl starts at page 1; else the checkpoint says where to resume (``spider.resume``), in one log line. A checkpoint
that cannot be read is moved aside to ``<job>.json.corrupt`` with a warning, and the crawl starts at page 1.

At the end (``spider_closed``): reason ``finished`` *and* the source completed (its last page reached and every
page up to it stored) deletes the checkpoint; any other ending keeps it.

:class:`CheckpointSkipPipeline` (first in ``ITEM_PIPELINES``) drops the posts the interrupted run already stored.
``mediacrawler checkpoints list|show KEY|reset KEY`` is :func:`main`. Checkpoints hold page numbers, platform
cursors and post ids only: never a cookie, token or URL.

Settings:

- ``CHECKPOINT_ENABLED`` (default ``True``): the extension and the skip pipeline are off when ``False``.
- ``CHECKPOINT_DIR`` (default ``"checkpoints"``): where the ``file`` backend keeps ``<job>.json``.
- ``CHECKPOINT_BACKEND`` (default ``"file"``; ``"redis"`` for workers): a name from :data:`CHECKPOINT_BACKENDS` or
  the import path of a store class with ``from_settings(settings)``. A store with ``shared = True``
  (:class:`mediacrawler.distributed.checkpoint.RedisCheckpointStore`) puts the extension in its *shared mode*: no
  local watermark; page and item events go in batches to the store, which advances the watermark for every worker
  of the job (the batch waits until the local feeds are flushed and fsynced, and is sent before the scheduler
  acknowledges the requests it covers). Workers open, join and clear a job's checkpoint on the ``job_started`` and
  ``job_finished`` signals. See docs/operations.md, "Many workers on one Redis".
- ``CHECKPOINT_REDIS_PREFIX``, ``CHECKPOINT_REDIS_INTERVAL``: the Redis keys, and seconds between two batches.
- ``CHECKPOINT_SYNC_FEEDS`` (default ``True``): flush and fsync the local feeds before each write. Turning it off
  makes writes cheaper and lets a hard kill lose the records the checkpoint already counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from itemadapter import ItemAdapter, is_item
from scrapy import signals
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.misc import load_object
from scrapy.utils.reactor import CallLaterOnce
from twisted.internet.task import LoopingCall

from mediacrawler import signals as mc_signals
from mediacrawler.contracts import Resume
from mediacrawler.extensions.feeds import (
    FeedMark,
    SyncedFileFeedStorage,
    feed_opened,
    repair_torn_tail,
    sync_feeds,
)
from mediacrawler.fsutil import fsync_dir, remove_stray_temps, write_atomic

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: Version of the checkpoint document; a document with another version is unreadable (moved aside).
SCHEMA_VERSION = 1

#: Short names accepted by ``CHECKPOINT_BACKEND``.
CHECKPOINT_BACKENDS: dict[str, str] = {
    "file": "mediacrawler.extensions.checkpoint.FileCheckpointStore",
    "redis": "mediacrawler.distributed.checkpoint.RedisCheckpointStore",
}

# Job keys become file names: no separators, no leading dot, nothing a shell or Windows would trip over.
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]{0,199}$")


class CheckpointCorrupt(Exception):
    """A checkpoint exists but cannot be used: not JSON, truncated, wrong schema or wrong key."""


def check_key(key: str) -> str:
    """*key* if it is a valid job key (file-name safe), else ValueError."""
    if not isinstance(key, str) or not _KEY_RE.match(key) or key.endswith((".json", ".corrupt", ".tmp")):
        raise ValueError(f"not a valid checkpoint key: {key!r}")
    return key


def _utc_now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class Checkpoint:
    """What one job's checkpoint says. ``watermark`` 0 means no page is done yet."""

    key: str
    spider: str
    watermark: int = 0
    next_page: int = 1
    next_cursor: str | None = None
    #: Post ids of pages past the watermark that are already stored, by page.
    stored: dict[int, list[str]] = field(default_factory=dict)
    failed_pages: list[int] = field(default_factory=list)
    #: The page the platform said was the last one, once parsed.
    last_page: int | None = None
    feeds: list[FeedMark] = field(default_factory=list)
    #: Incremented on every write of this job's checkpoint (monotonic across runs).
    seq: int = 0
    updated_at: str | None = None

    def stored_ids(self) -> set[str]:
        return {post_id for ids in self.stored.values() for post_id in ids}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "key": self.key,
            "spider": self.spider,
            "watermark": self.watermark,
            "next": {"page": self.next_page, "cursor": self.next_cursor},
            "stored": {str(page): sorted(ids) for page, ids in sorted(self.stored.items()) if ids},
            "failed_pages": sorted(self.failed_pages),
            "last_page": self.last_page,
            "feeds": [{"path": m.path, "size": m.size} for m in self.feeds if m.line_format],
            "seq": self.seq,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, data: Any, *, key: str | None = None) -> Checkpoint:
        """Validate a decoded document; CheckpointCorrupt when anything is off."""
        try:
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            if data.get("schema") != SCHEMA_VERSION:
                raise ValueError(f"schema {data.get('schema')!r}, this version reads {SCHEMA_VERSION}")
            cp_key = check_key(data["key"])
            if key is not None and cp_key != key:
                raise ValueError(f"key {cp_key!r} in the file of {key!r}")
            nxt = data["next"]
            cp = cls(
                key=cp_key,
                spider=_typed(data["spider"], str),
                watermark=_typed(data["watermark"], int),
                next_page=_typed(nxt["page"], int),
                next_cursor=_typed(nxt.get("cursor"), str, optional=True),
                stored={int(page): [_typed(i, str) for i in ids] for page, ids in dict(data["stored"]).items()},
                failed_pages=[_typed(p, int) for p in data.get("failed_pages") or []],
                last_page=_typed(data.get("last_page"), int, optional=True),
                feeds=[FeedMark(_typed(m["path"], str), _typed(m["size"], int)) for m in data.get("feeds") or []],
                seq=_typed(data.get("seq", 0), int),
                updated_at=_typed(data.get("updated_at"), str, optional=True),
            )
            if cp.watermark < 0 or cp.next_page != cp.watermark + 1:
                raise ValueError(f"watermark {cp.watermark} and next page {cp.next_page} disagree")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointCorrupt(f"{type(e).__name__}: {e}") from None
        return cp


def _typed(value: Any, kind: type, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    # bool is an int in Python, never in a checkpoint.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value


# --- Storage ---------------------------------------------------------------------------------------------------


def write_json_atomic(path: Path | str, data: Any) -> None:
    """Publish *data* as JSON at *path* with :func:`mediacrawler.fsutil.write_atomic` (temp, fsync, rename, fsync
    of the directory): a reader sees the previous complete file or the new one, never a mix."""
    write_atomic(path, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8") + b"\n")


class CheckpointStore(Protocol):
    """Where checkpoints live. Every method takes or returns whole checkpoints; ``save`` is atomic."""

    def location(self, key: str) -> str: ...

    def load(self, key: str) -> Checkpoint | None: ...

    def save(self, checkpoint: Checkpoint) -> None: ...

    def delete(self, key: str) -> bool: ...

    def quarantine(self, key: str) -> str | None: ...

    def keys(self) -> list[str]: ...


class FileCheckpointStore:
    """Checkpoints as ``<directory>/<key>.json`` files (``CHECKPOINT_BACKEND = "file"``)."""

    suffix = ".json"

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(settings.get("CHECKPOINT_DIR") or "checkpoints")

    def path(self, key: str) -> Path:
        return self.directory / f"{check_key(key)}{self.suffix}"

    def location(self, key: str) -> str:
        return str(self.path(key))

    def load(self, key: str) -> Checkpoint | None:
        """The checkpoint of *key*, ``None`` when there is none; CheckpointCorrupt when it cannot be used."""
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CheckpointCorrupt(f"unreadable: {e}") from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointCorrupt(f"not JSON ({len(raw)} bytes): {e}") from None
        return Checkpoint.from_dict(data, key=key)

    def save(self, checkpoint: Checkpoint) -> None:
        write_json_atomic(self.path(checkpoint.key), checkpoint.to_dict())

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        fsync_dir(self.directory)
        return True

    def quarantine(self, key: str) -> str | None:
        """Move an unusable checkpoint aside (``<key>.json.corrupt``, numbered if taken); returns the new name."""
        path = self.path(key)
        target = path.with_name(path.name + ".corrupt")
        n = 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.name}.corrupt.{n}")
        try:
            os.replace(path, target)
        except FileNotFoundError:
            return None
        fsync_dir(self.directory)
        return str(target)

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        keys = []
        for p in self.directory.glob(f"*{self.suffix}"):
            key = p.name[: -len(self.suffix)]
            if _KEY_RE.match(key):
                keys.append(key)
        return sorted(keys)

    def remove_stale_temps(self, key: str) -> None:
        """Delete temp files a killed writer of *key* left behind (they are never read)."""
        remove_stray_temps(self.path(key))


def store_from_settings(settings: BaseSettings) -> CheckpointStore:
    """The store ``CHECKPOINT_BACKEND`` names; NotConfigured when it names nothing usable."""
    name = str(settings.get("CHECKPOINT_BACKEND") or "file")
    path = CHECKPOINT_BACKENDS.get(name.lower(), name)
    try:
        cls = load_object(path)
    except (ImportError, NameError, ValueError) as e:
        raise NotConfigured(
            f"CHECKPOINT_BACKEND={name!r} is neither one of {sorted(CHECKPOINT_BACKENDS)} nor importable: {e}"
        ) from e
    store: CheckpointStore = cls.from_settings(settings)
    return store


# --- What a resumed run recognises as already stored ---------------------------------------------------------


def scan_feed_tail(mark: FeedMark, key: str) -> dict[int, set[str]]:
    """Post ids of job *key* in a JSON Lines feed after ``mark.size``: records exported after the last checkpoint.

    A hard kill can come after records reached the file and before the checkpoint that counts them; those records
    are stored all the same and must not be emitted again. A torn last line is cut first (it was never complete).
    A file shorter than the mark was rewritten since; it is read whole.
    """
    path = Path(mark.path)
    found: dict[int, set[str]] = {}
    try:
        repair_torn_tail(path)
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(mark.size if mark.size <= size else 0)
            for line in f:
                try:
                    record = json.loads(line)
                    source = record.get("source") or {}
                    if source.get("job") != key or not record.get("post_id"):
                        continue
                    page = int(source.get("page") or 0)
                except (ValueError, TypeError, AttributeError):
                    continue  # not one of our records
                found.setdefault(page, set()).add(str(record["post_id"]))
    except FileNotFoundError:
        return {}
    except OSError as e:
        logger.warning("checkpoint: cannot read feed %s to recognise stored posts: %s", path, e)
    return found


class AlreadyStored(DropItem):
    """The post was stored by an earlier, interrupted run of the same job."""


@dataclass
class _PageState:
    cursor: str | None
    next_cursor: str | None
    pending: Counter[str]
    is_last: bool = False
    failed: bool = False

    @property
    def done(self) -> bool:
        return not self.failed and not +self.pending


def _source_of(item: Any) -> tuple[str | None, int | None, str | None]:
    """(job, page, post_id) of an item, ``None`` parts when the item does not say."""
    if not is_item(item):
        return None, None, None
    adapter = ItemAdapter(item)
    source = adapter.get("source")
    if source is None:
        return None, None, None
    if is_item(source):
        source = ItemAdapter(source)
    job, page = source.get("job"), source.get("page")
    post_id = adapter.get("post_id")
    return job, (page if isinstance(page, int) else None), (str(post_id) if post_id else None)


# --- The extension -----------------------------------------------------------------------------------------------


class CheckpointExtension:
    """Keeps one resume checkpoint per job (see the module docstring for the settings and the semantics)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("CHECKPOINT_ENABLED", True):
            raise NotConfigured("CHECKPOINT_ENABLED is off")
        self.store = store_from_settings(settings)
        self.crawler = crawler
        assert crawler.stats is not None
        self.stats: StatsCollector = crawler.stats
        self.sync = settings.getbool("CHECKPOINT_SYNC_FEEDS", True)
        self.checkpoint: Checkpoint | None = None  # the state of the running job; None: not a checkpointed spider
        self.skip_ids: frozenset[str] = frozenset()
        self.skip_pipeline = False
        self._pages: dict[int, _PageState] = {}
        self._stored: dict[int, set[str]] = {}
        self._dirty = False
        # Writes are coalesced to one per reactor turn and happen after every item_scraped handler of the turn
        # (the feed exporter's included) has run, so the flush before the write covers every item it counts.
        self._commit_later = CallLaterOnce(self.commit)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.page_parsed, signal=mc_signals.page_parsed)
        crawler.signals.connect(self.page_failed, signal=mc_signals.page_failed)
        crawler.signals.connect(self.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(self.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(self.item_error, signal=signals.item_error)
        #: Shared mode (a Redis store): events waiting for the next batch, and the run they belong to.
        self.shared = bool(getattr(self.store, "shared", False))
        self._events: list[dict[str, Any]] = []
        self._token: str | None = None
        self._flusher: LoopingCall | None = None
        self._outage = False
        if self.shared:
            self.interval = settings.getfloat("CHECKPOINT_REDIS_INTERVAL")
            store: Any = self.store
            crawler.signals.connect(self.job_started, signal=store.job_started)
            crawler.signals.connect(self.job_finished, signal=store.job_finished)
            crawler.signals.connect(self.acks_pending, signal=store.acks_pending)
        elif self.sync:
            crawler.signals.connect(self.feed_opened, signal=feed_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # --- Start ---------------------------------------------------------------------------------------------------

    def spider_opened(self, spider: Spider) -> None:
        key = getattr(spider, "job", None)
        args = getattr(spider, "args", None)
        if not key or args is None or not hasattr(spider, "resume"):
            logger.debug("checkpoint: %s is not a platform spider; no checkpoint", spider.name)
            return
        if self.shared:
            self._flusher = LoopingCall(self._flush_shared)
            self._flusher.start(self.interval, now=False)
            if getattr(spider, "worker_id", None):
                return  # a worker opens each job's checkpoint on job_started
            # A one-job crawl: several processes may share its queue; one whose queue is seeded joins the run.
            store: Any = self.store
            try:
                joined = bool(getattr(spider, "distributed", False) and store.queue_seeded(spider.name, key))
            except Exception:  # noqa: BLE001 - Redis unreachable: _open_shared says so
                joined = False
            self._open_shared(spider, check_key(key), token=None, join=joined)
            return
        key = check_key(key)
        if isinstance(self.store, FileCheckpointStore):
            self.store.remove_stale_temps(key)
        old: Checkpoint | None = None
        if getattr(args, "reset_checkpoint", False):
            if self.store.delete(key):
                logger.info("%s: checkpoint reset (%s deleted)", key, self.store.location(key))
            self.stats.set_value("checkpoint/reset", True)
        else:
            try:
                old = self.store.load(key)
            except CheckpointCorrupt as e:
                moved = self.store.quarantine(key)
                logger.warning("%s: checkpoint %s is unusable (%s); moved aside to %s, starting from page 1",
                               key, self.store.location(key), e, moved)
                self.stats.inc_value("checkpoint/corrupt")
        start = getattr(args, "start", None)
        cp = Checkpoint(key=key, spider=spider.name, seq=old.seq if old else 0)
        if start is not None:
            # An explicit start wins; from here on the checkpoint tracks this run, pages before it are not ours.
            cp.watermark, cp.next_page = start - 1, start
            if old is not None:
                logger.info("%s: -a start=%d overrides the checkpoint (which said page %d)", key, start,
                            old.next_page)
        elif old is not None:
            cp.watermark, cp.next_page, cp.next_cursor = old.watermark, old.next_page, old.next_cursor
            # last_page is not carried over: only this run's own end-of-list signal may clear the checkpoint.
            cp.failed_pages = list(old.failed_pages)
            stored = {page: set(ids) for page, ids in old.stored.items()}
            # Records exported after the last checkpoint write, before the process died: stored all the same.
            for mark in old.feeds:
                for page, ids in scan_feed_tail(mark, key).items():
                    stored.setdefault(page, set()).update(ids)
            self._stored = {page: ids for page, ids in stored.items() if page > cp.watermark}
            self.skip_ids = frozenset(i for ids in stored.values() for i in ids)
            spider.resume = Resume(page=cp.next_page, cursor=cp.next_cursor)  # type: ignore[attr-defined]
            logger.info(
                "%s: resuming at page %d%s from checkpoint %s (pages up to %d done; %d posts of later pages "
                "already stored)", key, cp.next_page, f" (cursor {cp.next_cursor})" if cp.next_cursor else "",
                self.store.location(key), cp.watermark, len(self.skip_ids),
            )
            self.stats.set_value("checkpoint/resumed_at", cp.next_page)
            if self.skip_ids and not self.skip_pipeline:
                logger.warning("%s: CheckpointSkipPipeline is not in ITEM_PIPELINES; the %d posts already stored "
                               "will be emitted again", key, len(self.skip_ids))
        self.checkpoint = cp
        self._check_feeds(key)
        if old is not None and start is None:
            # Write the absorbed ids now: the feed marks they came from are replaced by this run's.
            self._dirty = True
            self.commit()

    def _check_feeds(self, key: str) -> None:
        if not self.sync:
            return
        storages = self.crawler.settings.getwithbase("FEED_STORAGES")
        for uri, options in self.crawler.settings.getdict("FEEDS").items():
            # The feed exporter's own lookup: the URI scheme, local files for anything it does not know.
            path = storages.get(urlparse(str(uri)).scheme) or storages.get("file")
            cls = load_object(path) if path else None
            if not (isinstance(cls, type) and issubclass(cls, SyncedFileFeedStorage)) or (options or {}).get(
                "postprocessing"
            ):
                logger.warning(
                    "%s: feed %s is not a synced local file: after a hard kill the checkpoint may count records "
                    "that never reached it (FEED_STORAGES: mediacrawler.extensions.feeds.SyncedFileFeedStorage)",
                    key, uri,
                )

    # --- Progress ------------------------------------------------------------------------------------------------

    def page_parsed(self, spider: Spider, page: int, cursor: str | None, next_cursor: str | None,
                    post_ids: Sequence[str], is_last: bool) -> None:
        cp = self.checkpoint
        if cp is None:
            return
        if self.shared:
            self._events.append({"t": "a", "p": page, "ids": [str(i) for i in post_ids], "c": next_cursor,
                                 "l": int(is_last)})
            return
        if page <= cp.watermark:
            logger.debug("%s: page %d parsed again, already under the watermark %d", cp.key, page, cp.watermark)
            return
        self._pages[page] = _PageState(cursor, next_cursor, Counter(str(i) for i in post_ids), is_last)
        if is_last:
            cp.last_page = page
        self._changed()

    def page_failed(self, spider: Spider, page: int, cursor: str | None, reason: str) -> None:
        cp = self.checkpoint
        if cp is None or page <= cp.watermark:
            return
        if self.shared:
            self._events.append({"t": "f", "p": page})
            logger.info("%s: page %d failed; the shared checkpoint stays before it", cp.key, page)
            return
        state = self._pages.setdefault(page, _PageState(cursor, None, Counter()))
        state.failed = True
        if page not in cp.failed_pages:
            cp.failed_pages.append(page)
        logger.info("%s: page %d failed; the checkpoint stays before it (next run fetches it again)", cp.key, page)
        self._changed()

    def item_scraped(self, item: Any, spider: Spider) -> None:
        self._item_left(item, stored=True)

    def item_dropped(self, item: Any, spider: Spider, exception: BaseException) -> None:
        # A post dropped because an earlier run stored it is still stored: keep it in the list past the watermark.
        self._item_left(item, stored=isinstance(exception, AlreadyStored))

    def item_error(self, item: Any, spider: Spider, failure: Any) -> None:
        # A pipeline error is not a reason to lose the post: its page stays before the watermark, so it is retried.
        self._item_left(item, stored=False, failed=True)

    def feed_opened(self, path: str, size: int) -> None:
        # Write now, with the new file's mark, before the exporter writes to it: its buffer can spill records to
        # disk before the next regular write, and a kill then must still let the next run find them.
        if self.checkpoint is None:
            return
        self._dirty = True
        self.commit()

    def _item_left(self, item: Any, *, stored: bool, failed: bool = False) -> None:
        cp = self.checkpoint
        if cp is None:
            return
        job, page, post_id = _source_of(item)
        if job != cp.key or page is None or post_id is None:
            return
        if self.shared:
            self._events.append({"t": "d", "p": page, "id": post_id, "s": int(stored), "f": int(failed)})
            return
        state = self._pages.get(page)
        if state is None:
            return  # under the watermark, or a page this run never opened
        if state.pending[post_id] > 0:
            state.pending[post_id] -= 1
        else:
            logger.debug("%s: post %s of page %d was not announced by page_parsed", cp.key, post_id, page)
        if stored:
            self._stored.setdefault(page, set()).add(post_id)
        if failed:
            state.failed = True
            if page not in cp.failed_pages:
                cp.failed_pages.append(page)
        self._changed()

    def already_stored(self, post_id: str) -> bool:
        """Whether an earlier, interrupted run of this job stored *post_id* (the skip pipeline asks)."""
        return post_id in self.skip_ids

    def _changed(self) -> None:
        self._advance()
        self._dirty = True
        self._commit_later.schedule()

    def _advance(self) -> None:
        cp = self.checkpoint
        assert cp is not None
        while (state := self._pages.get(cp.watermark + 1)) is not None and state.done:
            page = cp.watermark + 1
            cp.watermark, cp.next_page, cp.next_cursor = page, page + 1, state.next_cursor
            del self._pages[page]
            with contextlib.suppress(ValueError):
                cp.failed_pages.remove(page)
        for page in [p for p in self._stored if p <= cp.watermark]:
            del self._stored[page]
        self.stats.set_value("checkpoint/watermark", cp.watermark)

    # --- Writing -------------------------------------------------------------------------------------------------

    def commit(self) -> None:
        """Write the checkpoint if it changed: feeds first (flush + fsync), then the checkpoint, atomically."""
        cp = self.checkpoint
        if cp is None or not self._dirty:
            return
        self._dirty = False
        cp.feeds = sync_feeds(self.crawler) if self.sync else []
        cp.stored = {page: sorted(ids) for page, ids in self._stored.items()}
        cp.seq += 1
        cp.updated_at = _utc_now()
        try:
            self.store.save(cp)
        except OSError as e:
            # The previous checkpoint stays in place (atomic write); it is behind, which is safe.
            logger.error("%s: cannot write checkpoint %s: %s", cp.key, self.store.location(cp.key), e)
            self.stats.inc_value("checkpoint/write_errors")
            self._dirty = True
            return
        self.stats.inc_value("checkpoint/writes")

    def completed(self) -> bool:
        """The source is done: its last page was reached and every page up to it is stored."""
        cp = self.checkpoint
        return cp is not None and cp.last_page is not None and cp.watermark >= cp.last_page

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.shared:
            if self._flusher is not None and self._flusher.running:
                self._flusher.stop()
            if self.checkpoint is not None:
                # A worker's job in progress is not finished here (job_finished says when it is).
                self._end_shared(clear=reason == "finished" and not getattr(spider, "worker_id", None))
            return
        cp = self.checkpoint
        if cp is None:
            return
        self._commit_later.cancel()
        if reason == "finished" and self.completed():
            # The export must hold every record on disk before the checkpoint goes: a kill between the two
            # would otherwise lose the last records with nothing left to say so.
            try:
                if self.sync:
                    sync_feeds(self.crawler)
                self.store.delete(cp.key)
            except OSError as e:
                # Kept, and behind: the next run re-fetches what this one stored and dedupe drops the repeats.
                logger.error("%s: cannot clear checkpoint %s: %s", cp.key, self.store.location(cp.key), e)
                self.stats.inc_value("checkpoint/write_errors")
                return
            self.stats.set_value("checkpoint/cleared", True)
            logger.info("%s: source completed (last page %d stored); checkpoint cleared", cp.key, cp.last_page)
            return
        self._dirty = True
        self.commit()
        why = f"closed: {reason}"
        if reason == "finished":
            why = (f"page {min(cp.failed_pages)} failed" if cp.failed_pages else
                   "the last page was not reached" if cp.last_page is None else "not every page was stored")
        logger.info("%s: checkpoint kept at page %d (%s); the next run resumes at page %d",
                    cp.key, cp.watermark, why, cp.next_page)

    # --- Shared mode: a Redis store, many workers of one job (mediacrawler.distributed.checkpoint) ---------------
    # Its Redis calls are blocking and run on the reactor thread: one at the start and one at the end of a job, and
    # one per batch of events (CHECKPOINT_REDIS_INTERVAL, or the scheduler's acknowledgement round, which is
    # itself one blocking call), never one per item.

    def job_started(self, spider: Spider, job: str) -> None:
        """A worker starts serving *job*: start or join the run of its shared checkpoint (resume from it)."""
        self.checkpoint, self._token, self._events, self.skip_ids = None, None, [], frozenset()
        store: Any = self.store
        try:
            token = store.run_token(spider.name, job)
        except Exception as e:  # noqa: BLE001 - Redis unreachable: the job runs, without a checkpoint
            logger.warning("%s: cannot reach the shared checkpoint (%s); this worker keeps none for the job",
                           job, e)
            return
        if token is None:
            return  # finished meanwhile by another worker: opening a run now would undo the end of the last one
        self._open_shared(spider, check_key(job), token=token, join=False)

    def job_finished(self, spider: Spider, job: str) -> None:
        """*job* has nothing queued or leased anywhere: send the last events; clear the checkpoint if complete."""
        if self.checkpoint is not None and self.checkpoint.key == job:
            self._end_shared(clear=True)

    def acks_pending(self) -> bool:
        """The scheduler is about to acknowledge requests (feeds already synced): their events go first."""
        return self._flush_shared(sync=False)

    def _open_shared(self, spider: Spider, key: str, *, token: str | None, join: bool) -> None:
        args: Any = getattr(spider, "args", None)
        store: Any = self.store
        start = getattr(args, "start", None)
        try:
            try:
                started, self._token = store.open_run(key, spider=spider.name, token=token, join=join, start=start,
                                                      reset=bool(getattr(args, "reset_checkpoint", False)),
                                                      now=_utc_now())
                cp = store.load(key)
            except CheckpointCorrupt as e:
                logger.warning("%s: checkpoint %s is unusable (%s); moved aside to %s, starting from page 1",
                               key, store.location(key), e, store.quarantine(key))
                self.stats.inc_value("checkpoint/corrupt")
                started, self._token = store.open_run(key, spider=spider.name, token=token, start=start,
                                                      now=_utc_now())
                cp = store.load(key)
            page, cursor = store.start_of_run(key)
        except Exception as e:  # noqa: BLE001 - Redis unreachable: the job runs, without a checkpoint
            logger.warning("%s: cannot open the shared checkpoint (%s); no checkpoint for this run", key, e)
            self._token = None
            return
        self.checkpoint = cp or Checkpoint(key=key, spider=spider.name)
        self.skip_ids = frozenset(self.checkpoint.stored_ids())
        if page > 1 or cursor:
            spider.resume = Resume(page=page, cursor=cursor)  # type: ignore[attr-defined]
            self.stats.set_value("checkpoint/resumed_at", page)
        logger.info("%s: %s the run of shared checkpoint %s at page %d%s (%d posts of later pages already stored)",
                    key, "started" if started else "joined", store.location(key), page,
                    f" (cursor {cursor})" if cursor else "", len(self.skip_ids))

    def _flush_shared(self, *, sync: bool = True) -> bool:
        """Send the waiting events in one script call, after the feeds (flush + fsync); False when Redis failed."""
        cp, events = self.checkpoint, self._events
        if cp is None or self._token is None or not events:
            return True
        if sync and self.sync:
            sync_feeds(self.crawler)
        self._events = []
        store: Any = self.store
        try:
            watermark = store.apply(cp.key, self._token, events, now=_utc_now())
        except Exception as e:  # noqa: BLE001 - kept and sent again (events are idempotent)
            self._events[:0] = events
            self.stats.inc_value("checkpoint/redis_errors")
            if not self._outage:
                self._outage = True
                logger.warning("%s: cannot update the shared checkpoint (%s); %d events wait for Redis",
                               cp.key, e, len(self._events))
            return False
        self._outage = False
        self.stats.inc_value("checkpoint/writes")
        if watermark >= 0:
            cp.watermark, cp.next_page = watermark, watermark + 1
            self.stats.set_value("checkpoint/watermark", watermark)
        else:
            logger.debug("%s: the shared checkpoint's run is over (cleared or restarted); %d events dropped",
                         cp.key, len(events))
        return True

    def _end_shared(self, *, clear: bool) -> None:
        cp = self.checkpoint
        assert cp is not None
        store: Any = self.store
        flushed = self._flush_shared()
        self.checkpoint = None
        if not clear or not flushed or self._token is None:
            logger.info("%s: shared checkpoint kept at page %d", cp.key, cp.watermark)
            return
        try:
            result = store.clear(cp.key, self._token)
        except Exception as e:  # noqa: BLE001 - kept: the next run re-fetches what this one stored
            logger.error("%s: cannot clear the shared checkpoint: %s", cp.key, e)
            return
        if result == 1:
            self.stats.set_value("checkpoint/cleared", True)
            logger.info("%s: source completed; shared checkpoint cleared", cp.key)
        elif result == 0:
            logger.info("%s: shared checkpoint kept (the last page was not reached or not every page was stored)",
                        cp.key)
        else:
            logger.info("%s: shared checkpoint already cleared (or taken by a newer run)", cp.key)


def _extension_of(crawler: Crawler) -> CheckpointExtension | None:
    extensions = getattr(crawler, "extensions", None)
    for ext in getattr(extensions, "middlewares", ()):
        if isinstance(ext, CheckpointExtension):
            return ext
    return None


class CheckpointSkipPipeline:
    """Drops posts that an interrupted earlier run of the same job already stored (put it first in the chain).

    The page after the watermark may have been partly stored before the stop; its posts come again on resume and
    are recognised by post id (the checkpoint's list of stored posts past the watermark, plus the records found in
    the feed after the last checkpoint write).
    """

    def __init__(self, crawler: Crawler) -> None:
        if not crawler.settings.getbool("CHECKPOINT_ENABLED", True):
            raise NotConfigured("CHECKPOINT_ENABLED is off")
        ext = _extension_of(crawler)
        if ext is None:
            raise NotConfigured("the checkpoint extension is not enabled")
        ext.skip_pipeline = True
        self.ext = ext
        assert crawler.stats is not None
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_item(self, item: Any) -> Any:
        if self.ext.skip_ids:
            _, _, post_id = _source_of(item)
            if post_id is not None and self.ext.already_stored(post_id):
                self.stats.inc_value("checkpoint/skipped_stored")
                raise AlreadyStored(f"post {post_id} was stored before the interruption", log_level="DEBUG")
        return item


# --- mediacrawler checkpoints -------------------------------------------------------------------------------------


def _summary(cp: Checkpoint) -> str:
    cursor = f" cursor={cp.next_cursor}" if cp.next_cursor else ""
    failed = f" failed={','.join(map(str, sorted(cp.failed_pages)))}" if cp.failed_pages else ""
    return (f"{cp.key}\tnext page {cp.next_page}{cursor}\t{len(cp.stored_ids())} stored past page "
            f"{cp.watermark}{failed}\tupdated {cp.updated_at or '?'}")


def main(argv: Sequence[str] | None = None) -> int:
    """``mediacrawler checkpoints [list | show KEY | reset KEY]``; exit 0 ok, 1 not found/unreadable, 2 usage."""
    parser = argparse.ArgumentParser(prog="mediacrawler checkpoints",
                                     description="List, show or reset the resume checkpoints of crawl jobs.")
    parser.add_argument("--dir", help="checkpoint directory (default: the CHECKPOINT_DIR setting)")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("list", help="one line per checkpoint (the default)")
    show = sub.add_parser("show", help="print one checkpoint as JSON")
    show.add_argument("key", help="job key, e.g. weibo-uid-7365120894")
    reset = sub.add_parser("reset", help="delete one checkpoint: the next run starts at page 1")
    reset.add_argument("key")
    try:
        opts = parser.parse_args(list(argv or []))
    except SystemExit as e:
        return int(e.code or 0)
    if opts.dir:
        store: CheckpointStore = FileCheckpointStore(opts.dir)
    else:
        from scrapy.utils.project import get_project_settings

        try:
            store = store_from_settings(get_project_settings())
        except NotConfigured as e:
            print(f"mediacrawler checkpoints: {e}", file=sys.stderr)
            return 2
    action = opts.action or "list"
    if action == "list":
        return _list(store)
    try:
        check_key(opts.key)
    except ValueError as e:
        print(f"mediacrawler checkpoints: {e}", file=sys.stderr)
        return 2
    if action == "show":
        try:
            cp = store.load(opts.key)
        except CheckpointCorrupt as e:
            print(f"{opts.key}: unreadable checkpoint {store.location(opts.key)}: {e}", file=sys.stderr)
            return 1
        if cp is None:
            print(f"{opts.key}: no checkpoint", file=sys.stderr)
            return 1
        json.dump(cp.to_dict(), sys.stdout, ensure_ascii=False, indent=2)
        print()
        return 0
    if store.delete(opts.key):
        print(f"{opts.key}: checkpoint deleted; the next run starts at page 1")
        return 0
    print(f"{opts.key}: no checkpoint", file=sys.stderr)
    return 1


def _list(store: CheckpointStore) -> int:
    keys: Iterable[str] = store.keys()
    status = 0
    any_key = False
    for key in keys:
        any_key = True
        try:
            cp = store.load(key)
        except CheckpointCorrupt as e:
            print(f"{key}\tUNREADABLE: {e}")
            status = 1
            continue
        if cp is not None:
            print(_summary(cp))
    if not any_key:
        print("no checkpoints", file=sys.stderr)
    return status
