"""One slice of a crawl: claim requests from the frontier, fetch them concurrently, store the
pages, complete them in batches, and stop after a time budget, on pause, or on SIGTERM.

Pages are written to the database before their completion reaches Redis. A worker killed in
between leaves the request leased, so it is fetched again and the row (unique per crawl and
URL) is kept once; a completion that Redis already applied is ignored the second time.

A row the database refuses does not take the slice down: the batch is written again one row at
a time, and each request whose row still fails is queued again with one more crash and the
error (crawls.engine.retry); a request that has crashed too many slices is failed with that
error without being fetched again. When the database itself is away, the slice stops instead.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings

from crawlhub.connections import REDIS_ERRORS
from crawlhub.http import Fetcher, FetchResult, OptionError, chromium, refusal, rendering
from crawlhub.http.useragents import DEFAULT_USER_AGENT
from crawls.engine import credentials, results, retry, sitemap_reads
from crawls.engine.credentials import Cookie, Credentials
from crawls.engine.extraction import Extractor, RulesError, check_rules, parse_rules
from crawls.engine.frontier import Frontier
from crawls.engine.live import publish_crawl
from crawls.engine.proxying import KeptProxies, Stopped, fetch_via_pool
from crawls.engine.recording import Recorder, Result
from crawls.engine.request import VIA_SITEMAP_ROOT, Request
from crawls.engine.robots import HostBusy, RobotsCache, robots_unreachable
from crawls.engine.scope import Scope, ScopeError
from crawls.engine.sessions import LoginFailed, SharedSession
from crawls.models import Crawl, CrawlAuth, ProxyUse

log = logging.getLogger(__name__)

STATE_CHECK_SECONDS = 0.25
FLUSH_EVERY_SECONDS = 0.25
FLUSH_AT_OUTCOMES = 100
# Fetched pages wait in memory for the next flush; their kept bodies and links are written
# early once they hold this much (recording.Result.held_bytes).
FLUSH_AT_BYTES = 32 * 1024 * 1024
IDLE_EXIT_SECONDS = 2.0
KEPT_IDLE_SECONDS = 0.5  # nothing fetched for this long: proxies kept (greedy) go back
EMPTY_CLAIM_BACKOFF = 0.1
REDIS_RETRY_SECONDS = 300.0
# A page that still finds the session expired after this many renewals is kept as it is (a
# redirect to the login page): the site ends sessions faster than the crawl can use them.
RENEWALS_PER_PAGE = 5
# Answers by which a host asks to be asked less often.
PUSH_BACK_STATUSES = frozenset({429, 503})


@dataclass
class SliceReport:
    pages: int = 0
    reason: str = ""
    seconds: float = 0.0
    handed_back: int = 0
    extra: dict = field(default_factory=dict)


class StopFlag:
    """Set by SIGTERM (the worker is shutting down) or by the crawl leaving 'running'."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = ""

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()

    def __bool__(self) -> bool:
        return self.event.is_set()


def _drain(items: queue.SimpleQueue, *, timeout: float) -> list:
    """Everything in `items`, waiting up to `timeout` for the first one; [] if none came."""
    try:
        found = [items.get(timeout=timeout)]
    except queue.Empty:
        return []
    while True:
        try:
            found.append(items.get_nowait())
        except queue.Empty:
            return found


