"""``mediacrawler web``: a small web application over what the crawls collected and the crawls themselves
(docs/web.md). ``queries`` reads the records database, ``files`` serves stored objects, ``crawls`` starts and
watches crawls, ``jobs`` gathers the job stores, ``app`` wires them into pages and a JSON API."""
