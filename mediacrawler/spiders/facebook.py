"""Facebook: a page's posts (``-a page=``), one video (``-a video=``) or given posts (``-a post=``), through the
Graph API.

    FACEBOOK_ACCESS_TOKEN=… scrapy crawl facebook -a page=100000000000001
    FACEBOOK_ACCESS_TOKEN=… scrapy crawl facebook -a video=1234567890
    FACEBOOK_ACCESS_TOKEN=… scrapy crawl facebook -a post=100000000000001_1000000000000

The API root is ``FACEBOOK_GRAPH_URL``; the token comes from ``FACEBOOK_ACCESS_TOKEN`` (environment) and is sent as
``Authorization: Bearer`` at download time by the session middleware, never in a URL: ``paging.next`` carries the
token, so the next page's URL is built here from the ``after`` cursor alone, and that cursor is what the checkpoint
keeps. Videos whose attachment has no ``source`` are resolved through their video node (a chain step). Code 190
stops the crawl with a line naming FACEBOOK_ACCESS_TOKEN; codes 4, 17, 32 and 613 back off. See docs/platforms.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from pydantic import Field, field_validator, model_validator
from scrapy.http import Response

from mediacrawler.config import setting
from mediacrawler.items import Post, Source
from mediacrawler.parsers import facebook as parser
from mediacrawler.parsers import facebook_comments
from mediacrawler.parsers._common import CommentPage, Page, PlatformError, job_slug
from mediacrawler.spiders._args import Args, SpiderParams, digits_arg, matched_arg, one_target
from mediacrawler.spiders._chain import Chain, Step
from mediacrawler.spiders._threads import CommentThreads, ThreadState

_PAGE = re.compile(r"^[0-9A-Za-z.]{1,100}$")
#: A Graph post id: ``<page id>_<post id>``.
_POST = re.compile(r"^[0-9]{1,25}_[0-9]{1,25}$")
#: Posts one ``-a post`` job may name (each is one page).
MAX_POSTS = 1000
#: The fields of a post the parser reads (parsers/facebook.py).
POST_FIELDS = ("id,message,created_time,permalink_url,from,"
               "attachments{media_type,media,subattachments,target,url,type,title,description}")


class FacebookParams(SpiderParams):
    """Arguments of ``scrapy crawl facebook``: exactly one of ``page``, ``video`` and ``post``."""

    page: str | None = Field(default=None, description="Page id or username whose posts to crawl.")
    video: str | None = Field(default=None, description="Numeric id of one video to store.")
    post: str | None = Field(default=None, description="Graph post ids (<page id>_<post id>), comma-separated.")

    @field_validator("post", mode="before")
    @classmethod
    def _post_ids(cls, v: Any) -> Any:
        if v is None:
            return v
        ids = [x.strip() for x in str(v).split(",") if x.strip()]
        if not ids or len(ids) > MAX_POSTS or not all(_POST.match(x) for x in ids):
            raise ValueError(f"must be 1 to {MAX_POSTS} Graph post ids like 100000000000001_1000000000000, "
                             f"comma-separated")
        return ",".join(dict.fromkeys(ids))

    @field_validator("page", mode="before")
    @classmethod
    def _page_name(cls, v: Any) -> Any:
        return matched_arg(v, pattern=_PAGE,
                           message="must be a page id or username (letters, digits, dots), e.g. 100000000000001")

    @field_validator("video", mode="before")
    @classmethod
    def _video_id(cls, v: Any) -> Any:
        return digits_arg(v, what="video id", most=25)

    @model_validator(mode="after")
    def _one_target(self) -> FacebookParams:
        return one_target(self, names=("page", "video", "post"),
                          message="give exactly one of -a page=<id>, -a video=<id> or -a post=<page id>_<post id>",
                          items=("post",))


@dataclass
class FacebookChain(Chain):
    """A post with videos whose attachment has no source: the video nodes asked, and the sources found
    (video id → ``[url, length]``)."""

    tried: list[str] = field(default_factory=list)
    sources: dict[str, list[Any]] = field(default_factory=dict)


class FacebookSpider(Args[FacebookParams], CommentThreads):
    """Crawls a Facebook page's posts (or one video) into :class:`~mediacrawler.items.Post` records."""

    name = "facebook"
    platform = "facebook"
    chain_type = FacebookChain
    root_settings = ("FACEBOOK_GRAPH_URL",)
    params_model = FacebookParams
    items_arg = "post"
    args: FacebookParams
    pagination = "cursor"
    credential_env = "FACEBOOK_ACCESS_TOKEN"
    time_zone = "UTC"
    replies_inline = True  # filter=stream lists replies among the comments
    resume_at_mark = True  # order=chronological is oldest first: a re-run starts at the stored `after` cursor

    def credential_headers(self, secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    def refusal_message(self, reason: str) -> str:
        return f"the Graph API refused the access token: FACEBOOK_ACCESS_TOKEN {self.credential_state()}"

    def item_url(self, item: str) -> str:
        return f"{self.base_url}/{quote(item)}?{urlencode({'fields': POST_FIELDS})}"

    def job_key(self) -> str:
        if self.args.page is not None:
            return f"facebook-page-{self.args.page.replace('.', '-')}"
        if self.args.post is not None:
            return f"facebook-post-{job_slug(self.args.post.replace(',', '-'))}"
        return f"facebook-video-{self.args.video}"

    @property
    def base_url(self) -> str:
        return str(setting(self.settings, "FACEBOOK_GRAPH_URL")).rstrip("/")

    def _secrets(self) -> tuple[str, ...]:
        # Only to scrub error messages that echo a token back; never stored.
        token = os.environ.get("FACEBOOK_ACCESS_TOKEN") or self.settings.get("FACEBOOK_ACCESS_TOKEN")
        return (token,) if token else ()

    def listing_url(self, page: int, cursor: str | None) -> str:
        if self.args.video is not None:
            return f"{self.base_url}/{quote(self.args.video)}?{urlencode({'fields': parser.VIDEO_FIELDS})}"
        query: dict[str, Any] = {"fields": POST_FIELDS, "limit": setting(self.settings, "FACEBOOK_PAGE_SIZE")}
        window = self.date_window()
        if window is not None:
            # Graph filters by created_time itself (unix seconds, both ends inclusive: until is the last second).
            since, until = window.bounds_s()
            query.update({k: v for k, v in (("since", since), ("until", until and until - 1)) if v is not None})
        if cursor:
            query["after"] = cursor
        return f"{self.base_url}/{quote(str(self.args.page))}/posts?{urlencode(query)}"

    def _video_url(self, video_id: str) -> str:
        return f"{self.base_url}/{quote(video_id)}?{urlencode({'fields': 'source,length,format'})}"

    def classify_response(self, response: Response) -> str:
        # Graph errors come with HTTP 400/401/403/500 and a JSON body: read them whatever the status.
        try:
            payload = self.payload(response)
        except ValueError:
            return "invalid" if response.status == 200 else "ok"
        kind, _ = parser.classify_error(payload, response.status, secrets=self._secrets())
        return kind

    def parse_listing_payload(self, response: Response, source: Source) -> Page:
        payload = self.payload(response)
        if self.args.video is not None:
            post = parser.post_from_video_node(payload, self.args.video, source=source, fetched_at=self.now_iso(),
                                               secrets=self._secrets())
            return Page(posts=[post], is_last=True)
        return parser.parse_posts(payload, source=source, fetched_at=self.now_iso(), secrets=self._secrets())

    def parse_item_payload(self, response: Response, source: Source, item: str) -> Page:
        """``-a post``: one post node, read as a page of one (its videos without a source then a chain, as on a
        page)."""
        return parser.parse_posts({"data": [self.payload(response)]}, source=source, fetched_at=self.now_iso(),
                                  secrets=self._secrets())

    def listed_time(self, raw: dict[str, Any]) -> str | None:
        # A raw Graph post (waiting for its video nodes) carries created_time in Graph's own format.
        return parser.parse_created_time(raw.get("created_time")) if isinstance(raw, dict) else None

    # --- videos without a source: one video node per step -----------------------------------------------------
    def next_step(self, chain: FacebookChain) -> Step | None:
        tried = set(chain.tried)
        post = parser.post_from_raw(chain.raw, video_sources=self._sources(chain))
        for video_id in post.extra.get("videos_unavailable", ()):
            if video_id not in tried:
                return Step(f"video:{video_id}", self._video_url(video_id))
        return None

    def parse_step(self, response: Response, chain: FacebookChain) -> None:
        video_id = str(chain.step).split(":", 1)[1]
        chain.tried.append(video_id)
        try:
            url, length = parser.parse_video_node(self.payload(response), secrets=self._secrets())
        except PlatformError as e:
            if e.kind != "not_found":
                raise
            # The token may not download this video: the post keeps it listed under videos_unavailable.
            self.logger.warning("facebook: video %s of post %s has no source: %s", video_id, chain.post_id, e)
            return
        chain.sources[video_id] = [url, length]

    def post_from_chain(self, chain: FacebookChain, source: Source, *, missing: str | None) -> Post:
        post = parser.post_from_raw(chain.raw, source=source, fetched_at=self.now_iso(),
                                    video_sources=self._sources(chain))
        if missing is not None:
            post.extra["incomplete"] = missing
        return post

    @staticmethod
    def _sources(chain: FacebookChain) -> dict[str, tuple[str, float | None]]:
        return {vid: (str(found[0]), found[1]) for vid, found in chain.sources.items()}

    # --- comments: /{post}/comments?filter=stream (replies listed too), /{comment}/comments for the rest -------
    # The next page is asked for with the cursor ``after`` alone: paging.next carries the token, never followed.
    def _comments_url(self, node: str, cursor: str | None, *, stream: bool, limit: int) -> str:
        query: dict[str, Any] = {"fields": facebook_comments.COMMENT_FIELDS, "order": "chronological",
                                 "limit": limit}
        if stream:
            query["filter"] = "stream"
        if cursor:
            query["after"] = cursor
        return f"{self.base_url}/{quote(node)}/comments?{urlencode(query)}"

    def comment_page_url(self, state: ThreadState, cursor: str | None) -> str:
        return self._comments_url(state.thread_id, cursor, stream=True,
                                  limit=setting(self.settings, "FACEBOOK_PAGE_SIZE"))

    def reply_page_url(self, state: ThreadState, root_id: str, cursor: str | None) -> str:
        return self._comments_url(root_id, cursor, stream=False,
                                  limit=setting(self.settings, "COMMENTS_REPLY_PAGE_SIZE"))

    def parse_comment_page(self, response: Response, state: ThreadState, source: Source) -> CommentPage:
        return facebook_comments.parse_comments(self.payload(response), post_id=state.post_id, roots=state.known,
                                                source=source, fetched_at=self.now_iso(), secrets=self._secrets())

    def parse_reply_page(self, response: Response, state: ThreadState, root_id: str, source: Source
                         ) -> CommentPage:
        return facebook_comments.parse_comments(self.payload(response), post_id=state.post_id, root_id=root_id,
                                                source=source, fetched_at=self.now_iso(), secrets=self._secrets())