def with_redis_retry(fn, *, stop_after: float = REDIS_RETRY_SECONDS):
    """Call fn, waiting out a Redis that went away (backoff up to 5 s, for stop_after s)."""
    deadline = time.monotonic() + stop_after
    delay = 0.2
    while True:
        try:
            return fn()
        except REDIS_ERRORS as exc:
            if time.monotonic() > deadline:
                raise
            log.warning("Redis unavailable (%s); retrying in %.1f s", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


class CannotStart(Exception):
    """A slice refused the crawl's settings: they became unusable after they were saved (an
    edit that bypassed crawl_clean, a channel changed since). The message says why."""


def scope_of(crawl: Crawl) -> Scope:
    return Scope(
        seeds=crawl.seeds,
        allowed_domains=crawl.allowed_domains,
        include=crawl.include_patterns,
        exclude=crawl.exclude_patterns,
    )


def fetcher_options(crawl: Crawl) -> dict:
    return {
        "timeout": crawl.timeout,
        "max_bytes": crawl.max_bytes,
        "user_agent_mode": crawl.effective_user_agent_mode(),
        "user_agent": crawl.user_agent,
        "pool_size": crawl.threads,
    }


# The crawl field a Fetcher option comes from, where their names differ.
_FIELD_OF_OPTION = {"pool_size": "threads"}


def settings_problems(crawl: Crawl) -> dict[str, list[str]]:
    """What a slice would refuse in the crawl's settings, by field (each message without the
    field's name: the doors name it); {} when it can start.

    The same checks a Slice makes when it is built (scope_of, fetcher_options), without
    building one: crawls.services.crawl_clean asks, so a crawl is refused when it is saved
    rather than left running with slices that cannot start.
    """
    problems: dict[str, list[str]] = {}
    try:
        scope_of(crawl)
    except ScopeError as exc:
        problems[exc.field] = [exc.message]
    try:
        Fetcher.check_options(**fetcher_options(crawl))
    except OptionError as exc:
        problems.setdefault(_FIELD_OF_OPTION.get(exc.option, exc.option), []).append(exc.message)
    if rule_problems := check_rules(crawl.extract_rules):
        problems["extract_rules"] = rule_problems
    if problem := rendering.selector_problem(crawl.render_wait_selector):
        problems["render_wait_selector"] = [problem]
    if crawl.effective_render_javascript() and not (found := chromium.locate()):
        problems["render_javascript"] = [found.problem]
    return problems


def extractor_of(crawl: Crawl) -> Extractor | None:
    """The crawl's extraction rules (or its channel's), compiled; None when it has none."""
    rules = crawl.effective_extract_rules()
    if not rules:
        return None
    try:
        return Extractor(parse_rules(rules))
    except RulesError as exc:  # saved past the checks, or the channel's rules changed
        raise ValueError("extract_rules: " + "; ".join(exc.problems)) from None


def credentials_of(crawl: Crawl) -> Credentials | None:
    """The crawl's credentials (crawls/engine/credentials.py); None when it has none."""
    try:
        row = crawl.auth
    except CrawlAuth.DoesNotExist:
        return None
    return credentials.from_row(row)


def slice_seconds(crawl: Crawl) -> float:
    """How long a slice crawls before handing over (its budget): CRAWLHUB_SLICE_SECONDS, and
    at least CRAWLHUB_RENDER_SLICE_SECONDS for a crawl that renders, whose slice first starts a
    browser and opens its tabs (RQ runs each slice in a work horse of its own, and the browsers
    end with it)."""
    if crawl.effective_render_javascript():
        return max(settings.CRAWLHUB_SLICE_SECONDS, settings.CRAWLHUB_RENDER_SLICE_SECONDS)
    return settings.CRAWLHUB_SLICE_SECONDS


class Slice:
    def __init__(self, crawl: Crawl, slice_id: str, *, budget_seconds: float | None = None):
        self.crawl = crawl
        self.channel = crawl.channel
        self.slice_id = slice_id
        self.frontier = Frontier(crawl.pk)
        self.budget = budget_seconds or slice_seconds(crawl)
        self.lease = settings.CRAWLHUB_LEASE_SECONDS
        self.scope = scope_of(crawl)
        self.fetcher = Fetcher(**fetcher_options(crawl))
        self.host_delay = crawl.effective_host_delay()
        # Politeness needs fetches to start when claimed; without a delay, keep a buffer.
        self.buffer = crawl.threads * (1 if self.host_delay > 0 else 2)
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
                self.frontier, self.credentials, lambda: Fetcher(**fetcher_options(crawl))
            )
        # robots.txt and sitemaps of the crawl's own hosts are asked with its credentials too.
        self.robots = RobotsCache(
            self.frontier, self.fetcher,
            user_agent=crawl.user_agent or DEFAULT_USER_AGENT, host_delay=self.host_delay,
            headers_for=self._credentials_for if self.credentials else None,
        )  # fmt: skip
        self.recorder = Recorder(crawl, self.scope, max_redirects=self.fetcher.max_redirects)
        # Rendering: this process's browsers (RenderingUnavailable, a ValueError, without them).
        self.browsers = rendering.shared_pool() if crawl.effective_render_javascript() else None
        self.stop = StopFlag()
        self.report = SliceReport()
        self.kept_proxies = KeptProxies()
        # What the loop's steps share (a Slice runs once).
        self.running: dict[Future, Request] = {}
        # Futures land here when they finish: waiting on it is O(1) per page, where wait() on
        # every running future would lock and unlock each of them on every loop.
        self.completed: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self.done: list[Result] = []  # fetched, for the next flush
        self.done_bytes = 0  # what they hold (Result.held_bytes)
        self.unstarted: list[Request] = []  # claimed but not fetched: released back to the queue
        self.last_flush = self.last_state = self.last_work = self.last_renew = 0.0
        self.next_claim = 0.0

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> SliceReport:
        started = time.monotonic()
        self.last_flush = self.last_state = self.last_work = self.last_renew = started
        pool = ThreadPoolExecutor(self.crawl.threads, thread_name_prefix=f"slice-{self.slice_id}")
        try:
            while True:
                now = time.monotonic()
                self._check_in(now)
                self._renew(now)
                if now - started >= self.budget:
                    self.stop.set("budget")
                if self.stop or not self._claim(pool, now) or not self._collect(now):
                    break
                self._flush_when_due()
        finally:
            self._shut_down(pool)
        self.report.reason = self.stop.reason
        self.report.seconds = round(time.monotonic() - started, 3)
        return self.report

    def _check_in(self, now: float) -> None:
        """A few times a second: stop when the crawl left 'running'; tell the supervisor we live."""
        if now - self.last_state >= STATE_CHECK_SECONDS:
            self.last_state = now
            self._check_state()
            self._beat()
            self._read_delayed()

    def _renew(self, now: float) -> None:
        """Extend the leases of what the slice holds (being fetched, or fetched and not yet
        flushed) well before they run out."""
        if now - self.last_renew >= self.lease / 3:
            self.last_renew = now
            held = list(self.running.values()) + [r.request for r in self.done]
            with_redis_retry(lambda: self.frontier.renew(held, lease_seconds=self.lease))

    def _claim(self, pool: ThreadPoolExecutor, now: float) -> bool:
        """Claim requests and start fetching them; False when the crawl has nothing left."""
        # Claim in batches (half the buffer free, or nothing running), and not again right
        # after an empty claim: one claim per page would double Redis traffic.
        free = self.buffer - len(self.running)
        if not ((free * 2 >= self.buffer or not self.running) and now >= self.next_claim):
            return True
        claimed = with_redis_retry(lambda: self.frontier.claim(free, lease_seconds=self.lease))
        if claimed:
            self._read_delayed()  # after the claim: a host it gave with a delay is in it
        self.recorder.look_up([r.fp for r in claimed])
        for request in claimed:
            if retry.gave_up(request.crashes):
                self._keep(Result(request=request, given_up=True))
                continue
            future = pool.submit(self._fetch, request)
            self.running[future] = request
            future.add_done_callback(self.completed.put)
        if claimed:
            self.last_work = now
        elif not self.running and not self.done and self._crawl_done():
            self.stop.set("done")
            return False
        else:
            self.next_claim = now + EMPTY_CLAIM_BACKOFF
        return True

    def _collect(self, now: float) -> bool:
        """Take in the fetches that finished, or wait a little; False once idle too long."""
        if self.running:
            for future in _drain(self.completed, timeout=0.05):
                self.running.pop(future)
                self._keep(future.result())
            self.last_work = time.monotonic()
            return True
        if now - self.last_work >= IDLE_EXIT_SECONDS:
            self.stop.set("idle")
            return False
        if self.kept_proxies and now - self.last_work >= KEPT_IDLE_SECONDS:
            self._release_kept_proxies()
        time.sleep(0.05)
        return True

    def _keep(self, result: Result) -> None:
        if result.handed_back:
            self.unstarted.append(result.request)
        else:
            self.done.append(result)
            self.done_bytes += result.held_bytes

    def _flush_when_due(self) -> None:
        if self.unstarted and not self.stop:
            # Handed back while the slice goes on (a page whose host just had its robots.txt
            # asked for): back in the queue now, for the host's next turn.
            self.report.handed_back += with_redis_retry(
                lambda: self.frontier.release(self.unstarted)
            )
            self.unstarted = []
        if (
            len(self.done) >= FLUSH_AT_OUTCOMES
            or self.done_bytes >= FLUSH_AT_BYTES
            or (self.done and time.monotonic() - self.last_flush >= FLUSH_EVERY_SECONDS)
        ):
            self._flush(self.done)
            self.done, self.done_bytes = [], 0
            self.last_flush = time.monotonic()

    def _shut_down(self, pool: ThreadPoolExecutor) -> None:
        """Requests not started yet go back; those being fetched finish and are kept, their
        leases renewed meanwhile (a page being rendered may take longer than a lease: let run
        out, it would be handed out again, and a pause would settle while it is fetched)."""
        for future, request in list(self.running.items()):
            if future.cancel():
                self.unstarted.append(request)
                self.running.pop(future)
        while self.running:
            for future in _drain(self.completed, timeout=0.25):
                if self.running.pop(future, None) is not None:
                    self._keep(future.result())
            if self.running and time.monotonic() - self.last_renew >= self.lease / 3:
                self.last_renew = time.monotonic()
                held = list(self.running.values()) + [r.request for r in self.done]
                # Redis away: the leases run out as they would have, the fetches still finish.
                with contextlib.suppress(*REDIS_ERRORS):
                    self.frontier.renew(held, lease_seconds=self.lease)
        pool.shutdown(wait=True)
        self._release_kept_proxies()
        self._flush(self.done)
        if self.unstarted:
            self.report.handed_back += with_redis_retry(
                lambda: self.frontier.release(self.unstarted)
            )
        self.fetcher.close()

    def _release_kept_proxies(self) -> None:
        """No proxy stays leased past the slice; with Redis away, their leases run out."""
        with contextlib.suppress(*REDIS_ERRORS):
            self.kept_proxies.release_all()

    def _beat(self) -> None:
        """Tell the supervisor this slice lives; a missed beat while Redis is away is fine."""
        with contextlib.suppress(*REDIS_ERRORS):
            self.frontier.slice_beat(self.slice_id)

    def _crawl_done(self) -> bool:
        """Queue, retries and backup all empty: no slice has anything left, so waiting out
        IDLE_EXIT_SECONDS would only delay the crawl's end (after_slice finishes it)."""
        try:
            return self.frontier.is_done()
        except REDIS_ERRORS:
            return False

    def _read_delayed(self) -> None:
        if not self.turns_always:
            with contextlib.suppress(*REDIS_ERRORS):  # kept as it was until Redis is back
                self.delayed = self.frontier.delayed_hosts()

    def _takes_turn(self, request: Request) -> bool:
        """Must the request take its turn at its host (send, answered)?"""
        return self.turns_always or request.host in self.delayed

    def _check_state(self) -> None:
        try:
            state = self.frontier.state()
        except REDIS_ERRORS:
            return  # claim/complete wait for Redis themselves
        if state != "running":
            self.stop.set(state or "gone")

    # -- fetching (runs in pool threads) ----------------------------------------------------

    def _fetch(self, request: Request) -> Result:
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
        self.frontier.pushed_back(request.host, wait=wait, why=why)
        self.delayed = self.delayed | {request.host}  # the host's next requests take turns

    def _get(
        self, url: str, *, headers: dict | None = None, sitemap: bool = False,
        session: list[Cookie] = (),
    ) -> FetchResult:  # fmt: skip
        """One fetch, through the channel's proxy pool when it has one; a page of the crawl's
        own hosts with the crawl's credentials (and the login's session cookies)."""
        if sitemap:
            fetch = functools.partial(self.fetcher.get, max_bytes=sitemap_reads.FETCH_BYTES)
            if self.credentials:
                fetch = functools.partial(
                    fetch, headers_for=self._credentials_for,
                    secret_headers=self.credentials.secret_names,
                )  # fmt: skip
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
            fetch, url, channel=self.channel.slug, strategy=self.channel.proxy_strategy,
            lease_seconds=self.lease, wait_seconds=self.crawl.timeout, stop=self.stop.event,
            kept=self.kept_proxies, fetch_seconds=self.fetcher.total_timeout,
        )  # fmt: skip

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
            timeout=self.crawl.timeout, max_bytes=self.crawl.max_bytes,
            wait_selector=self.crawl.render_wait_selector,
            headers_for=(lambda target: creds.headers_for(target, session)) if creds else None,
        )  # fmt: skip
        return self.browsers.render(document, proxy=proxy, options=options)

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

    # -- recording (crawls/engine/recording.py) -------------------------------------------

    def _flush(self, results: list[Result]) -> None:
        """Rows first, then one completion call: see the module docstring for why."""
        if not results:
            return
        try:
            self.report.pages += self.recorder.write(results)
        except REDIS_ERRORS:
            raise
        except Exception:
            log.exception("writing %d results failed; writing them one at a time", len(results))
            self.report.pages += self.recorder.write_one_by_one(results)
        outcomes = [r.outcome for r in results]
        with_redis_retry(lambda: self.frontier.complete(outcomes))
        publish_crawl(self.crawl.pk)


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


