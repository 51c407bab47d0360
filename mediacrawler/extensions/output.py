"""DefaultOutputAddon: JSON Lines to ``OUTPUT_DIR/OUTPUT_FILE`` (``<spider>/<job>.jsonl``), and the comments of
``-a comments`` to ``OUTPUT_DIR/COMMENTS_OUTPUT_FILE`` beside it (``<job>.comments.jsonl``), unless the user asked
for other feeds (which then receive both kinds of record).

An add-on (``ADDONS``) rather than a static ``FEEDS`` value, so that ``-s OUTPUT_DIR=…`` moves the file and
``-o``/``-O``/``FEEDS`` replace it entirely: a user who names an output gets exactly that output (``-O`` keeps
Scrapy's meaning, overwrite; ``-o`` appends). The default file is appended to by every run of the job, never
truncated: a re-run never makes an earlier output smaller (docs/operations.md, "Output files").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mediacrawler.config import setting
from mediacrawler.items import Comment, Post

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class DefaultOutputAddon:
    """Adds the default JSON Lines feed when no feed was configured (``OUTPUT_ENABLED`` turns it off)."""

    def update_settings(self, settings: BaseSettings) -> None:
        if not setting(settings, "OUTPUT_ENABLED"):
            return
        if settings.getdict("FEEDS"):
            return  # -o/-O or FEEDS given: the user's choice stands
        root = Path(setting(settings, "OUTPUT_DIR"))
        # %(name)s and %(job)s are spider attributes, filled in by the feed exporter when the spider opens.
        uri = str(root / setting(settings, "OUTPUT_FILE"))
        # overwrite=False: each run appends (after cutting a torn last line, mediacrawler/feeds.py); said here
        # rather than left to Scrapy's default, because truncating would drop every earlier run's records.
        feed = {"format": "jsonlines", "encoding": "utf-8", "overwrite": False}
        comments = str(root / setting(settings, "COMMENTS_OUTPUT_FILE"))
        # Each file takes one kind of record (Scrapy's item filter): a run without comments leaves no file of them
        # (store_empty off).
        settings.set("FEEDS", {uri: {**feed, "item_classes": [Post]},
                               comments: {**feed, "item_classes": [Comment], "store_empty": False}},
                     priority="addon")
