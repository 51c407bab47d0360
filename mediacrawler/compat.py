"""Every private or undocumented Scrapy/Twisted name the project needs, in one place (docs/architecture.md,
"Private internals"). Each has a test in tests/test_compat.py that fails when an upgrade moves or changes it;
no other module of the package reaches into Scrapy or Twisted below their documented surface.

The sandbox (``mediacrawler_sandbox``, a test double outside the product) keeps its own reach,
``twisted.web.server.Request._disconnected`` (Twisted has no public flag for a client that went away);
tests/test_compat.py checks it as well.

Nothing here imports another project module, so any layer may import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.core.downloader.handlers.http11 import TunnelError  # undocumented: raised when a CONNECT proxy refuses
from twisted.web.http import _DataLoss  # what a Twisted ResponseFailed wraps when a body ended short

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Spider
    from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
    from scrapy.crawler import Crawler
    from scrapy.exporters import BaseItemExporter
    from twisted.web.client import HTTPConnectionPool

__all__ = ["DataLoss", "TunnelError", "connection_pool", "default_callback", "exporter_kwargs", "set_slot_pace"]

#: Twisted's private ``_DataLoss`` (a body shorter than its Content-Length, inside a ResponseFailed).
DataLoss = _DataLoss


def connection_pool(handler: HTTP11DownloadHandler) -> HTTPConnectionPool:
    """The connection pool of Scrapy's HTTP/1.1 handler (``_pool``: Scrapy has no setting for its size yet,
    scrapy#5618; mediacrawler/handlers.py)."""
    pool: HTTPConnectionPool = handler._pool  # noqa: SLF001
    return pool


def exporter_kwargs(exporter: BaseItemExporter) -> dict[str, Any]:
    """The keyword arguments an item exporter left for its encoder (``_kwargs``, which Scrapy's JSON exporters
    hand to ScrapyJSONEncoder): ours build their own encoder from them (mediacrawler/exporters.py)."""
    kwargs: dict[str, Any] = exporter._kwargs  # noqa: SLF001
    return kwargs


def default_callback(spider: Spider) -> Callable[..., Any]:
    """The callback Scrapy calls for a request without one (``Spider._parse``, which CrawlSpider overrides):
    what the shared queue wraps when it leases such a request (distributed/scheduler.py)."""
    callback: Callable[..., Any] = spider._parse  # noqa: SLF001
    return callback


def set_slot_pace(crawler: Crawler, slot: str, *, delay: float, concurrency: int) -> None:
    """Give download slot *slot* its own delay and concurrency when the downloader creates it (undocumented
    ``Downloader.per_slot_settings``, the run-time form of DOWNLOAD_SLOTS; middlewares/media_slots.py). A slot
    already configured keeps its settings."""
    crawler.engine.downloader.per_slot_settings.setdefault(
        slot, {"delay": delay, "concurrency": concurrency, "jitter": 0})
