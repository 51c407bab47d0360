"""Normalizers shared by the platform parsers: counts, timestamps, HTML to text, URLs, ids.

Pure functions, no Scrapy import: every parser test runs without a crawler.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mediacrawler.items import Comment, Post
from mediacrawler.scrub import scrub

__all__ = [
    "CommentPage",
    "Page",
    "PlatformError",
    "as_int",
    "as_list",
    "as_obj",
    "as_text",
    "clean_id",
    "html_to_text",
    "http_date",
    "https_url",
    "is_http_url",
    "iso_from_timestamp",
    "iso_utc",
    "MAX_COUNT",
    "MAX_DEPTH",
    "check_depth",
    "job_slug",
    "load_json",
    "parse_count",
    "read_count",
    "relative_to_absolute",
    "strip_url",
    "utc_now_iso",
]


class PlatformError(Exception):
    """A platform answered with an error envelope. ``kind`` is one of ``rate_limited``, ``login_required``,
    ``not_found``, ``error``."""

    def __init__(self, kind: str, message: str, *, code: str | int | None = None) -> None:
        # Platforms echo the request's cookie or token in their messages: masked here, before anything logs,
        # stores or cuts the message (mediacrawler/scrub.py).
        message = scrub(message)
        super().__init__(f"{kind}: {message}" + (f" (code {code})" if code is not None else ""))
        self.kind = kind
        self.message = message
        self.code = code


@dataclass
class Page:
    """What a parser makes of one listing response.

    ``is_last`` is the platform's own end-of-list signal; ``next_cursor`` is what the platform gives to fetch the
    next page (e.g. Weibo ``since_id``), ``None`` when it gives nothing. ``skipped`` counts cards that are not posts,
    by reason, so the spider can put them in stats.
    """

    posts: list[Post] = field(default_factory=list)
    next_cursor: str | None = None
    is_last: bool = False
    skipped: dict[str, int] = field(default_factory=dict)
    # Raw platform objects of posts that need a second request before they are complete (e.g. Weibo long text),
    # keyed by post id. Plain JSON data, so a request can carry them through JOBDIR.
    incomplete: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class CommentPage:
    """What a parser makes of one page of a comment thread: the comments in order, the platform's cursor of the
    next page (``None`` when it gives none), its end-of-thread signal, and ``closed``: why the thread cannot be
    read at all (comments turned off, the post gone), a reason for the post, not an error. ``end_cursor``: the
    cursor just after this page's last comment, given on the last page too (Graph's ``paging.cursors.after``),
    where a later walk of an oldest-first thread starts (incremental)."""

    comments: list[Comment] = field(default_factory=list)
    next_cursor: str | None = None
    end_cursor: str | None = None
    is_last: bool = False
    closed: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)


_ID_RE = re.compile(r"[0-9A-Za-z_-]{1,64}")


def clean_id(value: Any) -> str | None:
    """A platform id as a string, or ``None`` when ``value`` is not one: integers (never booleans) and strings of
    letters, digits, ``_`` and ``-`` (at most 64) pass; lists, objects, floats, ``"../x"`` and ``""`` do not.

    Ids end up in file names, job keys and URLs, so nothing else is ever formatted into one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if value >= 0 else None
    if isinstance(value, str):
        value = value.strip()
        return value if _ID_RE.fullmatch(value) else None
    return None


# --- readers of untrusted JSON values: the platform's shapes are not a promise ------------------------------------
def as_obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_text(value: Any) -> str:
    """``value`` when it is a string, else ``""``."""
    return value if isinstance(value, str) else ""


def as_list(value: Any, cap: int) -> list[Any]:
    """The first ``cap`` entries of ``value`` when it is a list, else an empty list."""
    return value[:cap] if isinstance(value, list) else []


_INT_TEXT_RE = re.compile(r"-?[0-9]{1,18}")


