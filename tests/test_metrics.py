"""Metrics and the progress line: a real ``scrapy crawl weibo`` subprocess against the sandbox, its Prometheus
endpoint polled over HTTP while it runs, its final METRICS_TEXTFILE compared with the stats Scrapy dumps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from mediacrawler.extensions.metrics import MetricsExtension, stats_to_metrics

ROOT = Path(__file__).resolve().parents[1]
UID = 7365120894
JOB = f"weibo-uid-{UID}"
DEADLINE = 60.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    """``{(sample name, labels): value}`` of a Prometheus text exposition."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"platform": "weibo", "job": JOB, **labels}.items())))


def dumped_stats(log: str) -> dict[str, float]:
    """The numeric stats of the ``Dumping Scrapy stats`` block of a crawl log."""
    assert "Dumping Scrapy stats:" in log, log[-2000:]
    block = log.split("Dumping Scrapy stats:", 1)[1]
    return {m[1]: float(m[2]) for m in re.finditer(r"^[{ ]'([^']+)': (-?\d+(?:\.\d+)?)[,}]?$", block, re.M)}


def test_endpoint_during_crawl_and_final_textfile_equals_stats(tmp_path: Path, fresh_sandbox: Any) -> None:
    # Slow API answers make the crawl last a few seconds; one 418 (a rate-limit wait) and one 503 (a plain
    # retry) give the reasons something to count.
    fresh_sandbox.set_faults(weibo_latency_ms=500, weibo_api=[
        {"kind": "418", "page": 2, "times": 1}, {"kind": "5xx", "page": 3, "times": 1, "status": 503}])
    log_path, textfile = tmp_path / "crawl.log", tmp_path / "final.prom"
    cmd = [
        sys.executable, "-m", "scrapy", "crawl", "weibo", "-a", f"uid={UID}",
        "-s", f"WEIBO_BASE_URL={fresh_sandbox.weibo_url}", "-s", "DOWNLOAD_DELAY=0", "-s", "AUTOTHROTTLE_ENABLED=0",
        "-s", f"FILES_STORE={tmp_path / 'files'}", "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}",
        "-s", f"OUTPUT_DIR={tmp_path / 'output'}", "-s", "PLATFORM_BACKOFF_BASE=0.05",
        "-s", "PLATFORM_BACKOFF_MAX=0.2", "-s", "LOGSTATS_INTERVAL=1", "-s", "METRICS_PORT=0",
        "-s", f"METRICS_TEXTFILE={textfile}", "-s", f"LOG_FILE={log_path}", "-s", "LOG_LEVEL=INFO",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "WEIBO_COOKIE", "METRICS_PORT")}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        def log() -> str:
            return log_path.read_text("utf-8", "replace") if log_path.exists() else ""

        # METRICS_PORT=0: the port is the one the log line names.
        deadline = time.monotonic() + DEADLINE
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"Metrics endpoint at (http://127\.0\.0\.1:\d+/metrics)", log())
            url = m[1] if m else None
            time.sleep(0.05)
        assert url, f"no endpoint line; crawl exit {proc.poll()}:\n{log()[-3000:]}"

        # While the crawl runs: non-zero pages and posts, labelled with the platform and the job.
        live: Samples = {}
        while time.monotonic() < deadline and proc.poll() is None:
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.status == 200
                live = parse_metrics(response.read().decode())
            if (value(live, "mediacrawler_pages_total", status="parsed") or 0) > 0 and (
                    value(live, "mediacrawler_posts_total", status="scraped") or 0) > 0:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the crawl ended before its metrics showed pages and posts"
        assert value(live, "mediacrawler_up") == 1.0
        assert (value(live, "mediacrawler_pages_total", status="parsed") or 0) >= 1
        assert (value(live, "mediacrawler_posts_total", status="scraped") or 0) >= 1

        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 0, log()[-3000:]
    with pytest.raises(urllib.error.URLError):  # stopped with the crawl
        urllib.request.urlopen(url, timeout=2)

    # At the end: the textfile holds exactly the figures of the run's stats.
    stats = dumped_stats(log())
    final = parse_metrics(textfile.read_text("utf-8"))
    assert value(final, "mediacrawler_up") == 0.0
    assert value(final, "mediacrawler_pages_total", status="parsed") == stats["weibo/pages"] == 6
    assert value(final, "mediacrawler_pages_total", status="failed") == stats.get("weibo/pages_failed", 0) == 0
    assert value(final, "mediacrawler_posts_total", status="scraped") == stats["item_scraped_count"] == 50
    for status in ("downloaded", "uptodate", "deduplicated", "failed"):
        assert value(final, "mediacrawler_media_files_total", status=status) == stats.get(f"media/{status}", 0)
    assert stats["media/downloaded"] > 0
    assert value(final, "mediacrawler_media_bytes_total", status="stored") == stats["media/stored_bytes"] > 0
    assert value(final, "mediacrawler_retries_total", reason="http_418") == stats["retry/reason_count/http_418"] == 1
    assert value(final, "mediacrawler_retries_total", reason="503 Service Unavailable") == stats[
        "retry/reason_count/503 Service Unavailable"] == 1
    assert value(final, "mediacrawler_rate_limit_waits_total", reason="http_418") == stats[
        "weibo/rate_limited/http_418"] == 1
    assert value(final, "mediacrawler_dedupe_hits_total", kind="seen") == stats.get("dedupe/dropped", 0)
    assert value(final, "mediacrawler_checkpoint_watermark") == stats["checkpoint/watermark"] == 6
    assert value(final, "mediacrawler_checkpoint_lag_pages") == 0

    # The progress line, once a second, in place of Scrapy's own (one line per interval, not two).
    text = log()
    lines = re.findall(r"\[mediacrawler\.extensions\.progress\] INFO: (Crawled .*)", text)
    assert len(lines) >= 2, text[-3000:]
    pattern = (r"Crawled \d+ pages \(at \d+ pages/min\), scraped \d+ posts \(at \d+ posts/min\), \d+ media files "
               r"\(at \d+ files/min\), \d+\.\d MiB stored \(at \d+\.\d MiB/min\), \d+ media failed")
    assert all(re.fullmatch(pattern, line) for line in lines), lines
    assert any(not line.startswith("Crawled 0 pages") for line in lines), lines
    assert "[scrapy.extensions.logstats]" not in text


