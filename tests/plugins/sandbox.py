"""Pytest fixtures for the bundled platform sandbox (a real subprocess on 127.0.0.1).

- ``sandbox`` (session): the default world (seed 1, users 7365120894 and 1669879400, 5 pages of 10). Shared by
  the whole session, so a test that changes faults or reads the log calls ``sandbox.reset()`` first.
- ``fresh_sandbox`` (function): the session sandbox, reset before the test.
- ``sandbox_factory`` (function): ``sandbox_factory(weibo_pages=2, bad_media=True, …)`` starts an extra sandbox
  with other CLI options (keywords of :func:`mediacrawler_sandbox.process.start_sandbox`); stopped after the test.

Each fixture yields a :class:`mediacrawler_sandbox.process.SandboxProcess`: ``.url``, ``.weibo_url``,
``.requests()``, ``.reset()``, ``.set_faults(**knobs)``, ``.faults(dict)``, ``.stats()``, ``.info()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mediacrawler_sandbox.process import SandboxProcess, start_sandbox

SandboxFactory = Callable[..., SandboxProcess]


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxProcess]:
    """The session-wide sandbox subprocess with the default world."""
    with start_sandbox(startup_timeout=30) as proc:
        yield proc


@pytest.fixture
def fresh_sandbox(sandbox: SandboxProcess) -> SandboxProcess:
    """The session sandbox with its log, counters and faults reset."""
    sandbox.reset()
    return sandbox


@pytest.fixture
def sandbox_factory() -> Iterator[SandboxFactory]:
    """Start extra sandboxes with other options; all are stopped when the test ends."""
    started: list[SandboxProcess] = []

    def factory(**options: Any) -> SandboxProcess:
        proc = start_sandbox(**options)
        started.append(proc)
        return proc

    try:
        yield factory
    finally:
        for proc in started:
            proc.stop()
