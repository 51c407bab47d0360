"""``/hostile/…``: answers a hostile or broken server gives, for the hardening tests (docs/operations.md).

Routes::

    GET /hostile/gzip/{mib}/{path…}        gzip bomb: ``Content-Encoding: gzip`` although the client asked for
                                           identity; inflates to ``mib`` MiB. A ``path`` ending in an image
                                           extension gets an image signature and zeros, anything else a valid
                                           JSON answer (``{"ok":1,…}``) padded with spaces (an API page).
    GET /hostile/gzipped/img/{n}.jpg       the valid image ``/media/img/{n}.jpg``, sent gzip-encoded unasked
                                           (``Content-Length`` is the gzip stream's length, as on the wire).
    GET /hostile/loop/{path…}              302 to exactly the URL asked for, for ever.
    GET /hostile/redirect/{n}/{path…}      302 ``n`` times through this route, then to ``/{path…}`` (the query
                                           is kept), e.g. ``/hostile/redirect/2/media/weibo/large/x.jpg``.
    GET /hostile/redirect/to?url=U         302 to ``U`` as given (another scheme, credentials, another host).
    GET /hostile/echo/{platform}/{path…}   an error envelope whose message echoes the request's credential
                                           (the ``Cookie`` header, or the ``Authorization: Bearer`` /
                                           ``access_token`` token) as is, lower-cased and URL-encoded, with a
                                           ``Set-Cookie``: ``weibo`` (``{"ok":0,"errno":"10014","msg":…}``),
                                           ``bilibili`` (``{"code":-400,"message":…}``), ``facebook`` (HTTP 200,
                                           a 400-character Graph ``error.message`` with the token across
                                           position 300).

Every bomb body is built once per size and kept (about 1 MiB of gzip per GiB inflated).
"""

from __future__ import annotations

import gzip
import json
import zlib
from functools import lru_cache
from urllib.parse import quote, quote_plus

from twisted.web import server

from . import media
from .httpbase import SandboxResource, query_arg

__all__ = ["HostileResource", "gzip_bomb"]

_IMAGE_HEADS = {
    "png": b"\x89PNG\r\n\x1a\n",
    "jpg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",
    "jpeg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",
    "gif": b"GIF89a",
    "webp": b"RIFF\x00\x00\x00\x00WEBPVP8 ",
}
_CONTENT_TYPES = {"png": b"image/png", "jpg": b"image/jpeg", "jpeg": b"image/jpeg", "gif": b"image/gif",
                  "webp": b"image/webp"}
_JSON_HEAD = b'{"ok":1,"data":{"cardlistInfo":{"page":null},"cards":[]}}'
_MAX_MIB = 4096


@lru_cache(maxsize=8)
def gzip_bomb(mib: int, head: bytes) -> bytes:
    """A gzip stream of ``head`` followed by filler up to ``mib`` MiB (zeros after an image head, spaces after
    JSON), compressed piece by piece so that building it holds one MiB of plain bytes at a time."""
    filler = b" " if head.startswith(b"{") else b"\x00"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: a gzip header and trailer
    out = [comp.compress(head)]
    piece = filler * (1024 * 1024)
    remaining = mib * 1024 * 1024 - len(head)
    while remaining > 0:
        out.append(comp.compress(piece[:remaining]))
        remaining -= len(piece)
    out.append(comp.flush())
    return b"".join(out)


class HostileResource(SandboxResource):
    """Serves the hostile mount (see the module docstring)."""

    area = "hostile"

    def handle(self, request: server.Request) -> bytes | int:
        parts = [p.decode("utf-8", "replace") for p in request.postpath]
        query = request.uri.partition(b"?")[2]
        if len(parts) >= 2 and parts[0] == "gzip" and parts[1].isdigit():
            return self._bomb(request, min(int(parts[1]), _MAX_MIB), parts[-1] if len(parts) > 2 else "")
        if len(parts) == 3 and parts[:2] == ["gzipped", "img"] and parts[2].removesuffix(".jpg").isdigit():
            request.setHeader(b"content-type", b"image/jpeg")
            request.setHeader(b"content-encoding", b"gzip")
            return gzip.compress(media.generic_image(int(parts[2].removesuffix(".jpg"))), mtime=0)
        if parts and parts[0] == "loop":
            return self._redirect(request, request.uri)
        if len(parts) == 2 and parts[:2] == ["redirect", "to"]:
            target = query_arg(request, b"url") or "/"
            return self._redirect(request, target.encode("utf-8"))
        if len(parts) >= 2 and parts[0] == "echo" and parts[1] in ("weibo", "bilibili", "facebook"):
            return self._echo(request, parts[1])
        if len(parts) >= 3 and parts[0] == "redirect" and parts[1].isdigit():
            n, rest = int(parts[1]), "/".join(parts[2:])
            location = f"/hostile/redirect/{n - 1}/{rest}" if n > 0 else f"/{rest}"
            return self._redirect(request, location.encode("utf-8") + (b"?" + query if query else b""))
        request.setResponseCode(404)
        return b"no such hostile route\n"

    @staticmethod
    def _bomb(request: server.Request, mib: int, name: str) -> bytes:
        ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        head = _IMAGE_HEADS.get(ext, _JSON_HEAD)
        request.setHeader(b"content-type", _CONTENT_TYPES.get(ext, b"application/json; charset=utf-8"))
        request.setHeader(b"content-encoding", b"gzip")
        return gzip_bomb(mib, head)

    @staticmethod
    def _echo(request: server.Request, platform: str) -> bytes:
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        request.setHeader(b"set-cookie", b"sandbox_sid=echo-1; Path=/")  # makes the client's cookie jar work
        if platform == "facebook":
            bearer = (request.getHeader(b"authorization") or b"").decode("latin-1").removeprefix("Bearer ").strip()
            token = bearer or query_arg(request, b"access_token") or ""
            # The token starts 8 characters before position 300: a cut at 300 keeps its first 8 characters.
            head = "Invalid OAuth 2.0 access token " + "x" * (300 - 8 - 31)
            message = (head + token + " " + token.lower() + " ")
            message = (message + "y" * max(0, 400 - len(message)))[:max(400, len(head) + len(token))]
            body = {"error": {"message": message, "type": "OAuthException", "code": 100, "fbtrace_id": "echo"}}
            return json.dumps(body).encode("utf-8")
        cookie = (request.getHeader(b"cookie") or b"").decode("latin-1")
        lower_escapes = quote(cookie, safe="").lower()
        echoed = f"bad cookie [{cookie}] [{cookie.lower()}] [{quote(cookie, safe='')}] [{quote_plus(cookie)}] " \
                 f"[{lower_escapes}]"
        if platform == "weibo":
            return json.dumps({"ok": 0, "errno": "10014", "msg": echoed}).encode("utf-8")
        return json.dumps({"code": -400, "message": echoed, "ttl": 1}).encode("utf-8")

    @staticmethod
    def _redirect(request: server.Request, location: bytes) -> bytes:
        request.setResponseCode(302)
        request.setHeader(b"location", location)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"moved\n"
