"""``/bilibili/…``: api.bilibili.com over HTTP, rendered from :mod:`mediacrawler_sandbox.bilibili`.

Reference: docs/sandbox.md, "bilibili_site.py".
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from twisted.web import server

from . import bilibili, bilibili_extras, bilibili_lists, comments
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
            if path == "x/player/wbi/playurl" and not self._signed(request, "playurl"):
                return self._json(request, bilibili.WBI_REJECTED)
            payload = bilibili.playurl_response(
                bvid, query_int(request, b"cid"), fnval=query_int(request, b"fnval", 1) or 0,
                qn=query_int(request, b"qn"), base=origin_of(request),
                durl_segments=self.state.faults.knobs["bilibili_durl_segments"],
            )
            if self.state.faults.knobs["bilibili_stream_url_uses"] > 0:
                payload = self._with_tokens(payload, {})
            return self._json(request, payload)
        if path == "x/web-interface/view":
            fault = self._fault(request, "view", bvid)
            if fault is not None:
                return fault
            return self._json(request, bilibili.view_response(bvid, base=origin_of(request)))
        if path == "x/space/wbi/arc/search":
            fault = self._fault(request, "arc_search", None)
            if fault is not None:
                return fault
            if not self._signed(request, "arc_search"):
                return self._json(request, bilibili.WBI_REJECTED)
            return self._json(request, bilibili.arc_search_response(
                query_int(request, b"mid"), pn=query_int(request, b"pn"), ps=query_int(request, b"ps"),
                base=origin_of(request)))
        if path == "x/web-interface/wbi/search/type":
            fault = self._fault(request, "search", None)
            if fault is not None:
                return fault
            if not self._signed(request, "search"):
                return self._json(request, bilibili.WBI_REJECTED)
            return self._json(request, bilibili.search_response(
                query_arg(request, b"keyword"), search_type=query_arg(request, b"search_type"),
                page=query_int(request, b"page"), page_size=query_int(request, b"page_size"),
                base=origin_of(request), order=query_arg(request, b"order"),
                begin_s=query_int(request, b"pubtime_begin_s"), end_s=query_int(request, b"pubtime_end_s"),
                cap=self.state.faults.knobs["bilibili_search_cap"]))
        if path.startswith("b23/"):  # b23.tv/<code> (BILIBILI_SHORT_URL=…/bilibili/b23)
            target = bilibili.short_link_target(path.removeprefix("b23/"))
            if target is None:
                request.setResponseCode(404)
                return b"404"
            request.setResponseCode(302)
            request.setHeader(b"location", target.encode())
            return b""
        if path == "x/v3/fav/resource/list":
            return self._json(request, bilibili_lists.fav_response(
                query_int(request, b"media_id"), pn=query_int(request, b"pn"), ps=query_int(request, b"ps"),
                base=origin_of(request)))
        if path == "x/polymer/web-space/seasons_archives_list":
            return self._json(request, bilibili_lists.season_response(
                query_int(request, b"mid"), query_int(request, b"season_id"),
                page_num=query_int(request, b"page_num"), page_size=query_int(request, b"page_size"),
                base=origin_of(request)))
        if path == "x/series/archives":
            return self._json(request, bilibili_lists.series_response(
                query_int(request, b"mid"), query_int(request, b"series_id"), pn=query_int(request, b"pn"),
                ps=query_int(request, b"ps"), base=origin_of(request)))
        if path in ("x/v2/reply/wbi/main", "x/v2/reply/main"):
            # A video's replies, then each reply's thread (x/v2/reply/reply); oid is the aid of the video.
            aid = query_int(request, b"oid") or 0
            video = bilibili.bvid_of_aid(aid)
            if video is None:
                return self._json(request, {"code": -404, "message": "啥都木有", "ttl": 1})
            if path == "x/v2/reply/wbi/main" and not self._signed(request, "reply"):
                return self._json(request, bilibili.WBI_REJECTED)
            return self._json(request, comments.bilibili_main(
                self.state.world.comments, video, aid, pagination=query_arg(request, b"pagination_str"),
                base=origin_of(request), mode=query_int(request, b"mode") or 3))
        if path == "x/v2/reply/reply":
            aid = query_int(request, b"oid") or 0
            video = bilibili.bvid_of_aid(aid)
            return self._json(request, comments.bilibili_reply(
                self.state.world.comments, video or "", aid, query_arg(request, b"root") or "",
                pn=query_int(request, b"pn") or 1, ps=query_int(request, b"ps") or 20, base=origin_of(request)))
        if path == "x/player/wbi/v2":
            fault = self._fault(request, "player", bilibili.bvid_of_aid(query_int(request, b"aid") or 0))
            if fault is not None:
                return fault
            if not self._signed(request, "player"):
                return self._json(request, bilibili.WBI_REJECTED)
            return self._json(request, bilibili_extras.player_response(
                query_int(request, b"aid"), query_int(request, b"cid"), base=origin_of(request)))
        extra = self._extras(request, path)
        if extra is not None:
            return extra
        if path == "x/web-interface/nav":
            fault = self._fault(request, "nav", None)
            if fault is not None:
                return fault
            return self._json(request, bilibili.nav_response())
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return b"<html><body>404 Not Found</body></html>"

    def _extras(self, request: server.Request, path: str) -> bytes | None:
        """``subtitle/<cid>/<lan>.json`` (a track's cues) and ``comment/<cid>.xml`` (danmaku, raw deflate with
        ``Content-Encoding: deflate``; ``comment-bare/…`` the same bytes without the header, as the CDN sometimes
        sends them); ``None`` for any other path."""
        m = re.fullmatch(r"subtitle/(\d{1,12})/([A-Za-z-]{1,16})\.json", path)
        if m:
            body = bilibili_extras.subtitle_body(int(m.group(1)), m.group(2))
            return self._json(request, body) if body is not None else None
        m = re.fullmatch(r"(comment|comment-bare)/(\d{1,12})\.xml", path)
        if not m:
            return None
        request.setHeader(b"content-type", b"text/xml")
        if m.group(1) == "comment":
            request.setHeader(b"content-encoding", b"deflate")
        return bilibili_extras.deflated(bilibili_extras.danmaku_xml(int(m.group(2))))

    def _with_tokens(self, value: Any, tokens: dict[str, int]) -> Any:
        """``value`` with every ``/media/bili/`` URL carrying its path's token for this answer (``&trid=N``)."""
        if isinstance(value, dict):
            return {k: self._with_tokens(v, tokens) for k, v in value.items()}
        if isinstance(value, list):
            return [self._with_tokens(v, tokens) for v in value]
        if isinstance(value, str) and "/media/bili/" in value:
            path = urlsplit(value).path
            # baseUrl and base_url (backupUrl and backup_url) name the same file: one token for both.
            if path not in tokens:
                tokens[path] = self.state.signed.issue(path)
            return f"{value}{'&' if '?' in value else '?'}trid={tokens[path]}"
        return value

    def _signed(self, request: server.Request, endpoint: str) -> bool:
        """Whether the request passes the WBI check the ``bilibili_wbi`` knob asks of ``endpoint``."""
        if not self.state.faults.bilibili_wbi_checked(endpoint):
            return True
        # A repeated parameter cannot be signed unambiguously: Bilibili's own signer never sends one.
        if any(len(v) != 1 for v in request.args.values()):
            return False
        params = {k.decode("utf-8", "replace"): v[0].decode("utf-8", "replace") for k, v in request.args.items()}
        return bilibili.wbi_signature_ok(params)

    @staticmethod
    def _json(request: server.Request, payload: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        # Go's encoder (Bilibili's) escapes these three; they only ever occur inside strings, so replace is exact.
        body = body.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
        return body.encode("utf-8")

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
