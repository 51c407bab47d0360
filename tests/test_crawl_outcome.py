"""The crawl command's one judgement of a closed crawl's listing (``commands/crawl.listing_outcome``), on a real
spider built by a test crawler: every way a source can end short is one ``error:`` line and exit status 1."""

from __future__ import annotations

from scrapy.utils.test import get_crawler

from mediacrawler.commands.crawl import Command, listing_outcome
from mediacrawler.jobstate import job_state
from mediacrawler.spiders.weibo import WeiboSpider


def closed_crawler(**stats: object) -> object:
    crawler = get_crawler(WeiboSpider, {})
    crawler.spider = WeiboSpider.from_crawler(crawler, uid="7365120894")
    assert crawler.stats is not None
    crawler.stats.set_value("finish_reason", "finished")
    for key, value in stats.items():
        crawler.stats.set_value(key.replace("__", "/"), value)
    return crawler


def test_a_complete_listing_has_no_problem() -> None:
    crawler = closed_crawler()
    crawler.spider.job_state.exhausted = True  # type: ignore[attr-defined]
    assert listing_outcome("weibo", crawler) == []  # type: ignore[arg-type]
    assert Command._exit_status("weibo", crawler) == 0  # type: ignore[arg-type]


def test_a_spider_exception_is_exit_1_with_one_line(capsys: object) -> None:
    crawler = closed_crawler(**{"spider_exceptions__count": 2, "spider_exceptions__RecursionError": 2})
    crawler.spider.job_state.exhausted = True  # type: ignore[attr-defined]
    lines = listing_outcome("weibo", crawler)  # type: ignore[arg-type]
    assert len(lines) == 1
    assert lines[0].startswith("weibo: 2 spider exception(s) (RecursionError; see the tracebacks in the log)")
    assert "run the same command again" in lines[0]
    assert Command._exit_status("weibo", crawler) == 1  # type: ignore[arg-type]


def test_a_failed_page_is_quoted_with_its_reason() -> None:
    crawler = closed_crawler()
    spider = crawler.spider
    state = job_state(spider)
    assert state is not None
    state.pages_failed = 1
    state.failed_reasons[3] = "the listing stopped at a repeated cursor: page 2 gave 'c'"
    assert listing_outcome("weibo", crawler) == [  # type: ignore[arg-type]
        "weibo: 1 listing page(s) failed for good (the first at page 3: the listing stopped at a repeated cursor: page 2 gave "
        "'c'; see the log); run the same command again to fetch them, the checkpoint keeps their place"]


def test_a_listing_that_ended_short_without_a_reason_is_exit_1() -> None:
    crawler = closed_crawler()
    crawler.spider.job_state.pages_fetched = 4  # type: ignore[attr-defined]
    [line] = listing_outcome("weibo", crawler)  # type: ignore[arg-type]
    assert line.startswith("weibo: the listing ended after 4 page(s) without the platform's end-of-list signal")
    # Each explained end is no problem: the mark, max_pages, another close reason (already in the log).
    for attr in ("stopped_at_mark", "stopped_at_max_pages"):
        crawler = closed_crawler()
        setattr(crawler.spider.job_state, attr, True)  # type: ignore[attr-defined]
        assert listing_outcome("weibo", crawler) == []  # type: ignore[arg-type]
    crawler = closed_crawler(finish_reason="closespider_pagecount")
    assert listing_outcome("weibo", crawler) == []  # type: ignore[arg-type]
