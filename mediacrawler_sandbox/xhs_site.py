"""``/xhs/…``: XiaoHongShu's server-rendered pages over HTTP, rendered from :mod:`mediacrawler_sandbox.xhs`.

Reference: docs/sandbox.md, "xhs_site.py".
"""

from __future__ import annotations

import re
from typing import Any

from twisted.web import server

from . import xhs
from .httpbase import SandboxResource, origin_of, query_arg

__all__ = ["XhsResource"]

_ID = re.compile(r"^[0-9a-f]{24}$")


class XhsResource(SandboxResource):
    """Serves the XHS mount (see the module docstring)."""

    area = "xhs"

    def __init__(self, state: Any, reactor: Any) -> None:
        super().__init__(state, reactor)
        self.world = xhs.build_xhs_world(seed=state.world.seed)

    def handle(self, request: server.Request) -> bytes | int:
        parts = [p.decode("utf-8", "replace") for p in request.postpath]
        base = origin_of(request)
        if request.method not in (b"GET", b"HEAD"):
            return self._page(request, 405, b"<html><body>405</body></html>")
        if len(parts) == 2 and parts[0] == "explore" or len(parts) == 3 and parts[:2] == ["discovery", "item"]:
            note_id = parts[-1]
            if not _ID.match(note_id):
                return self._page(request, 404, b"<html><body>404</body></html>")
            fault = self._fault(request, "note", note_id)
            if fault is not None:
                return fault
            return self._page(request, 200, xhs.note_page(self.world, note_id, base=base,
                                                          xsec_token=query_arg(request, b"xsec_token")))
        if len(parts) == 3 and parts[:2] == ["xhslink", "a"]:  # xhslink.com/a/<code> (XHS_SHORT_URL=…/xhslink)
            target = xhs.short_link_target(self.world, parts[2])
            if target is None:
                return self._page(request, 404, b"<html><body>404</body></html>")
            request.setHeader(b"location", target.encode())
            return self._page(request, 307, b"")
        if len(parts) == 3 and parts[:2] == ["user", "profile"] and _ID.match(parts[2]):
            fault = self._fault(request, "profile", None)
            if fault is not None:
                return fault
            return self._page(request, 200, xhs.profile_page(self.world, parts[2], base=base))
        return self._page(request, 404, b"<html><body>404</body></html>")

    @staticmethod
    def _page(request: server.Request, status: int, body: bytes) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return body

    def _fault(self, request: server.Request, endpoint: str, note_id: str | None) -> bytes | None:
        fault = self.state.faults.xhs_fault(endpoint, note_id)
        if fault is None:
            return None
        self.state.count("faults")
        if fault.kind == "461":
            request.setResponseCode(461)
            request.setHeader(b"content-type", b"application/json; charset=utf-8")
            request.setHeader(b"verifytype", b"102")
            request.setHeader(b"verifyuuid", b"sandbox-" + (note_id or "profile").encode())
            return xhs.rate_limited_json()
        if fault.kind == "300012_json":
            request.setHeader(b"content-type", b"application/json; charset=utf-8")
            return xhs.rate_limited_json()
        if fault.kind == "300012":
            return self._page(request, 200, xhs.rate_limited_page(note_id))
        return self._page(request, fault.status, b"<html><body>502 Bad Gateway</body></html>")
