"""Project signals, sent by the platform spiders (see spiders/_base.py) for components beside the item chain.

Handlers receive keyword arguments; connect with ``crawler.signals.connect(handler, signal=page_parsed)``.
"""

#: A listing page was parsed. Arguments: ``spider``, ``page`` (int), ``cursor`` (the cursor that fetched it, or
#: None), ``next_cursor`` (what fetches the next page, or None), ``post_ids`` (list[str]: every post the page will
#: emit, including those still waiting for a second request), ``is_last`` (the platform said this is the end).
page_parsed = object()

#: A listing page failed for good (retries exhausted, unparseable, platform error). Arguments: ``spider``,
#: ``page``, ``cursor``, ``reason`` (str).
page_failed = object()

#: A requested item of an ``items`` job was answered and parsed. Arguments: ``spider``, ``item`` (its key, as in
#: ``JobState.items``), ``post_ids`` (list[str]: every post it will emit; none when it names a post already named).
requested_item_parsed = object()

#: A requested item failed for good. Arguments: ``spider``, ``item``, ``reason`` (str).
requested_item_failed = object()

#: A comment thread moved (spiders/_threads.py). Arguments: ``spider``, ``post_id``, ``state`` (the thread's
#: ``ThreadState`` as plain JSON: the one that fetches the page just read again; at the end its final state, or
#: ``None`` after an error), ``comment_ids`` (the comments that page emits, sent before any of them), ``done``
#: (the thread ended: its post is emitted next), ``mark`` (at the end of a complete walk: ``[id, created_at]`` of
#: the thread's newest top-level comment, else None).
thread_progress = object()

#: A worker (distributed/worker.py) starts serving a job. Arguments: ``spider``, ``job`` (the job key). Here, not
#: in distributed/jobs.py, so that the extensions keeping per-job state connect to it without importing redis-py.
job_started = object()

#: The job a worker served is finished everywhere. Arguments: ``spider``, ``job``.
job_finished = object()
