"""The library pipeline: after the media pipeline stored a post's files, link them under a readable path in
LIBRARY_DIR (mediacrawler/library.py; docs/records.md, "Library")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from itemadapter import ItemAdapter, is_item
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import run_in_thread

from mediacrawler.config import setting
from mediacrawler.library import library_from_settings

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class LibraryPipeline:
    """Links every stored file of an item (a Post, its reposted original, a Comment) into the library: hard links
    into the store, never a copy; a later run leaves a correct entry alone. The file work runs in a worker thread.
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not setting(settings, "LIBRARY_ENABLED"):
            raise NotConfigured("LIBRARY_ENABLED is off")
        if not setting(settings, "MEDIA_ENABLED"):
            raise NotConfigured("MEDIA_ENABLED is off: no stored files to link")
        self.library = library_from_settings(settings)
        assert crawler.stats is not None
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def open_spider(self, spider: Any = None) -> None:
        logger.info("Library at %s (%s)", self.library.root, self.library.template.template)

    async def process_item(self, item: Any) -> Any:
        if not is_item(item):
            return item
        try:
            counts = await run_in_thread(self.library.place, item)
        except (OSError, ValueError) as exc:
            # The store holds the files and the record goes on: the library is a view (rebuild it later).
            self.stats.inc_value("library/errors")
            logger.warning("Library: could not link the files of %s: %s", _name(item), exc)
            return item
        for outcome, n in counts.items():
            if n:
                self.stats.inc_value(f"library/{outcome}", n)
        return item


def _name(item: Any) -> str:
    adapter = ItemAdapter(item)
    return f"{adapter.get('platform')} {adapter.get('comment_id') or adapter.get('post_id')}"
