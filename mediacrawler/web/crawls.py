"""Crawls started from the web page (docs/web.md, "Start"): arguments validated with the spider's own model (an
error per field), then ``python -m scrapy crawl <spider> -a …`` as a subprocess (an argument list, never a
shell) whose log is kept, or, with ``REDIS_URL``, a job queued for the workers.

Each crawl started here also gets ``METRICS_PORT=0`` and ``METRICS_TEXTFILE``: while it runs its progress is read
from its own metrics endpoint (the address its log names), and once it ended from the final figures it wrote.
What is known of each crawl is ``<dir>/<id>.json`` beside its ``<id>.log`` and ``<id>.prom``, so a restarted web
app still lists them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from scrapy import Spider

from mediacrawler.fsutil import write_atomic
from mediacrawler.jobstate import job_state
from mediacrawler.scrub import mask_url
from mediacrawler.spiders._args import WORKER_KWARG

CRAWL_ID_RE = re.compile(r"[0-9a-f]{32}")
#: Bytes of a crawl's log shown by its page (the end of it).
LOG_TAIL_BYTES = 64 * 1024
#: Crawls started from the page that may run at once (the machine is the crawler's too).
MAX_RUNNING = 4
_ENDPOINT_RE = re.compile(rb"Metrics endpoint at (http://127\.0\.0\.1:\d{1,5}/metrics)")
#: Setting names whose values are never shown (the values of -s pairs passed to crawls).
_SECRET_NAMES = re.compile(r"TOKEN|COOKIE|PASSWORD|SECRET|AUTH|KEY|CREDENTIAL", re.IGNORECASE)
_URL_SETTINGS = ("REDIS_URL", "RECORDS_DB")


def field_errors(spidercls: type[Spider], kwargs: dict[str, str]) -> dict[str, str]:
    """The spider's argument model's complaints: field name → message; ``""`` for one about the whole set (e.g.
    "give exactly one of …"). Empty: valid."""
    model = getattr(spidercls, "params_model", None)
    if model is None:
        return {}
    try:
        model(**kwargs)
    except ValidationError as e:
        errors: dict[str, str] = {}
        for err in e.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()))
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            errors[loc] = f"{errors[loc]}; {msg}" if loc in errors else msg
        return errors
    return {}


def shown_setting(pair: str) -> str:
    """A ``NAME=value`` pair as a page may show it: credentials masked."""
    name, _, value = pair.partition("=")
    if name.strip().upper() in _URL_SETTINGS:
        return f"{name}={mask_url(value)}"
    if _SECRET_NAMES.search(name):
        return f"{name}=***"
    return pair


def parse_metrics(text: str) -> dict[str, Any]:
    """Figures of a metrics exposition (the endpoint's or the textfile's) as the jobs page shows them."""
    totals: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            label = sample.labels.get("status") or sample.labels.get("reason") or sample.labels.get("kind") or ""
            bucket = totals.setdefault(family.name.removeprefix("mediacrawler_"), {})
            bucket[label] = bucket.get(label, 0.0) + sample.value
    get = lambda family, label="": int(totals.get(family, {}).get(label, 0))  # noqa: E731
    return {
        "pages": get("pages", "parsed"), "pages_failed": get("pages", "failed"),
        "posts": get("posts", "scraped"), "posts_dropped": get("posts", "dropped"),
        "media": sum(get("media_files", s) for s in ("downloaded", "uptodate", "deduplicated")),
        "media_failed": get("media_files", "failed"), "bytes": get("media_bytes", "stored"),
        "up": get("up"),
    }


class CrawlRunner:
    """Starts crawls as subprocesses and answers what each is doing. ``settings`` are the ``-s`` pairs the web
    app was given: each crawl gets them too, so it writes where the app reads."""

    def __init__(self, directory: str | os.PathLike[str], *, settings: Sequence[str] = (),
                 python: str | None = None, cwd: str | None = None) -> None:
        self.directory = Path(directory)
        self.settings = list(settings)
        self.python = python or sys.executable
        self.cwd = cwd
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def _paths(self, crawl_id: str) -> tuple[Path, Path, Path]:
        if not CRAWL_ID_RE.fullmatch(crawl_id):
            raise KeyError(crawl_id)
        base = self.directory / crawl_id
        return base.with_suffix(".json"), base.with_suffix(".log"), base.with_suffix(".prom")

    def command(self, spider: str, kwargs: dict[str, str], crawl_id: str) -> list[str]:
        _, _, prom = self._paths(crawl_id)
        argv = [self.python, "-m", "scrapy", "crawl", spider]
        for name, value in kwargs.items():
            argv += ["-a", f"{name}={value}"]
        for pair in self.settings:
            argv += ["-s", pair]
        return argv + ["-s", "METRICS_PORT=0", "-s", "METRICS_HOST=127.0.0.1", "-s", f"METRICS_TEXTFILE={prom}"]

    def start(self, spidercls: type[Spider], kwargs: dict[str, str]) -> str:
        """Start a crawl of already validated ``kwargs``; its id. RuntimeError when MAX_RUNNING are running."""
        with self._lock:
            running = sum(1 for p in self._procs.values() if p.poll() is None)
            if running >= MAX_RUNNING:
                raise RuntimeError(f"{running} crawls started here are running; wait for one to end")
            crawl_id = uuid.uuid4().hex
            meta_path, log_path, _ = self._paths(crawl_id)
            self.directory.mkdir(parents=True, exist_ok=True)
            # The crawl finds the project's settings as this process did (command_settings); the page's password
            # stays here.
            env = {k: v for k, v in os.environ.items() if k != "WEB_AUTH"}
            with log_path.open("wb") as log:
                proc = subprocess.Popen(self.command(spidercls.name, kwargs, crawl_id), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.cwd,
                                        shell=False)
            self._procs[crawl_id] = proc
            meta = {"id": crawl_id, "spider": spidercls.name, "args": kwargs, "job": job_key(spidercls, kwargs),
                    "settings": [shown_setting(p) for p in self.settings], "pid": proc.pid,
                    "started_at": _now(), "mode": "subprocess"}
            write_atomic(meta_path, json.dumps(meta, ensure_ascii=False).encode())
            return crawl_id

    def _ended(self, crawl_id: str, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` with its exit status once the process ended (written back once)."""
        proc = self._procs.get(crawl_id)
        if "exit_status" in meta or proc is None:
            return meta
        code = proc.poll()
        if code is None:
            return meta
        meta = {**meta, "exit_status": code, "ended_at": _now()}
        write_atomic(self._paths(crawl_id)[0], json.dumps(meta, ensure_ascii=False).encode())
        return meta

    def get(self, crawl_id: str, *, log: bool = False) -> dict[str, Any] | None:
        """What is known of one crawl: its arguments, state (running, finished, failed, lost), figures; with
        ``log`` the end of its log."""
        try:
            meta_path, log_path, prom = self._paths(crawl_id)
            meta = json.loads(meta_path.read_text("utf-8"))
        except (KeyError, OSError, ValueError):
            return None
        with self._lock:
            meta = self._ended(crawl_id, meta)
        if "exit_status" in meta:
            meta["state"] = "finished" if meta["exit_status"] == 0 else "failed"
        else:
            meta["state"] = "running" if crawl_id in self._procs else "lost"  # started by another app process
        meta["progress"] = _with_rates(self._figures(meta, log_path, prom), meta)
        if log:
            meta["log"] = _tail(log_path)
        return meta

    def _figures(self, meta: dict[str, Any], log_path: Path, prom: Path) -> dict[str, Any] | None:
        if meta["state"] == "running":
            found = _ENDPOINT_RE.findall(_head(log_path))
            if found:
                try:
                    with urllib.request.urlopen(found[-1].decode(), timeout=1.0) as response:
                        return {**parse_metrics(response.read(1 << 20).decode("utf-8", "replace")),
                                "source": "endpoint"}
                except (OSError, ValueError):
                    pass
            return None
        try:
            text = prom.read_text("utf-8")
        except OSError:
            return None
        return {**parse_metrics(text), "source": "textfile"}

    def list(self) -> list[dict[str, Any]]:
        """Every crawl started here, newest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.glob("*.json"):
            crawl = self.get(path.stem)
            if crawl is not None:
                found.append(crawl)
        return sorted(found, key=lambda c: str(c.get("started_at")), reverse=True)

    def stop_all(self) -> None:
        """Terminate the crawls still running (the app is shutting down); each gets its graceful stop."""
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()


def job_key(spidercls: type[Spider], kwargs: dict[str, str]) -> str:
    """The job a crawl of ``kwargs`` is (its checkpoint, mark and retry key), as ``enqueue`` names it."""
    try:
        state = job_state(spidercls(**{k: v for k, v in kwargs.items() if k != WORKER_KWARG}))
    except Exception:  # noqa: BLE001 - the key is a label here; the crawl says itself what is wrong
        return str(spidercls.name)
    return (state.job if state is not None else None) or str(spidercls.name)


def _with_rates(figures: dict[str, Any] | None, meta: dict[str, Any]) -> dict[str, Any] | None:
    """``figures`` with the crawl's rates since it started (posts and MiB per minute, as the progress line)."""
    if figures is None:
        return None
    try:
        start = datetime.fromisoformat(str(meta["started_at"]).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(meta["ended_at"]).replace("Z", "+00:00")) if "ended_at" in meta else None
    except (KeyError, ValueError):
        return figures
    minutes = max(1 / 60, ((end or datetime.now(UTC)) - start).total_seconds() / 60)
    return {**figures, "minutes": round(minutes, 4), "posts_per_minute": round(figures["posts"] / minutes, 1),
            "mib_per_minute": round(figures["bytes"] / 2**20 / minutes, 2)}


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(LOG_TAIL_BYTES)
    except OSError:
        return b""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
