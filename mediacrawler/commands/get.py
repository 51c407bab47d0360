"""``mediacrawler get <URL>… [-f links.txt] [-a NAME=value …] [-s NAME=value …]``: crawl share links.

Each link is routed by :func:`mediacrawler.links.route` to its spider and target (``bilibili.com/video/BV…`` →
``bilibili -a bvid=BV…``); a short link (``b23.tv``, ``xhslink.com``) is first followed by its redirects from the
root its setting names (``BILIBILI_SHORT_URL``, ``XHS_SHORT_URL``), at most ``LINKS_MAX_REDIRECTS`` hops, each hop
checked as a media redirect is (http/https, no credentials in the URL), and only short-link hosts are requested.
Every target is then one crawl of its own (its own job, checkpoint and output file), run side by side in this
process with the settings of ``scrapy crawl`` (``SCRAPY_SETTINGS_MODULE`` honoured); an ``-a`` goes to each crawl
whose spider takes it. A link that is not recognised, or whose short link cannot be followed, is one line naming
it; the other links go on, and the exit status is then 1. See docs/platforms.md, "Links".
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings
from scrapy.spiderloader import get_spider_loader

from mediacrawler.commands.crawl import Command as CrawlCommand
from mediacrawler.commands.crawl import startup_problem
from mediacrawler.commands.options import add_settings_option, command_settings
from mediacrawler.config import setting
from mediacrawler.fsutil import TooLarge, read_bounded
from mediacrawler.links import SHORT_LINK, Route, UnknownLink, route
from mediacrawler.media.urls import media_url_problem, strip_userinfo
from mediacrawler.spiders._args import validate_args


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are answered, never followed: each hop is checked and routed here."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def resolve(link: str, short: Route, settings: BaseSettings) -> Route:
    """The route of the post a short link redirects to (:class:`UnknownLink` naming why it cannot be known)."""
    opener = urllib.request.build_opener(_NoRedirect)
    hops = setting(settings, "LINKS_MAX_REDIRECTS")
    timeout = setting(settings, "DOWNLOAD_TIMEOUT")
    current = short
    for _ in range(hops):
        url = str(settings.get(current.args["root"]) or "").rstrip("/") + current.args["path"]
        problem = media_url_problem(url, allowed_schemes=("http", "https"))
        if problem is not None:
            shown = strip_userinfo(url)[:200]
            raise UnknownLink(f"{link}: its short link cannot be followed ({problem}: {shown})")
        request = urllib.request.Request(url, headers={"User-Agent": str(setting(settings, "USER_AGENT"))})
        try:
            with opener.open(request, timeout=timeout) as answer:
                status, location = answer.status, answer.headers.get("Location")
        except urllib.error.HTTPError as e:  # a 3xx comes here, as redirects are not followed
            status, location = e.code, e.headers.get("Location")
        except (OSError, ValueError) as e:
            raise UnknownLink(f"{link}: its short link could not be read ({e.__class__.__name__}: {e})") from None
        if status not in (301, 302, 303, 307, 308) or not location:
            raise UnknownLink(f"{link}: its short link answered HTTP {status}, not a redirect")
        target = urljoin(url, location)
        problem = media_url_problem(target, allowed_schemes=("http", "https"))
        if problem is not None:
            raise UnknownLink(f"{link}: its short link redirects to a refused URL ({problem})")
        current = route(target)  # UnknownLink: it names the URL the short link led to
        if current.spider != SHORT_LINK:
            return current
    raise UnknownLink(f"{link}: its short link took more than {hops} redirects (LINKS_MAX_REDIRECTS)")


def read_links(path: str, settings: BaseSettings) -> list[str]:
    """The links of a file, one a line (blank lines and ``#`` comments skipped), read with a bound."""
    limit = setting(settings, "LINKS_FILE_MAX_BYTES")
    try:
        text = read_bounded(Path(path).expanduser(), limit).decode("utf-8")
    except TooLarge:
        raise UsageError(f"-f {path}: larger than {limit} bytes (LINKS_FILE_MAX_BYTES)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"-f {path}: cannot read it ({e.__class__.__name__})") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _pairs(values: Sequence[str]) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"-a {value!r}: expected NAME=VALUE")
        pairs[name.strip()] = rest
    return pairs


def main(argv: Sequence[str]) -> int:
    """Run ``mediacrawler get``; 0 when every link was crawled completely."""
    parser = argparse.ArgumentParser(prog="mediacrawler get", description=__doc__.splitlines()[0])
    parser.add_argument("links", nargs="*", metavar="URL", help="share links (posts, videos, accounts, lists)")
    parser.add_argument("-f", "--file", action="append", default=[], metavar="FILE", help="a file of links")
    parser.add_argument("-a", action="append", default=[], dest="spargs", metavar="NAME=VALUE",
                        help="a spider argument, as with scrapy crawl -a (to each crawl whose spider takes it)")
    add_settings_option(parser)
    opts = parser.parse_args(argv)
    try:
        settings = command_settings(opts.set)
        spargs = _pairs(opts.spargs)
        links = [*opts.links, *(link for path in opts.file for link in read_links(path, settings))]
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    problem = startup_problem(settings)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if not links:
        print("error: give one or more links (or -f FILE)", file=sys.stderr)
        return 2
    loader = get_spider_loader(settings)
    jobs: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, dict[str, str], list[str]]] = {}
    failed: list[str] = []
    used: set[str] = set()
    for link in links:
        try:
            found = route(link)
            if found.spider == SHORT_LINK:
                found = resolve(link, found, settings)
        except UnknownLink as e:
            print(f"error: {e}", file=sys.stderr)
            failed.append(link)
            continue
        spidercls = loader.load(found.spider)
        fields = spidercls.params_model.model_fields
        kwargs = {**{k: v for k, v in spargs.items() if k in fields}, **found.args}
        error = validate_args(spidercls, kwargs)
        if error:
            print(f"error: {link}: {error}", file=sys.stderr)
            failed.append(link)
            continue
        used.update(k for k in spargs if k in fields)
        jobs.setdefault((found.spider, tuple(sorted(kwargs.items()))), (found.spider, kwargs, []))[2].append(link)
    unused = sorted(set(spargs) - used)
    if jobs and unused:
        print(f"error: -a {', '.join(unused)}: taken by none of the spiders of these links", file=sys.stderr)
        return 2
    status = 1 if failed else 0
    if jobs:
        status = max(status, _crawl(settings, list(jobs.values())))
    if failed:
        print(f"error: {len(failed)} of {len(links)} link(s) not crawled: {', '.join(failed)}", file=sys.stderr)
    return status


def _crawl(settings: BaseSettings, jobs: list[tuple[str, dict[str, str], list[str]]]) -> int:
    """Run one crawl per job side by side; the exit status of ``scrapy crawl`` for the worst of them."""
    from scrapy.crawler import AsyncCrawlerProcess

    process = AsyncCrawlerProcess(settings)
    runs = []
    for name, kwargs, links in jobs:
        crawler = process.create_crawler(name)
        runs.append((crawler, links))
        process.crawl(crawler, **kwargs)
    process.start()
    if process.bootstrap_failed:
        return 1
    status = 0
    for crawler, links in runs:
        job = str(getattr(crawler.spider, "job", None) or crawler.spidercls.name)
        status = max(status, CrawlCommand._exit_status(job, crawler))
        assert crawler.stats is not None
        posts = crawler.stats.get_value("item_scraped_count", 0)
        print(f"{job}: {posts} post(s) stored from {', '.join(links)}", file=sys.stderr)
    return status
