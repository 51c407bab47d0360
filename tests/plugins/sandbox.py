"""Pytest fixtures for the bundled platform sandbox (a real subprocess on 127.0.0.1).

- ``sandbox`` (session): the default world (seed 1, users 7365120894 and 1669879400, 5 pages of 10). Shared by
  the whole session, so a test that changes faults or reads the log calls ``sandbox.reset()`` first.
- ``fresh_sandbox`` (function): the session sandbox, reset before the test.
- ``sandbox_factory`` (function): ``sandbox_factory(weibo_pages=2, bad_media=True, …)`` starts an extra sandbox
  with other CLI options (keywords of :func:`mediacrawler_sandbox.process.start_sandbox`); stopped after the test.

Each fixture yields a :class:`mediacrawler_sandbox.process.SandboxProcess`: ``.url``, ``.weibo_url``,
``.requests()``, ``.reset()``, ``.set_faults(**knobs)``, ``.faults(dict)``, ``.stats()``, ``.info()``.

Every sandbox of the session (the fixtures', the tests' own, the demo's) and the tests that compute what a sandbox
serves keep their encoded videos in one directory for the session (``video.CACHE_ENV``): each video id is encoded
once per run rather than once per process (≈0.6 s of CPU each).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mediacrawler_sandbox.process import SandboxProcess, start_sandbox
from mediacrawler_sandbox.video import CACHE_ENV

SandboxFactory = Callable[..., SandboxProcess]
_OWN_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """The session's video cache, made by the process that starts first (xdist's workers inherit it)."""
    if not os.environ.get(CACHE_ENV):
        _OWN_CACHE.append(tempfile.mkdtemp(prefix="sandbox-videos-"))
        os.environ[CACHE_ENV] = _OWN_CACHE[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _OWN_CACHE:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(CACHE_ENV, None)
    _OWN_CACHE.clear()


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
