"""robots.txt: where to find it, what a fetch of it means, what it allows (via protego), and
the cache a slice keeps of it, shared with the crawl's other slices through the frontier."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import urlsplit

from protego import Protego

from crawlhub.http.client import Fetcher, FetchResult
from crawls.engine.frontier import Frontier
from crawls.engine.request import Request
from crawls.engine.sitemaps import usable_sitemaps

DEFAULT_PORTS = {"http": 80, "https": 443}
UNREACHABLE_ROBOTS_SECONDS = 60.0


class HostBusy(Exception):
    """robots.txt was to be fetched, but the host may not be asked now (its politeness turn
    was refused): the request that needed it goes back to the queue."""


class RobotsPolicy:
    """The rules of one site's robots.txt. Lookups never raise."""

    def __init__(self, parser: Protego | None, *, allow_all: bool = True) -> None:
        # parser None means a blanket answer: everything allowed, or nothing.
        self._parser = parser
        self._allow_all = allow_all

    @classmethod
    def parse(cls, text: str) -> RobotsPolicy:
        """Rules from robots.txt text; garbage (or a parser failure) allows everything."""
        try:
            return cls(Protego.parse(text))
        except Exception:  # a site's file must never break a crawl
            return cls.allow_everything()

    @classmethod
    def allow_everything(cls) -> RobotsPolicy:
        return cls(None, allow_all=True)

    @classmethod
    def disallow_everything(cls) -> RobotsPolicy:
        return cls(None, allow_all=False)

    def allowed(self, url: str, user_agent: str) -> bool:
        if self._parser is None:
            return self._allow_all
        try:
            return self._parser.can_fetch(url, user_agent)
        except Exception:  # an odd URL against odd rules: do not block the crawl
            return True

    def sitemaps(self) -> list[str]:
        """The absolute http(s) URLs of the file's Sitemap: lines, in order, once each."""
        if self._parser is None:
            return []
        try:
            return usable_sitemaps(list(self._parser.sitemaps))
        except Exception:  # a site's file must never break a crawl
            return []

    def crawl_delay(self, user_agent: str) -> float | None:
        """Seconds between requests asked for by the site, or None."""
        if self._parser is None:
            return None
        try:
            delay = self._parser.crawl_delay(user_agent)
        except Exception:
            return None
        if delay is None or not math.isfinite(delay) or delay < 0:
            return None
        return float(delay)


