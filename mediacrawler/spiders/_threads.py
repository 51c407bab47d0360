"""Comment threads (``-a comments``): the third kind of source, walked after a post's chain, before the post is
emitted (docs/architecture.md, "Sources": a thread's checkpoint shape, resume rule and completed rule).

A post whose comments are asked is held: its thread is walked one request at a time, top-level pages first (each
one's cursor from the page before), and the replies of each top-level comment that has more than the page showed,
page by page; comments are emitted as they are read, and the post last, with ``extra.comments_fetched`` (and
``extra.comments_closed``, the platform's reason, for a thread that cannot be read). A platform writes the hooks of
:class:`CommentThreads`; the state of one thread is a :class:`ThreadState` (plain JSON: it travels in ``meta`` and
in the checkpoint).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from scrapy import Request
from scrapy.http import Response
from twisted.python.failure import Failure

from mediacrawler import signals as mc_signals
from mediacrawler.config import setting
from mediacrawler.contracts import is_comment
from mediacrawler.items import Author, Comment, MediaAsset, Metrics, Post, Source
from mediacrawler.parsers._common import CommentPage
from mediacrawler.scrub import scrub
from mediacrawler.spiders._base import PlatformSpider
from mediacrawler.spiders._chain import UNREADABLE_ANSWER

logger = logging.getLogger(__name__)

#: The mark of a thread walked with nothing in it: any comment is newer.
_EMPTY: list[str | None] = ["0", None]
#: Comment id → root kept per thread for platforms whose pages list replies among comments (Facebook's stream).
_KNOWN_ROOTS = 5_000


@dataclass
class ThreadState:
    """Where one post's thread walk is: plain JSON (``asdict``), in ``meta`` and in the checkpoint.

    ``cursor``: what fetches the next top-level page (``None``: the first); ``roots``: the reply walks to do, each
    ``[root id, cursor, replies emitted, replies announced, replies
    listed inline still to pass over]``; ``fetched``: comments and replies emitted;
    ``since``: the newest top-level comment of the last complete walk (``[id, created_at]``, incremental), which
    ends the top-level walk; ``newest``: the newest one of this walk (the next ``since``); ``end_cursor``: the
    cursor after the last page walked (the next walk's start, :attr:`CommentThreads.resume_at_mark`)."""

    post_id: str
    thread_id: str
    cursor: str | None = None
    top_done: bool = False
    pages: int = 0
    top_level: int = 0
    fetched: int = 0
    roots: list[list[Any]] = field(default_factory=list)
    known: dict[str, str] = field(default_factory=dict)
    closed: str | None = None
    error: str | None = None
    since: list[str | None] | None = None
    newest: list[str | None] | None = None
    end_cursor: str | None = None
    #: The post is stored already (below the mark): only its new comments are emitted, not the post.
    refresh: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ThreadState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def post_from_json(d: dict[str, Any]) -> Post:
    """The inverse of ``dataclasses.asdict(post)`` (a post held in ``meta`` while its thread is walked)."""
    d = dict(d)
    d["media"] = [MediaAsset(**m) for m in d.get("media") or []]
    d["reposted"] = post_from_json(d["reposted"]) if d.get("reposted") else None
    d["metrics"] = Metrics(**(d.get("metrics") or {}))
    d["author"] = Author(**d["author"]) if d.get("author") else None
    d["source"] = Source(**d["source"]) if d.get("source") else None
    return Post(**d)


def _covers(since: list[str | None] | None, comment: Comment) -> bool:
    """Whether the mark ``since`` (``[id, created_at]``) is at or after ``comment`` (numeric ids compare as
    numbers, else the times do)."""
    if not since:
        return False
    mark_id, mark_time = since[0], since[1] if len(since) > 1 else None
    if mark_id and mark_id.isdigit() and comment.comment_id.isdigit():
        return int(comment.comment_id) <= int(mark_id)
    return bool(mark_time and comment.created_at and comment.created_at <= mark_time)


def _present(found: Any) -> Iterator[Any]:
    if found is not None:
        yield found


def _limit(value: Any) -> int | None:
    """``-a comments``/``-a replies`` as a bound: ``None`` for ``all``."""
    return None if value == "all" else int(value)


class CommentThreads(PlatformSpider):
    """A platform spider that walks the comment threads of its posts (``-a comments``). Platforms implement
    :meth:`comment_page_url`, :meth:`reply_page_url`, :meth:`parse_comment_page`, :meth:`parse_reply_page`, and
    :meth:`thread_id` when the API does not call a post by its ``post_id``."""

    queue_callbacks: ClassVar[frozenset[str]] = PlatformSpider.queue_callbacks | {"parse_thread_page",
                                                                                  "thread_page_failed"}
    #: True when the top-level pages list replies too (Facebook's ``filter=stream``): the reply walks of comments
    #: with more replies than were listed wait until the top-level walk has ended.
    replies_inline: ClassVar[bool] = False
    #: True when the top-level pages are oldest first with cursors that stay valid (Graph's ``after``): the mark
    #: keeps the cursor after the last page walked, and a re-run starts there, asking only for what came after.
    #: Otherwise the pages are newest first and a re-run reads from the top down to the mark.
    resume_at_mark: ClassVar[bool] = False

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Any:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.comment_scraped, signal=mc_signals.item_scraped_sync)
        crawler.signals.connect(spider.comment_dropped, signal=mc_signals.item_dropped_sync)
        return spider

    def comment_scraped(self, item: Any, spider: Any, **kwargs: Any) -> None:
        """``item_scraped``: comments are counted apart from posts (``comments/scraped``: metrics, the summary)."""
        if spider is self and is_comment(item):
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("comments/scraped")

    def comment_dropped(self, item: Any, spider: Any, **kwargs: Any) -> None:
        if spider is self and is_comment(item):
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("comments/dropped")

    # --- What a platform provides ----------------------------------------------------------------------------

    def thread_id(self, post: Post) -> str | None:
        """What the comment API calls ``post`` (``None``: it has no thread to read)."""
        return post.post_id

    def comment_page_url(self, state: ThreadState, cursor: str | None) -> str:
        """The URL of the top-level page after ``cursor`` (``None``: the first page)."""
        raise NotImplementedError

    def reply_page_url(self, state: ThreadState, root_id: str, cursor: str | None) -> str:
        """The URL of the page of replies of ``root_id`` after ``cursor`` (``None``: the first)."""
        raise NotImplementedError

    def parse_comment_page(self, response: Response, state: ThreadState, source: Source) -> CommentPage:
        """One top-level page (``state.cursor`` is ``None`` for the first); raises PlatformError or ValueError."""
        raise NotImplementedError

    def parse_reply_page(self, response: Response, state: ThreadState, root_id: str, source: Source
                         ) -> CommentPage:
        """One page of the replies of ``root_id``; raises PlatformError or ValueError."""
        raise NotImplementedError

    def thread_headers(self) -> dict[str, str] | None:
        return self.listing_headers() or None

    # --- The walk --------------------------------------------------------------------------------------------

    def emit_post(self, post: Post, source: Source) -> Request | Post:
        post = self.remember_media(post)
        if self.args.comments is None:
            return post
        thread_id = self.thread_id(post)
        if thread_id is None:
            post.extra["comments_closed"] = "no-thread"
            return post
        state = self._resumed(post.post_id) or self._new_state(post, thread_id, self.thread_mark(post))
        state.refresh = False  # this time the post is emitted (a stored state may be of a refresh)
        found = self._thread_next(state, asdict(post))
        assert found is not None  # only a refresh ends without its post
        return found

    def _resumed(self, post_id: str) -> ThreadState | None:
        """The stored state of ``post_id``'s thread when the checkpoint kept it open (a resumed run)."""
        resume = self.job_state.resume
        stored = resume.threads.get(post_id) if resume is not None else None
        if not isinstance(stored, dict):
            return None
        state = ThreadState.from_json(stored)
        logger.info("%s: post %s: thread resumed at its stored cursor (%d comments emitted before)", self.job,
                    post_id, state.fetched)
        return state

    def below_mark(self, posts: list[Post], waiting: dict[str, Any], source: Source) -> Iterator[Request]:
        """The threads of posts below the mark published within ``COMMENTS_REFRESH_DAYS``, walked down to their
        own marks (the posts are not emitted again: they are stored, so a post waiting for a step is read from
        what the listing gave)."""
        if self.args.comments is None:
            return
        for post_id, raw in waiting.items():
            try:
                posts.append(self.post_from_chain(self.chain_type(post_id=post_id, raw=raw), source,
                                                  missing="below the mark"))
            except UNREADABLE_ANSWER as e:
                logger.debug("%s: post %s below the mark: no thread to refresh (%s)", self.job, post_id, e)
        for post in posts:
            mark, thread_id = self.thread_mark(post), self.thread_id(post)
            if mark is None or thread_id is None or not self.within_refresh(post.created_at):
                continue
            state = self._resumed(post.post_id) or self._new_state(post, thread_id, mark)
            state.refresh = True
            logger.debug("%s: post %s is stored; refreshing its thread", self.job, post.post_id)
            found = self._thread_next(state, asdict(post))
            if isinstance(found, Request):
                yield found

    def _new_state(self, post: Post, thread_id: str, mark: list[str | None] | None) -> ThreadState:
        """A walk from the start, or down to ``mark`` (``[id, created_at]``, then its cursor when the platform
        resumes at the mark)."""
        state = ThreadState(post_id=post.post_id, thread_id=thread_id, since=mark[:2] if mark else None)
        if mark and self.resume_at_mark and len(mark) > 2 and mark[2]:
            # All the platform serves after the cursor is newer: nothing to stop at; the mark stays the newest
            # until a newer comment comes.
            state.cursor = state.end_cursor = mark[2]
            state.since, state.newest = None, mark[:2]
        return state

    def thread_mark(self, post: Post) -> list[str | None] | None:
        """The newest top-level comment of the last complete walk of ``post``'s thread (incremental; set by the
        marks extension in :attr:`JobState.thread_marks`), ``None`` for a full walk."""
        if getattr(self.args, "full", False):
            return None
        mark = self.job_state.thread_marks.get(post.post_id)
        return list(mark) if isinstance(mark, list) else None

    def within_refresh(self, created_at: str | None) -> bool:
        """Whether a post published at ``created_at`` is recent enough for its thread to be walked again."""
        if not created_at:
            return False
        days = setting(self.settings, "COMMENTS_REFRESH_DAYS")
        try:
            when = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        except ValueError:
            return False
        return datetime.now(UTC) - when <= timedelta(days=days)

    def _thread_next(self, state: ThreadState, post: dict[str, Any]) -> Request | Post | None:
        """The next request of the thread, or the post once it has ended (``None`` for a refresh)."""
        if state.error is None and state.closed is None:
            if state.pages >= setting(self.settings, "COMMENTS_MAX_PAGES"):
                state.error = f"stopped after COMMENTS_MAX_PAGES={state.pages} pages"
            elif state.roots and (state.top_done or not self.replies_inline):
                root = state.roots[0]
                return self._thread_request(self.reply_page_url(state, root[0], root[1]), state, post, root[0])
            elif not state.top_done:
                return self._thread_request(self.comment_page_url(state, state.cursor), state, post, None)
        if state.error:
            logger.warning("%s: post %s: comment thread incomplete: %s", self.job, state.post_id, state.error)
        # The final state (a resume emits the post at once), or none after an error (the next run walks again)
        # or for a refresh (no post follows to close it).
        final = None if state.error or state.refresh else asdict(state)
        mark = None
        if state.error is None:
            mark = list((state.newest or state.since or _EMPTY)[:2])
            if self.resume_at_mark and state.end_cursor:
                mark.append(state.end_cursor)
        self.crawler.signals.send_catch_log(signal=mc_signals.thread_progress, spider=self, post_id=state.post_id,
                                            state=final, comment_ids=[], done=True, mark=mark)
        if state.refresh:
            logger.info("%s: post %s (stored before): %d new comments", self.job, state.post_id, state.fetched)
            return None
        done = post_from_json(post)
        done.extra["comments_fetched"] = state.fetched
        if state.closed:
            done.extra["comments_closed"] = state.closed
        if state.error:
            done.extra["comments_incomplete"] = state.error
        return done

    def _thread_request(self, url: str, state: ThreadState, post: dict[str, Any], root: str | None) -> Request:
        # dont_filter: a thread's pages are its own; a URL repeated across runs (JOBDIR) must still be answered.
        return Request(url, callback=self.parse_thread_page, errback=self.thread_page_failed,
                       headers=self.thread_headers(), dont_filter=True,
                       meta={"mc_api": True, "mc_thread": asdict(state), "mc_thread_root": root, "mc_post": post})

    def _comment_source(self) -> Source:
        return Source(spider=self.name, job=self.job)

    def parse_thread_page(self, response: Response) -> Iterator[Any]:
        state = ThreadState.from_json(response.meta["mc_thread"])
        root: str | None = response.meta.get("mc_thread_root")
        post: dict[str, Any] = response.meta["mc_post"]
        source = self._comment_source()
        try:
            if root is None:
                page = self.parse_comment_page(response, state, source)
            else:
                page = self.parse_reply_page(response, state, root, source)
        except UNREADABLE_ANSWER as e:
            state.error = f"unreadable comment page: {scrub(str(e))}"
            yield from _present(self._thread_next(state, post))
            return
        before = asdict(state)  # the state that fetches this page again (a resume starts here)
        state.pages += 1
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value(f"{self.platform}/comment_pages")
        comments = self._take_top(state, page) if root is None else self._take_replies(state, page, root)
        # Sent before any comment leaves: the checkpoint holds this state until they are all stored.
        self.crawler.signals.send_catch_log(signal=mc_signals.thread_progress, spider=self, post_id=state.post_id,
                                            state=before, comment_ids=[c.comment_id for c in comments], mark=None,
                                            done=False)
        state.fetched += len(comments)
        yield from comments
        yield from _present(self._thread_next(state, post))

    def _take_top(self, state: ThreadState, page: CommentPage) -> list[Comment]:
        """The comments of a top-level page within ``-a comments`` (and replies within ``-a replies``, when the
        page lists them); moves the cursor and queues reply walks."""
        top_limit, reply_limit = _limit(self.args.comments), _limit(self.args.replies or "all")
        if page.closed is not None:
            state.closed, state.top_done = page.closed, True
            return []
        kept: list[Comment] = []
        roots = {r[0]: r for r in state.roots}
        limited = False
        for comment in page.comments:
            if comment.parent_id is None:
                if top_limit is not None and state.top_level >= top_limit:
                    state.top_done = limited = True
                    break
                if _covers(state.since, comment):
                    if comment.pinned or self.resume_at_mark:
                        # Pinned comments come first whatever their age, and oldest-first pages (a mark without
                        # its cursor) list the older ones before the new: passed over, they never end the walk.
                        continue
                    state.top_done = True  # the rest of the thread was walked by an earlier run
                    break
                state.top_level += 1
                # The newest, not the first: a first walk may be hot first (Bilibili's mode=3).
                if not comment.pinned and not _covers(state.newest, comment):
                    state.newest = [comment.comment_id, comment.created_at]
                state.known[comment.comment_id] = comment.comment_id
                if reply_limit != 0 and (self.replies_inline or (comment.metrics.replies or 0) > 0):
                    entry = [comment.comment_id, None, 0, comment.metrics.replies, 0]
                    state.roots.append(entry)
                    roots[comment.comment_id] = entry
                kept.append(comment)
            elif (entry := roots.get(comment.root_id)) is not None and (reply_limit is None
                                                                         or entry[2] < reply_limit):
                entry[2] += 1  # a reply listed among the comments (inline): counted against its root's bound
                if len(state.known) < _KNOWN_ROOTS:
                    state.known[comment.comment_id] = comment.root_id
                kept.append(comment)
        if page.end_cursor and not limited:
            state.end_cursor = page.end_cursor
        if not state.top_done:
            state.cursor = page.next_cursor
            state.top_done = page.is_last or page.next_cursor is None
        if self.replies_inline:
            # Kept: the comments whose replies may still come (bounded, like ``known``); at the end of the walk
            # those with more replies than were listed get their own walk, passing over the ones listed.
            state.roots = [r for r in state.roots if r[2] < (r[3] or 0) and (
                reply_limit is None or r[2] < reply_limit)][:_KNOWN_ROOTS]
            if state.top_done:
                state.roots = [[*r[:4], r[2]] for r in state.roots]
        return kept

    def _take_replies(self, state: ThreadState, page: CommentPage, root: str) -> list[Comment]:
        """The replies of a reply page within ``-a replies``; moves that walk's cursor, or ends it."""
        reply_limit = _limit(self.args.replies or "all")
        entry = state.roots[0]
        kept = []
        for comment in page.comments:
            if comment.parent_id is None or comment.comment_id == root:
                continue
            if entry[4] > 0:  # listed inline already, in the same (time) order
                entry[4] -= 1
                continue
            if reply_limit is not None and entry[2] >= reply_limit:
                break
            entry[2] += 1
            kept.append(comment)
        entry[1] = page.next_cursor
        if page.closed is not None or page.is_last or page.next_cursor is None or (
                reply_limit is not None and entry[2] >= reply_limit):
            state.roots.pop(0)
        return kept

    def thread_page_failed(self, failure: Failure) -> Iterator[Any]:
        request = failure.request  # type: ignore[attr-defined]
        state = ThreadState.from_json(request.meta["mc_thread"])
        state.error = scrub(failure.getErrorMessage())
        # The post is emitted all the same, saying its thread is incomplete (the next run walks it again).
        yield from _present(self._thread_next(state, request.meta["mc_post"]))
