"""``/media/{hls,dash,bili,progressive}/…``: the packaged videos of :mod:`.video` with the CDN semantics of
:class:`~.media_site.MediaResource` (Range/206/416, ETag, If-Range, HEAD, the ``media_*`` fault knobs, the request
log) plus the fragment knobs ``fragment_drop`` / ``fragment_corrupt`` (:mod:`.faults`).

:class:`VideoMediaResource` *is* the ``/media`` resource (a subclass: every other ``/media`` path is answered by
the base class unchanged), so video requests go through exactly the same code path and log as images and blobs.
URL patterns: see :mod:`mediacrawler_sandbox.video`. ``/media/bili/…`` needs a ``Referer`` (403 without, as
Bilibili's CDN answers hot-linking) and, with the ``bilibili_stream_url_uses`` knob, a ``trid`` token that a playurl
answer issued and that has GETs left (403 otherwise, as an expired stream URL). The first request for a video id encodes it (≈1.5 s, on the reactor
thread); later ones are served from memory.
"""

from __future__ import annotations

import hashlib

from twisted.web import server

from . import durl, video
from .det import rng_for
from .httpbase import query_arg
from .media_site import Entity, MediaResource

__all__ = ["VideoMediaResource"]


def _garbage(path: str, size: int) -> bytes:
    """Deterministic junk of ``size`` bytes standing in for a corrupted fragment."""
    return rng_for(0, "corrupt", path).randbytes(size)


class VideoMediaResource(MediaResource):
    """``/media`` with the video mounts added (see the module docstring)."""

    def handle(self, request: server.Request) -> bytes | int:
        parts = [p.decode("utf-8", "replace") for p in request.postpath]
        if request.method in (b"GET", b"HEAD") and video.is_video_path(parts):
            if parts[0] == "bili" and request.getHeader(b"referer") is None:
                request.setResponseCode(403)
                request.setHeader(b"content-type", b"text/html")
                return b"<html><head><title>403 Forbidden</title></head><body><h1>403 Forbidden</h1></body></html>"
            path = request.path.decode("latin-1")
            uses = self.state.faults.knobs["bilibili_stream_url_uses"]
            if uses and parts[0] == "bili" and not self.state.signed.admit(
                    path, query_arg(request, b"trid"), limit=uses, count=request.method == b"GET"):
                # An expired, used-up or missing token, as upos answers a stream URL past its deadline.
                request.setResponseCode(403)
                request.setHeader(b"content-type", b"text/html")
                return b"<html><head><title>403 Forbidden</title></head><body><h1>403 Forbidden</h1></body></html>"
            fault = self.state.faults.fragment_fault(path) if request.method == b"GET" else None
            if fault is not None:
                self.state.count("faults")
            if fault == "drop":
                request.setResponseCode(404)
                request.setHeader(b"content-type", b"text/html")
                return b"<html><body><h1>404 Not Found</h1></body></html>"
            request.sandbox_corrupt = fault == "corrupt"  # read back in _entity
        return super().handle(request)

    def _entity(self, parts: list[str], request: server.Request) -> Entity | None:
        if not video.is_video_path(parts):
            return super()._entity(parts, request)
        found = durl.durl_file(parts) if durl.is_segment_path(parts) else video.video_file(parts)
        if found is None:
            return None
        data, content_type = found
        generation = self.state.faults.etag_generation
        # Validators come from the real bytes even when a corrupt body is sent: the edge lies, headers don't.
        tag = hashlib.sha256(data).hexdigest()[:24]
        if getattr(request, "sandbox_corrupt", False):
            data = _garbage(request.path.decode("latin-1"), len(data))
        return self._validators(len(data), content_type, tag, generation, data=data)

