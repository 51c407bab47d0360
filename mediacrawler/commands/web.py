"""``mediacrawler web [--host 127.0.0.1] [--port 8080] [-s NAME=VALUE …]``: browse what was collected, watch and
start crawls, in a browser (docs/web.md). Configured by the settings of a crawl (RECORDS_DB, FILES_STORE,
CHECKPOINT_DIR, REDIS_URL…); the ``-s`` pairs are also given to every crawl it starts.

It listens on 127.0.0.1 unless told otherwise; any other address needs ``WEB_AUTH=user:password`` in the
environment (basic auth on every request) and says so. Exit status 2 on a usage error or a setting that does not
fit its declaration.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from mediacrawler.commands.options import add_settings_option, checked_settings
from mediacrawler.config import setting
from mediacrawler.pipelines.records import records_problem
from mediacrawler.records.store import is_postgres


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def auth_problem(host: str, auth: str | None) -> str | None:
    """Why the app may not listen on ``host`` with this ``WEB_AUTH``; None when it may."""
    if auth is not None and (":" not in auth or not auth.partition(":")[0] or not auth.partition(":")[2]):
        return "WEB_AUTH must be user:password (both non-empty)"
    if not is_loopback(host) and not auth:
        return (f"--host {host} makes the page reachable from other machines: set WEB_AUTH=user:password in the "
                f"environment (basic auth), or listen on 127.0.0.1")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mediacrawler web", description=__doc__.splitlines()[0])
    parser.add_argument("--host", help="address to listen on (default: WEB_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: WEB_PORT, 8080; 0: a free one)")
    add_settings_option(parser)
    parsed = checked_settings(parser, argv, redis=True)
    if isinstance(parsed, int):
        return parsed
    opts, settings = parsed
    host = opts.host or str(setting(settings, "WEB_HOST"))
    port = opts.port if opts.port is not None else int(setting(settings, "WEB_PORT"))
    auth = os.environ.get("WEB_AUTH") or None
    problem = auth_problem(host, auth)
    if problem:
        print(f"mediacrawler web: error: {problem}", file=sys.stderr)
        return 2
    import uvicorn

    from mediacrawler.web.app import build_app

    try:
        app = build_app(settings, overrides=list(opts.set), auth=auth)
    except Exception as e:  # noqa: BLE001 - a records database that cannot be opened is one line
        print(f"mediacrawler web: error: {e}", file=sys.stderr)
        return 2
    # The socket is bound here so that --port 0 can say which port it got (and a port in use is one line).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listening before the address is printed: a client that reads it connects even while uvicorn starts.
        sock.listen(2048)
    except OSError as e:
        print(f"mediacrawler web: error: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    if auth:
        print(f"mediacrawler web: basic auth on (WEB_AUTH, user {auth.partition(':')[0]!r})", file=sys.stderr)
    if not is_loopback(host):
        print(f"mediacrawler web: listening on {host}: reachable from other machines (basic auth required)",
              file=sys.stderr)
    web = app.state.web
    if is_postgres(web.uri) or Path(web.uri.removeprefix("sqlite://")).exists():
        problem = records_problem(settings)  # unreachable, refused, a newer schema: one line, not a 500 later
        if problem:
            print(f"mediacrawler web: error: {problem}", file=sys.stderr)
            sock.close()
            return 2
    else:
        # Said once, where it looked: an empty page from the wrong directory is otherwise a puzzle.
        print(f"mediacrawler web: no records database at {Path(web.uri).resolve()} yet (RECORDS_DB, else "
              f"CHECKPOINT_DIR/records.sqlite3): the pages stay empty until a crawl writes it; run from the crawl's "
              f"directory or give -s CHECKPOINT_DIR=…", file=sys.stderr)
    shown_host = f"[{host}]" if ":" in host else host
    print(f"mediacrawler web: http://{shown_host}:{port}/ (records: {web.uri_shown})", file=sys.stderr,
          flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[sock])
    return 0
