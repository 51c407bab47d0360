"""Jobs through Redis: the job board that workers take jobs from and ``mediacrawler enqueue`` (commands/enqueue.py)
fills.

A job is one spider's arguments, validated at enqueue with the spider's own argument model, keyed by the spider's
job key (``weibo-uid-7365120894``)::

    <prefix>:<spider>:jobs     LIST  job messages waiting ({"key", "spider", "args", "enqueued_at"}, JSON)
    <prefix>:<spider>:queued   SET   keys of waiting jobs (a job is queued once)
    <prefix>:<spider>:active   HASH  job key -> message, for jobs being worked on
    <prefix>:<spider>:dead     LIST  dead letters: job messages (and queue entries) refused, each with its reason

A worker (``scrapy crawl <platform> -s REDIS_URL=…`` with no target) serves one job at a time: it joins the oldest
active job, else takes the next waiting one (:meth:`JobBoard.take`, one Lua script). The first worker on a job
*seeds* it (its start request; a ``seeding`` key with an expiry, so a worker dying before the seed is in Redis is
replaced). A message is checked before it is served (:class:`JobMessage`: a key, this spider, ``args`` an object
of string values, bounded size and depth); a bad one goes to the dead-letter list with its reason and the worker
looks at the next. A job is finished when it has nothing queued or leased (:meth:`JobBoard.state`): its keys are deleted
and every worker moves on. The signals :data:`job_started` and :data:`job_finished` (``spider``, ``job``) are the
seam for per-job state (checkpoints) in a process that serves several jobs one after the other; ``job_started``
also gives the job's ``generation`` stamp, written or found when the job was taken (:func:`.queue.stamp_generation`:
its absence means Redis lost the job's data, and :meth:`JobBoard.state` then answers ``lost``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import redis
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError
from scrapy import Spider
from scrapy.settings import BaseSettings

from mediacrawler.config import setting
from mediacrawler.distributed.connection import client_from_settings, key_base
from mediacrawler.distributed.queue import BURY_LUA, LeasedQueue, dead_key, letter_header, stamp_generation
from mediacrawler.fsutil import loads_bounded
from mediacrawler.signals import job_finished, job_started  # noqa: F401 (sent by worker.py as jobs.job_started)

logger = logging.getLogger(__name__)


ENQUEUE = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
"""

# KEYS: jobs, active, queued, dead. ARGV: base prefix, worker, seeding ms, max message bytes, dead letters kept,
# now (for a dead letter). A waiting message too large, not JSON or without a key string is dead-lettered here
# (returns {0, reason}); the rest of its checks are the Python side's (:class:`JobMessage`).
TAKE = BURY_LUA + """
local key, msg
local keys = redis.call('HKEYS', KEYS[2])
if #keys > 0 then
  key = keys[1]
  msg = redis.call('HGET', KEYS[2], key)
else
  msg = redis.call('LPOP', KEYS[1])
  if not msg then return false end
  local reason
  if #msg > tonumber(ARGV[4]) then
    reason = 'message of ' .. #msg .. ' bytes, more than ' .. ARGV[4] .. ' (DISTRIBUTED_JOB_MAX_BYTES)'
  else
    local ok, decoded = pcall(cjson.decode, msg)
    if not ok then reason = 'not JSON (or nested too deeply)'
    elseif type(decoded) ~= 'table' or type(decoded['key']) ~= 'string' or #decoded['key'] == 0
        or #decoded['key'] > 200 then reason = 'no job key (a string of 1 to 200 characters)'
    else key = decoded['key'] end
  end
  if reason then
    local header = cjson.encode({kind = 'job', reason = reason, at = ARGV[6]})
    bury(KEYS[4], string.sub(header, 1, -2), msg, ARGV[5])
    return {0, reason}
  end
  redis.call('SREM', KEYS[3], key)
  redis.call('HSET', KEYS[2], key, msg)
end
local b = ARGV[1]..':'..key
local seed = 0
if redis.call('EXISTS', b..':seeded') == 0 then
  if redis.call('SET', b..':seeding', ARGV[2], 'NX', 'PX', tonumber(ARGV[3])) then seed = 1 end
end
return {msg, seed, key}
"""

# KEYS: active, dead. ARGV: job key, message, letter header, dead letters kept, job key base, worker.
# An active message that is still the one checked leaves the active hash for the dead-letter list.
BURY_JOB = BURY_LUA + """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('GET', ARGV[5]..':seeding') == ARGV[6] then redis.call('DEL', ARGV[5]..':seeding') end
bury(KEYS[2], ARGV[3], ARGV[2], ARGV[4])
return 1
"""

#: Bad job messages met by one :meth:`JobBoard.take` before it answers "no job" (the next poll goes on).
TAKE_TRIES = 100
#: A job message's JSON nests at most this deep ({"args": {name: value}}).
JOB_MAX_DEPTH = 4


class JobMessage(BaseModel):
    """The schema of a job message (what :meth:`JobBoard.enqueue` writes): checked before a worker takes it."""

    model_config = ConfigDict(extra="ignore")

    key: StrictStr = Field(min_length=1, max_length=200)
    spider: StrictStr = Field(min_length=1, max_length=100)
    args: dict[Annotated[StrictStr, Field(max_length=100)], StrictStr] = Field(max_length=64)
    enqueued_at: StrictStr | None = None