def as_int(value: Any) -> int | None:
    """An integer (never a boolean), a finite float below 2**62 (truncated) or a string of at most 18 digits
    (``-`` allowed, spaces around ignored) as an ``int``; anything else ``None``. The bound keeps ``int()`` from
    ever raising or working hard on a hostile value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and abs(value) < 2**62:
        return int(value)
    if isinstance(value, str) and _INT_TEXT_RE.fullmatch(value.strip()):
        return int(value.strip())
    return None


def is_http_url(url: Any) -> bool:
    """Whether ``url`` is an http(s) URL with a host (and a numeric port, if any)."""
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def https_url(url: Any) -> str:
    """A media URL as a usable absolute URL, stripped: protocol-relative ``//host/…`` gets ``https:``; anything that
    is not http(s) with a host is ``""``."""
    if not isinstance(url, str):
        return ""
    url = url.strip()
    if url.startswith("//"):
        url = "https:" + url
    return url if is_http_url(url) else ""


def iso_from_timestamp(value: Any, *, per_second: int = 1, low: int = 1, high: int = 253_402_300_799) -> str | None:
    """A Unix timestamp (``per_second`` units a second: 1000 for milliseconds) as :func:`iso_utc` writes it;
    ``None`` when unreadable or outside ``low..high`` (inclusive; 0 is the platforms' "unknown", and past year 9999
    datetime cannot say it)."""
    n = as_int(value)
    if n is None or not low <= n <= high:
        return None
    return iso_utc(datetime.fromtimestamp(n / per_second if per_second != 1 else n, UTC))


_COUNT_RE = re.compile(r"^\s*([0-9]+)(\.[0-9]+)?\s*(万|亿|[kKmMwW])?\s*\+?\s*$")
_COUNT_UNITS = {None: 1, "万": 10_000, "w": 10_000, "W": 10_000, "亿": 100_000_000, "k": 1_000, "K": 1_000,
                "m": 1_000_000, "M": 1_000_000}
#: The largest engagement count believed (10^15, a million times the most-viewed post): a larger one is unreadable.
MAX_COUNT = 10**15


def _shown(value: Any) -> str:
    """``value`` as a reason shows it: at most 40 characters, with the length of what was cut."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {len(str(abs(value)))} digits" if value.bit_length() < 14_000 else "a huge integer"
    if not isinstance(value, str):
        return repr(value)[:40]
    return repr(value) if len(value) <= 40 else f"{value[:24]!r}… ({len(value)} characters)"


def read_count(value: Any) -> tuple[int | None, str | None]:
    """An engagement count as ``(count, None)``, or ``(None, reason)`` when the platform gave one that cannot be
    believed (negative, not finite, over :data:`MAX_COUNT`, not a count at all); ``(None, None)`` when it gave none.

    Total: never raises, whatever JSON decoded into ``value`` (``Infinity``, ``NaN``, a 400-digit number)."""
    if value is None or value == "":
        return None, None
    if isinstance(value, bool):
        return None, f"not a count: {value!r}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, f"not a finite number: {value!r}"
        number = value
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str):
        m = _COUNT_RE.match(value.replace(",", ""))
        if not m:
            return None, f"not a count: {_shown(value)}"
        whole, fraction, unit = m.groups()
        if len(whole.lstrip("0")) > 16:  # checked before float(), which a 400-digit text would make infinite
            return None, f"count over 10^15: {_shown(value)}"
        # Round, not truncate: "12.6万" must be 126000, not 125999 from binary floating point.
        number = float(whole + (fraction or "")[:21]) * _COUNT_UNITS[unit]
    else:
        return None, f"not a count: {type(value).__name__}"
    if number < 0:
        return None, f"negative count: {_shown(value)}"
    if number > MAX_COUNT:
        return None, f"count over 10^15: {_shown(value)}"
    return int(round(number)) if isinstance(number, float) else number, None


def parse_count(value: Any, *, field: str | None = None, unreadable: dict[str, str] | None = None) -> int | None:
    """An engagement count as an integer: ``12`` → 12, ``"12.6万"`` → 126000, ``"1万+"`` → 10000,
    ``"1.2亿"`` → 120000000, ``"3,456"`` → 3456. Anything unreadable (``""``, ``None``, ``"转发"``, ``Infinity``,
    over :data:`MAX_COUNT`) is ``None``; with ``unreadable``, the reason is kept there under ``field``."""
    count, reason = read_count(value)
    if reason is not None and unreadable is not None and field is not None:
        unreadable[field] = reason
    return count


