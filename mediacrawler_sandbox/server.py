"""The sandbox HTTP server: one Twisted ``Site`` with each platform mounted under its own prefix.

Reference: docs/sandbox.md, "server.py".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.web import server
from twisted.web.resource import Resource

from .bilibili_site import BilibiliResource
from .control import ControlResource
from .douyin_site import DouyinResource
from .facebook_site import FacebookResource
from .hostile_site import HostileResource
from .httpbase import SandboxRequest
from .state import SandboxState
from .video_site import VideoMediaResource
from .weibo_site import WeiboResource
from .world import build_world
from .xhs_site import XhsResource

logger = logging.getLogger("mediacrawler_sandbox")

__all__ = ["SandboxSite", "build_site", "main", "parse_args"]


#: ``(mount, what it stands for, the settings that point a spider at it)``, as the index page lists them.
MOUNTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("/weibo", "m.weibo.cn API", ("WEIBO_BASE_URL={url}/weibo",)),
    ("/bilibili", "api.bilibili.com", ("BILIBILI_API_URL={url}/bilibili",)),
    ("/facebook/v19.0", "graph.facebook.com/v19.0", ("FACEBOOK_GRAPH_URL={url}/facebook/v19.0",)),
    ("/xhs", "www.xiaohongshu.com pages", ("XHS_WEB_URL={url}/xhs",)),
    ("/douyin", "Douyin share pages, detail API, short links (/douyin/v)",
     ("DOUYIN_SHARE_URL={url}/douyin", "DOUYIN_WEB_URL={url}/douyin", "DOUYIN_SHORT_URL={url}/douyin/v")),
    ("/media", "images, progressive/HLS/DASH video, blobs (the payloads link to them)", ()),
    ("/hostile", "gzip bombs, redirect loops and chains (hardening tests)", ()),
    ("/_sandbox", "control: GET requests, GET/POST faults, POST reset, GET info", ()),
)


class _Index(Resource):
    """``GET /``: what is mounted where, the settings that point each spider here, and ids that exist, so a person
    who started the sandbox by hand can crawl it (docs/sandbox.md says the same at length)."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__()
        self.info = info

    def getChild(self, path: bytes, request: server.Request) -> Resource:  # noqa: N802 (Twisted's name)
        return self if path == b"" else super().getChild(path, request)

    def render_GET(self, request: server.Request) -> bytes:
        from .bilibili import BVIDS, CREATORS
        from .douyin import ALBUM_AWEME, SHORT_LINKS, VIDEO_AWEMES
        from .facebook import DEFAULT_TOKEN, PAGE_ID
        from .xhs import USER_ID

        host = (request.getHeader("host") or "127.0.0.1").split("/")[0]
        url = f"{'https' if request.isSecure() else 'http'}://{host}"
        users = ",".join(str(u) for u in self.info.get("weibo_users", ()))
        lines = ["mediacrawler sandbox: a local double of the platforms (docs/sandbox.md)", "", "mounts:"]
        for mount, what, settings in MOUNTS:
            lines.append(f"  {mount:<17} {what}")
            if settings:
                lines.append(f"  {'':<17} " + " ".join(f"-s {one.format(url=url)}" for one in settings))
        lines += ["", "ids that exist:",
                  f"  weibo     -a uid=<one of {users}>   -a keyword=猫",
                  f"  bilibili  -a mid=<one of {','.join(map(str, CREATORS))}>   -a bvid={','.join(BVIDS)}",
                  f"  facebook  -a page={PAGE_ID}   (token: FACEBOOK_ACCESS_TOKEN={DEFAULT_TOKEN})",
                  f"  xhs       -a user={USER_ID}",
                  f"  douyin    -a aweme={VIDEO_AWEMES[0]},{ALBUM_AWEME}   short links: "
                  f"{', '.join(f'{url}/douyin/v/{code}/' for code in SHORT_LINKS)}",
                  "", "or simply: mediacrawler demo (starts its own sandbox and crawls every platform)"]
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return ("\n".join(lines) + "\n").encode("utf-8")


class SandboxSite(server.Site):
    """A ``Site`` whose requests log themselves into ``state``."""

    requestFactory = SandboxRequest

    def __init__(self, resource: Resource, state: SandboxState, reactor: IReactorTime) -> None:
        super().__init__(resource, reactor=reactor)
        self.state = state
        self.noisy = False  # no "Starting factory" lines per connection


