"""The shared checkpoint of a distributed job (``CHECKPOINT_BACKEND = "redis"``): per-page state in Redis.

With a shared queue, consecutive pages of one job land on different workers, so no process can compute the
watermark from its own signals. Here every worker sends what it saw (a page announced with its post ids, a post
that left the pipelines, a page that failed) in batches to one Lua script, which updates the page's state and
advances the watermark over every page whose posts have all left, atomically. Keys (``CHECKPOINT_REDIS_PREFIX``,
default ``mediacrawler:checkpoint:``; job keys never hold a colon)::

    <prefix><job>        HASH  spider, watermark, cursor (what fetches watermark + 1), last_page, seq, updated_at,
                               run (the run token), start_page / start_cursor (where this run began)
    <prefix><job>:pages  HASH  page -> JSON {"a": announced 0/1, "p": {post id: 1} still pending,
                               "e": {id: 1} left before the page was announced, "s": {id: 1} stored,
                               "c": next cursor, "l": last page 0/1, "f": failed 0/1}
    <prefix><job>:threads HASH post id -> JSON {"state", "stored"}: an open comment thread (``-a comments``), as
                               ``Checkpoint.threads`` holds it (the last worker to read one of its pages wrote it)
    <prefix><job>:feeds  HASH  <host>:<feed path> -> size: how far each worker's local feed was durable when its
                               last batch of events was sent (records past it are found there after a kill)

Post ids, not counts: after a lease takeover the same page is announced again and its posts leave again (stored
again or dropped as duplicates); with ids every event is idempotent, so a batch may be sent twice (a Redis error
after the script ran) and a page re-run by another worker never completes early. Read as a whole it is the same
:class:`~mediacrawler.extensions.checkpoint.Checkpoint` document as a file checkpoint (``mediacrawler
checkpoints``, ``mediacrawler status``). A *run* is one enqueue of a job (its token is the job's message in the
active hash): the first worker of a run starts it where the checkpoint says (page states are reset, the ids of
posts stored past the watermark are kept), every other worker of the run joins it. See docs/operations.md, "Many
workers on one Redis".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from typing import TYPE_CHECKING, Any

import redis

from mediacrawler.config import setting
from mediacrawler.distributed.connection import client_from_settings, key_base
from mediacrawler.distributed.jobs import job_finished, job_started
from mediacrawler.distributed.scheduler import acks_pending
from mediacrawler.checkpoints.model import Checkpoint, CheckpointCorrupt, check_key, thread_entry
from mediacrawler.feeds import FeedMark

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings

# Returns -1 when the run token is not the current run (a stale worker, or the checkpoint was cleared), else the
# watermark after the batch. ARGV: run token, events (JSON list), updated_at.
APPLY = """
local meta, pages = KEYS[1], KEYS[2]
if redis.call('HGET', meta, 'run') ~= ARGV[1] then return -1 end
local w = tonumber(redis.call('HGET', meta, 'watermark'))
local states = {}
local function get(k)
  if not states[k] then
    local raw = redis.call('HGET', pages, k)
    states[k] = raw and cjson.decode(raw) or {a = 0, p = {}, e = {}, s = {}, l = 0, f = 0}
  end
  return states[k]
end
for _, ev in ipairs(cjson.decode(ARGV[2])) do
  local page = tonumber(ev.p)
  if ev.t == 'th' then
    -- a comment thread's entry, kept as the JSON text it came as (cjson would turn [] into {})
    if type(ev.e) == 'string' then
      redis.call('HSET', KEYS[3], ev.id, ev.e)
    else
      redis.call('HDEL', KEYS[3], ev.id)
    end
  elseif ev.t == 'fm' then
    redis.call('HSET', KEYS[4], ev.id, ev.n)
  elseif page and page > w then
    local st = get(tostring(page))
    if ev.t == 'a' then
      if st.a ~= 1 then
        st.a = 1
        for _, id in ipairs(ev.ids) do
          if not st.e[id] and not st.s[id] then st.p[id] = 1 end
        end
        if type(ev.c) == 'string' then st.c = ev.c end
        if ev.l == 1 then
          st.l = 1
          redis.call('HSET', meta, 'last_page', page)
        end
      end
    elseif ev.t == 'd' then
      if st.a == 1 then st.p[ev.id] = nil else st.e[ev.id] = 1 end
      if ev.s == 1 then st.s[ev.id] = 1 end
      if ev.f == 1 then st.f = 1 end
    elseif ev.t == 'f' then
      st.f = 1
    end
  end
