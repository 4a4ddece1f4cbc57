"""A crawl's frontier in Redis: queue, dedup, claimed requests, counters, politeness, robots.

This module owns every Redis key of a crawl and the Lua scripts in crawls/engine/lua/ that change
them; no other module builds these key names. What it stores (Request, Outcome, fingerprints)
is in crawls/engine/request.py, with the one packing of a queued request (Request.pack and
Request.unpack) that every reader of these keys goes through. The keys are listed once, with
their types and what they hold, in crawls/engine/keys.py (CRAWL_KEYS): the KEYS every script
gets, the Lua names bound to them and the key map in docs/architecture.md ("A crawl's Redis
keys") are drawn from that table, and key() builds no name it lacks.

Frontier is this module's core (configuration, claim, complete, slices, the live page's reads)
with its parts beside it, each a class it is made of: its hosts (frontier_hosts.py), its queue
read and pruned (frontier_queue.py), the overflow's Redis side (frontier_overflow.py), what
every worker shares (frontier_shared.py: robots.txt, the login session). The scripts and the
arguments they take are loaded and packed in frontier_scripts.py; what the alert checks read
of many crawls is in frontier_alerts.py. Every key name goes through Frontier.key().

Counter invariant, at every moment (stats() reads it atomically):

    requests == responses + errors + queued + delayed + in_flight + cancelled + spilled

`spilled` counts what waits in the database because the queue outgrew its window (the
requests of :spilling and the rows of crawls.models.SpilledRequest not in :unspilled; see
crawls/engine/overflow.py). `cancelled` is 0 until cancel(), which moves every unfinished
request into it; a host's drop and a change of scope (drop_unfit, drop_claimed: also counted
in `descoped`) move some. Times come from Redis' TIME inside the scripts so that all workers
agree. Needs Redis >= 5 (script effects replication, ZPOPMIN).
"""

from __future__ import annotations

import time
from dataclasses import replace

import redis

from crawlhub.redis.connections import get_redis, redis_memory_from, replicated
from crawls.engine.frontier_hosts import FrontierHosts
from crawls.engine.frontier_overflow import FrontierOverflow
from crawls.engine.frontier_queue import FrontierQueue
from crawls.engine.frontier_scripts import (
    HostEvent,
    _bucket,
    _host_events,
    _ms,
    _outcome_args,
    _scripts_of,
    status_class,
)
from crawls.engine.frontier_shared import FrontierShared
from crawls.engine.keys import (
    OVERFLOW_KEYS,
    SCRIPT_KEYS,
    SUPERVISOR_LOCK_KEY,
    is_crawl_key,
)
from crawls.engine.request import Outcome, Request

# A claim looks at most this many queue entries per request asked for when a host delay applies.
SCAN_FACTOR = 10

# A host whose requests all fail for this long is parked (held) this long, with the reason.
PARK_AFTER_SECONDS = 120.0
PARK_SECONDS = 600.0

# A running slice beats several times a second; without a beat for this long its worker is dead.
SLICE_BEAT_TTL = 10.0

# A slice whose alive-until is at most this far ahead is running (it beats); a queued one was
# registered much further ahead. Generous, for clocks of workers that disagree a little.
STARTED_SLICE_WINDOW_MS = 60_000

STATES = ("running", "paused", "cancelled")
COUNTERS = (
    "requests",
    "repeats",
    "responses",
    "errors",
    "failed",
    "retries",
    "bytes",
    "status_2xx",
    "status_3xx",
    "status_4xx",
    "status_5xx",
    "dropped",
    "cancelled",
    "not_modified",
    "sitemap_urls",
    "failed_http",
    "recovered",
    "descoped",
    "spilled",
    "sitemaps_missing",
)


# The pages/s chart: one point a second at most, kept for 10 minutes.
SERIES_POINTS = 600