def test_off_without_metrics_port_and_refuses_a_bad_one() -> None:
    with pytest.raises(NotConfigured, match="METRICS_PORT is not set"):
        MetricsExtension(get_crawler(settings_dict={"METRICS_PORT": None}))
    with pytest.raises(ValueError, match="METRICS_PORT='http': expected an integer"):
        MetricsExtension(get_crawler(settings_dict={"METRICS_PORT": "http"}))


def test_reasons_become_labels_and_lag_counts_pages_past_the_watermark() -> None:
    stats = {"bilibili/pages": 7, "media/failed/http-404": 2, "media/failed/too-large": 1, "media/failed": 3,
             "retry/reason_count/invalid_json": 4, "bilibili/rate_limited/-412": 5, "checkpoint/watermark": 12,
             "finish_reason": "finished", "item_scraped_count": 50, "comments/scraped": 40,
             "item_dropped_count": 3, "comments/dropped": 1}
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for f in stats_to_metrics(stats, platform="bilibili", job="bilibili-mid-2", checkpoint_base=9)
               for s in f.samples}

    def get(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset({"platform": "bilibili", "job": "bilibili-mid-2", **labels}.items())))

    assert get("mediacrawler_media_failures_total", reason="http-404") == 2
    assert get("mediacrawler_media_failures_total", reason="too-large") == 1
    assert get("mediacrawler_media_files_total", status="failed") == 3
    assert get("mediacrawler_retries_total", reason="invalid_json") == 4
    assert get("mediacrawler_rate_limit_waits_total", reason="-412") == 5
    # Comments (-a comments) are counted apart from posts.
    assert get("mediacrawler_posts_total", status="scraped") == 10
    assert get("mediacrawler_posts_total", status="dropped") == 2
    assert get("mediacrawler_comments_total", status="scraped") == 40
    # Resumed after page 9, 7 pages parsed, watermark at 12: 3 pages passed, 4 still ahead of the watermark.
    assert get("mediacrawler_checkpoint_lag_pages") == 4
    assert all("finished" not in s.labels.values() for f in stats_to_metrics(
        stats, platform="bilibili", job="bilibili-mid-2") for s in f.samples)