end
for k, st in pairs(states) do redis.call('HSET', pages, k, cjson.encode(st)) end
local cursor = false
while true do
  local k = tostring(w + 1)
  local raw = redis.call('HGET', pages, k)
  if not raw then break end
  local st = cjson.decode(raw)
  if st.a ~= 1 or st.f == 1 or next(st.p) ~= nil then break end
  w = w + 1
  cursor = st.c or ''
  redis.call('HDEL', pages, k)
end
if cursor then redis.call('HSET', meta, 'watermark', w, 'cursor', cursor) end
redis.call('HINCRBY', meta, 'seq', 1)
redis.call('HSET', meta, 'updated_at', ARGV[3])
return w
"""

# Opens or joins a run. ARGV: token, spider, join any open run ('1'/'0'), start page ('' = none), reset ('1'/'0'),
# updated_at. Returns {1 when this call started the run, the run token}.
OPEN = """
local meta, pages = KEYS[1], KEYS[2]
local run = redis.call('HGET', meta, 'run')
if run and (run == ARGV[1] or ARGV[3] == '1') then return {0, run} end
-- a completed run's checkpoint (its clear never came): the source was covered, it is not resumed
local done_last = tonumber(redis.call('HGET', meta, 'last_page') or '')
if ARGV[5] == '1' or (done_last and tonumber(redis.call('HGET', meta, 'watermark')) >= done_last) then
  redis.call('DEL', meta, pages, KEYS[3], KEYS[4])
end
if redis.call('EXISTS', meta) == 0 then
  redis.call('HSET', meta, 'spider', ARGV[2], 'watermark', 0, 'cursor', '', 'seq', 0)
end
if ARGV[4] ~= '' then
  -- an explicit start wins: pages before it are not this run's, nothing past it was stored by it
  redis.call('HSET', meta, 'watermark', tonumber(ARGV[4]) - 1, 'cursor', '')
  redis.call('DEL', pages, KEYS[3], KEYS[4])
else
  -- a new run fetches every page past the watermark again: only the ids of posts already stored are kept
  local all = redis.call('HGETALL', pages)
  for i = 1, #all, 2 do
    local st = cjson.decode(all[i + 1])
    if next(st.s) ~= nil then
      redis.call('HSET', pages, all[i], cjson.encode({a = 0, p = {}, e = {}, s = st.s, l = 0, f = 0}))
    else
      redis.call('HDEL', pages, all[i])
    end
  end
end
local w = tonumber(redis.call('HGET', meta, 'watermark'))
redis.call('HSET', meta, 'run', ARGV[1], 'start_page', w + 1, 'start_cursor', redis.call('HGET', meta, 'cursor'),
           'last_page', '', 'updated_at', ARGV[6])
return {1, ARGV[1]}
"""

# Deletes the checkpoint when the source is complete. ARGV: run token ('' = any run).
# Returns 1 cleared, 0 not complete (kept), -1 already gone, -2 another run holds it.
CLEAR = """
local meta, pages = KEYS[1], KEYS[2]
if redis.call('EXISTS', meta) == 0 then return -1 end
if ARGV[1] ~= '' and redis.call('HGET', meta, 'run') ~= ARGV[1] then return -2 end
local last = tonumber(redis.call('HGET', meta, 'last_page') or '')
if last and tonumber(redis.call('HGET', meta, 'watermark')) >= last then
  redis.call('DEL', meta, pages, KEYS[3], KEYS[4])
  return 1
