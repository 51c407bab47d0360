"""Douyin: given awemes (``-a aweme=``), each read from its share page or, with DOUYIN_COOKIE, the web detail API.

    scrapy crawl douyin -a aweme=7300000000000000101,https://v.douyin.com/iRNBho6u/ -a max_height=720
    DOUYIN_COOKIE='sessionid=…' scrapy crawl douyin -a aweme=https://www.douyin.com/video/7300000000000000101

One page per aweme (like Bilibili's ``-a bvid``). Without DOUYIN_COOKIE page N is the N-th aweme's share page
``{DOUYIN_SHARE_URL}/share/video/{id}/`` (its ``window._ROUTER_DATA``); with it, ``{DOUYIN_WEB_URL}/aweme/v1/web/
aweme/detail/?aweme_id={id}``, the cookie added at download time by the session middleware. A short link
(``v.douyin.com/{code}/``) is requested on DOUYIN_SHORT_URL and followed by its redirect; the id is read from the
final URL (or the page's one item), and with a cookie the detail API is then a chain step.

A video's ``bit_rate[]`` files are the asset's renditions (``-a max_height`` / ``-a video_codecs`` pick one); an
album's pictures are image assets and its music an audio asset; an item that is filtered or answered with
``status_code`` ≠ 0 is a record with ``deleted: true`` and ``extra.unavailable``. A user's list needs request
signatures (``a_bogus``) this project does not produce: ``-a user=`` is refused with exit status 2. See
docs/platforms.md.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlencode, urlsplit

from pydantic import Field, field_validator, model_validator
from scrapy import Request
from scrapy.http import Response

from mediacrawler.config import setting
from mediacrawler.items import Post, Source
from mediacrawler.jobstate import SourceKind
from mediacrawler.parsers import douyin as parser
from mediacrawler.parsers._common import Page, job_slug
from mediacrawler.spiders._args import Args, SpiderParams, one_target
from mediacrawler.spiders._base import PlatformSpider
from mediacrawler.spiders._chain import Chain, Step

logger = logging.getLogger(__name__)

#: Targets one job takes (each is one page).
MAX_TARGETS = 1000

#: Said for ``-a user=`` (and in the docs).
USER_REFUSED = "a user's list needs request signatures this project does not produce"


class DouyinParams(SpiderParams):
    """Arguments of ``scrapy crawl douyin``: ``aweme`` (``-a user`` is refused, see :data:`USER_REFUSED`)."""

    comments_refused: ClassVar[str | None] = (
        "Douyin's comment API needs signatures made in a browser by its web page's own script; out of scope here")

    aweme: str | None = Field(default=None, description="Aweme ids or share URLs (douyin.com/video/…, "
                                                        "iesdouyin.com/share/video/…, v.douyin.com/…), comma-separated.")
    user: str | None = Field(default=None, description="Not supported: " + USER_REFUSED + ".")

    @field_validator("aweme", mode="before")
    @classmethod
    def _targets(cls, v: Any) -> Any:
        if v is None:
            return v
        values = [x for x in str(v).split(",") if x.strip()]
        if not values or len(values) > MAX_TARGETS:
            raise ValueError(f"must be 1 to {MAX_TARGETS} aweme ids or share URLs, comma-separated")
        targets = [":".join(parser.parse_target(x)) for x in values]  # ValueError names the bad one
        return ",".join(dict.fromkeys(targets))

    @field_validator("user", mode="before")
    @classmethod
    def _user(cls, v: Any) -> Any:
        if v is not None:
            raise ValueError(USER_REFUSED)
        return v

    @model_validator(mode="after")
    def _one_target(self) -> DouyinParams:
        # -a user is refused by its own validator, so "exactly one" is "aweme is set".
        return one_target(self, names=("aweme",), message="give -a aweme=<id or share URL>[,<id or share URL>…]",
                          items=("aweme",))


@dataclass
class DouyinChain(Chain):
    """A short link read with a cookie: the detail API's answer for the aweme it led to, once read."""

    detail: dict[str, Any] | None = None


