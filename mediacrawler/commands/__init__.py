"""Project commands (``COMMANDS_MODULE``); ``crawl`` here replaces Scrapy's own."""
