"""Deterministic building blocks shared by the sandbox's world models and media generators.

Everything the sandbox serves is a pure function of ``(seed, labels…)``. Python's :class:`random.Random` seeded
with a *string* hashes it with SHA-512 (seed version 2), so these streams do not depend on ``PYTHONHASHSEED``,
the platform or the process: a test that imports the world model computes exactly what the subprocess serves.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["rng_for", "stable_int", "stable_hex"]


def rng_for(seed: int, *labels: object) -> random.Random:
    """Return an independent random stream for ``seed`` and a path of labels.

    Separate labels give separate streams, so adding a feature that draws from one stream never shifts the
    numbers another feature draws (e.g. ``--bad-media`` leaves every other post of the world unchanged).
    """
    return random.Random(":".join([str(seed), *map(str, labels)]))


def stable_hex(*parts: object, length: int = 16) -> str:
    """A stable hex digest of ``parts`` (BLAKE2b), ``length`` hex characters long."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode("utf-8"), digest_size=32).hexdigest()
    return digest[:length]


def stable_int(*parts: object, bits: int = 64) -> int:
    """A stable non-negative integer of ``bits`` bits derived from ``parts``."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode("utf-8"), digest_size=32).digest()
    return int.from_bytes(digest, "big") >> (256 - bits)
