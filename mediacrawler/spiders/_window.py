"""Date windows: ``-a since=`` / ``-a until=`` (docs/platforms.md, "Date windows").

A window is ``since <= created_at < until`` in UTC. ``since`` and ``until`` are ISO 8601 dates or datetimes; one
without an offset (a bare date is its midnight) is local time in ``TIME_ZONE`` (empty: the platform's own zone,
Asia/Shanghai for the Chinese platforms, UTC for Facebook). Stored times stay UTC. Pure functions: the spider base
applies the window to each listing page (:func:`cut_page`) and to each post finished by a chain (:meth:`admits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from mediacrawler.parsers._common import iso_utc, job_slug


def parse_when(text: str, zone: tzinfo) -> datetime:
    """``2024-03-01`` (midnight in ``zone``), ``2024-03-01T08:30[:00]`` (in ``zone``) or with an offset / ``Z``
    (as given); ValueError otherwise."""
    value = str(text).strip()
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), time(0), tzinfo=zone)
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 date or datetime (e.g. 2024-03-01 or "
                         f"2024-03-01T08:00:00+08:00)") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=zone)


def zone_named(name: str) -> tzinfo:
    """The IANA zone ``name`` (``Asia/Shanghai``, ``UTC``); ValueError for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone (e.g. Asia/Shanghai, UTC)") from None


def check_args(since: str | None, until: str | None) -> None:
    """ValueError when ``since`` or ``until`` cannot be read, or the window is empty (checked in UTC: the crawl's
    zone is not known yet, and both ends are read in the same one)."""
    zone = zone_named("UTC")
    begin = parse_when(since, zone) if since is not None else None
    end = parse_when(until, zone) if until is not None else None
    if begin is not None and end is not None and begin >= end:
        raise ValueError(f"since ({since}) must be before until ({until})")


def window_suffix(since: str | None, until: str | None) -> str:
    """The part of a job key that names its window (``""`` for none): a different window is a different job."""
    if since is None and until is None:
        return ""
    return "-" + job_slug(f"since {since or ''} until {until or ''}")


@dataclass(frozen=True)
class DateWindow:
    """``since`` (inclusive) and ``until`` (exclusive) as the parsers' one UTC format (``…Z``), so that they
    compare with a post's ``created_at`` as text."""

    since: str | None = None
    until: str | None = None

    @classmethod
    def of(cls, since: str | None, until: str | None, zone: tzinfo) -> DateWindow | None:
        """The window of ``-a since``/``-a until`` read in ``zone``; ``None`` when neither is given."""
        if since is None and until is None:
            return None
        return cls(since=iso_utc(parse_when(since, zone)) if since is not None else None,
                   until=iso_utc(parse_when(until, zone)) if until is not None else None)

    def older(self, created_at: str | None) -> bool:
        """Published before ``since`` (unknown: no)."""
        return bool(created_at and self.since and created_at < self.since)

    def newer(self, created_at: str | None) -> bool:
        """Published at or after ``until`` (unknown: no)."""
        return bool(created_at and self.until and created_at >= self.until)

    def admits(self, created_at: str | None) -> bool:
        """Inside the window; a post whose time is unknown is kept (nothing says it is outside)."""
        return not (self.older(created_at) or self.newer(created_at))

    def bounds_s(self) -> tuple[int | None, int | None]:
        """``(since, until)`` as unix seconds, for platforms that filter server-side (``until`` exclusive: the
        last second inside is ``until - 1``)."""
        def seconds(text: str | None) -> int | None:
            return None if text is None else int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
        return seconds(self.since), seconds(self.until)


def cut_page(window: DateWindow, times: list[tuple[str | None, bool]]) -> tuple[list[bool], bool]:
    """For the posts of one newest-first listing page as ``(created_at, pinned)``: which are kept, and whether
    the page is entirely older than ``since`` (its pinned posts and posts of unknown time aside: a page with
    nothing else never stops the walk)."""
    kept = [window.admits(created_at) for created_at, _ in times]
    regular = [window.older(created_at) for created_at, pinned in times if not pinned and created_at]
    return kept, bool(regular) and all(regular)
