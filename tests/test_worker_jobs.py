"""A worker's spider takes one job after another (distributed/worker.py): each job's state is the state a crawl of
that job builds from its constructor (``setup_job``), never the previous job's; in process, no Redis needed (the
end-to-end runs are tests/test_workers_platforms.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from mediacrawler.media.store import ContentAddressedStore
from mediacrawler.media.video import VideoDownloader
from mediacrawler_sandbox import douyin, xhs
from mediacrawler.spiders.bilibili import BilibiliSpider
from mediacrawler.spiders.douyin import DouyinSpider
from mediacrawler.spiders.xhs import XhsSpider
from tests.utils import project_crawler

#: No server is contacted: building a worker and handing it jobs touches no Redis.
REDIS_URL = "redis://127.0.0.1:1/0"
NOTES = xhs.build_xhs_world(seed=1).user_notes()


def note_url(note: xhs.XhsNote) -> str:
    return f"https://www.xiaohongshu.com/explore/{note.id}?xsec_token={quote(note.xsec_token, safe='')}"


def worker(spidercls: type[Any], tmp_path: Path) -> Any:
    spider = spidercls.from_crawler(project_crawler(spidercls, REDIS_URL=REDIS_URL,
                                                    FILES_STORE=str(tmp_path / "files")))
    assert spider.worker_id and spider.job_queue is None and not hasattr(spider, "args")
    return spider


def plain(spidercls: type[Any], **args: str) -> Any:
    """The spider of a crawl of one job with these arguments (no Redis: not a worker)."""
    return spidercls.from_crawler(project_crawler(spidercls, REDIS_URL=""), **args)


def test_each_xhs_job_opens_its_own_notes_with_their_tokens(tmp_path: Path) -> None:
    spider = worker(XhsSpider, tmp_path)
    for job in ({"note": f"{note_url(NOTES[0])},{note_url(NOTES[1])}"}, {"note": note_url(NOTES[2])},
                {"user": xhs.USER_ID}):
        spider.take_job(job)
        crawl = plain(XhsSpider, **job)
        assert (spider.job, spider.job_queue) == (crawl.job, crawl.job)
        assert spider.refs == crawl.refs and spider._tokens == crawl._tokens
        assert (spider.job_state.kind, spider.job_state.items) == (crawl.job_state.kind, crawl.job_state.items)
        first = [r.url for r in spider.first_requests()]
        assert first == [r.url for r in crawl.first_requests()] and len(first) == 1
    # -a user: no note of the earlier jobs is left
    assert spider.refs == [] and spider.job_state.kind == "listing" and spider.job_state.items == []


def test_each_bilibili_and_douyin_job_has_its_own_targets(tmp_path: Path) -> None:
    bili = worker(BilibiliSpider, tmp_path)
    # Its constructor ran: no WBI key read yet (start() reads it), so URLs go unsigned rather than fail.
    assert bili.signed("/x/player/wbi/playurl", {"cid": 1}).endswith("/x/player/wbi/playurl?cid=1")
    bili.take_job({"bvid": "BV1Sbx411A01,BV1Sbx411A02"})
    assert bili.job_state.items == ["BV1Sbx411A01", "BV1Sbx411A02"] and bili.job_state.kind == "items"
    bili.take_job({"mid": "2"})
    assert bili.job_state.items == [] and bili.job_state.kind == "listing"
    assert bili.job == plain(BilibiliSpider, mid="2").job

    dy = worker(DouyinSpider, tmp_path)
    first, second = douyin.VIDEO_AWEMES
    dy.take_job({"aweme": first})
    dy._named_twice(first, "id", first)  # the first job read it
    dy.take_job({"aweme": f"{second},{first}"})
    assert dy.job_state.items == [f"id:{second}", f"id:{first}"]
    assert dy.job_state.items == plain(DouyinSpider, aweme=f"{second},{first}").job_state.items
    assert not dy._named_twice(first, "id", first)  # a new job: not "named twice" by the earlier one


def test_a_job_whose_arguments_are_refused_says_why_in_one_line(tmp_path: Path) -> None:
    spider = worker(BilibiliSpider, tmp_path)
    with pytest.raises(ValueError, match=r"^bilibili: invalid argument bvid='cv1': must be video ids"):
        spider.take_job({"bvid": "cv1"})
    with pytest.raises(ValueError, match="give exactly one of"):
        spider.take_job({})


def test_the_video_settings_follow_each_jobs_max_height(tmp_path: Path) -> None:
    spider = worker(BilibiliSpider, tmp_path)
    spider.crawler.spider = spider
    videos = VideoDownloader(spider.crawler, store=ContentAddressedStore(str(tmp_path / "files")),
                             spool_dir=tmp_path / "spool")
    spider.take_job({"bvid": "BV1Sbx411A01", "max_height": "480"})
    assert videos.config.max_height == 480
    spider.take_job({"bvid": "BV1Sbx411A01", "max_height": "720"})
    assert videos.config.max_height == 720
