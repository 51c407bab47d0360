"""A post's chain of steps: the requests a post needs beyond its listing, and the typed state they build
(docs/architecture.md, "Platform contract"). Each platform declares its own :class:`Chain` subclass; the state
travels in ``meta`` as plain JSON (:meth:`Chain.to_json`), so JOBDIR and the shared queue can store it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.http import Response
from twisted.python.failure import Failure

from mediacrawler.contracts import REFRESH_ONLY
from mediacrawler.items import Post, Source, as_plain
from mediacrawler.parsers._common import PlatformError
from mediacrawler.scrub import scrub

if TYPE_CHECKING:
    from typing import Self

    from mediacrawler.spiders._base import PlatformSpider

logger = logging.getLogger("mediacrawler.spiders._base")  # one log channel for the spider flow, as before

#: What a parser may raise for an answer it cannot read: the page or step fails with the reason, the crawl goes on.
UNREADABLE_ANSWER = (PlatformError, ValueError, TypeError, KeyError, OverflowError, RecursionError)


@dataclass
class Step:
    """One request of a post's chain: a ``name`` for logs and records (``"extend"``, ``"playurl:123"``), the URL,
    and extra headers (never credentials)."""

    name: str
    url: str
    headers: dict[str, str] | None = None


@dataclass
class Chain:
    """The state of one post's chain: the post id, what the listing gave (``raw``, plain JSON) and the name of the
    step last sent. A platform's subclass adds, as typed fields of plain JSON values (no tuples, no sets), what
    its steps keep."""

    post_id: str
    raw: dict[str, Any]
    #: The name of the step last sent (``None`` before the first).
    step: str | None = None
    #: Read again only for its counts (``-a refresh``): the post is flagged when the chain ends.
    refresh: bool = False

    def to_json(self) -> dict[str, Any]:
        """The chain as plain JSON (what ``meta["mc_chain"]`` holds), sharing no dict or list with the chain."""
        data: dict[str, Any] = as_plain(self)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """The chain :meth:`to_json` gave (fields it does not know, from another version, are ignored; fields it
        lacks take their defaults)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in names})


class ChainWalk:
    """Walks a post's chain: the platform's :meth:`next_step` until it says none, each answer kept by its
    :meth:`parse_step`, then the post from :meth:`post_from_chain` (a step that failed for good is named in it)."""

    def emit_post(self: PlatformSpider, post: Post, source: Source) -> Request | Post:
        """A complete post, emitted (spiders/_threads.py holds it while its comments are walked)."""
        return self.remember_media(post)

    def start_chain(self: PlatformSpider, post_id: str, raw: dict[str, Any], source: Source) -> Request | Post:
        """The first request of the chain that completes ``post_id``, or the post itself when none is needed."""
        chain = self.chain_type(post_id=post_id, raw=raw, refresh=post_id in self.job_state.refresh_ids)
        return self._advance_chain(chain, source)

    def _advance_chain(self: PlatformSpider, chain: Chain, source: Source, *,
                       missing: str | None = None) -> Request | Post:
        step = None if missing is not None else self.next_step(chain)
        if step is None:
            if missing is not None:
                assert self.crawler.stats is not None
                self.crawler.stats.inc_value(f"{self.platform}/incomplete_posts")
                logger.warning("%s: post %s is emitted without %s", self.job, chain.post_id, missing)
            post = self.post_from_chain(chain, source, missing=missing)
            if chain.refresh:
                post.extra[REFRESH_ONLY] = True
            return self.emit_post(post, source)
        chain.step = step.name
        # dont_filter: a step's URL may repeat (the same detail for two posts), and a request the duplicate filter
        # dropped would reach neither callback nor errback, leaving the post (and its page) unfinished for good.
        return Request(step.url, callback=self.parse_chain_step, errback=self.chain_step_failed,
                       headers=step.headers or None, dont_filter=True,
                       meta={"mc_api": True, "mc_page": source.page, "mc_cursor": source.cursor,
                             "mc_chain": chain.to_json()})

    def parse_chain_step(self: PlatformSpider, response: Response) -> Iterator[Request | Post]:
        chain = self.chain_type.from_json(response.meta["mc_chain"])
        source = self.source_for(response)
        try:
            self.parse_step(response, chain)
        except UNREADABLE_ANSWER as e:
            yield self._advance_chain(chain, source, missing=f"{chain.step}: {e}")
            return
        yield self._advance_chain(chain, source)

    def chain_step_failed(self: PlatformSpider, failure: Failure) -> Iterator[Request | Post]:
        request = failure.request  # type: ignore[attr-defined]
        chain = self.chain_type.from_json(request.meta["mc_chain"])
        # Even when the platform refused the job (the spider is closing), the post the page announced is emitted.
        yield self._advance_chain(chain, self.source_for(request),
                                  missing=f"{chain.step}: {scrub(failure.getErrorMessage())}")
