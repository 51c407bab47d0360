"""Nothing left behind: media assets that failed are kept per job in a retry set, and come back.

A post is exported even when one of its media assets failed (a record is never lost for its media); such an asset
(any reason but those in ``RETRY_MEDIA_IGNORE_REASONS``, by default ``not-media``: the URL serves no media at all)
is recorded here with its post. With the ``file`` backend the set is ``CHECKPOINT_DIR/retry/<job>.json``, written
atomically before the post can be marked seen by dedupe::

    {"schema": 1, "key": "weibo-uid-7365120894", "spider": "weibo", "args": {"uid": "7365120894"},
     "assets": {"weibo/video/weibo:video:1034:5012…": {"post_id": "5012…", "kind": "video",
                "reason": "http-404", "attempts": 1, "first_failed": "…Z", "last_failed": "…Z"}}}

No URL is kept (signed media URLs carry tokens): the post is read again for fresh ones.

- ``spider_opened``: the posts of the job's pending assets go to the job's ``JobState.retry_posts``; the spider
  reads each one again through its ``post_request``/``parse_post_payload`` before its first listing page and sends
  it through the pipelines again. The dedupe pipeline never drops a post while it has a pending asset
  (:meth:`pending_post`).
- ``item_scraped``: failed assets are added (or their attempts counted); assets now stored are removed.
- ``spider_closed``: posts that could not be read again count an attempt; an asset that failed
  ``RETRY_MEDIA_MAX_ATTEMPTS`` times is given up (WARNING). The run's summary line says how many are pending
  (stat ``retry/pending``).

Workers (``REDIS_URL``, no target) do the same per job on the ``job_started``/``job_finished`` signals, with the
Redis store (the default that follows their Redis checkpoints): every worker reads the job's set (dedupe lets its
posts through), the worker that seeds the job reads its posts again first, each records what fails or is stored
on it (:meth:`RetryStore.update` merges the workers' changes), and each counts and logs at the job's end.

``mediacrawler retry [--platform P]`` (commands/retry.py) runs a retry-only crawl (``-a retry_only=true``) of every job
with pending assets. Settings: ``RETRY_MEDIA_ENABLED``, ``RETRY_MEDIA_IGNORE_REASONS``,
``RETRY_MEDIA_MAX_ATTEMPTS``, ``RETRY_MEDIA_BACKEND`` (``file``, ``redis``: keys ``RETRY_MEDIA_REDIS_PREFIX<job>``;
empty, the default: the kind of ``CHECKPOINT_BACKEND``). See docs/operations.md, "Incremental sync and retries".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import NotConfigured

from mediacrawler import signals as mc_signals
from mediacrawler.checkpoints.model import check_key
from mediacrawler.config import setting
from mediacrawler.distributed.docstore import RedisDocumentStore
from mediacrawler.extensions.docstore import (DocumentStore, FileDocumentStore, document_store_from_settings,
                                             quarantine_document)
from mediacrawler.jobstate import job_state
from mediacrawler.parsers._common import utc_now_iso
from mediacrawler.contracts import asset_key_of, field_of, is_comment, is_record, walk_assets

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
RETRY_BACKENDS: dict[str, str] = {"file": "mediacrawler.extensions.retries.FileRetryStore",
                                  "redis": "mediacrawler.extensions.retries.RedisRetryStore"}
#: Statuses of an asset that is stored.
_STORED = frozenset({"downloaded", "deduplicated", "uptodate"})




class RetryCorrupt(Exception):
    """A retry set exists but cannot be used."""


@dataclass
class RetrySet:
    """The pending media assets of one job, by asset index key (see the module docstring)."""

    key: str
    spider: str
    #: The spider arguments that name the job's target (``mediacrawler retry`` crawls with them).
    args: dict[str, str] = field(default_factory=dict)
    assets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def post_ids(self) -> list[str]:
        return sorted({str(a["post_id"]) for a in self.assets.values()})

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, "key": self.key, "spider": self.spider, "args": self.args,
                "assets": dict(sorted(self.assets.items()))}

    @classmethod
    def from_dict(cls, data: Any, *, key: str) -> RetrySet:
        try:
            if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION or data.get("key") != key:
                raise ValueError("not a retry set of this job (schema or key)")
            args = {str(k): str(v) for k, v in dict(data.get("args") or {}).items()}
            assets = {str(k): dict(v) for k, v in dict(data.get("assets") or {}).items()}
            for entry in assets.values():
                if not isinstance(entry.get("post_id"), str):
                    raise TypeError("an asset without its post_id")
            return cls(key=key, spider=str(data["spider"]), args=args, assets=assets)
        except (KeyError, TypeError, ValueError) as e:
            raise RetryCorrupt(f"{type(e).__name__}: {e}") from None


#: Where retry sets live: a file or Redis store (:class:`~mediacrawler.extensions.docstore.DocumentStore`).
RetryStore = DocumentStore[RetrySet]


class FileRetryStore(FileDocumentStore[RetrySet]):
    """Retry sets as ``<directory>/<key>.json``; ``from_settings``: ``CHECKPOINT_DIR/retry``."""

    subdir = "retry"
    document = RetrySet
    corrupt = RetryCorrupt


class RedisRetryStore(RedisDocumentStore[RetrySet]):
    """Retry sets as Redis strings ``RETRY_MEDIA_REDIS_PREFIX<job>`` (``RETRY_MEDIA_BACKEND = "redis"``; needs
    REDIS_URL)."""

    prefix_setting = "RETRY_MEDIA_REDIS_PREFIX"
    document = RetrySet
    corrupt = RetryCorrupt


def retry_store_from_settings(settings: BaseSettings) -> RetryStore:
    """The store ``RETRY_MEDIA_BACKEND`` names; NotConfigured when it names nothing usable."""
    store: RetryStore = document_store_from_settings(settings, "RETRY_MEDIA_BACKEND", RETRY_BACKENDS)
    return store


def _assets(item: Any) -> Iterator[tuple[str, ItemAdapter]]:
    """``(index key, asset)`` of every media asset of a post and of the post it reposts that has a status (one
    never downloaded has nothing to record or resolve)."""
    for platform, asset, _ in walk_assets(item, with_status=True):
        yield asset_key_of(platform, asset), asset


class RetryExtension:
    """Keeps the job's retry set and hands its posts to the spider (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "RETRY_MEDIA_ENABLED"):
            raise NotConfigured("RETRY_MEDIA_ENABLED is off")
        self.store = retry_store_from_settings(settings)
        self.ignore = frozenset(setting(settings, "RETRY_MEDIA_IGNORE_REASONS"))
        self.max_attempts = setting(settings, "RETRY_MEDIA_MAX_ATTEMPTS")
        if self.max_attempts < 1:
            raise ValueError(f"RETRY_MEDIA_MAX_ATTEMPTS={self.max_attempts!r}: expected an integer >= 1")
        assert crawler.stats is not None
        self.stats = crawler.stats
        self.set: RetrySet | None = None
        #: Asset index key -> its entry now (``None``: no longer pending), not written to the store yet.
        self._changes: dict[str, dict[str, Any] | None] = {}
        self._pending_posts: set[str] = set()
        self.resolved = 0
        crawler.signals.connect(self.job_started, signal=mc_signals.job_started)
        crawler.signals.connect(self.job_finished, signal=mc_signals.job_finished)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        mc_signals.forward_item_signals(crawler)
        crawler.signals.connect(self.item_scraped, signal=mc_signals.item_scraped_sync)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def pending_post(self, post_id: str) -> bool:
        """Whether ``post_id`` has a media asset pending retry in this job (dedupe lets it through)."""
        return post_id in self._pending_posts

    def spider_opened(self, spider: Spider) -> None:
        state = job_state(spider)
        if getattr(spider, "worker_id", None) or state is None or not state.job:
            return  # not a platform spider, or a worker (one set per job: job_started)
        self._open(spider, check_key(state.job))

    def job_started(self, spider: Spider, job: str) -> None:
        """A worker starts serving *job*: its retry set, when the store is one every worker shares."""
        self.set, self._changes, self._pending_posts, self.resolved = None, {}, set(), 0
        if isinstance(self.store, RedisRetryStore):
            self._open(spider, check_key(job))

    def job_finished(self, spider: Spider, job: str) -> None:
        if self.set is not None and self.set.key == job:
            self._close(spider)
        self.set = None

    def _open(self, spider: Spider, key: str) -> None:
        try:
            self.set = self.store.load(key)
        except RetryCorrupt as e:
            logger.warning("%s: retry set %s is unusable (%s); moved aside to %s, starting a new one", key,
                           self.store.location(key), e, quarantine_document(self.store, key))
            self.stats.inc_value("retry/corrupt")
            self.set = None
        except OSError as e:  # the store is out of reach: recording now would overwrite what it holds
            logger.error("%s: cannot read the retry set %s (%s); no media are retried or recorded in this run",
                         key, self.store.location(key), e)
            self.stats.inc_value("retry/read_errors")
            return
        if self.set is None:
            self.set = RetrySet(key=key, spider=spider.name, args=spider.target_args())  # type: ignore[attr-defined]
        self._pending_posts = set(self.set.post_ids())
        if (state := job_state(spider)) is not None:
            state.retry_posts = self.set.post_ids()
        if self.set.assets:
            logger.info("%s: %d media assets of %d posts failed in earlier runs; reading those posts again first",
                        key, len(self.set.assets), len(self._pending_posts))

    def item_scraped(self, item: Any, spider: Spider) -> None:
        if self.set is None or not is_record(item) or is_comment(item):
            return  # a comment's pictures are not retried (its thread is walked again by a later run)
        post_id = str(field_of(item, "post_id") or "")
        if not post_id:
            return
        changed = False
        for index_key, asset in _assets(item):
            status = asset.get("status")
            entry = self.set.assets.get(index_key)
            now = utc_now_iso()
            if status == "failed":
                reason = str(asset.get("error") or "unknown").split(":", 1)[0]
                if reason in self.ignore:
                    continue
                if entry is None:
                    entry = self.set.assets[index_key] = {"post_id": post_id, "kind": asset.get("kind"),
                                                          "attempts": 0, "first_failed": now}
                    self.stats.inc_value("retry/recorded")
                entry.update(reason=reason, attempts=int(entry.get("attempts", 0)) + 1, last_failed=now)
                self._changes[index_key] = dict(entry)
                changed = True
            elif status in _STORED and entry is not None:
                del self.set.assets[index_key]
                self._changes[index_key] = None
                self.resolved += 1
                self.stats.inc_value("retry/resolved")
                logger.info("%s: media asset %s of post %s stored on retry", self.set.key, index_key, post_id)
                changed = True
        if changed:
            # Written now, before dedupe (a later turn of the loop) marks the post seen: a kill in between must
            # not leave a seen post whose failed asset nobody remembers.
            self._save()

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.set is None or getattr(spider, "worker_id", None):
            return  # a worker's job ends on job_finished
        self._close(spider)

    def _close(self, spider: Spider) -> None:
        """Count the attempts of posts that could not be read again, give up what failed too often, write."""
        assert self.set is not None
        state = job_state(spider)
        unreachable = state.retry_unreachable if state is not None else {}
        for index_key, entry in list(self.set.assets.items()):
            if entry["post_id"] in unreachable:
                entry.update(attempts=int(entry.get("attempts", 0)) + 1, last_failed=utc_now_iso(),
                             reason="post-unreadable")
                self._changes[index_key] = dict(entry)
            if int(entry.get("attempts", 0)) >= self.max_attempts:
                logger.warning("%s: media asset %s of post %s failed %d times (%s); given up", self.set.key,
                               index_key, entry["post_id"], entry["attempts"], entry.get("reason"))
                del self.set.assets[index_key]
                self._changes[index_key] = None
                self.stats.inc_value("retry/given_up")
        self._save()
        pending = len(self.set.assets)
        self.stats.set_value("retry/pending", pending)
        logger.info("%s: %d media assets pending retry (%d stored on retry in this run)%s", self.set.key, pending,
                    self.resolved, "; the next run (or: mediacrawler retry) tries them again" if pending else "")

    def _save(self) -> None:
        """Apply this process's changes to the stored set (the Redis store merges them with those other processes
        of the job made meanwhile) and take the result as the set."""
        assert self.set is not None
        base, changes, self._changes = self.set, self._changes, {}

        def apply(current: RetrySet | None) -> RetrySet | None:
            merged = current or RetrySet(key=base.key, spider=base.spider, args=dict(base.args))
            for index_key, entry in changes.items():
                if entry is None:
                    merged.assets.pop(index_key, None)
                else:
                    merged.assets[index_key] = entry
            return merged if merged.assets else None

        try:
            written = self.store.update(base.key, apply)
        except OSError as e:
            self._changes = {**changes, **self._changes}  # written with the next change, or at close
            logger.error("%s: cannot write the retry set %s: %s", base.key, self.store.location(base.key), e)
            self.stats.inc_value("retry/write_errors")
            return
        self.set = written or RetrySet(key=base.key, spider=base.spider, args=base.args)
