"""The sandbox's whole world: one deterministic model per platform, built from the CLI arguments.

Reference: docs/sandbox.md, "world.py".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .comments import CommentWorld
from .weibo import DEFAULT_USERS, WeiboWorld, build_weibo_world

__all__ = ["World", "build_weibo_world", "build_world"]


@dataclass
class World:
    """Everything one sandbox serves: its seed and the per-platform models."""

    seed: int
    bad_media: bool
    weibo: WeiboWorld
    #: Every post's comment thread, on every platform that has them (:mod:`.comments`).
    comments: CommentWorld


def build_world(
    *,
    seed: int = 1,
    weibo_users: Sequence[int] = DEFAULT_USERS,
    weibo_pages: int = 5,
    weibo_per_page: int = 10,
    bad_media: bool = False,
) -> World:
    """Build the world a sandbox started with the same CLI arguments serves."""
    return World(
        seed=seed,
        bad_media=bad_media,
        weibo=build_weibo_world(
            seed=seed, users=weibo_users, pages=weibo_pages, per_page=weibo_per_page, bad_media=bad_media
        ),
        comments=CommentWorld(seed),
    )
