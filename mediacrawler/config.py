"""Settings: ``setting(settings, name)`` reads one with the type of its default in mediacrawler/settings.py, and
:func:`settings_problem` checks every declared setting at start-up (docs/operations.md, "Settings validation").

A declaration is the annotation of a default in settings.py: its type, and constraints in ``Annotated[...]``,
e.g. ``CONCURRENT_REQUESTS: Annotated[int, Range(1)] = 16``. ``int | None`` allows unset."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union
from urllib.parse import urlsplit

from scrapy.utils.misc import load_object

from mediacrawler import settings as defaults

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


@dataclass(frozen=True)
class Range:
    """A number within [min, max]; ``above`` makes min exclusive (``> 0``)."""

    min: float | None = None
    max: float | None = None
    above: bool = False

    def problem(self, value: Any, settings: BaseSettings) -> str | None:
        low = self.min is not None and (value <= self.min if self.above else value < self.min)
        if low or (self.max is not None and value > self.max):
            return self.describe()
        return None

    def describe(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{'>' if self.above else '>='} {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        return " and ".join(parts)


@dataclass(frozen=True)
class OneOf:
    """One of *values* (case-insensitive), or with ``import_path`` a dotted path to a class of one's own."""

    values: tuple[str, ...]
    import_path: bool = False

    def problem(self, value: Any, settings: BaseSettings) -> str | None:
        text = str(value).strip()
        if text.lower() in self.values or (self.import_path and "." in text and " " not in text):
            return None
        return self.describe()

    def describe(self) -> str:
        choices = " | ".join(repr(v) for v in self.values)
        return f"one of {choices}" + (" or the import path of a class" if self.import_path else "")


@dataclass(frozen=True)
class LocalPath:
    """A local directory: a path or a ``file://`` URI (the media store has no remote backends)."""

    def problem(self, value: Any, settings: BaseSettings) -> str | None:
        scheme = urlsplit(str(value)).scheme.lower()
        # One letter: a Windows drive (C:\files), not a scheme.
        return None if scheme in ("", "file") or len(scheme) == 1 else self.describe()

    def describe(self) -> str:
        return "a local directory (a path or file:// URI)"


@dataclass(frozen=True)
class NeedsRedis:
    """The value *when* (e.g. ``"redis"``) works only with REDIS_URL set."""

    when: str = "redis"

    def problem(self, value: Any, settings: BaseSettings) -> str | None:
        if str(value or "").strip().lower() == self.when and not setting(settings, "REDIS_URL"):
            return self.describe()
        return None

    def describe(self) -> str:
        return f"REDIS_URL to be set for {self.when!r}"


@dataclass(frozen=True)
class Relative:
    """A number bounded by another setting: ``<= other`` (``at_most``) or ``> factor x other``."""

    other: str
    factor: float = 1.0
    at_most: bool = False

    def problem(self, value: Any, settings: BaseSettings) -> str | None:
        try:
            bound = self.factor * float(setting(settings, self.other))
        except ValueError:
            return None  # the other setting's own declaration reports it
        ok = value <= bound if self.at_most else value > bound
        return None if ok else self.describe()

    def describe(self) -> str:
        scaled = self.other if self.factor == 1 else f"{self.factor:g} x {self.other}"
        return f"{'<=' if self.at_most else '>'} {scaled}"


@dataclass(frozen=True)
class Parsed:
    """Each value of a dict setting (``RATE_BUDGET``), or the value of a string one (``LIBRARY_TEMPLATE``),
    accepted by the function at the import path *parser* (the component's own parser, which raises ValueError):
    named by a string, as settings.py names components."""

    parser: str
    what: str

    def problem(self, value: Any, settings: BaseSettings) -> str | None:
        parse = load_object(self.parser)
        if isinstance(value, str):
            try:
                parse(value)
            except ValueError as e:
                return str(e)
            return None
        for key, each in (value or {}).items():
            try:
                parse(each)
            except ValueError as e:
                return f"{key!r}: {e}"
        return None

    def describe(self) -> str:
        return self.what


@dataclass(frozen=True)
class TimeZone:
    """An IANA time zone name (``Asia/Shanghai``, ``UTC``), or empty when ``blank`` allows it."""

    blank: bool = True

    def problem(self, value: Any, settings: BaseSettings) -> str | None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        name = str(value or "").strip()
        if not name:
            return None if self.blank else self.describe()
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return self.describe()
        return None

    def describe(self) -> str:
        return "an IANA time zone name (e.g. Asia/Shanghai, UTC)" + (" or empty" if self.blank else "")


