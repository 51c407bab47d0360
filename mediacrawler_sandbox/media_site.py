"""``/media/…``: real image and video bytes with HTTP semantics of a CDN, and the media fault knobs.

Reference: docs/sandbox.md, "media_site.py".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from twisted.web import http, server

from . import media, video
from .det import stable_hex
from .httpbase import BodyProducer, SandboxResource, cut_connection, finish_with, query_arg

__all__ = ["MediaResource", "parse_range"]

_LARGE_SIZES = {"large", "original", "woriginal", "mw2000", "mw1024", "mw690"}
_LAST_MODIFIED_BASE = 1_793_491_200  # 2026-11-01 00:00:00 UTC; each ETag generation moves it by an hour
_MAX_BLOB = 64 * 1024**3
_SMALL_BODY = 256 * 1024  # bodies up to this go out in one write; larger ones through the producer
#: Weibo quality name → the sandbox video rendition of that height.
_WEIBO_QUALITY_RENDITION = {"720": "720p", "hd": "480p", "sd": "360p"}
_M3U8 = "application/vnd.apple.mpegurl"
_MPD = "application/dash+xml"


def _million_m3u8() -> bytes:
    # 10^6 one-second segments in 16 MB: under MEDIA_MANIFEST_MAX_CHARS (16 MiB), so the segment-count cap (not
    # the size cap) is what has to refuse it.
    return b"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n" + b"#EXTINF:1,\ns.ts\n" * 1_000_000 + \
        b"#EXT-X-ENDLIST\n"


def _hostile_m3u8(bad_uri: str) -> bytes:
    # Two harmless http segments first: a client that fetched before validating would show them in the log.
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-TARGETDURATION:1", "#EXT-X-PLAYLIST-TYPE:VOD",
             "#EXTINF:1.0,", "seg0.ts", "#EXTINF:1.0,", "seg1.ts", "#EXTINF:1.0,", bad_uri, "#EXT-X-ENDLIST"]
    return ("\n".join(lines) + "\n").encode()


def _mpd(addressing: str, *, base: str = "") -> bytes:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-live:2011" '
        'type="static" mediaPresentationDuration="PT4S" minBufferTime="PT1S">\n'
        f'{base}  <Period id="0"><AdaptationSet contentType="video" mimeType="video/mp4">\n'
        '    <Representation id="v" codecs="avc1.42C01E" width="640" height="360" bandwidth="100000">\n'
        f"{addressing}"
        "    </Representation></AdaptationSet></Period>\n</MPD>\n"
    ).encode()


_TEMPLATE = ('      <SegmentTemplate timescale="1000" initialization="init.mp4" media="t$Time$.m4s">\n'
             '        <SegmentTimeline><S t="0" d="1000" r="{r}"/></SegmentTimeline>\n'
             "      </SegmentTemplate>\n")

#: ``/media/hostile/{case}``: (body factory, content type). Bodies are built on first use and cached.
HOSTILE = {
    "huge_timeline.mpd": (lambda: _mpd(_TEMPLATE.format(r=1_000_000_000)), _MPD),
    "million.m3u8": (_million_m3u8, _M3U8),
    "file_uri.m3u8": (lambda: _hostile_m3u8("file:///etc/passwd"), _M3U8),
    "data_uri.m3u8": (lambda: _hostile_m3u8("data:video/mp2t;base64,R0VUIC8="), _M3U8),
    "gopher.m3u8": (lambda: _hostile_m3u8("gopher://127.0.0.1:70/1seg2.ts"), _M3U8),
    "gopher.mpd": (lambda: _mpd(_TEMPLATE.format(r=3), base="  <BaseURL>gopher://127.0.0.1:70/</BaseURL>\n"),
                   _MPD),
}
_hostile_cache: dict[str, bytes] = {}


@dataclass
class Entity:
    """One media representation: its bytes (in memory, or a blob spec) and validators."""

    size: int
    content_type: str
    etag: str
    last_modified: str
    data: bytes | None = None
    blob: tuple[str, int] | None = None  # (name, generation)
    truncated: bool = False

    def pieces(self, start: int, length: int) -> Iterator[bytes]:
        """The bytes of ``[start, start + length)`` in pieces of at most one blob chunk."""
        if self.blob is not None:
            yield from media.blob_iter(self.blob[0], start, length, self.blob[1])
            return
        assert self.data is not None
        for pos in range(start, start + length, media.BLOB_CHUNK):
            yield self.data[pos : min(start + length, pos + media.BLOB_CHUNK)]


RangeResult = tuple[int, int] | Literal["unsatisfiable"] | None


def parse_range(header: str | None, size: int) -> RangeResult:
    """Parse a single ``bytes=`` range against ``size``: ``(start, end inclusive)``, ``"unsatisfiable"``, or
    ``None`` when the header is absent or not something we honour (multiple ranges, bad syntax → full body)."""
    if not header:
        return None
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not match or match.group(1) == match.group(2) == "":
        return None
    first, last = match.groups()
    if first == "":
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - suffix), size - 1
    start = int(first)
    if last and int(last) < start:
        return None  # syntactically invalid: ignored per RFC 9110
    if start >= size:
        return "unsatisfiable"
    return start, min(int(last), size - 1) if last else size - 1


class MediaResource(SandboxResource):
    """Serves ``/media/…`` (see the module docstring)."""

    area = "media"

    def handle(self, request: server.Request) -> bytes | int:
        if request.method not in (b"GET", b"HEAD"):
            request.setResponseCode(405)
            request.setHeader(b"allow", b"GET, HEAD")
            return b""
        path = request.path.decode("latin-1")
        parts = [p.decode("utf-8", "replace") for p in request.postpath]
        if parts and parts[0] == "weibo" and request.getHeader(b"referer") is None:
            # sinaimg answers hot-linking without a Referer with 403.
            request.setResponseCode(403)
            request.setHeader(b"content-type", b"text/html")
            return b"<html><body><h1>403 Forbidden</h1></body></html>"
        uses = self.state.faults.knobs["weibo_video_url_uses"]
        if uses and parts[:2] == ["weibo", "video"] and not self.state.signed.admit(
                path, query_arg(request, b"ssig"), limit=uses, count=request.method == b"GET"):
            # An expired, used-up or missing signature, as the video CDN answers it.
            request.setResponseCode(403)
            request.setHeader(b"content-type", b"text/html")
            return b"<html><body><h1>403 Forbidden</h1><p>expired</p></body></html>"
        status = self.state.faults.media_error(path)
        if status is not None:
            self.state.count("faults")
            request.setResponseCode(status)
            if status == 429:
                request.setHeader(b"retry-after", b"1")
            request.setHeader(b"content-type", b"text/html")
            return f"<html><body><h1>{status}</h1></body></html>".encode()
        entity = self._entity(parts, request)
        if entity is None:
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/html")
            return b"<html><body><h1>404 Not Found</h1></body></html>"
        return self._send(request, path, entity)

    # -- resolving a URL to bytes -----------------------------------------------------------------------

    def _entity(self, parts: list[str], request: server.Request) -> Entity | None:
        generation = self.state.faults.etag_generation
        if len(parts) == 2 and parts[0] == "blob":
            raw = (request.args.get(b"size") or [b"1048576"])[0]
            try:
                size = int(raw)
            except ValueError:
                return None
            if not 0 <= size <= _MAX_BLOB:
                return None
            return self._validators(
                size, "application/octet-stream", stable_hex("blob", parts[1], size), generation,
                blob=(parts[1], generation),
            )
        if len(parts) == 2 and parts[0] == "big":
            match = re.fullmatch(r"([A-Za-z0-9_-]{1,64})\.png", parts[1])
            raw = (request.args.get(b"side") or [b"512"])[0]
            if match is None or not raw.isdigit() or not 1 <= int(raw) <= media.MAX_BIG_SIDE:
                return None
            return self._in_memory(media.big_image(match.group(1), int(raw)), "png", generation)
        if len(parts) == 2 and parts[0] == "img":
            match = re.fullmatch(r"(\d+)\.jpg", parts[1])
            return None if match is None else self._in_memory(media.generic_image(int(match.group(1))), "jpg",
                                                              generation)
        if len(parts) == 3 and parts[0] == "weibo" and parts[1] == "live":
            # A Live Photo's motion clip: a short MP4 of its own per pid (real Weibo serves a .mov).
            match = re.fullmatch(r"(\w{1,60})\.mp4", parts[2])
            found = None if match is None else video.video_file(["progressive", f"live{match.group(1)}", "360p.mp4"])
            return None if found is None else self._in_memory(found[0], "mp4", generation)
        if len(parts) == 3 and parts[0] == "weibo" and parts[1] == "video":
            match = re.fullmatch(r"(\d+)_(720|hd|sd)\.mp4", parts[2])
            if match is None:
                return None
            found = video.video_file(["progressive", match.group(1),
                                      f"{_WEIBO_QUALITY_RENDITION[match.group(2)]}.mp4"])
            return None if found is None else self._in_memory(found[0], "mp4", generation)
        if len(parts) == 2 and parts[0] == "hostile" and parts[1] in HOSTILE:
            factory, content_type = HOSTILE[parts[1]]
            body = _hostile_cache.get(parts[1])
            if body is None:
                body = _hostile_cache[parts[1]] = factory()
            return self._validators(len(body), content_type, stable_hex("hostile", parts[1]), generation,
                                    data=body)
        if len(parts) == 3 and parts[0] == "weibo":
            match = re.fullmatch(r"(\w+)\.(jpg|png|webp)", parts[2])
            if match is None:
                return None
            return self._weibo_image(parts[1], match.group(1), match.group(2), generation)
        return None

    def _weibo_image(self, size: str, pid: str, ext: str, generation: int) -> Entity:
        pic = self.state.world.weibo.pics.get(pid)
        if pic is not None and pic.bad == "html":
            return self._in_memory(media.html_error_page(), "jpg", generation)
        if pic is not None and pic.bad == "bomb":
            return self._in_memory(media.image_bomb_png(), "png", generation)
        if pic is not None:
            content, width, height = pic.content_pid, pic.width, pic.height
        else:  # avatars, covers, link thumbnails: any pid serves a stable image of its own
            content = pid
            width, height = 200 + int(stable_hex("w", pid, length=4), 16) % 201, 200 + int(
                stable_hex("h", pid, length=4), 16) % 201
        if size not in _LARGE_SIZES:
            width, height = media.thumbnail_size(width, height)
        entity = self._in_memory(media.image_bytes(f"weibo:{content}", ext, width, height), ext, generation)
        entity.truncated = pic is not None and pic.bad == "truncated"
        return entity

    def _in_memory(self, data: bytes, ext: str, generation: int) -> Entity:
        digest = hashlib.sha256(data).hexdigest()[:24]
        return self._validators(len(data), media.CONTENT_TYPES[ext], digest, generation, data=data)

    @staticmethod
    def _validators(size: int, content_type: str, tag: str, generation: int, *, data: bytes | None = None,
                    blob: tuple[str, int] | None = None) -> Entity:
        return Entity(
            size=size,
            content_type=content_type,
            etag=f'"{tag}-g{generation}"',
            last_modified=http.datetimeToString(_LAST_MODIFIED_BASE + 3600 * generation).decode(),
            data=data,
            blob=blob,
        )

    # -- conditional / ranged answer --------------------------------------------------------------------

    def _send(self, request: server.Request, path: str, entity: Entity) -> bytes | int:
        request.setHeader(b"content-type", entity.content_type.encode())
        request.setHeader(b"etag", entity.etag.encode())
        request.setHeader(b"last-modified", entity.last_modified.encode())
        request.setHeader(b"accept-ranges", b"bytes")
        request.setHeader(b"cache-control", b"max-age=2592000")
        if_none_match = request.getHeader(b"if-none-match")
        if if_none_match is not None and entity.etag.encode() in [t.strip() for t in if_none_match.split(b",")]:
            request.setResponseCode(304)
            return b""
        wanted = None
        if not self.state.faults.ignore_range:
            wanted = parse_range((request.getHeader(b"range") or b"").decode("latin-1"), entity.size)
            if_range = request.getHeader(b"if-range")
            if wanted is not None and if_range is not None:
                validator = if_range.decode("latin-1").strip()
                # A strong ETag must match exactly; a date must equal Last-Modified; otherwise the file changed.
                if validator not in (entity.etag, entity.last_modified):
                    wanted = None
        if wanted == "unsatisfiable":
            request.setResponseCode(416)
            request.setHeader(b"content-range", f"bytes */{entity.size}".encode())
            request.setHeader(b"content-length", b"0")
            return b""
        start, length = 0, entity.size
        if wanted is not None:
            first, last = wanted
            start, length = first, last - first + 1
            request.setResponseCode(206)
            request.setHeader(b"content-range", f"bytes {first}-{last}/{entity.size}".encode())
        request.setHeader(b"content-length", str(length).encode())
        if request.method == b"HEAD":
            finish_with(request, b"")
            return server.NOT_DONE_YET
        cut_after: int | None = None
        stall = False
        if entity.truncated:
            cut_after = length // 2
        else:
            fraction = self.state.faults.media_cut(path)
            if fraction is None:
                fraction = self.state.faults.media_stall(path)
                stall = fraction is not None
            if fraction is not None:
                cut_after = int(length * fraction)
        if entity.data is not None and length <= _SMALL_BODY:
            body = entity.data[start : start + length]
            if cut_after is None:
                finish_with(request, body)
            else:
                request.write(body[:cut_after])
                if not stall:
                    cut_connection(request)
            return server.NOT_DONE_YET
        BodyProducer(request, entity.pieces(start, length), cut_after, stall=stall).start()
        return server.NOT_DONE_YET