class Frontier(FrontierHosts, FrontierQueue, FrontierOverflow, FrontierShared):
    """One crawl's frontier. Cheap to create; safe to share between threads."""

    def __init__(self, crawl_id: int, client: redis.Redis | None = None) -> None:
        self.crawl_id = crawl_id
        self.redis = client if client is not None else get_redis()
        self.prefix = f"ch:{{c{crawl_id}}}:"
        # Every script gets the same KEYS, in the order of crawls/engine/keys.py's table; the
        # overflow's scripts and cancel also get its two keys (the others never need them).
        self._keys = [self.prefix + name for name in SCRIPT_KEYS]
        self._overflow_keys = [self.prefix + name for name in OVERFLOW_KEYS]
        self._scripts = _scripts_of(self.redis)
        # The crawl's scope generation as the last claim read it (claim.lua): how a slice learns,
        # with no round trip of its own, that the include or exclude patterns changed.
        self.scope_gen = 0
        # The queue's size and the requests waiting in the database as the last claim saw them
        # (a slice spills or refills by these: crawls/engine/overflow.py).
        self.queued_seen = self.spilled_seen = 0

    def key(self, name: str) -> str:
        """This crawl's Redis key `name`, one of crawls/engine/keys.py's ("queue", "stats",
        "seen:<bucket>"...); "*" or "seen:*" make a SCAN pattern. Whatever reads a crawl's keys
        outside this module (the tests, a debugging session) takes their names from here."""
        if not is_crawl_key(name):
            raise ValueError(f"{name!r} is not one of a crawl's keys (crawls/engine/keys.py)")
        return self.prefix + name

    def _run(self, script: str, args: list) -> object:
        return self._scripts[script](keys=self._keys, args=args)

    def _run_overflow(self, script: str, args: list) -> object:
        return self._scripts[script](keys=self._overflow_keys, args=args)

    # Configuration and state

    def configure(
        self,
        *,
        max_pages: int,
        max_depth: int,
        host_delay: float,
        host_concurrency: int = 0,
        park_after: float = PARK_AFTER_SECONDS,
        park_for: float = PARK_SECONDS,
    ) -> None:
        """max_pages <= 0 means no cap on requests; max_depth < 0 means no depth limit;
        host_concurrency 0 means no cap on the requests one host is asked at once. A host none
        of whose requests (5 at least) got an answer for park_after seconds is held for
        park_for seconds, with the reason (0: never)."""
        self.redis.hset(
            self.key("config"),
            mapping={
                "max_pages": max_pages,
                "max_depth": max_depth,
                "host_delay_ms": _ms(host_delay),
                "host_concurrency": host_concurrency,
                "park_after_ms": _ms(park_after),
                "park_ms": _ms(park_for),
            },
        )

    def set_state(self, state: str) -> None:
        if state not in STATES:
            raise ValueError(f"unknown crawl state {state!r}; expected one of {STATES}")
        self.redis.set(self.key("state"), state)

    def replicated(self) -> bool:
        """Wait until a Redis replica holds what was written so far (with Sentinel: what the
        promoted replica will have). For the writes no worker can redo if a failover loses
        them: seeds, state changes (crawlhub.redis.connections.replicated; docs/reliability.md)."""
        return replicated(self.redis)

    def state(self) -> str | None:
        value = self.redis.get(self.key("state"))
        return value.decode() if value is not None else None

    # The hot path

    def add_seeds(
        self, urls: list[str], *, depth: int = 0, priority: int = 0, via: str = ""
    ) -> tuple[int, int]:
        """Schedule seed URLs through dedup and max_pages, in any state. Returns
        (added, repeats); seeds refused by max_pages count as "dropped". `via` marks them
        (Request.via): VIA_SITEMAP_ROOT for the sitemaps of a seed's site."""
        if not urls:
            return 0, 0
        args: list = [self.key("seen:"), priority, depth]
        for url in urls:
            request = Request(url=url, depth=depth, priority=priority, via=via)
            args += [_bucket(request.fp), request.fp, request.pack()]
        added, repeats = self._run("add", args)
        return int(added), int(repeats)

    def claim(self, n: int, *, lease_seconds: float) -> list[Request]:
        """Up to n requests, in queue order and honouring host delays; [] unless running."""
        return [request for request, _ in self.claim_ahead(n, lease_seconds=lease_seconds)]

    def claim_ahead(
        self,
        n: int,
        *,
        lease_seconds: float,
        ahead: float = 0.0,
        events: list[HostEvent] | None = None,
    ) -> list[tuple[Request, float]]:
        """claim(), also taking a host with a delay whose next turn is at most `ahead` seconds
        away: each request with the seconds it is to wait before it is sent (0 for one whose
        host is free now). send() still refuses one sent early. What the crawl's log tells
        (hosts whose hold or parking ran out) is added to `events`."""
        if n <= 0:
            return []
        args = [n, _ms(lease_seconds), n * SCAN_FACTOR, _ms(ahead)]
        members, waits, happened, *gen = self._run("claim", args)
        if events is not None:
            events += _host_events(happened)
        if gen:  # none when the crawl is not running
            self.scope_gen, self.queued_seen, self.spilled_seen = (int(x) for x in gen)
        return [
            (Request.unpack(member), int(wait) / 1000)
            for member, wait in zip(members, waits, strict=True)
        ]

    def send(self, request: Request) -> float | None:
        """May the claimed request go to its host now (a page, a sitemap, or the host's
        robots.txt on its behalf)? If so the host's delay runs from now, and the host stays
        reserved for the request until answered(); the host's delay in seconds (0 for none)
        is returned. None: the host became slower since the claim (it pushed back), and the
        request is to be handed back unsent."""
        delay = int(self._run("send", [request.host, request.fp]))
        return None if delay < 0 else delay / 1000

    def answered(self, request: Request) -> None:
        """The host answered what send() let through (or the fetch gave up): the host is free
        for its next request once its delay has passed from now. Counting from the answer
        too keeps the delay between arrivals at the host, however long a request took to
        reach it (a new connection, a busy worker)."""
        self._run("answered", [request.host, request.fp])

    def renew(self, requests: list[Request], *, lease_seconds: float) -> None:
        """Extend the leases of requests this worker still holds (a slow site must not make
        them expire and go to another worker while they are being fetched)."""
        if requests:
            self._run("renew", [_ms(lease_seconds), *(str(r.fp) for r in requests)])

    def complete(self, outcomes: list[Outcome]) -> list[HostEvent]:
        """Record a batch of outcomes in one script call. Outcomes whose request is no longer
        claimed (lease expired, or already completed) are ignored. `bytes` counts nbytes of
        every outcome that is not ignored, whatever its kind. Returns what the crawl's log
        tells: hosts parked, hosts back to their pace after a push-back."""
        if not outcomes:
            return []
        args: list = [self.key("seen:")]
        for outcome in outcomes:
            args += _outcome_args(outcome)
        return _host_events(self._run("complete", args))

    def release(self, requests: list[Request]) -> int:
        """Hand back claimed, unfetched requests (pause, SIGTERM). Returns how many were still
        claimed and went back to the queue."""
        if not requests:
            return 0
        return int(self._run("release", [request.fp for request in requests]))

    def requeue_expired(self) -> int:
        """Return every request whose lease has expired to the queue (its worker died, or its
        slice was stopped or ran out of time), each with one more crash (Request.crashes)."""
        return int(self._run("requeue_expired", []))

    def is_done(self) -> bool:
        """True when nothing is queued, delayed or claimed (read atomically)."""
        return int(self._run("pending", [])) == 0

    def stats(self) -> dict[str, int]:
        """Every counter (0 when never bumped) plus queued, delayed and in_flight, read in one
        MULTI so that the invariant holds in what is returned."""
        return stats_many([self.crawl_id], client=self.redis)[self.crawl_id]

    def _queue_stats(self, pipe) -> None:
        pipe.hgetall(self.key("stats"))
        pipe.zcard(self.key("queue"))
        pipe.zcard(self.key("delayed"))
        pipe.hlen(self.key("backup"))

    def retry_failed(
        self, requests: list[Request], statuses: list[int | None] | None = None
    ) -> int:
        """Queue requests from the failure queue again (attempts reset, no dedup check) and
        take them off failed and errors, and off the status class of their last answer
        (`statuses`, one per request, None for none). Skips requests that are claimed right
        now, and never takes back more than `failed`. Returns how many were queued."""
        if not requests:
            return 0
        statuses = statuses if statuses is not None else [None] * len(requests)
        args: list = []
        for request, status in zip(requests, statuses, strict=True):
            args.append(replace(request, attempts=0, crashes=0, crash_error="").pack())
            args.append(status_class(status) if status else "")
        return int(self._run("retry_failed", args))

    def cancel(self) -> None:
        """Stop for good: state cancelled, unfinished requests dropped and counted in
        "cancelled"; seen fingerprints and counters are kept. Late completions are ignored."""
        self._run_overflow("cancel", [])

    def retire(self, seconds: float) -> None:
        """Remove every key of a deleted crawl but its state, "cancelled" for `seconds` more:
        a slice still finishing a page reads it and stops. The state is set first and never
        removed meanwhile: a slice's script that ran between the two would find no state and
        write its key again (its slices' beat), left behind for good."""
        self.redis.set(self.key("state"), "cancelled", px=max(1, _ms(seconds)))
        self.delete(keep=self.key("state"))

    def delete(self, *, keep: str = "") -> None:
        """Remove every key of the crawl (but `keep`)."""
        batch: list[bytes] = []
        kept = keep.encode()
        for key in self.redis.scan_iter(match=self.prefix + "*", count=1000):
            if key == kept:
                continue
            batch.append(key)
            if len(batch) >= 500:
                self.redis.unlink(*batch)
                batch.clear()
        if batch:
            self.redis.unlink(*batch)

    # Slice jobs alive for this crawl, so the supervisor can replace those whose worker died

    def slice_register(self, slice_ids: list[str], *, ttl: float) -> None:
        """Count slices as alive from enqueue on, for up to ttl seconds before they start."""
        if slice_ids:
            self._run("slice_beat", [_ms(ttl), *slice_ids])

    def slice_beat(self, slice_id: str, ttl: float = SLICE_BEAT_TTL) -> None:
        """A running slice is alive for ttl seconds more."""
        self._run("slice_beat", [_ms(ttl), slice_id])

    def slice_end(self, slice_id: str) -> None:
        self.redis.zrem(self.key("slices"), slice_id)

    def queued_slices(self) -> list[str]:
        """The slices registered for longer than a beat keeps one alive: queued, not started."""
        floor = self.now_ms() + _ms(SLICE_BEAT_TTL)
        found = self.redis.zrangebyscore(self.key("slices"), f"({floor}", "+inf")
        return [slice_id.decode() for slice_id in found]

    def release_claimed(self) -> int:
        """Hand back every claimed request, unless the crawl is running: for a crawl whose
        slices were all stopped, so that none holds a request any more. Returns how many."""
        return int(self._run("release_claimed", []))

    def live_slices(self) -> int:
        """Slices registered or beating within their ttl; expired ones are forgotten."""
        return int(self._run("live_slices", []))

    # The live page: throttle, per-host queue sizes and the pages/s series

    def publish_slot(self, ms: int) -> bool:
        """True for the one caller, across processes, that may publish a snapshot now; the
        next one may go ms milliseconds later."""
        return bool(self.redis.set(self.key("publish"), "1", nx=True, px=max(1, ms)))

    def live_view(self, *, points: int = SERIES_POINTS, record: bool = False) -> dict:
        """What the live page shows, in one MULTI: "stats" (stats()), "hosts" (requests waiting
        in the queue per host; delayed retries and claimed requests not counted) and "series"
        (the last `points` seconds of (unix_s, responses)). With record, the current responses
        count is appended to the series first (at most once a second)."""
        return live_views([self.crawl_id], points=points, record=record, client=self.redis)[
            self.crawl_id
        ]

    def now_ms(self) -> int:
        """Redis' clock, which every time in these keys is measured by."""
        seconds, micros = self.redis.time()
        return seconds * 1000 + micros // 1000


