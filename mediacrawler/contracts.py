"""What several layers share: exceptions that cross from downloader middlewares to spiders and pipelines.

Nothing here imports another project module, so any layer may import it (docs/architecture.md).
"""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest


class PlatformRefused(IgnoreRequest):
    """The platform refused the whole job (login required, token invalid); the spider is being closed."""


class RequestRefused(IgnoreRequest):
    """A request given up on purpose, with a short machine-readable ``reason`` (``too-large``,
    ``scheme-not-allowed``, …) that records and stats use (``media/failed/<reason>``); ``detail`` is for people
    and never holds a secret."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class BodyTooLarge(RequestRefused):
    """A response body, compressed or not, went past the limit of its kind of request while it was read or
    inflated (PLATFORM_API_MAXSIZE, MEDIA_MAXSIZE; middlewares/body_limits.py)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("too-large", detail)
