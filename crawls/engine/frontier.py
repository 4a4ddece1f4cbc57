"""A crawl's frontier in Redis: queue, dedup, claimed requests, counters, politeness, robots.

This module owns every Redis key of a crawl and the Lua scripts in crawls/engine/lua/ that change
them; no other module builds these key names. What it stores (Request, Outcome, fingerprints)
is in crawls/engine/request.py, with the one packing of a queued request (Request.pack and
Request.unpack) that every reader of these keys goes through. The keys are listed once, with
their types and what they hold, in crawls/engine/keys.py (CRAWL_KEYS): the KEYS every script
gets, the Lua names bound to them and the key map in docs/architecture.md ("A crawl's Redis
keys") are drawn from that table, and key() builds no name it lacks.

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

import base64
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import redis
from redis.commands.core import Script

from crawlhub.http.urls import url_origin
from crawlhub.redis.connections import get_redis, redis_memory_from, replicated
from crawls.engine.keys import (
    ALERTS_LOCK_KEY,
    OVERFLOW_KEYS,
    SCRIPT_KEYS,
    SUPERVISOR_LOCK_KEY,
    is_crawl_key,
    lua_header,
)
from crawls.engine.request import (
    OUTCOME_KINDS,
    VIA_LISTED,
    VIA_REDIRECT,
    VIA_SITEMAP,
    Outcome,
    Request,
    fingerprint,
    link_tail,
    prefix_host,
    request_host,
    with_history,
)

# 2^12 buckets: at 1,000,000 URLs a bucket holds ~244 fingerprints (the fullest ~310), well
# under Redis' set-max-intset-entries=512, so every bucket stays an intset at ~8 bytes per
# fingerprint. Past ~1.7M URLs the fullest buckets start to convert to hash tables (~5x the memory).
SEEN_BUCKET_BITS = 12

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

_LUA_DIR = Path(__file__).resolve().parent / "lua"
_SCRIPTS = (
    "add",
    "claim",
    "complete",
    "release",
    "requeue_expired",
    "retry_failed",
    "pending",
    "cancel",
    "slice_beat",
    "live_slices",
    "series",
    "renew",
    "release_claimed",
    "send",
    "answered",
    "push_back",
    "host_hold",
    "host_drop",
    "pace",
    "drop_claimed",
    "drop_queued",
    "queue_depths",
    "queue_page",
    "spill",
    "spilled",
    "unspill",
    "unspilled",
)

# The queue view reads at most this many (priority, depth) groups of the queue.
DEPTH_GROUPS = 10_000

# The pages/s chart: one point a second at most, kept for 10 minutes.
SERIES_POINTS = 600
# The alert series: at most this many samples, kept this long after the last pass.
ALERT_SAMPLES_KEPT = 20_000
ALERT_SERIES_TTL = 2 * 24 * 3600


def _lua_sources() -> dict[str, str]:
    # Each script: the names of its KEYS (from crawls/engine/keys.py), the shared library, itself.
    lib = lua_header() + (_LUA_DIR / "_lib.lua").read_text()
    return {name: lib + "\n" + (_LUA_DIR / f"{name}.lua").read_text() for name in _SCRIPTS}


_SOURCES = _lua_sources()


_BUCKET_NAMES = tuple(format(n, "03x") for n in range(1 << SEEN_BUCKET_BITS))
_BUCKET_MASK = (1 << SEEN_BUCKET_BITS) - 1


def _bucket(fp: int) -> str:
    """The seen-set suffix of a fingerprint: its top bits, in hex."""
    return _BUCKET_NAMES[(fp >> (64 - SEEN_BUCKET_BITS)) & _BUCKET_MASK]


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


# Each client's scripts, registered once: registering hashes every script's source, and a
# Frontier is made per action, per live update, per slice.
_registered: weakref.WeakKeyDictionary[redis.Redis, dict[str, Script]] = weakref.WeakKeyDictionary()


def _scripts_of(client: redis.Redis) -> dict[str, Script]:
    scripts = _registered.get(client)
    if scripts is None:
        scripts = _registered[client] = {
            name: client.register_script(src) for name, src in _SOURCES.items()
        }
    return scripts


class Frontier:
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

    def set_host_delay(self, host: str, seconds: float) -> None:
        """Override the crawl's host delay for one host (e.g. robots.txt Crawl-delay)."""
        self.redis.hset(self.key("hostdelay"), host.lower(), _ms(seconds))

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

    def pace(self, host: str) -> float:
        """May a fetch made outside a page's turn (the login step) go to the host now? 0: yes,
        and the host's delay runs from now; else the seconds to wait before asking again."""
        return int(self._run("pace", [host.lower(), "send"])) / 1000

    def paced(self, host: str) -> None:
        """That fetch got its answer: the host's delay runs from now too (as answered())."""
        self._run("pace", [host.lower(), "answered"])

    def pushed_back(self, host: str, *, wait: float | None, why: str) -> PushBack:
        """The host answered 429 or 503 (`wait`: its Retry-After in seconds, if any): every
        worker slows down on it, and eases back as it answers normally again. Returns the
        host's delay in seconds now, and whether this push-back raised it."""
        wait_ms = "" if wait is None else _ms(wait)
        delay, raised = self._run("push_back", [host.lower(), wait_ms, why[:200]])
        return PushBack(delay=int(delay) / 1000, raised=bool(raised))

    def delayed_hosts(self) -> frozenset[str]:
        """The hosts with a delay of their own (a robots.txt Crawl-delay) or slowed down for
        pushing back. In a crawl with no delay and no cap these are the only hosts whose
        requests must take their turn (send, answered): any other host is asked at once."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hkeys(self.key("hostdelay"))
            pipe.hkeys(self.key("hostslow"))
            own, slowed = pipe.execute()
        return frozenset(host.decode() for host in (*own, *slowed))

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

    # The overflow's Redis side: crawls/engine/overflow.py holds the database's and the order
    # of the steps. Every write takes the holder's token and is refused (OverflowFenced) for
    # one that is no longer current.

    def overflow_token(self) -> str:
        """A new holder of the crawl's overflow (under its lock in the database): the token
        its writes carry; any older token is refused from now on."""
        return str(self.redis.hincrby(self.key("config"), "overflow_token", 1))

    def overflow_sizes(self) -> tuple[int, int]:
        """(queued, spilled) at one moment."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zcard(self.key("queue"))
            pipe.hget(self.key("stats"), "spilled")
            queued, spilled = pipe.execute()
        return int(queued), int(spilled or 0)

    def overflow_staged(self) -> tuple[list[tuple[int, int, str]], list[int]]:
        """What a holder cut short left: the requests taken for the database, (fp, score,
        packed) each, and the fingerprints whose rows are to be removed."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrange(self.key("spilling"), 0, -1, withscores=True)
            pipe.smembers(self.key("unspilled"))
            spilling, unspilled = pipe.execute()
        taken = [(_fp_of(entry), int(score), entry.decode()) for entry, score in spilling]
        return taken, sorted(int(fp) for fp in unspilled)

    def spill(self, token: str, count: int) -> list[tuple[int, int, str]]:
        """Take the `count` lowest-ranked queued requests for the database (spill.lua):
        (fp, score, packed) each. OverflowStaged while an earlier step is left to finish."""
        found = self._run_overflow("spill", [token, count])
        _check_fenced(found[0] if found and not isinstance(found[0], bytes) else 0)
        return [
            (_fp_of(found[i]), int(float(found[i + 1])), found[i].decode())
            for i in range(0, len(found), 2)
        ]

    def spilled(self, token: str, entries: list[str]) -> None:
        """The requests spill() took are in the database now: they leave Redis."""
        if entries:
            _check_fenced(int(self._run_overflow("spilled", [token, *entries])))

    def unspill(self, token: str, rows: list[tuple[int, int, str]], *, mode: str) -> int:
        """Rows (fp, score, packed) leave the database's overflow: back into the queue with
        their scores ("queue"), or dropped, counted in "cancelled" ("cancel": a host's drop)
        and in "descoped" too ("drop": out of the crawl's scope). Returns how many; 0 for a
        cancelled crawl (its rows are purged)."""
        if mode not in ("queue", "drop", "cancel"):
            raise ValueError(f"unknown mode {mode!r}")
        args: list = [token, mode]
        for fp, score, packed in rows:
            args += [fp, score, packed]
        count = int(self._run_overflow("unspill", args))
        _check_fenced(count)
        return max(0, count)

    def unspilled(self, token: str, fps: list[int]) -> None:
        """The rows of these fingerprints are removed from the database: forgotten here."""
        if fps:
            _check_fenced(int(self._run_overflow("unspilled", [token, *fps])))

    def overflow_forget(self) -> None:
        """A cancelled crawl's rows are purged: nothing of the overflow is left in Redis."""
        self.redis.delete(self.key("spilling"), self.key("unspilled"))

    def retire(self, seconds: float) -> None:
        """Remove every key of a deleted crawl but its state, "cancelled" for `seconds` more:
        a slice still finishing a page reads it and stops."""
        self.delete()
        self.redis.set(self.key("state"), "cancelled", px=max(1, _ms(seconds)))

    def delete(self) -> None:
        """Remove every key of the crawl."""
        batch: list[bytes] = []
        for key in self.redis.scan_iter(match=self.prefix + "*", count=1000):
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

    # Hosts: what each one is doing, and an operator's hold, release and drop

    def host_hold(self, host: str, *, until_ms: int) -> None:
        """Give the host no request until until_ms (Redis time, ms); claimed ones go on."""
        self._run("host_hold", [host.lower(), int(until_ms)])

    def host_release(self, host: str) -> None:
        """End a hold: the host may be asked again as its delay allows."""
        self._run("host_hold", [host.lower(), ""])

    def host_drop(self, host: str) -> int:
        """Drop the host's queued requests and retries (counted in "cancelled"). Returns how
        many."""
        return int(self._run("host_drop", [host.lower()]))

    def now_ms(self) -> int:
        """Redis' clock, which every time in these keys is measured by."""
        seconds, micros = self.redis.time()
        return seconds * 1000 + micros // 1000

    def host_rows(self) -> list[dict]:
        """Per host the crawl knows of (queued, in flight, answered or erred): "host",
        "queued", "in_flight", "done", "errors", "delay" (seconds now, a push-back's
        included), "next_at" and "held_until" (Redis ms, 0 for none) and "why" (why it is
        parked or slowed, "" when it is not), read in one MULTI."""
        names = (
            "hostq",
            "hostflight",
            "hostdone",
            "hosterrors",
            "hostdelay",
            "hostslow",
            "hosts",
            "hostheld",
            "hostwhy",
            "hostparked",
        )
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(self.key("config"), "host_delay_ms")
            for name in names:
                pipe.hgetall(self.key(name))
            default, *maps = pipe.execute()
        by = {
            name: {host.decode(): value.decode() for host, value in found.items()}
            for name, found in zip(names, maps, strict=True)
        }
        hosts = set(by["hostq"]) | set(by["hostflight"]) | set(by["hostdone"])
        hosts |= set(by["hosterrors"]) | set(by["hostheld"])
        rows = []
        for host in sorted(hosts):
            base = int(by["hostdelay"].get(host, default or 0))
            delay = max(base, int(by["hostslow"].get(host, 0)))
            why = by["hostwhy"].get(host, "").partition(" ")[2] if host in by["hostslow"] else ""
            why = "; ".join(filter(None, (by["hostparked"].get(host, ""), why)))
            rows.append(
                {
                    "host": host,
                    "queued": int(by["hostq"].get(host, 0)),
                    "in_flight": int(by["hostflight"].get(host, 0)),
                    "done": int(by["hostdone"].get(host, 0)),
                    "errors": int(by["hosterrors"].get(host, 0)),
                    "delay": delay / 1000,
                    "next_at": int(by["hosts"].get(host, 0)),
                    "held_until": int(by["hostheld"].get(host, 0)),
                    "why": why,
                }
            )
        return rows

    # The scope changed while the crawl runs (crawls/engine/scope_changes.py), and what is queued
    # (the queue view). Every read of queued entries is here, decoded by Request.unpack.

    def scope_change(self) -> tuple[int, list[Request]]:
        """The crawl's include or exclude patterns changed: the next scope generation, which
        every claim from now on returns (claim.lua), and the requests claimed at this moment,
        read in the same MULTI: those were handed out under the scope before, and any other
        request is claimed under the new one."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(self.key("config"), "scope_gen", 1)
            pipe.hvals(self.key("backup"))
            gen, claimed = pipe.execute()
        return int(gen), [Request.unpack(member) for member in claimed]

    def scope_generation(self) -> int:
        return int(self.redis.hget(self.key("config"), "scope_gen") or 0)

    def drop_claimed(self, requests: list[Request]) -> int:
        """Drop claimed requests that will not be fetched, because they no longer fit the
        crawl's scope (counted in "cancelled" and "descoped"). Returns how many were still
        claimed."""
        if not requests:
            return 0
        return int(self._run("drop_claimed", [request.fp for request in requests]))

    def drop_unfit(
        self,
        fits: Callable[[Request], bool],
        *,
        cursor: str = "",
        budget: int = 5000,
        batch: int = 500,
    ) -> tuple[int, str]:
        """Drop the queued requests and retries that `fits` refuses (counted in "cancelled" and
        "descoped"), looking at about `budget` entries from `cursor` ("": the start), `batch`
        at a time, each batch dropped in one script call (an entry claimed meanwhile is not
        counted). Returns (how many were dropped, the cursor to go on from; "" once the queue
        and the retries were looked at whole). Entries that stay queued from start to end are
        each looked at; those added meanwhile may not be (a slice sorts each claim itself)."""
        where, _, position = cursor.partition(":") if cursor else ("queue", "", "0")
        if where not in ("queue", "delayed") or not position.isdigit():
            raise ValueError(f"not a cursor of drop_unfit: {cursor[:40]!r}")
        dropped, seen = 0, 0
        while seen < budget:
            position, found = self.redis.zscan(self.key(where), int(position), count=batch)
            seen += len(found)
            doomed = [member for member, _ in found if not fits(Request.unpack(member))]
            if doomed:
                dropped += int(self._run("drop_queued", [where, *doomed]))
            if position == 0 and where == "queue":
                where = "delayed"
            elif position == 0:
                return dropped, ""
        return dropped, f"{where}:{position}"

    def queue_counts(self) -> dict:
        """What waits, counted without reading a request, in one MULTI: "queued",
        "spilled" (in the database: the queue past its window) and "retrying" (delayed
        retries), "hosts" (of the queue in Redis) (host -> queued requests, most first) and
        "depths" (depth -> queued requests, shallowest first; from the scores, depth 4095 and
        over as 4095), "depths_partial" when more than DEPTH_GROUPS (priority, depth) groups
        were left out."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.zcard(self.key("queue"))
            pipe.zcard(self.key("delayed"))
            pipe.hgetall(self.key("hostq"))
            self._scripts["queue_depths"](keys=self._keys, args=[DEPTH_GROUPS], client=pipe)
            pipe.hget(self.key("stats"), "spilled")
            queued, retrying, hosts, groups, spilled = pipe.execute()
        depths: dict[int, int] = {}
        for i in range(0, len(groups) - 1, 3):
            depth = int(groups[i + 1])
            depths[depth] = depths.get(depth, 0) + int(groups[i + 2])
        by_host = sorted(((h.decode(), int(n)) for h, n in hosts.items()), key=lambda x: -x[1])
        return {
            "queued": int(queued),
            "spilled": int(spilled or 0),
            "retrying": int(retrying),
            "hosts": dict(by_host),
            "depths": dict(sorted(depths.items())),
            "depths_partial": bool(groups[-1]),
        }

    def queue_page(self, *, after: str = "", size: int = 50) -> tuple[list[Request], str]:
        """Up to `size` queued requests in the order they are to be claimed, after a cursor
        this method returned ("": from the head). Returns (the requests, the cursor of the
        next ones; "" when none followed). ValueError for a cursor it did not make. Claims
        and new links move the queue meanwhile: a page goes on from where the last one ended,
        whatever left the queue before it."""
        score, member = "", b""
        if after:
            try:
                score_text, _, member = base64.urlsafe_b64decode(after.encode()).partition(b" ")
                score = score_text.decode()
                if not member or not math.isfinite(float(score)):
                    raise ValueError(score)
            except ValueError:
                raise ValueError("not a cursor of this crawl's queue") from None
        found = self._run("queue_page", [size + 1, score, member])  # one more: is there a next?
        entries, scores = found[0 : 2 * size : 2], found[1 : 2 * size : 2]
        requests = [Request.unpack(entry) for entry in entries]
        if len(found) <= 2 * size:
            return requests, ""
        return requests, base64.urlsafe_b64encode(scores[-1] + b" " + entries[-1]).decode()

    # robots.txt, cached per host for the crawl

    def robots_text(self, host: str) -> str | None:
        text = self.redis.hget(self.key("robots"), host.lower())
        return text.decode() if text is not None else None

    def robots_store(self, host: str, text: str) -> None:
        self.redis.hset(self.key("robots"), host.lower(), text)

    def robots_lock(self, host: str, ttl: float = 30) -> bool:
        """True for the one worker that should fetch the host's robots.txt; the lock expires
        after ttl seconds in case that worker dies."""
        key = self.key(f"robotslock:{host.lower()}")
        return bool(self.redis.set(key, "1", nx=True, px=max(1, _ms(ttl))))

    def robots_unlock(self, host: str) -> None:
        """The host's robots.txt got no answer: nothing was stored, and the next worker that
        needs it may ask at once rather than wait for the lock to expire."""
        self.redis.delete(self.key(f"robotslock:{host.lower()}"))

    # The login session (crawls/engine/sessions.py), shared by every worker of the crawl

    def session(self) -> dict[str, str]:
        """The session hash as text (empty before the first login)."""
        found = self.redis.hgetall(self.key("session"))
        return {k.decode(): v.decode() for k, v in found.items()}

    def session_store(self, cookies_json: str) -> int:
        """A new session from a login: its cookies, and the next generation (returned), at
        once, so no worker reads the new generation with the old cookies."""
        key = self.key("session")
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"cookies": cookies_json, "failed": "", "failed_until": 0})
            pipe.hincrby(key, "gen", 1)
            return int(pipe.execute()[1])

    def session_failed(self, error: str, *, for_seconds: float) -> None:
        """A login that failed: other workers take this error for a while instead of trying."""
        until = int(time.time() * 1000) + _ms(for_seconds)
        self.redis.hset(self.key("session"), mapping={"failed": error, "failed_until": until})

    def session_forget(self) -> None:
        self.redis.unlink(self.key("session"), self.key("loginlock"))

    def login_lock(self, token: str, ttl: float) -> bool:
        """True for the one worker that runs the login step; expires after ttl (it died)."""
        return bool(self.redis.set(self.key("loginlock"), token, nx=True, px=max(1, _ms(ttl))))

    def login_unlock(self, token: str) -> None:
        """Release the lock if it is still ours (it may have expired and been taken)."""
        key = self.key("loginlock")
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                if pipe.get(key) == token.encode():
                    pipe.multi()
                    pipe.delete(key)
                    pipe.execute()
            except redis.WatchError:
                pass  # taken by another worker meanwhile: theirs now