def build_site(state: SandboxState, reactor: IReactorTime, info: dict[str, Any] | None = None) -> SandboxSite:
    """Mount every platform and the control endpoints on one site."""
    root = _Index(info or {})
    root.putChild(b"weibo", WeiboResource(state, reactor))
    root.putChild(b"bilibili", BilibiliResource(state, reactor))
    root.putChild(b"facebook", FacebookResource(state, reactor))  # FACEBOOK_GRAPH_URL = …/facebook/v19.0
    root.putChild(b"xhs", XhsResource(state, reactor))  # XHS_WEB_URL = …/xhs
    root.putChild(b"douyin", DouyinResource(state, reactor))  # DOUYIN_SHARE_URL = DOUYIN_WEB_URL = …/douyin
    root.putChild(b"media", VideoMediaResource(state, reactor))  # MediaResource + the video mounts
    root.putChild(b"hostile", HostileResource(state, reactor))  # hardening tests: bombs, redirect loops
    root.putChild(b"_sandbox", ControlResource(state, info or {}))
    return SandboxSite(root, state, reactor)


def _uids(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numeric uids, got {value!r}") from exc


def _faults(value: str) -> dict[str, Any]:
    try:
        knobs = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--faults must be a JSON object: {exc}") from exc
    if not isinstance(knobs, dict):
        raise argparse.ArgumentTypeError("--faults must be a JSON object")
    return knobs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of ``python -m mediacrawler_sandbox``."""
    parser = argparse.ArgumentParser(
        prog="python -m mediacrawler_sandbox",
        description="Local test double of the remote platforms. Prints its base URL as the first stdout line.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--weibo-users", type=_uids, default=(7365120894, 1669879400), metavar="UID,UID")
    parser.add_argument("--weibo-pages", type=int, default=5)
    parser.add_argument("--weibo-per-page", type=int, default=10)
    parser.add_argument("--bad-media", action="store_true", help="add posts with broken pictures")
    parser.add_argument("--latency-ms", type=int, default=0, help="delay before every response")
    parser.add_argument("--faults", type=_faults, default={}, metavar="JSON",
                        help="initial fault knobs (restored by POST /_sandbox/reset)")
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="exit when this process is gone (set by start_sandbox, so no orphans)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--tls-pem", default=None, metavar="FILE",
                        help="serve HTTPS with this PEM file (private key and certificate), e.g. self-signed")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the world, listen, print the URL, serve until SIGTERM/SIGINT; return the exit status."""
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from twisted.internet import reactor  # only here: importing the package must not install a reactor
    from twisted.internet.task import LoopingCall
    from twisted.logger import STDLibLogObserver, globalLogBeginner

    # Twisted's own events (unhandled errors in Deferreds, …) into stderr logging; stdout stays for the URL.
    globalLogBeginner.beginLoggingTo([STDLibLogObserver()], redirectStandardIO=False)
    logging.getLogger("twisted").setLevel(max(logging.WARNING, logging.getLogger().level))

    world = build_world(seed=args.seed, weibo_users=args.weibo_users, weibo_pages=args.weibo_pages,
                        weibo_per_page=args.weibo_per_page, bad_media=args.bad_media)
    initial = dict(args.faults)
    if args.latency_ms:
        initial.setdefault("latency_ms", args.latency_ms)
    state = SandboxState(world, initial_faults=initial)
    info = {"seed": args.seed, "weibo_users": list(args.weibo_users), "weibo_pages": args.weibo_pages,
            "weibo_per_page": args.weibo_per_page, "bad_media": args.bad_media, "faults": initial}
    site = build_site(state, reactor, info)
    if args.tls_pem:
        from twisted.internet import ssl

        with open(args.tls_pem, encoding="ascii") as pem:
            options = ssl.PrivateCertificate.loadPEM(pem.read()).options()
        port = reactor.listenSSL(args.port, site, options, interface=args.host)  # type: ignore[attr-defined]
    else:
        port = reactor.listenTCP(args.port, site, interface=args.host)  # type: ignore[attr-defined]
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"{'https' if args.tls_pem else 'http'}://{host}:{port.getHost().port}"
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    logger.info("sandbox serving on %s (seed %s, weibo users %s, %s pages of %s)", url, args.seed,
                args.weibo_users, args.weibo_pages, args.weibo_per_page)

    if args.parent_pid:
        def watch_parent() -> None:
            try:
                os.kill(args.parent_pid, 0)
            except ProcessLookupError:
                logger.warning("parent %s is gone, stopping", args.parent_pid)
                reactor.stop()  # type: ignore[attr-defined]
            except PermissionError:
                pass  # exists, just not ours to signal
        LoopingCall(watch_parent).start(1.0, now=False)

    # Twisted installs SIGINT/SIGTERM handlers that stop the reactor: run() then returns and we exit 0.
    reactor.run()  # type: ignore[attr-defined]
    logger.info("sandbox stopped")
    return 0
