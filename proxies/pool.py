"""The live proxy pool in Redis. This module owns every proxy key and the Lua scripts in
proxies/lua/ that change them; no other module builds these key names.

Shape (after the article in shared/seeds/000 and haipproxy's rules in 001):

- ``global``   sorted set, proxy -> latency ms (lowest first). Membership means "in the pool".
- ``score``    sorted set, proxy -> haipproxy score (start 5, +1 per success, smaller steps
               above 10; a timeout costs 1, 0 removes; a refused connection removes at once).
- ``checked``  sorted set, proxy -> last successful validation (unix ms).
- ``url``      hash, proxy -> URL with credentials (the member itself carries none).
- ``chan:<c>`` sorted set per channel of the proxies free to take: least_used scores by times
               used; round_robin and greedy score by queue position (head = lowest).
- ``tier:<c>`` proxy -> the tier of the selection rule it entered the channel under (1 strict,
               2 recent and fast, 3 score only): a member that falls below it leaves the channel.
- ``topup``    hash, channel (or channel|empty) -> no top-up (or refill) scan before (unix ms).
- ``lease:<c>``, ``held:<c>``  who holds what: proxy -> deadline,
               proxy -> "token|score when taken|strategy".
- ``banned:<c>`` proxy -> ban deadline: a ban is per channel, the global pool is untouched.
- ``blocked``  set of proxies an admin removed or disabled: a validation that was already under
               way cannot put them back; enabling a proxy unblocks it.

Every read-then-write is one Lua script; every key shares the ``{px}`` hash tag, so the scripts
run on one Redis Cluster slot. Time comes from Redis (TIME) so leases agree across machines.
A removed proxy never comes back through a late release: release checks the lease token and
that the proxy is still in the global pool before putting it back.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import redis
from django.conf import settings

from crawlhub.redis import connections
from proxies.pool_scripts import client as _redis
from proxies.pool_scripts import rule as _rule
from proxies.pool_scripts import script as _script
from proxies.pool_scripts import selection_settings as _settings

PREFIX = "px:{px}:"
GLOBAL = PREFIX + "global"
SCORE = PREFIX + "score"
CHECKED = PREFIX + "checked"
URLS = PREFIX + "url"
CHANNELS = PREFIX + "channels"
STATS = PREFIX + "stats"
OKS = PREFIX + "ok"
ERRS = PREFIX + "err"
DROPPED = PREFIX + "dropped"
LOCK = PREFIX + "validating"
BLOCKED = PREFIX + "blocked"
PUBLISH = PREFIX + "publish"  # a health snapshot went out less than N ms ago (throttle)

STRATEGIES = ("least_used", "round_robin", "greedy")
REASONS = ("timeout", "refused", "ban", "error")
INITIAL_SCORE = 5.0


@dataclass(frozen=True)
class Lease:
    proxy: str  # "scheme://host:port" id used in Redis
    url: str  # with credentials, to pass to requests
    channel: str
    token: str


class ChannelKeys(NamedTuple):
    """One channel's keys, in the order the scripts take them as KEYS."""

    chan: str  # proxies free to take
    lease: str
    held: str
    banned: str


@functools.lru_cache(maxsize=4096)
def channel_keys(channel: str) -> ChannelKeys:
    return ChannelKeys(
        chan=PREFIX + f"chan:{channel}",
        lease=PREFIX + f"lease:{channel}",
        held=PREFIX + f"held:{channel}",
        banned=PREFIX + f"banned:{channel}",
    )


def _acquire_args(channel: str, lease_seconds: float, strategy: str, token: str) -> list:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    return [PREFIX, channel, int(lease_seconds * 1000), strategy, token, *_rule()]


def _release_args(lease: Lease, latency_ms: float, ok: bool, record: bool = True) -> list:
    outcome = ("1" if record else "2") if ok else "0"
    return [
        lease.proxy,
        lease.token,
        int(latency_ms),
        outcome,
        int(settings.PROXY_GREEDY_MS),
        INITIAL_SCORE,
    ]


