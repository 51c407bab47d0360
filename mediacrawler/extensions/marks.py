"""Incremental sync: one high-water mark per source (spider + target = the job key), kept beside the checkpoints.

A mark is the newest post of a source known to be *completely* stored together with everything older: every
item of it left the pipelines (media included; a media asset that failed is kept in the job's retry set,
:mod:`mediacrawler.extensions.retries`, and comes back on its own). With the ``file`` backend it is
``CHECKPOINT_DIR/marks/<job>.json``, written atomically (:func:`mediacrawler.fsutil.write_atomic`)::

    {"schema": 1, "key": "weibo-uid-7365120894", "spider": "weibo",
     "post_id": "5012…", "created_at": "2026-11-28T01:55:00Z", "seq": 3, "updated_at": "2026-11-28T02:00:00Z"}

How it is used (:class:`MarkExtension`):

- ``spider_opened``: the mark is handed to the spider (``spider.mark``) unless ``-a full=true``. The spider then
  drops posts at or below it and stops paginating at the first page whose posts (pinned ones aside) are all at or
  below it (:meth:`mediacrawler.spiders._base.PlatformSpider._apply_mark`).
- Items that leave the pipelines stored (``item_scraped``; or dropped because they were stored before) are
  candidates; pinned posts and posts read outside the listing (retries) never are.
- ``spider_closed``: the mark advances to the newest candidate only when the run covered the source from its first
  page to where it ends for this run (the platform's last page, or the page at the mark), with reason
  ``finished``, no listing page failed and no item error. A run that started past page 1 (``-a start``, a resumed
  checkpoint), stopped at ``max_pages`` or was interrupted leaves the mark where it was: the next run walks down to
  the old mark again, and dedupe/the checkpoint drop what it already stored.

Settings: ``MARKS_ENABLED`` (default ``True``), ``MARKS_BACKEND`` (``file`` or the import path of a store class
with ``from_settings(settings)``; the file store lives under ``CHECKPOINT_DIR``). See docs/operations.md,
"Incremental sync and retries".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from itemadapter import ItemAdapter, is_item
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import load_object

from mediacrawler.checkpoints.model import check_key
from mediacrawler.extensions.docstore import FileDocumentStore
from mediacrawler.parsers._common import utc_now_iso
from mediacrawler.contracts import HighWaterMark

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: Version of the mark document; another version is unreadable (ignored with a warning: a full walk follows).
SCHEMA_VERSION = 1

#: Short names accepted by ``MARKS_BACKEND``.
MARK_BACKENDS: dict[str, str] = {"file": "mediacrawler.extensions.marks.FileMarkStore"}




class MarkCorrupt(Exception):
    """A mark exists but cannot be used."""


@dataclass
class Mark:
    """One source's high-water mark (see the module docstring)."""

    key: str
    spider: str
    post_id: str
    created_at: str | None = None
    seq: int = 0
    updated_at: str | None = None

    def high_water(self) -> HighWaterMark:
        return HighWaterMark(post_id=self.post_id, created_at=self.created_at)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, "key": self.key, "spider": self.spider, "post_id": self.post_id,
                "created_at": self.created_at, "seq": self.seq, "updated_at": self.updated_at}

    @classmethod
    def from_dict(cls, data: Any, *, key: str) -> Mark:
        try:
            if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
                raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r}")
            if data.get("key") != key:
                raise ValueError(f"key {data.get('key')!r} in the file of {key!r}")
            post_id, created_at = data["post_id"], data.get("created_at")
            if not isinstance(post_id, str) or not post_id or not isinstance(created_at, (str, type(None))):
                raise TypeError("post_id must be a string, created_at a string or null")
            return cls(key=key, spider=str(data["spider"]), post_id=post_id, created_at=created_at,
                       seq=int(data.get("seq") or 0), updated_at=data.get("updated_at"))
        except (KeyError, TypeError, ValueError) as e:
            raise MarkCorrupt(f"{type(e).__name__}: {e}") from None


class MarkStore(Protocol):
    """Where marks live (the shape of :class:`mediacrawler.extensions.checkpoint.CheckpointStore`)."""

    def location(self, key: str) -> str: ...

    def load(self, key: str) -> Mark | None: ...

    def save(self, mark: Mark) -> None: ...

    def delete(self, key: str) -> bool: ...

    def keys(self) -> list[str]: ...


class FileMarkStore(FileDocumentStore[Mark]):
    """Marks as ``<directory>/<key>.json`` files; ``from_settings``: ``CHECKPOINT_DIR/marks``."""

    subdir = "marks"
    corrupt = MarkCorrupt

    def parse(self, data: Any, *, key: str) -> Mark:
        return Mark.from_dict(data, key=key)


def mark_store_from_settings(settings: BaseSettings) -> MarkStore:
    """The store ``MARKS_BACKEND`` names; NotConfigured when it names nothing usable."""
    name = str(settings.get("MARKS_BACKEND") or "file")
    path = MARK_BACKENDS.get(name.lower(), name)
    try:
        cls = load_object(path)
    except (ImportError, NameError, ValueError) as e:
        raise NotConfigured(f"MARKS_BACKEND={name!r} is neither one of {sorted(MARK_BACKENDS)} nor importable: "
                            f"{e}") from e
    store: MarkStore = cls.from_settings(settings)
    return store


