"""Requests as JSON for the shared queue: callbacks by spider method name, ``meta`` plain JSON data, no pickle.

Anyone who can write to a pickled queue can run code on every worker; a JSON payload can only name methods the
spider already has. ``meta`` and ``cb_kwargs`` must hold plain data (str, int, float, bool, None, lists, dicts with
str keys): anything else is refused at enqueue with :class:`UnserializableRequest`, naming the key. Headers and the
body are bytes; they travel as latin-1 text (one code point per byte, so any bytes round-trip).

A stored entry is checked before it becomes a request (docs/operations.md, "Bounds" and "Dead letters"): its JSON
nests at most :data:`MAX_DEPTH` deep (checked before decoding), its callback and errback are among the spider's
``queue_callbacks``, and its URL is http(s) on one of :func:`queue_hosts` (the spider's configured roots).
Anything else raises :class:`RefusedEntry` (a ValueError) with the reason, so someone who can write to Redis can
neither crash a worker nor make it call an arbitrary method or fetch an arbitrary URL.
"""

from __future__ import annotations

import json
import math
from typing import Any

from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.utils.request import request_from_dict

from mediacrawler.fsutil import loads_bounded
from mediacrawler.media.urls import strip_userinfo

#: Format marker of a stored request; a payload without it is refused (e.g. an injected pickle).
FORMAT = "mc-request/1"
#: How deeply a stored request's JSON may nest (meta is checked to 32 levels at enqueue, plus the request's own).
MAX_DEPTH = 40


class UnserializableRequest(ValueError):
    """A request that cannot be stored as JSON (a non-plain ``meta`` value, a callback that is no spider method)."""


class RefusedEntry(ValueError):
    """A stored entry that must not become a request (too deep, an undeclared callback, a foreign host)."""


def _plain_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not plain JSON data, or None."""
    if depth > 32:
        return "nested too deeply"
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"a non-finite float ({value})"
    if isinstance(value, list):
        for v in value:
            problem = _plain_problem(v, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"a dict key of type {type(k).__name__}"
            problem = _plain_problem(v, depth + 1)
            if problem:
                return problem
        return None
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def check_plain(mapping: dict[str, Any], what: str) -> None:
    """Raise :class:`UnserializableRequest` naming the first key of ``mapping`` whose value is not plain data."""
    for key, value in mapping.items():
        problem = _plain_problem(value)
        if problem:
            raise UnserializableRequest(f"request {what}[{key!r}] holds {problem}: only plain JSON data (str, int, "
                                        f"float, bool, None, lists, dicts) can go through the shared queue")


def unwrapped(func: Any) -> Any:
    """The spider method behind a callback wrapped by the scheduler's lease tracking."""
    return getattr(func, "__mc_original__", func)


def request_to_json(request: Request, spider: Spider) -> str:
    """The JSON text of ``request``; raises :class:`UnserializableRequest`."""
    check_plain(request.meta, "meta")
    check_plain(request.cb_kwargs, "cb_kwargs")
    plain = request.replace(callback=unwrapped(request.callback), errback=unwrapped(request.errback))
    try:
        d = plain.to_dict(spider=spider)
    except ValueError as e:  # a callback that is not a method of the spider (a lambda, a function)
        raise UnserializableRequest(f"request {request.url}: {e}") from e
    d["headers"] = {k.decode("latin-1"): [v.decode("latin-1") for v in vs] for k, vs in d["headers"].items()}
    d["body"] = d["body"].decode("latin-1")
    d["format"] = FORMAT
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def request_from_json(text: str | bytes, spider: Spider) -> Request:
    """The request stored by :func:`request_to_json`; raises ValueError (:class:`RefusedEntry` for an entry that
    decodes but is refused) for anything else."""
    try:
        d = loads_bounded(text, max_depth=MAX_DEPTH)
    except UnicodeDecodeError as e:
        raise ValueError(f"not a stored request (not UTF-8: {e.reason})") from None
    except ValueError as e:
        raise RefusedEntry(f"not a stored request ({e})") from None
    if not isinstance(d, dict) or d.pop("format", None) != FORMAT:
        raise ValueError("not a stored request (no format marker)")
    check_entry(d, spider)
    d["headers"] = {k.encode("latin-1"): [v.encode("latin-1") for v in vs] for k, vs in d["headers"].items()}
    d["body"] = d["body"].encode("latin-1")
    return request_from_dict(d, spider=spider)


def check_entry(d: dict[str, Any], spider: Spider) -> None:
    """Raise :class:`RefusedEntry` when the decoded entry ``d`` names a callback the spider does not declare in
    ``queue_callbacks``, or a URL off :func:`queue_hosts`."""
    declared = frozenset(getattr(spider, "queue_callbacks", ()))
    for field in ("callback", "errback"):
        name = d.get(field)
        if name is not None and (not isinstance(name, str) or name not in declared):
            raise RefusedEntry(f"{field} {str(name)[:80]!r} is not one of {spider.name}'s queue callbacks")
    url = d.get("url")
    if not isinstance(url, str):
        raise RefusedEntry("no URL")
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        raise RefusedEntry(f"URL {strip_userinfo(url)[:120]!r} cannot be parsed") from None
    allowed = queue_hosts(spider)
    if parts.scheme.lower() not in ("http", "https") or "@" in parts.netloc or host not in allowed:
        raise RefusedEntry(f"URL {strip_userinfo(url)[:120]!r} is not on a host of {spider.name} ({', '.join(sorted(allowed))})")


def queue_hosts(spider: Spider) -> frozenset[str]:
    """The hosts of the spider's configured roots (the settings its ``root_settings`` names, e.g.
    ``WEIBO_BASE_URL``): the only ones a request decoded from the shared queue may go to."""
    names = getattr(spider, "root_settings", ())
    hosts = (urlsplit(str(spider.settings.get(name) or "")).hostname for name in names)
    return frozenset(h.lower() for h in hosts if h)
