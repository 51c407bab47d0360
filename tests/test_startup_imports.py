"""Start-up stays lean (issue #27; docs/benchmarks.md, "Start-up"): a crawl imports only what it uses.

A media-off crawl without REDIS_URL or METRICS_PORT must not import PyAV, redis-py, scrapy-redis,
prometheus-client, chompjs, psycopg, Starlette/Jinja2, Pillow, m3u8, aiohttp (Scrapy's remote control), the
media engine nor the distributed package: Scrapy imports every component named in settings.py (even one that
raises NotConfigured, even a key set to None), so each of those modules keeps its heavy imports in the code
paths that need them; the spider loader imports the crawled spider's module alone. Each test runs a fresh
interpreter: what this test process already imported says nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894

#: Top-level packages a media-off crawl without Redis or metrics must not import.
HEAVY = ("av", "redis", "scrapy_redis", "prometheus_client", "chompjs", "psycopg", "starlette", "jinja2", "PIL",
         "m3u8", "aiohttp", "hiredis")
#: Modules of ours that only media downloads, workers and the web page need (the distributed package's addon,
#: which reads REDIS_URL, and its pure rate limiter, which RATE_BUDGET's check names, are light and allowed).
HEAVY_OURS = ("mediacrawler.media.committer", "mediacrawler.media.video", "mediacrawler.media.assemble",
              "mediacrawler.media.manifests", "mediacrawler.media.integrity", "mediacrawler.media.segments",
              "mediacrawler.web", "mediacrawler_sandbox")
ALLOWED_DISTRIBUTED = {"mediacrawler.distributed", "mediacrawler.distributed.addon",
                       "mediacrawler.distributed.limiter", "mediacrawler.distributed.docstore"}

#: Writes, at exit, the modules of sys.modules that the tuples above name (``{"heavy": [...], "ours": [...]}``).
PROBE = f"""
import atexit, json, sys
HEAVY, HEAVY_OURS, ALLOWED = {HEAVY!r}, {HEAVY_OURS!r}, {sorted(ALLOWED_DISTRIBUTED)!r}

def report():
    names = sorted(sys.modules)
    found = {{"heavy": [n for n in names if n.partition(".")[0] in HEAVY],
              "ours": [n for n in names if n.startswith(HEAVY_OURS) or (n.startswith("mediacrawler.distributed")
                                                                        and n not in ALLOWED)],
              "spiders": [n for n in names if n.startswith("mediacrawler.spiders.") and "._" not in n],
              "loaded": len(names)}}
    with open(sys.argv[1], "w") as out:
        json.dump(found, out)

atexit.register(report)
"""


def env() -> dict[str, str]:
    drop = ("REDIS_URL", "CACHE_BACKEND", "CHECKPOINT_BACKEND", "METRICS_PORT", "WEIBO_COOKIE")
    kept = {k: v for k, v in os.environ.items() if k not in drop}
    return {**kept, "SCRAPY_SETTINGS_MODULE": "mediacrawler.settings"}


def found(report: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def test_components_and_spiders_import_no_heavy_module(tmp_path: Path) -> None:
    """What Scrapy imports before a crawl starts: the settings, every spider module (SPIDER_MODULES), the crawl
    command (COMMANDS_MODULE) and every component path settings.py names, loaded as Scrapy loads them."""
    report = tmp_path / "modules.json"
    code = PROBE + """
from scrapy.utils.misc import load_object, walk_modules
from scrapy.utils.project import get_project_settings
settings = get_project_settings()
for module in [*settings.getlist("SPIDER_MODULES"), settings["COMMANDS_MODULE"]]:
    walk_modules(module)
