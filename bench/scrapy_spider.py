"""The Scrapy + scrapy-redis side of bench/crawl_bench.py (run in bench/.venv-scrapy).

    scrapy runspider bench/scrapy_spider.py -a start_url=http://127.0.0.1:PORT/ \\
        -a role=seed -a out=/tmp/scrapy-0.json -s REDIS_URL=redis://127.0.0.1:PORT/0

Run it as two processes (role=seed and role=join) sharing one Redis: scrapy-redis's scheduler
and dupefilter make them one crawl (a shared request queue and fingerprint set). Every in-scope
<a href> is followed. A plain scrapy.Spider closes when idle; with two processes one of them is
briefly idle at start (before the seed's links are queued) and whenever the queue is empty while
the other still fetches, so a process closes only after the shared queue has stayed empty for
`grace` seconds and the crawl has begun. The last one to close finds the queue empty with nothing
of its own in flight and the other process gone, so the crawl is complete. SCHEDULER_PERSIST is
on because a closing scrapy-redis scheduler otherwise deletes the shared queue and fingerprint
set under the other process; the harness measures those keys, then deletes them.

At close, each process writes `out`: what it fetched (canonical URLs, for checking against
SampleSite.expected()) and when.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

import redis
import scrapy
from scrapy import signals
from scrapy.core.engine import ExecutionEngine
from scrapy.exceptions import DontCloseSpider
from w3lib.url import canonicalize_url

# The engine re-checks "idle?" on this heartbeat (default 5 s). A quicker one costs one queue
# pop per 0.2 s when idle and lets a waiting process join, or a finished one close, promptly.
ExecutionEngine._SLOT_HEARTBEAT_INTERVAL = 0.2


class BenchSpider(scrapy.Spider):
    name = "crawlbench"
    custom_settings = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "CONCURRENT_REQUESTS": 32,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "RETRY_ENABLED": False,  # 500s are fetched once, as the URL count expects
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }

    def __init__(
        self, start_url: str, out: str, role: str = "seed", grace: str = "1.0", **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.start_url, self.out, self.role, self.grace = start_url, out, role, float(grace)
        self.allowed_domains = [urlsplit(start_url).hostname or ""]
        self.fetched: list[str] = []
        self.opened = self.first = self.last = 0.0
        self.idle_since: float | None = None

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider._downloaded, signal=signals.response_downloaded)
        crawler.signals.connect(spider._opened, signal=signals.spider_opened)
        crawler.signals.connect(spider._idle, signal=signals.spider_idle)
        crawler.signals.connect(spider._closed, signal=signals.spider_closed)
        spider.redis = redis.Redis.from_url(crawler.settings["REDIS_URL"])
        return spider

    def _opened(self, spider) -> None:
        self.opened = time.time()

    async def start(self):
        if self.role == "seed":
            yield scrapy.Request(self.start_url, callback=self.parse)

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if url.startswith(("http://", "https://")):  # not mailto:, javascript:, data:, ...
                yield scrapy.Request(url, callback=self.parse)  # off-site ones: OffsiteMiddleware

    def _downloaded(self, response, request, spider) -> None:
        self.last = time.time()
        self.first = self.first or self.last
        self.idle_since = None
        self.fetched.append(canonicalize_url(request.url))

    def _idle(self, spider) -> None:
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        begun = self.redis.exists(f"{self.name}:dupefilter")
        if now - self.idle_since < self.grace or (not begun and now - self.idle_since < 60):
            raise DontCloseSpider

    def _closed(self, spider, reason) -> None:
        stats = self.crawler.stats.get_stats()
        record = {
            "role": self.role,
            "reason": reason,
            "fetched": self.fetched,
            "opened": self.opened,
            "first": self.first,
            "last": self.last,
            "closed": time.time(),
            "stats": {k: v for k, v in stats.items() if isinstance(v, int | float)},
        }
        with open(self.out, "w") as out:
            json.dump(record, out)
