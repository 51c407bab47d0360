"""XiaoHongShu: given notes (``-a note=``, ``-a notes_file=``) or the notes a profile page carries (``-a user=``).

    scrapy crawl xhs -a note='https://www.xiaohongshu.com/explore/<id>?xsec_token=…&xsec_source=pc_feed'
    scrapy crawl xhs -a notes_file=notes.txt        (one note URL per line, as copied from the browser)
    scrapy crawl xhs -a user=<24-hex user id>

Signature-free routes only: the server-rendered note page ``{XHS_WEB_URL}/explore/{id}?xsec_token=…`` (one listing
page per note, like Bilibili's ``-a bvid``) and the profile page ``/user/profile/{id}``, whose notes are each read
from their own note page (a chain step; when that fails the record keeps what the profile card said). Further
profile pages need the signed ``X-S``/``X-T`` APIs, which this project does not compute: the spider says so. Pages
are HTML, so :meth:`XhsSpider.classify_response` reads them: HTTP 461 and code 300012 back off, then the page fails
with that reason. XHS_COOKIE, when set, goes with page requests at download time. See docs/platforms.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode

from pydantic import Field, field_validator, model_validator
from scrapy import Request
from scrapy.http import Response
from scrapy.settings import BaseSettings, Settings

from mediacrawler.config import setting
from mediacrawler.fsutil import TooLarge, read_bounded
from mediacrawler.items import Post, Source
from mediacrawler.jobstate import SourceKind
from mediacrawler.parsers import xhs as parser
from mediacrawler.parsers._common import Page, PlatformError, job_slug
from mediacrawler.spiders._args import Args, SpiderParams, one_target
from mediacrawler.spiders._base import PlatformSpider
from mediacrawler.spiders._chain import Chain, Step

#: Notes one job may name (``-a note`` or ``-a notes_file``).
MAX_NOTES = 1000


def _refs(text: str, *, what: str) -> list[tuple[str, str | None, str | None]]:
    """``(id, xsec_token, xsec_source)`` of each note in ``text`` (comma- or line-separated; ``#`` comments),
    first mention of an id wins; ValueError naming the first bad entry."""
    refs: dict[str, tuple[str, str | None, str | None]] = {}
    for number, line in enumerate(text.replace(",", "\n").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            ref = parser.note_ref(line)
        except ValueError as e:
            raise ValueError(f"{what} entry {number}: {e}") from None
        refs.setdefault(ref[0], ref)
    if not refs:
        raise ValueError(f"{what} names no note")
    if len(refs) > MAX_NOTES:
        raise ValueError(f"{what} names {len(refs)} notes; at most {MAX_NOTES} per job")
    return list(refs.values())


def _read_notes_file(path: str, settings: BaseSettings | None = None) -> str:
    """The text of a notes file, read with a bound (``XHS_NOTES_FILE_MAX_BYTES``, ``XHS_NOTES_FILE_MAX_LINES``:
    ``/dev/zero`` or a huge file is refused, never read whole). Argument validation has no crawl settings yet:
    it checks with the defaults of settings.py."""
    settings = settings if settings is not None else Settings()
    max_bytes: int = setting(settings, "XHS_NOTES_FILE_MAX_BYTES")
    max_lines: int = setting(settings, "XHS_NOTES_FILE_MAX_LINES")
    try:
        text = read_bounded(Path(path).expanduser(), max_bytes).decode("utf-8")
    except TooLarge:
        raise ValueError(f"larger than {max_bytes} bytes (XHS_NOTES_FILE_MAX_BYTES)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read it: {e.__class__.__name__}") from None
    if text.count("\n") > max_lines:
        raise ValueError(f"more than {max_lines} lines (XHS_NOTES_FILE_MAX_LINES)")
    return text


class XhsParams(SpiderParams):
    """Arguments of ``scrapy crawl xhs``: exactly one of ``note``, ``notes_file`` and ``user``."""

    comments_refused: ClassVar[str | None] = (
        "XHS's comment API needs signatures made in a browser by its web page's own script; out of scope here")

    note: str | None = Field(default=None, description="Note ids or note URLs (with their xsec_token), "
                                                        "comma-separated.")
    notes_file: str | None = Field(default=None, description="A file of note URLs, one per line.")
    user: str | None = Field(default=None, description="A user id (or profile URL): the notes its profile page "
                                                       "carries.")

    @field_validator("note")
    @classmethod
    def _notes(cls, v: str | None) -> str | None:
        if v is not None:
            _refs(v, what="note")
        return v

    @field_validator("notes_file")
    @classmethod
    def _file(cls, v: str | None) -> str | None:
        if v is not None:
            _refs(_read_notes_file(v), what="notes_file")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        return parser.user_ref(v) if v is not None else None

    @model_validator(mode="after")
    def _one_target(self) -> XhsParams:
        message = "give exactly one of -a note=<id or URL>[,…], -a notes_file=<path> or -a user=<id>"
        return one_target(self, names=("note", "notes_file", "user"), message=message, items=("note", "notes_file"))


@dataclass
class XhsChain(Chain):
    """A note of a profile: what its own page says (:func:`parser.read_note_page`), once read."""

    read: dict[str, Any] | None = None


class XhsSpider(Args[XhsParams], PlatformSpider):
    """Crawls XiaoHongShu notes into :class:`~mediacrawler.items.Post` records (images and the video)."""

    name = "xhs"
    platform = "xhs"
    chain_type = XhsChain
    root_settings = ("XHS_WEB_URL",)
    params_model = XhsParams
    args: XhsParams

    def setup_job(self) -> None:
        #: The notes given, in order (empty with ``-a user``).
        self.refs: list[tuple[str, str | None, str | None]] = []
        if self.args.note is not None:
            self.refs = _refs(self.args.note, what="note")
        elif self.args.notes_file is not None:
            settings = getattr(self, "settings", None)  # a worker has them; a crawl's __init__ runs before
            self.refs = _refs(_read_notes_file(self.args.notes_file, settings), what="notes_file")
        #: note id → (xsec_token, xsec_source) of every note this job knows how to open.
        self._tokens: dict[str, tuple[str | None, str | None]] = {n: (t, s) for n, t, s in self.refs}
        super().setup_job()

    def source_kind(self) -> SourceKind:
        return "listing" if self.args.user is not None else "items"

    def requested_items(self) -> list[str]:
        return [note_id for note_id, _, _ in self.refs]

    def job_key(self) -> str:
        if self.args.user is not None:
            return f"xhs-user-{self.args.user}"
        ids = [n for n, _, _ in self.refs]
        return f"xhs-note-{ids[0]}" if len(ids) == 1 else f"xhs-notes-{job_slug('-'.join(ids), max_len=24)}"

    @property
    def web(self) -> str:
        return str(setting(self.settings, "XHS_WEB_URL")).rstrip("/")

    def note_page_url(self, note_id: str, *, default_source: str | None = None) -> str:
        """``{XHS_WEB_URL}/explore/{id}`` with the note's ``xsec_token`` and ``xsec_source`` when known."""
        token, source = self._tokens.get(note_id, (None, None))
        query = {"xsec_token": token, "xsec_source": source or default_source} if token else {}
        return f"{self.web}/explore/{note_id}" + (f"?{urlencode(query)}" if query else "")

    def listing_headers(self) -> dict[str, str]:
        return {"Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8", "Referer": f"{self.web}/"}

    # --- the notes given (one request each), or the profile page ---------------------------------------------
    def listing_url(self, page: int, cursor: str | None) -> str:
        return f"{self.web}/user/profile/{self.args.user}"

    def item_url(self, item: str) -> str:
        return self.note_page_url(item)

    def classify_response(self, response: Response) -> str:
        # HTML pages (or a JSON error body): HTTP 461 and code 300012 mean "slow down".
        return parser.classify_page(response.status, response.body)

    def parse_listing_payload(self, response: Response, source: Source) -> Page:
        return self._profile(response.text)

    def parse_item_payload(self, response: Response, source: Source, item: str) -> Page:
        post = parser.parse_note_page(response.text, note_id=item, source=source, fetched_at=self.now_iso())
        if post.deleted:
            self.logger.warning("xhs: note %s is unavailable: %s", item, post.extra.get("unavailable"))
        return Page(posts=[post])

    def _profile(self, html: str) -> Page:
        user = str(self.args.user)
        profile = parser.parse_profile_page(html, user_id=user)
        if profile.unavailable:
            raise PlatformError("not_found", f"user {user}: {profile.unavailable}")
        page = Page(is_last=True)
        for note in profile.notes:
            self._tokens.setdefault(note.note_id, (note.xsec_token, "pc_user"))
            # The card has no time: its id's (an ObjectId) lets the high-water mark judge it (listed_time).
            page.incomplete[note.note_id] = {"card": note.card, "created_at": note.listed_at}
        self.logger.info("xhs: the profile page of %s carries %d notes; further pages need signed APIs (X-S/X-T) "
                         "this project does not use%s", user, len(profile.notes),
                         "" if profile.has_more else " (the profile says it has no more)")
        return page

    # --- a profile's note: its own page, as a chain step ------------------------------------------------------
    def next_step(self, chain: XhsChain) -> Step | None:
        if chain.read is not None:
            return None
        return Step("note", self.note_page_url(chain.post_id, default_source="pc_user"),
                    headers=self.listing_headers())

    def parse_step(self, response: Response, chain: XhsChain) -> None:
        chain.read = parser.read_note_page(response.text, note_id=chain.post_id)

    def post_from_chain(self, chain: XhsChain, source: Source, *, missing: str | None) -> Post:
        note_id, read = chain.post_id, chain.read
        if read is None:
            post = parser.post_from_card(chain.raw.get("card") or {}, note_id=note_id, source=source,
                                         fetched_at=self.now_iso())
        else:
            post = parser.post_from_read(read, note_id=note_id, source=source, fetched_at=self.now_iso())
            if parser.card_pinned(chain.raw.get("card") or {}):
                post.extra["pinned"] = True  # only the profile card says so; never a mark, never a stop
        if missing is not None:
            post.extra["incomplete"] = missing
        return post

    # --- expired media URLs: read the note page again ---------------------------------------------------------
    def post_request(self, post_id: str) -> Request | None:
        return Request(self.note_page_url(post_id), headers=self.listing_headers(), dont_filter=True,
                       meta={"mc_api": True, "mc_optional": True})

    def parse_post_payload(self, response: Response, source: Source) -> Post | None:
        note_id = response.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        post = parser.parse_note_page(response.text, note_id=note_id, source=source, fetched_at=self.now_iso())
        return None if post.deleted else post
