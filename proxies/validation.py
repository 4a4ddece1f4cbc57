"""Validating proxies: passes that check each proxy (proxies/checks.py) in batches, one pass
at a time, and record what each check found: the pool's score, latency, anonymity and state
(haipproxy's validator). Also the RQ job that runs a pass, and bringing what crawls did with
the pool into the inventory.
"""

from __future__ import annotations

import logging
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

from proxies import pool
from proxies.checks import CheckResult, check, own_address
from proxies.health import announce
from proxies.models import Proxy, ProxyEvent, ProxyState

log = logging.getLogger(__name__)


@dataclass
class PassReport:
    checked: int = 0
    ok: int = 0
    admitted: int = 0
    removed: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    synced: dict = field(default_factory=dict)

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
    *, proxy_ids: list[int] | None = None, everything: bool = False, wait: float = 0
) -> PassReport | None:
    """One validation pass (or just `proxy_ids`), holding the pass lock; None when another pass
    holds it and `wait` seconds were not enough."""
    batch = settings.PROXY_VALIDATE_BATCH
    timeout = settings.PROXY_CHECK_TIMEOUT
    with pool.validation_lock(timeout=timeout * 3 + 60, blocking_timeout=wait) as lock:
        if lock is None:
            return None
        report = PassReport(synced=sync_from_pool())
        pool.reap()
        if proxy_ids is not None:
            query = Proxy.objects.filter(pk__in=proxy_ids).exclude(state=ProxyState.REMOVED)
        else:
            query = due(everything=everything)
        ids = list(query.order_by("last_validated_at", "pk").values_list("pk", flat=True))
        check_url = settings.PROXY_CHECK_URL
        own_ip = own_address(check_url=check_url, timeout=timeout) if ids else None
        for start in range(0, len(ids), batch):
            proxies = list(Proxy.objects.filter(pk__in=ids[start : start + batch]))
            with ThreadPoolExecutor(max_workers=len(proxies)) as executor:
                results = list(
                    executor.map(
                        lambda p: check(
                            proxy_url=p.url, check_url=check_url, timeout=timeout, own_ip=own_ip
                        ),
                        proxies,
                    )  # fmt: skip
                )
            for proxy, result in zip(proxies, results, strict=True):
                _tally(report, proxy, record_validation(proxy=proxy, result=result),
                       result)  # fmt: skip
            lock.reacquire()  # a long pass keeps its lock, batch by batch
    log.info("proxy validation: %s", report.as_dict())
    return report


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


def record_validation(*, proxy: Proxy, result) -> Proxy:
    """Store one validation outcome: the pool's score (Redis decides, atomically), latency,
    anonymity and state. Success admits a new proxy; a refused connection or score 0 removes."""
    with transaction.atomic():
        proxy = Proxy.objects.select_for_update().get(pk=proxy.pk)
        if proxy.state == ProxyState.REMOVED:
            return proxy
        admit = proxy.state in (ProxyState.NEW, ProxyState.ACTIVE)
        score, status = pool.record_check(
            proxy=proxy.key, url=proxy.url, ok=result.ok, reason=result.reason,
            latency_ms=result.latency_ms, initial_score=proxy.score, admit=admit,
        )  # fmt: skip
        was, recovered = proxy.state, result.ok and bool(proxy.last_error)
        proxy.score = score
        if result.ok:
            proxy.latency_ms = round(result.latency_ms)
            proxy.last_validated_at = timezone.now()
            proxy.anonymity = result.anonymity
            proxy.successes = F("successes") + 1
            proxy.last_error = ""
        else:
            proxy.failures = F("failures") + 1
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
        proxy.save()
        proxy.refresh_from_db()
        if proxy.state == ProxyState.REMOVED:
            pool.remove(proxy=proxy.key)
        if event := _validation_event(proxy, result, was=was, recovered=recovered):
            ProxyEvent.record([proxy], event[0], actor="validator", detail=event[1])
        # Many per validation pass: throttled; the page also refreshes every few seconds.
        announce(force=False)
    return proxy


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
    with transaction.atomic():
        for (successes, failures), ids in steps.items():
            Proxy.objects.filter(pk__in=ids).update(
                successes=F("successes") + successes, failures=F("failures") + failures
            )
        changed = []
        for key, live in pooled.items():
            proxy = by_key.get(key)
            if proxy is not None and proxy.state == ProxyState.ACTIVE:
                proxy.score, proxy.latency_ms = live["score"], round(live["latency_ms"])
                changed.append(proxy)
        Proxy.objects.bulk_update(changed, ["score", "latency_ms"], batch_size=500)
        # What the pool dropped: out of every pool in one round trip, the rows in one UPDATE,
        # the audit rows in one INSERT.
        dropped = {}
        for key, why, at in drained.dropped:
            if (proxy := by_key.get(key)) is not None:
                proxy.state, proxy.removed_why, proxy.score = ProxyState.REMOVED, why, 0
                proxy.removed_at = datetime.fromtimestamp(at, tz=UTC)
                dropped[key] = proxy
        if dropped:
            pool.remove_many(proxies=list(dropped))
            Proxy.objects.bulk_update(
                dropped.values(), ["state", "removed_why", "score", "removed_at"], batch_size=500
            )
            ProxyEvent.objects.bulk_create(
                [ProxyEvent(proxy=proxy, kind=ProxyEvent.Kind.REMOVED, actor="pool",
                            detail=proxy.removed_why) for proxy in dropped.values()],
                batch_size=500,
            )  # fmt: skip
            announce()
    return {"counted": len(keys), "scored": len(changed), "dropped": len(dropped)}


def request_validation(*, proxies: Iterable[Proxy] | None = None) -> None:
    """Validate these proxies (or a full pass) on the control queue, after commit."""
    ids = None if proxies is None else [p.pk for p in proxies]

    def enqueue() -> None:
        django_rq.get_queue("control").enqueue(validate_proxies, proxy_ids=ids)

    transaction.on_commit(enqueue)


def validate_proxies(proxy_ids: list[int] | None = None, everything: bool = False) -> dict:
    """The RQ job: the periodic validation pass (from crawlhub.cron), or "validate now" for
    some proxies. A periodic pass skips when another is under way; a targeted one waits for it."""
    report = run_pass(
        proxy_ids=proxy_ids, everything=everything, wait=0 if proxy_ids is None else 120
    )
    return {"skipped": "another validation pass is running"} if report is None else report.as_dict()
