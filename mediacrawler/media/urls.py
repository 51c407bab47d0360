"""May this URL be requested for a media asset? One answer for the record (normalize), the download request (media
pipeline) and every redirect hop (middlewares/media_redirects.py); the reasons: docs/media.md, "Results on the
record".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from mediacrawler.config import setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def allowed_schemes(settings: BaseSettings) -> frozenset[str]:
    """MEDIA_ALLOWED_SCHEMES, lower-cased."""
    return frozenset(s.lower() for s in setting(settings, "MEDIA_ALLOWED_SCHEMES"))


def media_url_problem(url: Any, *, allowed_schemes: Iterable[str], max_length: int | None = None) -> str | None:
    """Why ``url`` must not be requested (``invalid-url``, ``url-too-long`` past ``max_length`` characters,
    ``scheme-not-allowed``, ``credentials-in-url``), or ``None`` when it may. A frozenset of schemes is taken as
    lower-cased already (:func:`allowed_schemes`'s)."""
    if not isinstance(url, str) or not url:
        return "invalid-url"
    if max_length is not None and len(url) > max_length:
        return "url-too-long"
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        return "invalid-url"
    allowed = allowed_schemes if isinstance(allowed_schemes, frozenset) else {s.lower() for s in allowed_schemes}
    if parts.scheme.lower() not in allowed:
        return "scheme-not-allowed"
    if "@" in parts.netloc:
        return "credentials-in-url"
    if not hostname:
        return "invalid-url"
    return None


def shown_url(url: str, limit: int) -> str:
    """``url`` without its userinfo, cut to ``limit`` characters (``…`` marks a cut): what a record or a log line
    may keep of a URL that is refused (a multi-KB data: URL must not fill them)."""
    url = strip_userinfo(url)  # on the whole URL: a cut could leave part of a long password before the '@'
    return url if len(url) <= limit else url[:limit] + "…"


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (safe to log and to keep); a URL too broken to split loses everything
    up to its last ``@`` rather than risk keeping a password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.rpartition("@")[2] if "@" in url else url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
