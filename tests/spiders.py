"""Test spiders run with ``scrapy runspider tests/spiders.py`` (from a directory without ``scrapy.cfg``, so only
Scrapy's defaults, ``custom_settings`` and ``-s`` apply).

:class:`VideoPostsSpider` stands in for a platform spider in the end-to-end video tests and the video benchmark:
it yields the ``Post`` items of a JSON file (``-a posts=PATH``: a list of ``dataclasses.asdict(Post)``), takes the
arguments every platform spider takes (``-a max_height=480``…), and writes the crawl's stats to ``-a stats=PATH``
when it closes::

    PYTHONPATH=/work/main scrapy runspider /work/main/tests/spiders.py -a posts=posts.json -a max_height=480 \\
        -a stats=stats.json -a listing=http://127.0.0.1:PORT/ -s FILES_STORE=files -O items.jsonl
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.settings import default_settings
from scrapy_spider_metadata import Args

from mediacrawler.commands.process_exit import collect_once_at_exit
from mediacrawler.items import Author, MediaAsset, Metrics, Post
from mediacrawler.spiders._args import SpiderParams


class VideoPostsParams(SpiderParams):
    """:class:`SpiderParams` (``max_height``…) plus where the posts come from and where the stats go."""

    posts: str
    stats: str | None = None
    #: A URL to fetch first; the posts are then yielded from its callback, as a platform spider yields them from
    #: a listing page (and the crawl closes as soon as they are processed, not at the engine's next 5 s heartbeat).
    listing: str | None = None


def post_from_dict(d: dict[str, Any]) -> Post:
    """The inverse of ``dataclasses.asdict(post)``."""
    d = dict(d)
    d["media"] = [MediaAsset(**m) for m in d.get("media") or []]
    d["reposted"] = post_from_dict(d["reposted"]) if d.get("reposted") else None
    d["metrics"] = Metrics(**d["metrics"]) if d.get("metrics") else Metrics()
    d["author"] = Author(**d["author"]) if d.get("author") else None
    d["source"] = None
    return Post(**d)


class _ArgsConsumed(scrapy.Spider):
    """Takes the validated arguments out of the keyword arguments (after ``Args`` read them, before
    ``Spider.__init__`` would set them as attributes), as ``PlatformSpider`` does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for key in VideoPostsParams.model_fields:
            kwargs.pop(key, None)
        super().__init__(*args, **kwargs)


class VideoPostsSpider(Args[VideoPostsParams], _ArgsConsumed):
    """Yields the posts of ``-a posts=PATH``; the media pipeline does the rest."""

    name = "video_posts"
    custom_settings = {
        "ITEM_PIPELINES": {"mediacrawler.pipelines.media.MediaStorePipeline": 300},
        # As in the project settings: media requests in their own per-host slots, not at the API's pace.
        "DOWNLOADER_MIDDLEWARES": {"mediacrawler.middlewares.media_slots.MediaSlotMiddleware": 100},
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        # As in the project settings: Scrapy imports every extension path, a disabled one too, and the remote
        # control's module imports aiohttp (~0.1 s of CPU at start-up, and 54 more modules torn down at exit).
        "EXTENSIONS_BASE": {path: order for path, order in default_settings.EXTENSIONS_BASE.items()
                            if path != "scrapy.extensions.remote_control.RemoteControl"},
        # As in the project settings: a URL from a payload never reaches file/data/s3/ftp handlers.
        "DOWNLOAD_HANDLERS": {"file": None, "data": None, "s3": None, "ftp": None},
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "FEED_EXPORT_ENCODING": "utf-8",
    }

    async def start(self) -> AsyncIterator[Any]:
        if self.args.listing:
            # Any answer will do (the sandbox root is a 404): the posts are not in it.
            yield scrapy.Request(self.args.listing, callback=self.parse_listing, dont_filter=True,
                                 meta={"handle_httpstatus_all": True})
            return
        for item in self.posts():
            yield item

    def parse_listing(self, response: scrapy.http.Response) -> Iterator[Post]:
        yield from self.posts()

    def posts(self) -> Iterator[Post]:
        with open(self.args.posts, encoding="utf-8") as f:
            posts = json.load(f)
        for d in posts:
            yield post_from_dict(d)

    def closed(self, reason: str) -> None:
        # This spider runs only as `scrapy runspider` in a process of its own: it ends it as `scrapy crawl` does.
        collect_once_at_exit()
        if self.args.stats:
            assert self.crawler.stats is not None
            with open(self.args.stats, "w", encoding="utf-8") as f:
                json.dump({**self.crawler.stats.get_stats(), "finish_reason": reason}, f, default=str)
