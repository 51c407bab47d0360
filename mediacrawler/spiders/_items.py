"""The ``items`` source kind: the ids or links a user gave (``-a bvid=A,B``), one after the other; the checkpoint
records which are done, no mark drops one (docs/architecture.md, "Sources"). A mixin of
:class:`~mediacrawler.spiders._base.PlatformSpider`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.http import Response
from twisted.python.failure import Failure

from mediacrawler import signals as mc_signals
from mediacrawler.contracts import PlatformRefused
from mediacrawler.scrub import scrub
from mediacrawler.spiders._chain import UNREADABLE_ANSWER
from mediacrawler.spiders._listing import LISTING_PRIORITY

if TYPE_CHECKING:
    from mediacrawler.spiders._base import PlatformSpider

logger = logging.getLogger("mediacrawler.spiders._base")  # one log channel for the spider flow, as before


class ItemsWalk:
    """Walks the requested items: :meth:`item_request` for one, :meth:`parse_item` for its answer, then the next
    one neither done by an earlier run nor requested in this one."""

    def item_request(self: PlatformSpider, item: str) -> Request:
        """The request for requested item ``item``. Never filtered as a duplicate: two entries may name one URL
        (a short link and its target), and a requested item must be answered or failed, never dropped."""
        state = self.job_state
        state.items_requested.add(item)
        if not self.distributed:  # distributed: another worker may answer it (the queue answers for it)
            state.item_pending = item
        return Request(self.item_url(item), callback=self.parse_item, errback=self.item_failed,
                       headers=self.listing_headers() or None, dont_filter=True,
                       meta={"mc_api": True, "mc_item": item}, priority=LISTING_PRIORITY)

    def _next_item(self: PlatformSpider, after: str | None) -> Iterator[Request]:
        """The request for the first item after ``after`` (``None``: from the start) neither done by an earlier
        run nor requested in this one; none left: the list is walked to its end (``exhausted``)."""
        state = self.job_state
        index = state.items.index(after) + 1 if after in state.items else 0
        rest = [i for i in state.items[index:] if i not in state.items_done and i not in state.items_requested]
        if after is None and state.items_done:
            logger.info("%s: %d of %d items done by an earlier run (checkpoint); %d left", self.job,
                        len(state.items_done & set(state.items)), len(state.items), len(rest))
        if not rest:
            state.exhausted = True
            return
        yield self.item_request(rest[0])

    def parse_item(self: PlatformSpider, response: Response) -> Iterator[Any]:
        item: str = response.meta["mc_item"]
        state = self.job_state
        if state.item_pending == item:
            state.item_pending = None
        source = self.source_for(response)
        try:
            page = self.parse_item_payload(response, source, item)
        except UNREADABLE_ANSWER as e:
            self._item_failed(item, f"unparseable answer: {e}")
            yield from self._next_item(item)
            return
        stats = self.crawler.stats
        assert stats is not None
        for reason, count in page.skipped.items():
            stats.inc_value(f"{self.platform}/skipped/{reason}", count)
        self.crawler.signals.send_catch_log(signal=mc_signals.requested_item_parsed, spider=self, item=item,
                                            post_ids=[p.post_id for p in page.posts] + list(page.incomplete))
        stats.inc_value(f"{self.platform}/items")
        # First: the next item is fetched while this one's posts go through the pipelines.
        yield from self._next_item(item)
        for post in page.posts:
            yield self.emit_post(post, source)
        for post_id, raw in page.incomplete.items():
            yield self.start_chain(post_id, raw, source)

    def item_failed(self: PlatformSpider, failure: Failure) -> Iterator[Any]:
        request = failure.request  # type: ignore[attr-defined]
        item: str = request.meta["mc_item"]
        if self.job_state.item_pending == item:
            self.job_state.item_pending = None
        reason, rerun_helps = self.listing_failure_reason(failure)
        self._item_failed(item, scrub(reason), rerun_helps=rerun_helps)
        if failure.check(PlatformRefused):
            return iter(())  # the platform refused the job itself (login required): the spider is closing
        return self._next_item(item)

    def _item_failed(self: PlatformSpider, item: str, reason: str, *, rerun_helps: bool = True) -> None:
        state = self.job_state
        state.items_failed.setdefault(item, reason)
        state.rerun_helps = bool(state.rerun_helps) or rerun_helps
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(f"{self.platform}/items_failed")
        logger.error("%s: item %s failed for good: %s", self.job, item, reason)
        self.crawler.signals.send_catch_log(signal=mc_signals.requested_item_failed, spider=self, item=item,
                                            reason=reason)