def acquire(
    *,
    channel: str,
    lease_seconds: float = 60,
    strategy: str = "least_used",
    exclude: Collection[str] = (),
) -> Lease | None:
    """Take a proxy from the channel's pool for `lease_seconds`, or None when there is none.

    No two holders get one proxy in a channel; an expired lease returns the proxy to the pool.
    Proxies in `exclude` (already tried for this request) are given only when no other is free.
    """
    return acquire_or_count(
        channel=channel, lease_seconds=lease_seconds, strategy=strategy, exclude=exclude
    )[0]


def acquire_or_count(
    *,
    channel: str,
    lease_seconds: float = 60,
    strategy: str = "least_used",
    exclude: Collection[str] = (),
) -> tuple[Lease | None, int]:
    """acquire(), and when it found none, how many of the channel's proxies other holders
    have leased at that moment (0 with a lease). Counted in the same script, so a caller
    deciding whether to wait for a proxy to come back never misses a release in between."""
    token = secrets.token_hex(8)
    args = [*_acquire_args(channel, lease_seconds, strategy, token), *exclude]
    found = _script("acquire")(keys=channel_keys(channel), args=args, client=_redis())
    if isinstance(found, int):
        return None, found
    lease = Lease(proxy=found[0].decode(), url=found[1].decode(), channel=channel, token=token)
    return lease, 0


def release(*, lease: Lease, latency_ms: float, ok: bool = True, record: bool = True) -> None:
    """Return a leased proxy with its outcome: one more use on the channel, its latency and a
    score step on the global pool when ok. A late release (lease expired or proxy removed) is a
    no-op. record=False: the outcome was recorded already (by keep()); only give it back."""
    _script("release")(
        keys=channel_keys(lease.channel)[:3],
        args=[PREFIX, *_release_args(lease, latency_ms, ok, record)],
        client=_redis(),
    )


def keep(*, lease: Lease, latency_ms: float | None, lease_seconds: float) -> bool:
    """Go on holding a leased proxy for another `lease_seconds` (the greedy strategy's next
    request), recording the success of `latency_ms` as release() would (None: renew only).

    False when the lease is no longer this holder's (expired, proxy removed), or when the proxy
    no longer fits the selection rule that brought it into the channel: it then leaves the
    channel, and the caller acquires another.
    """
    found = _script("keep")(
        keys=channel_keys(lease.channel)[1:3],
        args=[
            PREFIX,
            lease.channel,
            lease.proxy,
            lease.token,
            int(lease_seconds * 1000),
            -1 if latency_ms is None else int(latency_ms),
            INITIAL_SCORE,
            *_rule(),
        ],
        client=_redis(),
    )
    return found == 1


def fail(*, lease: Lease, reason: str) -> str:
    """Report a proxy failure. "timeout"/"error" cost 1 point (0 removes it), "refused"
    removes it from every pool, "ban" drops it from this channel only for PROXY_BAN_SECONDS.

    Returns what happened: "kept", "banned", "removed" or "gone" (it was already removed).
    """
    if reason not in REASONS:
        raise ValueError(f"reason must be one of {REASONS}, got {reason!r}")
    result = _script("fail")(
        keys=channel_keys(lease.channel),
        args=[
            PREFIX,
            lease.proxy,
            lease.token,
            reason,
            int(settings.PROXY_BAN_SECONDS * 1000),
            lease.channel,
            INITIAL_SCORE,
        ],
        client=_redis(),
    )
    return result.decode()


def remove(*, proxy: str) -> None:
    """Take a proxy out of the global pool and every channel pool at once, and keep it out
    until allow(): no late release or validation in flight brings it back."""
    remove_many(proxies=[proxy])


def remove_many(*, proxies: list[str]) -> None:
    """remove() for each proxy, in one round trip (each proxy still atomically)."""
    if not proxies:
        return
    script = _script("remove")
    with _redis().pipeline(transaction=False) as pipe:
        for proxy in proxies:
            script(keys=[], args=[PREFIX, proxy], client=pipe)
        pipe.execute()
    # Kept out through a failover too: a replica holds the removal before it is reported done.
    connections.replicated(_redis())


def allow(*, proxy: str) -> None:
    """Let a removed or disabled proxy be admitted again by its next successful validation."""
    allow_many(proxies=[proxy])


