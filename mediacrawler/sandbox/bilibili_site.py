"""``/bilibili/…``: api.bilibili.com over HTTP, rendered from :mod:`mediacrawler.sandbox.bilibili`.

Routes (``BILIBILI_API_URL`` = ``{sandbox}/bilibili``)::

    GET /bilibili/x/player/wbi/playurl?bvid=BV…&cid=N&fnval=16[&qn=64]   streams (DASH; durl without fnval&16)
    GET /bilibili/x/player/playurl?…                                    the same (the unsigned legacy route)
    GET /bilibili/x/web-interface/view?bvid=BV…                         video detail
    GET /bilibili/x/web-interface/nav                                   logged-out nav (WBI key images)

WBI parameters (``w_rid``, ``wts``) are accepted and not checked. Bodies are compact JSON with
``Content-Type: application/json; charset=utf-8``; the ``bilibili_api`` fault knob (:mod:`.faults`) replaces them
with Bilibili's risk-control answers (``-352``, ``-412``, HTTP 412, …). Media URLs in the payloads point at
``/media/bili/…`` on the origin the client used (:mod:`.video_site`).
"""

from __future__ import annotations

import json
from typing import Any

from twisted.web import server

from . import bilibili
from .httpbase import SandboxResource, origin_of, query_arg, query_int

__all__ = ["BilibiliResource"]


class BilibiliResource(SandboxResource):
    """Serves the Bilibili API mount (see the module docstring)."""

    area = "bilibili"

    def handle(self, request: server.Request) -> bytes | int:
        path = "/".join(p.decode("utf-8", "replace") for p in request.postpath)
        bvid = query_arg(request, b"bvid")
        if path in ("x/player/wbi/playurl", "x/player/playurl"):
            fault = self._fault(request, "playurl", bvid)
            if fault is not None:
                return fault
            payload = bilibili.playurl_response(
                bvid, query_int(request, b"cid"), fnval=query_int(request, b"fnval", 1) or 0,
                qn=query_int(request, b"qn"), base=origin_of(request),
            )
            return self._json(request, payload)
        if path == "x/web-interface/view":
            fault = self._fault(request, "view", bvid)
            if fault is not None:
                return fault
            return self._json(request, bilibili.view_response(bvid, base=origin_of(request)))
        if path == "x/web-interface/nav":
            fault = self._fault(request, "nav", None)
            if fault is not None:
                return fault
            return self._json(request, bilibili.nav_response())
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return b"<html><body>404 Not Found</body></html>"

    @staticmethod
    def _json(request: server.Request, payload: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def _fault(self, request: server.Request, endpoint: str, bvid: str | None) -> bytes | None:
        fault = self.state.faults.bilibili_fault(endpoint, bvid)
        if fault is None:
            return None
        self.state.count("faults")
        if fault.kind == "-352":
            return self._json(request, bilibili.RISK_CONTROL)
        if fault.kind == "-412":
            return self._json(request, bilibili.BLOCKED)
        if fault.kind == "-404":
            return self._json(request, bilibili.NOT_FOUND)
        request.setResponseCode(fault.status)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return f"<html><head><title>{fault.status}</title></head><body></body></html>".encode()
