"""One slice of a crawl: claim requests from the frontier, fetch them concurrently, store the
pages, complete them in batches, and stop after a time budget, on pause, or on SIGTERM.

Pages are written to the database before their completion reaches Redis. A worker killed in
between leaves the request leased, so it is fetched again and the row (unique per crawl and
URL) is kept once; a completion that Redis already applied is ignored the second time.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from crawlhub.connections import REDIS_ERRORS
from crawlhub.http import Fetcher, FetchResult, refusal
from crawlhub.http.useragents import DEFAULT_USER_AGENT
from crawls.engine.frontier import Frontier, Outcome, Request
from crawls.engine.live import publish_crawl
from crawls.engine.proxying import KeptProxies, Stopped, fetch_via_pool
from crawls.engine.robots import RobotsPolicy, policy_from_response, robots_url
from crawls.engine.rows import BulkInsert
from crawls.engine.scope import Scope
from crawls.models import Crawl, FailedRequest, Page, ProxyUse

log = logging.getLogger(__name__)

STATE_CHECK_SECONDS = 0.25
FLUSH_EVERY_SECONDS = 0.25
FLUSH_AT_OUTCOMES = 100
IDLE_EXIT_SECONDS = 2.0
KEPT_IDLE_SECONDS = 0.5  # nothing fetched for this long: proxies kept (greedy) go back
EMPTY_CLAIM_BACKOFF = 0.1
MAX_RETRY_DELAY = 60.0
REDIS_RETRY_SECONDS = 300.0
UNREACHABLE_ROBOTS_SECONDS = 60.0


PAGE_ROWS = BulkInsert(Page)


def url_hash(url: str) -> str:
    return hashlib.sha1(url.encode("utf-8", "surrogatepass")).hexdigest()


def retry_delay(attempts: int, retry_after: float | None) -> float:
    """Retry-After when the site gave one, else exponential backoff from one second."""
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_DELAY)
    return min(2.0**attempts, MAX_RETRY_DELAY)


@dataclass
class Result:
    """A finished fetch, waiting to be written and completed."""

    request: Request
    fetch: FetchResult | None = None
    blocked: str = ""  # why the request was not fetched (the guard, robots.txt)
    handed_back: bool = False  # not fetched because the slice is stopping: back to the queue
    page: tuple | None = None  # the Page row, as PAGE_ROWS writes it
    failure: FailedRequest | None = None
    outcome: Outcome | None = None


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


class Slice:
    def __init__(self, crawl: Crawl, slice_id: str, *, budget_seconds: float | None = None):
        self.crawl = crawl
        self.channel = crawl.channel
        self.slice_id = slice_id
        self.frontier = Frontier(crawl.pk)
        self.budget = budget_seconds or settings.CRAWLHUB_SLICE_SECONDS
        self.lease = settings.CRAWLHUB_LEASE_SECONDS
        self.scope = Scope(
            seeds=crawl.seeds,
            allowed_domains=crawl.allowed_domains,
            include=crawl.include_patterns,
            exclude=crawl.exclude_patterns,
        )
        self.fetcher = Fetcher(
            timeout=crawl.timeout,
            max_bytes=crawl.max_bytes,
            user_agent_mode=crawl.effective_user_agent_mode(),
            user_agent=crawl.user_agent,
            pool_size=crawl.threads,
        )
        self.host_delay = crawl.effective_host_delay()
        # Politeness needs fetches to start when claimed; without a delay, keep a buffer.
        self.buffer = crawl.threads * (1 if self.host_delay > 0 else 2)
        self.robots: dict[str, tuple[RobotsPolicy, float]] = {}  # host -> (policy, until)
        self.robots_lock = threading.Lock()
        self.stop = StopFlag()
        self.report = SliceReport()
        self.kept_proxies = KeptProxies()

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> SliceReport:
        started = time.monotonic()
        pool = ThreadPoolExecutor(self.crawl.threads, thread_name_prefix=f"slice-{self.slice_id}")
        running: dict[Future, Request] = {}
        # Futures land here when they finish: waiting on it is O(1) per page, where wait() on
        # every running future would lock and unlock each of them on every loop.
        completed: queue.SimpleQueue[Future] = queue.SimpleQueue()
        done: list[Result] = []
        unstarted: list[Request] = []  # claimed but not fetched: released back to the queue
        last_flush = last_state = last_work = last_renew = time.monotonic()
        next_claim = 0.0
        try:
            while True:
                now = time.monotonic()
                if now - last_state >= STATE_CHECK_SECONDS:
                    last_state = now
                    self._check_state()
                    self._beat()
                if now - last_renew >= self.lease / 3:
                    last_renew = now
                    held = list(running.values()) + [r.request for r in done]
                    with_redis_retry(
                        lambda held=held: self.frontier.renew(held, lease_seconds=self.lease)
                    )
                if now - started >= self.budget:
                    self.stop.set("budget")
                if self.stop:
                    break
                # Claim in batches (half the buffer free, or nothing running), and not again
                # right after an empty claim: one claim per page would double Redis traffic.
                free = self.buffer - len(running)
                if (free * 2 >= self.buffer or not running) and now >= next_claim:
                    claimed = with_redis_retry(
                        lambda n=free: self.frontier.claim(n, lease_seconds=self.lease)
                    )
                    for request in claimed:
                        future = pool.submit(self._fetch, request)
                        running[future] = request
                        future.add_done_callback(completed.put)
                    if claimed:
                        last_work = now
                    elif not running and not done and self._crawl_done():
                        self.stop.set("done")
                        break
                    else:
                        next_claim = now + EMPTY_CLAIM_BACKOFF
                if running:
                    for future in _drain(completed, timeout=0.05):
                        running.pop(future)
                        self._collect(future.result(), done, unstarted)
                    last_work = time.monotonic()
                elif now - last_work >= IDLE_EXIT_SECONDS:
                    self.stop.set("idle")
                    break
                else:
                    if self.kept_proxies and now - last_work >= KEPT_IDLE_SECONDS:
                        self._release_kept_proxies()
                    time.sleep(0.05)
                if len(done) >= FLUSH_AT_OUTCOMES or (
                    done and time.monotonic() - last_flush >= FLUSH_EVERY_SECONDS
                ):
                    self._flush(done)
                    done = []
                    last_flush = time.monotonic()
        finally:
            # Requests not started yet go back; those being fetched finish and are kept.
            unstarted += [request for future, request in running.items() if future.cancel()]
            for future in list(running):
                if not future.cancelled():
                    self._collect(future.result(), done, unstarted)
            pool.shutdown(wait=True)
            self._release_kept_proxies()
            self._flush(done)
            if unstarted:
                self.report.handed_back = with_redis_retry(lambda: self.frontier.release(unstarted))
            self.fetcher.close()
        self.report.reason = self.stop.reason
        self.report.seconds = round(time.monotonic() - started, 3)
        return self.report

    @staticmethod
    def _collect(result: Result, done: list[Result], unstarted: list[Request]) -> None:
        if result.handed_back:
            unstarted.append(result.request)
        else:
            done.append(result)

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
            if self.crawl.obey_robots and not self._robots_allow(request.url):
                return Result(request=request, blocked="blocked by robots.txt")
            if self.channel.proxy_use == ProxyUse.POOL:
                fetch = fetch_via_pool(
                    self.fetcher, request.url, channel=self.channel.slug,
                    strategy=self.channel.proxy_strategy, lease_seconds=self.lease,
                    wait_seconds=self.crawl.timeout, stop=self.stop.event,
                    kept=self.kept_proxies,
                )  # fmt: skip
            else:
                fetch = self.fetcher.fetch(request.url)
            return Result(request=request, fetch=fetch)
        except Stopped:
            return Result(request=request, handed_back=True)
        except REDIS_ERRORS:
            # Redis went away mid-fetch (the proxy pool, the robots.txt cache): the page is
            # not recorded as an error, it goes back to the queue once Redis is back.
            log.warning("Redis unavailable while fetching %s: handed back", request.url)
            return Result(request=request, handed_back=True)
        except Exception as exc:  # a bug in one page must not lose the others
            log.exception("fetching %s failed", request.url)
            return Result(request=request, blocked=f"internal error: {type(exc).__name__}: {exc}")

    def _robots_allow(self, url: str) -> bool:
        host = Request(url=url).host
        cached = self.robots.get(host)
        if cached is None or cached[1] < time.monotonic():
            with self.robots_lock:
                cached = self.robots.get(host)
                if cached is None or cached[1] < time.monotonic():
                    cached = self.robots[host] = self._load_robots(url, host)
        agent = self.crawl.user_agent or DEFAULT_USER_AGENT
        return cached[0].allowed(url, agent)

    def _load_robots(self, url: str, host: str) -> tuple[RobotsPolicy, float]:
        """robots.txt once per host per crawl: one worker fetches it, the others read it.

        An unreachable robots.txt disallows the host only for a while (RFC 9309): it is not
        stored, so it is asked for again after UNREACHABLE_ROBOTS_SECONDS.
        """
        cached = self.frontier.robots_text(host)
        deadline = time.monotonic() + self.fetcher.total_timeout + 2
        while cached is None and not self.frontier.robots_lock(
            host, ttl=deadline - time.monotonic()
        ):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
            cached = self.frontier.robots_text(host)
        if cached is None:
            status, text = self.fetcher.fetch_text(robots_url(url))
            if status is None:
                until = time.monotonic() + UNREACHABLE_ROBOTS_SECONDS
                return policy_from_response(None, ""), until
            cached = f"{status}\n{text}"
            self.frontier.robots_store(host, cached)
        status_line, _, text = cached.partition("\n")
        policy = policy_from_response(int(status_line), text)
        agent = self.crawl.user_agent or DEFAULT_USER_AGENT
        delay = policy.crawl_delay(agent)
        if delay and delay > self.host_delay:
            self.frontier.set_host_delay(host, delay)
        return policy, float("inf")

    # -- recording --------------------------------------------------------------------------

    def _decide(self, result: Result) -> None:
        request, fetch = result.request, result.fetch
        now = timezone.now()
        if fetch is None:
            result.page = self._page(request, now, error=result.blocked)
            result.outcome = Outcome(request=request, kind="done")
            return
        if fetch.retryable:
            if request.attempts < self.crawl.max_retries:
                delay = retry_delay(request.attempts, fetch.retry_after)
                result.outcome = Outcome(request=request, kind="retry", retry_delay=delay)
                return
            result.failure = FailedRequest(
                crawl_id=self.crawl.pk,
                url=request.url,
                depth=request.depth,
                referrer=request.referrer,
                attempts=request.attempts + 1,
                last_error=fetch.error or f"HTTP {fetch.status}",
                last_status=fetch.status,
                failed_at=now,
                url_hash=url_hash(request.url),
            )
            result.outcome = Outcome(request=request, kind="failed")
            return
        links = []
        # Like browsers' users, follow links of pages that worked, not of error pages.
        if (
            fetch.status is not None
            and 200 <= fetch.status < 300
            and request.depth < self.crawl.max_depth
        ):
            links = [link for link in fetch.links if self.scope.allows(link)]
        result.page = self._page(request, now, fetch=fetch)
        result.outcome = Outcome(
            request=request, kind="done", status=fetch.status, nbytes=fetch.nbytes, links=links
        )

    def _page(self, request: Request, now, *, fetch: FetchResult | None = None, error=""):
        """The page's row, ready for PAGE_ROWS.write."""
        page = Page(
            crawl_id=self.crawl.pk,
            url=request.url,
            depth=request.depth,
            referrer=request.referrer,
            fetched_at=now,
            url_hash=url_hash(request.url),
            error=error,
        )
        if fetch is not None:
            page.final_url = fetch.final_url
            page.status = fetch.status
            page.content_type = fetch.content_type[:200]
            page.bytes = fetch.nbytes
            page.elapsed_ms = fetch.elapsed_ms
            page.title = fetch.title[:500]
            page.error = fetch.error
            page.redirects = fetch.redirects
            page.truncated = fetch.truncated
            if self.crawl.keep_bodies and fetch.status is not None:
                page.body = fetch.body
        return PAGE_ROWS.row(page)

    def _flush(self, results: list[Result]) -> None:
        """Rows first, then one completion call: see the module docstring for why."""
        if not results:
            return
        for result in results:
            self._decide(result)
        pages = [r.page for r in results if r.page is not None]
        failures = [r.failure for r in results if r.failure is not None]
        PAGE_ROWS.write(pages)
        if failures:
            FailedRequest.objects.bulk_create(failures, batch_size=500, ignore_conflicts=True)
        outcomes = [r.outcome for r in results]
        with_redis_retry(lambda: self.frontier.complete(outcomes))
        self.report.pages += len(pages)
        publish_crawl(self.crawl.pk)


def stop_on_sigterm(flag: StopFlag) -> None:
    """In the worker's job process: SIGTERM finishes the current pages, hands the rest back."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: flag.set("sigterm"))


def run_slice(crawl_id: int, slice_id: str, *, budget_seconds: float | None = None) -> dict:
    """The step an RQ slice job runs; tests call it directly."""
    try:
        crawl = Crawl.objects.select_related("channel").get(pk=crawl_id)
    except Crawl.DoesNotExist:
        return {"reason": "crawl deleted"}
    if not crawl.is_active():
        return {"reason": f"crawl {crawl.state}"}
    work = Slice(crawl, slice_id, budget_seconds=budget_seconds)
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