def stop_on_sigterm(flag: StopFlag) -> None:
    """In the worker's job process: SIGTERM finishes the current pages, hands the rest back."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: flag.set("sigterm"))


def run_slice(crawl_id: int, slice_id: str, *, budget_seconds: float | None = None) -> dict:
    """The step an RQ slice job runs; tests call it directly. CannotStart when the crawl's
    settings cannot be used (the job then fails the crawl)."""
    try:
        crawl = Crawl.objects.select_related("channel", "auth").get(pk=crawl_id)
    except Crawl.DoesNotExist:
        return {"reason": "crawl deleted"}
    if not crawl.is_active():
        return {"reason": f"crawl {crawl.state}"}
    try:
        work = Slice(crawl, slice_id, budget_seconds=budget_seconds)
    except ValueError as exc:  # what the Scope and the Fetcher raise for settings
        raise CannotStart(f"a slice cannot start with this crawl's settings: {exc}") from exc
    if work.session:
        try:
            work.session.start()  # the crawl's session, logging in if no worker has yet
        except LoginFailed as exc:
            work.fetcher.close()
            raise CannotStart(f"the login step failed: {exc}") from exc
    stop_on_sigterm(work.stop)
    work.frontier.slice_beat(slice_id)
    try:
        report = work.run()
    finally:
        work.frontier.slice_end(slice_id)
    return {
        "pages": report.pages,
        "reason": report.reason,
        "seconds": report.seconds,
        "handed_back": report.handed_back,
    }
