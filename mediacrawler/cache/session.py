"""``session:{id}`` records in the cache that expire unless used (``SESSION_TTL``); docs/architecture.md, "Cache".
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mediacrawler.config import setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from mediacrawler.cache.base import Cache

logger = logging.getLogger(__name__)

@dataclass
class SessionState:
    """One session's transient state. ``auth_ref`` is secret-bearing and therefore not part of the ``repr``."""

    id: str
    auth_ref: str | None = field(default=None, repr=False)
    cursor: str | None = None
    request_count: int = 0
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "auth_ref": self.auth_ref,
            "cursor": self.cursor,
            "request_count": self.request_count,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, session_id: str, record: dict[str, Any]) -> SessionState:
        return cls(
            id=session_id,
            auth_ref=record.get("auth_ref"),
            cursor=record.get("cursor"),
            request_count=int(record.get("request_count") or 0),
            data=dict(record.get("data") or {}),
        )


class SessionStore:
    """Creates, loads and renews ``session:{id}`` records in a :class:`~mediacrawler.cache.base.Cache`.

    Every read or write through the store renews the record's TTL (*ttl* seconds, ``SESSION_TTL``).
    """

    def __init__(self, cache: Cache, *, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError(f"session ttl must be > 0, got {ttl!r}")
        self.cache = cache
        self.ttl = ttl

    @classmethod
    def from_settings(cls, cache: Cache, settings: BaseSettings) -> SessionStore:
        return cls(cache, ttl=setting(settings, "SESSION_TTL"))

    @staticmethod
    def key(session_id: str) -> str:
        return f"session:{session_id}"

    def create(
        self, *, auth_ref: str | None = None, cursor: str | None = None, session_id: str | None = None
    ) -> SessionState:
        """Start a session (a new UUID unless *session_id* is given) and store it."""
        state = SessionState(id=session_id or str(uuid.uuid4()), auth_ref=auth_ref, cursor=cursor)
        self.save(state)
        logger.debug("session %s created (ttl %ss)", state.id, self.ttl)
        return state

    def save(self, state: SessionState) -> None:
        """Store *state*, renewing its TTL."""
        self.cache.set_json(self.key(state.id), state.to_json(), ttl=self.ttl)

    def load(self, session_id: str) -> SessionState | None:
        """The session, or ``None`` once it has expired; loading it counts as a use and renews its TTL."""
        record = self.cache.get_json(self.key(session_id))
        if record is None:
            return None
        self.cache.expire(self.key(session_id), self.ttl)
        return SessionState.from_json(session_id, record)

    def record_request(self, session_id: str, *, cursor: str | None = None) -> SessionState | None:
        """Count one request (and move the cursor when given); ``None`` when the session has expired."""
        state = self.load(session_id)
        if state is None:
            return None
        state.request_count += 1
        if cursor is not None:
            state.cursor = cursor
        self.save(state)
        return state

    def touch(self, session_id: str) -> bool:
        """Renew the TTL without reading the record; ``False`` when it has expired."""
        return self.cache.expire(self.key(session_id), self.ttl)

    def end(self, session_id: str) -> bool:
        """Delete the session now rather than at its expiry."""
        ended = self.cache.delete(self.key(session_id))
        if ended:
            logger.debug("session %s ended", session_id)
        return ended
