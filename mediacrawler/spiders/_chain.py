"""A post's chain of steps: the requests a post needs beyond its listing, and the typed state they build
(docs/architecture.md, "Platform contract"). Each platform declares its own :class:`Chain` subclass; the state
travels in ``meta`` as plain JSON (:meth:`Chain.to_json`), so JOBDIR and the shared queue can store it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Self


@dataclass
class Step:
    """One request of a post's chain: a ``name`` for logs and records (``"extend"``, ``"playurl:123"``), the URL,
    and extra headers (never credentials)."""

    name: str
    url: str
    headers: dict[str, str] | None = None


@dataclass
class Chain:
    """The state of one post's chain: the post id, what the listing gave (``raw``, plain JSON) and the name of the
    step last sent. A platform's subclass adds, as typed fields of plain JSON values (no tuples, no sets), what
    its steps keep."""

    post_id: str
    raw: dict[str, Any]
    #: The name of the step last sent (``None`` before the first).
    step: str | None = None
    #: Read again only for its counts (``-a refresh``): the post is flagged when the chain ends.
    refresh: bool = False

    def to_json(self) -> dict[str, Any]:
        """The chain as plain JSON (what ``meta["mc_chain"]`` holds)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """The chain :meth:`to_json` gave (fields it does not know, from another version, are ignored; fields it
        lacks take their defaults)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in names})
