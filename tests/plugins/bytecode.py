"""Compiled bytecode for the processes the tests start, where the environment says not to write any.

With ``PYTHONDONTWRITEBYTECODE`` set, a checkout has no ``__pycache__``: every ``scrapy crawl``, sandbox and worker
the suite starts (a few hundred) would compile the project's modules from source again (≈0.5 s of CPU each). The
test processes give their children a ``PYTHONPYCACHEPREFIX`` in one temporary directory per session (removed at the
end; its path in :data:`CACHE_ENV`) and drop ``PYTHONDONTWRITEBYTECODE``: each module is compiled once per run, and
the checkout stays free of bytecode as asked. The test processes themselves keep reading the installed packages'
own bytecode (a prefix would set those aside too). Where bytecode may be written, or a prefix is set, nothing
changes.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

CACHE_ENV = "MEDIACRAWLER_TEST_PYCACHE"
_OWN: list[tuple[str, str]] = []  # (the session's directory, the PYTHONDONTWRITEBYTECODE it set aside)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTHONPYCACHEPREFIX") or not (os.environ.get("PYTHONDONTWRITEBYTECODE")
                                                     or os.environ.get(CACHE_ENV)):
        return
    prefix = os.environ.get(CACHE_ENV)
    if not prefix:  # the session's first process (xdist's workers inherit the variable)
        prefix = os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="suite-pycache-")
        _OWN.append((prefix, os.environ["PYTHONDONTWRITEBYTECODE"]))
    xdist_controller = not hasattr(config, "workerinput") and bool(config.getoption("numprocesses", 0, skip=False))
    if not xdist_controller:  # the processes that run tests; a controller's children are its workers
        os.environ["PYTHONPYCACHEPREFIX"] = prefix
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    for prefix, dont_write in _OWN:
        shutil.rmtree(prefix, ignore_errors=True)
        for name in (CACHE_ENV, "PYTHONPYCACHEPREFIX"):
            os.environ.pop(name, None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = dont_write
    _OWN.clear()