class DouyinSpider(Args[DouyinParams], PlatformSpider):
    """Crawls given Douyin awemes into :class:`~mediacrawler.items.Post` records (one page each)."""

    name = "douyin"
    platform = "douyin"
    chain_type = DouyinChain
    root_settings = ("DOUYIN_SHARE_URL", "DOUYIN_WEB_URL", "DOUYIN_SHORT_URL")
    params_model = DouyinParams
    args: DouyinParams
    credential_env = "DOUYIN_COOKIE"

    def setup_job(self) -> None:
        #: aweme id → the entry of the job's list that named it first (an id, or ``short link <code>``).
        self._named: dict[str, str] = {}
        super().setup_job()

    def source_kind(self) -> SourceKind:
        return "items"

    def requested_items(self) -> list[str]:
        return str(self.args.aweme).split(",")  # "id:<digits>" or "short:<code>", as validated

    def job_key(self) -> str:
        return f"douyin-aweme-{job_slug(str(self.args.aweme).replace(',', '-').replace(':', '-'))}"

    @property
    def use_detail(self) -> bool:
        """Whether the detail API is used (DOUYIN_COOKIE is set; its value is never read here beyond that)."""
        return bool(os.environ.get("DOUYIN_COOKIE") or self.settings.get("DOUYIN_COOKIE"))

    def _root(self, name: str) -> str:
        return str(self.settings.get(name)).rstrip("/")

    def share_url(self, aweme: str) -> str:
        return f"{self._root('DOUYIN_SHARE_URL')}/share/video/{aweme}/"

    def detail_url(self, aweme: str) -> str:
        query = {"device_platform": "webapp", "aid": "6383", "channel": "channel_pc_web", "aweme_id": aweme}
        return f"{self._root('DOUYIN_WEB_URL')}/aweme/v1/web/aweme/detail/?{urlencode(query)}"

    # --- the awemes given, one request each --------------------------------------------------------------------
    def item_url(self, item: str) -> str:
        kind, value = item.split(":", 1)
        if kind == "short":
            return f"{self._root('DOUYIN_SHORT_URL')}/{value}/"
        return self.detail_url(value) if self.use_detail else self.share_url(value)

    def listing_headers(self) -> dict[str, str]:
        if self.use_detail:
            return {"Referer": f"{self._root('DOUYIN_WEB_URL')}/"}
        return {"User-Agent": str(setting(self.settings, "DOUYIN_SHARE_USER_AGENT"))}

    def classify_response(self, response: Response) -> str:
        if response.status != 200:
            return "ok"  # left to HTTP handling
        if not response.body.strip():
            # The detail API answers a request it does not accept (no session, an expired cookie) with an empty
            # body; an empty share page is not a page either (retried).
            return "login_required" if "/aweme/v1/web/aweme/detail/" in response.url else "invalid"
        if "/aweme/v1/web/aweme/detail/" in response.url:
            try:
                return parser.classify_envelope(self.payload(response))
            except ValueError:
                return "invalid"
        return "ok"  # a share page: what it says about the item is read by the parser

    def refusal_message(self, reason: str) -> str:
        if reason == "login_required":
            return ("the detail API answered nothing: DOUYIN_COOKIE is missing, expired or not accepted "
                    "(unset it to read the share pages instead)")
        return super().refusal_message(reason)

    def parse_item_payload(self, response: Response, source: Source, item: str) -> Page:
        page = Page()
        kind, value = item.split(":", 1)
        if kind == "short":
            aweme = parser.aweme_id_from_url(response.url) or self._only_item(response)
            if aweme is None:
                raise ValueError(f"short link {value} led to {urlsplit(response.url).path!r}, not an aweme")
            if self._named_twice(aweme, kind, value):
                return page
            if self.use_detail:
                page.incomplete[aweme] = {"aweme": aweme, "short": value}
                return page
        else:
            aweme = value
        if self._named_twice(aweme, kind, value):
            return page
        page.posts.append(self._read(response, aweme, source))
        return page

    def _named_twice(self, aweme: str, kind: str, value: str) -> bool:
        """Whether an earlier entry of the list named ``aweme`` (one post; one line says so), else note it."""
        entry = f"short link {value}" if kind == "short" else value
        first = self._named.setdefault(aweme, entry)
        if first == entry:
            return False
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("douyin/named_twice")
        logger.info("%s: %s names the same video as %s (aweme %s); one post", self.job, entry, first, aweme)
        return True

    def _only_item(self, response: Response) -> str | None:
        try:
            ids = {parser.aweme_id(i.get("aweme_id")) for i in self._items(response.text)}
        except ValueError:
            return None
        return ids.pop() if len(ids) == 1 else None

    @staticmethod
    def _items(html: str) -> list[dict[str, Any]]:
        loader = parser.router_data(html).get("loaderData")
        out: list[dict[str, Any]] = []
        for value in (loader.values() if isinstance(loader, dict) else ()):
            info = value.get("videoInfoRes") if isinstance(value, dict) else None
            items = info.get("item_list") if isinstance(info, dict) else None
            out.extend(i for i in (items if isinstance(items, list) else ()) if isinstance(i, dict))
        return out

    def _read(self, response: Response, aweme: str, source: Source) -> Post:
        """The post of ``aweme`` from a detail answer (JSON) or a share page (HTML)."""
        if "/aweme/v1/web/aweme/detail/" in response.url:
            return parser.parse_detail(self.payload(response), aweme=aweme, source=source,
                                       fetched_at=self.now_iso())
        return parser.parse_share_page(response.text, aweme=aweme, source=source, fetched_at=self.now_iso())

    # --- a short link with a cookie: the detail API as a chain step -----------------------------------------
    def next_step(self, chain: DouyinChain) -> Step | None:
        if chain.detail is not None:
            return None
        return Step("detail", self.detail_url(chain.post_id), headers=self.listing_headers())

    def parse_step(self, response: Response, chain: DouyinChain) -> None:
        payload = self.payload(response)
        if not isinstance(payload, dict):
            raise ValueError("detail answer is not a JSON object")
        chain.detail = payload

    def post_from_chain(self, chain: DouyinChain, source: Source, *, missing: str | None) -> Post:
        aweme = chain.post_id
        payload = chain.detail
        if payload is None:
            post = Post(platform=self.platform, post_id=aweme, url=parser.post_url(aweme), author=None,
                        created_at=None, source=source, fetched_at=self.now_iso())
        else:
            try:
                post = parser.parse_detail(payload, aweme=aweme, source=source, fetched_at=self.now_iso())
            except ValueError as e:
                post = Post(platform=self.platform, post_id=aweme, url=parser.post_url(aweme), author=None,
                            created_at=None, source=source, fetched_at=self.now_iso())
                missing = missing or f"detail: {e}"
        if missing is not None:
            post.extra["incomplete"] = missing
        return post

    # --- expired media URLs -----------------------------------------------------------------------------------
    def post_request(self, post_id: str) -> Request | None:
        url = self.detail_url(post_id) if self.use_detail else self.share_url(post_id)
        return Request(url, headers=self.listing_headers(), dont_filter=True,
                       meta={"mc_api": True, "mc_optional": True, "mc_aweme": post_id})

    def parse_post_payload(self, response: Response, source: Source) -> Post | None:
        post = self._read(response, str(response.meta["mc_aweme"]), source)
        if post.deleted:
            return None
        for asset in post.media:
            # The same file in a fresh answer may be any listed rendition, not only the first.
            for rendition in asset.renditions or ():
                asset.alternates.extend([rendition["url"], *rendition.get("alternates", ())])
        return post
