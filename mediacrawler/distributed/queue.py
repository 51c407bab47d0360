"""The leased queue: a request taken by a worker is leased, not popped; it leaves Redis only when acknowledged.

Keys of one job (``<base>`` = ``<DISTRIBUTED_KEY_PREFIX>:<spider>:<job>``)::

    <base>:q        ZSET  request id -> score (-priority; ids are zero-padded, so equal scores pop FIFO)
    <base>:req      HASH  request id -> JSON payload (:mod:`.serializer`)
    <base>:score    HASH  request id -> score (to put an expired lease back where it was)
    <base>:fp       HASH  request id -> fingerprint (requests subject to the duplicate filter)
    <base>:lease    ZSET  request id -> lease deadline (ms, Redis server time)
    <base>:owner    HASH  request id -> worker id
    <base>:pending  HASH  fingerprint -> queued or leased requests with it (duplicates of these are filtered)
    <base>:seen     SET   fingerprints of acknowledged requests (the duplicate filter)
    <base>:seq      STR   request id counter;  <base>:seeded  STR  set by the first push
    <prefix>:<spider>:dead  LIST  dead letters: entries (and job messages, :mod:`.jobs`) refused, with the reason

Every transition is one Lua script (atomic): ``push`` (dedupe check + enqueue, optionally acknowledging the
request it replaces: a retry or redirect), ``pop`` (queue -> lease), ``ack`` (done: fingerprint seen),
``renew`` (the owner's heartbeat), ``reap`` (expired leases back to the queue, by any worker; a lease is moved
once even with several reapers), ``release`` (a cleanly closing worker returns what it holds), ``finish``
(a job with nothing queued or leased is deleted), ``bury`` (a refused entry moves to the dead-letter list: its
reason and the first :data:`DEAD_SAMPLE` bytes of it; the list keeps the newest ``DISTRIBUTED_DEAD_MAX``). The keys are built inside the scripts: one Redis, not Cluster.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import redis
from scrapy import Request, Spider
from scrapy_redis.queue import Base

from mediacrawler.distributed.serializer import request_from_json, request_to_json

#: Lua prologue: ``now``, the Redis server's time in ms (one clock for every worker).
SERVER_NOW = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_DONE = """
local function done(b, id, seen)
  local fp = redis.call('HGET', b..':fp', id)
  local had = redis.call('ZREM', b..':lease', id) + redis.call('ZREM', b..':q', id)
  redis.call('HDEL', b..':owner', id)
  redis.call('HDEL', b..':req', id)
  redis.call('HDEL', b..':score', id)
  redis.call('HDEL', b..':fp', id)
  if fp and seen then
    if redis.call('HINCRBY', b..':pending', fp, -1) <= 0 then redis.call('HDEL', b..':pending', fp) end
    redis.call('SADD', b..':seen', fp)
  end
  return had
end
"""

# ARGV: base, payload, score, fingerprint ('' = none), filter ('1'/'0'), replaced id ('' = none)
PUSH = _DONE + """
local b, fp, old = ARGV[1], ARGV[4], ARGV[6]
if old ~= '' then
  if redis.call('HEXISTS', b..':req', old) == 0 then old = '' else fp = redis.call('HGET', b..':fp', old) or '' end
end
if old == '' and ARGV[5] == '1' and fp ~= '' then
  if redis.call('SISMEMBER', b..':seen', fp) == 1 or redis.call('HEXISTS', b..':pending', fp) == 1 then
    return 0
  end
end
local id = string.format('%012d', redis.call('INCR', b..':seq'))
redis.call('HSET', b..':req', id, ARGV[2])
redis.call('HSET', b..':score', id, ARGV[3])
redis.call('ZADD', b..':q', ARGV[3], id)
if fp ~= '' then
  redis.call('HSET', b..':fp', id, fp)
  if old == '' then redis.call('HINCRBY', b..':pending', fp, 1) end
end
redis.call('SET', b..':seeded', '1')
if old ~= '' then redis.call('HDEL', b..':fp', old); done(b, old, false) end
return id
"""

# ARGV: base, worker, lease ms
POP = SERVER_NOW + """
local b = ARGV[1]
local ids = redis.call('ZRANGE', b..':q', 0, 0)
if #ids == 0 then return false end
local id = ids[1]
redis.call('ZREM', b..':q', id)
redis.call('ZADD', b..':lease', now + tonumber(ARGV[3]), id)
redis.call('HSET', b..':owner', id, ARGV[2])
return {id, redis.call('HGET', b..':req', id)}
"""

# ARGV: base, ids...
ACK = _DONE + """
local n = 0
for i = 2, #ARGV do n = n + done(ARGV[1], ARGV[i], true) end
return n
"""

# ARGV: base, worker, lease ms, ids...
RENEW = SERVER_NOW + """
local b, n = ARGV[1], 0
for i = 4, #ARGV do
  if redis.call('HGET', b..':owner', ARGV[i]) == ARGV[2] then
    redis.call('ZADD', b..':lease', 'XX', now + tonumber(ARGV[3]), ARGV[i])
    n = n + 1
  end
