"""Many workers on one Redis: a shared, crash-safe request queue, jobs through Redis, worker lifecycle.

One module per component (see docs/operations.md, "Many workers on one Redis"): :mod:`.serializer` (requests as
JSON), :mod:`.queue` (the leased queue and its Lua scripts), :mod:`.dupefilter`, :mod:`.scheduler`, :mod:`.jobs`
(``mediacrawler enqueue`` and the worker's job board), :mod:`.addon` (the settings-only switch on ``REDIS_URL``).
"""
