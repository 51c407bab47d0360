"""``/hostile/…``: answers a hostile or broken server gives, for the hardening tests (docs/operations.md).

Reference: docs/sandbox.md, "hostile_site.py".
"""

from __future__ import annotations

import gzip
import json
import zlib
from functools import lru_cache
from urllib.parse import quote, quote_plus

from twisted.web import server

from . import media
from .httpbase import SandboxResource, query_arg, query_int

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
#: Nesting of the deep Douyin state (issue #21: deep enough for any recursive decoder to give up).
DEEP_LEVELS = 100_000
#: The cursor every page of the circular Facebook listing gives.
REPEATED_CURSOR = "QVFIUrepeated"


def _odd_mblog(n: int, *, created: str = "Sat Nov 28 10:00:00 +0800 2026", likes: str = "42",
               comments: str = "10") -> str:
    return (f'{{"card_type":9,"mblog":{{"id":"51043838487330{n:02d}","idstr":"51043838487330{n:02d}",'
            f'"bid":"Q1aB1cH{n:02d}","created_at":"{created}","text":"odd {n}",'
            f'"user":{{"id":7365120894,"screen_name":"odd"}},"reposts_count":3,"comments_count":{comments},'
            f'"attitudes_count":{likes}}}}}')


def odd_weibo_page(page: int) -> bytes:
    """Page 1: four posts, each with one value no reader can convert, written as raw JSON text (``Infinity`` is
    what Python's decoder accepts); later pages: the end of the list."""
    if page != 1:
        return '{"ok":0,"msg":"这里还没有内容","data":{"cards":[]}}'.encode()
    cards = [_odd_mblog(1, likes="9" * 400), _odd_mblog(2, comments="Infinity"), _odd_mblog(3, created="02-30"),
             _odd_mblog(4, created="5分钟前")]
    return ('{"ok":1,"data":{"cardlistInfo":{"page":2},"cards":[' + ",".join(cards) + "]}}").encode()


def deep_douyin_page() -> bytes:
    return (b"<!DOCTYPE html><html><body><script>window._ROUTER_DATA = " + b"[" * DEEP_LEVELS + b"]" * DEEP_LEVELS
            + b"</script></body></html>")


def circular_facebook_page(base: str, page_id: str, after: str | None) -> bytes:
    """One post a page; every page gives :data:`REPEATED_CURSOR` as its next cursor."""
    n = 2 if after else 1
    post = {"id": f"{page_id}_{n}", "message": f"post {n}", "created_time": f"2026-11-2{9 - n}T10:00:00+0000",
            "from": {"id": page_id, "name": "circular"}}
    next_url = f"{base}/{page_id}/posts?limit=1&after={REPEATED_CURSOR}"
    return json.dumps({"data": [post], "paging": {"cursors": {"before": "QVFIUb", "after": REPEATED_CURSOR},
                                                  "next": next_url}}).encode()


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
        if parts[:4] == ["odd", "weibo", "api", "container"]:
            request.setHeader(b"content-type", b"application/json; charset=utf-8")
            return odd_weibo_page(query_int(request, b"page", 1) or 1)
        if parts[:4] == ["deep", "douyin", "share", "video"]:
            request.setHeader(b"content-type", b"text/html; charset=utf-8")
            return deep_douyin_page()
        if len(parts) == 4 and parts[:2] == ["cursor", "facebook"] and parts[3] == "posts":
            request.setHeader(b"content-type", b"application/json; charset=utf-8")
            return circular_facebook_page("https://graph.facebook.com/v19.0", parts[2], query_arg(request, b"after"))
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
