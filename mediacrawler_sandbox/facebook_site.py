"""``/facebook/…``: the Graph API (v19.0) over HTTP, rendered from :mod:`mediacrawler_sandbox.facebook`.

Reference: docs/sandbox.md, "facebook_site.py".
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_plus

from twisted.web import server

from . import comments, facebook
from .httpbase import SandboxResource, origin_of, query_arg, query_int

__all__ = ["FacebookResource"]

_RATE_LIMIT_MESSAGES = {
    "4": "(#4) Application request limit reached",
    "17": "(#17) User request limit reached",
    "32": "(#32) Page request limit reached",
    "613": "(#613) Calls to this api have exceeded the rate limit.",
}


def _redact_query(query: bytes) -> bytes:
    """``query`` with every ``access_token`` value replaced (the other parameters byte for byte)."""
    if not query:
        return query
    def is_token(piece: bytes) -> bool:
        return unquote_plus(piece.partition(b"=")[0].decode("latin-1")) == "access_token"

    return b"&".join(b"access_token=[redacted]" if is_token(p) else p for p in query.split(b"&"))


class FacebookResource(SandboxResource):
    """Serves the Graph API mount (see the module docstring)."""

    area = "facebook"

    def __init__(self, state: Any, reactor: Any) -> None:
        super().__init__(state, reactor)
        self.world = facebook.build_facebook_world(seed=state.world.seed)

    def render(self, request: server.Request) -> bytes | int:
        # Runs right after the request was logged, before any latency delay or handler: scrub it here once.
        path, sep, query = request.uri.partition(b"?")
        if sep:
            request.uri = path + b"?" + _redact_query(query)
        entry = getattr(request, "entry", None)
        if entry is not None:
            entry["query"] = _redact_query(entry["query"].encode("latin-1")).decode("latin-1")
            entry["authorization"] = request.requestHeaders.hasHeader(b"authorization")
        return super().render(request)

    def handle(self, request: server.Request) -> bytes | int:
        parts = [p.decode("utf-8", "replace") for p in request.postpath]
        base = origin_of(request)
        if len(parts) < 2 or parts[0] != facebook.GRAPH_VERSION or request.method not in (b"GET", b"HEAD"):
            return self._answer(request, 400, facebook.graph_error(
                2500, "Unknown path components: /" + "/".join(parts[:1])))
        token = self._token(request)
        if token != self.state.faults.knobs["facebook_token"]:
            message = ("Invalid OAuth access token - Cannot parse access token" if token
                       else "An access token is required to request this resource.")
            return self._answer(request, 400, facebook.graph_error(190, message))
        assert token is not None
        fields = query_arg(request, b"fields")
        if len(parts) == 3 and parts[2] == "posts":
            limit, after = query_int(request, b"limit"), query_arg(request, b"after")
            page = facebook.page_number(self.world, parts[1], limit=limit, after=after)
            fault = self._fault(request, "posts", page)
            if fault is not None:
                return fault
            status, payload = facebook.posts_response(self.world, parts[1], base=base, token=token, limit=limit,
                                                      after=after, fields=fields,
                                                      since=query_int(request, b"since"),
                                                      until=query_int(request, b"until"))
            return self._answer(request, status, payload)
        if len(parts) == 3 and parts[2] == "comments":
            # A post's comments (filter=stream: its replies too), or one comment's replies ({post no}_{comment}).
            post_id = self._post_of(parts[1])
            if post_id is None:
                return self._answer(request, 400, facebook.unknown_object(parts[1]))
            return self._answer(request, 200, comments.facebook_comments(
                self.state.world.comments, post_id, node=parts[1], after=query_arg(request, b"after"),
                limit=query_int(request, b"limit") or 25, stream=query_arg(request, b"filter") == "stream",
                base=base))
        if len(parts) == 2 and self._post_of(parts[1]) == parts[1]:  # one post node (-a post)
            post = next(p for page in self.world.pages.values() for p in page if p.id == parts[1])
            return self._answer(request, 200, facebook.render_post(base, post, facebook.split_fields(fields)))
        if len(parts) == 2:
            fault = self._fault(request, "video", None)
            if fault is not None:
                return fault
            status, payload = facebook.video_response(self.world, parts[1], base=base, fields=fields)
            return self._answer(request, status, payload)
        return self._answer(request, 400, facebook.unknown_object("/".join(parts[1:])))

    def _post_of(self, node: str) -> str | None:
        """The post a comments node belongs to: the post itself, or the post whose number prefixes a comment id."""
        posts = [p.id for page in self.world.pages.values() for p in page]
        if node in posts:
            return node
        number = node.split("_", 1)[0]
        return next((p for p in posts if p.rsplit("_", 1)[-1] == number), None)

    @staticmethod
    def _token(request: server.Request) -> str | None:
        header = request.getHeader(b"authorization")
        if header:
            scheme, _, value = header.decode("latin-1").strip().partition(" ")
            if scheme.lower() in ("bearer", "oauth") and value.strip():
                return value.strip()
            return ""
        return query_arg(request, b"access_token")

    def _answer(self, request: server.Request, status: int, payload: Any) -> bytes:
        request.setResponseCode(status)
        # Graph sends JSON as text/javascript on errors and successes alike.
        request.setHeader(b"content-type", b"application/json; charset=UTF-8")
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict) and error.get("code") == 190:
            request.setHeader(b"www-authenticate", b'OAuth "Facebook Platform" "invalid_token" '
                              + json.dumps(error["message"][:80]).encode("ascii"))
        return facebook.dumps_graph(payload)

    def _fault(self, request: server.Request, endpoint: str, page: int | None) -> bytes | None:
        fault = self.state.faults.facebook_fault(endpoint, page)
        if fault is None:
            return None
        self.state.count("faults")
        if fault.kind in _RATE_LIMIT_MESSAGES:
            request.setHeader(b"x-app-usage", json.dumps(
                {"call_count": 100, "total_cputime": 12, "total_time": 20}).encode())
            return self._answer(request, 400, facebook.graph_error(
                int(fault.kind), _RATE_LIMIT_MESSAGES[fault.kind], transient=fault.kind in ("4", "17")))
        if fault.kind == "190":
            return self._answer(request, 400, facebook.graph_error(
                190, "Error validating access token: Session has expired on Saturday, 28-Nov-26 10:00:00 PST. "
                     "The current time is Sunday, 29-Nov-26 02:00:00 PST.", subcode=463))
        if fault.kind == "100":
            object_id = request.postpath[1].decode("utf-8", "replace")
            return self._answer(request, 400, facebook.unknown_object(object_id))
        return self._answer(request, fault.status, facebook.graph_error(
            1, "An unknown error has occurred.", transient=True))
