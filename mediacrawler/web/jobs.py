"""The jobs page's figures (docs/web.md, "Jobs"): per job its checkpoint, high-water mark and media pending
retry, read by the same functions as ``mediacrawler status``; its last run and the progress of its runs still
going, from the records database's ``runs`` table (whoever started them: web/queries.py ``job_runs``); the crawls
this app started for it (their logs); and, with ``REDIS_URL``, the shared queue's figures."""

from __future__ import annotations

import socket
from typing import Any

from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from mediacrawler.checkpoints.store import store_from_settings
from mediacrawler.records.store import RUN_COUNTS
from mediacrawler.scrub import scrub
from mediacrawler.status import checkpoint_status, distributed_status, document_status
from mediacrawler.web.crawls import CrawlRunner


def live_progress(running: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The progress of a job's runs still going, added up (several workers may serve one job); None: none."""
    if len(running) <= 1:
        return running[0]["progress"] if running else None
    total: dict[str, Any] = {name: sum(r["progress"][name] for r in running) for name in RUN_COUNTS}
    for rate in ("pages_per_minute", "posts_per_minute", "mib_per_minute"):
        total[rate] = round(sum(r["progress"].get(rate, 0) for r in running), 2)
    return {**total, "source": "runs", "live": True, "runs": len(running)}


def jobs(settings: BaseSettings, runner: CrawlRunner, runs: dict[str, dict[str, Any]] | None = None,
         errors: list[str] | None = None) -> dict[str, Any]:
    """``{"jobs": [...], "distributed": ..., "errors": [...]}``: one entry per job key any store, run or crawl
    names; ``runs`` as :func:`mediacrawler.web.queries.job_runs` gives them."""
    errors = list(errors or [])
    by_job: dict[str, dict[str, Any]] = {}

    def entry(key: str) -> dict[str, Any]:
        return by_job.setdefault(key, {"job": key, "spider": None, "checkpoint": None, "mark": None,
                                       "retries": None, "crawls": [], "last_run": None, "live": None,
                                       "runs": 0})

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
    for job, found in (runs or {}).items():
        e = entry(job)
        e["last_run"], e["live"], e["runs"] = found["last"], live_progress(found["running"]), found["runs"]
        e["spider"] = e["spider"] or (found["last"] or {}).get("spider")
    # A run this app started keeps its log: its row names the crawl's process on this host.
    started_here: dict[int, str] = {}
    host = socket.gethostname()
    for crawl in runner.list():
        e = entry(str(crawl.get("job") or crawl["spider"]))
        e["crawls"].append(crawl)
        e["spider"] = e["spider"] or crawl["spider"]
        if isinstance(crawl.get("pid"), int):
            started_here[crawl["pid"]] = crawl["id"]
    for e in by_job.values():
        e["last_crawl"] = e["crawls"][0] if e["crawls"] else None
        run = e["last_run"]
        if run is not None:
            run["crawl"] = started_here.get(run["pid"]) if run["host"] == host else None
        e["running"] = (any(c["state"] == "running" for c in e["crawls"]) or e["live"] is not None
                        or (run is not None and run["state"] == "running"))
    try:
        distributed = distributed_status(settings)
    except Exception as exc:  # noqa: BLE001 - Redis down is a line on the page, not a failed page
        distributed = {"available": False, "reason": scrub(f"{type(exc).__name__}: {exc}")[:300]}
    ordered = sorted(by_job.values(), key=lambda e: (not e["running"], e["job"]))
    return {"jobs": ordered, "distributed": distributed, "errors": errors}