class OverflowFenced(Exception):
    """An overflow write with a token that is no longer the holder's (it lost its lock in the
    database): refused, and left to the holder now."""


class OverflowStaged(Exception):
    """An earlier step of the overflow is left to finish (crawls/engine/overflow.py): nothing
    new starts until it is."""


def _check_fenced(code: int) -> None:
    if code == -1:
        raise OverflowFenced("this crawl's overflow has another holder now")
    if code == -2:
        raise OverflowStaged("an earlier step of this crawl's overflow is left to finish")


def _fp_of(entry: bytes) -> int:
    """The fingerprint of a queued request (its first field), as lua/_lib.lua's fp_of."""
    if entry[:1] == b"{":
        return Request.unpack(entry).fp
    return int(entry.partition(b"\n")[0])


class PushBack(NamedTuple):
    delay: float  # the host's delay now, seconds
    raised: bool  # this push-back raised it


class HostEvent(NamedTuple):
    """What a script saw happen to a host, for the crawl's log: "parked", "eased" (back to its
    pace after a push-back), "released" (a hold or a parking ran out)."""

    kind: str
    host: str
    text: str


def _host_events(flat: list) -> list[HostEvent]:
    """The flat triples the scripts return (EVENTS in lua/_lib.lua)."""
    text = [item.decode() if isinstance(item, bytes) else str(item) for item in flat]
    return [HostEvent(*text[n : n + 3]) for n in range(0, len(text) - 2, 3)]


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
    RedisMemory), the same for every crawl."""
    client = client or get_redis()
    frontiers = [Frontier(crawl_id, client) for crawl_id in crawl_ids]
    now_ms = _ms(time.time())
    with client.pipeline(transaction=True) as pipe:
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
        }
    return views


def alert_views(crawl_ids: list[int], client: redis.Redis | None = None) -> dict[int, dict]:
    """What the alert checks read of each crawl, in one MULTI, once a pass (never per page):
    "stats" (stats()), "samples" (the alert series: (unix_s, responses, errors), oldest
    first), "parked" (host -> why, of the hosts parked and still held), "slices_running"."""
    client = client or get_redis()
    frontiers = [Frontier(crawl_id, client) for crawl_id in crawl_ids]
    here_ms = _ms(time.time())
    with client.pipeline(transaction=True) as pipe:
        pipe.time()
        for frontier in frontiers:
            frontier._queue_stats(pipe)
            pipe.lrange(frontier.key("alertseries"), 0, -1)
            pipe.hgetall(frontier.key("hostparked"))
            pipe.hgetall(frontier.key("hostheld"))
            # Started slices, as live_views counts them.
            pipe.zcount(frontier.key("slices"), here_ms, here_ms + STARTED_SLICE_WINDOW_MS)
        replies = iter(pipe.execute())
    seconds, micros = next(replies)
    now_ms = seconds * 1000 + micros // 1000
    views = {}
    for frontier in frontiers:
        stats = _stats_from(next(replies), next(replies), next(replies), next(replies))
        samples = [tuple(int(x) for x in point.split(b":")) for point in next(replies)]
        parked, held = next(replies), next(replies)
        # A parking ends when its hold does (or an operator's word replaces it).
        views[frontier.crawl_id] = {
            "stats": stats,
            "samples": samples,
            "parked": {
                host.decode(): why.decode()
                for host, why in parked.items()
                if int(held.get(host, 0)) > now_ms
            },
            "slices_running": int(next(replies)),
        }
    return views


def record_alert_samples(
    samples: dict[int, tuple[int, int, int]], *, keep_from: int, client: redis.Redis | None = None
) -> None:
    """Append each crawl's (unix_s, responses, errors) to its alert series, and drop those
    older than keep_from (unix s) but the newest of them: the start of the longest window."""
    client = client or get_redis()
    with client.pipeline(transaction=False) as pipe:
        for crawl_id, (at, responses, errors) in samples.items():
            key = Frontier(crawl_id, client).key("alertseries")
            pipe.rpush(key, f"{at}:{responses}:{errors}")
            pipe.lrange(key, 0, -1)
        replies = pipe.execute()
    with client.pipeline(transaction=False) as pipe:
        for n, crawl_id in enumerate(samples):
            points = [int(point.split(b":")[0]) for point in replies[2 * n + 1]]
            drop = max(0, sum(1 for at in points if at <= keep_from) - 1)
            key = Frontier(crawl_id, client).key("alertseries")
            # Bounded whatever the windows: a pass every few seconds for a day at most.
            pipe.ltrim(key, max(drop, len(points) - ALERT_SAMPLES_KEPT), -1)
            pipe.expire(key, ALERT_SERIES_TTL)
        pipe.execute()


def forget_alert_samples(crawl_ids: list[int], client: redis.Redis | None = None) -> None:
    """A paused crawl makes no progress on purpose: its windows start again when it resumes."""
    if crawl_ids:
        client = client or get_redis()
        client.delete(*(Frontier(crawl_id, client).key("alertseries") for crawl_id in crawl_ids))


def status_class(status: int) -> str:
    """The counter of an HTTP status: status_2xx .. status_5xx, else status_other."""
    klass = status // 100
    return f"status_{klass}xx" if 2 <= klass <= 5 else "status_other"


def _stats_from(counters: dict, queued: int, delayed: int, in_flight: int) -> dict[str, int]:
    stats = dict.fromkeys(COUNTERS, 0)
    stats.update({name.decode(): int(value) for name, value in counters.items()})
    stats.update(queued=queued, delayed=delayed, in_flight=in_flight)
    return stats


def supervisor_lock(ttl: float, client: redis.Redis | None = None) -> bool:
    """True for the one supervisor run that may go ahead; the lock expires after ttl seconds."""
    client = client if client is not None else get_redis()
    return bool(client.set(SUPERVISOR_LOCK_KEY, "1", nx=True, px=max(1, _ms(ttl))))


def alerts_lock(ttl: float, client: redis.Redis | None = None) -> bool:
    """True for the one pass of the alert checks that may go ahead; expires after ttl s."""
    client = client if client is not None else get_redis()
    return bool(client.set(ALERTS_LOCK_KEY, "1", nx=True, px=max(1, _ms(ttl))))


def _outcome_args(outcome: Outcome) -> list:
    """One outcome as the flat fields complete.lua reads (see the header of that script)."""
    if outcome.kind not in OUTCOME_KINDS:
        raise ValueError(f"unknown outcome kind {outcome.kind!r}; expected {OUTCOME_KINDS}")
    request = outcome.request
    retry_json, listed = "", 0
    links = tail = sitemaps = sitemaps_tail = ""
    # Reading sitemaps costs no depth: what a sitemap lists stays at the sitemap's depth; nor
    # does a redirect: its target is the same page, moved.
    redirect = outcome.links_via == VIA_REDIRECT
    child_depth = request.depth + (0 if request.reads_sitemap or redirect else 1)
    if outcome.kind == "retry":
        history = with_history(request.history, outcome.error)
        retry_json = replace(request, attempts=request.attempts + 1, history=history).pack()
    elif outcome.kind == "crashed":
        again = replace(request, crashes=request.crashes + 1, crash_error=outcome.error[:300])
        retry_json = again.pack()
    elif outcome.kind in ("done", "absent"):
        if outcome.links_via == VIA_LISTED:
            listed = len(outcome.links)
        chain = (*request.redirects, request.url) if redirect else ()
        links, tail = _link_args(outcome.links, request, child_depth, outcome.links_via, chain)
        sitemaps, sitemaps_tail = _link_args(outcome.sitemaps, request, child_depth, VIA_SITEMAP)
    status = "" if outcome.status is None else outcome.status
    return [
        request.fp,
        request.host,
        outcome.kind,
        status,
        outcome.nbytes,
        request.priority,
        child_depth,
        retry_json,
        _ms(outcome.retry_delay),
        listed,
        links,
        tail,
        sitemaps,
        sitemaps_tail,
    ]


def _link_args(
    urls: list[str], parent: Request, depth: int, via: str, redirects: tuple[str, ...] = ()
) -> tuple[str, str]:
    """(links, tail): what complete.lua needs to queue `urls` as Request(url, depth,
    referrer=parent.url, priority=..., via=via, redirects=redirects).pack() would: per URL
    four lines (bucket, fingerprint, host, URL), and once the end of their packed requests,
    the same for every link of the page (request.link_tail). The host of a link on the page's
    own prefix (most of them) is sent as "": the script takes the page's, and no link's host
    is parsed here; the script also makes their referrer relative, as pack() does. One
    argument per page, not three per link: redis-py packs each argument on its own, a
    twentieth of a slice thread's time. A link's URL holds no line break (links and sitemaps
    are in the client's normal form, which escapes them); one that does is sent escaped."""
    if not urls:
        return "", ""
    tail = link_tail(depth, parent.priority, parent.url, via=via, redirects=redirects)
    # Links on the page's prefix (its URL up to the "/" after "://") have its host, which
    # the prefix tells (the script writes no host for them), and a relative referrer.
    origin, host = url_origin(parent.url), parent.host
    own = origin + "/" if origin and parent.url.startswith(origin + "/") else None
    if own and prefix_host(parent.url) != host:
        own = None
    lines = []
    add, names, shift = lines.append, _BUCKET_NAMES, 64 - SEEN_BUCKET_BITS  # per link: locals
    for url in urls:
        if "\n" in url:
            url = url.replace("\n", "%0A")
        fp = fingerprint(url)
        if own and url.startswith(own):
            link_host = ""
        else:
            link_host = request_host(url)
            link_host = (
                "+" + link_host if prefix_host(url) == link_host else "-" + (link_host or "/")
            )
        add(f"{names[(fp >> shift) & _BUCKET_MASK]}\n{fp}\n{link_host}\n{url}\n")  # _bucket(fp)
    return "".join(lines), tail
