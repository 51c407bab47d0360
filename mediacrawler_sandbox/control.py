"""``/_sandbox/…``: the control endpoints tests, ``make demo`` and benchmarks use (plain JSON, never logged).

Reference: docs/sandbox.md, "control.py".
"""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.web import server
from twisted.web.resource import Resource

from .faults import FaultError
from .state import SandboxState

__all__ = ["ControlResource"]


class ControlResource(Resource):
    """Serves ``/_sandbox/…`` (see the module docstring). Control answers are never delayed or faulted."""

    isLeaf = True

    def __init__(self, state: SandboxState, info: dict[str, Any]) -> None:
        super().__init__()
        self.state = state
        self.info = info

    def render(self, request: server.Request) -> bytes:
        name = b"/".join(request.postpath).decode("latin-1")
        method = request.method
        try:
            if name == "requests" and method == b"GET":
                return self._json(request, list(self.state.log.entries))
            if name == "reset" and method == b"POST":
                self.state.reset()
                self.state.world.weibo.unpublish()
                self.state.world.comments.reset()
                return self._json(request, {"ok": True})
            if name in ("weibo/publish", "weibo/pin", "weibo/engage") and method == b"POST":
                body = json.loads((request.content.read() if request.content is not None else b"") or b"{}")
                if not isinstance(body, dict):
                    raise FaultError("the body must be a JSON object")
                world = self.state.world.weibo
                try:
                    if name == "weibo/publish":
                        return self._json(request, {"ids": world.publish(int(body["uid"]), int(body["count"]))})
                    if name == "weibo/engage":
                        counts = world.engage(int(body["uid"]), **{k: int(body.get(k, 0))
                                                                   for k in ("likes", "comments", "reposts")})
                        return self._json(request, {"counts": counts})
                    post_id = body.get("post_id")
                    world.pin(int(body["uid"]), None if post_id is None else str(post_id))
                    return self._json(request, {"ok": True})
                except (KeyError, TypeError, ValueError) as exc:
                    raise FaultError(f"{name}: {exc}") from None
            if name == "comments" and method == b"POST":
                # {"platform", "post_id", "size": N | "add": N | "close_from_page": N}: long threads, new comments
                # (answers their ids, newest first), a thread that closes mid-walk.
                body = json.loads((request.content.read() if request.content is not None else b"") or b"{}")
                world = self.state.world.comments
                try:
                    platform, post_id = str(body["platform"]), str(body["post_id"])
                    if "size" in body:
                        world.set_size(platform, post_id, int(body["size"]))
                    if "close_from_page" in body:
                        world.close_from(platform, post_id, int(body["close_from_page"]))
                    added = world.publish(platform, post_id, int(body["add"])) if "add" in body else []
                    return self._json(request, {"ids": added, "total": len(world.thread(platform, post_id).all())})
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    raise FaultError(f"comments: {exc}") from None
            if name == "faults" and method == b"GET":
                return self._json(request, self.state.faults.snapshot())
            if name == "faults" and method == b"POST":
                body = request.content.read() if request.content is not None else b""
                knobs = json.loads(body or b"{}")
                if not isinstance(knobs, dict):
                    raise FaultError("the body must be a JSON object of knobs")
                return self._json(request, self.state.faults.update(knobs))
            if name == "stats" and method == b"GET":
                return self._json(request, self.state.stats())
            if name == "info" and method == b"GET":
                return self._json(request, {**self.info, "pid": os.getpid()})
        except (FaultError, json.JSONDecodeError) as exc:
            request.setResponseCode(400)
            return self._json(request, {"error": str(exc)})
        request.setResponseCode(404)
        return self._json(request, {"error": f"no control endpoint {method.decode()} /_sandbox/{name}"})

    @staticmethod
    def _json(request: server.Request, payload: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
