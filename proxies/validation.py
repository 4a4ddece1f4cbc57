"""Validating proxies: passes that check each proxy (proxies/checks.py) in batches, one pass
at a time, and record what each check found: the pool's score, latency, anonymity and state
(haipproxy's validator). Also the RQ job that runs a pass, and bringing what crawls did with
the pool into the inventory.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import django_rq
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from rq import get_current_job

from proxies import pool
from proxies.checks import CheckResult, check, own_address
from proxies.health import announce
from proxies.models import Proxy, ProxyEvent, ProxyState

log = logging.getLogger(__name__)

CHUNK = 500  # rows per statement or transaction
RECORD_SECONDS = 10  # recording a batch's outcomes: short transactions, each maybe waiting a bit
JOB_MARGIN_SECONDS = 5  # a pass stops this long before its RQ job's timeout


@dataclass
class PassReport:
    checked: int = 0
    ok: int = 0
    admitted: int = 0
    removed: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    synced: dict = field(default_factory=dict)
    left: list[int] = field(default_factory=list)  # not reached before the pass's deadline

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def due(*, everything: bool = False):
    """Proxies a periodic pass checks: new and active ones not validated in the last half
    interval; with everything, also disabled ones and regardless of when."""
    if everything:
        return Proxy.objects.exclude(state=ProxyState.REMOVED)
    fresh = timezone.now() - timedelta(seconds=settings.PROXY_VALIDATE_EVERY / 2)
    return Proxy.objects.filter(state__in=[ProxyState.NEW, ProxyState.ACTIVE]).filter(
        Q(last_validated_at__isnull=True) | Q(last_validated_at__lt=fresh)
    )


def run_pass(
    *,
    proxy_ids: list[int] | None = None,
    everything: bool = False,
    wait: float = 0,
    deadline: float | None = None,
) -> PassReport | None:
    """One validation pass (or just `proxy_ids`), holding the pass lock; None when another pass
    holds it and `wait` seconds were not enough.

    With a `deadline` (time.monotonic()), the pass starts no batch it could not finish by then
    (a batch takes batch_seconds() at most, or as long as the longest one so far took, on a
    loaded machine): what it checked is saved, and the proxies it did not reach are in the
    report's `left`, for the next pass.
    """
    batch = settings.PROXY_VALIDATE_BATCH
    timeout = settings.PROXY_CHECK_TIMEOUT
    if deadline is not None:
        wait = max(0.0, min(wait, deadline - time.monotonic() - batch_seconds()))
    with pool.validation_lock(timeout=timeout * 3 + 60, blocking_timeout=wait) as lock:
        if lock is None:
            return None
        report = PassReport(synced=sync_from_pool())
        pool.reap()
        ids = _pass_ids(proxy_ids=proxy_ids, everything=everything)
        check_url = settings.PROXY_CHECK_URL
        # A batch on a loaded machine can take longer than its timeouts say: the pass plans
        # with the longest one it has seen, if longer.
        longest = batch_seconds()
        in_time = deadline is None or time.monotonic() + longest <= deadline
        own_ip = own_address(check_url=check_url, timeout=timeout) if ids and in_time else None
        for start in range(0, len(ids), batch):
            began = time.monotonic()
            if deadline is not None and began + longest > deadline:
                report.left = ids[start:]
                break
            proxies = list(Proxy.objects.filter(pk__in=ids[start : start + batch]))
            if not proxies:
                continue
            with ThreadPoolExecutor(max_workers=len(proxies)) as executor:
                results = list(
                    executor.map(
                        lambda p: check(
                            proxy_url=p.url, check_url=check_url, timeout=timeout, own_ip=own_ip
                        ),
                        proxies,
                    )
                )
            recorded = record_batch(outcomes=list(zip(proxies, results, strict=True)))
            for proxy, after, result in zip(proxies, recorded, results, strict=True):
                _tally(report, proxy, after, result)
            lock.reacquire()  # a long pass keeps its lock, batch by batch
            longest = max(longest, time.monotonic() - began)
    log.info("proxy validation: %s", {k: v for k, v in report.as_dict().items() if k != "left"})
    return report


def batch_seconds() -> float:
    """The longest one batch of a pass takes: finding our own address and the checks side by
    side (each within PROXY_CHECK_TIMEOUT), then recording them (one short transaction)."""
    return 2 * settings.PROXY_CHECK_TIMEOUT + RECORD_SECONDS


def _pass_ids(*, proxy_ids: list[int] | None, everything: bool) -> list[int]:
    """The proxies a pass checks, in order: never validated first, then the longest ago."""
    order = (F("last_validated_at").asc(nulls_first=True), "pk")
    if proxy_ids is None:
        return list(due(everything=everything).order_by(*order).values_list("pk", flat=True))
    ids = []
    for start in range(0, len(proxy_ids), CHUNK):  # under the databases' parameter limits
        query = Proxy.objects.filter(pk__in=proxy_ids[start : start + CHUNK])
        ids += query.exclude(state=ProxyState.REMOVED).order_by(*order).values_list("pk", flat=True)
    return ids


def _tally(report: PassReport, before: Proxy, after: Proxy, result: CheckResult) -> None:
    report.checked += 1
    if result.ok:
        report.ok += 1
    else:
        report.failed[result.reason] = report.failed.get(result.reason, 0) + 1
    if before.state == ProxyState.NEW and after.state == ProxyState.ACTIVE:
        report.admitted += 1
    if after.state == ProxyState.REMOVED:
        report.removed += 1


def record_validation(*, proxy: Proxy, result: CheckResult) -> Proxy:
    """Store one validation outcome (record_batch() of one)."""
    return record_batch(outcomes=[(proxy, result)])[0]


def record_batch(*, outcomes: list[tuple[Proxy, CheckResult]]) -> list[Proxy]:
    """Store a batch of validation outcomes in one short transaction: the pool's score (Redis
    decides, atomically for each proxy, in one round trip for all), latency, anonymity and
    state. Success admits a new proxy; a refused connection or score 0 removes. The proxies as
    stored, in the order given."""
    results = {proxy.pk: result for proxy, result in outcomes}
    with transaction.atomic():
        rows = Proxy.objects.select_for_update().filter(pk__in=list(results)).order_by("pk")
        stored = {proxy.pk: proxy for proxy in rows}
        live = [proxy for proxy in stored.values() if proxy.state != ProxyState.REMOVED]
        checks = pool.record_checks(
            checks=[
                {
                    "proxy": p.key,
                    "url": p.url,
                    "ok": results[p.pk].ok,
                    "reason": results[p.pk].reason,
                    "latency_ms": results[p.pk].latency_ms,
                    "initial_score": p.score,
                    "admit": p.state in (ProxyState.NEW, ProxyState.ACTIVE),
                }
                for p in live
            ]
        )
        events, removed = [], []
        for proxy, (score, status) in zip(live, checks, strict=True):
            result = results[proxy.pk]
            was, recovered = proxy.state, result.ok and bool(proxy.last_error)
            _apply(proxy, result, score=score, status=status)
            proxy.save()  # the row is locked: counting up in memory is safe
            if proxy.state == ProxyState.REMOVED:
                removed.append(proxy.key)
            if event := _validation_event(proxy, result, was=was, recovered=recovered):
                events.append(
                    ProxyEvent(proxy=proxy, kind=event[0], actor="validator", detail=event[1])
                )
        pool.remove_many(proxies=removed)
        ProxyEvent.objects.bulk_create(events, batch_size=CHUNK)
        # Many per validation pass: throttled; the page also refreshes every few seconds.
        announce(force=False)
    return [stored.get(proxy.pk, proxy) for proxy, _ in outcomes]


def _apply(proxy: Proxy, result: CheckResult, *, score: float, status: str) -> None:
    proxy.score = score
    if result.ok:
        proxy.latency_ms = round(result.latency_ms)
        proxy.last_validated_at = timezone.now()
        proxy.anonymity = result.anonymity
        proxy.successes += 1
        proxy.last_error = ""
    else:
        proxy.failures += 1
        proxy.last_error = result.error[:2000]
    if status == "pool":
        proxy.state = ProxyState.ACTIVE
    elif status == "removed":
        proxy.state = ProxyState.REMOVED
        proxy.removed_at = timezone.now()
        proxy.removed_why = (
            "validation: connection refused"
            if result.reason == "refused"
            else f"validation: score fell to 0 ({result.reason})"
        )


def _validation_event(
    proxy: Proxy, result: CheckResult, *, was: str, recovered: bool
) -> tuple[str, str] | None:
    """The audit row a check deserves (kind, detail): removals, failures, admissions and
    recoveries; a routine success writes none."""
    if proxy.state == ProxyState.REMOVED:
        return ProxyEvent.Kind.REMOVED, proxy.removed_why
    if not result.ok:
        return ProxyEvent.Kind.CHECK_FAILED, f"{result.reason}: {result.error}"[:2000]
    if was == ProxyState.NEW and proxy.state == ProxyState.ACTIVE:
        return ProxyEvent.Kind.ADMITTED, _summary(proxy)
    if recovered:
        return ProxyEvent.Kind.VALIDATED, _summary(proxy)
    return None


def _summary(proxy: Proxy) -> str:
    return f"{proxy.latency_ms} ms, {proxy.anonymity or 'anonymity unknown'}, score {proxy.score}"


def sync_from_pool() -> dict:
    """Bring what crawls did in Redis into the inventory: success and failure counts, proxies
    the pool dropped (refused, score 0), and the current score and latency of pooled ones."""
    drained = pool.drain()
    keys = set(drained.successes) | set(drained.failures) | {d[0] for d in drained.dropped}
    pooled = pool.members()
    by_key = {p.key: p for p in Proxy.objects.exclude(state=ProxyState.REMOVED)}
    # One UPDATE per distinct (successes, failures) step, not one per proxy: steps repeat.
    steps: dict[tuple[int, int], list[int]] = defaultdict(list)
    for key in keys & by_key.keys():
        step = (drained.successes.get(key, 0), drained.failures.get(key, 0))
        steps[step].append(by_key[key].pk)
    # Short transactions, whatever the pool's size: each step's UPDATE on its own, the scores
    # CHUNK rows at a time.
    for (successes, failures), ids in steps.items():
        for start in range(0, len(ids), CHUNK):
            Proxy.objects.filter(pk__in=ids[start : start + CHUNK]).update(
                successes=F("successes") + successes, failures=F("failures") + failures
            )
    changed = []
    for key, live in pooled.items():
        proxy = by_key.get(key)
        if proxy is not None and proxy.state == ProxyState.ACTIVE:
            score, latency = live["score"], round(live["latency_ms"])
            if (proxy.score, proxy.latency_ms) != (score, latency):
                proxy.score, proxy.latency_ms = score, latency
                changed.append(proxy)
    for start in range(0, len(changed), CHUNK):
        with transaction.atomic():
            Proxy.objects.bulk_update(changed[start : start + CHUNK], ["score", "latency_ms"])
    # What the pool dropped: out of every pool in one round trip, the rows in one UPDATE,
    # the audit rows in one INSERT.
    dropped = {}
    for key, why, at in drained.dropped:
        if (proxy := by_key.get(key)) is not None:
            proxy.state, proxy.removed_why, proxy.score = ProxyState.REMOVED, why, 0
            proxy.removed_at = datetime.fromtimestamp(at, tz=UTC)
            dropped[key] = proxy
    if dropped:
        with transaction.atomic():
            pool.remove_many(proxies=list(dropped))
            Proxy.objects.bulk_update(
                dropped.values(),
                ["state", "removed_why", "score", "removed_at"],
                batch_size=CHUNK,
            )
            ProxyEvent.objects.bulk_create(
                [
                    ProxyEvent(
                        proxy=proxy,
                        kind=ProxyEvent.Kind.REMOVED,
                        actor="pool",
                        detail=proxy.removed_why,
                    )
                    for proxy in dropped.values()
                ],
                batch_size=CHUNK,
            )
            announce()
    return {"counted": len(keys), "scored": len(changed), "dropped": len(dropped)}


def request_validation(
    *, proxies: Iterable[Proxy] | None = None, ids: Iterable[int] | None = None
) -> None:
    """Validate these proxies (given as rows or ids; neither: a full pass) on the control queue,
    after commit."""
    if proxies is not None:
        ids = [p.pk for p in proxies]
    wanted = None if ids is None else list(ids)

    def enqueue() -> None:
        django_rq.get_queue("control").enqueue(validate_proxies, proxy_ids=wanted)

    transaction.on_commit(enqueue)


def validate_proxies(proxy_ids: list[int] | None = None, everything: bool = False) -> dict:
    """The RQ job: the periodic validation pass (from crawlhub.cron), or "validate now" for
    some proxies. A periodic pass skips when another is under way; a targeted one waits for it.

    A pass ends before its RQ job timeout: it stops between batches, and the proxies it did not
    reach wait for the next pass (a periodic pass takes the longest unchecked first; the rest
    of a targeted one is queued again as a new targeted pass)."""
    report = run_pass(
        proxy_ids=proxy_ids,
        everything=everything,
        wait=0 if proxy_ids is None else 120,
        deadline=_job_deadline(),
    )
    if report is None:
        return {"skipped": "another validation pass is running"}
    if proxy_ids is not None and report.left:
        request_validation(ids=report.left)
    done = report.as_dict()
    done["left"] = len(report.left)
    return done


def _job_deadline() -> float | None:
    """When the pass must have stopped: a few seconds before the RQ job running it times out."""
    job = get_current_job()
    if job is None or not job.timeout or job.timeout < 0:
        return None
    started = job.started_at.timestamp() if job.started_at else time.time()
    return time.monotonic() + started + job.timeout - time.time() - JOB_MARGIN_SECONDS