@dataclass
class Job:
    key: str
    spider: str
    args: dict[str, Any]
    seed: bool
    #: The message as stored (to dead-letter exactly this one).
    message: str = ""
    #: (key, token) of the job board's generation stamp when the job was taken (:func:`.queue.stamp_generation`);
    #: None: not stamped.
    generation: tuple[str, bytes] | None = None


class JobBoard:
    """One spider's jobs in Redis. Blocking calls: run them with :func:`~.scheduler.in_thread`."""

    def __init__(self, settings: BaseSettings, spider_name: str, worker: str,
                 server: redis.Redis | None = None) -> None:
        self.server = server or client_from_settings(settings)
        self.prefix = str(setting(settings, "DISTRIBUTED_KEY_PREFIX")).rstrip(":")
        self.spider_name = spider_name
        self.worker = worker
        self.seeding_ms = int(setting(settings, "DISTRIBUTED_LEASE_TTL") * 1000)
        base = f"{self.prefix}:{spider_name}"
        self.keys = [f"{base}:jobs", f"{base}:active", f"{base}:queued"]
        #: The board's generation stamp, never deleted: one per spider (a job's keys all go when it finishes, and
        #: its other workers must still tell "finished" from "lost").
        self.stamp_key = f"{base}:generation"
        self._enqueue = self.server.register_script(ENQUEUE)
        self._take = self.server.register_script(TAKE)
        self._bury = self.server.register_script(BURY_JOB)
        self.dead = dead_key(self.prefix, spider_name)
        self.dead_max: int = setting(settings, "DISTRIBUTED_DEAD_MAX")
        self.max_bytes: int = setting(settings, "DISTRIBUTED_JOB_MAX_BYTES")

    def enqueue(self, key: str, args: dict[str, Any]) -> bool:
        """Queue a job; False when a job with this key is already queued or active."""
        message = json.dumps({"key": key, "spider": self.spider_name, "args": args, "enqueued_at": _now()})
        return bool(self._enqueue(keys=self.keys, args=[key, message]))

    def take(self) -> Job | None:
        """Join the oldest active job, else take the next queued one; None when there is none.

        A message that fails :class:`JobMessage` (or names another spider) is dead-lettered with its reason and
        one WARNING, and the next one is looked at: a bad message never stops the workers."""
        for _ in range(TAKE_TRIES):
            got = self._take(keys=[*self.keys, self.dead], args=[
                f"{self.prefix}:{self.spider_name}", self.worker, self.seeding_ms, self.max_bytes, self.dead_max,
                _now()])
            if not got:
                return None
            if got[0] == 0:
                logger.warning("%s: job message dead-lettered to %s: %s", self.spider_name, self.dead,
                               _text(got[1]))
                continue
            message, key = _text(got[0]), _text(got[2])
            job = self._checked(message, key, seed=bool(int(got[1])))
            if job is not None:
                job.generation = stamp_generation(self.server, self.stamp_key)
                return job
        return None

    def _checked(self, message: str, key: str, *, seed: bool) -> Job | None:
        """The job of an active ``message`` (under ``key``), or None after dead-lettering it."""
        try:
            msg = JobMessage.model_validate(loads_bounded(message, max_depth=JOB_MAX_DEPTH,
                                                          max_bytes=self.max_bytes))
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'message'}: {err['msg']}"
                                 for err in e.errors()[:3])
            reason = f"not a job message ({problems})"
        except ValueError as e:
            reason = f"not a job message ({e})"
        else:
            if msg.spider != self.spider_name:
                reason = f"a job of spider {msg.spider[:100]!r}, not {self.spider_name!r}"
            elif msg.key != key:
                reason = f"its key {msg.key!r} is not the key {key[:200]!r} it is filed under"
            else:
                return Job(key=msg.key, spider=msg.spider, args=dict(msg.args), seed=seed, message=message)
        self.bury(Job(key=key, spider=self.spider_name, args={}, seed=seed, message=message), reason)
        return None

    def bury(self, job: Job, reason: str) -> bool:
        """Move an active job this worker cannot run (its message is bad, its arguments no longer validate) to
        the dead-letter list with ``reason``, with one WARNING; False when another worker did first."""
        logger.warning("%s: job %s dead-lettered to %s: %s", self.spider_name, job.key[:200], self.dead, reason)
        header = letter_header("job", reason, job=job.key[:200])
        return bool(self._bury(keys=[self.keys[1], self.dead], args=[
            job.key, job.message, header, self.dead_max, key_base(self.prefix, self.spider_name, job.key),
            self.worker]))

    def state(self, job: Job, spider: Spider) -> str:
        """``done`` (finished, keys deleted), ``seed`` (nobody seeded it: the caller must), ``busy``, or ``lost``:
        the job's generation stamp is gone, Redis lost its data (restarted without persistence) and the job's
        missing keys say nothing about whether it finished."""
        queue = LeasedQueue(self.server, spider, key_base(self.prefix, self.spider_name, job.key))
        result = queue.finish(require_seeded=True, worker=self.worker, seeding_ms=self.seeding_ms,
                              active=self.keys[1], job=job.key, generation=job.generation)
        return {1: "done", 2: "seed", 3: "lost"}.get(result, "busy")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
