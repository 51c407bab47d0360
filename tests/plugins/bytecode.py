"""Compiled bytecode for the processes the tests start, where the environment says not to write any.

With ``PYTHONDONTWRITEBYTECODE`` set, a checkout has no ``__pycache__``: every ``scrapy crawl``, sandbox and worker
the suite starts (a few hundred) would compile the project's modules from source again (≈0.4 s of CPU each). The
test processes give their children a ``PYTHONPYCACHEPREFIX`` (its path in :data:`CACHE_ENV` for xdist's workers)
and drop ``PYTHONDONTWRITEBYTECODE``: each module is compiled once, and the checkout gets no ``__pycache__``
directories. The prefix is ``.pytest_cache/d/pycache`` (kept between runs, as ``__pycache__`` would be; Python
checks each file against its source), or a temporary directory removed at the end with ``-p no:cacheprovider``.
The test processes themselves keep reading the installed packages' own bytecode (a prefix would set those aside
too). Where bytecode may be written, or a prefix is set, nothing changes.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

CACHE_ENV = "MEDIACRAWLER_TEST_PYCACHE"
_OWN: list[str] = []  # a temporary prefix of this session
_SET_ASIDE: list[str] = []  # the PYTHONDONTWRITEBYTECODE of the session's first process


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTHONPYCACHEPREFIX") or not (os.environ.get("PYTHONDONTWRITEBYTECODE")
                                                     or os.environ.get(CACHE_ENV)):
        return
    prefix = os.environ.get(CACHE_ENV)
    if not prefix:  # the session's first process (xdist's workers inherit the variable)
        cache = getattr(config, "cache", None)
        if cache is not None:
            prefix = str(cache.mkdir("pycache"))
        else:
            prefix = tempfile.mkdtemp(prefix="suite-pycache-")
            _OWN.append(prefix)
        os.environ[CACHE_ENV] = prefix
        _SET_ASIDE.append(os.environ["PYTHONDONTWRITEBYTECODE"])
    xdist_controller = not hasattr(config, "workerinput") and bool(config.getoption("numprocesses", 0, skip=False))
    if not xdist_controller:  # the processes that run tests; a controller's children are its workers
        os.environ["PYTHONPYCACHEPREFIX"] = prefix
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    for prefix in _OWN:
        shutil.rmtree(prefix, ignore_errors=True)
    for dont_write in _SET_ASIDE:
        for name in (CACHE_ENV, "PYTHONPYCACHEPREFIX"):
            os.environ.pop(name, None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = dont_write
    _OWN.clear()
    _SET_ASIDE.clear()
