"""Scrapy settings for mediacrawler: the only place where components are wired.

Each default is declared with its type and range (``NAME: Annotated[int, Range(1)] = 16``): a bad ``-s`` value is
one line naming the setting and exit status 2 before anything is crawled (mediacrawler/config.py).

Every project setting has its default here, grouped by prefix. Anything a deployment changes (roots of the
platform APIs, where files go, Redis) is a setting or an environment variable; nothing is resolved relative to the
package, so a scrapyd egg behaves like a checkout.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

from scrapy.settings import default_settings

if TYPE_CHECKING:
    # Constraints of the declarations below (checked at start-up: config.settings_problem, docs/operations.md).
    # The annotations stay strings here (PEP 563); config.declarations() evaluates them with these classes, so
    # config.py may import this module without importing back.
    from mediacrawler.config import LocalPath, NeedsRedis, OneOf, Parsed, Range, Relative, TimeZone

BOT_NAME = "mediacrawler"
SPIDER_MODULES = ["mediacrawler.spiders"]
# Imports only the crawled spider's module (mediacrawler/spiders/<name>.py), not every platform's.
SPIDER_LOADER_CLASS = "mediacrawler.spiders._loader.SpiderLoader"
NEWSPIDER_MODULE = "mediacrawler.spiders"
# Our `crawl` validates spider arguments before the crawler starts (one-line error, exit 2). A module, not the
# package: Scrapy imports every module of COMMANDS_MODULE at each start to list its commands, and the others in
# mediacrawler/commands/ are the `mediacrawler` subcommands (verify, export, web…), which a crawl never needs.
COMMANDS_MODULE = "mediacrawler.commands.crawl"

# --- Politeness -------------------------------------------------------------------------------------------------
ROBOTSTXT_OBEY: bool = False  # API endpoints, not pages; access stays rate-limited below.
CONCURRENT_REQUESTS: Annotated[int, Range(1)] = 16
CONCURRENT_REQUESTS_PER_DOMAIN: Annotated[int, Range(1)] = 4
DOWNLOAD_DELAY: Annotated[float, Range(0)] = 0.5
AUTOTHROTTLE_ENABLED: bool = True
AUTOTHROTTLE_START_DELAY: Annotated[float, Range(0)] = 0.5
AUTOTHROTTLE_TARGET_CONCURRENCY: Annotated[float, Range(0, above=True)] = 2.0
USER_AGENT = "mediacrawler/0.1 (+https://github.com/mediacrawler/mediacrawler)"
DOWNLOAD_TIMEOUT: Annotated[float, Range(0, above=True)] = 60.0
TELNETCONSOLE_ENABLED: bool = False
# Items of one response in the item pipelines at once: a listing page's posts at the largest page size
# (BILIBILI_PAGE_SIZE <= 50). Scrapy starts this many worker tasks for every response, whatever it holds: at its
# default 100, ~1 ms of CPU per response, a tenth of a media-off timeline crawl (docs/benchmarks.md).
CONCURRENT_ITEMS: Annotated[int, Range(1)] = 50
# Scrapy's own settings that users commonly pass with -s, at Scrapy's defaults: declared so a bad value is refused
# at start-up like ours.
AUTOTHROTTLE_MAX_DELAY: Annotated[float, Range(0)] = 60.0
DEPTH_LIMIT: Annotated[int, Range(0)] = 0
CLOSESPIDER_PAGECOUNT: Annotated[int, Range(0)] = 0
CLOSESPIDER_ITEMCOUNT: Annotated[int, Range(0)] = 0
CLOSESPIDER_ERRORCOUNT: Annotated[int, Range(0)] = 0
CLOSESPIDER_TIMEOUT: Annotated[float, Range(0)] = 0.0
# Scrapy 2.19's remote control runs Python sent over HTTP inside the crawler (which holds the user's cookies) and
# writes its token to a job file in the user's profile directory: off, like the telnet console. Out of the base
# extensions too, although Scrapy asks projects to change EXTENSIONS instead: its module imports aiohttp, 0.1-0.5 s
# of every start, and Scrapy imports every key of EXTENSIONS, even one set to None (docs/benchmarks.md,
# "Start-up"). To use it anyway: EXTENSIONS = {"scrapy.extensions.remote_control.RemoteControl": 0} and this True.
REMOTE_CONTROL_ENABLED: bool = False
EXTENSIONS_BASE = {path: order for path, order in default_settings.EXTENSIONS_BASE.items()
                   if path != "scrapy.extensions.remote_control.RemoteControl"}
REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
FEED_EXPORT_ENCODING = "utf-8"
# Scrapy re-reads and parses the source of a callback for every response it answers (its cache misses on bound
# methods): 0.3 ms a page for the listing callback. tests/test_spider_callbacks.py makes the same check once.
WARN_ON_GENERATOR_RETURN_VALUE: bool = False
LOG_LEVEL: Annotated[str, OneOf(("critical", "error", "warning", "info", "debug"))] = os.environ.get(
    "MEDIACRAWLER_LOG_LEVEL", "INFO")

# Scrapy enables file:, data:, s3: and ftp: handlers by default; a URL taken from a payload must never reach them.
DOWNLOAD_HANDLERS = {
    "http": "mediacrawler.handlers.PooledHTTPDownloadHandler",
    "https": "mediacrawler.handlers.PooledHTTPDownloadHandler",
    "file": None, "data": None, "s3": None, "ftp": None,
}
#: Idle connections kept per host (Scrapy keeps CONCURRENT_REQUESTS_PER_DOMAIN): as many as the media requests run
#: to one CDN host (MEDIA_CONCURRENCY_PER_HOST), so that they reuse connections (mediacrawler/handlers.py).
HTTP_POOL_PER_HOST: Annotated[int, Range(1)] = 32

# --- Retries ----------------------------------------------------------------------------------------------------
RETRY_ENABLED: bool = True
RETRY_TIMES: Annotated[int, Range(0)] = 3
RETRY_HTTP_CODES: list[int] = [500, 502, 503, 504, 522, 524, 408]  # 418/429/432 are the platform middleware's

# --- Platform errors (middlewares/platform_errors.py) -----------------------------------------------------------
#: How many times a rate-limited request is retried before it is given up.
PLATFORM_RATE_LIMIT_RETRIES: Annotated[int, Range(0)] = 6
#: First back-off in seconds; doubled on each retry of the same request, capped at PLATFORM_BACKOFF_MAX.
PLATFORM_BACKOFF_BASE: Annotated[float, Range(0), Relative("PLATFORM_BACKOFF_MAX", at_most=True)] = 2.0
PLATFORM_BACKOFF_MAX: Annotated[float, Range(0)] = 120.0

#: HTTP statuses that mean "slow down" on platform APIs (Weibo 418/432, Bilibili 412, XHS 461, everyone 429).
PLATFORM_RATE_LIMIT_HTTP_CODES: list[int] = [412, 418, 429, 432, 461]
#: Largest API answer (listing page, post JSON, SSR page) in bytes, on the wire and once inflated; a larger one
#: fails that request ("too-large"). Media have MEDIA_MAXSIZE (middlewares/body_limits.py).
PLATFORM_API_MAXSIZE: Annotated[int, Range(1)] = 16 * 1024 * 1024
#: Listing pages that may fail in a row before a spider stops paginating.
PLATFORM_MAX_FAILED_PAGES_IN_A_ROW: Annotated[int, Range(1)] = 3
PLATFORM_ERRORS_ENABLED: bool = True

# --- Sessions (middlewares/sessions.py) -------------------------------------------------------------------------
#: Send {PLATFORM}_COOKIE (from the environment) to the platform's API hosts, at download time only.
SESSION_COOKIES_ENABLED: bool = True

DOWNLOADER_MIDDLEWARES = {
    # Media requests into their own per-host slots, before the downloader picks a slot.
    "mediacrawler.middlewares.media_slots.MediaSlotMiddleware": 100,
    # Above RedirectMiddleware (600): sees a media 3xx first, and refuses a bad hop before it is built or logged.
    "mediacrawler.middlewares.media_redirects.MediaRedirectMiddleware": 610,
    # Before RetryMiddleware (550) on the way back, so rate-limit answers get their own back-off.
    "mediacrawler.middlewares.platform_errors.PlatformErrorsMiddleware": 560,
    # After CookiesMiddleware (700) on the way out; strips the header again before any retry copies the request.
    "mediacrawler.middlewares.sessions.SessionCookieMiddleware": 710,
    # Scrapy's decompression with a size limit per kind of request (API pages, media): no gzip bombs.
    "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": None,
    "mediacrawler.middlewares.body_limits.BodyLimitsMiddleware": 590,
    # The shared rate budget (RATE_BUDGET; off when empty): after the platform back-off's wait (560), so a retry
    # takes its slot when it really goes out; API and media requests alike.
    "mediacrawler.middlewares.rate_budget.RateBudgetMiddleware": 580,
}

# --- Rate budget (middlewares/rate_budget.py, distributed/limiter.py; docs/operations.md) -----------------------
#: Requests per period shared by every worker (in Redis with REDIS_URL, else in this process), per key: a platform
#: ("weibo": "2/s") for its API requests, "media:<host>" or "media" (each host at that rate) for media downloads;
#: e.g. {"weibo": "2/s", "bilibili": "1/s", "media": "20/s"}. Rates: "N/s", "N/min", "N/h", "1/5s". Empty: off.
RATE_BUDGET: Annotated[dict[str, str], Parsed("mediacrawler.distributed.limiter.parse_rate",
                                             "each value a rate like '2/s', '30/min' or '1/5s'")] = {}
#: Requests of one key that may start back to back after a quiet spell (1: evenly spaced, never a burst).
RATE_BUDGET_BURST: Annotated[int, Range(1)] = 1
#: Prefix of the limiter's Redis keys (<prefix>:<key>:tat, <prefix>:<key>:cool).
RATE_BUDGET_KEY_PREFIX = "mediacrawler:rate"

# --- Platforms --------------------------------------------------------------------------------------------------
#: The zone of ``-a since``/``-a until`` values given without an offset (a bare date is its midnight): an IANA
#: name; empty: each platform's own (Asia/Shanghai for Weibo, Bilibili, XHS and Douyin, UTC for Facebook). Stored
#: times stay UTC (docs/platforms.md, "Date windows").
TIME_ZONE: Annotated[str, TimeZone()] = ""
WEIBO_BASE_URL = "https://m.weibo.cn"
#: Value of the Referer header sent with Weibo media requests (the image hosts refuse requests without one).
WEIBO_MEDIA_REFERER = "https://m.weibo.cn/"
#: Fetch the full text of posts marked isLongText from /statuses/extend.
WEIBO_EXPAND_LONG_TEXT: bool = True
BILIBILI_API_URL = "https://api.bilibili.com"
#: Root of Bilibili's short share links (``https://b23.tv/<code>``), followed by ``mediacrawler get``.
BILIBILI_SHORT_URL = "https://b23.tv"
BILIBILI_WEB_URL = "https://www.bilibili.com"
#: Parts (pages[]) crawled per video: the first ones; the record says how many the video has and how many were cut.
BILIBILI_MAX_PARTS: Annotated[int, Range(1)] = 200
#: Videos per page of a creator's uploads (``ps`` of /x/space/wbi/arc/search; the site uses 30, at most 50).
BILIBILI_PAGE_SIZE: Annotated[int, Range(1, 50)] = 30
#: Results one search/type query answers at most (50 pages of 20): a search from -a since whose window holds that
#: many is walked day by day (docs/platforms.md, "Date windows").
BILIBILI_SEARCH_MAX_RESULTS: Annotated[int, Range(1)] = 1000
#: Seconds the WBI mixin key read from /x/web-interface/nav is kept in the cache (the site rotates it daily).
BILIBILI_WBI_KEY_TTL: Annotated[int, Range(0)] = 3600
#: Referer of Bilibili media requests (the stream CDNs refuse requests without one).
BILIBILI_MEDIA_REFERER = "https://www.bilibili.com/"
#: Root of a part's danmaku (``<root>/<cid>.xml``, with ``-a danmaku=true``).
BILIBILI_COMMENT_URL: str = "https://comment.bilibili.com"
#: Largest danmaku XML stored, inflated (bytes); a larger one fails that asset alone.
BILIBILI_DANMAKU_MAX_BYTES: Annotated[int, Range(1)] = 32 * 1024 * 1024
FACEBOOK_GRAPH_URL = "https://graph.facebook.com/v19.0"
#: Posts per Graph API page (``limit``); the API caps it at 100.
FACEBOOK_PAGE_SIZE: Annotated[int, Range(1, 100)] = 25
#: Root of XiaoHongShu's site: note pages /explore/{id}?xsec_token=… and profile pages /user/profile/{id} (their
#: server-rendered state; no signed API is used). XHS_COOKIE (environment) goes with these page requests.
XHS_WEB_URL = "https://www.xiaohongshu.com"
#: Root of XHS's short share links (``http://xhslink.com/<code>``), followed by ``mediacrawler get``.
XHS_SHORT_URL = "http://xhslink.com"
#: Bounds of ``-a notes_file``: its bytes and lines (a larger file, or /dev/zero, is refused in one line, exit 2).
XHS_NOTES_FILE_MAX_BYTES: Annotated[int, Range(1)] = 4 * 1024 * 1024
XHS_NOTES_FILE_MAX_LINES: Annotated[int, Range(1)] = 10_000
#: Root of Douyin's web API: with DOUYIN_COOKIE (environment) each aweme is read from /aweme/v1/web/aweme/detail/.
DOUYIN_WEB_URL = "https://www.douyin.com"
#: Root of the share pages read without DOUYIN_COOKIE (``/share/video/{aweme_id}/``, window._ROUTER_DATA).
DOUYIN_SHARE_URL = "https://www.iesdouyin.com"
#: Root of the short share links (``https://v.douyin.com/{code}/``): ``-a aweme=`` short links are requested here
#: and followed by their redirect.
DOUYIN_SHORT_URL = "https://v.douyin.com"
#: User-Agent of share page requests (the share pages are made for the mobile browsers that open shared links).
DOUYIN_SHARE_USER_AGENT = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 "
                           "(KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1")
#: Referer of Douyin media requests.
DOUYIN_MEDIA_REFERER = "https://www.douyin.com/"

# --- Item pipelines ---------------------------------------------------------------------------------------------
ITEM_PIPELINES = {
    # First: drops posts that an interrupted earlier run of the same job already stored.
    "mediacrawler.pipelines.checkpoint.CheckpointSkipPipeline": 50,
    # Posts outside -a since/-a until that only a chain step could date: dropped before their media is fetched.
    "mediacrawler.pipelines.window.DateWindowPipeline": 60,
    "mediacrawler.pipelines.normalize.NormalizePipeline": 100,
    # Before dedupe: a post seen again (and one read again by -a refresh) still updates its counts.
    "mediacrawler.pipelines.records.RecordsPipeline": 150,
    "mediacrawler.pipelines.dedupe.DedupePipeline": 200,
    "mediacrawler.pipelines.media.MediaStorePipeline": 300,
    # After the media store: links the stored files under readable paths (LIBRARY_ENABLED).
    "mediacrawler.pipelines.library.LibraryPipeline": 400,
}

# --- Records database (pipelines/records.py, records/; docs/records.md, "Records database") --------------------
#: Upsert every post, author, media asset and comment into the records database.
RECORDS_ENABLED: bool = True
#: Where: empty → CHECKPOINT_DIR/records.sqlite3; a path (or sqlite:///path) → that SQLite file (WAL);
#: postgresql://user:password@host/db → PostgreSQL, for many workers on several machines. From the environment
#: too, so the `mediacrawler` commands read the same database; its password is never logged.
RECORDS_DB: str = os.environ.get("RECORDS_DB") or ""
#: Most records written in one transaction (the records of one reactor turn go together, up to this many).
RECORDS_BATCH_MAX: Annotated[int, Range(1)] = 500
#: Seconds PostgreSQL may take to accept a connection (the crawl then fails with one line).
RECORDS_CONNECT_TIMEOUT: Annotated[float, Range(0, above=True)] = 10.0
#: Seconds between two writes of the crawl's row in the records database's `runs` table (extensions/runs.py: its
#: figures so far, read by the web page's jobs page); a row not written for 3 intervals is shown as stopped.
RUNS_INTERVAL: Annotated[float, Range(0, above=True)] = 5.0

# --- Dedupe (pipelines/dedupe.py) -------------------------------------------------------------------------------
#: Drop posts already emitted (same platform and post_id) within DEDUPE_TTL.
DEDUPE_ENABLED: bool = True
#: Seconds a seen post is remembered, counted from when it was first seen; 0 = for ever.
DEDUPE_TTL: Annotated[int, Range(0)] = 86400
#: Seconds a post stays claimed by the job emitting it, from dedupe until it is exported (then the claim is
#: released). Must exceed the longest time an item spends in later pipelines (media downloads); bounds how long a
#: crashed job's in-flight posts stay blocked for other jobs.
DEDUPE_CLAIM_TTL: Annotated[int, Range(0, above=True)] = 3600

# --- Comment threads (-a comments; spiders/_threads.py, docs/architecture.md "Sources") -------------------------
#: A re-run refreshes the thread of a post published at most this many days ago (only comments newer than the
#: thread's mark); older posts' threads are not walked again.
COMMENTS_REFRESH_DAYS: Annotated[float, Range(0)] = 7.0
#: Pages one thread may take (top-level pages and reply pages together): a bound, whatever -a comments says.
COMMENTS_MAX_PAGES: Annotated[int, Range(1)] = 2000
#: Replies per page of a reply thread where the API takes a size (Bilibili ``ps``, at most 20; Facebook ``limit``).
COMMENTS_REPLY_PAGE_SIZE: Annotated[int, Range(1, 20)] = 20

# --- Output -----------------------------------------------------------------------------------------------------
#: Root of the default JSON Lines export: OUTPUT_DIR/<spider>/<job>.jsonl. Ignored when -o/-O or FEEDS is given.
OUTPUT_DIR = "output"
OUTPUT_ENABLED: bool = True
#: The default export's file under OUTPUT_DIR, with Scrapy's feed URI parameters (%(name)s, %(job)s, %(time)s…).
#: Appended to by every run, never truncated.
OUTPUT_FILE: str = "%(name)s/%(job)s.jsonl"
#: The default export's comments (-a comments), beside the posts: OUTPUT_DIR/<spider>/<job>.comments.jsonl.
COMMENTS_OUTPUT_FILE: str = "%(name)s/%(job)s.comments.jsonl"
#: OUTPUT_FILE of `mediacrawler retry` (unless -s OUTPUT_FILE is given): the posts it read again, each once, in a
#: file of their own beside the job's (docs/operations.md, "Output files").
RETRY_OUTPUT_FILE: str = "%(name)s/%(job)s.retry-%(time)s.jsonl"
# Scrapy's JSON exporters, with dataclass items turned into JSON without ItemAdapter's probing of every nested
# value (the same bytes; mediacrawler/exporters.py).
FEED_EXPORTERS = {
    "jsonlines": "mediacrawler.exporters.JsonLinesExporter",
    "jsonl": "mediacrawler.exporters.JsonLinesExporter",
    "jl": "mediacrawler.exporters.JsonLinesExporter",
    "json": "mediacrawler.exporters.JsonExporter",
    # Flat columns (posts; comments or media with item_export_kwargs), UTF-8 with a BOM: docs/records.md.
    "csv": "mediacrawler.exporters.CsvExporter",
}

# --- Media store (pipelines/media.py, media/) -------------------------------------------------------------------
#: Media root: objects/<ab>/<cd>/<sha256><ext>, the index, spool/ for partial downloads, quarantine/.
FILES_STORE: Annotated[str, LocalPath()] = "files"
#: False: crawl records only; media results stay None (the pipeline raises NotConfigured).
MEDIA_ENABLED: bool = True
#: Pixel cap, checked from the image header before decoding (Pillow's default).
MEDIA_MAX_IMAGE_PIXELS: Annotated[int, Range(1)] = 89_478_485
#: Most bytes of pixels one image check may decode into memory (a 16-bit PNG under the pixel cap takes 357 MB). A
#: larger PNG is checked by streaming (chunk CRCs, inflated length, row filters); a larger GIF/WebP/TIFF/BMP fails
#: as image-too-large; a JPEG counts at the 1/8 scale it is decoded at.
MEDIA_MAX_IMAGE_DECODE_BYTES: Annotated[int, Range(1)] = 128 * 1024 * 1024
#: Largest body of a one-request media download (an image, a video fragment), on the wire and once inflated; a
#: larger one fails that asset ("too-large"). Range segments and manifests have their own limits below.
MEDIA_MAXSIZE: Annotated[int, Range(1)] = 64 * 1024 * 1024
#: The one size of a host's media concurrency: assets in download per host (the pipeline's semaphore; they bypass
#: the scheduler, so CONCURRENT_REQUESTS does not bound them) and media requests in flight per host, all assets
#: together (the media downloader slot; per asset: MEDIA_SEGMENT_CONCURRENCY, MEDIA_FRAGMENT_CONCURRENCY). A CDN is
#: not the API, but a bound all the same: stock FilesPipeline keeps ~100 in flight to one host; 32 keeps 50 ms of
#: latency hidden (docs/benchmarks.md, "Media store").
MEDIA_CONCURRENCY_PER_HOST: Annotated[int, Range(1)] = 32
#: Media requests (images, Range segments, video fragments) use downloader slots "media:<host>" of their own, not
#: the API's DOWNLOAD_DELAY/AutoThrottle pace (middlewares/media_slots.py).
MEDIA_SLOTS_ENABLED: bool = True
#: Seconds between two media requests to one host (CDNs; the APIs keep DOWNLOAD_DELAY).
MEDIA_DOWNLOAD_DELAY: Annotated[float, Range(0)] = 0.0
#: Schemes a media URL and each of its redirect hops may use; others fail as scheme-not-allowed, never fetched.
MEDIA_ALLOWED_SCHEMES = ["http", "https"]
#: Characters of a media URL: a longer one (a multi-KB data: URL) is refused as ``url-too-long`` and kept in the
#: record and the log only as its first MEDIA_URL_SHOWN characters.
MEDIA_MAX_URL_LENGTH: Annotated[int, Range(64)] = 4096
MEDIA_URL_SHOWN: Annotated[int, Range(16)] = 256
#: Media downloads follow redirects (CDNs move files, http to https); each hop is checked (media_redirects.py).
MEDIA_ALLOW_REDIRECTS: bool = True
#: Redirect hops per media request; one more fails the asset as too-many-redirects.
MEDIA_MAX_REDIRECTS: Annotated[int, Range(0)] = 5
#: "sqlite" | "redis" | an import path (docs/media.md); empty: redis when REDIS_URL is set, else SQLite at
#: FILES_STORE/index.sqlite3.
MEDIA_INDEX: Annotated[str, OneOf(("", "sqlite", "redis"), import_path=True), NeedsRedis()] = ""
MEDIA_INDEX_PATH = ""
MEDIA_INDEX_REDIS_PREFIX = "mediacrawler:media:"
#: Seconds a Redis media index may be unreachable while media commits wait (a bounded back-off, 0.1 s doubling to
#: 2 s) before their assets fail as index-write-failed (docs/media.md, "The media index"). 0: fail at once.
MEDIA_INDEX_OUTAGE_GRACE: Annotated[float, Range(0)] = 60.0
#: Seconds an SQLite index write waits for another process's lock before it fails (and fails its assets).
MEDIA_INDEX_BUSY_TIMEOUT: Annotated[float, Range(0)] = 30.0
#: fsync objects and their directories when publishing (off only for throwaway stores).
MEDIA_FSYNC: bool = True
#: Bodies up to this size are checked, hashed and written to their temp file on the reactor thread in the
#: committer's round (cheaper than handing them to a thread); larger ones on the store's executor, checked before
#: their round (a big decode would hold the round up). docs/media.md, "Concurrency".
MEDIA_INLINE_CHECK_BYTES: Annotated[int, Range(0)] = 262_144
#: Most bodies per committer round (media/committer.py).
MEDIA_COMMIT_BATCH: Annotated[int, Range(1)] = 256

# --- Library (pipelines/library.py, library.py; docs/records.md, "Library") -------------------------------------
#: Link every stored file under a readable path in LIBRARY_DIR (hard links into the store: no second copy).
LIBRARY_ENABLED: bool = True
#: Root of the library; empty: library/ beside FILES_STORE (files -> library, demo-output/files ->
#: demo-output/library).
LIBRARY_DIR: Annotated[str, LocalPath()] = ""
#: Path of each file in the library. Fields: platform, author_name, author_id, date (the publish time, a datetime:
#: {date:%Y-%m-%d}), post_id, index (the asset's number in its post), kind (image, video, audio, cover, live,
#: subtitle, danmaku), ext. A folder must hold {post_id}; each component is made safe on every OS.
LIBRARY_TEMPLATE: Annotated[str, Parsed("mediacrawler.library.parse_template", "a library path template")] = (
    "{platform}/{author_name} ({author_id})/{date:%Y-%m-%d} {post_id}/{index:02d} {kind}.{ext}")

# --- Large media: Range segments (media/segments.py) ------------------------------------------------------------
#: Files up to this size come in one request (also the length of the first ranged GET); larger ones in segments.
MEDIA_SEGMENT_THRESHOLD: Annotated[int, Range(1)] = 16 * 1024 * 1024
#: Bytes per Range segment. Scrapy's reader holds a body twice while it completes (BytesIO, then bytes), so peak
#: memory per file is about max(threshold, 2 x size x concurrency): 8 MiB x 3 keeps a 1 GiB download near 150 MiB
#: of RSS, 16 MiB x 3 reached 216 MiB (benchmarks/bench_large_file.py, docs/benchmarks.md, issue #11). A cut
#: connection costs at most one segment of re-fetching, a crash at most size x concurrency per file (a worker's
#: next request waits until its last segment is in the saved ledger; docs/media.md, "What a crash costs").
MEDIA_SEGMENT_SIZE: Annotated[int, Range(1)] = 8 * 1024 * 1024
#: Segments of one file in flight at once (also how many segments a crash may cost per file).
MEDIA_SEGMENT_CONCURRENCY: Annotated[int, Range(1)] = 3
#: Segment body buffers of all large downloads of the crawl together, in bytes (per file it is MEDIA_SEGMENT_SIZE x
#: MEDIA_SEGMENT_CONCURRENCY; above this, segment workers of other files wait for a buffer).
MEDIA_SEGMENT_MEMORY: Annotated[int, Range(1)] = 256 * 1024 * 1024
#: Write segment bodies with O_DIRECT, past the page cache (docs/media.md, "Spool writes"). On by default: it won by
#: 0.4-0.7 s per GiB on two of the three VMs of docs/benchmarks.md; off (buffered writes) won by 1.5 s on the third.
MEDIA_SEGMENT_DIRECT: bool = True
#: Seconds between progress lines (INFO) of one large download; 0 for none.
MEDIA_SEGMENT_LOG_INTERVAL: Annotated[float, Range(0)] = 30.0
#: Largest file the segmented path accepts (from the announced total; refused before anything is written). A total
#: above the free space of FILES_STORE is refused too ("disk-full").
MEDIA_SEGMENT_MAX_FILE_SIZE: Annotated[int, Range(1)] = 16 * 1024**3
#: Times a file that changed remotely (new ETag/total, 200 to If-Range) is started over before failing.
MEDIA_SEGMENT_MAX_RESTARTS: Annotated[int, Range(0)] = 2
#: Seconds an asset waits while another request holds its spool (another worker on a shared FILES_STORE, or another
#: post with the same asset): then it takes that download's object from the index, or fails as spool-busy.
MEDIA_SPOOL_BUSY_WAIT: Annotated[float, Range(0)] = 300.0
#: Seconds after which an untouched download spool (Range spool, video fragments, stray temp file) is swept away
#: when the media downloader opens: assets no longer crawled, or a crash's leftovers.
MEDIA_SPOOL_MAX_AGE: Annotated[float, Range(0)] = 7 * 24 * 3600.0
#: Times an expired URL (403/410) is re-resolved from its post during one download.
MEDIA_SEGMENT_MAX_RESOLVES: Annotated[int, Range(0)] = 3

# --- Video (media/manifests.py, media/assemble.py) --------------------------------------------------------------
#: Highest video height to download; -a max_height=720 overrides it per crawl.
MEDIA_VIDEO_MAX_HEIGHT: Annotated[int, Range(1)] = 1080
#: Codec preference, best first; unlisted codecs rank last.
MEDIA_VIDEO_CODECS = ["avc1", "hevc", "av01"]
#: Hostile-manifest caps, applied before any segment list is expanded.
MEDIA_MANIFEST_MAX_SEGMENTS: Annotated[int, Range(1)] = 20_000
MEDIA_MANIFEST_MAX_DURATION: Annotated[int, Range(0, above=True)] = 6 * 3600
MEDIA_MANIFEST_MAX_BYTES: Annotated[int, Range(1)] = 8 * 1024**3
MEDIA_MANIFEST_MAX_CHARS: Annotated[int, Range(1)] = 16 * 1024**2
MEDIA_MANIFEST_MAX_TAGS: Annotated[int, Range(1)] = 200_000
MEDIA_MANIFEST_MAX_RENDITIONS: Annotated[int, Range(1)] = 64
#: Fragments of one video in flight at once. Segments and fragments are retried by RETRY_TIMES (one count per body:
#: transport errors, RETRY_HTTP_CODES, short or cut bodies).
MEDIA_FRAGMENT_CONCURRENCY: Annotated[int, Range(1)] = 4
#: The assembled file's duration must be within this share of the manifest's.
MEDIA_VIDEO_DURATION_TOLERANCE: Annotated[float, Range(0, 1)] = 0.02
MEDIA_VIDEO_MAX_GAP: Annotated[float, Range(0)] = 5.0

# --- Checkpoints (checkpoints/, extensions/checkpoint.py) ---------------------------------------------------------------------
#: Keep a per-job resume checkpoint; off: none is read or written.
CHECKPOINT_ENABLED: bool = True
#: Where the file backend keeps <job>.json.
CHECKPOINT_DIR = "checkpoints"
#: Largest state file read (checkpoint, mark, retry set): a larger one is moved aside as damaged, never read whole.
STATE_FILE_MAX_BYTES: Annotated[int, Range(1024)] = 64 * 1024 * 1024
#: "file", "redis" (shared by the workers of a job; workers use it by default) or the import path of a store class
#: with from_settings(). From the environment too, so `mediacrawler checkpoints|status` can read the Redis store.
CHECKPOINT_BACKEND: Annotated[str, OneOf(("", "file", "redis"), import_path=True), NeedsRedis()] = (
    os.environ.get("CHECKPOINT_BACKEND") or "file")
#: CHECKPOINT_BACKEND="redis": key prefix of each job's checkpoint (<prefix><job>, <prefix><job>:pages).
CHECKPOINT_REDIS_PREFIX = "mediacrawler:checkpoint:"
#: CHECKPOINT_BACKEND="redis": seconds between two batches of page/item events when no acknowledgement sends them.
CHECKPOINT_REDIS_INTERVAL: Annotated[float, Range(0, above=True)] = 0.5
#: Seconds from a change of the file checkpoint to its write (changes meanwhile go in the same write).
CHECKPOINT_WRITE_INTERVAL: Annotated[float, Range(0)] = 0.5
#: Flush + fsync local feeds before each checkpoint write, so the checkpoint never runs ahead of the export.
CHECKPOINT_SYNC_FEEDS: bool = True
# Local feeds the checkpoint can flush and fsync, with repair of a torn last JSON line.
FEED_STORAGES = {
    "": "mediacrawler.feeds.SyncedFileFeedStorage",
    "file": "mediacrawler.feeds.SyncedFileFeedStorage",
}

# --- Links (mediacrawler get; mediacrawler/links.py, commands/get.py) ----------------------------------------
#: Redirect hops a short link (b23.tv, xhslink.com) may take before it names a post; one more fails that link.
LINKS_MAX_REDIRECTS: Annotated[int, Range(1, 20)] = 5
#: Largest ``-f`` links file read (bytes).
LINKS_FILE_MAX_BYTES: Annotated[int, Range(1)] = 1_048_576

# --- Incremental sync, retries, targets (extensions/marks.py, extensions/retries.py, commands/crawl.py) ----------
# docs/operations.md, "Incremental sync and retries".
#: Keep a high-water mark per source (CHECKPOINT_DIR/marks/<job>.json): the next run emits only newer posts and stops
#: paginating at the first page all at or below it (-a full=true walks every page).
MARKS_ENABLED: bool = True
#: "file", "redis" (keys MARKS_REDIS_PREFIX<job>; needs REDIS_URL) or the import path of a mark store class with
#: from_settings(). Empty: the kind of CHECKPOINT_BACKEND (redis for workers), so marks stay with the checkpoints.
MARKS_BACKEND: Annotated[str, OneOf(("", "file", "redis"), import_path=True), NeedsRedis()] = ""
#: MARKS_BACKEND="redis": prefix of the key holding each job's mark (its JSON, as the file would hold it).
MARKS_REDIS_PREFIX = "mediacrawler:marks:"
#: MARKS_BACKEND="redis": prefix of the key holding each job's comment-thread marks (-a comments).
MARKS_COMMENTS_REDIS_PREFIX = "mediacrawler:comment-marks:"
#: Keep media assets that failed in a retry set per job (CHECKPOINT_DIR/retry/<job>.json): the next run of the job
#: (or `mediacrawler retry`) reads their posts again first; dedupe never drops a post while it has one.
RETRY_MEDIA_ENABLED: bool = True
#: Failure reasons never retried: the URL serves no media at all.
RETRY_MEDIA_IGNORE_REASONS = ["not-media"]
#: Failed attempts (runs) after which an asset is given up, with a WARNING.
RETRY_MEDIA_MAX_ATTEMPTS: Annotated[int, Range(1)] = 5
#: "file", "redis" (keys RETRY_MEDIA_REDIS_PREFIX<job>; needs REDIS_URL) or the import path of a retry store class
#: with from_settings(). Empty: the kind of CHECKPOINT_BACKEND, as for MARKS_BACKEND.
RETRY_MEDIA_BACKEND: Annotated[str, OneOf(("", "file", "redis"), import_path=True), NeedsRedis()] = ""
#: RETRY_MEDIA_BACKEND="redis": prefix of the key holding each job's retry set.
RETRY_MEDIA_REDIS_PREFIX = "mediacrawler:retry:"
#: Targets crawled by `scrapy crawl <platform>` given none with -a: "<argument>:<value>" entries, one job (and
#: checkpoint) each, e.g. WEIBO_TARGETS = ["uid:7365120894", "keyword:猫"]; -a values (start=3) apply to each.
#: From the environment too, as on the command line (a JSON list or comma-separated entries:
#: WEIBO_TARGETS=uid:7365120894,keyword:猫); -s wins over the environment.
WEIBO_TARGETS: list[str] | str = os.environ.get("WEIBO_TARGETS") or []
BILIBILI_TARGETS: list[str] | str = os.environ.get("BILIBILI_TARGETS") or []
FACEBOOK_TARGETS: list[str] | str = os.environ.get("FACEBOOK_TARGETS") or []
XHS_TARGETS: list[str] | str = os.environ.get("XHS_TARGETS") or []
DOUYIN_TARGETS: list[str] | str = os.environ.get("DOUYIN_TARGETS") or []

# --- Cache and Redis --------------------------------------------------------------------------------------------
#: Unset: everything is local. Set (e.g. redis://127.0.0.1:6379/0): shared cache, index and scheduler.
REDIS_URL: str | None = os.environ.get("REDIS_URL") or None
#: Seconds the start-up check of REDIS_URL (commands/crawl.py, `mediacrawler status`...) waits for Redis: if it is
#: unreachable or refuses the password, the command fails with one line and exit status 2.
REDIS_CONNECT_TIMEOUT: Annotated[float, Range(0, above=True)] = 10.0
#: Backend of the runtime cache (sessions, cursors, dedupe sets): "memory" (this process only), "redis" (shared;
#: needs REDIS_URL) or the import path of a mediacrawler.cache.Cache subclass. Unset: redis when REDIS_URL is set.
CACHE_BACKEND: Annotated[str | None, OneOf(("memory", "redis"), import_path=True), NeedsRedis()] = (
    os.environ.get("CACHE_BACKEND") or None)
#: Prepended to every cache key, so several deployments can share one Redis.
CACHE_KEY_PREFIX = "mediacrawler:"
#: Retries of a cache call while Redis is unreachable: the wait starts at CACHE_RETRY_BACKOFF_BASE seconds and
#: doubles per retry, capped at CACHE_RETRY_BACKOFF_MAX (defaults: 0.5+1+2+4+8 = 15.5 s before giving up).
CACHE_RETRY_TIMES: Annotated[int, Range(0)] = 5
CACHE_RETRY_BACKOFF_BASE: Annotated[float, Range(0)] = 0.5
CACHE_RETRY_BACKOFF_MAX: Annotated[float, Range(0)] = 8.0
#: Seconds a session:{id} record lives unless used (every use renews it).
SESSION_TTL: Annotated[int, Range(1)] = 300

# --- Many workers on one Redis (docs/operations.md) -------------------------------------------------------------
#: With REDIS_URL set, the DistributedAddon swaps in the shared leased queue and duplicate filter; False: never.
DISTRIBUTED_ENABLED: bool = True
#: Prefix of the queue, job and duplicate filter keys.
DISTRIBUTED_KEY_PREFIX = "mediacrawler:dist"
#: Seconds a popped request stays leased without a heartbeat; after that any worker puts it back in the queue.
DISTRIBUTED_LEASE_TTL: Annotated[float, Range(0, above=True), Relative("DISTRIBUTED_HEARTBEAT", 2)] = 15.0
#: Seconds between heartbeats (renew this worker's leases, put expired ones back, retry Redis after an outage, and
#: wake an idle worker when the shared queue has work): 0.5 s measured 2.9-3.6x pages/s with 4 workers against 1.8x
#: at 3 s (docs/benchmarks.md), for a few Redis calls per worker per beat.
DISTRIBUTED_HEARTBEAT: Annotated[float, Range(0, above=True)] = 0.5
#: A worker with no job for this many seconds (queue empty, no lease anywhere) closes.
DISTRIBUTED_IDLE_CLOSE: Annotated[float, Range(0)] = 30.0
#: Seconds between acknowledgement batches (the local feeds are flushed and fsynced first: no record is lost to a
#: SIGKILL after its request was acknowledged).
DISTRIBUTED_ACK_INTERVAL: Annotated[float, Range(0, above=True)] = 0.5
#: Seconds between a waiting worker's looks at the job list.
DISTRIBUTED_JOB_POLL: Annotated[float, Range(0, above=True)] = 1.0
#: Seconds without Redis before a worker gives up and closes (its leases come back when they expire).
DISTRIBUTED_REDIS_GIVE_UP: Annotated[float, Range(0, above=True)] = 600.0
#: Connect and read timeout of the distributed components' Redis calls.
DISTRIBUTED_SOCKET_TIMEOUT: Annotated[float, Range(0, above=True)] = 5.0
#: Dead letters (refused queue entries and job messages, <prefix>:<spider>:dead) kept per spider, newest first out.
DISTRIBUTED_DEAD_MAX: Annotated[int, Range(1)] = 1000
#: Bytes of one job message; a longer one is dead-lettered when a worker meets it (a job's args are a few names).
DISTRIBUTED_JOB_MAX_BYTES: Annotated[int, Range(256)] = 65536

# --- The web page (mediacrawler web; docs/web.md) ----------------------------------------------------------------
#: Address `mediacrawler web` listens on (--host); any but a loopback one needs WEB_AUTH=user:password in the
#: environment (never a setting: it is a credential).
WEB_HOST = "127.0.0.1"
#: Port of `mediacrawler web` (--port); 0: a free one.
WEB_PORT: Annotated[int, Range(0, 65535)] = 8080

# --- Metrics (extensions/metrics.py) and progress (extensions/progress.py) -------------------------------------
#: Port of the Prometheus endpoint (http://METRICS_HOST:METRICS_PORT/metrics); unset: no endpoint. 0: a free port,
#: logged at start ("Metrics endpoint at …").
METRICS_PORT: Annotated[int | None, Range(0, 65535)] = os.environ.get("METRICS_PORT") or None
#: Address the endpoint listens on; loopback unless a scraper on another host must reach it.
METRICS_HOST = "127.0.0.1"
#: File written at close with the final metrics (node-exporter textfile collector format); unset: none.
METRICS_TEXTFILE = None
#: Seconds between progress lines (Scrapy's own setting; 0: none).
LOGSTATS_INTERVAL: Annotated[float, Range(0)] = 60.0

# --- Shutdown (extensions/shutdown.py; docs/operations.md, "Deploying on scrapyd") -------------------------------
#: Seconds a graceful stop (first SIGTERM/SIGINT, scrapyd's cancel.json) waits for in-flight requests and media
#: downloads before it stops as a second signal would (the checkpoint keeps the last completed page); 0: no bound.
SHUTDOWN_GRACE: Annotated[float, Range(0)] = 30.0
#: Seconds between two looks at whether a graceful stop has begun.
SHUTDOWN_POLL_INTERVAL: Annotated[float, Range(0, above=True)] = 0.5

EXTENSIONS = {
    # First: scrubs every log line of the credentials, and keeps tldextract offline (extensions/secrets.py).
    "mediacrawler.extensions.secrets.SecretsExtension": -1000,
    "mediacrawler.extensions.checkpoint.CheckpointExtension": 500,
    # High-water marks per source (MARKS_ENABLED).
    "mediacrawler.extensions.marks.MarkExtension": 505,
    # Failed media kept per job and read again first by the next run (RETRY_MEDIA_ENABLED).
    "mediacrawler.extensions.retries.RetryExtension": 506,
    # Bounds a graceful stop to SHUTDOWN_GRACE seconds (a stalled media download would hold it for minutes).
    "mediacrawler.extensions.shutdown.ShutdownGraceExtension": 510,
    # One progress line per LOGSTATS_INTERVAL with pages, posts, media files and MiB: replaces Scrapy's LogStats.
    "scrapy.extensions.logstats.LogStats": None,
    "mediacrawler.extensions.progress.ProgressLogStats": 0,
    # After the checkpoint extension: reads where it resumed on spider_opened (METRICS_PORT unset: off).
    "mediacrawler.extensions.metrics.MetricsExtension": 900,
    # The crawl's row in the records database's `runs` table, every RUNS_INTERVAL (off with RECORDS_ENABLED).
    "mediacrawler.extensions.runs.RunsExtension": 910,
}

#: Where Scrapy's cookie middleware (through tldextract) reads the public suffix list from; empty: the snapshot
#: bundled with tldextract, never the network. A local file path works too.
PUBLIC_SUFFIX_LIST_URLS: list[str] = []

ADDONS = {
    "mediacrawler.extensions.output.DefaultOutputAddon": 0,
    "mediacrawler.distributed.addon.DistributedAddon": 10,
}
