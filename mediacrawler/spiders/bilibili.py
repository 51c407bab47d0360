"""Bilibili: a creator's uploads (``-a mid=``), a keyword search (``-a keyword=``), given videos (``-a bvid=``), a
favourites folder (``-a fav=``), a collection (``-a season=<mid>:<id>``) or a series (``-a series=<mid>:<id>``).

    scrapy crawl bilibili -a mid=2
    scrapy crawl bilibili -a keyword=日常 -a max_pages=2 -a order=click
    scrapy crawl bilibili -a bvid=BV1Sbx411A01,BV1Sbx411A02 -a max_height=480
    scrapy crawl bilibili -a fav=1000001
    scrapy crawl bilibili -a season=2:5001

Every video is a chain (spiders/_base.py): ``/x/web-interface/view`` (one video asset per part), then one
``/x/player/wbi/playurl`` per part, whose streams go on the asset as ``renditions`` for the media path to select
from by height and codec. Listing and playurl requests are WBI-signed (the openly documented scheme,
parsers/bilibili.py) with a mixin key read from ``/x/web-interface/nav`` and kept in the cache for
BILIBILI_WBI_KEY_TTL seconds. BILIBILI_COOKIE, when set, goes with API requests at download time. ``-352``/``-412``
back off; a video that is gone (``-404``, ``62002``…) is a record that says so. Expired stream URLs are read again
from playurl (:meth:`BilibiliSpider.refresh_media_url`). See docs/platforms.md.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit

from pydantic import Field, field_validator, model_validator
from scrapy import Request
from scrapy.http import Response
from scrapy.utils.asyncio import run_in_thread

from mediacrawler.cache import cache_from_crawler
from mediacrawler.config import setting
from mediacrawler.items import MediaAsset, Post, Source
from mediacrawler.parsers import bilibili as parser
from mediacrawler.parsers import bilibili_comments
from mediacrawler.parsers._common import CommentPage, Page, PlatformError, as_int, as_obj, job_slug
from mediacrawler.spiders._args import Args, SpiderParams, digits_arg, keyword_arg, matched_arg, one_target
from mediacrawler.spiders._chain import Chain, Step
from mediacrawler.spiders._threads import CommentThreads, ThreadState

logger = logging.getLogger(__name__)

_BVID = re.compile(r"^BV[0-9A-Za-z]{10}$")
_AVID = re.compile(r"[aA][vV][1-9][0-9]{0,15}")
_MID_ID = re.compile(r"^[0-9]{1,20}:[0-9]{1,20}$")
#: Most videos per page of a favourites folder (the API's bound; BILIBILI_PAGE_SIZE when smaller).
FAV_PAGE_SIZE = 20
#: The arguments that name a job's target (exactly one is given).
TARGETS = ("mid", "keyword", "bvid", "fav", "season", "series")
#: Cache key of the WBI mixin key (one per API root).
_WBI_CACHE_KEY = "bilibili:wbi:{root}"


class BilibiliParams(SpiderParams):
    """Arguments of ``scrapy crawl bilibili``: exactly one of ``mid``, ``keyword`` and ``bvid``."""

    mid: str | None = Field(default=None, description="Numeric id of the creator whose uploads to crawl.")
    keyword: str | None = Field(default=None, description="Search keyword (video results).")
    order: Literal["pubdate", "click", "stow"] | None = Field(
        default=None, description="Order of -a keyword results: pubdate (newest first), click (most played), stow "
                                  "(most favourited); default Bilibili's own ranking (pubdate with -a since or "
                                  "-a until).")
    bvid: str | None = Field(default=None, description="One or more video ids, comma-separated (BV…).")
    fav: str | None = Field(default=None, description="Numeric id (media_id) of a favourites folder.")
    season: str | None = Field(default=None, description="A collection: <mid>:<season id>.")
    series: str | None = Field(default=None, description="A series: <mid>:<series id>.")
    subtitles: bool = Field(default=False, description="Also store each part's subtitle tracks (JSON and SRT).")
    danmaku: bool = Field(default=False, description="Also store each part's danmaku (XML).")
    chapters: bool = Field(default=False, description="Keep each part's chapters (view points) in the record.")

    @field_validator("mid", mode="before")
    @classmethod
    def _mid_digits(cls, v: Any) -> Any:
        return digits_arg(v, what="Bilibili user id (mid)", example="2")

    @field_validator("fav", mode="before")
    @classmethod
    def _fav_digits(cls, v: Any) -> Any:
        return digits_arg(v, what="favourites folder id (media_id)", example="1000001")

    @field_validator("season", "series", mode="before")
    @classmethod
    def _mid_and_id(cls, v: Any) -> Any:
        return matched_arg(v, pattern=_MID_ID, message="must be <mid>:<id>, both numeric, e.g. 2:5001")

    @field_validator("keyword")
    @classmethod
    def _keyword_text(cls, v: str | None) -> str | None:
        return keyword_arg(v, message="must be 1 to 100 characters")

    @field_validator("bvid", mode="before")
    @classmethod
    def _bvids(cls, v: Any) -> Any:
        if v is None:
            return v
        ids = [x.strip() for x in str(v).split(",") if x.strip()]
        # An old av id names the same video: it is crawled (and keyed) as its BV id.
        ids = [parser.aid_to_bvid(int(x[2:])) if _AVID.fullmatch(x) else x for x in ids]
        if not ids or len(ids) > 1000 or not all(_BVID.match(x) for x in ids):
            raise ValueError("must be video ids like BV1Sbx411A01 (or av170001), comma-separated")
        return ",".join(dict.fromkeys(ids))

    @model_validator(mode="after")
    def _order_of_search(self) -> BilibiliParams:
        if self.order is not None and self.keyword is None:
            raise ValueError("-a order applies to -a keyword (a search) only")
        return self

    @model_validator(mode="after")
    def _one_target(self) -> BilibiliParams:
        return one_target(self, names=TARGETS,
                          message="give exactly one of -a mid=<digits>, -a keyword=<text>, -a bvid=<BV…[,BV…]>, "
                                  "-a fav=<media_id>, -a season=<mid>:<id> or -a series=<mid>:<id>",
                          items=("bvid",))


@dataclass
class BilibiliChain(Chain):
    """One video: its view (unless the listing gave it), the parts kept (``cids``; ``None`` until the view is
    read), then per part the playurl's streams and, with ``-a subtitles``/``chapters``, the player's answer."""

    view: dict[str, Any] | None = None
    cids: list[str] | None = None
    aid: int | None = None
    #: The number of parts the video has, when more than BILIBILI_MAX_PARTS were kept.
    parts_total: int | None = None
    #: Parts whose playurl was asked, in order; what each gave (renditions) or why not.
    tried: list[str] = field(default_factory=list)
    streams: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stream_errors: dict[str, str] = field(default_factory=dict)
    #: Parts whose player/wbi/v2 was asked; what each gave (subtitles, chapters) or why not.
    players_tried: list[str] = field(default_factory=list)
    players: dict[str, dict[str, Any]] = field(default_factory=dict)
    player_errors: dict[str, str] = field(default_factory=dict)


class BilibiliSpider(Args[BilibiliParams], CommentThreads):
    """Crawls Bilibili videos into :class:`~mediacrawler.items.Post` records (one per video, one asset per part)."""

    name = "bilibili"
    platform = "bilibili"
    chain_type = BilibiliChain
    root_settings = ("BILIBILI_API_URL", "BILIBILI_WEB_URL", "BILIBILI_COMMENT_URL")
    params_model = BilibiliParams
    items_arg = "bvid"
    args: BilibiliParams
    classify_envelope = staticmethod(parser.classify_envelope)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The WBI mixin key and when it was read: one per process, whatever job it serves.
        self._mixin: str | None = None
        self._mixin_at = 0.0

    def setup_job(self) -> None:
        # A search from -a since walks windows (the whole one, or day by day: _search_window), each page naming the
        # next by a cursor.
        self.pagination = "cursor" if self.args.keyword is not None and self.args.since is not None else "page"
        super().setup_job()

    def job_key(self) -> str:
        if self.args.mid is not None:
            return f"bilibili-mid-{self.args.mid}"
        if self.args.keyword is not None:
            order = f"-{self.args.order}" if self.args.order else ""
            return f"bilibili-keyword-{job_slug(self.args.keyword)}{order}"
        for name in ("fav", "season", "series"):
            if (value := getattr(self.args, name)) is not None:
                return f"bilibili-{name}-{str(value).replace(':', '-')}"
        return f"bilibili-bvid-{job_slug(str(self.args.bvid).replace(',', '-'))}"

    @property
    def api(self) -> str:
        return str(setting(self.settings, "BILIBILI_API_URL")).rstrip("/")

    # --- WBI keys ---------------------------------------------------------------------------------------------
    async def start(self) -> AsyncIterator[Any]:
        await self.refresh_wbi_key()
        async for request in super().start():
            yield request

    async def refresh_wbi_key(self, *, force: bool = False) -> None:
        """The mixin key from the cache, or from ``/x/web-interface/nav`` (then cached for BILIBILI_WBI_KEY_TTL)."""
        ttl = setting(self.settings, "BILIBILI_WBI_KEY_TTL")
        cache = cache_from_crawler(self.crawler)
        key = _WBI_CACHE_KEY.format(root=self.api)
        if not force:
            cached = await run_in_thread(cache.get_json, key)
            if isinstance(cached, str) and re.fullmatch(r"[0-9a-f]{32}", cached):
                self._mixin, self._mixin_at = cached, time.monotonic()
                return
        assert self.crawler.engine is not None
        # Not an API request for the errors middleware: logged out, nav answers -101 *with* the keys.
        request = Request(f"{self.api}/x/web-interface/nav", meta={"handle_httpstatus_all": True}, dont_filter=True)
        try:
            response = await self.crawler.engine.download_async(request)
            self._mixin = parser.mixin_key(*parser.wbi_keys(self.payload(response)))
        except Exception as exc:  # noqa: BLE001 - unsigned requests then fail on their own, with the platform's answer
            self.logger.error("bilibili: could not read the WBI keys from /x/web-interface/nav: %s", exc)
            return
        self._mixin_at = time.monotonic()
        await run_in_thread(cache.set_json, key, self._mixin, ttl)

    def signed(self, path: str, params: dict[str, Any]) -> str:
        """``{BILIBILI_API_URL}{path}?<params + wts + w_rid>``; unsigned when no key could be read."""
        query = parser.sign_params(params, self._mixin, wts=int(time.time())) if self._mixin else params
        return f"{self.api}{path}?{urlencode(query)}"

    # --- listings ---------------------------------------------------------------------------------------------
    def listing_url(self, page: int, cursor: str | None) -> str:
        if self.args.mid is not None:
            return self.signed("/x/space/wbi/arc/search",
                               {"mid": self.args.mid, "pn": page,
                                "ps": setting(self.settings, "BILIBILI_PAGE_SIZE"), "order": "pubdate"})
        if self.args.keyword is not None:
            return self.signed("/x/web-interface/wbi/search/type", self._search_query(page, cursor))
        size = setting(self.settings, "BILIBILI_PAGE_SIZE")
        if self.args.fav is not None:
            query: dict[str, Any] = {"media_id": self.args.fav, "pn": page, "ps": min(size, FAV_PAGE_SIZE),
                                     "keyword": "", "order": "mtime", "type": 0, "tid": 0, "platform": "web"}
            return f"{self.api}/x/v3/fav/resource/list?{urlencode(query)}"
        if self.args.season is not None:
            mid, season_id = self.args.season.split(":")
            query = {"mid": mid, "season_id": season_id, "sort_reverse": "false", "page_num": page,
                     "page_size": size}
            return f"{self.api}/x/polymer/web-space/seasons_archives_list?{urlencode(query)}"
        if self.args.series is not None:
            mid, series_id = self.args.series.split(":")
            query = {"mid": mid, "series_id": series_id, "only_normal": "true", "sort": "desc", "pn": page,
                     "ps": size}
            return f"{self.api}/x/series/archives?{urlencode(query)}"
        raise ValueError(f"{self.job}: no listing for these arguments")

    def item_url(self, item: str) -> str:
        return self._view_url(item)

    def _search_query(self, page: int, cursor: str | None) -> dict[str, Any]:
        """search/type's query: ``-a order``, and a date window filtered server-side (``pubtime_begin_s`` and
        ``pubtime_end_s``, both inclusive, with ``order=pubdate`` unless another order was asked for): the job's
        window, or the day of the cursor (:meth:`_search_window`)."""
        window = self.date_window()
        begin, end = window.bounds_s() if window is not None else (None, None)
        if self.pagination == "cursor":
            day_end, page = self._search_cursor(cursor)
            if day_end is not None:
                begin, end = max(begin or 0, day_end - 86_400), day_end
        query: dict[str, Any] = {"search_type": "video", "keyword": self.args.keyword, "page": page}
        order = self.args.order or ("pubdate" if window is not None else None)
        if order is not None:
            query["order"] = order
        query.update({k: v for k, v in (("pubtime_begin_s", begin), ("pubtime_end_s", end and end - 1))
                      if v is not None})
        return query

    @staticmethod
    def _search_cursor(cursor: str | None) -> tuple[int | None, int]:
        """``(end of the day walked or None for the whole window, page)`` of a windowed search's cursor:
        ``all:<page>`` or ``day:<end>:<page>`` (none: the whole window's first page)."""
        parts = (cursor or "all:1").split(":")
        if parts[0] == "day" and len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            return int(parts[1]), int(parts[2])
        if parts[0] == "all" and len(parts) == 2 and parts[1].isdigit():
            return None, int(parts[1])
        raise ValueError(f"not a search cursor: {cursor!r}")

    def _search_window(self, page: Page, payload: Any, cursor: str | None) -> Page:
        """The cursor after a page of a search from ``-a since``. When the whole window holds more than the search
        answers (``numResults`` at BILIBILI_SEARCH_MAX_RESULTS), its first page is dropped and the window walked
        again one day at a time, newest first (each day's results then all within reach); a day past its last page
        gives the next day, down to ``since``."""
        day_end, number = self._search_cursor(cursor)
        window = self.date_window()
        assert window is not None and window.since is not None
        since, until = window.bounds_s()
        assert since is not None
        cap = setting(self.settings, "BILIBILI_SEARCH_MAX_RESULTS")
        results = as_int(as_obj(as_obj(payload).get("data")).get("numResults")) or 0
        if day_end is None and number == 1 and results >= cap:
            end = until if until is not None else int(time.time())
            if end - since > 86_400:
                logger.info("%s: the window holds %d results or more, more than one search answers; it is walked "
                            "day by day", self.job, cap)
                page.posts, page.incomplete, page.is_last = [], {}, False
                page.next_cursor = f"day:{end}:1"
                return page
        if day_end is not None and results >= cap:
            logger.warning("%s: the day before %s holds %d results or more: those past them are not reached",
                           self.job, day_end, cap)
        if not page.is_last:
            page.next_cursor = f"all:{number + 1}" if day_end is None else f"day:{day_end}:{number + 1}"
        elif day_end is not None and day_end - 86_400 > since:
            page.is_last, page.next_cursor = False, f"day:{day_end - 86_400}:1"
        return page

    def newest_first(self) -> bool:
        if self.args.keyword is not None:
            return (self.args.order or ("pubdate" if self.date_window() else None)) == "pubdate"
        # A folder is in the order of favouriting, a collection in episode order; a series is asked newest first.
        return self.args.fav is None and self.args.season is None and super().newest_first()

    def _view_url(self, bvid: str) -> str:
        return f"{self.api}/x/web-interface/view?{urlencode({'bvid': bvid})}"

    def parse_listing_payload(self, response: Response, source: Source) -> Page:
        payload = self.payload(response)
        if self.args.mid is not None:
            return parser.parse_arc_search(payload)
        if self.args.keyword is not None:
            if self.pagination == "cursor":
                return self._search_window(parser.parse_search(payload), payload, source.cursor)
            return parser.parse_search(payload)
        if self.args.fav is not None:
            return parser.parse_fav_list(payload)
        if self.args.season is not None:
            return parser.parse_season_archives(payload)
        if self.args.series is not None:
            return parser.parse_series_archives(payload)
        raise ValueError(f"{self.job}: no listing for these arguments")

    def parse_item_payload(self, response: Response, source: Source, item: str) -> Page:
        """``-a bvid``: one video's view answer (a video that is gone is a record that says so)."""
        payload = self.payload(response)
        bvid, page = item, Page()
        try:
            parser.raise_for_envelope(payload)
        except PlatformError as e:
            if e.kind != "not_found":
                raise
            # A video that is gone is a record that says so, not a failed page.
            page.incomplete[bvid] = {"bvid": bvid, "gone": str(e)}
            return page
        page.incomplete[bvid] = {"bvid": bvid, "view": payload}
        return page

    # --- one video: view, then one playurl per part -----------------------------------------------------------
    def next_step(self, chain: BilibiliChain) -> Step | None:
        raw = chain.raw
        if raw.get("gone"):
            return None
        view = raw.get("view") or chain.view
        if view is None:
            return Step("view", self._view_url(chain.post_id))
        if chain.cids is None:
            self._bound_parts(chain, view)
        # One playurl per kept part, in order: the next is the first not tried (O(1) a step, so the cost of a
        # video stays linear in its parts; re-parsing the view at every step made it quadratic).
        cids, done = chain.cids or [], len(chain.tried)
        if done < len(cids):
            return Step(f"playurl:{cids[done]}", self._playurl(chain.post_id, cids[done]))
        # Then, when subtitles or chapters are asked, one player/wbi/v2 per part (both come in its answer).
        done = len(chain.players_tried)
        if not (self.args.subtitles or self.args.chapters) or done >= len(cids):
            return None
        # The API takes the bvid as well; the aid is what the site sends (a view without one still gets its extras).
        target = {"aid": chain.aid} if chain.aid is not None else {"bvid": chain.post_id}
        return Step(f"player:{cids[done]}", self.signed("/x/player/wbi/v2", {**target, "cid": cids[done]}))

    def _bound_parts(self, chain: BilibiliChain, view: Any) -> None:
        """Keep the first ``BILIBILI_MAX_PARTS`` parts of the video: their cids in ``chain.cids``, the view (which
        travels in the chain of every later step) cut to them, and the number the video has."""
        extra = parser.parse_view(view, max_parts=setting(self.settings, "BILIBILI_MAX_PARTS")).extra
        chain.cids = [str(part["cid"]) for part in extra["parts"]]
        chain.aid = extra.get("aid")
        if "parts_total" not in extra:
            return
        chain.parts_total = extra["parts_total"]
        kept = set(chain.cids)
        pages = [p for p in view["data"]["pages"] if isinstance(p, dict) and str(p.get("cid")) in kept]
        trimmed = {**view, "data": {**view["data"], "pages": pages}}
        if "view" in chain.raw:
            chain.raw["view"] = trimmed
        else:
            chain.view = trimmed
        logger.warning("%s: video %s has %d parts; only the first %d are crawled (BILIBILI_MAX_PARTS)", self.job,
                       chain.post_id, extra["parts_total"], len(kept))

    def _playurl(self, bvid: str, cid: str) -> str:
        return self.signed("/x/player/wbi/playurl", {"bvid": bvid, "cid": cid, "fnval": 16, "fourk": 1})

    def parse_step(self, response: Response, chain: BilibiliChain) -> None:
        payload = self.payload(response)
        step = str(chain.step)
        if step == "view":
            try:
                parser.raise_for_envelope(payload)
            except PlatformError as e:
                if e.kind != "not_found":
                    raise
                chain.raw["gone"] = str(e)
                return
            chain.view = payload
            return
        cid = step.split(":", 1)[1]
        if step.startswith("player:"):
            chain.players_tried.append(cid)
            try:
                chain.players[cid] = parser.parse_player(payload, scheme=urlsplit(self.api).scheme)
            except PlatformError as e:
                # The part's video goes on; its record says what could not be read.
                chain.player_errors[cid] = str(e)
            return
        chain.tried.append(cid)
        try:
            chain.streams[cid] = parser.parse_playurl(payload)
        except PlatformError as e:
            # One part without streams fails that part's asset; the other parts go on.
            chain.stream_errors[cid] = str(e)

    def post_from_chain(self, chain: BilibiliChain, source: Source, *, missing: str | None) -> Post:
        raw = chain.raw
        view = raw.get("view") or chain.view
        if view is None:
            post = parser.post_from_listing(raw, source=source, fetched_at=self.now_iso()) if raw.get("title") \
                else Post(platform=self.platform, post_id=chain.post_id, url=parser.video_url(chain.post_id),
                          author=None, created_at=None, source=source, fetched_at=self.now_iso())
            if raw.get("gone"):
                post.deleted = True
                post.extra["unavailable"] = raw["gone"]
        else:
            post = parser.parse_view(view, source=source, fetched_at=self.now_iso(),
                                     max_parts=setting(self.settings, "BILIBILI_MAX_PARTS"))
            if chain.parts_total:
                post.extra["parts_total"] = chain.parts_total
                post.extra["parts_cut"] = chain.parts_total - len(chain.cids or ())
            streams, errors = chain.streams, chain.stream_errors
            for asset in post.media:
                if asset.kind != "video":
                    continue
                cid = asset.key.rsplit(":", 1)[1]
                found = streams.get(cid)
                asset.manifest = None
                if found:
                    asset.renditions = found
                    asset.url = next((r["url"] for r in found if r.get("kind") != "audio"), found[0]["url"])
                else:
                    asset.status = "failed"
                    asset.error = f"no-streams: {errors.get(cid) or missing or 'playurl not read'}"
            self._add_extras(post, chain, missing=missing)
        if missing is not None:
            post.extra["incomplete"] = missing
        return post

    def _add_extras(self, post: Post, chain: BilibiliChain, *, missing: str | None) -> None:
        """Per part, what ``-a subtitles``/``danmaku``/``chapters`` asked: subtitle and danmaku assets, and in
        ``extra.parts[]`` the ``chapters`` (also on the part's video asset, for its MP4) and ``subtitles``
        (languages) or the ``extras_error`` (docs/records.md)."""
        players, errors = chain.players, chain.player_errors
        comment_root = str(setting(self.settings, "BILIBILI_COMMENT_URL")).rstrip("/")
        videos = {a.key: a for a in post.media if a.kind == "video"}
        for part in post.extra.get("parts", ()):
            cid = str(part["cid"])
            if self.args.subtitles or self.args.chapters:
                found = players.get(cid)
                if found is None:
                    part["extras_error"] = errors.get(cid) or missing or "player/wbi/v2 not read"
                else:
                    if self.args.chapters:
                        part["chapters"] = found["chapters"]
                        video = videos.get(f"{post.post_id}:{cid}")
                        if video is not None and found["chapters"]:  # written into the part's MP4 (media.md)
                            video.chapters = [{"start": c["from"], "end": c["to"], "title": c["content"]}
                                              for c in found["chapters"]]
                    if self.args.subtitles:
                        part["subtitles"] = [t["lan"] for t in found["subtitles"]]
                        post.media.extend(MediaAsset(kind="subtitle", key=f"{post.post_id}:{cid}:{t['lan']}",
                                                     url=t["url"]) for t in found["subtitles"])
            if self.args.danmaku:
                post.media.append(MediaAsset(kind="danmaku", key=f"{post.post_id}:{cid}",
                                             url=f"{comment_root}/{cid}.xml"))

    def document_bodies(self, *, kind: str, body: bytes) -> tuple[bytes, dict[str, bytes]]:
        """A subtitle's JSON is stored as it came, with its SRT derived (:func:`parser.subtitle_srt`; none when it
        has no cue); a danmaku XML inflated when it came raw-deflated (:func:`parser.inflate_danmaku`)."""
        if kind == "danmaku":
            return parser.inflate_danmaku(body, max_bytes=setting(self.settings, "BILIBILI_DANMAKU_MAX_BYTES")), {}
        if kind == "subtitle":
            try:
                return body, {"srt": parser.subtitle_srt(body)}
            except ValueError:
                return body, {}  # the JSON's own check (media/integrity.py) decides whether it is stored
        return body, {}

    # --- expired stream URLs ----------------------------------------------------------------------------------
    # --- comments: /x/v2/reply/wbi/main (WBI-signed), then /x/v2/reply/reply per reply with a thread ----------
    def thread_id(self, post: Post) -> str | None:
        aid = post.extra.get("aid") if isinstance(post.extra, dict) else None
        return str(aid) if isinstance(aid, int) and aid > 0 else None

    def comment_page_url(self, state: ThreadState, cursor: str | None) -> str:
        # A first walk asks hot first (mode=3, as the site shows it); a walk down to a mark asks newest first
        # (mode=2), so that the first comment at or below the mark ends it.
        mode = 2 if state.since else 3
        return self.signed("/x/v2/reply/wbi/main", {"oid": state.thread_id, "type": 1, "mode": mode,
                                                    "pagination_str": bilibili_comments.pagination_str(cursor)})

    def reply_page_url(self, state: ThreadState, root_id: str, cursor: str | None) -> str:
        query = {"oid": state.thread_id, "type": 1, "root": root_id, "pn": cursor or 1,
                 "ps": setting(self.settings, "COMMENTS_REPLY_PAGE_SIZE")}
        return f"{self.api}/x/v2/reply/reply?{urlencode(query)}"

    def parse_comment_page(self, response: Response, state: ThreadState, source: Source) -> CommentPage:
        # Pinned replies come on every page: taken from the first only.
        return bilibili_comments.parse_main(self.payload(response), post_id=state.post_id,
                                            first_page=state.cursor is None, source=source,
                                            fetched_at=self.now_iso())

    def parse_reply_page(self, response: Response, state: ThreadState, root_id: str, source: Source
                         ) -> CommentPage:
        return bilibili_comments.parse_thread(self.payload(response), post_id=state.post_id, root_id=root_id,
                                              source=source, fetched_at=self.now_iso())

    async def refresh_media_url(self, *, key: str, url: str) -> str | None:
        """A fresh URL of the same stream as ``url`` (same path) from the part's playurl, read again."""
        base = key.rpartition("#")[0] or key
        asset_key = base.split("/", 2)[-1]  # "<platform>/<kind>/<bvid>:<cid>"
        bvid, _, cid = asset_key.partition(":")
        if not cid or self.crawler.engine is None:
            return await super().refresh_media_url(key=key, url=url)
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value("bilibili/media_refresh/requests")
        request = Request(self._playurl(bvid, cid), meta={"mc_api": True, "mc_optional": True}, dont_filter=True)
        try:
            response = await self.crawler.engine.download_async(request)
            renditions = parser.parse_playurl(self.payload(response))
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot re-resolve": the asset fails alone
            self.logger.warning("bilibili: could not read the streams of %s again: %s", asset_key, exc)
            stats.inc_value("bilibili/media_refresh/failed")
            return None
        path = urlsplit(url).path
        for rendition in renditions:
            for candidate in (rendition["url"], *rendition.get("alternates", ())):
                if urlsplit(candidate).path == path:
                    stats.inc_value("bilibili/media_refresh/resolved")
                    return str(candidate)
        stats.inc_value("bilibili/media_refresh/failed")
        return None
