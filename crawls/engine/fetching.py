"""The per-request fetch path of a slice, run in its pool threads: a claimed request's turn at
its host, robots.txt, the fetch itself (through the channel's proxy pool, with the crawl's
credentials and session, rendered when the crawl renders), a host's push-back heeded at once,
and what is taken from the page while its body is in memory (digest, extracted fields).

What comes back is a recording.Result for the slice's next flush; nothing here writes to the
database.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading

from crawlhub.http import Fetcher, FetchResult, refusal, rendering
from crawlhub.http.useragents import DEFAULT_USER_AGENT
from crawlhub.redis.connections import REDIS_ERRORS
from crawls.engine import credentials, results, sitemap_reads
from crawls.engine.crawl_log import SliceLog
from crawls.engine.crawl_settings import credentials_of, extractor_of, fetcher_options
from crawls.engine.credentials import Cookie
from crawls.engine.frontier import Frontier
from crawls.engine.proxying import KeptProxies, Stopped, fetch_via_pool
from crawls.engine.recording import Recorder, Result
from crawls.engine.request import VIA_SITEMAP_ROOT, Request
from crawls.engine.robots import HostBusy, RobotsCache, robots_unreachable
from crawls.engine.scope import Scope
from crawls.engine.sessions import LoginFailed, SharedSession
from crawls.models import Crawl, ProxyUse

log = logging.getLogger(__name__)

# A page that still finds the session expired after this many renewals is kept as it is (a
# redirect to the login page): the site ends sessions faster than the crawl can use them.
RENEWALS_PER_PAGE = 5
# Answers by which a host asks to be asked less often.
PUSH_BACK_STATUSES = frozenset({429, 503})


class PageFetch:
    """How a slice fetches its claimed requests (PageFetch.fetch, from any of its threads)."""

    def __init__(
        self,
        crawl: Crawl,
        frontier: Frontier,
        *,
        scope: Scope,
        fetcher: Fetcher,
        recorder: Recorder,
        stop: threading.Event,
        lease: float,
        give_up: threading.Event | None = None,
        log: SliceLog | None = None,
    ) -> None:
        self.crawl = crawl
        self.log = log if log is not None else SliceLog(crawl.pk, "")
        self.channel = crawl.channel
        self.frontier = frontier
        self.scope = scope
        self.fetcher = fetcher
        self.recorder = recorder  # the baseline's validators: conditional requests
        self.stop = stop  # set: the slice is stopping (a proxy wait or a turn's wait ends)
        # Set: the worker is shutting down (SIGTERM): pages being rendered are given up.
        self.give_up = give_up if give_up is not None else threading.Event()
        self.lease = lease
        self.host_delay = crawl.effective_host_delay()
        # Without a delay or a cap, a request takes its turn at its host (Frontier.send, then
        # answered: two Redis round trips a page) only when the host has a delay of its own or
        # pushed back: the hosts in `delayed`, read with every claim and a few times a second,
        # and a host that pushes back here joins it at once.
        self.turns_always = self.host_delay > 0 or crawl.host_concurrency > 0
        self.delayed: frozenset[str] = frozenset()
        self.extractor = extractor_of(crawl)
        self.credentials = credentials_of(crawl)
        self.session: SharedSession | None = None
        if self.credentials and self.credentials.logs_in:
            self.session = SharedSession(
                frontier,
                self.credentials,
                lambda: Fetcher(**fetcher_options(crawl)),
                log=self.log,
            )
        # robots.txt and sitemaps of the crawl's own hosts are asked with its credentials too.
        self.robots = RobotsCache(
            frontier,
            fetcher,
            user_agent=crawl.user_agent or DEFAULT_USER_AGENT,
            host_delay=self.host_delay,
            headers_for=self._credentials_for if self.credentials else None,
        )
        # Rendering: this process's browsers (RenderingUnavailable, a ValueError, without them).
        self.browsers = rendering.shared_pool() if crawl.effective_render_javascript() else None
        self.kept_proxies = KeptProxies()

    def read_delayed(self) -> None:
        if not self.turns_always:
            with contextlib.suppress(*REDIS_ERRORS):  # kept as it was until Redis is back
                self.delayed = self.frontier.delayed_hosts()

    def _takes_turn(self, request: Request) -> bool:
        """Must the request take its turn at its host (send, answered)?"""
        return self.turns_always or request.host in self.delayed

    def fetch(self, request: Request, wait: float = 0.0) -> Result:
        """Fetch a claimed request, `wait` seconds from now (its host's turn: the slice claims
        a host's turn a little ahead, slices.CLAIM_AHEAD_SECONDS)."""
        if wait > 0 and self.stop.wait(wait):
            return Result(request=request, handed_back=True)  # stopping: back to the queue
        try:
            if refused := refusal(request.url):  # before robots.txt, which is on the same host
                return Result(request=request, blocked=refused)
            takes_turn = self._takes_turn(request)
            if self.crawl.obey_robots:
                turn = Turn(self.frontier, request)
                try:
                    allowed = self.robots.allows(request, before_fetch=turn.take)
                finally:
                    if turn.delay is not None:  # robots.txt went to the host in this turn
                        self.frontier.answered(request)
                if not allowed and (unreachable := self.robots.unreachable(request)):
                    return Result(request=request, fetch=robots_unreachable(request, unreachable))
                if not allowed:
                    return Result(request=request, blocked="blocked by robots.txt")
                if turn.delay:  # the page waits in the queue for the host's next turn
                    return Result(request=request, handed_back=True)
                # robots.txt may have given the host a Crawl-delay just now
                takes_turn = takes_turn or turn.delay is not None
            if takes_turn and self.frontier.send(request) is None:
                return Result(request=request, handed_back=True)  # pushed back since the claim
            try:
                if request.reads_sitemap:
                    result = self._read_sitemap(request)
                    self._heed_push_back(request, result.fetch)
                    return result
                headers = self.recorder.conditional_headers(request)
                seen, session = self.session.current() if self.session else (0, [])
                fetch = self._get(request.url, headers=headers, session=session)
                for _ in range(RENEWALS_PER_PAGE):
                    if not (self.session and self._logged_out(fetch)):
                        break
                    # The session expired: renewed once for every worker
                    # (crawls/engine/sessions.py), then this page is fetched again with the new
                    # one (which other threads may use up first, on a site whose sessions last a
                    # few requests). The host stays this page's until it answers, and the
                    # login's requests and this one each wait for the host's delay.
                    self.session.renew(seen)
                    seen, session = self.session.current()
                    with self.session.turns.turn(request.url):
                        fetch = self._get(request.url, headers=headers, session=session)
                # At once, before the page is parsed: other requests to the host wait on it.
                self._heed_push_back(request, fetch)
            finally:
                if takes_turn:
                    self.frontier.answered(request)
            return self._fetched(request, fetch)
        except LoginFailed as exc:
            return Result(
                request=request, blocked=f"the session expired and the login failed: {exc}"
            )
        except (Stopped, HostBusy):
            return Result(request=request, handed_back=True)
        except REDIS_ERRORS:
            # Redis went away mid-fetch (the proxy pool, the robots.txt cache): the page is
            # not recorded as an error, it goes back to the queue once Redis is back.
            log.warning("Redis unavailable while fetching %s: handed back", request.url)
            return Result(request=request, handed_back=True)
        except Exception as exc:  # a bug in one page must not lose the others
            log.exception("fetching %s failed", request.url)
            return Result(request=request, blocked=f"internal error: {type(exc).__name__}: {exc}")

    def _heed_push_back(self, request: Request, fetch: FetchResult | None) -> None:
        """A 429 or 503 slows the host down for every worker at once (the frontier keeps how
        much, and eases it back), not only this page's retry."""
        if fetch is None or fetch.status not in PUSH_BACK_STATUSES:
            return
        wait = fetch.retry_after
        why = f"HTTP {fetch.status}" + ("" if wait is None else f", Retry-After {wait:g} s")
        pushed = self.frontier.pushed_back(request.host, wait=wait, why=why)
        if pushed.raised:
            self.log.pushed_back(request.host, delay=pushed.delay, why=why)
        self.delayed = self.delayed | {request.host}  # the host's next requests take turns

    def _get(
        self,
        url: str,
        *,
        headers: dict | None = None,
        sitemap: bool = False,
        session: list[Cookie] = (),
    ) -> FetchResult:
        """One fetch, through the channel's proxy pool when it has one; a page of the crawl's
        own hosts with the crawl's credentials (and the login's session cookies)."""
        if sitemap:
            fetch = functools.partial(self.fetcher.get, max_bytes=sitemap_reads.FETCH_BYTES)
            if self.credentials:
                fetch = functools.partial(
                    fetch,
                    headers_for=self._credentials_for,
                    secret_headers=self.credentials.secret_names,
                )
        else:
            secret: frozenset[str] = frozenset()
            if self.credentials and (own := self.credentials.headers_for(url, session)):
                headers, secret = {**(headers or {}), **own}, self.credentials.secret_names
            # A redirect is a page of its own: its target goes to the frontier, through the
            # dedup set, so that each URL of a chain is fetched once (crawls/engine/recording.py).
            # Its target is asked `sends_to` again: credentials never follow a redirect away.
            fetch = functools.partial(
                self.fetcher.fetch, headers=headers, follow_redirects=False, secret_headers=secret
            )
            if self.browsers is not None:
                fetch = functools.partial(self._rendered, fetch, session=session)
        if self.channel.proxy_use != ProxyUse.POOL:
            return fetch(url)
        return fetch_via_pool(
            fetch,
            url,
            channel=self.channel.slug,
            strategy=self.channel.proxy_strategy,
            lease_seconds=self.lease,
            wait_seconds=self.crawl.timeout,
            stop=self.stop,
            kept=self.kept_proxies,
            fetch_seconds=self.fetcher.total_timeout,
        )

    def _credentials_for(self, url: str) -> dict[str, str]:
        """The crawl's credentials (and the login's session) for a URL of its own hosts, to
        robots.txt and sitemaps and each hop of their redirects; {} for any other host."""
        session = self.session.current()[1] if self.session else ()
        return self.credentials.headers_for(url, session) if self.credentials else {}

    def _rendered(
        self, fetch, url: str, *, proxy: str | None = None, session: list[Cookie] = ()
    ) -> FetchResult:
        """The page fetched as usual, then rendered in this process's browsers through the same
        proxy; its scripts' requests carry the crawl's credentials to its own hosts only."""
        document = fetch(url, proxy=proxy)
        creds = self.credentials
        options = rendering.RenderOptions(
            timeout=self.crawl.timeout,
            max_bytes=self.crawl.max_bytes,
            wait_selector=self.crawl.render_wait_selector,
            headers_for=(lambda target: creds.headers_for(target, session)) if creds else None,
        )
        try:
            return self.browsers.render(
                document, proxy=proxy, options=options, give_up=self.give_up
            )
        except rendering.RenderingStopped:
            raise Stopped from None  # handed back: fetched and rendered again later

    def _logged_out(self, fetch: FetchResult) -> bool:
        """The page redirects to the login URL: the session it was fetched with expired."""
        creds = self.credentials
        return bool(
            creds and creds.is_login_url(fetch.redirect_to) and not creds.is_login_url(fetch.url)
        )

    def _fetched(self, request: Request, fetch: FetchResult) -> Result:
        """A page fetched: its digest and fields are taken while its body is here."""
        if self.credentials and "set-cookie" in fetch.headers:
            fetch.headers["set-cookie"] = credentials.MASK  # a session the site renews, say
        result = Result(request=request, fetch=fetch)
        if fetch.status is not None and fetch.status != 304:
            result.digest = results.body_digest(fetch.body)
        result.extracted = results.extract(
            fetch, extractor=self.extractor, structured=self.crawl.keep_structured_data
        )
        if not self.crawl.keep_bodies:
            fetch.body = b""  # parsed already; only a kept body is written
        return result

    def _read_sitemap(self, request: Request) -> Result:
        listed = self.robots.sitemaps(request) if request.via == VIA_SITEMAP_ROOT else []
        fetch = self._get(request.url, sitemap=True)
        result = Result(request=request, fetch=fetch)
        if fetch.status is not None:
            result.digest = results.body_digest(fetch.body)
        result.sitemap = sitemap_reads.read(
            request, fetch, robots_listed=listed, site_allowed=self.scope.allows_site
        )
        if not self.crawl.keep_bodies or len(fetch.body) > self.crawl.max_bytes:
            fetch.body = b""
        return result


class Turn:
    """A claimed request's one turn at its host (Frontier.send), taken right before something
    is sent: the page, or the host's robots.txt on its behalf."""

    def __init__(self, frontier: Frontier, request: Request) -> None:
        self.frontier = frontier
        self.request = request
        self.delay: float | None = None  # the host's delay, once the turn is taken

    def take(self) -> bool:
        self.delay = self.frontier.send(self.request)
        return self.delay is not None
