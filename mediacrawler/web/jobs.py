"""The jobs page's figures (docs/web.md, "Jobs"): per job its checkpoint, high-water mark and media pending
retry, read by the same functions as ``mediacrawler status``; the crawls this app started for it (the last one's
figures: live while it runs); and, with ``REDIS_URL``, the shared queue's figures."""

from __future__ import annotations

from typing import Any

from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from mediacrawler.checkpoints.store import store_from_settings
from mediacrawler.scrub import scrub
from mediacrawler.status import checkpoint_status, distributed_status, document_status
from mediacrawler.web.crawls import CrawlRunner


def jobs(settings: BaseSettings, runner: CrawlRunner) -> dict[str, Any]:
    """``{"jobs": [...], "distributed": ..., "errors": [...]}``: one entry per job key any store or crawl names."""
    errors: list[str] = []
    by_job: dict[str, dict[str, Any]] = {}

    def entry(key: str) -> dict[str, Any]:
        return by_job.setdefault(key, {"job": key, "spider": None, "checkpoint": None, "mark": None,
                                       "retries": None, "crawls": []})

    try:
        for cp in checkpoint_status(store_from_settings(settings)):
            e = entry(cp["job"])
            e["checkpoint"] = cp
            e["spider"] = e["spider"] or cp.get("spider")
    except (NotConfigured, OSError) as exc:
        errors.append(f"checkpoints: {exc}")
    try:
        documents = document_status(settings)
    except (NotConfigured, OSError) as exc:
        errors.append(f"marks and retries: {exc}")
        documents = {"marks": [], "retries": []}
    for name, kind in (("marks", "mark"), ("retries", "retries")):
        for doc in documents[name]:
            e = entry(str(doc["job"]))
            e[kind] = doc
            e["spider"] = e["spider"] or doc.get("spider")
    for crawl in runner.list():
        e = entry(str(crawl.get("job") or crawl["spider"]))
        e["crawls"].append(crawl)
        e["spider"] = e["spider"] or crawl["spider"]
    for e in by_job.values():
        e["last_crawl"] = e["crawls"][0] if e["crawls"] else None
        e["running"] = any(c["state"] == "running" for c in e["crawls"])
    try:
        distributed = distributed_status(settings)
    except Exception as exc:  # noqa: BLE001 - Redis down is a line on the page, not a failed page
        distributed = {"available": False, "reason": scrub(f"{type(exc).__name__}: {exc}")[:300]}
    ordered = sorted(by_job.values(), key=lambda e: (not e["running"], e["job"]))
    return {"jobs": ordered, "distributed": distributed, "errors": errors}
