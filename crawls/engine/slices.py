"""One slice of a crawl: claim requests from the frontier, fetch them concurrently, store the
pages, complete them in batches, and stop after a time budget, on pause, or on SIGTERM.

Pages are written to the database before their completion reaches Redis. A worker killed in
between leaves the request leased, so it is fetched again and the row (unique per crawl and
URL) is kept once; a completion that Redis already applied is ignored the second time.

A row the database refuses does not take the slice down: the batch is written again one row at
a time, and each request whose row still fails is queued again with one more crash and the
error (crawls.engine.retry); a request that has crashed too many slices is failed with that
error without being fetched again. When the database itself is away, the slice stops instead.

This is the slice's loop (claim, collect, flush, renew, stop); what a request goes through in a
pool thread is crawls/engine/fetching.py, how a crawl's settings become the objects both use
is crawls/engine/crawl_settings.py, and what stops a slice (and its wait for Redis) is
crawls/engine/stopping.py.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings

from crawlhub.http import Fetcher
from crawlhub.redis.connections import REDIS_ERRORS, redis_memory
from crawls.engine import crawl_log, retry
from crawls.engine.crawl_log import SliceLog
from crawls.engine.crawl_settings import (
    CannotStart,
    fetcher_options,
    scope_of,
    slice_seconds,
)
from crawls.engine.fetching import PageFetch
from crawls.engine.frontier import Frontier, HostEvent
from crawls.engine.live import publish_crawl
from crawls.engine.overflow import Overflow
from crawls.engine.recording import Recorder, Result
from crawls.engine.request import Request
from crawls.engine.scope import ScopeError
from crawls.engine.scope_changes import current_scope, request_fits
from crawls.engine.sessions import LoginFailed
from crawls.engine.sharing import (
    gives_way,
    others_waiting,
    running_footprints,
    slice_turn_seconds,
    waits_for_memory,
)
from crawls.engine.stopping import SliceReport, StopFlag, stop_on_sigterm, with_redis_retry
from crawls.models import Crawl

log = logging.getLogger(__name__)

STATE_CHECK_SECONDS = 0.25
FLUSH_EVERY_SECONDS = 0.25
# While the crawl's queue is empty (as the last claim saw it, nothing spilled either), the
# fetchers wait for the links of the pages fetched so far: they are written this soon, not a
# whole interval later, or a crawl's start (one page, then its links, then theirs) waits one
# interval per level.
FLUSH_STARVING_SECONDS = 0.02
FLUSH_AT_OUTCOMES = 100
# Fetched pages wait in memory for the next flush; their kept bodies and links are written
# early once they hold this much (recording.Result.held_bytes).
FLUSH_AT_BYTES = 32 * 1024 * 1024
IDLE_EXIT_SECONDS = 2.0
KEPT_IDLE_SECONDS = 0.5  # nothing fetched for this long: proxies kept (greedy) go back
EMPTY_CLAIM_BACKOFF = 0.1
# A host with a delay whose next turn comes within this long is claimed now, and its request
# waits in its thread for the turn: asked on time rather than up to a claim interval (an empty
# claim's backoff, a loop's wait) late on every turn, which cost a many-host polite crawl a
# tenth of its pace. More than EMPTY_CLAIM_BACKOFF plus a loop's wait (_collect).
CLAIM_AHEAD_SECONDS = 0.2

# How often a slice reads Redis' memory against its budget (one INFO call), and, once past its
# turn, whether another crawl's slice waits for a worker (one LRANGE).
MEMORY_CHECK_SECONDS = 1.0


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


class Slice:
    def __init__(self, crawl: Crawl, slice_id: str, *, budget_seconds: float | None = None):
        self.crawl = crawl
        self.slice_id = slice_id
        self.frontier = Frontier(crawl.pk)
        self.overflow = Overflow(self.frontier)
        self.budget = budget_seconds or slice_seconds(crawl)
        self.lease = settings.CRAWLHUB_LEASE_SECONDS
        self.stop = StopFlag()
        scope, fetcher = scope_of(crawl), Fetcher(**fetcher_options(crawl))
        self.log = SliceLog(crawl.pk, slice_id)
        self.recorder = Recorder(crawl, scope, max_redirects=fetcher.max_redirects, log=self.log)
        self.fetching = PageFetch(
            crawl,
            self.frontier,
            scope=scope,
            fetcher=fetcher,
            recorder=self.recorder,
            stop=self.stop.event,
            lease=self.lease,
            give_up=self.stop.shutdown,
            log=self.log,
        )
        # Politeness needs fetches to start when claimed; without a delay, keep a buffer.
        self.buffer = crawl.threads * (1 if self.fetching.host_delay > 0 else 2)
        self.report = SliceReport()
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
        # The scope generation this slice's patterns are from (crawls/engine/scope_changes.py):
        # 0 until the crawl's patterns change while it runs, and then what it claims is checked.
        self.scope_gen = 0
        self.last_memory = 0.0
        self.memory_full = False  # Redis holds its budget: claim nothing until it frees
        # Past this long, the slice hands over to another crawl's waiting slice (sharing.py).
        self.turn = slice_turn_seconds(self.budget) if gives_way(crawl) else self.budget

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> SliceReport:
        started = time.monotonic()
        self.last_flush = self.last_state = self.last_work = self.last_renew = started
        self.last_turn_check = started
        pool = ThreadPoolExecutor(self.crawl.threads, thread_name_prefix=f"slice-{self.slice_id}")
        try:
            while True:
                now = time.monotonic()
                self._check_in(now)
                self._renew(now)
                if now - started >= self.budget:
                    self.stop.set("budget")
                elif now - started >= self.turn and self._turn_wanted(now):
                    self.stop.set("turn")
                if self.stop or not self._claim(pool, now) or not self._collect(now):
                    break
                self._flush_when_due()
        finally:
            self._shut_down(pool)
        self.report.reason = self.stop.reason
        self.report.seconds = round(time.monotonic() - started, 3)
        return self.report

    def _check_in(self, now: float) -> None:
        """A few times a second: stop when the crawl left 'running'; tell the supervisor we live;
        once a second, see whether Redis holds its budget of memory."""
        if now - self.last_state >= STATE_CHECK_SECONDS:
            self.last_state = now
            self._check_state()
            self._beat()
            self.fetching.read_delayed()
        if now - self.last_memory >= MEMORY_CHECK_SECONDS:
            self.last_memory = now
            self._check_memory()

    def _turn_wanted(self, now: float) -> bool:
        """Past its turn, once a second: whether another crawl's slice waits for a worker."""
        if now - self.last_turn_check < MEMORY_CHECK_SECONDS:
            return False
        self.last_turn_check = now
        try:
            return others_waiting(self.frontier.redis, self.crawl.pk)
        except REDIS_ERRORS:
            return False

    def _check_memory(self) -> None:
        """While Redis holds its memory budget and this crawl at least the running crawls'
        average (or Redis is past its stop mark: crawls/engine/sharing.py) the slice claims
        nothing: each page fetched would add its links to Redis. What it holds is fetched and
        completed (the room left below maxmemory is for that); it waits, alive, instead of
        ending idle, so no successor starts meanwhile."""
        try:
            memory = redis_memory(self.frontier.redis)
        except REDIS_ERRORS:
            return
        waits = memory.full
        if waits and not memory.stopped:
            # Past maxmemory Redis refuses the MULTI that reads the counters: it waits then.
            with contextlib.suppress(*REDIS_ERRORS):
                waits = waits_for_memory(
                    memory,
                    crawl_id=self.crawl.pk,
                    footprints=running_footprints(self.frontier.redis),
                )
        if waits and not self.memory_full:
            log.warning(
                "crawl %s: Redis holds %d of its %d-byte memory budget; slice %s claims "
                "nothing until memory frees",
                self.crawl.pk,
                memory.used,
                memory.budget,
                self.slice_id,
            )
        elif self.memory_full and not waits:
            log.info(
                "crawl %s: Redis memory freed (%d bytes); slice %s claims again",
                self.crawl.pk,
                memory.used,
                self.slice_id,
            )
        self.memory_full = waits

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
        if self.memory_full:
            self.last_work = now  # waiting for memory, not idle
            self.next_claim = now + EMPTY_CLAIM_BACKOFF
            return True
        events: list[HostEvent] = []
        claimed = with_redis_retry(
            lambda: self.frontier.claim_ahead(
                free, lease_seconds=self.lease, ahead=CLAIM_AHEAD_SECONDS, events=events
            )
        )
        self.log.host_events(events)
        # The queue past its window, or low with requests in the database: a batch moves.
        moved = self.overflow.balance(
            queued=self.frontier.queued_seen, spilled=self.frontier.spilled_seen
        )
        if claimed:
            self.fetching.read_delayed()  # after the claim: a host it gave with a delay is in it
            if not self.log.started:
                self.log.slice_started(len(claimed))
        if self.frontier.scope_gen != self.scope_gen:
            self._rescope(self.frontier.scope_gen)
        if self.scope_gen and claimed:
            claimed = self._in_scope(claimed)
        self.recorder.look_up([r.fp for r, _ in claimed])
        for request, wait in claimed:
            if retry.gave_up(request.crashes):
                self._keep(Result(request=request, given_up=True))
                continue
            future = pool.submit(self.fetching.fetch, request, wait)
            self.running[future] = request
            future.add_done_callback(self.completed.put)
        if claimed:
            self.last_work = now
        elif not self.running and not self.done and self._crawl_done():
            self.stop.set("done")
            return False
        elif not moved:  # a queue just refilled is claimed from at once
            self.next_claim = now + EMPTY_CLAIM_BACKOFF
        return True

    def _rescope(self, gen: int) -> None:
        """The crawl's patterns changed: pages recorded from now on keep the links the new
        ones allow, and what the slice claims is checked against them."""
        try:
            scope = current_scope(self.crawl)
        except ScopeError:  # saved past the checks: the old scope goes on, said once
            log.exception("crawl %s: its changed patterns cannot be used", self.crawl.pk)
        else:
            self.recorder.scope = self.fetching.scope = scope
        self.scope_gen = gen

    def _in_scope(self, claimed: list[tuple[Request, float]]) -> list[tuple[Request, float]]:
        """What was claimed and fits the crawl's scope; the rest is dropped unfetched (queued
        under the scope before the change, by a slice that had not taken it in yet)."""
        scope = self.recorder.scope
        kept = [(request, wait) for request, wait in claimed if request_fits(scope, request)]
        if len(kept) < len(claimed):
            unfit = [request for request, _ in claimed if not request_fits(scope, request)]
            dropped = with_redis_retry(lambda: self.frontier.drop_claimed(unfit))
            self.report.extra["descoped"] = self.report.extra.get("descoped", 0) + dropped
        return kept

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
        if self.fetching.kept_proxies and now - self.last_work >= KEPT_IDLE_SECONDS:
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
        every = FLUSH_STARVING_SECONDS if self.starving else FLUSH_EVERY_SECONDS
        if (
            len(self.done) >= FLUSH_AT_OUTCOMES
            or self.done_bytes >= FLUSH_AT_BYTES
            or (self.done and time.monotonic() - self.last_flush >= every)
        ):
            self._flush(self.done)
            self.done, self.done_bytes = [], 0
            self.last_flush = time.monotonic()
            if self.starving:  # what the flush queued is claimed at once, not after a backoff
                self.next_claim = 0.0

    @property
    def starving(self) -> bool:
        """The last claim saw the crawl's queue empty and nothing spilled."""
        return not (self.frontier.queued_seen or self.frontier.spilled_seen)

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
        if self.fetching.extractor is not None:
            self.fetching.extractor.close()
        self._release_kept_proxies()
        self._flush(self.done)
        if self.unstarted:
            self.report.handed_back += with_redis_retry(
                lambda: self.frontier.release(self.unstarted)
            )
        self.fetching.fetcher.close()

    def _release_kept_proxies(self) -> None:
        """No proxy stays leased past the slice; with Redis away, their leases run out."""
        with contextlib.suppress(*REDIS_ERRORS):
            self.fetching.kept_proxies.release_all()

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
        self.log.count_errors(results)  # told with the next batch, or when the slice ends
        outcomes = [r.outcome for r in results]
        self.log.host_events(with_redis_retry(lambda: self.frontier.complete(outcomes)))
        publish_crawl(self.crawl.pk)


