"""DistributedAddon: with ``REDIS_URL`` set, ``scrapy crawl`` uses the shared scheduler and duplicate filter.

Without ``REDIS_URL`` (or with ``DISTRIBUTED_ENABLED = False``) it changes nothing. See docs/operations.md, "Many
workers on one Redis".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mediacrawler.config import setting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class DistributedAddon:
    """Sets ``SCHEDULER`` and ``DUPEFILTER_CLASS`` (priority ``addon``: a ``-s`` value still wins)."""

    def update_settings(self, settings: BaseSettings) -> None:
        if not setting(settings, "REDIS_URL") or not setting(settings, "DISTRIBUTED_ENABLED"):
            return
        settings.set("SCHEDULER", "mediacrawler.distributed.scheduler.RedisScheduler", priority="addon")
        settings.set("DUPEFILTER_CLASS", "mediacrawler.distributed.dupefilter.RedisDupeFilter", priority="addon")
