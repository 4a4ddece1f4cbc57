"""The HTTP kit both apps use: one client (client.py) for crawl pages, robots.txt, proxy lists,
proxy checks and webhook deliveries, with the private-network guard (netguard.py), timeouts and
the whole-fetch deadline (deadline.py), size limits and redirects decided inside it, over one
session whose direct connections the guard checks as they connect (session.py); what went
wrong in words and kinds (errors.py); the one reading of a URL every check shares (urls.py),
links (links.py), User-Agents (useragents.py).
"""

from crawlhub.http.client import Fetcher, FetchResult, OptionError, refusal
from crawlhub.http.errors import FetchError
from crawlhub.http.netguard import BlockedAddress

__all__ = ["BlockedAddress", "FetchError", "FetchResult", "Fetcher", "OptionError", "refusal"]