def stats_many(crawl_ids: list[int], client: redis.Redis | None = None) -> dict[int, dict]:
    """Frontier.stats() of many crawls in one round trip (list pages)."""
    client = client or get_redis()
    frontiers = [Frontier(crawl_id, client) for crawl_id in crawl_ids]
    with client.pipeline(transaction=True) as pipe:
        for frontier in frontiers:
            frontier._queue_stats(pipe)
        replies = pipe.execute()
    result = {}
    for n, frontier in enumerate(frontiers):
        result[frontier.crawl_id] = _stats_from(*replies[4 * n : 4 * n + 4])
    return result


def live_views(
    crawl_ids: list[int],
    *,
    points: int = SERIES_POINTS,
    record: bool = False,
    hosts: bool = True,
    client: redis.Redis | None = None,
) -> dict[int, dict]:
    """Frontier.live_view() of many crawls in one MULTI; without `hosts` the queue size per
    host is left out ({}), for the list page, which shows none. "memory" is Redis' (a
    RedisMemory), the same for every crawl; "at" is Redis' clock in the same MULTI (unix
    seconds): views read in one order carry times in that order, whichever process read them
    (the pages drop a snapshot older than the one they show)."""
    client = client or get_redis()
    frontiers = [Frontier(crawl_id, client) for crawl_id in crawl_ids]
    now_ms = _ms(time.time())
    with client.pipeline(transaction=True) as pipe:
        pipe.time()
        pipe.info("memory")
        for frontier in frontiers:
            frontier._queue_stats(pipe)
            if hosts:
                pipe.hgetall(frontier.key("hostq"))
            frontier._scripts["series"](
                keys=frontier._keys, args=[SERIES_POINTS, points, 1 if record else 0], client=pipe
            )
            # Started slices beat SLICE_BEAT_TTL ahead; queued ones were registered an hour
            # ahead (jobs.QUEUED_SLICE_TTL): those due within a minute are running.
            pipe.zcount(frontier.key("slices"), now_ms, now_ms + STARTED_SLICE_WINDOW_MS)
        replies = iter(pipe.execute())
    seconds, micros = next(replies)
    memory = redis_memory_from(next(replies))
    views = {}
    for frontier in frontiers:
        stats = _stats_from(next(replies), next(replies), next(replies), next(replies))
        by_host = next(replies) if hosts else {}
        views[frontier.crawl_id] = {
            "stats": stats,
            "hosts": {host.decode(): int(n) for host, n in by_host.items()},
            "series": [tuple(int(x) for x in point.split(b":")) for point in next(replies)],
            "slices_running": int(next(replies)),
            "memory": memory,
            "at": seconds + micros / 1_000_000,
        }
    return views


def _stats_from(counters: dict, queued: int, delayed: int, in_flight: int) -> dict[str, int]:
    stats = dict.fromkeys(COUNTERS, 0)
    stats.update({name.decode(): int(value) for name, value in counters.items()})
    stats.update(queued=queued, delayed=delayed, in_flight=in_flight)
    return stats


def supervisor_lock(ttl: float, client: redis.Redis | None = None) -> bool:
    """True for the one supervisor run that may go ahead; the lock expires after ttl seconds."""
    client = client if client is not None else get_redis()
    return bool(client.set(SUPERVISOR_LOCK_KEY, "1", nx=True, px=max(1, _ms(ttl))))
