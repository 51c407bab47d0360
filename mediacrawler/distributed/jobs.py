"""Jobs through Redis: the job board that workers take jobs from and ``mediacrawler enqueue`` (commands/enqueue.py)
fills.

A job is one spider's arguments, validated at enqueue with the spider's own argument model, keyed by the spider's
job key (``weibo-uid-7365120894``)::

    <prefix>:<spider>:jobs     LIST  job messages waiting ({"key", "spider", "args", "enqueued_at"}, JSON)
    <prefix>:<spider>:queued   SET   keys of waiting jobs (a job is queued once)
    <prefix>:<spider>:active   HASH  job key -> message, for jobs being worked on

A worker (``scrapy crawl <platform> -s REDIS_URL=…`` with no target) serves one job at a time: it joins the oldest
active job, else takes the next waiting one (:meth:`JobBoard.take`, one Lua script). The first worker on a job
*seeds* it (its start request; a ``seeding`` key with an expiry, so a worker dying before the seed is in Redis is
replaced). A job is finished when it has nothing queued or leased (:meth:`JobBoard.state`): its keys are deleted
and every worker moves on. The signals :data:`job_started` and :data:`job_finished` (``spider``, ``job``) are the
seam for per-job state (checkpoints) in a process that serves several jobs one after the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from scrapy import Spider
from scrapy.settings import BaseSettings

from mediacrawler.distributed.connection import client_from_settings, key_base
from mediacrawler.distributed.queue import LeasedQueue

#: Sent by a worker when it starts serving a job (``spider``, ``job``: the job key).
job_started = object()
#: Sent by a worker when the job it served is finished everywhere (``spider``, ``job``).
job_finished = object()

ENQUEUE = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
"""

TAKE = """
local key, msg
local keys = redis.call('HKEYS', KEYS[2])
if #keys > 0 then
  key = keys[1]
  msg = redis.call('HGET', KEYS[2], key)
else
  msg = redis.call('LPOP', KEYS[1])
  if not msg then return false end
  key = cjson.decode(msg)['key']
  redis.call('SREM', KEYS[3], key)
  redis.call('HSET', KEYS[2], key, msg)
end
local b = ARGV[1]..':'..key
local seed = 0
if redis.call('EXISTS', b..':seeded') == 0 then
  if redis.call('SET', b..':seeding', ARGV[2], 'NX', 'PX', tonumber(ARGV[3])) then seed = 1 end
end
return {msg, seed}
"""


@dataclass
class Job:
    key: str
    spider: str
    args: dict[str, Any]
    seed: bool


class JobBoard:
    """One spider's jobs in Redis. Blocking calls: run them with :func:`~.scheduler.in_thread`."""

    def __init__(self, settings: BaseSettings, spider_name: str, worker: str,
                 server: redis.Redis | None = None) -> None:
        self.server = server or client_from_settings(settings)
        self.prefix = str(settings.get("DISTRIBUTED_KEY_PREFIX")).rstrip(":")
        self.spider_name = spider_name
        self.worker = worker
        self.seeding_ms = int(settings.getfloat("DISTRIBUTED_LEASE_TTL") * 1000)
        base = f"{self.prefix}:{spider_name}"
        self.keys = [f"{base}:jobs", f"{base}:active", f"{base}:queued"]
        self._enqueue = self.server.register_script(ENQUEUE)
        self._take = self.server.register_script(TAKE)

    def enqueue(self, key: str, args: dict[str, Any]) -> bool:
        """Queue a job; False when a job with this key is already queued or active."""
        message = json.dumps({"key": key, "spider": self.spider_name, "args": args,
                              "enqueued_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
        return bool(self._enqueue(keys=self.keys, args=[key, message]))

    def take(self) -> Job | None:
        """Join the oldest active job, else take the next queued one; None when there is none."""
        got = self._take(keys=self.keys, args=[f"{self.prefix}:{self.spider_name}", self.worker, self.seeding_ms])
        if not got:
            return None
        msg = json.loads(got[0])
        return Job(key=msg["key"], spider=msg["spider"], args=dict(msg["args"]), seed=bool(int(got[1])))

    def drop(self, job: Job) -> None:
        """Take a job this worker cannot run (its arguments no longer validate) off the active list."""
        self.server.hdel(self.keys[1], job.key)

    def state(self, job: Job, spider: Spider) -> str:
        """``done`` (finished, keys deleted), ``seed`` (nobody seeded it: the caller must), or ``busy``."""
        queue = LeasedQueue(self.server, spider, key_base(self.prefix, self.spider_name, job.key))
        result = queue.finish(require_seeded=True, worker=self.worker, seeding_ms=self.seeding_ms,
                              active=self.keys[1], job=job.key)
        return {1: "done", 2: "seed"}.get(result, "busy")
