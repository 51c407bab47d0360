"""The settings of a ``mediacrawler`` command (``status``, ``checkpoints``, ``verify``, ``retry``, ``enqueue``,
``export``, ``library``, ``demo``): the project's settings found from any directory, plus ``-s NAME=VALUE``,
checked as a crawl checks them (:func:`checked_settings`; docs/operations.md, "Commands and settings")."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from scrapy.exceptions import UsageError
from scrapy.settings import Settings
from scrapy.utils.conf import get_config
from scrapy.utils.project import get_project_settings

from mediacrawler.config import setting, settings_problem

#: The settings module a command uses when neither SCRAPY_SETTINGS_MODULE nor a scrapy.cfg names one.
DEFAULT_SETTINGS_MODULE = "mediacrawler.settings"


def add_settings_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``-s/--set NAME=VALUE`` (repeatable, as with ``scrapy crawl -s``) to *parser*."""
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE", dest="set",
                        help="a setting, as with scrapy crawl -s (e.g. -s CHECKPOINT_DIR=/srv/crawl/checkpoints)")
    return parser


def command_settings(pairs: Iterable[str] = ()) -> Settings:
    """The project's settings with each ``NAME=VALUE`` of *pairs* at command-line priority.

    The project is the one a scrapy.cfg (this directory or a parent, or the user's) or ``SCRAPY_SETTINGS_MODULE``
    names; without either, mediacrawler's own settings: a command run from another directory must not fall back to
    Scrapy's bare defaults and silently read other stores. UsageError names a pair that is not ``NAME=VALUE``.
    """
    project = os.environ.get("SCRAPY_PROJECT", "default")
    if "SCRAPY_SETTINGS_MODULE" not in os.environ and not get_config().has_option("settings", project):
        os.environ["SCRAPY_SETTINGS_MODULE"] = DEFAULT_SETTINGS_MODULE
    settings = get_project_settings()
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"-s {pair!r}: expected NAME=VALUE")
        settings.set(name.strip(), value, priority="cmdline")
    return settings


def missing_dir(path: str | os.PathLike[str], *, setting: str, given: str | None = None) -> str | None:
    """One line saying where a command looked for the directory of *setting* when *path* does not exist, else None.

    *given* says how the path was chosen (default ``SETTING=path``); the path is shown absolute, with the working
    directory a relative one was resolved against."""
    where = Path(path)
    if where.is_dir():
        return None
    relative = "" if where.is_absolute() else f", relative to {Path.cwd()}"
    return (f"{where.resolve()} does not exist ({given or f'{setting}={path}'}{relative}); run from the crawl's "
            f"directory or give -s {setting}=…")


def startup_problem(settings: Settings) -> str | None:
    """One line for the first thing that keeps a crawl (or a command) from starting: a setting that does not fit
    its declaration in settings.py, or a REDIS_URL that is misspelt, unreachable or refuses the password (within
    REDIS_CONNECT_TIMEOUT); None when it may start."""
    problem = settings_problem(settings)
    if problem or not setting(settings, "REDIS_URL"):
        return problem
    # redis-py only for the crawls and commands that use Redis (docs/benchmarks.md, "Start-up").
    from mediacrawler.distributed.connection import redis_connect_problem

    return redis_connect_problem(settings)


def checked_settings(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, redis: bool = False,
                     options: Mapping[str, str] | None = None) -> tuple[argparse.Namespace, Settings] | int:
    """Parse *argv* with *parser* (which has :func:`add_settings_option`) and build the command's settings:
    :func:`command_settings` of its ``-s`` pairs, then each of *options* (option dest → setting name) that was
    given, at command-line priority; checked as a crawl checks them (:func:`startup_problem` with *redis*: the
    commands that use Redis; else the declarations alone). ``(options, settings)``, or the exit status after one
    line on stderr (``--help``: 0; usage, a bad setting, an unusable Redis: 2)."""
    try:
        opts = parser.parse_args(list(argv or []))
        settings = command_settings(getattr(opts, "set", None) or ())
    except SystemExit as e:
        return int(e.code or 0)
    except UsageError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2
    for dest, name in (options or {}).items():
        if getattr(opts, dest, None):
            settings.set(name, getattr(opts, dest), priority="cmdline")
    problem = startup_problem(settings) if redis else settings_problem(settings)
    if problem:
        print(f"{parser.prog}: error: {problem}", file=sys.stderr)
        return 2
    return opts, settings
