"""CheckpointSkipPipeline: drops the posts an interrupted earlier run of the same job already stored (docs/operations.md,
"Checkpoints")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy.exceptions import NotConfigured

from mediacrawler.config import setting
from mediacrawler.contracts import AlreadyStored, StoredBefore, is_comment

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler


class CheckpointSkipPipeline:
    """Drops posts that an interrupted earlier run of the same job already stored (put it first in the chain).

    The page after the watermark may have been partly stored before the stop; its posts come again on resume and
    are recognised by post id (the checkpoint's list of stored posts past the watermark, plus the records found in
    the feed after the last checkpoint write).
    """

    def __init__(self, crawler: Crawler) -> None:
        if not setting(crawler.settings, "CHECKPOINT_ENABLED"):
            raise NotConfigured("CHECKPOINT_ENABLED is off")
        ext = crawler.get_extension(StoredBefore)  # type: ignore[type-abstract]
        if ext is None:
            raise NotConfigured("the checkpoint extension is not enabled")
        ext.skip_pipeline = True
        self.ext = ext
        assert crawler.stats is not None
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_item(self, item: Any) -> Any:
        if is_comment(item):
            return self._comment(item)
        if self.ext.skip_ids and is_item(item):
            post_id = ItemAdapter(item).get("post_id")
            if post_id and self.ext.already_stored(str(post_id)):
                self.stats.inc_value("checkpoint/skipped_stored")
                raise AlreadyStored(f"post {post_id} was stored before the interruption", log_level="DEBUG")
        return item

    def _comment(self, item: Any) -> Any:
        """A comment of a thread open when the earlier run stopped, found in its export, is dropped likewise."""
        comment_id = ItemAdapter(item).get("comment_id")
        if comment_id in self.ext.skip_comment_ids:
            self.stats.inc_value("checkpoint/skipped_stored_comments")
            raise AlreadyStored(f"comment {comment_id} was stored before the interruption", log_level="DEBUG")
        return item
