"""The Starlette application of ``mediacrawler web`` (docs/web.md): pages rendered by Jinja2 with autoescape
(a post whose text is ``<script>`` shows as text), a JSON API behind each page, stored objects by their SHA-256
(files.py), optional basic auth (``WEB_AUTH`` from the environment), and the start form (crawls.py).

The records database is opened once and read under a lock (a store is used by one thread at a time; Starlette runs
plain endpoints in a thread pool); each request ends its read transaction (PostgreSQL).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import jinja2
from scrapy import Spider
from scrapy.settings import BaseSettings
from scrapy.spiderloader import get_spider_loader
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import (FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse,
                                 Response)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mediacrawler.config import setting
from mediacrawler.pipelines.records import seen_now
from mediacrawler.records.store import RecordStore, open_store, records_uri, shown
from mediacrawler.scrub import scrub
from mediacrawler.spiders._args import SpiderParams
from mediacrawler.web import files, queries
from mediacrawler.web.crawls import CrawlRunner, field_errors, job_key
from mediacrawler.web.jobs import jobs as jobs_status

HERE = Path(__file__).resolve().parent


class BasicAuth(BaseHTTPMiddleware):
    """Every request needs ``Authorization: Basic`` with the ``user:password`` of ``WEB_AUTH``."""

    def __init__(self, app: Any, *, credentials: str) -> None:
        super().__init__(app)
        self.expected = credentials.encode("utf-8")

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        try:
            given = base64.b64decode(value.strip(), validate=True) if scheme.lower() == "basic" else b""
        except (binascii.Error, ValueError):
            given = b""
        if not secrets.compare_digest(given, self.expected):
            return PlainTextResponse("authentication required", status_code=401,
                                     headers={"WWW-Authenticate": 'Basic realm="mediacrawler", charset="UTF-8"'})
        return await call_next(request)


class SameOrigin(BaseHTTPMiddleware):
    """A form posted from another site (a page the browser has open elsewhere) never starts a crawl."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            origin = request.headers.get("origin") or request.headers.get("referer")
            host = request.headers.get("host", "")
            if origin and urlsplit(origin).netloc != host:
                return PlainTextResponse("cross-origin request refused", status_code=403)
        return await call_next(request)


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


class Web:
    """What the endpoints share: settings, the records database, the crawl runner, the templates."""

    def __init__(self, settings: BaseSettings, *, overrides: list[str], crawl_dir: str | None = None) -> None:
        self.settings = settings
        checkpoint_dir = str(setting(settings, "CHECKPOINT_DIR"))
        self.uri = records_uri(settings)
        self.connect_timeout = float(setting(settings, "RECORDS_CONNECT_TIMEOUT"))
        self.uri_shown = shown(self.uri)
        self.store_root = str(setting(settings, "FILES_STORE")).removeprefix("file://")
        directory = crawl_dir or str(Path(checkpoint_dir, "web-crawls"))
        self.runner = CrawlRunner(directory, settings=overrides)
        self.redis_url = setting(settings, "REDIS_URL") or None
        self._store: RecordStore | None = None
        self._lock = threading.Lock()
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
        self.templates.globals.update(query=urlencode, sparkline=queries.sparkline, arrange=queries.arrange_media)
        self.templates.filters["tojson_pretty"] = _pretty
        self.spiders = self._spiders()

    def _spiders(self) -> dict[str, type[Spider]]:
        loader = get_spider_loader(self.settings)
        found = {}
        for name in sorted(loader.list()):
            spidercls = loader.load(name)
            if getattr(spidercls, "params_model", None) is not None:
                found[name] = spidercls
        return found

    @contextmanager
    def db(self) -> Iterator[RecordStore]:
        """The records database, for one request's reads (opened on first use)."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self.uri, now=seen_now(), connect_timeout=self.connect_timeout)
            try:
                yield self._store
                self._store.end_read()
            except BaseException:
                # A connection that failed (PostgreSQL restarted) is not used again: the next request reconnects.
                with suppress(Exception):
                    self._store.close()
                self._store = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def page(self, name: str, request: Request, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(request=request, nav=name.removesuffix(".html"),
                                                        **context)
        return HTMLResponse(html, status_code=status_code)


def _filters(request: Request) -> queries.PostFilter | JSONResponse:
    try:
        return queries.PostFilter.parse(request.query_params)
    except queries.BadFilter as e:
        return JSONResponse({"error": str(e)}, status_code=400)


def _spider_fields(spidercls: type[Spider]) -> list[dict[str, Any]]:
    """The spider's own arguments first (what it crawls), then the shared ones."""
    model = spidercls.params_model  # type: ignore[attr-defined]
    shared = set(SpiderParams.model_fields)
    fields = [{"name": n, "description": f.description or "", "own": n not in shared}
              for n, f in model.model_fields.items()]
    return sorted(fields, key=lambda f: not f["own"])