def allow_many(*, proxies: list[str]) -> None:
    """allow() for each proxy, in one command."""
    if proxies:
        _redis().srem(BLOCKED, *proxies)


def record_check(
    *,
    proxy: str,
    url: str,
    ok: bool,
    reason: str = "",
    latency_ms: float = 0,
    initial_score: float = INITIAL_SCORE,
    admit: bool = True,
) -> tuple[float, str]:
    """Apply one validation outcome atomically. A success raises the score, records latency and
    the validation time, and (when `admit`) puts a proxy that is not yet pooled in the global
    pool. A refused connection or a score of 0 removes it.

    Returns (new score, status) with status "pool", "out" or "removed".
    """
    score, status = _script("record_check")(
        keys=[],
        args=[
            PREFIX,
            proxy,
            url,
            "1" if ok else "0",
            reason,
            int(latency_ms),
            initial_score,
            "1" if admit else "0",
        ],
        client=_redis(),
    )
    return float(score), status.decode()


def record_checks(*, checks: list[dict]) -> list[tuple[float, str]]:
    """record_check() for each of `checks` (its keyword arguments), in one round trip; each
    outcome is still applied atomically. The (score, status) of each, in order."""
    if not checks:
        return []
    script = _script("record_check")
    with _redis().pipeline(transaction=False) as pipe:
        for c in checks:
            script(
                keys=[],
                args=[
                    PREFIX,
                    c["proxy"],
                    c["url"],
                    "1" if c["ok"] else "0",
                    c.get("reason", ""),
                    int(c.get("latency_ms", 0)),
                    c.get("initial_score", INITIAL_SCORE),
                    "1" if c.get("admit", True) else "0",
                ],
                client=pipe,
            )
        answers = pipe.execute()
    return [(float(score), status.decode()) for score, status in answers]


def reap() -> int:
    """Return every channel's expired leases to their pools; the number returned."""
    return _script("reap")(keys=[], args=[PREFIX], client=_redis())


def should_keep(*, latency_ms: float) -> bool:
    """Greedy strategy: keep using a proxy while it answers faster than PROXY_GREEDY_MS."""
    return latency_ms < settings.PROXY_GREEDY_MS


@dataclass(frozen=True)
class Drained:
    successes: dict[str, int]
    failures: dict[str, int]
    dropped: list[tuple[str, str, float]]  # proxy, why, unix time


