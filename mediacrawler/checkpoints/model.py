"""The checkpoint document of one job and the job key rule (docs/architecture.md, "Checkpoints")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mediacrawler.feeds import FeedMark

#: Version of the checkpoint document; a document with another version is unreadable (moved aside).
SCHEMA_VERSION = 1

# Job keys become file names: no separators, no leading dot, nothing a shell or Windows would trip over.
KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]{0,199}$")


class CheckpointCorrupt(Exception):
    """A checkpoint exists but cannot be used: not JSON, truncated, wrong schema or wrong key."""


def check_key(key: str) -> str:
    """*key* if it is a valid job key (file-name safe), else ValueError."""
    if not isinstance(key, str) or not KEY_RE.match(key) or key.endswith((".json", ".corrupt", ".tmp")):
        raise ValueError(f"not a valid checkpoint key: {key!r}")
    return key


@dataclass
class Checkpoint:
    """What one job's checkpoint says. ``watermark`` 0 means no page is done yet.

    A ``listing`` checkpoint keeps a watermark of pages; an ``items`` checkpoint (a list the user gave) keeps the
    items done and failed instead, and none of the page fields (docs/architecture.md, "Sources")."""

    key: str
    spider: str
    kind: str = "listing"
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
    #: ``items``: the keys of the requested items completed (answered, every post out of the pipelines)…
    done: list[str] = field(default_factory=list)
    #: … and of those that failed for good in the last run (fetched again by the next one).
    failed_items: list[str] = field(default_factory=list)
    #: Comment threads open (their post not stored yet): post id → ``{"state": ThreadState as JSON (the one that
    #: fetches the first page not all stored), "stored": [ids of that page's comments already stored]}``.
    threads: dict[str, dict[str, Any]] = field(default_factory=dict)

    def stored_ids(self) -> set[str]:
        return {post_id for ids in self.stored.values() for post_id in ids}

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "items":
            return {"schema": SCHEMA_VERSION, "key": self.key, "spider": self.spider, "kind": "items",
                    "done": sorted(self.done), "failed": sorted(self.failed_items),
                    "feeds": [{"path": m.path, "size": m.size} for m in self.feeds if m.line_format],
                    "seq": self.seq, "updated_at": self.updated_at}
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
            **({"threads": self.threads} if self.threads else {}),
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
            kind = data.get("kind", "listing")
            if kind == "items":
                return cls(key=cp_key, spider=_typed(data["spider"], str), kind="items",
                           done=[_typed(i, str) for i in data["done"]],
                           failed_items=[_typed(i, str) for i in data.get("failed") or []],
                           feeds=[FeedMark(_typed(m["path"], str), _typed(m["size"], int))
                                  for m in data.get("feeds") or []],
                           seq=_typed(data.get("seq", 0), int),
                           updated_at=_typed(data.get("updated_at"), str, optional=True))
            if kind != "listing":
                raise ValueError(f"kind {kind!r}, this version reads listing and items")
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
                threads={_typed(post, str): thread_entry(entry)
                         for post, entry in dict(data.get("threads") or {}).items()},
            )
            if cp.watermark < 0 or cp.next_page != cp.watermark + 1:
                raise ValueError(f"watermark {cp.watermark} and next page {cp.next_page} disagree")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointCorrupt(f"{type(e).__name__}: {e}") from None
        return cp


def thread_entry(entry: Any) -> dict[str, Any]:
    """One open thread of a checkpoint: its state (an object with a ``post_id``) and stored comment ids."""
    state = _typed(_typed(entry, dict)["state"], dict)
    _typed(state["post_id"], str)
    return {"state": state, "stored": [_typed(i, str) for i in entry.get("stored") or []]}


def _typed(value: Any, kind: type, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    # bool is an int in Python, never in a checkpoint.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value
