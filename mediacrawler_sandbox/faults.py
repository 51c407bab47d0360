"""Fault knobs of the sandbox: what to break, for which requests, and how often — deterministically.

Reference: docs/sandbox.md, "faults.py".
"""

from __future__ import annotations

import copy
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .det import rng_for

__all__ = ["DEFAULTS", "ApiFault", "BilibiliFault", "FacebookFault", "FaultError", "FaultState", "WeiboFault", "XhsFault"]

DEFAULTS: dict[str, Any] = {
    "latency_ms": 0,
    "weibo_latency_ms": 0,
    "media_latency_ms": 0,
    "weibo_api": [],
    "weibo_5xx_rate": 0.0,
    "weibo_5xx_status": 503,
    "media_errors": [],
    "media_5xx_rate": 0.0,
    "media_5xx_status": 503,
    "media_cut_rate": 0.0,
    "media_cut_first": 0,
    "media_cut_paths": {},
    "media_stall_paths": {},
    "weibo_video_url_uses": 0,
    "media_cut_fraction": 0.5,
    "media_etag_generation": 0,
    "media_ignore_range": False,
    # -- video / Bilibili (see the docstring section) --
    "bilibili_latency_ms": 0,
    "bilibili_api": [],
    "bilibili_wbi": "lists",
    "bilibili_stream_url_uses": 0,
    "bilibili_durl_segments": 0,
    "bilibili_search_cap": 1000,
    "fragment_drop": [],
    "fragment_corrupt": [],
    # -- Facebook (see the docstring section) --
    "facebook_latency_ms": 0,
    "facebook_token": "sandbox-token",
    "facebook_api": [],
    # -- XiaoHongShu (see the docstring section) --
    "xhs_latency_ms": 0,
    "xhs_web": [],
    # -- Douyin (see the docstring section) --
    "douyin_latency_ms": 0,
}

_WEIBO_KINDS = {"errno", "418", "432", "429", "login", "5xx"}
_ENDPOINTS = {"getIndex", "timeline", "search", "extend", "show", "any"}


class FaultError(ValueError):
    """An invalid knob or value (the control endpoint answers 400 with the message)."""


_BILIBILI_KINDS = {"-352", "-412", "-404", "412", "5xx"}
_BILIBILI_ENDPOINTS = {"playurl", "view", "nav", "arc_search", "search", "player", "any"}
_BILIBILI_WBI = ("lists", "all", "off")
_SEGMENT_SUFFIXES = (".ts", ".m4s", ".mp4")
_FACEBOOK_KINDS = {"4", "17", "32", "613", "190", "100", "5xx"}
_FACEBOOK_ENDPOINTS = {"posts", "video", "any"}
_XHS_KINDS = {"461", "300012", "300012_json", "5xx"}
_XHS_ENDPOINTS = {"note", "profile", "any"}


@dataclass(frozen=True)
class ApiFault:
    """A decided platform API fault: the rule ``kind`` (see each platform's knob above) and the HTTP ``status`` to
    answer with."""

    kind: str
    status: int = 200


#: One class serves every platform; the names say which decision made it.
WeiboFault = BilibiliFault = FacebookFault = XhsFault = ApiFault


