"""Facebook (Graph API v19.0) payloads to records.

Pure functions: a decoded JSON payload in, :class:`~mediacrawler.parsers._common.Page` or
:class:`~mediacrawler.items.Post` out. Shapes handled (see tests/fixtures/facebook/):

- ``/{page-id}/posts?fields=id,message,created_time,permalink_url,attachments{…}`` →
  ``{"data":[post…],"paging":{"cursors":{"before","after"},"next":"…&access_token=…&after=…"}}``;
  no ``next`` on the last page.
- Attachments: ``photo`` (``media.image``, ``target.id`` = photo id), ``album`` (``subattachments.data[]``),
  ``video`` / ``video_inline`` / ``video_autoplay`` (``target.id`` = video id, ``media.source`` only sometimes),
  ``link`` / ``share`` (``url`` is an ``l.facebook.com/l.php?u=`` shim).
- Legacy posts (older Graph versions, no ``attachments``): ``type`` (``photo``, ``video``, ``link``, ``status``),
  ``object_id`` (the photo id), ``picture`` (a thumbnail), ``full_picture``; a photo post keeps its photo.
- The video node ``/{video-id}?fields=source,length,format``.
- Error envelopes ``{"error":{"message","type","code","error_subcode","fbtrace_id"}}`` (any HTTP status).

The access token never reaches anything returned here: ``paging.next`` carries it, so callers use
:func:`next_request_params` (the query without the token) or :func:`strip_token`; error messages are replaced or
scrubbed (Graph echoes malformed tokens back in its messages).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlencode, urlsplit, urlunsplit

from mediacrawler.items import Author, MediaAsset, Post, Source
from mediacrawler.parsers._common import Page, PlatformError, as_int, as_obj, as_text, clean_id, iso_utc, strip_url
from mediacrawler.scrub import scrub

__all__ = [
    "PLATFORM",
    "classify_error",
    "next_request_params",
    "parse_posts",
    "parse_video_node",
    "post_from_raw",
    "raise_for_error",
    "strip_token",
    "unwrap_link",
]

PLATFORM = "facebook"
#: Error codes that mean "the token is no good": 190 invalid/expired, 102 session, 104 no token, 2500 no active
#: token.
TOKEN_CODES = {190, 102, 104, 2500}
#: Error codes that mean "slow down": app (4), user (17), page (32), API-specific (613) and the Business Use Case
#: limits (80001–80014).
RATE_LIMIT_CODES = {4, 17, 32, 613, *range(80001, 80015)}
#: Permission errors: 10 and the 200–299 block (the token lacks a permission for this object).
PERMISSION_CODES = {10, *range(200, 300)}
#: Query parameters that are credentials (appsecret_proof is an HMAC of the token: as private as the token).
SECRET_PARAMS = {"access_token", "appsecret_proof"}
VIDEO_TYPES = {"video", "video_inline", "video_autoplay", "video_direct_response", "video_share_youtube"}
SHARE_TYPES = {"link", "share"}
_SHIM_HOSTS = {"l.facebook.com", "lm.facebook.com", "www.facebook.com", "m.facebook.com", "facebook.com"}
_FB_HOST_RE = re.compile(r"(?:[a-z0-9-]+\.)*facebook\.com")
# Cursors are opaque base64url-ish strings, often longer than an id (so not clean_id).
_CURSOR_RE = re.compile(r"[A-Za-z0-9_=%-]{1,1024}")
# Query parameters FB appends to outbound links for tracking; not part of the target.
_TRACKING_PARAMS = {"fbclid"}


# -- errors -------------------------------------------------------------------------------------------------------


def classify_error(payload: Any, status: int = 200, *, secrets: Iterable[str] = ()) -> tuple[str, str]:
    """What a Graph answer is, and a message safe to log: ``("ok", "")`` or (kind, message) with kind one of
    ``login_required``, ``rate_limited``, ``not_found``, ``error``.

    ``secrets`` (e.g. the token in use) are redacted from the message besides anything that looks like a token;
    for token errors the platform's message is not used at all (Graph writes "Malformed access token EAA…")."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if error is None or error == {}:
        if 200 <= status < 300:
            return ("ok", "") if isinstance(payload, dict) else ("error", "answer is not a JSON object")
        if status == 429:
            return "rate_limited", f"HTTP {status}"
        if status == 404:
            return "not_found", f"HTTP {status}"
        if status in (401, 403):
            return "login_required", "access token invalid or expired"
        return "error", f"HTTP {status}"
    if not isinstance(error, dict):  # {"error": "…"} from a proxy or an old endpoint
        return "error", f"HTTP {status}: " + scrub(str(error), secrets)[:200]
    code, subcode = as_int(error.get("code")), as_int(error.get("error_subcode"))
    raw_message = error.get("message") if isinstance(error.get("message"), str) else ""
    # Masked before the cut: a token across position 300 would otherwise leave its first part in the message.
    message = scrub(raw_message, secrets)[:300]
    suffix = f" (code {code}" + (f", subcode {subcode})" if subcode is not None else ")")
    if code in TOKEN_CODES:
        return "login_required", "access token invalid or expired" + suffix
    if code in PERMISSION_CODES:
        # Retrying cannot help: the user has to supply a token with the permission, like an expired one.
        return "login_required", "access token lacks a permission for this object" + suffix
    if code in RATE_LIMIT_CODES:
        return "rate_limited", (message or "rate limited") + suffix
    if code == 803 or (code == 100 and (subcode == 33 or "does not exist" in raw_message)):
        return "not_found", (message or "object not found") + suffix
    # Everything else (code 100 invalid parameter, 1/2 transient, unknown codes): the caller's retry policy decides
    # from the HTTP status; the kind says it is neither a credential nor a rate problem.
    return "error", (message or "Graph API error") + suffix


