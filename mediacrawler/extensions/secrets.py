"""SecretsExtension: the crawl's logs scrubbed of its credentials, and the public suffix list read offline.

Built first of the extensions (``EXTENSIONS``), before any middleware, pipeline or spider exists and before Scrapy
logs the overridden settings:

- registers the crawl's credentials with :mod:`mediacrawler.scrub` and has its
  :class:`~mediacrawler.scrub.ScrubFilter` run on every log record as it is made (a filter on Scrapy's root
  handler would not last: ``Crawler.crawl()`` replaces that handler right after building the extensions);
- points tldextract at ``PUBLIC_SUFFIX_LIST_URLS`` (empty by default: its bundled snapshot) through its
  ``TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS`` environment variable, which Scrapy's cookie middleware reads when it is
  imported with the downloader, after this. Left alone, the first ``Set-Cookie`` makes tldextract fetch the list
  from publicsuffix.org. An operator's own ``TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS`` wins.

See docs/operations.md, "Secrets in logs" and "No traffic but to the targets".
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mediacrawler.config import setting
from mediacrawler.scrub import install_log_scrubbing

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

TLDEXTRACT_ENV = "TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS"


class SecretsExtension:
    """Always on: see the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        install_log_scrubbing(crawler.settings)
        urls = setting(crawler.settings, "PUBLIC_SUFFIX_LIST_URLS")
        os.environ.setdefault(TLDEXTRACT_ENV, "\n".join(str(u) for u in urls))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)