def _number(key: str, value: Any, *, low: float, high: float | None, integer: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise FaultError(f"{key} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if value < low or (high is not None and value > high):
        raise FaultError(f"{key} must be in [{low}, {high if high is not None else '∞'}], got {value!r}")
    return value


def _rule_common(key: str, rule: dict[str, Any]) -> None:
    if rule.get("times") is not None:
        _number(f"{key}.times", rule["times"], low=0, high=None, integer=True)
    if rule.get("rate") is not None:
        _number(f"{key}.rate", rule["rate"], low=0, high=1, integer=False)


def _validate(key: str, value: Any) -> Any:
    """Check one knob and return its normalized value."""
    if key not in DEFAULTS:
        raise FaultError(f"unknown fault knob {key!r}; known: {', '.join(sorted(DEFAULTS))}")
    if key.endswith("_ms") or key in ("media_cut_first", "media_etag_generation", "weibo_video_url_uses",
                                                "bilibili_stream_url_uses"):
        return _number(key, value, low=0, high=None, integer=True)
    if key == "bilibili_durl_segments":
        return _number(key, value, low=0, high=4, integer=True)
    if key == "bilibili_search_cap":
        return _number(key, value, low=1, high=100_000, integer=True)
    if key.endswith("_rate") or key == "media_cut_fraction":
        return float(_number(key, value, low=0, high=1, integer=False))
    if key.endswith("_status"):
        return _number(key, value, low=400, high=599, integer=True)
    if key == "facebook_token":
        if not isinstance(value, str) or not value or not value.isprintable() or len(value) > 512:
            raise FaultError(f"{key} must be a non-empty printable string")
        return value
    if key == "bilibili_wbi":
        if value not in _BILIBILI_WBI:
            raise FaultError(f"{key} must be one of {', '.join(_BILIBILI_WBI)}")
        return value
    if key == "media_ignore_range":
        if not isinstance(value, bool):
            raise FaultError(f"{key} must be true or false")
        return value
    if key in ("media_cut_paths", "media_stall_paths"):
        if not isinstance(value, dict):
            raise FaultError(f"{key} must be an object {{path: count}}")
        return {str(p): _number(f"{key}[{p}]", k, low=0, high=None, integer=True) for p, k in value.items()}
    rules = [value] if isinstance(value, dict) else value
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise FaultError(f"{key} must be a rule object or a list of them")
    out = []
    for raw in rules:
        rule = dict(raw)
        _rule_common(key, rule)
        if key in ("bilibili_api", "fragment_drop", "fragment_corrupt"):
            out.append(_video_rule(key, raw, rule))
            continue
        if key == "facebook_api":
            out.append(_facebook_rule(raw, rule))
            continue
        if key == "xhs_web":
            out.append(_xhs_rule(raw, rule))
            continue
        if key == "weibo_api":
            _api_rule(key, raw, rule, kinds=_WEIBO_KINDS, endpoints=_ENDPOINTS, endpoint="getIndex",
                      fields={"page", "uid"})
            rule.setdefault("status", 503)
        else:
            unknown = set(rule) - {"status", "path", "times", "rate"}
            if unknown or "status" not in rule:
                raise FaultError(f"media_errors rule {raw!r}: needs 'status'; allowed keys status/path/times/rate")
            _number("media_errors.status", rule["status"], low=400, high=599, integer=True)
        out.append(rule)
    return out


def _api_rule(key: str, raw: dict[str, Any], rule: dict[str, Any], *, kinds: set[str], endpoints: set[str],
              endpoint: str, fields: set[str]) -> None:
    """Check the part every platform API rule shares, in place: only ``kind``, ``endpoint``, ``times``, ``rate``,
    ``status`` and the platform's own match ``fields``; ``kind`` one of ``kinds`` (as a string); ``endpoint`` one
    of ``endpoints``, ``endpoint`` when not given."""
    unknown = set(rule) - {"kind", "endpoint", "times", "rate", "status"} - fields
    kind = str(rule.get("kind", ""))
    if unknown or kind not in kinds:
        raise FaultError(f"{key} rule {raw!r}: kind must be one of {sorted(kinds)}"
                         + (f"; unknown keys {sorted(unknown)}" if unknown else ""))
    rule["kind"] = kind
    rule.setdefault("endpoint", endpoint)
    if rule["endpoint"] not in endpoints:
        raise FaultError(f"{key} rule {raw!r}: endpoint must be one of {sorted(endpoints)}")


def _facebook_rule(raw: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """Validate one ``facebook_api`` rule."""
    _api_rule("facebook_api", raw, rule, kinds=_FACEBOOK_KINDS, endpoints=_FACEBOOK_ENDPOINTS, endpoint="posts",
              fields={"page"})
    if rule.get("page") is not None:
        _number("facebook_api.page", rule["page"], low=1, high=None, integer=True)
    rule["status"] = _number("facebook_api.status", rule.get("status", 500), low=500, high=599, integer=True)
    return rule


def _xhs_rule(raw: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """Validate one ``xhs_web`` rule."""
    _api_rule("xhs_web", raw, rule, kinds=_XHS_KINDS, endpoints=_XHS_ENDPOINTS, endpoint="note", fields={"note"})
    rule["status"] = _number("xhs_web.status", rule.get("status", 503), low=500, high=599, integer=True)
    return rule


def _video_rule(key: str, raw: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """Validate one ``bilibili_api`` / ``fragment_drop`` / ``fragment_corrupt`` rule."""
    if key == "bilibili_api":
        _api_rule(key, raw, rule, kinds=_BILIBILI_KINDS, endpoints=_BILIBILI_ENDPOINTS, endpoint="playurl",
                  fields={"bvid", "after"})
        rule["status"] = _number(f"{key}.status", rule.get("status", 503), low=400, high=599, integer=True)
        rule["after"] = _number(f"{key}.after", rule.get("after", 0), low=0, high=None, integer=True)
        return rule
    unknown = set(rule) - {"path", "path_regex", "times", "rate"}
    if unknown:
        raise FaultError(f"{key} rule {raw!r}: allowed keys path/path_regex/times/rate")
    if rule.get("path_regex") is not None:
        try:
            re.compile(str(rule["path_regex"]))
        except re.error as exc:
            raise FaultError(f"{key} rule {raw!r}: bad path_regex: {exc}") from None
    return rule


class FaultState:
    """The current knobs plus the counters and random streams that make them deterministic."""

    def __init__(self, seed: int, initial: dict[str, Any] | None = None) -> None:
        self.seed = seed
        self.initial = {k: _validate(k, v) for k, v in (initial or {}).items()}
        self.knobs: dict[str, Any] = {}
        self._rngs: dict[str, random.Random] = {}
        self._rule_hits: dict[tuple[str, int], int] = {}
        self._cut_seen: defaultdict[str, int] = defaultdict(int)
        self._stall_seen: defaultdict[str, int] = defaultdict(int)
        self.reset()

    # -- configuration ----------------------------------------------------------------------------------

    def reset(self) -> None:
        """Back to the start-up knobs, with fresh counters and streams."""
        self.knobs = copy.deepcopy(DEFAULTS)
        self._rngs.clear()
        self._rule_hits.clear()
        self._cut_seen.clear()
        self._stall_seen.clear()
        self.update(self.initial)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` (validated first, all or nothing) and restart the counters of the knobs changed."""
        validated = {k: _validate(k, v) for k, v in changes.items()}
        for key, value in validated.items():
            self.knobs[key] = value
            self._rngs.pop(key, None)
            if key in ("weibo_api", "media_errors", "bilibili_api", "fragment_drop", "fragment_corrupt",
                       "facebook_api", "xhs_web"):
                self._rule_hits = {k: v for k, v in self._rule_hits.items() if k[0] != key}
            if key in ("media_cut_first", "media_cut_paths"):
                self._cut_seen.clear()
            if key == "media_stall_paths":
                self._stall_seen.clear()
        return self.snapshot()

    def snapshot(self) -> dict[str, Any]:
        """The knobs as JSON-able data."""
        return copy.deepcopy(self.knobs)

    def _draw(self, key: str, rate: float) -> bool:
        if rate <= 0:
            return False
        rng = self._rngs.get(key)
        if rng is None:
            rng = self._rngs[key] = rng_for(self.seed, "faults", key)
        return rng.random() < rate

    def _take_rule(self, key: str, index: int, rule: dict[str, Any]) -> bool:
        """Count a matching request against ``rule``; return whether the fault fires for it (never for the first
        ``after`` matching requests)."""
        hits = self._rule_hits.get((key, index), 0)
        after = int(rule.get("after") or 0)
        if rule.get("times") is not None and hits >= after + rule["times"]:
            return False
        self._rule_hits[(key, index)] = hits + 1
        if hits < after:
            return False
        if rule.get("rate") is not None:
            return self._draw(f"{key}[{index}]", rule["rate"])
        return True

    # -- decisions --------------------------------------------------------------------------------------

    def latency(self, area: str) -> float:
        """Seconds to wait before answering a request of ``area`` (``weibo``, ``media`` or other)."""
        ms = self.knobs["latency_ms"] + self.knobs.get(f"{area}_latency_ms", 0)
        return ms / 1000.0

    def weibo_fault(self, endpoint: str, page: int | None, uid: int | None) -> WeiboFault | None:
        """The fault for a Weibo API request to ``endpoint`` (``timeline``/``search``/``extend``/``show``), if
        any."""
        for index, rule in enumerate(self.knobs["weibo_api"]):
            wanted = rule["endpoint"]
            if wanted == "getIndex" and endpoint not in ("timeline", "search"):
                continue
            if wanted not in ("getIndex", "any") and wanted != endpoint:
                continue
            if rule.get("page") is not None and rule["page"] != page:
                continue
            if rule.get("uid") is not None and uid is not None and int(rule["uid"]) != uid:
                continue
            if self._take_rule("weibo_api", index, rule):
                status = {"418": 418, "432": 432, "429": 429, "5xx": int(rule["status"])}.get(rule["kind"], 200)
                return WeiboFault(rule["kind"], status)
        if self._draw("weibo_5xx_rate", self.knobs["weibo_5xx_rate"]):
            return WeiboFault("5xx", self.knobs["weibo_5xx_status"])
        return None

    def media_error(self, path: str) -> int | None:
        """An HTTP error status to answer a media request with, if any."""
        for index, rule in enumerate(self.knobs["media_errors"]):
            if rule.get("path") not in (None, path):
                continue
            if self._take_rule("media_errors", index, rule):
                return int(rule["status"])
        if self._draw("media_5xx_rate", self.knobs["media_5xx_rate"]):
            return int(self.knobs["media_5xx_status"])
        return None

    def media_cut(self, path: str) -> float | None:
        """For a media GET: the share of the body to send before dropping the connection, or ``None``."""
        self._cut_seen[path] += 1
        seen = self._cut_seen[path]
        cut = seen <= self.knobs["media_cut_first"] or seen <= self.knobs["media_cut_paths"].get(path, 0)
        if not cut:
            cut = self._draw("media_cut_rate", self.knobs["media_cut_rate"])
        return float(self.knobs["media_cut_fraction"]) if cut else None

    def media_stall(self, path: str) -> float | None:
        """For a media GET: the share of the body to send before going silent (connection kept), or ``None``."""
        wanted = self.knobs["media_stall_paths"].get(path, 0)
        if not wanted:
            return None
        self._stall_seen[path] += 1
        return float(self.knobs["media_cut_fraction"]) if self._stall_seen[path] <= wanted else None

    # -- video / Bilibili decisions ---------------------------------------------------------------------

    def fragment_fault(self, path: str) -> str | None:
        """For a GET of a video path: ``"drop"`` (answer 404), ``"corrupt"`` (garbage bytes) or ``None``."""
        for key, outcome in (("fragment_drop", "drop"), ("fragment_corrupt", "corrupt")):
            for index, rule in enumerate(self.knobs[key]):
                if rule.get("path") is not None and rule["path"] != path:
                    continue
                if rule.get("path_regex") is not None and not re.search(rule["path_regex"], path):
                    continue
                if rule.get("path") is None and rule.get("path_regex") is None and not path.endswith(
                        _SEGMENT_SUFFIXES):
                    continue
                if self._take_rule(key, index, rule):
                    return outcome
        return None

    def _api_fault(self, key: str, endpoint: str, *, statuses: dict[str, int], default: int, field: str,
                   value: Any) -> ApiFault | None:
        """The first rule of ``key`` for ``endpoint`` (or ``any``) whose ``field``, when set, is ``value`` and
        whose budget fires, as a fault: HTTP status from ``statuses`` by kind, the rule's own for ``5xx``, else
        ``default``."""
        for index, rule in enumerate(self.knobs[key]):
            if rule["endpoint"] not in ("any", endpoint):
                continue
            if rule.get(field) is not None and rule[field] != value:
                continue
            if self._take_rule(key, index, rule):
                status = {**statuses, "5xx": int(rule["status"])}.get(rule["kind"], default)
                return ApiFault(rule["kind"], status)
        return None

    def bilibili_fault(self, endpoint: str, bvid: str | None) -> BilibiliFault | None:
        """The fault for a Bilibili API request to ``endpoint`` (``playurl``/``view``/``nav``/``arc_search``/
        ``search``), if any."""
        return self._api_fault("bilibili_api", endpoint, statuses={"412": 412}, default=200, field="bvid", value=bvid)

    def facebook_fault(self, endpoint: str, page: int | None) -> FacebookFault | None:
        """The fault for a Graph API request to ``endpoint`` (``posts``/``video``), if any."""
        return self._api_fault("facebook_api", endpoint, statuses={}, default=400, field="page", value=page)

    def xhs_fault(self, endpoint: str, note_id: str | None) -> XhsFault | None:
        """The fault for an XHS page request to ``endpoint`` (``note``/``profile``), if any."""
        return self._api_fault("xhs_web", endpoint, statuses={"461": 461}, default=200, field="note", value=note_id)

    def bilibili_wbi_checked(self, endpoint: str) -> bool:
        """Whether requests to the ``/wbi/`` route ``endpoint`` must carry a valid WBI signature."""
        mode = self.knobs["bilibili_wbi"]
        return mode == "all" or (mode == "lists" and endpoint in ("arc_search", "search", "reply"))

    @property
    def etag_generation(self) -> int:
        """The current ETag generation of every media file."""
        return int(self.knobs["media_etag_generation"])

    @property
    def ignore_range(self) -> bool:
        """Whether Range headers are ignored (200 with the full body)."""
        return bool(self.knobs["media_ignore_range"])