Constraint = Range | OneOf | LocalPath | NeedsRedis | Relative | Parsed | TimeZone


def setting(settings: BaseSettings, name: str) -> Any:
    """``settings[name]`` as the type of its default in mediacrawler/settings.py (also the value when unset)."""
    default = getattr(defaults, name)  # AttributeError: a setting settings.py does not define
    getter = {bool: settings.getbool, int: settings.getint, float: settings.getfloat, list: settings.getlist,
              dict: settings.getdict}
    return getter.get(type(default), settings.get)(name, default)


def default(name: str) -> Any:
    """The default settings.py gives *name*: only for the keyword defaults of functions and classes that tests and
    tools build without settings (``check_body(max_image_pixels=…)``); code that has settings reads
    :func:`setting`."""
    return getattr(defaults, name)


_EXPECTED = {bool: "true or false", int: "an integer", float: "a number", list: "a list", dict: "a JSON object",
             str: "a string"}


def declarations() -> dict[str, tuple[Any, bool, tuple[Constraint, ...]]]:
    """Every declared setting of settings.py: name -> (its type, whether unset is allowed, its constraints)."""
    found: dict[str, tuple[Any, bool, tuple[Constraint, ...]]] = {}
    # The declarations' constraints are strings in settings.py (it imports this module only for type checkers).
    constraints = {kind.__name__: kind for kind in typing.get_args(Constraint)}
    hints = typing.get_type_hints(defaults, localns=constraints, include_extras=True)
    for name, hint in hints.items():
        if not name.isupper():
            continue
        constraints: tuple[Constraint, ...] = ()
        if typing.get_origin(hint) is typing.Annotated:
            hint, *extra = typing.get_args(hint)
            constraints = tuple(extra)
        optional = False
        if typing.get_origin(hint) in (Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional, hint = len(args) < len(typing.get_args(hint)), args[0]
        found[name] = (hint, optional, constraints)
    return found


def _typed(settings: BaseSettings, name: str, hint: Any) -> Any:
    """The value of *name* as *hint* (``int``, ``list[int]``…); ValueError or TypeError when it is not one."""
    base = typing.get_origin(hint) or hint
    getter = {bool: settings.getbool, int: settings.getint, float: settings.getfloat, list: settings.getlist,
              dict: settings.getdict}
    if base not in getter:
        return settings.get(name)
    value = getter[base](name)
    if base is list and typing.get_args(hint) == (int,):
        value = [int(v) for v in value]
    return value


def settings_problem(settings: BaseSettings) -> str | None:
    """One line naming the first setting whose value does not fit its declaration, its value and what it expects;
    None when all fit. Run before anything is crawled (commands/crawl.py and every ``mediacrawler`` subcommand)."""
    # Each value on its own first, then the bounds between settings (a bad other setting is named as itself).
    for relative in (False, True):
        for name, (hint, optional, constraints) in declarations().items():
            raw = settings.get(name)
            if raw is None or (optional and raw == ""):
                continue  # unset: setting() gives the default
            try:
                value = _typed(settings, name, hint)
            except (ValueError, TypeError):
                return f"{name}={raw!r}: expected {_expected(hint, constraints)}"
            if hint is int and isinstance(raw, float) and raw != int(raw):  # getint(2.5) would truncate it
                return f"{name}={raw!r}: expected {_expected(hint, constraints)}"
            for constraint in constraints:
                if isinstance(constraint, Relative) != relative:
                    continue
                problem = constraint.problem(value, settings)
                if problem is not None:
                    if isinstance(constraint, Parsed):
                        return f"{name}={raw!r}: {problem}"  # the parser's own words name what it expects
                    what = _expected(hint, (constraint,) if isinstance(constraint, Range | Relative) else ())
                    return f"{name}={raw!r}: expected {what if hint in (int, float) else constraint.describe()}"
    return None


def _expected(hint: Any, constraints: tuple[Constraint, ...]) -> str:
    """What a value of *hint* with *constraints* must be, in words (\"an integer >= 1\")."""
    what = [c.describe() for c in constraints]
    if hint in (int, float) and what:
        return f"{_EXPECTED[hint]} {' and '.join(what)}"
    if hint is str and what:
        return " and ".join(what)
    if typing.get_origin(hint) is list and typing.get_args(hint) == (int,):
        return "a list of integers"
    base = typing.get_origin(hint) or hint
    return " and ".join([_EXPECTED.get(base, getattr(base, "__name__", str(base))), *what])