def _stored_post(item: Any) -> tuple[str, str | None, bool] | None:
    """(post_id, created_at, pinned) of a post listed by a page of the running job, else None."""
    if not is_item(item):
        return None
    adapter = ItemAdapter(item)
    source = adapter.get("source")
    if not is_item(source) or ItemAdapter(source).get("page") is None:
        return None  # read outside the listing (a retry): says nothing about the source's order
    post_id, created_at = adapter.get("post_id"), adapter.get("created_at")
    extra = adapter.get("extra") or {}
    if not post_id:
        return None
    return str(post_id), (str(created_at) if created_at else None), bool(extra.get("pinned"))


class MarkExtension:
    """Reads the job's high-water mark at start and advances it at a complete end (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("MARKS_ENABLED"):
            raise NotConfigured("MARKS_ENABLED is off")
        self.store = mark_store_from_settings(settings)
        self.crawler = crawler
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.old: Mark | None = None
        self.key: str | None = None
        #: The newest stored candidate of this run.
        self.best: HighWaterMark | None = None
        self.item_errors = 0
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(self.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(self.item_error, signal=signals.item_error)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        if getattr(spider, "worker_id", None) or not hasattr(spider, "mark") or not getattr(spider, "job", None):
            return  # not a platform spider, or a worker (its jobs come and go; no mark is kept for them)
        self.key = check_key(spider.job)  # type: ignore[attr-defined]
        try:
            self.old = self.store.load(self.key)
        except MarkCorrupt as e:
            logger.warning("%s: high-water mark %s is unusable (%s); every page is walked", self.key,
                           self.store.location(self.key), e)
            self.stats.inc_value("incremental/mark_corrupt")
        if self.old is None:
            return
        if getattr(spider.args, "full", False):  # type: ignore[attr-defined]
            logger.info("%s: -a full=true: walking every page (the high-water mark is post %s)", self.key,
                        self.old.post_id)
            return
        spider.mark = self.old.high_water()  # type: ignore[attr-defined]
        self.stats.set_value("incremental/mark", self.old.post_id)
        logger.info("%s: incremental: posts up to %s (%s) are stored; stopping at the first page below it",
                    self.key, self.old.post_id, self.old.created_at or "time unknown")

    def item_scraped(self, item: Any, spider: Spider) -> None:
        self._candidate(item)

    def item_dropped(self, item: Any, spider: Spider, exception: BaseException) -> None:
        # Dropped as stored before (dedupe's duplicate, the checkpoint's "already stored"): still stored.
        from mediacrawler.contracts import AlreadyStored
        from mediacrawler.pipelines.dedupe import DuplicatePost

        if isinstance(exception, (AlreadyStored, DuplicatePost)):
            self._candidate(item)

    def item_error(self, item: Any, spider: Spider, failure: Any) -> None:
        if _stored_post(item) is not None:
            self.item_errors += 1

    def _candidate(self, item: Any) -> None:
        if self.key is None or (found := _stored_post(item)) is None:
            return
        post_id, created_at, pinned = found
        if pinned:
            return
        if self.best is None or not self.best.covers(post_id, created_at):
            self.best = HighWaterMark(post_id=post_id, created_at=created_at)

    def covered_whole_run(self, spider: Spider, reason: str) -> str | None:
        """``None`` when this run covered its part of the source completely, else why not."""
        if reason != "finished":
            return f"closed: {reason}"
        if getattr(spider.args, "retry_only", False):  # type: ignore[attr-defined]
            return "retry only"
        if spider.first_page()[0] != 1:  # type: ignore[attr-defined]
            return "the run did not start at page 1"
        if getattr(spider, "pages_failed", 0):
            return "a listing page failed"
        if self.item_errors:
            return "an item failed in the pipelines"
        if not (getattr(spider, "source_exhausted", False) or getattr(spider, "stopped_at_mark", False)):
            return "neither the last page nor the mark was reached"
        return None

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.key is None:
            return
        why_not = self.covered_whole_run(spider, reason)
        best = self.best
        if why_not is not None:
            if best is not None:
                logger.info("%s: high-water mark not advanced (%s)", self.key, why_not)
            return
        old = self.old
        if best is None or (old is not None and old.high_water().covers(best.post_id, best.created_at)):
            logger.info("%s: nothing newer than the high-water mark%s", self.key,
                        f" (post {old.post_id})" if old else "")
            return
        mark = Mark(key=self.key, spider=spider.name, post_id=best.post_id, created_at=best.created_at,
                    seq=(old.seq if old else 0) + 1, updated_at=utc_now_iso())
        try:
            self.store.save(mark)
        except OSError as e:
            logger.error("%s: cannot write the high-water mark %s: %s", self.key, self.store.location(self.key), e)
            self.stats.inc_value("incremental/mark_write_errors")
            return
        self.stats.set_value("incremental/mark_advanced", mark.post_id)
        logger.info("%s: high-water mark advanced to post %s (%s)", self.key, mark.post_id,
                    mark.created_at or "time unknown")
