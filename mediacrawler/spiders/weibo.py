"""Weibo: a user's timeline (``-a uid=``), a keyword search (``-a keyword=``, ``-a search_type=``) or given posts
(``-a post=``), from m.weibo.cn.

    scrapy crawl weibo -a uid=7365120894 -a start=3 -a max_pages=10
    scrapy crawl weibo -a keyword=猫 -a search_type=realtime
    scrapy crawl weibo -a post=https://m.weibo.cn/detail/4930000000000001,NbqPs0Ab1

Given posts are one listing page each (like Bilibili's ``-a bvid``): ``/statuses/show?id=<mid>`` (a bid or a link
is turned into its mid first); a post that is gone is a record that says so.

The API root is ``WEIBO_BASE_URL``; a login cookie, when needed, comes from the ``WEIBO_COOKIE`` environment
variable and is added at download time by the session middleware, never stored on a request. Video URLs are signed
and expire (``Expires``/``ssig``); a download that outlives its URL reads the post again from
``/statuses/show?id=`` for a fresh one (:meth:`PlatformSpider.refresh_media_url`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

from pydantic import Field, field_validator, model_validator
from scrapy import Request
from scrapy.http import Response

from mediacrawler.config import setting
from mediacrawler.items import Post, Source
from mediacrawler.parsers import weibo as parser
from mediacrawler.parsers import weibo_comments
from mediacrawler.parsers._common import CommentPage, Page, http_date, job_slug
from mediacrawler.spiders._args import Args, SpiderParams, digits_arg, keyword_arg, one_target
from mediacrawler.spiders._chain import Chain, Step
from mediacrawler.spiders._threads import CommentThreads, ThreadState


#: Posts one ``-a post`` job may name (each is one page).
MAX_POSTS = 1000


class WeiboParams(SpiderParams):
    """Arguments of ``scrapy crawl weibo``: exactly one of ``uid`` and ``keyword``."""

    uid: str | None = Field(default=None, description="Numeric user id whose timeline to crawl.")
    keyword: str | None = Field(default=None, description="Search keyword (m.weibo.cn search, the -a search_type "
                                                           "tab).")
    search_type: Literal["all", "realtime", "hot", "video", "picture"] | None = Field(
        default=None, description="Tab of -a keyword: all (default), realtime (newest first), hot, video or "
                                  "picture.")
    post: str | None = Field(default=None, description="Posts: mids, bids or links (m.weibo.cn/detail/<mid>, "
                                                       "weibo.com/<uid>/<bid>), comma-separated.")

    @field_validator("uid", mode="before")
    @classmethod
    def _uid_digits(cls, v: Any) -> Any:
        return digits_arg(v, what="Weibo user id", example="7365120894")

    @field_validator("keyword")
    @classmethod
    def _keyword_text(cls, v: str | None) -> str | None:
        return keyword_arg(v)

    @field_validator("post", mode="before")
    @classmethod
    def _posts(cls, v: Any) -> Any:
        if v is None:
            return v
        entries = [x for x in str(v).split(",") if x.strip()]
        if not entries or len(entries) > MAX_POSTS:
            raise ValueError(f"must be 1 to {MAX_POSTS} post ids or links, comma-separated")
        return ",".join(dict.fromkeys(parser.post_ref(x) for x in entries))  # ValueError names the bad one

    @model_validator(mode="after")
    def _one_target(self) -> WeiboParams:
        if self.search_type is not None and self.keyword is None:
            raise ValueError("-a search_type applies to -a keyword (a search) only")
        return one_target(self, names=("uid", "keyword", "post"),
                          message="give exactly one of -a uid=<digits>, -a keyword=<text> or -a post=<mid, bid or "
                                  "link>[,…]", items=("post",))


@dataclass
class WeiboChain(Chain):
    """A post marked isLongText: its full text, once ``/statuses/extend`` answered (``None``: it had none)."""

    extended: bool = False
    long_text: str | None = None


class WeiboSpider(Args[WeiboParams], CommentThreads):
    """Crawls a Weibo user timeline or keyword search into :class:`~mediacrawler.items.Post` records."""

    name = "weibo"
    platform = "weibo"
    chain_type = WeiboChain
    root_settings = ("WEIBO_BASE_URL",)
    params_model = WeiboParams
    items_arg = "post"
    args: WeiboParams
    classify_envelope = staticmethod(parser.classify_envelope)

    def job_key(self) -> str:
        if self.args.uid is not None:
            return f"weibo-uid-{self.args.uid}"
        if self.args.post is not None:
            return f"weibo-post-{job_slug(self.args.post.replace(',', '-'))}"
        assert self.args.keyword is not None
        tab = f"-{self.args.search_type}" if self.args.search_type not in (None, "all") else ""
        return f"weibo-keyword-{job_slug(self.args.keyword)}{tab}"

    def item_url(self, item: str) -> str:
        return f"{self.base_url}/statuses/show?{urlencode({'id': item})}"

    def newest_first(self) -> bool:
        # A timeline and the realtime tab are; the other tabs are ranked, so -a since never stops them.
        return self.args.uid is not None or self.args.search_type == "realtime"

    @property
    def base_url(self) -> str:
        return setting(self.settings, "WEIBO_BASE_URL").rstrip("/")

    def listing_url(self, page: int, cursor: str | None) -> str:
        if self.args.uid is not None:
            query = {"containerid": parser.timeline_containerid(self.args.uid), "page": page}
        else:
            assert self.args.keyword is not None
            query = {
                "containerid": parser.search_containerid(self.args.keyword, self.args.search_type or "all"),
                "page_type": "searchall",
                "page": page,
            }
        return f"{self.base_url}/api/container/getIndex?{urlencode(query)}"

    def listing_headers(self) -> dict[str, str]:
        # m.weibo.cn's XHR calls carry these; the API answers HTML to requests that look like page loads.
        return {"Accept": "application/json, text/plain, */*", "X-Requested-With": "XMLHttpRequest",
                "MWeibo-Pwa": "1"}

    def parse_listing_payload(self, response: Response, source: Source) -> Page:
        payload = self.payload(response)
        return parser.parse_index(
            payload,
            source=source,
            fetched_at=self.now_iso(),
            expand_long_text=setting(self.settings, "WEIBO_EXPAND_LONG_TEXT"),
            now=http_date(response.headers.get(b"Date")),  # "5分钟前" is relative to when Weibo wrote the answer
        )

    def parse_item_payload(self, response: Response, source: Source, item: str) -> Page:
        """``-a post``: one post from ``/statuses/show`` (its long text a chain step, as on a timeline), or, when
        it is gone, a record that says so."""
        mid, page = item, Page()
        mblog = parser.parse_show(self.payload(response))
        if mblog is None:
            page.posts.append(Post(platform=self.platform, post_id=mid, url=f"https://m.weibo.cn/detail/{mid}",
                                   author=None, created_at=None, source=source, fetched_at=self.now_iso(),
                                   deleted=True, extra={"unavailable": "the post does not exist (or was deleted)"},
                                   ))
            return page
        post = parser.parse_mblog(mblog, source=source, fetched_at=self.now_iso(),
                                  now=http_date(response.headers.get(b"Date")))
        if setting(self.settings, "WEIBO_EXPAND_LONG_TEXT") and mblog.get("isLongText"):
            page.incomplete[post.post_id] = {**mblog, "created_at": post.created_at or mblog.get("created_at")}
        else:
            page.posts.append(post)
        return page

    def next_step(self, chain: WeiboChain) -> Step | None:
        # One step: the full text of a post marked isLongText.
        if chain.extended:
            return None
        return Step("extend", f"{self.base_url}/statuses/extend?{urlencode({'id': chain.post_id})}",
                    headers=self.listing_headers())

    def parse_step(self, response: Response, chain: WeiboChain) -> None:
        try:
            long_text = parser.parse_long_text(self.payload(response))
        except ValueError:
            long_text = None
        if long_text is None:
            self.logger.warning("weibo: no long text for post %s; keeping the truncated text", chain.post_id)
        chain.extended, chain.long_text = True, long_text

    def post_from_chain(self, chain: WeiboChain, source: Source, *, missing: str | None) -> Post:
        # The record is never lost for want of its full text: without it, it is the truncated text, marked
        # extra.long_text = "truncated" by the parser.
        return parser.parse_mblog(chain.raw, source=source, fetched_at=self.now_iso(), long_text=chain.long_text)

    def post_request(self, post_id: str) -> Request | None:
        return Request(
            f"{self.base_url}/statuses/show?{urlencode({'id': post_id})}",
            headers=self.listing_headers(),
            meta={"mc_api": True, "mc_optional": True},
            dont_filter=True,
        )

    def parse_post_payload(self, response: Response, source: Source) -> Post | None:
        mblog = parser.parse_show(self.payload(response))
        return None if mblog is None else parser.parse_mblog(mblog, source=source, fetched_at=self.now_iso(),
                                                             now=http_date(response.headers.get(b"Date")))

    # --- comments: /comments/hotflow, then /comments/hotFlowChild per comment with replies --------------------
    def comment_page_url(self, state: ThreadState, cursor: str | None) -> str:
        max_id, max_id_type = weibo_comments.split_cursor(cursor)
        query = {"id": state.thread_id, "mid": state.thread_id, "max_id_type": max_id_type}
        if cursor:
            query["max_id"] = max_id
        return f"{self.base_url}/comments/hotflow?{urlencode(query)}"

    def reply_page_url(self, state: ThreadState, root_id: str, cursor: str | None) -> str:
        query = {"cid": root_id, "max_id": weibo_comments.split_cursor(cursor)[0], "max_id_type": 0}
        return f"{self.base_url}/comments/hotFlowChild?{urlencode(query)}"

    def parse_comment_page(self, response: Response, state: ThreadState, source: Source) -> CommentPage:
        return weibo_comments.parse_hotflow(self.payload(response), post_id=state.post_id, source=source,
                                            fetched_at=self.now_iso(), now=http_date(response.headers.get(b"Date")))

    def parse_reply_page(self, response: Response, state: ThreadState, root_id: str, source: Source
                         ) -> CommentPage:
        return weibo_comments.parse_hotflow_child(self.payload(response), post_id=state.post_id,
                                                  root_id=root_id, source=source, fetched_at=self.now_iso(),
                                                  now=http_date(response.headers.get(b"Date")))