def drain() -> Drained:
    """Take (and reset) the counters and the drop log that releases and failures left."""
    ok, err, dropped = _script("drain")(keys=[OKS, ERRS, DROPPED], client=_redis())

    def pairs(flat: list) -> dict[str, int]:
        return {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    entries = []
    for raw in dropped:
        proxy, why, at = raw.decode().split("|")
        entries.append((proxy, why, int(at) / 1000))
    return Drained(successes=pairs(ok), failures=pairs(err), dropped=entries)


def members() -> dict[str, dict]:
    """Every pooled proxy with its latency, score and last validation (unix seconds)."""
    client = _redis()
    with client.pipeline(transaction=True) as pipe:
        pipe.zrange(GLOBAL, 0, -1, withscores=True)
        pipe.zrange(SCORE, 0, -1, withscores=True)
        pipe.zrange(CHECKED, 0, -1, withscores=True)
        latencies, scores, checked = pipe.execute()
    scores_by = {p.decode(): s for p, s in scores}
    checked_by = {p.decode(): c / 1000 for p, c in checked}
    return {
        p.decode(): {
            "latency_ms": latency,
            "score": scores_by.get(p.decode(), INITIAL_SCORE),
            "checked_at": checked_by.get(p.decode()),
        }
        for p, latency in latencies
    }


def channels() -> list[str]:
    return sorted(c.decode() for c in _redis().smembers(CHANNELS))


def channel_members(*, channel: str) -> dict[str, set[str]]:
    """Per channel: proxies free to take, leased and banned (bans still running)."""
    client = _redis()
    chan, lease, _, banned = channel_keys(channel)
    now_ms = time.time() * 1000
    with client.pipeline(transaction=True) as pipe:
        pipe.zrange(chan, 0, -1)
        pipe.zrange(lease, 0, -1)
        pipe.zrangebyscore(banned, now_ms, "+inf")
        free, leased, bans = pipe.execute()
    return {
        "free": {p.decode() for p in free},
        "leased": {p.decode() for p in leased},
        "banned": {p.decode() for p in bans},
    }


def proxy_channels(*, proxy: str) -> dict[str, dict]:
    """Where one proxy stands in each channel: uses or position, leased, banned until."""
    client = _redis()
    names = channels()
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            chan, lease, _, banned = channel_keys(name)
            pipe.zscore(chan, proxy)
            pipe.zscore(lease, proxy)
            pipe.zscore(banned, proxy)
        values = pipe.execute()
    out = {}
    for i, name in enumerate(names):
        in_chan, lease_until, banned_until = values[i * 3 : i * 3 + 3]
        if in_chan is None and lease_until is None and banned_until is None:
            continue
        out[name] = {
            "position": in_chan,
            "leased_until": lease_until / 1000 if lease_until else None,
            "banned_until": banned_until / 1000 if banned_until else None,
        }
    return out


def health() -> dict:
    """Pool health for pages and /ws/proxies/: sizes, how many pass the strict selection rule,
    each channel's free/leased/banned counts, and counters (acquired, relaxed, failures...)."""
    now = time.time()
    pooled = members()
    min_score, max_age_ms, max_latency, need = _settings()
    strict = sum(
        1
        for m in pooled.values()
        if m["score"] > min_score
        and m["checked_at"] is not None
        and m["checked_at"] >= now - max_age_ms / 1000
        and m["latency_ms"] <= max_latency
    )
    latencies = sorted(m["latency_ms"] for m in pooled.values())
    checked = [m["checked_at"] for m in pooled.values() if m["checked_at"] is not None]
    stats = {k.decode(): int(v) for k, v in _redis().hgetall(STATS).items()}
    per_channel = {}
    for name in channels():
        sets = channel_members(channel=name)
        per_channel[name] = {
            "free": len(sets["free"]),
            "leased": len(sets["leased"]),
            "banned": len(sets["banned"]),
            "relaxed": stats.get(f"relaxed:{name}", 0),
        }
    return {
        "pooled": len(pooled),
        "selectable": strict,
        "channel_size": need,
        "median_latency_ms": latencies[len(latencies) // 2] if latencies else None,
        "score_histogram": score_histogram(m["score"] for m in pooled.values()),
        "last_validated_age_s": round(now - max(checked), 1) if checked else None,
        "channels": per_channel,
        "counters": {k: v for k, v in stats.items() if not k.startswith("relaxed:")},
        "validating": bool(_redis().exists(LOCK)),
    }


def publish_slot(ms: int) -> bool:
    """True for the one caller, across processes, that may publish a health snapshot now."""
    return bool(_redis().set(PUBLISH, "1", nx=True, px=max(1, ms)))


# Score bins of the health histogram: [low, high) each, the last one open.
SCORE_BINS = (0, 2, 4, 6, 8, 10, 15, 20)


def score_histogram(scores) -> list[list]:
    """[[label, count], ...] over SCORE_BINS, e.g. ["6-8", 3] and ["20+", 1]."""
    counts = [0] * len(SCORE_BINS)
    for score in scores:
        i = max(n for n, low in enumerate(SCORE_BINS) if score >= low or n == 0)
        counts[i] += 1
    labels = [f"{low}-{high}" for low, high in zip(SCORE_BINS, SCORE_BINS[1:], strict=False)]
    return [[label, n] for label, n in zip([*labels, f"{SCORE_BINS[-1]}+"], counts, strict=True)]


@contextlib.contextmanager
def validation_lock(
    *, timeout: float, blocking_timeout: float = 0
) -> Iterator[redis.lock.Lock | None]:
    """One validation pass at a time across every machine. Yields the lock (call reacquire()
    to extend it batch by batch) or None when another pass holds it."""
    lock = _redis().lock(LOCK, timeout=timeout, blocking_timeout=blocking_timeout)
    acquired = lock.acquire(blocking=blocking_timeout > 0)
    try:
        yield lock if acquired else None
    finally:
        if acquired:
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()
