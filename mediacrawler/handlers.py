"""HTTP download handler: Scrapy's own, with a connection pool as large as the media slots (docs/media.md,
"Concurrency").

Scrapy's HTTP/1.1 handler keeps at most CONCURRENT_REQUESTS_PER_DOMAIN idle connections per host (4 here, the
APIs' pace). Media slots run MEDIA_SLOT_CONCURRENCY requests (32) to one CDN host, so most media requests would
open a new connection (a TLS handshake each over HTTPS). Scrapy has no setting for the pool size yet (scrapy#5618;
scrapy#7932 proposes one): this subclass sets it through the pool that mediacrawler/compat.py reaches, and
tests/test_compat.py fails when it moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

from mediacrawler.compat import connection_pool
from mediacrawler.config import setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class PooledHTTPDownloadHandler(HTTP11DownloadHandler):
    """HTTP11DownloadHandler keeping up to HTTP_POOL_PER_HOST idle connections per host (at least
    CONCURRENT_REQUESTS_PER_DOMAIN, Scrapy's own figure)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        per_host = max(setting(settings, "HTTP_POOL_PER_HOST"),
                       setting(settings, "CONCURRENT_REQUESTS_PER_DOMAIN"))
        connection_pool(self).maxPersistentPerHost = per_host