def run_slice(crawl_id: int, slice_id: str, *, budget_seconds: float | None = None) -> dict:
    """The step an RQ slice job runs; tests call it directly. CannotStart when the crawl's
    settings cannot be used (the job then fails the crawl). However it ends (at once, its
    crawl no longer running, or failing), the slice is no longer counted alive: registered when
    queued, it would count for QUEUED_SLICE_TTL, and its crawl get no other slice meanwhile."""
    try:
        work = _slice_to_run(crawl_id, slice_id, budget_seconds)
        if isinstance(work, dict):
            return work
        stop_on_sigterm(work.stop)
        work._beat()
        report = work.run()
    finally:
        Frontier(crawl_id).slice_end(slice_id)
    work.log.slice_ended(
        pages=report.pages,
        reason=report.reason,
        seconds=report.seconds,
        handed_back=report.handed_back,
    )
    return {
        "pages": report.pages,
        "reason": report.reason,
        "seconds": report.seconds,
        "handed_back": report.handed_back,
    }


def _slice_to_run(crawl_id: int, slice_id: str, budget_seconds: float | None) -> Slice | dict:
    """The slice, its session started; or the report of a slice that has nothing to do."""
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
    if session := work.fetching.session:
        try:
            session.start()  # the crawl's session, logging in if no worker has yet
        except LoginFailed as exc:
            work.fetching.fetcher.close()
            crawl_log.write(work.log.take(force=True))
            raise CannotStart(f"the login step failed: {exc}") from exc
    return work
