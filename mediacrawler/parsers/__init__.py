"""Platform parsers: pure functions from decoded payloads to records. No Scrapy imports here."""
