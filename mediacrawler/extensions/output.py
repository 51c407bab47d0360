"""DefaultOutputAddon: JSON Lines to ``OUTPUT_DIR/<spider>/<job>.jsonl`` unless the user asked for other feeds.

An add-on (``ADDONS``) rather than a static ``FEEDS`` value, so that ``-s OUTPUT_DIR=…`` moves the file and
``-o``/``-O``/``FEEDS`` replace it entirely: a user who names an output gets exactly that output.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class DefaultOutputAddon:
    """Adds the default JSON Lines feed when no feed was configured (``OUTPUT_ENABLED`` turns it off)."""

    def update_settings(self, settings: BaseSettings) -> None:
        if not settings.getbool("OUTPUT_ENABLED", True):
            return
        if settings.getdict("FEEDS"):
            return  # -o/-O or FEEDS given: the user's choice stands
        root = Path(settings.get("OUTPUT_DIR") or "output")
        # %(name)s and %(job)s are spider attributes, filled in by the feed exporter when the spider opens.
        uri = str(root / "%(name)s" / "%(job)s.jsonl")
        settings.set("FEEDS", {uri: {"format": "jsonlines", "encoding": "utf-8"}}, priority="addon")