def robots_url(url: str) -> str:
    """scheme://host[:port]/robots.txt for the site of `url` (default ports left out)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in DEFAULT_PORTS or not host:
        raise ValueError(f"url: {url[:200]!r} is not an http(s) URL")
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    port = parts.port
    if port is not None and port != DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}/robots.txt"


def policy_from_response(status: int | None, text: str) -> RobotsPolicy:
    """The policy a robots.txt fetch implies, following RFC 9309 section 2.3.1.

    - 2xx: the file's rules.
    - 4xx (404, 403, 410, ...): "unavailable", so no restrictions; 401/403 included, as the RFC
      says (unlike the old Google practice of treating them as disallow-all).
    - 5xx, or no response at all (refused, timeout, DNS): "unreachable", so everything is
      disallowed for now. The caller should fetch robots.txt again later rather than keep this
      answer for the whole crawl; RFC 9309 allows assuming allow-all after 30 days of errors.
    - Anything else (1xx, or a 3xx whose redirects could not be followed): treated as
      unavailable (allow all), as the RFC suggests after too many redirects.
    """
    if status is None or status >= 500:
        return RobotsPolicy.disallow_everything()
    if 200 <= status < 300:
        return RobotsPolicy.parse(text)
    return RobotsPolicy.allow_everything()


def robots_unreachable(request: Request, robots: FetchResult) -> FetchResult:
    """The page's fetch when its host's robots.txt got no response: no response for the page
    either, with robots.txt's error (refused, timeout: retried like the page's own would be)."""
    return replace(
        robots,
        url=request.url,
        final_url=request.url,
        body=b"",
        redirects=[],
        links=[],
        link_texts=[],
        headers={},
        error=f"robots.txt could not be fetched: {robots.error}",
    )


class RobotsCache:
    """A slice's robots.txt policies, per host; safe to share between its fetch threads.

    robots.txt is fetched once per host per crawl: one worker fetches it and stores it in the
    frontier, the others read it there. An unreachable robots.txt disallows the host only for
    a while (RFC 9309): it is not stored, so it is asked for again after
    UNREACHABLE_ROBOTS_SECONDS. A Crawl-delay longer than the crawl's host delay becomes the
    host's delay in the frontier.
    """

    def __init__(
        self,
        frontier: Frontier,
        fetcher: Fetcher,
        *,
        user_agent: str,
        host_delay: float,
        headers_for: Callable[[str], dict[str, str]] | None = None,
    ) -> None:
        """headers_for(url): the crawl's credentials for a robots.txt (or a hop of its
        redirects) on the crawl's own hosts, none elsewhere."""
        self.frontier = frontier
        self.fetcher = fetcher
        self.headers_for = headers_for
        self.user_agent = user_agent
        self.host_delay = host_delay
        self._policies: dict[str, tuple[RobotsPolicy, float]] = {}  # host -> (policy, until)
        # host -> the fetch of its robots.txt that got no response, while that disallows it
        self._unreachable: dict[str, FetchResult] = {}
        self._lock = threading.Lock()

    def allows(self, request: Request, *, before_fetch: Callable[[], bool] | None = None) -> bool:
        """May the crawl fetch this request? Loads the host's robots.txt the first time.
        before_fetch, when given, is asked right before robots.txt is fetched from the site
        (the host's politeness turn); False raises HostBusy and nothing is fetched."""
        return self._policy(request, before_fetch).allowed(request.url, self.user_agent)

    def unreachable(self, request: Request) -> FetchResult | None:
        """Why the request's host is disallowed when no robots.txt answer came (a dead host, a
        timeout): the page is then not "blocked by robots.txt" but could not be fetched, and
        is retried as such (crawls/engine/slices.py). None when the host answered."""
        return self._unreachable.get(request.host)

    def sitemaps(self, request: Request) -> list[str]:
        """The sitemaps the robots.txt of the request's host lists (loaded as for allows)."""
        return self._policy(request).sitemaps()

    def _policy(
        self, request: Request, before_fetch: Callable[[], bool] | None = None
    ) -> RobotsPolicy:
        host = request.host
        cached = self._policies.get(host)
        if request.attempts and host in self._unreachable:
            cached = None  # a retry asks an unreachable host again: that is what it retries
        if cached is None or cached[1] < time.monotonic():
            with self._lock:
                cached = self._policies.get(host)
                if request.attempts and host in self._unreachable:
                    cached = None
                if cached is None or cached[1] < time.monotonic():
                    cached = self._load(request.url, host, before_fetch)
                    self._policies[host] = cached
        return cached[0]

    def _load(
        self, url: str, host: str, before_fetch: Callable[[], bool] | None
    ) -> tuple[RobotsPolicy, float]:
        """The host's policy and until when (monotonic) it holds."""
        stored = self._stored_text(host)
        if stored is None:
            if before_fetch is not None and not before_fetch():
                raise HostBusy(host)
            status, text, fetch = self.fetcher.read_text(
                robots_url(url), headers_for=self.headers_for
            )
            if status is None:
                self._unreachable[host] = fetch
                self.frontier.robots_unlock(host)
                until = time.monotonic() + UNREACHABLE_ROBOTS_SECONDS
                return policy_from_response(None, ""), until
            self._unreachable.pop(host, None)
            stored = f"{status}\n{text}"
            self.frontier.robots_store(host, stored)
        status_line, _, text = stored.partition("\n")
        policy = policy_from_response(int(status_line), text)
        delay = policy.crawl_delay(self.user_agent)
        if delay and delay > self.host_delay:
            self.frontier.set_host_delay(host, delay)
        return policy, float("inf")

    def _stored_text(self, host: str) -> str | None:
        """The robots.txt a worker stored (its status, a newline, its text), waiting while
        another fetches it; None when this worker is to fetch it (it took the lock, or the
        other one took too long)."""
        stored = self.frontier.robots_text(host)
        deadline = time.monotonic() + self.fetcher.total_timeout + 2
        while stored is None and not self.frontier.robots_lock(
            host, ttl=deadline - time.monotonic()
        ):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
            stored = self.frontier.robots_text(host)
        return stored
