"""mediacrawler/compat.py holds every private or undocumented Scrapy/Twisted name the project needs: each test here
fails when an upgrade moves one or changes what we rely on (docs/architecture.md, "Private internals"). The last
test keeps the rest of the package off such names: a new reach goes through compat.py and gets its test here.

The tests may reach into Scrapy's private parts to check the behaviour itself (the slot a downloader creates)."""

from __future__ import annotations

import ast
import inspect
import io
from pathlib import Path

import scrapy.core.scraper
from scrapy import Request, Spider
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.core.engine import ExecutionEngine
from scrapy.exporters import JsonLinesItemExporter
from scrapy.http import TextResponse
from scrapy.utils.test import get_crawler
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web import http, resource, server
from twisted.web.client import HTTPConnectionPool, ResponseFailed

import mediacrawler
from mediacrawler import compat
from mediacrawler.contracts import download_error_reason

PACKAGE = Path(mediacrawler.__file__).resolve().parent


def test_data_loss_is_what_twisted_wraps_in_a_short_body_failure() -> None:
    import twisted.web._newclient as newclient

    assert issubclass(compat.DataLoss, Exception)
    assert newclient._DataLoss is compat.DataLoss  # the body reader raises this very class
    assert download_error_reason(ResponseFailed([Failure(compat.DataLoss())])) == "dataloss"


def test_tunnel_error_is_what_scrapy_raises_for_a_refused_connect() -> None:
    import scrapy.core.downloader.handlers.http11 as http11

    assert issubclass(compat.TunnelError, Exception)
    assert "TunnelError(" in inspect.getsource(http11)  # what a refused CONNECT fails with
    assert download_error_reason(compat.TunnelError("407")) == "connection-error"


def test_connection_pool_is_the_one_the_handler_downloads_through() -> None:
    crawler = get_crawler(settings_dict={"CONCURRENT_REQUESTS_PER_DOMAIN": 7})
    handler = HTTP11DownloadHandler(crawler)
    pool = compat.connection_pool(handler)
    assert isinstance(pool, HTTPConnectionPool)
    assert pool.maxPersistentPerHost == 7  # Scrapy sizes it from the setting: the figure we raise
    assert "pool=self._pool" in inspect.getsource(HTTP11DownloadHandler.download_request)


def test_exporter_kwargs_are_the_encoder_options() -> None:
    exporter = JsonLinesItemExporter(io.BytesIO(), sort_keys=True, fields_to_export=["a"])
    kwargs = compat.exporter_kwargs(exporter)
    assert kwargs["sort_keys"] is True
    assert "fields_to_export" not in kwargs  # the exporter's own options are taken out
    assert exporter.encoder.sort_keys is True  # Scrapy built its encoder from the same dict


def test_default_callback_is_what_scrapy_calls_without_a_callback() -> None:
    class Parsing(Spider):
        name = "parsing"

        def parse(self, response: TextResponse, **kwargs: object) -> list[str]:
            return [response.url]

    spider = Parsing()
    response = TextResponse("http://example.com/a", body=b"")
    assert compat.default_callback(spider)(response) == ["http://example.com/a"]
    assert "spider._parse" in inspect.getsource(scrapy.core.scraper)  # the scraper's own fallback


def test_set_slot_pace_gives_a_new_slot_its_delay_and_concurrency() -> None:
    crawler = get_crawler()
    crawler.engine = ExecutionEngine(crawler, lambda _: None)
    compat.set_slot_pace(crawler, "media:x", delay=3.0, concurrency=5)
    compat.set_slot_pace(crawler, "media:x", delay=9.0, concurrency=1)  # a configured slot keeps its pace
    key, slot = crawler.engine.downloader._get_slot(Request("http://x/", meta={"download_slot": "media:x"}))
    assert (key, slot.delay, slot.concurrency, slot.jitter) == ("media:x", 3.0, 5, 0)


def test_the_sandbox_flag_of_a_client_gone() -> None:
    """The sandbox's one reach (``Request._disconnected``): False while the client is there, True once it left."""
    channel = http.HTTPChannel()
    channel.site = server.Site(resource.Resource())
    channel.makeConnection(StringTransport())
    request = server.Request(channel)
    assert request._disconnected is False
    request.connectionLost(Failure(ConnectionDone()))
    assert request._disconnected is True


#: Private names of the standard library's public API (namedtuple's ``_replace``, ``os._exit``).
STDLIB = {"_replace", "_asdict", "_fields", "_make", "_exit"}
#: Scrapy/Twisted private names the project has needed (or that collide with a name of its own): never read on
#: an object of theirs outside compat.py.
KNOWN = {"_pool", "_kwargs", "_parse", "_slot", "_disconnected", "_create_crawler", "_get_slot", "_engine",
         "_extensions", "_DataLoss", "_txresponse"}


def _defined(trees: dict[Path, ast.AST]) -> set[str]:
    """Every name the package defines itself (functions, classes, attributes and variables it assigns)."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _private_reaches(path: Path, tree: ast.AST, defined: set[str]) -> list[str]:
    """Private names of Scrapy or Twisted that *path* imports, reads (an attribute the package never defines, or
    one of KNOWN on an object not its own) or names in a string to getattr/hasattr."""
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("scrapy", "twisted"):
            if any(p.startswith("_") for p in [*(node.module or "").split("."), *(a.name for a in node.names)]):
                name = node.module
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if node.attr not in STDLIB and (node.attr not in defined or (node.attr in KNOWN and not own)):
                name = ast.unparse(node)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in KNOWN:
            name = ast.unparse(node)
        if name is not None:
            found.append(f"{path.name}:{getattr(node, 'lineno', 0)}: {name}")
    return found


def test_no_other_module_reaches_into_private_names() -> None:
    trees = {p: ast.parse(p.read_text("utf-8")) for p in PACKAGE.rglob("*.py")}
    defined = _defined(trees)
    reaches = {str(p.relative_to(PACKAGE)): _private_reaches(p, tree, defined) for p, tree in trees.items()
               if p.name != "compat.py"}
    assert {name: found for name, found in reaches.items() if found} == {}
    # The check sees them where they are: compat.py's own reaches, and the ones it replaced.
    assert len(_private_reaches(PACKAGE / "compat.py", trees[PACKAGE / "compat.py"], defined)) >= 4
    old = ast.parse("from twisted.web._newclient import ResponseFailed\nfrom twisted.web.http import _DataLoss\n"
                    "pool = handler._pool\ncallback = getattr(spider, '_parse', None)\n")
    assert len(_private_reaches(Path("old.py"), old, defined)) == 4