for name in ("EXTENSIONS", "DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "ADDONS"):
    ours = settings.getdict(name)
    merged = {**settings.getdict(name + "_BASE"), **ours}
    for path in {*ours, *(p for p, order in merged.items() if order is not None)}:  # ours: a None value too
        load_object(path)
for name in ("DOWNLOAD_HANDLERS", "FEED_STORAGES", "FEED_EXPORTERS"):  # scheme or format -> path
    for path in {**settings.getdict(name + "_BASE"), **settings.getdict(name)}.values():
        if path is not None:
            load_object(path)
# Named in the check below: loaded whatever the loops above do.
import mediacrawler.pipelines.media, mediacrawler.spiders.xhs, mediacrawler.extensions.metrics
"""
    done = subprocess.run([sys.executable, "-c", code, str(report)], cwd=tmp_path, env=env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = found(report)
    assert modules["heavy"] == [] and modules["ours"] == [], modules
    assert modules["loaded"] > 300  # the components were really imported


def test_media_off_crawl_imports_no_heavy_module(sandbox: Any, tmp_path: Path) -> None:
    """A whole media-off ``scrapy crawl weibo`` (one page of the sandbox's timeline, through every pipeline and
    extension to the JSON Lines export) imports none of them either, from start to exit."""
    report, out = tmp_path / "modules.json", tmp_path / "output"
    code = PROBE + "\nfrom scrapy.cmdline import execute\nexecute(['scrapy', *sys.argv[2:]])\n"
    argv = [sys.executable, "-c", code, str(report), "crawl", "weibo", "-a", f"uid={UID}", "-a", "max_pages=1",
            "-s", f"WEIBO_BASE_URL={sandbox.weibo_url}", "-s", "MEDIA_ENABLED=0", "-s", "DOWNLOAD_DELAY=0",
            "-s", "AUTOTHROTTLE_ENABLED=0", "-s", f"OUTPUT_DIR={out}", "-s", f"CHECKPOINT_DIR={tmp_path / 'ck'}",
            "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", "LOG_LEVEL=INFO"]
    done = subprocess.run(argv, cwd=tmp_path, env=env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for path in out.rglob("*.jsonl") for line in path.read_text("utf-8").splitlines()]
    assert len(records) == 10 and {r["platform"] for r in records} == {"weibo"}  # page 1 of 10 posts, exported
    modules = found(report)
    assert modules["heavy"] == [] and modules["ours"] == [], modules
    assert modules["spiders"] == ["mediacrawler.spiders.weibo"]  # the other platforms' spiders stay unimported


def test_spider_loader_loads_one_spider_module_and_lists_them_all(tmp_path: Path) -> None:
    """SPIDER_LOADER_CLASS (mediacrawler/spiders/_loader.py): ``load("weibo")`` imports the Weibo spider's module
    alone; ``list()`` and an unknown name go through every module, as Scrapy's loader does."""
    code = """
import json, sys
from scrapy.spiderloader import get_spider_loader
from scrapy.utils.project import get_project_settings
loader = get_spider_loader(get_project_settings())
def spiders():
    return sorted(n for n in sys.modules if n.startswith("mediacrawler.spiders.") and "._" not in n)
out = {"class": loader.load("weibo").__name__, "after_load": spiders()}
try:
    loader.load("nosuch")
except KeyError as e:
    out["unknown"] = str(e)
out["list"], out["after_list"] = sorted(loader.list()), spiders()
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["class"] == "WeiboSpider" and out["after_load"] == ["mediacrawler.spiders.weibo"]
    assert out["unknown"] == "'Spider not found: nosuch'"
    platforms = ["bilibili", "douyin", "facebook", "weibo", "xhs"]
    assert out["list"] == platforms and out["after_list"] == [f"mediacrawler.spiders.{p}" for p in platforms]


def test_a_lazily_imported_library_that_is_missing_fails_where_it_is_needed(tmp_path: Path) -> None:
    """Imported late, never hidden: with prometheus-client, chompjs and Pillow made unimportable, the modules
    that use them still import, and the metrics extension (METRICS_PORT set), the XHS state parser and the media
    pipeline (media on) fail with the ImportError naming the library."""
    code = """
import json, sys
for name in ("prometheus_client", "chompjs", "PIL"):
    sys.modules[name] = None  # what an uninstalled library gives: ImportError on import
from scrapy.utils.reactor import install_reactor
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")  # as tests/conftest.py does
from scrapy.utils.misc import build_from_crawler
from tests.utils import project_crawler
from mediacrawler.extensions.metrics import MetricsExtension
from mediacrawler.parsers import xhs
from mediacrawler.pipelines.media import MediaStorePipeline
errors = {}
def attempt(what, call):
    try:
        call()
    except ImportError as e:
        errors[what] = e.name
attempt("metrics", lambda: build_from_crawler(MetricsExtension, project_crawler(METRICS_PORT=0)))  # builds it
attempt("xhs", lambda: xhs.initial_state('<script>window.__INITIAL_STATE__={"a":1}</script>'))
attempt("media", lambda: MediaStorePipeline.from_crawler(project_crawler(FILES_STORE=sys.argv[1])).open_spider())
print(json.dumps(errors))
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "files")], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"metrics": "prometheus_client", "xhs": "chompjs",
                                                                "media": "PIL"}