end
return 0
"""


class RedisCheckpointStore:
    """Checkpoints in Redis, shared by every worker of a job (``CHECKPOINT_BACKEND = "redis"``, needs REDIS_URL).

    Besides the whole-document methods of :class:`~mediacrawler.extensions.checkpoint.CheckpointStore` it has the
    run methods the checkpoint extension uses in its shared mode: :meth:`open_run`, :meth:`apply`, :meth:`clear`.
    Every method is one or two Redis round trips (blocking; see the extension for where they run).
    """

    #: The extension keeps no local watermark with this store: it sends events (see the module docstring).
    shared = True
    #: Signals the extension connects to in shared mode: a worker starts/ends serving a job; acknowledgements are
    #: about to be sent (the events they depend on must be in Redis first).
    job_started = job_started
    job_finished = job_finished
    acks_pending = acks_pending

    def __init__(self, server: redis.Redis, prefix: str, *, queue_prefix: str = "mediacrawler:dist") -> None:
        self.server = server
        self.prefix = prefix
        self.queue_prefix = queue_prefix.rstrip(":")
        self._apply = server.register_script(APPLY)
        self._open = server.register_script(OPEN)
        self._clear = server.register_script(CLEAR)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        if not setting(settings, "REDIS_URL"):
            from scrapy.exceptions import NotConfigured

            raise NotConfigured("CHECKPOINT_BACKEND=redis needs REDIS_URL")
        return cls(client_from_settings(settings), str(setting(settings, "CHECKPOINT_REDIS_PREFIX")),
                   queue_prefix=str(setting(settings, "DISTRIBUTED_KEY_PREFIX")))

    def _keys(self, key: str) -> list[str]:
        meta = f"{self.prefix}{check_key(key)}"
        return [meta, f"{meta}:pages", f"{meta}:threads", f"{meta}:feeds"]

    # --- CheckpointStore --------------------------------------------------------------------------------------

    def location(self, key: str) -> str:
        return f"redis:{self._keys(key)[0]}"

    def load(self, key: str) -> Checkpoint | None:
        meta_key, pages_key, threads_key, _ = self._keys(key)
        pipe = self.server.pipeline(transaction=True)
        pipe.hgetall(meta_key)
        pipe.hgetall(pages_key)
        pipe.hgetall(threads_key)
        try:
            meta_raw, pages_raw, threads_raw = pipe.execute()
        except redis.ResponseError as e:  # a key of another type
            raise CheckpointCorrupt(f"unreadable: {e}") from None
        if not meta_raw:
            return None
        meta = {k.decode(): v.decode() for k, v in meta_raw.items()}
        try:
            watermark = int(meta["watermark"])
            stored: dict[int, list[str]] = {}
            failed: list[int] = []
            for page_raw, state_raw in pages_raw.items():
                page, state = int(page_raw), json.loads(state_raw)
                if page <= watermark:
                    continue
                ids = sorted(state.get("s") or {})
                if ids:
                    stored[page] = ids
                if state.get("f") == 1:
                    failed.append(page)
            return Checkpoint(
                key=key, spider=meta["spider"], watermark=watermark, next_page=watermark + 1,
                next_cursor=meta.get("cursor") or None, stored=stored, failed_pages=sorted(failed),
                last_page=int(meta["last_page"]) if meta.get("last_page") else None,
                seq=int(meta.get("seq") or 0), updated_at=meta.get("updated_at") or None,
                threads={post.decode(): thread_entry(json.loads(entry)) for post, entry in threads_raw.items()},
            )
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            raise CheckpointCorrupt(f"{type(e).__name__}: {e}") from None

    def save(self, checkpoint: Checkpoint) -> None:
        """Replace the whole document (no run: the next worker on the job starts a run from it)."""
        meta_key, pages_key, threads_key, feeds_key = self._keys(checkpoint.key)
        pipe = self.server.pipeline(transaction=True)
        pipe.delete(meta_key, pages_key, threads_key, feeds_key)
        pipe.hset(meta_key, mapping={
            "spider": checkpoint.spider, "watermark": checkpoint.watermark, "cursor": checkpoint.next_cursor or "",
            "last_page": "" if checkpoint.last_page is None else checkpoint.last_page, "seq": checkpoint.seq,
            "updated_at": checkpoint.updated_at or "",
        })
        pages = {str(p): json.dumps({"a": 0, "p": {}, "e": {}, "s": dict.fromkeys(ids, 1), "l": 0,
                                     "f": int(p in checkpoint.failed_pages)})
                 for p, ids in checkpoint.stored.items() if p > checkpoint.watermark}
        if pages:
            pipe.hset(pages_key, mapping=pages)  # type: ignore[arg-type]
        if checkpoint.threads:
            pipe.hset(threads_key, mapping={post: json.dumps(entry) for post, entry in checkpoint.threads.items()})
        pipe.execute()

    def delete(self, key: str) -> bool:
        return bool(self.server.delete(*self._keys(key)))

    def quarantine(self, key: str) -> str | None:
        """Rename an unusable checkpoint's keys aside (``…:corrupt``); the job then starts afresh."""
        moved = None
        for k in self._keys(key):
            with contextlib.suppress(redis.ResponseError):  # no such key
                self.server.rename(k, f"{k}:corrupt")
                moved = moved or f"redis:{k}:corrupt"
        return moved

    def keys(self) -> list[str]:
        found = []
        for raw in self.server.scan_iter(f"{self.prefix}*", count=1000):
            name = raw.decode()[len(self.prefix):]
            if ":" not in name:
                found.append(name)
        return sorted(found)

    # --- Runs ---------------------------------------------------------------------------------------------------

    def run_token(self, spider: str, job: str) -> str | None:
        """The token of the current enqueue of *job*: a digest of its message in the active hash (None: none)."""
        message = self.server.hget(f"{self.queue_prefix}:{spider}:active", job)
        return None if message is None else hashlib.sha1(message).hexdigest()

    def queue_seeded(self, spider: str, job: str) -> bool:
        """Whether *job*'s shared queue has been seeded (a one-job crawl then joins the run under way)."""
        return bool(self.server.exists(f"{key_base(self.queue_prefix, spider, job)}:seeded"))

    def open_run(self, key: str, *, spider: str, token: str | None, join: bool = False, start: int | None = None,
                 reset: bool = False, now: str = "") -> tuple[bool, str]:
        """Start a run of *key* (when *token* is not the current run's and not *join*) or join the current one.

        Returns (started, token). Only the call that starts the run applies *start* and *reset*."""
        token = token or uuid.uuid4().hex
        started, got = self._open(keys=self._keys(key), args=[
            token, spider, "1" if join else "0", "" if start is None else start, "1" if reset else "0", now])
        return bool(int(started)), got.decode() if isinstance(got, bytes) else str(got)

    def feed_marks(self, key: str, host: str) -> list[FeedMark]:
        """The marks of the feeds *host* wrote for *key*, as its last batch of events left them."""
        marks = []
        for field, size in self.server.hgetall(self._keys(key)[3]).items():
            mark_host, sep, path = field.decode().partition(":")
            with contextlib.suppress(ValueError):
                if sep and mark_host == host:
                    marks.append(FeedMark(path, int(size)))
        return marks

    def start_of_run(self, key: str) -> tuple[int, str | None]:
        """Where the current run began: (page, cursor)."""
        page, cursor = self.server.hmget(self._keys(key)[0], ["start_page", "start_cursor"])
        return int(page or 1), (cursor.decode() or None) if cursor else None

    def apply(self, key: str, token: str, events: list[dict[str, Any]], *, now: str) -> int:
        """Send a batch of events (in order); the watermark after it, or -1 when *token* is no longer the run."""
        if not events:
            return -1
        return int(self._apply(keys=self._keys(key), args=[token, json.dumps(events, separators=(",", ":")), now]))

    def clear(self, key: str, token: str = "") -> int:
        """Delete the checkpoint if its source is complete: 1 cleared, 0 kept, -1 already gone, -2 another run."""
        return int(self._clear(keys=self._keys(key), args=[token]))
