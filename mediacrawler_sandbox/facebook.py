"""Facebook (Graph API v19.0) in the sandbox: a deterministic world model and the payloads rendered from it.

Reference: docs/sandbox.md, "facebook.py".
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from .det import stable_hex, stable_int
from .video import DURATION as VIDEO_DURATION

__all__ = [
    "DEFAULT_TOKEN",
    "FB_NOW",
    "GRAPH_VERSION",
    "PAGE_ID",
    "FacebookWorld",
    "FbPhoto",
    "FbPost",
    "FbVideo",
    "build_facebook_world",
    "decode_cursor",
    "dumps_graph",
    "encode_cursor",
    "graph_error",
    "posts_response",
    "render_post",
    "split_fields",
    "video_response",
]

GRAPH_VERSION = "v19.0"
PAGE_ID = "100000000000001"
PAGE_NAME = "Sandbox Page"
DEFAULT_TOKEN = "sandbox-token"
FB_NOW = datetime(2026, 11, 28, 10, 0, 0, tzinfo=UTC)
DEFAULT_LIMIT = 25  # Graph's default page size
MAX_LIMIT = 100
#: Fields Graph returns for a post when ``fields`` is not given.
DEFAULT_POST_FIELDS = ("created_time", "message", "id")
_MESSAGES = ["Morning at the harbour.", "Three views from the hill.", "A short clip from today.",
             "Behind the scenes, in motion.", "Worth a read:", "Thanks for 10k followers! 🎉"]


@dataclass(frozen=True)
class FbPhoto:
    """A photo: ``id`` (the attachment's ``target.id``), ``n`` (served as ``/media/img/{n}.jpg``) and its size."""

    id: str
    n: int
    width: int
    height: int


@dataclass(frozen=True)
class FbVideo:
    """A video: ``id`` (``target.id``), whether the post's attachment carries ``media.source``, its thumbnail."""

    id: str
    source_in_post: bool
    thumbnail: FbPhoto


@dataclass(frozen=True)
class FbPost:
    """A post of a page. ``kind``: ``photo``, ``album``, ``video``, ``share`` or ``status``."""

    id: str
    page_id: str
    kind: str
    message: str
    created: datetime
    photos: tuple[FbPhoto, ...] = ()
    album_id: str | None = None
    video: FbVideo | None = None
    link: str | None = None


@dataclass
class FacebookWorld:
    """The pages the sandbox serves (see the module docstring)."""

    pages: dict[str, list[FbPost]] = field(default_factory=dict)
    videos: dict[str, FbVideo] = field(default_factory=dict)
    photos: dict[str, FbPhoto] = field(default_factory=dict)

    def posts(self, page_id: str) -> list[FbPost]:
        """The posts of ``page_id``, newest first (empty for an unknown page)."""
        return self.pages.get(page_id, [])


def _photo(n: int) -> FbPhoto:
    # Same formula as mediacrawler_sandbox.media.generic_image: the declared size is the served image's.
    return FbPhoto(id=str(400_000_000_000_000 + n), n=n, width=160 + stable_int("img-w", n, bits=7),
                   height=160 + stable_int("img-h", n, bits=7))


def build_facebook_world(
    seed: int = 1, page_ids: tuple[str, ...] = (PAGE_ID,), posts_per_page: int = 12
) -> FacebookWorld:
    """Build the world (same arguments → equal worlds)."""
    world = FacebookWorld()
    for p, page_id in enumerate(page_ids):
        posts: list[FbPost] = []
        created = FB_NOW
        for i in range(posts_per_page):
            created -= timedelta(minutes=30 + stable_int(seed, page_id, "gap", i, bits=10))
            post_id = f"{page_id}_{1_000_000_000_000 + p * 10_000 + i}"
            base_n = 70_000 + p * 10_000 + i * 10  # image numbers: 10 per post, distinct across the world
            kind = ("photo", "album", "video", "video", "share", "status")[i % 6]
            message = f"{_MESSAGES[i % 6]} #{i + 1}"
            post = FbPost(id=post_id, page_id=page_id, kind=kind, message=message, created=created)
            if kind == "photo":
                post = _replace(post, photos=(_photo(base_n),))
            elif kind == "album":
                post = _replace(post, photos=tuple(_photo(base_n + k) for k in range(3)),
                                album_id=str(300_000_000_000_000 + p * 10_000 + i))
            elif kind == "video":
                video = FbVideo(id=str(500_000_000_000_000 + p * 10_000 + i), source_in_post=i % 6 == 2,
                                thumbnail=_photo(base_n + 9))
                world.videos[video.id] = video
                post = _replace(post, video=video)
            elif kind == "share":
                post = _replace(post, link=f"https://example.com/sandbox/article/{i + 1}?ref=fb")
            for photo in post.photos:
                world.photos[photo.id] = photo
            posts.append(post)
        world.pages[page_id] = posts
    return world


def _replace(post: FbPost, **changes: Any) -> FbPost:
    return replace(post, **changes)


# -- rendering ----------------------------------------------------------------------------------------------------


def graph_time(dt: datetime) -> str:
    """Graph's timestamp format: ``2026-11-28T10:00:00+0000``."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+0000")


def _image(base: str, photo: FbPhoto) -> dict[str, Any]:
    # fbcdn URLs are signed (oh/oe); the media key is target.id, so the query may change between answers.
    return {"height": photo.height, "width": photo.width,
            "src": f"{base}/media/img/{photo.n}.jpg?stp=dst-jpg_s720x720&_nc_cat=1"
                   f"&oh=00_{stable_hex('fb', photo.n)}&oe=674A1B2C"}


def _photo_attachment(base: str, photo: FbPhoto) -> dict[str, Any]:
    url = f"https://www.facebook.com/photo.php?fbid={photo.id}&set=a.1&type=3"
    return {"media": {"image": _image(base, photo)}, "target": {"id": photo.id, "url": url}, "type": "photo",
            "url": url, "media_type": "photo"}


def video_source(base: str, video_id: str) -> str:
    """The full-quality source of a video: the sandbox's progressive 720p MP4 of that id."""
    return f"{base}/media/progressive/{video_id}/720p.mp4"


def _attachment(base: str, post: FbPost) -> dict[str, Any] | None:
    if post.kind == "photo":
        return _photo_attachment(base, post.photos[0])
    if post.kind == "album":
        url = f"https://www.facebook.com/media/set/?set=a.{post.album_id}&type=3"
        return {"media": {"image": _image(base, post.photos[0])},
                "subattachments": {"data": [_photo_attachment(base, p) for p in post.photos]},
                "target": {"id": post.album_id, "url": url}, "title": f"Photos from {PAGE_NAME}'s post",
                "type": "album", "url": url, "media_type": "album"}
    if post.kind == "video" and post.video is not None:
        video = post.video
        media: dict[str, Any] = {"image": _image(base, video.thumbnail)}
        if video.source_in_post:
            media["source"] = video_source(base, video.id)
        url = f"https://www.facebook.com/{post.page_id}/videos/{video.id}/"
        return {"media": media, "target": {"id": video.id, "url": url}, "title": "Sandbox clip",
                "type": "video_inline" if video.source_in_post else "video_autoplay", "url": url,
                "media_type": "video"}
    if post.kind == "share" and post.link:
        shim = (f"https://l.facebook.com/l.php?u={quote(post.link, safe='')}"
                f"&h=AT{stable_hex('fb-shim', post.id, length=12)}&s=1")
        return {"description": "An article worth reading.", "target": {"url": shim}, "title": "An article",
                "type": "share", "url": shim, "media_type": "link"}
    return None


def render_post(base: str, post: FbPost, fields: list[str] | None = None) -> dict[str, Any]:
    """One post as Graph renders it with ``fields`` (top-level names; ``None``: Graph's defaults)."""
    full: dict[str, Any] = {
        "id": post.id,
        "message": post.message,
        "created_time": graph_time(post.created),
        "permalink_url": f"https://www.facebook.com/{post.page_id}/posts/"
                         f"pfbid0{stable_hex('pf', post.id, length=20)}",
        "from": {"name": PAGE_NAME, "id": post.page_id},
    }
    attachment = _attachment(base, post)
    if attachment is not None:
        full["attachments"] = {"data": [attachment]}
    wanted = fields if fields is not None else list(DEFAULT_POST_FIELDS)
    # Graph puts id first in the object regardless of the order asked for, and only fields that have a value.
    return {k: full[k] for k in ["id", *[f for f in wanted if f != "id"]] if k in full}


def split_fields(value: str | None) -> list[str] | None:
    """Top-level names of a ``fields`` parameter: ``id,attachments{media,target},message`` → ``[id, attachments,
    message]``."""
    if value is None or not value.strip():
        return None
    names, depth, current = [], 0, ""
    for ch in value:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            names.append(current.strip())
            current = ""
            continue
        if depth == 0 and ch not in "{}":
            current += ch
    names.append(current.strip())
    # "attachments.limit(5)" and the like: the name before any modifier.
    return [n.split(".", 1)[0] for n in names if n]


def encode_cursor(page_id: str, index: int) -> str:
    """An opaque cursor naming post ``index`` of ``page_id`` (base64url, no padding, like Graph's)."""
    return base64.urlsafe_b64encode(f"sbx:{page_id}:{index}".encode()).decode().rstrip("=")


def decode_cursor(page_id: str, cursor: str) -> int | None:
    """The post index a cursor of ``page_id`` names; ``None`` when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    prefix, _, index = raw.rpartition(":")
    return int(index) if prefix == f"sbx:{page_id}" and index.isdigit() else None


def graph_error(code: int, message: str, *, type_: str = "OAuthException", subcode: int | None = None,
                transient: bool = False, trace: str = "") -> dict[str, Any]:
    """A Graph error envelope."""
    error: dict[str, Any] = {"message": message, "type": type_, "code": code}
    if subcode is not None:
        error["error_subcode"] = subcode
    if transient:
        error["is_transient"] = True
    error["fbtrace_id"] = "A" + stable_hex("fbtrace", code, message, trace, length=20)
    return {"error": error}


def unknown_object(object_id: str) -> dict[str, Any]:
    """Graph's answer (HTTP 400) for an id that does not exist or cannot be read."""
    return graph_error(
        100, f"Unsupported get request. Object with ID '{object_id}' does not exist, cannot be loaded due to "
             "missing permissions, or does not support this operation. Please read the Graph API documentation at "
             "https://developers.facebook.com/docs/graph-api", type_="GraphMethodException", subcode=33)


def page_number(world: FacebookWorld, page_id: str, *, limit: int | None, after: str | None) -> int | None:
    """The 1-based Graph page a ``/posts`` request asks for (``None`` for a bad cursor): what fault rules match."""
    size = _limit(limit)
    if not after:
        return 1
    index = decode_cursor(page_id, after)
    return None if index is None else (index + 1) // size + 1


def _limit(limit: int | None) -> int:
    return DEFAULT_LIMIT if limit is None or limit <= 0 else min(limit, MAX_LIMIT)


def posts_response(
    world: FacebookWorld,
    page_id: str,
    *,
    base: str,
    token: str,
    limit: int | None = None,
    after: str | None = None,
    fields: str | None = None,
    since: int | None = None,
    until: int | None = None,
) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` of ``GET /{GRAPH_VERSION}/{page_id}/posts``; ``base`` is the sandbox origin. ``since``
    and ``until`` (unix seconds, both inclusive, as Graph reads them) keep the posts created between them; the
    cursors then count within what they keep (Graph wants the same ones on every page)."""
    if page_id not in world.pages:
        return 400, unknown_object(page_id)
    posts = [p for p in world.posts(page_id) if (since is None or p.created.timestamp() >= since)
             and (until is None or p.created.timestamp() <= until)]
    size = _limit(limit)
    start = 0
    if after:
        index = decode_cursor(page_id, after)
        if index is None:
            return 400, graph_error(100, "(#100) The parameter after is invalid.")
        start = index + 1
    chunk = posts[start:start + size]
    wanted = split_fields(fields)
    body: dict[str, Any] = {"data": [render_post(base, p, wanted) for p in chunk]}
    if not chunk:
        return 200, body  # past the end: Graph answers an empty data list without paging
    first, last = encode_cursor(page_id, start), encode_cursor(page_id, start + len(chunk) - 1)
    paging: dict[str, Any] = {"cursors": {"before": first, "after": last}}
    query: dict[str, str] = {"access_token": token, "pretty": "0"}
    if fields:
        query["fields"] = fields
    query["limit"] = str(size)
    query.update({name: str(value) for name, value in (("since", since), ("until", until)) if value is not None})
    endpoint = f"{base}/facebook/{GRAPH_VERSION}/{page_id}/posts?"
    if start + len(chunk) < len(posts):
        paging["next"] = endpoint + urlencode({**query, "after": last})
    if start > 0:
        paging["previous"] = endpoint + urlencode({**query, "before": first})
    body["paging"] = paging
    return 200, body


def video_response(world: FacebookWorld, video_id: str, *, base: str, fields: str | None = None) -> tuple[
        int, dict[str, Any]]:
    """``(status, body)`` of ``GET /{GRAPH_VERSION}/{video_id}?fields=source,length,format``."""
    video = world.videos.get(video_id)
    if video is None:
        return 400, unknown_object(video_id)
    thumb = _image(base, video.thumbnail)["src"]
    embed = ('<iframe width="{w}" height="{h}" '
             f'src="https://www.facebook.com/video/embed?video_id={video_id}" frameborder="0"></iframe>')
    formats = [{"embed_html": embed.format(w=w, h=h), "filter": flt, "height": h, "width": w, "picture": thumb}
               for flt, w, h in (("130x130", 130, 73), ("480x480", 480, 270), ("native", 1280, 720))]
    full: dict[str, Any] = {"source": video_source(base, video_id), "length": VIDEO_DURATION, "format": formats,
                            "id": video_id, "title": "Sandbox clip", "picture": thumb}
    post = next((p for posts in world.pages.values() for p in posts if p.video is not None and p.video.id == video_id),
                None)
    if post is not None:
        # As Graph answers a video node: the permalink is a path, the owner the page, the time its post's.
        full.update({"permalink_url": f"/{post.page_id}/videos/{video_id}/", "created_time": graph_time(post.created),
                     "from": {"name": PAGE_NAME, "id": post.page_id}, "description": post.message})
    wanted = split_fields(fields) or ["id"]  # a node without fields: Graph answers its id (and a name/title)
    return 200, {k: full[k] for k in [*[f for f in wanted if f != "id"], "id"] if k in full}


def dumps_graph(payload: Any) -> bytes:
    """Serialize as graph.facebook.com does: ASCII with ``\\uXXXX`` escapes and ``\\/``."""
    return json.dumps(payload, ensure_ascii=True, separators=(",", ":")).replace("/", "\\/").encode("ascii")
