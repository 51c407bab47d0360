"""Requests as JSON for the shared queue: callbacks by spider method name, ``meta`` plain JSON data, no pickle.

Anyone who can write to a pickled queue can run code on every worker; a JSON payload can only name methods the
spider already has. ``meta`` and ``cb_kwargs`` must hold plain data (str, int, float, bool, None, lists, dicts with
str keys): anything else is refused at enqueue with :class:`UnserializableRequest`, naming the key. Headers and the
body are bytes; they travel as latin-1 text (one code point per byte, so any bytes round-trip).
"""

from __future__ import annotations

import json
import math
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.request import request_from_dict

#: Format marker of a stored request; a payload without it is refused (e.g. an injected pickle).
FORMAT = "mc-request/1"


class UnserializableRequest(ValueError):
    """A request that cannot be stored as JSON (a non-plain ``meta`` value, a callback that is no spider method)."""


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
    """The request stored by :func:`request_to_json`; raises ValueError for anything else."""
    d = json.loads(text)
    if not isinstance(d, dict) or d.pop("format", None) != FORMAT:
        raise ValueError("not a stored request (no format marker)")
    d["headers"] = {k.encode("latin-1"): [v.encode("latin-1") for v in vs] for k, vs in d["headers"].items()}
    d["body"] = d["body"].encode("latin-1")
    return request_from_dict(d, spider=spider)