def raise_for_error(payload: Any, status: int = 200, *, secrets: Iterable[str] = ()) -> None:
    """:func:`classify_error`, raising :class:`PlatformError` (kind, safe message, Graph code) unless ``ok``."""
    kind, message = classify_error(payload, status, secrets=secrets)
    if kind == "ok":
        return
    error = payload.get("error") if isinstance(payload, dict) else None
    code = as_int(error.get("code")) if isinstance(error, dict) else None
    raise PlatformError(kind, message, code=code if code is not None else (status if status >= 400 else None))


# -- URLs ---------------------------------------------------------------------------------------------------------


def strip_token(url: str) -> str:
    """``url`` without its credential query parameters (``access_token``, ``appsecret_proof``); the rest of the
    query is kept in order."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    # Filter the raw pieces rather than decode and re-encode: everything else stays byte for byte.
    kept = [piece for piece in parts.query.split("&")
            if unquote_plus(piece.partition("=")[0]) not in SECRET_PARAMS]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "&".join(kept), parts.fragment))


def next_request_params(payload: Any) -> dict[str, str] | None:
    """The query of ``paging.next`` minus the credentials, for the caller to build the next URL on its own base
    (so neither the token nor the platform's host ends up in a stored URL); ``None`` on the last page."""
    paging = as_obj(payload.get("paging")) if isinstance(payload, dict) else {}
    nxt = paging.get("next")
    if not isinstance(nxt, str) or not nxt:
        return None
    return {k: v for k, v in parse_qsl(urlsplit(nxt).query, keep_blank_values=True) if k not in SECRET_PARAMS}


def unwrap_link(url: Any) -> str | None:
    """The target of an ``l.facebook.com/l.php?u=…`` shim (tracking ``fbclid`` dropped); other http(s) URLs as
    they are; ``None`` for anything else."""
    if not isinstance(url, str) or not url:
        return None
    parts = urlsplit(url)
    if parts.netloc.lower() in _SHIM_HOSTS and parts.path == "/l.php":
        target = dict(parse_qsl(parts.query)).get("u")
        if not target:
            return None
        inner = urlsplit(target)
        query = [(k, v) for k, v in parse_qsl(inner.query, keep_blank_values=True) if k not in _TRACKING_PARAMS]
        parts = inner._replace(query=urlencode(query))
        url = urlunsplit(parts)
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def _permalink(value: Any, post_id: str) -> str:
    """The canonical post URL: ``permalink_url`` without its query, except the two query-addressed forms
    (``permalink.php``/``story.php``, which keep ``story_fbid`` and ``id``); else ``facebook.com/{post id}``."""
    if isinstance(value, str):
        parts = urlsplit(value)
        if parts.scheme == "https" and _FB_HOST_RE.fullmatch(parts.netloc.lower()):
            if parts.path in ("/permalink.php", "/story.php"):
                query = dict(parse_qsl(parts.query))
                keep = [(k, query[k]) for k in ("story_fbid", "id") if clean_id(query.get(k))]
                if len(keep) == 2:
                    return urlunsplit(("https", parts.netloc.lower(), parts.path, urlencode(keep), ""))
            elif parts.path not in ("", "/"):
                return strip_url(value)
    return f"https://www.facebook.com/{post_id}"


# -- posts --------------------------------------------------------------------------------------------------------


def _list(value: Any) -> list[Any]:
    """The ``data`` list of a Graph edge (``{"data":[…]}``), else an empty one."""
    data = as_obj(value).get("data")
    return data if isinstance(data, list) else []


def _dimension(value: Any) -> int | None:
    n = as_int(value)
    return n if n is not None and n > 0 else None


def _http_url(value: Any) -> str:
    return value if isinstance(value, str) and urlsplit(value).scheme in ("http", "https") else ""


def parse_created_time(value: Any) -> str | None:
    """``2026-11-28T10:00:00+0000`` as ISO 8601 UTC (``2026-11-28T10:00:00Z``); ``None`` when unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return iso_utc(datetime.strptime(value.strip(), "%Y-%m-%dT%H:%M:%S%z"))
    except ValueError:
        return None


class _Media:
    """What the attachments of one post hold: assets in order, videos awaiting a source, the shared link."""

    def __init__(self) -> None:
        self.assets: list[MediaAsset] = []
        self.keys: set[str] = set()
        self.unresolved: list[str] = []  # video ids whose asset has no url yet
        self.link: str | None = None
        self.album_truncated = False

    def add(self, asset: MediaAsset) -> None:
        if asset.key not in self.keys:  # an album's cover repeats its first photo
            self.keys.add(asset.key)
            self.assets.append(asset)

    def attachment(self, att: Any, *, nested: bool = False) -> None:
        att = as_obj(att)
        kind = as_text(att.get("media_type")) or as_text(att.get("type"))
        atype = as_text(att.get("type"))
        media, target = as_obj(att.get("media")), as_obj(att.get("target"))
        if kind == "album" or (not nested and isinstance(att.get("subattachments"), dict)):
            subs = att.get("subattachments")
            for sub in _list(subs):
                self.attachment(sub, nested=True)
            if as_obj(as_obj(subs).get("paging")).get("next"):
                self.album_truncated = True  # the rest of the album is behind another (token-bearing) page
            if not _list(subs):  # an album without its subattachments: at least its cover
                self._photo(media, target)
        elif kind == "photo" or atype in ("photo", "cover_photo", "profile_media"):
            self._photo(media, target)
        elif kind in VIDEO_TYPES or atype in VIDEO_TYPES:
            video_id = clean_id(target.get("id"))
            if video_id is None:
                return
            source = _http_url(media.get("source"))
            if not source:
                self.unresolved.append(video_id)
            self.add(MediaAsset(kind="video", key=f"video:{video_id}", url=source))
            self._cover(video_id, as_obj(media.get("image")))
        elif kind in SHARE_TYPES or atype in SHARE_TYPES:
            if self.link is None:
                self.link = unwrap_link(att.get("url")) or unwrap_link(target.get("url"))

    def _cover(self, video_id: str, image: dict[str, Any]) -> None:
        """A video's cover (its attachment's ``media.image``), right after the video; kept even when the video has
        no source (the record lists it under ``videos_unavailable``)."""
        src = _http_url(image.get("src"))
        if src:
            self.add(MediaAsset(kind="image", key=f"cover:{video_id}", url=src, cover_of=f"video:{video_id}",
                                width=_dimension(image.get("width")), height=_dimension(image.get("height"))))

    def legacy_photo(self, raw: dict[str, Any]) -> None:
        """A photo post in the legacy Graph fields (``type: "photo"``, ``object_id``, ``picture``, no
        ``attachments``): its photo at the best size the post gives, ``full_picture`` (full size) else
        ``picture`` (a 130 px thumbnail, all that older answers carry). Its signed URL is kept as it is."""
        photo_id = clean_id(raw.get("object_id"))
        src = _http_url(raw.get("full_picture")) or _http_url(raw.get("picture"))
        if as_text(raw.get("type")) == "photo" and photo_id is not None and src:
            self.add(MediaAsset(kind="image", key=f"photo:{photo_id}", url=src))

    def _photo(self, media: dict[str, Any], target: dict[str, Any]) -> None:
        photo_id = clean_id(target.get("id"))
        image = as_obj(media.get("image"))
        src = _http_url(image.get("src"))
        if photo_id is None or not src:
            return
        self.add(MediaAsset(kind="image", key=f"photo:{photo_id}", url=src, width=_dimension(image.get("width")),
                            height=_dimension(image.get("height"))))


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        f = float(value)
    except ValueError:
        return None
    return f if math.isfinite(f) and f >= 0 else None


def _build(
    raw: dict[str, Any],
    *,
    source: Source | None,
    fetched_at: str | None,
    video_sources: dict[str, tuple[str, float | None]] | None,
) -> tuple[Post, list[str]]:
    """The Post of one raw Graph post and the ids of its videos still without a source."""
    post_id = clean_id(raw.get("id"))
    if post_id is None:
        raise ValueError("post without a usable id")
    found = _Media()
    for att in _list(raw.get("attachments")):
        found.attachment(att)
    if not found.assets:
        found.legacy_photo(raw)
    unresolved: list[str] = []
    media: list[MediaAsset] = []
    for asset in found.assets:
        if asset.kind == "video" and not asset.url:
            video_id = asset.key.split(":", 1)[1]
            resolved = (video_sources or {}).get(video_id)
            if not resolved or not _http_url(resolved[0]):
                unresolved.append(video_id)
                continue
            asset.url, asset.duration = resolved[0], _float(resolved[1])
        media.append(asset)
    author_raw = as_obj(raw.get("from"))
    author_id = clean_id(author_raw.get("id"))
    extra: dict[str, Any] = {}
    if found.link:
        extra["link"] = found.link
    if found.album_truncated:
        extra["album_truncated"] = True
    post = Post(
        platform=PLATFORM,
        post_id=post_id,
        url=_permalink(raw.get("permalink_url"), post_id),
        author=Author(id=author_id, name=as_text(author_raw.get("name")) or None) if author_id else None,
        created_at=parse_created_time(raw.get("created_time")),
        text=as_text(raw.get("message")),
        media=media,
        source=source,
        fetched_at=fetched_at,
        extra=extra,
    )
    return post, unresolved


def post_from_raw(
    raw: dict[str, Any],
    *,
    source: Source | None = None,
    fetched_at: str | None = None,
    video_sources: dict[str, tuple[str, float | None]] | None = None,
) -> Post:
    """One raw Graph post (from ``Page.incomplete``) as a :class:`Post`, its videos' URLs and durations taken from
    ``video_sources`` (``{video id: (source, length)}``, from :func:`parse_video_node`).

    A video still without a source is left out of ``media`` and listed in ``extra["videos_unavailable"]``, so the
    record stays valid. Raises ``ValueError`` for a post without a usable id."""
    post, unresolved = _build(raw, source=source, fetched_at=fetched_at, video_sources=video_sources)
    if unresolved:
        post.extra["videos_unavailable"] = unresolved
    return post


def parse_posts(
    payload: Any,
    *,
    source: Source | None = None,
    fetched_at: str | None = None,
    secrets: Iterable[str] = (),
) -> Page:
    """A ``/{page-id}/posts`` answer as a :class:`Page`.

    Posts with a video whose ``media.source`` is missing go to ``Page.incomplete`` (raw post by id): the caller
    fetches each video node, then calls :func:`post_from_raw`. ``next_cursor`` is ``paging.cursors.after`` when
    there is a ``paging.next``; ``is_last`` is the absence of ``paging.next``. Raises :class:`PlatformError` for
    error envelopes."""
    raise_for_error(payload, 200, secrets=secrets)
    skipped: dict[str, int] = {}
    page = Page(skipped=skipped)
    data = payload.get("data")
    if not isinstance(data, list):
        skipped["malformed_data"] = 1
        data = []
    seen: set[str] = set()
    for raw in data:
        if not isinstance(raw, dict):
            skipped["not_an_object"] = skipped.get("not_an_object", 0) + 1
            continue
        try:
            post, unresolved = _build(raw, source=source, fetched_at=fetched_at, video_sources=None)
        except ValueError:
            skipped["invalid_post"] = skipped.get("invalid_post", 0) + 1
            continue
        except (TypeError, AttributeError, KeyError):
            # An unforeseen shape costs this post, never the page's others; counted apart (maybe a parser bug).
            skipped["malformed_post"] = skipped.get("malformed_post", 0) + 1
            continue
        if post.post_id in seen:
            skipped["duplicate_on_page"] = skipped.get("duplicate_on_page", 0) + 1
            continue
        seen.add(post.post_id)
        if unresolved:
            page.incomplete[post.post_id] = raw
        else:
            page.posts.append(post)
    paging = as_obj(payload.get("paging"))
    has_next = isinstance(paging.get("next"), str) and bool(paging["next"])
    after = as_obj(paging.get("cursors")).get("after")
    page.next_cursor = after if has_next and isinstance(after, str) and _CURSOR_RE.fullmatch(after) else None
    page.is_last = not has_next
    return page


def parse_video_node(payload: Any, *, secrets: Iterable[str] = ()) -> tuple[str, float | None]:
    """``(source URL, length in seconds)`` of a ``/{video-id}?fields=source,length,format`` answer.

    Raises :class:`PlatformError` for error envelopes, and with kind ``not_found`` when the node has no usable
    ``source`` (Graph omits it when the token may not download that video)."""
    raise_for_error(payload, 200, secrets=secrets)
    source = _http_url(payload.get("source"))
    if not source:
        raise PlatformError("not_found", "video node without a source")
    return source, _float(payload.get("length"))


#: The fields a ``-a video=`` job asks of the video node: its media and what its record says of it.
VIDEO_FIELDS = "source,length,format,picture,permalink_url,from,created_time,title,description"


def post_from_video_node(
    payload: Any, video_id: str, *, source: Source | None = None, fetched_at: str | None = None,
    secrets: Iterable[str] = (),
) -> Post:
    """A ``/{video-id}?fields=…VIDEO_FIELDS`` answer as the record of that video: its permalink (Graph gives
    the path, ``/{page}/videos/{id}/``), owner (``from``), UTC time, and the description (else the title) as
    text. Raises like :func:`parse_video_node`."""
    url, length = parse_video_node(payload, secrets=secrets)
    owner = as_obj(payload.get("from"))
    owner_id = clean_id(owner.get("id"))
    link = payload.get("permalink_url")
    if isinstance(link, str) and link.startswith("/"):
        link = f"https://www.facebook.com{link}"
    text = as_text(payload.get("description")) or as_text(payload.get("title"))
    media = [MediaAsset(kind="video", key=f"video:{video_id}", url=url, duration=length)]
    # The cover: the largest format's picture (``native`` last), else ``picture`` (a small thumbnail).
    formats = payload.get("format")
    formats = [as_obj(f) for f in formats] if isinstance(formats, list) else []
    best = max(formats, key=lambda f: (as_int(f.get("width")) or 0), default={})
    cover = _http_url(best.get("picture")) or _http_url(payload.get("picture"))
    if cover:
        media.append(MediaAsset(kind="image", key=f"cover:{video_id}", url=cover, cover_of=f"video:{video_id}",
                                width=_dimension(best.get("width")), height=_dimension(best.get("height"))))
    return Post(
        platform=PLATFORM, post_id=video_id,
        url=_permalink(link, video_id),  # without a permalink: facebook.com/{video id}, which opens the video
        author=Author(id=owner_id, name=as_text(owner.get("name")) or None) if owner_id else None,
        created_at=parse_created_time(payload.get("created_time")), text=text, source=source,
        fetched_at=fetched_at, media=media,
    )

