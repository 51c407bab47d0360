"""``/douyin/…``: www.iesdouyin.com share pages, www.douyin.com's detail API and v.douyin.com short links, rendered
from :mod:`mediacrawler_sandbox.douyin`.

Reference: docs/sandbox.md, "douyin_site.py".
"""

from __future__ import annotations

import hashlib
import json

from twisted.web import server

from . import douyin
from .httpbase import origin_of, query_arg
from .media_site import Entity, MediaResource

__all__ = ["DouyinResource"]

_NOT_FOUND = b"<html><head><title>404</title></head><body><h1>404 Not Found</h1></body></html>"


class DouyinResource(MediaResource):
    """Serves the Douyin mount (see the module docstring)."""

    area = "douyin"

    def handle(self, request: server.Request) -> bytes | int:
        parts = [p.decode("utf-8", "replace") for p in request.postpath]
        if parts and parts[0] == "media":
            return super().handle(request)  # MediaResource: faults, Range, ETag; bytes from _entity below
        if request.method not in (b"GET", b"HEAD"):
            request.setResponseCode(405)
            request.setHeader(b"allow", b"GET, HEAD")
            return b""
        base = origin_of(request)
        path = [p for p in parts if p]
        if len(path) == 3 and path[0] == "share" and path[1] in ("video", "note", "slides"):
            request.setHeader(b"content-type", b"text/html; charset=utf-8")
            return douyin.share_page(path[2], base).encode("utf-8")
        if path == ["aweme", "v1", "web", "aweme", "detail"]:
            request.setHeader(b"content-type", b"application/json; charset=utf-8")
            if request.getHeader(b"cookie") is None:
                return b""  # what the real API sends a request without a session
            payload = douyin.detail_response(query_arg(request, b"aweme_id"), base)
            return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if len(path) == 2 and path[0] == "v":
            target = douyin.short_link_target(path[1], base)
            if target is not None:
                request.setResponseCode(302)
                request.setHeader(b"location", target.encode("utf-8"))
                request.setHeader(b"content-type", b"text/html; charset=utf-8")
                return f'<a href="{target}">Found</a>.\n'.encode()
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return _NOT_FOUND

    def _entity(self, parts: list[str], request: server.Request) -> Entity | None:
        generation = self.state.faults.etag_generation
        data: bytes | None = None
        content_type = "video/mp4"
        if len(parts) == 4 and parts[:2] == ["media", "hevc"] and parts[3].endswith(".mp4"):
            data = douyin.hevc_file(parts[2], parts[3].removesuffix(".mp4"))
        elif len(parts) == 3 and parts[:2] == ["media", "music"] and parts[2].endswith(".mp3"):
            data, content_type = douyin.music_file(parts[2].removesuffix(".mp3")), "audio/mpeg"
        if data is None:
            return None
        return self._validators(len(data), content_type, hashlib.sha256(data).hexdigest()[:24], generation,
                                data=data)
