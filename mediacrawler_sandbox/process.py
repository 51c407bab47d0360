"""Start a sandbox subprocess and talk to its control endpoints (stdlib only: usable from tests, demo, benchmarks).

Reference: docs/sandbox.md, "process.py".
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from typing import IO, Any

__all__ = ["SandboxError", "SandboxProcess", "start_sandbox"]


class SandboxError(RuntimeError):
    """The sandbox failed to start, or a control call failed."""


class SandboxProcess:
    """A running sandbox: its URLs, a tiny control client, and its lifecycle.

    ``url`` is the base (``http://127.0.0.1:PORT``), ``weibo_url`` = ``url + "/weibo"`` (use as
    ``WEIBO_BASE_URL``). Control calls go to ``url + "/_sandbox/…"`` with a bounded timeout.
    """

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: IO[bytes], args: list[str]) -> None:
        self.proc = proc
        self.url = url
        self.weibo_url = url + "/weibo"
        self.media_url = url + "/media"
        self.args = args
        self._log = log

    # -- control client ---------------------------------------------------------------------------------

    def _call(self, method: str, name: str, payload: Any = None, timeout: float = 10.0) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(f"{self.url}/_sandbox/{name}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise SandboxError(f"{method} /_sandbox/{name}: HTTP {exc.code}: {exc.read().decode()}") from exc

    def requests(self) -> list[dict[str, Any]]:
        """The request log since the last reset (see :class:`mediacrawler_sandbox.state.RequestLog`)."""
        return list(self._call("GET", "requests"))

    def comments(self, platform: str, post_id: str, **change: int) -> dict[str, Any]:
        """``POST /_sandbox/comments``: ``size=N`` (a long thread), ``add=N`` (new comments; their ids come back),
        ``close_from_page=N`` (Bilibili answers 12002 from that page on)."""
        return dict(self._call("POST", "comments", {"platform": platform, "post_id": post_id, **change}))

    def reset(self) -> None:
        """Clear the log and counters; restore the start-up faults."""
        self._call("POST", "reset", {})

    def set_faults(self, **knobs: Any) -> dict[str, Any]:
        """Merge fault knobs (keyword form); returns all current knobs."""
        return dict(self._call("POST", "faults", knobs))

    def faults(self, knobs: dict[str, Any] | None = None) -> dict[str, Any]:
        """With a dict: merge it (like :meth:`set_faults`); without: return the current knobs."""
        if knobs is None:
            return dict(self._call("GET", "faults"))
        return dict(self._call("POST", "faults", knobs))

    def stats(self) -> dict[str, Any]:
        """Totals since the last reset (``requests``, ``media_bytes_sent``, ``by_status``, …) and lifetime ones."""
        return dict(self._call("GET", "stats"))

    def info(self) -> dict[str, Any]:
        """Seed and world arguments this sandbox runs with."""
        return dict(self._call("GET", "info"))

    # -- lifecycle --------------------------------------------------------------------------------------

    def stderr_tail(self, limit: int = 4000) -> str:
        """The end of the sandbox's log (stderr), for failure messages."""
        try:
            self._log.flush()
            self._log.seek(0)
            return self._log.read().decode("utf-8", "replace")[-limit:]
        except (OSError, ValueError):
            return ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        try:
            self._log.close()
        except OSError:
            pass
        return self.proc.returncode

    def __enter__(self) -> SandboxProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SandboxProcess {self.url} pid={self.proc.pid}>"


def _cli(
    *,
    host: str,
    port: int,
    seed: int | None,
    weibo_users: Sequence[int | str] | None,
    weibo_pages: int | None,
    weibo_per_page: int | None,
    bad_media: bool,
    latency_ms: int | None,
    faults: dict[str, Any] | None,
) -> list[str]:
    args = ["--host", host, "--port", str(port)]
    if seed is not None:
        args += ["--seed", str(seed)]
    if weibo_users is not None:
        args += ["--weibo-users", ",".join(str(u) for u in weibo_users)]
    if weibo_pages is not None:
        args += ["--weibo-pages", str(weibo_pages)]
    if weibo_per_page is not None:
        args += ["--weibo-per-page", str(weibo_per_page)]
    if bad_media:
        args.append("--bad-media")
    if latency_ms:
        args += ["--latency-ms", str(latency_ms)]
    if faults:
        args += ["--faults", json.dumps(faults)]
    return args


def start_sandbox(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    seed: int | None = None,
    weibo_users: Sequence[int | str] | None = None,
    weibo_pages: int | None = None,
    weibo_per_page: int | None = None,
    bad_media: bool = False,
    latency_ms: int | None = None,
    faults: dict[str, Any] | None = None,
    extra_args: Sequence[str] = (),
    python: str | None = None,
    startup_timeout: float = 30.0,
    env: dict[str, str] | None = None,
) -> SandboxProcess:
    """Start ``python -u -m mediacrawler_sandbox`` with these options and wait (bounded) for its URL line.

    Options left ``None`` use the CLI defaults (seed 1, users 7365120894,1669879400, 5 pages of 10). The
    subprocess's stderr goes to a temporary file (never a pipe nobody drains); it exits by itself if this process
    dies. Raises :class:`SandboxError` with the log tail if no URL arrives within ``startup_timeout`` seconds.
    """
    args = _cli(host=host, port=port, seed=seed, weibo_users=weibo_users, weibo_pages=weibo_pages,
                weibo_per_page=weibo_per_page, bad_media=bad_media, latency_ms=latency_ms, faults=faults)
    args += ["--parent-pid", str(os.getpid()), *extra_args]
    command = [python or sys.executable, "-u", "-m", "mediacrawler_sandbox", *args]
    log = tempfile.TemporaryFile(prefix="sandbox-", suffix=".log")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                            env=env if env is not None else os.environ.copy())
    assert proc.stdout is not None
    line = b""
    deadline = time.monotonic() + startup_timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(timeout=remaining):
                break
            chunk = os.read(proc.stdout.fileno(), 1)  # byte by byte: never read past the URL line
            if not chunk:
                break
            line += chunk
    url = line.decode("utf-8", "replace").strip()
    sandbox = SandboxProcess(proc, url, log, command)
    if not url.startswith(("http://", "https://")):
        tail = sandbox.stderr_tail()
        sandbox.stop(timeout=5)
        raise SandboxError(f"sandbox did not print its URL within {startup_timeout}s "
                           f"(got {line!r}, exit {proc.returncode}); log:\n{tail}")
    return sandbox
