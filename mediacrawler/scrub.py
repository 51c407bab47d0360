"""One scrubber for every secret the crawler is configured with (docs/operations.md, "Secrets in logs").

Log records (through :class:`ScrubFilter`, applied as each record is made: :func:`install_log_scrubbing`), error
messages, record fields and exception texts pass through :func:`scrub`. It masks

- every configured credential: the value of each ``name=value`` pair of ``WEIBO_COOKIE``, ``BILIBILI_COOKIE``,
  ``XHS_COOKIE``, ``DOUYIN_COOKIE``; ``FACEBOOK_ACCESS_TOKEN``; the password of ``REDIS_URL`` (each from the
  environment or the setting of the same name), in any letter case and URL-encoded (``quote``,
  ``quote_plus``, either case of percent escapes);
- whatever looks like a secret without being configured: the password of any ``scheme://user:password@`` URL,
  Graph tokens (``EAA…``) and ``access_token=`` / ``appsecret_proof=`` query values.

Mask before cutting a text short: a secret across the cut would otherwise leak its first part.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

__all__ = ["MASK", "ScrubFilter", "configured_secrets", "install_log_scrubbing", "mask_url", "register", "scrub"]

MASK = "[redacted]"
COOKIE_SETTINGS = ("WEIBO_COOKIE", "BILIBILI_COOKIE", "XHS_COOKIE", "DOUYIN_COOKIE")
TOKEN_SETTINGS = ("FACEBOOK_ACCESS_TOKEN",)
URL_SETTINGS = ("REDIS_URL", "RECORDS_DB")
#: Shorter values (``lang=en``, ``1``) are not secrets, and masking them would mangle ordinary text.
MIN_SECRET_LENGTH = 6

# Secret shapes, masked even when not configured: what follows the named group (or the whole token) is replaced.
_SHAPES = re.compile(
    r"(?P<userinfo>[a-z][a-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+(?=@)"
    r"|(?P<param>(?:access_token|appsecret_proof)=)[^&\s\"'<>]+"
    r"|(?-i:\bEAA[A-Za-z0-9]{10,})",  # case-sensitive: a lower-case hex digest may hold "eaa…"
    re.IGNORECASE,
)


def _shape(match: re.Match[str]) -> str:
    return (match.group("userinfo") or match.group("param") or "") + MASK


def cookie_values(cookie: str) -> list[str]:
    """The values of a ``Cookie`` header's ``name=value`` pairs (a bare value counts as one)."""
    values = []
    for pair in cookie.split(";"):
        name, sep, value = pair.strip().partition("=")
        values.append((value if sep else name).strip().strip('"'))
    return [v for v in values if v]


def url_password(url: str) -> str | None:
    """The password in ``url``'s userinfo, if any."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def mask_url(url: str) -> str:
    """*url* with its password replaced by ``***`` (``redis://:s3cret@h:6379/0`` → ``redis://:***@h:6379/0``)."""
    try:
        parts = urlsplit(url)
        password, host, port = parts.password, parts.hostname or "", parts.port
    except ValueError:
        return scrub(url)
    if password is None:
        return url
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{port}" if port is not None else "")
    return urlunsplit(parts._replace(netloc=netloc))


def configured_secrets(settings: Any) -> set[str]:
    """Every credential ``settings`` (or the environment, which wins as in middlewares/sessions.py) configures."""

    def values(name: str) -> list[str]:
        found = [os.environ.get(name), settings.get(name) if settings is not None else None]
        return [str(v) for v in found if v]

    secrets: set[str] = set()
    for name in COOKIE_SETTINGS:
        for cookie in values(name):
            secrets.update(cookie_values(cookie))
    for name in TOKEN_SETTINGS:
        secrets.update(v.strip() for v in values(name))
    for name in URL_SETTINGS:
        secrets.update(p for p in map(url_password, values(name)) if p)
    return {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}


def variants(secret: str) -> set[str]:
    """The forms a secret travels in: as is and URL-encoded; letter case is left to the pattern's IGNORECASE."""
    return {secret, quote(secret), quote(secret, safe=""), quote_plus(secret), quote_plus(secret, safe="")}


class Scrubber:
    """Masks a growing set of secrets (see the module docstring); thread-safe, and idempotent on its output."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        new = {s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH} - self._secrets
        if not new:
            return
        with self._lock:
            self._secrets |= new
            forms = {form for s in self._secrets for form in variants(s)}
            # Longest first: an encoded form containing the plain one is masked whole.
            alternation = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
            self._pattern = re.compile(alternation, re.IGNORECASE)

    def __call__(self, text: str, extra: Iterable[str] = ()) -> str:
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(MASK, text)
        extra = [e for e in extra if e]
        if extra:
            text = Scrubber(extra)(text)
        return _SHAPES.sub(_shape, text)


#: The process's scrubber: every crawler registers its settings' secrets here (a log handler is process-wide too).
SCRUBBER = Scrubber()


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every registered secret, each of ``secrets`` and every secret-shaped string masked."""
    return SCRUBBER(str(text), secrets)


def register(settings: Any) -> None:
    """Add the credentials ``settings`` configures to the process's scrubber."""
    SCRUBBER.add(configured_secrets(settings))


class ScrubFilter(logging.Filter):
    """Scrubs a record's message, exception and stack text in place (so every handler after it sees the masked
    text); never drops a record."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: the handler reports it; our job is only the secret
            message = f"{record.msg} {record.args}"
        record.msg, record.args = scrub(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


_FILTER = ScrubFilter()
_INSTALL_LOCK = threading.Lock()


def _reaches_a_handler(record: logging.LogRecord) -> bool:
    """Whether a handler the record propagates to takes its level (as ``Logger.callHandlers`` decides), so its
    text can be read. Scrapy's handler filters by level but its loggers pass everything: a DEBUG record (each
    item's "Scraped from", with the item's repr) is made, and dropped, for every item at LOG_LEVEL INFO."""
    logger = logging.root if record.name == "root" else logging.Logger.manager.loggerDict.get(record.name)
    if not isinstance(logger, logging.Logger):
        return True  # made outside a logger (logging.makeLogRecord): scrubbed, whoever reads it
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if record.levelno >= handler.level:
                return True
        current = current.parent if current.propagate else None
    last = logging.lastResort
    return not found and last is not None and record.levelno >= last.level


def _scrubbing_factory(base: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        # A record no handler takes is never formatted (the handlers' levels are read as it is made; it is
        # handled right after): scrubbing it would format it for nothing, 0.1 ms for each item's debug line.
        if _reaches_a_handler(record):
            _FILTER.filter(record)
        return record

    make_record.mc_scrubbing = True  # type: ignore[attr-defined]
    return make_record


def install_log_scrubbing(settings: Any) -> None:
    """Register ``settings``' secrets and run :class:`ScrubFilter` on every log record as it is made (once per
    process), whichever handler it then reaches.

    Not a filter on the root handlers: ``Crawler.crawl()`` replaces Scrapy's root handler right after building
    the extensions (``_update_root_log_handler`` → ``scrapy.utils.log.install_scrapy_root_handler``), so such a
    filter is gone before the first middleware, pipeline or spider logs (measured on Scrapy 2.19)."""
    register(settings)
    with _INSTALL_LOCK:
        current = logging.getLogRecordFactory()
        if not getattr(current, "mc_scrubbing", False):
            logging.setLogRecordFactory(_scrubbing_factory(current))