end
return n
"""

# ARGV: base, limit
REAP = SERVER_NOW + """
local b = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', b..':lease', '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZREM', b..':lease', id)
  redis.call('HDEL', b..':owner', id)
  local score = redis.call('HGET', b..':score', id)
  if score then redis.call('ZADD', b..':q', score, id) end
end
return #ids
"""

# ARGV: base, worker, ids...
RELEASE = """
local b, n = ARGV[1], 0
for i = 3, #ARGV do
  if redis.call('HGET', b..':owner', ARGV[i]) == ARGV[2] then
    redis.call('ZREM', b..':lease', ARGV[i])
    redis.call('HDEL', b..':owner', ARGV[i])
    local score = redis.call('HGET', b..':score', ARGV[i])
    if score then redis.call('ZADD', b..':q', score, ARGV[i]); n = n + 1 end
  end
end
return n
"""

#: Bytes of a refused entry kept in its dead letter (enough to recognise it; a hostile entry may be huge).
DEAD_SAMPLE = 2048

# KEYS: dead list. ARGV: letter header (JSON object text without its closing brace), entry text, keep (count).
# The letter is {..., "entry": "<first DEAD_SAMPLE bytes>"}; the newest ``keep`` letters are kept.
BURY_LUA = """
local function bury(dead, header, entry, keep)
  redis.call('RPUSH', dead, header .. ',"entry":' .. cjson.encode(string.sub(entry, 1, %d)) .. '}')
  redis.call('LTRIM', dead, -tonumber(keep), -1)
end
""" % DEAD_SAMPLE

# KEYS: dead list. ARGV: base, id, letter header, keep. The entry leaves the queue (its fingerprint stops being
# pending but is not seen: it never ran).
BURY = BURY_LUA + _DONE + """
local b, id = ARGV[1], ARGV[2]
local payload = redis.call('HGET', b..':req', id)
if not payload then return 0 end
bury(KEYS[1], ARGV[3], payload, ARGV[4])
local fp = redis.call('HGET', b..':fp', id)
if fp and redis.call('HINCRBY', b..':pending', fp, -1) <= 0 then redis.call('HDEL', b..':pending', fp) end
done(b, id, false)
return 1
"""

_SUFFIXES = ("q", "req", "score", "fp", "lease", "owner", "pending", "seen", "seq", "seeded", "seeding")

# ARGV: base, require seeded ('1'/'0'), worker, seeding ms, active hash ('' = none), job key, generation stamp key
# and token ('' = none). Returns 1: finished (deleted, or already gone), 2: nobody seeds it (the caller does now),
# 0: busy, 3: the stamp is not the one given (Redis lost its data: an empty queue there is no finished job).
FINISH = """
local b, active, key = ARGV[1], ARGV[5], ARGV[6]
if ARGV[8] ~= '' and redis.call('GET', ARGV[7]) ~= ARGV[8] then return 3 end
if active ~= '' and redis.call('HEXISTS', active, key) == 0 then return 1 end
if ARGV[2] == '1' and redis.call('EXISTS', b..':seeded') == 0 then
  if redis.call('SET', b..':seeding', ARGV[3], 'NX', 'PX', tonumber(ARGV[4])) then return 2 end
  return 0
