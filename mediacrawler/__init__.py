"""mediacrawler: a Scrapy-based crawler for posts, images and videos."""

__version__ = "0.1.0"