def build_app(settings: BaseSettings, *, overrides: Sequence[str] = (), auth: str | None = None,
              crawl_dir: str | None = None) -> Starlette:
    """The application over these settings; ``overrides`` (the ``-s`` pairs) are passed on to crawls it starts;
    ``auth`` (``user:password``) turns basic auth on."""
    web = Web(settings, overrides=list(overrides), crawl_dir=crawl_dir)

    # --- JSON API --------------------------------------------------------------------------------------------
    def api_posts(request: Request) -> Response:
        f = _filters(request)
        if isinstance(f, JSONResponse):
            return f
        with web.db() as store:
            return JSONResponse(queries.list_posts(store, f))

    def api_post(request: Request) -> Response:
        with web.db() as store:
            post = queries.get_post(store, request.path_params["platform"], request.path_params["post_id"])
        if post is None:
            return JSONResponse({"error": "no such post"}, status_code=404)
        return JSONResponse(post)

    def api_author(request: Request) -> Response:
        f = _filters(request)
        if isinstance(f, JSONResponse):
            return f
        with web.db() as store:
            author = queries.get_author(store, request.path_params["platform"], request.path_params["author_id"],
                                        f)
        if author is None:
            return JSONResponse({"error": "no such author"}, status_code=404)
        return JSONResponse(author)

    def job_figures() -> dict[str, Any]:
        """The jobs page's figures: the runs from the records database (read under its lock), then the rest."""
        try:
            with web.db() as store:
                runs = queries.job_runs(store)
        except Exception as exc:  # noqa: BLE001 - a database out of reach is a line on the page
            return jobs_status(web.settings, web.runner, {}, [scrub(f"runs: {type(exc).__name__}: {exc}")[:300]])
        return jobs_status(web.settings, web.runner, runs)

    def api_jobs(request: Request) -> Response:
        return JSONResponse(job_figures())

    def api_crawls(request: Request) -> Response:
        return JSONResponse({"crawls": web.runner.list()})

    def api_crawl(request: Request) -> Response:
        crawl = web.runner.get(request.path_params["crawl_id"], log="log" in request.query_params)
        if crawl is None:
            return JSONResponse({"error": "no such crawl"}, status_code=404)
        return JSONResponse(crawl)

    async def api_start(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "expected a JSON object {spider, args}"}, status_code=400)
        if not isinstance(body, dict) or not isinstance(body.get("args", {}), dict):
            return JSONResponse({"error": "expected a JSON object {spider, args}"}, status_code=400)
        spider, args = str(body.get("spider") or ""), {str(k): str(v) for k, v in body.get("args", {}).items()}
        if body.get("link"):
            routed = await from_link(str(body["link"]))
            if isinstance(routed, str):
                return JSONResponse({"errors": {"link": routed}}, status_code=400)
            spider, args = routed[0], {**args, **routed[1]}
        result = start(spider, args)
        return JSONResponse(result, status_code=400 if "errors" in result else 201)

    def start(spider: str, kwargs: dict[str, str]) -> dict[str, Any]:
        """Validate, then start a crawl (or queue a job with REDIS_URL)."""
        spidercls = web.spiders.get(spider)
        if spidercls is None:
            return {"errors": {"spider": f"no spider named {spider[:40]!r} (one of {', '.join(web.spiders)})"}}
        kwargs = {k: v for k, v in kwargs.items() if v.strip() and not k.startswith("_")}
        errors = field_errors(spidercls, kwargs)
        if errors:
            return {"errors": errors}
        if web.redis_url:
            from mediacrawler.distributed.jobs import JobBoard

            key = job_key(spidercls, kwargs)
            queued = JobBoard(web.settings, spidercls.name, worker="web").enqueue(key, kwargs)
            return {"queued": key} if queued else {"errors": {"": f"{key} is already queued or running"}}
        try:
            return {"crawl": web.runner.start(spidercls, kwargs)}
        except RuntimeError as e:
            return {"errors": {"": str(e)}}

    # --- Files -------------------------------------------------------------------------------------------------
    def file(request: Request) -> Response:
        name = request.path_params["name"]
        sha256, vtt = (name[:-4], True) if name.endswith(".vtt") else (name, False)
        path = files.object_path(web.store_root, sha256)
        if path is None:
            return PlainTextResponse("no such object", status_code=404)
        headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=86400, immutable"}
        if vtt:
            if path.suffix != ".srt" or path.stat().st_size > files.MAX_SUBTITLE_BYTES:
                return PlainTextResponse("not a stored SRT subtitle", status_code=404)
            text = files.srt_to_vtt(path.read_bytes().decode("utf-8", "replace"))
            return Response(text, media_type="text/vtt; charset=utf-8", headers=headers)
        with web.db() as store:
            rows = store.select("SELECT mime FROM media WHERE sha256 = ? AND mime IS NOT NULL LIMIT 1", [sha256])
        mime = files.media_type(path, rows[0]["mime"] if rows else None)
        # Stored objects are platform content: never rendered as a page of this origin (no HTML, no SVG script).
        if not mime.startswith(("image/", "video/", "audio/")) or mime == "image/svg+xml":
            headers["Content-Disposition"] = "attachment"
            headers["Content-Security-Policy"] = "sandbox"
        return FileResponse(path, media_type=mime, headers=headers)

    # --- Pages -------------------------------------------------------------------------------------------------
    def posts_page(request: Request) -> Response:
        try:
            f = queries.PostFilter.parse(request.query_params)
        except queries.BadFilter as e:
            f, error = queries.PostFilter(), str(e)
        else:
            error = None
        with web.db() as store:
            listing = queries.list_posts(store, f)
            known = queries.platforms(store)
        return web.page("posts.html", request, listing=listing, platforms=known, error=error, f=f)

    def post_page(request: Request) -> Response:
        with web.db() as store:
            post = queries.get_post(store, request.path_params["platform"], request.path_params["post_id"])
        if post is None:
            return web.page("missing.html", request, status_code=404, what="post")
        return web.page("post.html", request, post=post)

    def author_page(request: Request) -> Response:
        try:
            f = queries.PostFilter.parse(request.query_params)
        except queries.BadFilter:
            f = queries.PostFilter()
        with web.db() as store:
            author = queries.get_author(store, request.path_params["platform"], request.path_params["author_id"],
                                        f)
        if author is None:
            return web.page("missing.html", request, status_code=404, what="author")
        return web.page("author.html", request, data=author)

    def jobs_page(request: Request) -> Response:
        return web.page("jobs.html", request, data=job_figures())

    def crawl_page(request: Request) -> Response:
        crawl = web.runner.get(request.path_params["crawl_id"], log=True)
        if crawl is None:
            return web.page("missing.html", request, status_code=404, what="crawl")
        return web.page("crawl.html", request, crawl=crawl)

    async def from_link(link: str) -> tuple[str, dict[str, str]] | str:
        """The spider and arguments of a pasted share link (a short link resolved by its redirect, off the event
        loop), or why there are none (mediacrawler/links.py, as ``mediacrawler get`` routes it)."""
        from mediacrawler.commands.get import resolve
        from mediacrawler.links import SHORT_LINK, UnknownLink, route

        try:
            found = route(link)
            if found.spider == SHORT_LINK:
                found = await run_in_threadpool(resolve, link, found, web.settings)
        except (UnknownLink, ValueError, OSError) as e:
            return str(e)[:300]
        return found.spider, dict(found.args)

    async def start_page(request: Request) -> Response:
        values: dict[str, str]
        if request.method == "POST":
            form = await request.form()
            spider = str(form.get("spider") or "")
            values = {k.removeprefix("arg:"): str(v) for k, v in form.items() if k.startswith("arg:")}
            link = str(form.get("link") or "").strip()
            routed = await from_link(link) if link else None
            if isinstance(routed, str):
                result: dict[str, Any] = {"errors": {"link": routed}}
            else:
                if routed is not None:
                    spider, values = routed[0], {**values, **routed[1]}
                result = start(spider, values)
            if "crawl" in result:
                return RedirectResponse(f"/crawls/{result['crawl']}", status_code=303)
            if "queued" in result:
                return RedirectResponse("/jobs?queued=" + result["queued"], status_code=303)
            errors = result["errors"]
        else:
            spider, values, errors, link = str(request.query_params.get("spider") or ""), {}, {}, ""
        spider = spider if spider in web.spiders else next(iter(web.spiders), "")
        fields = _spider_fields(web.spiders[spider]) if spider else []
        return web.page("start.html", request, status_code=400 if errors else 200, spiders=list(web.spiders),
                        spider=spider, fields=fields, values=values, errors=errors, redis=bool(web.redis_url),
                        link=link)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        web.runner.stop_all()
        web.close()

    routes = [
        Route("/", posts_page),
        Route("/posts/{platform}/{post_id:path}", post_page),
        Route("/authors/{platform}/{author_id:path}", author_page),
        Route("/jobs", jobs_page),
        Route("/start", start_page, methods=["GET", "POST"]),
        Route("/crawls/{crawl_id}", crawl_page),
        Route("/files/{name}", file),
        Route("/api/posts", api_posts),
        Route("/api/posts/{platform}/{post_id:path}", api_post),
        Route("/api/authors/{platform}/{author_id:path}", api_author),
        Route("/api/jobs", api_jobs),
        Route("/api/crawls", api_crawls, methods=["GET"]),
        Route("/api/crawls", api_start, methods=["POST"]),
        Route("/api/crawls/{crawl_id}", api_crawl),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(SameOrigin)]
    if auth:
        middleware.insert(0, Middleware(BasicAuth, credentials=auth))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.web = web
    return app
