"""Bilibili's video ids in the sandbox: which bvids exist and their stable ``aid``/``cid``.

Below both :mod:`.video` (which serves a bvid's media under its ``cid``) and :mod:`.bilibili` (which re-exports
these): neither imports the other's layer twice. See docs/sandbox.md, "Bilibili".
"""

from __future__ import annotations

import re

from .det import stable_int

__all__ = ["BVIDS", "BVID_RE", "aid_for", "cid_for"]

BVID_RE = re.compile(r"BV1[0-9A-Za-z]{9}")
#: The bvids the sandbox advertises (any bvid matching :data:`BVID_RE` is a video).
BVIDS: tuple[str, ...] = ("BV1Sbx411A01", "BV1Sbx411A02", "BV1Sbx411A03")


def aid_for(bvid: str) -> int:
    """The numeric ``aid`` of ``bvid`` (stable)."""
    return 100_000_000 + stable_int("bili-aid", bvid, bits=40) % 900_000_000


def cid_for(bvid: str) -> int:
    """The ``cid`` of ``bvid``'s only page (stable)."""
    return 10_000_000 + stable_int("bili-cid", bvid, bits=40) % 90_000_000