def iso_utc(dt: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``, second precision: the one timestamp format of every record."""
    if dt.tzinfo is None:
        raise ValueError("naive datetime: the platform's timezone must be known")
    return dt.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now_iso() -> str:
    """Now, as :func:`iso_utc` writes it."""
    return iso_utc(datetime.now(UTC))


def http_date(value: bytes | str | None) -> datetime:
    """An HTTP ``Date`` header as an aware datetime (when the platform wrote its answer: relative dates such as
    "5分钟前" are relative to it); now when absent or unreadable."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if value:
        try:
            parsed = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.now(UTC)


_BR_RE = re.compile(r"<br\s*/?>", re.I)
_IMG_ALT_RE = re.compile(r"<img\b[^>]*?\balt=[\"']?([^\"'>\s]+)[\"']?[^>]*>", re.I)
_BLOCK_END_RE = re.compile(r"</(p|div|li)>", re.I)
_TAG_RE = re.compile(r"<[^>]+>")
_SPACES_RE = re.compile(r"[ \t\u00a0]+")


def html_to_text(fragment: str | None) -> str:
    """Plain text of a post's HTML: line breaks kept, emoji images as their alt text (``[笑cry]``), tags dropped,
    entities decoded, runs of spaces folded."""
    if not fragment:
        return ""
    s = _BR_RE.sub("\n", fragment)
    s = _BLOCK_END_RE.sub("\n", s)
    s = _IMG_ALT_RE.sub(lambda m: m.group(1), s)
    s = _TAG_RE.sub("", s)
    s = html.unescape(s)
    lines = [_SPACES_RE.sub(" ", line).strip() for line in s.split("\n")]
    return "\n".join(lines).strip()


def strip_url(url: str) -> str:
    """A canonical URL: scheme and host lower-cased, no fragment, no query."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", "", ""))


_SLUG_RE = re.compile(r"[^a-z0-9]+")


def job_slug(text: str, *, max_len: int = 40) -> str:
    """A file-name-safe, collision-safe slug for a free-text job target (a search keyword).

    ASCII letters and digits are kept for readability; a short hash of the whole text keeps ``"猫"`` and ``"狗"``
    (both empty once slugged) apart.
    """
    readable = _SLUG_RE.sub("-", text.lower()).strip("-")[:max_len].strip("-")
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]
    return f"{readable}-{digest}" if readable else digest


#: Deepest nesting of a JSON or JavaScript state a parser decodes (a real page is under 30 levels deep): deeper is a
#: hostile or broken answer, refused before the decoder could recurse into it.
MAX_DEPTH = 200
_BRACKETS_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\'[^\'\\]*(?:\\.[^\'\\]*)*\'|[\[\]{}]')


def check_depth(text: str, start: int = 0, *, limit: int = MAX_DEPTH) -> None:
    """Raise ``ValueError`` when the value that begins at ``text[start:]`` nests deeper than ``limit``.

    A cheap scan of brackets outside string literals (single or double quoted, so JavaScript too), from ``start``
    to where the outermost bracket closes: it runs before json/chompjs decode, which recurse and would raise
    ``RecursionError`` (or worse) on a value 100 000 levels deep."""
    depth = 0
    for m in _BRACKETS_RE.finditer(text, start):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                raise ValueError(f"nested deeper than {limit} levels")
        elif token in "]}":
            depth -= 1
            if depth <= 0:
                return


def load_json(text: str | bytes, *, limit: int = MAX_DEPTH) -> Any:
    """``json.loads`` of an answer after :func:`check_depth`: ``ValueError`` for one too deep, never
    ``RecursionError``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8-sig")  # UnicodeDecodeError is a ValueError, as json.loads would raise
    check_depth(text, limit=limit)
    return json.loads(text)


_REL_DIGITS = r"(\d{1,9})"


def relative_to_absolute(text: str, *, now: datetime, tz: timezone) -> datetime | None:
    """Weibo-style relative and partial times ("刚刚", "5分钟前", "3小时前", "今天 10:00", "昨天 10:00", "11-28",
    "2025-11-28") against ``now`` (the answer's own time) in the platform's timezone ``tz``; ``None`` when the text
    is none of these forms.

    A date without a year is the latest such day not after ``now`` ("12-28" read on 2027-01-03 is 2026-12-28).
    Raises ``ValueError`` with the reason for a form that names no real time ("02-30", "今天 25:00", a time after
    ``now``, an offset past the calendar): the caller keeps the raw text as unreadable."""
    local_now = now.astimezone(tz)
    t = text.strip()
    try:
        dt = _relative(t, local_now)
    except OverflowError:
        raise ValueError(f"out of range: {_shown(t)}") from None
    except ValueError:
        raise ValueError(f"no such date or time: {_shown(t)}") from None
    if dt is not None and dt > local_now:
        raise ValueError(f"later than the answer's time ({iso_utc(local_now)}): {_shown(t)}")
    return dt


def _relative(t: str, local_now: datetime) -> datetime | None:
    if t == "刚刚":
        return local_now
    for unit, name in (("秒", "seconds"), ("分钟", "minutes"), ("小时", "hours"), ("天", "days")):
        if m := re.fullmatch(_REL_DIGITS + r"\s*" + unit + "前", t):
            return local_now - timedelta(**{name: int(m.group(1))})
    if re.fullmatch(r"\d+\s*(秒|分钟|小时|天)前", t):
        raise OverflowError(t)  # more than 9 digits: past any calendar
    if m := re.fullmatch(r"(今天|昨天)\s*(\d{1,2}):(\d{2})", t):
        day = local_now - timedelta(days=1 if m.group(1) == "昨天" else 0)
        return day.replace(hour=int(m.group(2)), minute=int(m.group(3)), second=0, microsecond=0)
    if m := re.fullmatch(r"(\d{1,2})-(\d{1,2})", t):
        month, day_of_month = int(m.group(1)), int(m.group(2))
        for year in (local_now.year, local_now.year - 1):
            try:
                dt = local_now.replace(year=year, month=month, day=day_of_month, hour=0, minute=0, second=0,
                                       microsecond=0)
            except ValueError:
                if year == local_now.year - 1:
                    raise
                continue  # "02-29" of a year without one: the year before may not have it either
            if dt <= local_now:
                return dt
        return None
    if m := re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", t):
        return datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=local_now.tzinfo)
    return None
