"""Reading a post again: posts whose media failed in earlier runs (docs/operations.md, "Incremental sync and
retries") and fresh URLs for media whose URL expired mid-download. A mixin of
:class:`~mediacrawler.spiders._base.PlatformSpider`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.http import Response
from twisted.python.failure import Failure

from mediacrawler.contracts import asset_key_of, walk_assets
from mediacrawler.items import Post
from mediacrawler.parsers._common import PlatformError
from mediacrawler.scrub import scrub
from mediacrawler.spiders._chain import UNREADABLE_ANSWER

if TYPE_CHECKING:
    from mediacrawler.spiders._base import PlatformSpider

logger = logging.getLogger("mediacrawler.spiders._base")  # one log channel for the spider flow, as before

#: Track suffixes of the keys the video downloader passes to refresh_media_url.
_TRACKS = frozenset({"video", "audio"})


def _same_file(post: Post, *, index_key: str, url: str) -> str | None:
    """The URL in ``post`` (or its original) of asset ``index_key`` with the same path as ``url``."""
    path = urlsplit(url).path
    for platform, asset, _ in walk_assets(post):
        if asset_key_of(platform, asset) == index_key:
            for candidate in (asset["url"], *asset["alternates"]):
                if urlsplit(candidate).path == path:
                    return candidate
    return None


class PostRereads:
    """Reads posts again with the platform's :meth:`post_request`: the job's retried posts first, and any post
    whose media URL stopped working (:meth:`refresh_media_url`, called by the large-file downloader)."""

    def retry_requests(self: PlatformSpider) -> Iterator[Request]:
        """A fresh read of every post in :attr:`JobState.retry_posts` (as :meth:`refresh_media_url` reads one)."""
        for post_id in self.job_state.retry_posts:
            request = self.post_request(post_id)
            if request is None:
                self.job_state.retry_unreachable[post_id] = f"{self.name} cannot read one post again"
                continue
            yield request.replace(callback=self.parse_retry_post, errback=self.retry_post_failed,
                                  meta={**request.meta, "mc_retry_post": post_id})

    def parse_retry_post(self: PlatformSpider, response: Response) -> Iterator[Post]:
        post_id: str = response.meta["mc_retry_post"]
        try:
            post = self.parse_post_payload(response, self.source_for(response))
        except UNREADABLE_ANSWER as e:
            self.job_state.retry_unreachable[post_id] = f"unreadable: {e}"
            return
        if post is None:
            self.job_state.retry_unreachable[post_id] = "the post is gone"
            return
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("retry/posts_read")
        yield self.remember_media(post)

    def retry_post_failed(self: PlatformSpider, failure: Failure) -> Iterator[Any]:
        request = failure.request  # type: ignore[attr-defined]
        self.job_state.retry_unreachable[request.meta["mc_retry_post"]] = scrub(failure.getErrorMessage())
        return iter(())

    def remember_media(self: PlatformSpider, post: Post) -> Post:
        """Note the post each media asset of ``post`` (and of the post it reposts) belongs to; returns ``post``.

        Platform spiders call it for every post they emit that neither :meth:`parse_listing` nor a chain did."""
        if not self.remembers_media:
            return post
        for platform, asset, post_id in walk_assets(post):
            key = asset_key_of(platform, asset)
            self._media_posts[key] = post_id
            self._media_posts.move_to_end(key)
        while len(self._media_posts) > self.media_posts_remembered:
            self._media_posts.popitem(last=False)
        return post

    async def refresh_media_url(self: PlatformSpider, *, key: str, url: str) -> str | None:
        """A fresh URL for media asset ``key`` whose ``url`` stopped working (403/410, an expired signature), or
        ``None``.

        Called by the large-file downloader (:mod:`mediacrawler.media.segments`), which keeps the segments it
        already has. ``key`` is the asset's index key, possibly with ``#<track>``. The post is read again with
        :meth:`post_request` (an API request: the session cookie, rate limits and back-off apply), and the URL
        returned is the one of the same file (same path) in the fresh post: never another rendition.
        """
        # The video downloader keys each track of an asset as "<index key>#<track>".
        base, _, track = key.rpartition("#")
        index_key = base if base and track in _TRACKS else key
        stats = self.crawler.stats
        assert stats is not None
        post_id = self._media_posts.get(index_key)
        if post_id is None:
            logger.warning("%s: no post known for %s (not from this run, or forgotten); it cannot be re-resolved",
                           self.job, index_key)
            stats.inc_value(f"{self.platform}/media_refresh/unknown")
            return None
        request = self.post_request(post_id)
        if request is None or self.crawler.engine is None:
            return None
        stats.inc_value(f"{self.platform}/media_refresh/requests")
        try:
            response = await self.crawler.engine.download_async(request)
            if response.status != 200:
                raise PlatformError("error", f"HTTP {response.status}")
            fresh = self.parse_post_payload(response, self.source_for(request))
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot re-resolve": the asset fails alone
            logger.warning("%s: could not read post %s again for a fresh URL of %s: %s", self.job, post_id,
                           index_key, exc)
            stats.inc_value(f"{self.platform}/media_refresh/failed")
            return None
        if fresh is None:
            logger.warning("%s: post %s is gone; %s cannot be re-resolved", self.job, post_id, index_key)
            stats.inc_value(f"{self.platform}/media_refresh/failed")
            return None
        self.remember_media(fresh)
        found = _same_file(fresh, index_key=index_key, url=url)
        stats.inc_value(f"{self.platform}/media_refresh/{'resolved' if found else 'failed'}")
        if found is None:
            logger.warning("%s: post %s no longer has the file of %s", self.job, post_id, index_key)
        return found
