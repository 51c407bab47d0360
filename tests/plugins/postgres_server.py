"""A real PostgreSQL server for the tests, in a throwaway data directory on 127.0.0.1.

The binaries come from ``/usr/lib/postgresql/<version>/bin`` (Debian's ``postgresql`` package, which ``make
test`` installs where it runs as root with apt) or from PATH. initdb refuses to run as root: as root the server
runs as the ``postgres`` user when it exists. Where none of this can be had, the tests that need it skip, with
the reason in pytest's summary (``-ra``).

Fixtures:

- ``postgres_server`` (session): the running :class:`PostgresServer` (or a skip).
- ``postgres_url`` (function): the URL of a fresh, empty database of that server, dropped after the test.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

USER = "mediacrawler"


def postgres_bin() -> Path | None:
    """The directory of initdb and pg_ctl: the newest Debian version, else PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """initdb + pg_ctl in a temporary directory; trust authentication, 127.0.0.1 only, no fsync."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.directory = Path(tempfile.mkdtemp(prefix="pg-test-"))
        self.data = self.directory / "data"
        self.port = _free_port()
        self.run_as: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no 'postgres' user to run initdb as") from None
            self.run_as = "postgres"
            shutil.chown(self.directory, user="postgres")

    def _run(self, *command: str) -> None:
        argv = [str(self.bindir / command[0]), *command[1:]]
        if self.run_as:
            argv = ["runuser", "-u", self.run_as, "--", *argv]
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{command[0]} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def start(self) -> PostgresServer:
        self._run("initdb", "-D", str(self.data), "-U", USER, "-A", "trust", "-E", "UTF8", "--no-locale",
                  "--no-sync")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.directory}"
                   " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "server.log"), "-o", options,
                  "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except RuntimeError:
            pass
        shutil.rmtree(self.directory, ignore_errors=True)

    def database(self) -> str:
        """A new empty database's URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def drop(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL not available: no initdb/pg_ctl (make test installs Debian's postgresql as root "
                    "with apt-get)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("PostgreSQL tests need psycopg (requirements.txt)")
    try:
        server = PostgresServer(bindir).start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"PostgreSQL could not be started: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    url = postgres_server.database()
    try:
        yield url
    finally:
        postgres_server.drop(url)
