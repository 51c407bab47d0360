"""The download handler (mediacrawler/handlers.py): the connection pool keeps HTTP_POOL_PER_HOST idle
connections per host (reached through mediacrawler/compat.py, whose test fails when Scrapy moves it). The second
test counts the connections a real server on 127.0.0.1 sees for two waves of 16 parallel requests to one host."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from scrapy.utils.test import get_crawler

from mediacrawler.compat import connection_pool
from mediacrawler.handlers import PooledHTTPDownloadHandler
from tests.utils import project_settings_dict

ROOT = Path(__file__).resolve().parent.parent


def test_pool_size_follows_the_setting() -> None:
    handler = PooledHTTPDownloadHandler(get_crawler(settings_dict=project_settings_dict()))
    assert connection_pool(handler).maxPersistentPerHost == 32
    handler = PooledHTTPDownloadHandler(get_crawler(settings_dict=project_settings_dict(
        HTTP_POOL_PER_HOST=2, CONCURRENT_REQUESTS_PER_DOMAIN=8)))
    assert connection_pool(handler).maxPersistentPerHost == 8  # never below Scrapy's own figure


class _Counting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    connections = 0
    lock = threading.Lock()
    #: Each wave's answers wait until all 16 of its requests arrived, so a wave's requests overlap however loaded
    #: the machine is (a slow client would otherwise reuse a connection of its own wave and count fewer).
    waves: dict[str, threading.Barrier] = {}

    def setup(self) -> None:
        super().setup()
        with _Counting.lock:
            _Counting.connections += 1

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        try:
            _Counting.waves[self.path.split("/")[1]].wait()
        except threading.BrokenBarrierError:
            pass  # a wave that never reached 16 at once: its count then shows it
        body = b"x" * 1000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


CRAWL = """
import json, sys
import scrapy
from scrapy.crawler import CrawlerProcess

base, pool = sys.argv[1], int(sys.argv[2])
slot = {"download_slot": "cdn"}

class Waves(scrapy.Spider):
    name = "waves"
    done = 0

    async def start(self):
        for n in range(16):
            yield scrapy.Request(f"{base}/a/{n}", meta=slot, dont_filter=True)

    def parse(self, response):
        self.done += 1
        if self.done == 16:  # the first wave is over: its connections are idle in the pool
            for n in range(16):
                yield scrapy.Request(f"{base}/b/{n}", meta=slot, dont_filter=True)

process = CrawlerProcess({
    "DOWNLOAD_HANDLERS": {"http": "mediacrawler.handlers.PooledHTTPDownloadHandler"},
    "HTTP_POOL_PER_HOST": pool, "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "CONCURRENT_REQUESTS": 32,
    "DOWNLOAD_SLOTS": {"cdn": {"concurrency": 16, "delay": 0}}, "LOG_LEVEL": "ERROR",
    "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False,
})
crawler = process.create_crawler(Waves)
process.crawl(crawler)
process.start()
print(json.dumps({"responses": crawler.stats.get_value("response_received_count")}))
"""


def _connections(base: str, pool: int) -> int:
    _Counting.connections = 0
    _Counting.waves = {wave: threading.Barrier(16, timeout=20) for wave in ("a", "b")}
    done = subprocess.run([sys.executable, "-c", CRAWL, base, str(pool)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"responses": 32}
    return _Counting.connections


def test_a_second_wave_reuses_the_first_waves_connections(server: str) -> None:
    pooled = _connections(server, pool=16)
    scrapy_default = _connections(server, pool=0)  # Scrapy's own figure: CONCURRENT_REQUESTS_PER_DOMAIN (2)
    assert pooled <= 18, pooled  # 16 connections, reused by the second wave
    assert scrapy_default >= 28, scrapy_default  # 2 kept, 14 reopened
