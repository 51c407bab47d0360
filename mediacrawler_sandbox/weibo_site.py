"""``/weibo/…``: m.weibo.cn's API over HTTP, rendered by :mod:`mediacrawler_sandbox.weibo_api` from the world
of :mod:`mediacrawler_sandbox.weibo`.

Reference: docs/sandbox.md, "weibo_site.py".
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from twisted.web import server

from . import comments
from . import weibo_api as weibo
from .httpbase import SandboxResource, origin_of, query_arg, query_int

__all__ = ["WeiboResource"]

RATE_LIMITED: dict[str, Any] = {"ok": 0, "errno": "100005", "msg": "请求过于频繁，歇歇吧"}
_VIDEO_URL = re.compile(r"(?:https?://[^/]+)?(/media/weibo/video/[0-9]+_(?:720|hd|sd)\.mp4)")


class WeiboResource(SandboxResource):
    """Serves the Weibo API mount (see the module docstring)."""

    area = "weibo"

    def handle(self, request: server.Request) -> bytes | int:
        parts = [p.decode("utf-8", "replace") for p in request.postpath]
        world = self.state.world.weibo
        base = origin_of(request)
        if parts == ["comments", "hotflow"]:
            # A post's comments (id and mid are the post's mid), then each comment's replies (hotFlowChild).
            return self._json(request, comments.weibo_hotflow(
                self.state.world.comments, query_arg(request, b"mid") or query_arg(request, b"id") or "",
                max_id=query_arg(request, b"max_id"), base=base))
        if parts == ["comments", "hotFlowChild"]:
            cid = query_arg(request, b"cid") or ""
            thread_of = self.state.world.comments.post_of("weibo", cid)
            return self._json(request, comments.weibo_child(self.state.world.comments, thread_of or "", cid,
                                                            max_id=query_arg(request, b"max_id"), base=base))
        if parts == ["api", "container", "getIndex"]:
            containerid = query_arg(request, b"containerid") or ""
            kind = weibo.parse_containerid(containerid)
            page = query_int(request, b"page")
            since_id = query_arg(request, b"since_id")
            uid: int | None = None
            if kind is not None and kind[0] == "timeline":
                uid = int(kind[1])
                if since_id:
                    index = world.index_after_since_id(uid, since_id)
                    page = None if index is None else index // world.per_page + 1
                # since_id requests count as the page they return (None when the cursor is unknown).
                fault = self._fault(request, "timeline", page if since_id else (page or 1), uid)
                if fault is not None:
                    return fault
                payload = weibo.timeline_response(world, containerid, uid, page=page, since_id=since_id, base=base)
            elif kind is not None:
                fault = self._fault(request, "search", page or 1, None)
                if fault is not None:
                    return fault
                payload = weibo.search_response(world, containerid, kind[1], page=page, base=base)
            else:
                payload = weibo.END_OF_LIST
            return self._json(request, payload)
        if parts == ["statuses", "show"]:
            fault = self._fault(request, "show", None, None)
            if fault is not None:
                return fault
            return self._json(request, weibo.show_response(world, query_arg(request, b"id") or "", base))
        if parts == ["statuses", "extend"]:
            fault = self._fault(request, "extend", None, None)
            if fault is not None:
                return fault
            return self._json(request, weibo.extend_response(world, query_arg(request, b"id") or ""))
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return b"<html><body>404 Not Found</body></html>"

    def _json(self, request: server.Request, payload: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        if self.state.faults.knobs["weibo_video_url_uses"] > 0:
            payload = self._signed(payload, {})
        return weibo.dumps_php(payload)

    def _signed(self, value: Any, tokens: dict[str, int]) -> Any:
        # One fresh token per video path per answer (the same file under several fields shares it).
        if isinstance(value, dict):
            return {k: self._signed(v, tokens) for k, v in value.items()}
        if isinstance(value, list):
            return [self._signed(v, tokens) for v in value]
        if isinstance(value, str) and (match := _VIDEO_URL.fullmatch(value)):
            path = match.group(1)
            if path not in tokens:
                tokens[path] = self.state.signed.issue(path)
            return f"{value}?ssig={tokens[path]}"
        return value

    def _fault(self, request: server.Request, endpoint: str, page: int | None, uid: int | None) -> bytes | None:
        fault = self.state.faults.weibo_fault(endpoint, page, uid)
        if fault is None:
            return None
        self.state.count("faults")
        if fault.kind == "errno":
            return self._json(request, RATE_LIMITED)
        if fault.kind == "login":
            back = origin_of(request) + request.uri.decode("latin-1")
            return self._json(request, {
                "ok": -100,
                "url": "https://passport.weibo.cn/signin/welcome?entry=mweibo&r=" + quote(back, safe=""),
            })
        request.setResponseCode(fault.status)
        if fault.kind == "429":
            request.setHeader(b"retry-after", b"1")
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return f"<html><head><title>{fault.status}</title></head><body></body></html>".encode()