end
if redis.call('ZCARD', b..':q') > 0 or redis.call('ZCARD', b..':lease') > 0 then return 0 end
""" + "\n".join(f"redis.call('DEL', b..':{s}')" for s in _SUFFIXES) + """
if active ~= '' then redis.call('HDEL', active, key) end
return 1
"""


class LeasedQueue(Base):
    """One job's leased queue (scrapy-redis's queue interface: ``push``/``pop``/``__len__``, JSON payloads)."""

    def __init__(self, server: redis.Redis, spider: Spider, key: str, serializer: Any = None) -> None:
        super().__init__(server, spider, key, serializer=_NoPickle)
        self._scripts = {name: server.register_script(src) for name, src in
                         {"push": PUSH, "pop": POP, "ack": ACK, "renew": RENEW, "reap": REAP, "release": RELEASE,
                          "finish": FINISH, "bury": BURY}.items()}

    def _encode_request(self, request: Request) -> str:
        return request_to_json(request, self.spider)

    def _decode_request(self, encoded_request: str | bytes) -> Request:
        return request_from_json(encoded_request, self.spider)

    def __len__(self) -> int:
        return int(self.server.zcard(f"{self.key}:q"))

    def leased(self) -> int:
        return int(self.server.zcard(f"{self.key}:lease"))

    def push_payload(self, payload: str, *, score: int, fingerprint: str, filtered: bool,
                     replaces: str | None = None) -> str | None:
        """Enqueue one encoded request; its id, or None when the duplicate filter refused it."""
        rid = self._scripts["push"](args=[self.key, payload, score, fingerprint, "1" if filtered else "0",
                                          replaces or ""])
        return None if rid in (0, b"0") else _text(rid)

    def push(self, request: Request) -> None:  # scrapy-redis interface (no dedupe, no lease)
        self.push_payload(self._encode_request(request), score=-request.priority, fingerprint="", filtered=False)

    def pop_payload(self, worker: str, lease_ms: int) -> tuple[str, bytes] | None:
        got = self._scripts["pop"](args=[self.key, worker, lease_ms])
        if not got:
            return None
        return _text(got[0]), got[1]

    def pop(self, timeout: int = 0) -> Request | None:  # scrapy-redis interface: leased to "anonymous"
        got = self.pop_payload("anonymous", 60_000)
        return None if got is None else self._decode_request(got[1])

    def ack(self, *rids: str) -> int:
        """Acknowledge requests (done: their fingerprints become seen); how many were still queued or leased."""
        return int(self._scripts["ack"](args=[self.key, *rids])) if rids else 0

    def renew(self, worker: str, lease_ms: int, rids: list[str]) -> int:
        return int(self._scripts["renew"](args=[self.key, worker, lease_ms, *rids])) if rids else 0

    def reap(self, limit: int = 1000) -> int:
        return int(self._scripts["reap"](args=[self.key, limit]))

    def release(self, worker: str, rids: list[str]) -> int:
        return int(self._scripts["release"](args=[self.key, worker, *rids])) if rids else 0

    def finish(self, *, require_seeded: bool, worker: str = "", seeding_ms: int = 0, active: str = "",
               job: str = "", generation: tuple[str, bytes] | None = None) -> int:
        """The FINISH script's answer (above); with *generation* (stamp key, token), 3 when the stamp is not it."""
        key, token = generation or ("", b"")
        return int(self._scripts["finish"](args=[self.key, "1" if require_seeded else "0", worker, seeding_ms,
                                                 active, job, key, token]))


    def bury(self, rid: str, reason: str, *, dead: str, keep: int) -> bool:
        """Move entry ``rid`` to the dead-letter list ``dead`` (:func:`dead_key`) with ``reason``; False when it
        was gone already."""
        header = letter_header("request", reason, queue=self.key, id=rid)
        return bool(self._scripts["bury"](keys=[dead], args=[self.key, rid, header, keep]))

    def clear(self) -> None:
        """Never called by the scheduler (a closing worker does not flush shared state); kept for the interface."""
        self.server.delete(*(f"{self.key}:{s}" for s in _SUFFIXES))


def stamp_generation(server: redis.Redis, key: str) -> tuple[str, bytes] | None:
    """The generation stamp at *key*, ``(key, token)``: written when there is none, else the one there (another
    run or worker wrote it); None if it vanished at once. It is gone only if Redis lost its data (restarted
    without persistence, flushed): whoever holds it checks it before reading an empty queue as a finished job
    (FINISH). RedisError when Redis cannot be reached."""
    server.set(key, uuid.uuid4().hex, nx=True)
    token: bytes | None = server.get(key)
    return None if token is None else (key, token)


def dead_key(prefix: str, spider: str) -> str:
    """The dead-letter list of a spider's refused queue entries and job messages (docs/operations.md)."""
    return f"{prefix.rstrip(':')}:{spider}:dead"


def letter_header(kind: str, reason: str, **fields: str) -> str:
    """The start of a dead letter's JSON object (the Lua side appends the entry and the closing brace)."""
    letter = {"kind": kind, "reason": reason[:500], "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              **fields}
    return json.dumps(letter, ensure_ascii=False)[:-1]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _NoPickle:
    """Satisfies scrapy-redis's serializer check; :class:`LeasedQueue` encodes with :mod:`.serializer` only."""

    @staticmethod
    def loads(s: Any) -> Any:
        raise TypeError("the leased queue decodes requests with mediacrawler.distributed.serializer")

    @staticmethod
    def dumps(obj: Any) -> Any:
        raise TypeError("the leased queue encodes requests with mediacrawler.distributed.serializer")
