"""Validating proxies: fetch PROXY_CHECK_URL through each one, time it, and tell from what the
target saw whether the proxy hides us (haipproxy's validator, in batches, one pass at a time).

The check URL answers {"origin": the address it saw, "headers": {proxy-revealing headers}}:
crawlhub's own /proxies/echo does, and so does any httpbin-style /get.
"""

from __future__ import annotations

import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

import requests
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from proxies import pool, services
from proxies.models import Anonymity, Proxy, ProxyState

log = logging.getLogger(__name__)

# Headers by which a proxy gives itself (or its client) away to the target.
PROXY_HEADERS = ("Via", "X-Forwarded-For", "Forwarded", "X-Real-IP", "Proxy-Connection",
                 "Client-IP")  # fmt: skip
_TOKENS = re.compile(r"[\s,;=\"\[\]]+")


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    latency_ms: float = 0.0
    reason: str = ""  # "" when ok, else "timeout", "refused" or "error"
    error: str = ""
    anonymity: str = ""


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


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # HTTP_PROXY and friends in the environment must not interfere
    session.headers["User-Agent"] = "crawlhub-proxy-check/1"
    return session


def own_address(*, check_url: str, timeout: float) -> str | None:
    """Our address as the check URL sees it without a proxy (None if it cannot be reached)."""
    try:
        with _session() as session:
            return session.get(check_url, timeout=timeout).json()["origin"].split(",")[0].strip()
    except (requests.RequestException, ValueError, KeyError, AttributeError):
        return None


def classify(*, origin: str, headers: dict[str, str], own_ip: str | None) -> str:
    """transparent: the target sees our address; anonymous: it sees proxy headers; else elite."""
    revealing = {k.lower(): v for k, v in headers.items() if k.lower() in _LOWER_HEADERS}
    seen = {t for t in _TOKENS.split(origin) if t}
    for value in revealing.values():
        seen.update(t for t in _TOKENS.split(value) if t)
    if own_ip and own_ip in seen:
        return Anonymity.TRANSPARENT
    return Anonymity.ANONYMOUS if revealing else Anonymity.ELITE


_LOWER_HEADERS = {h.lower() for h in PROXY_HEADERS}


def _refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return True
        stack += [a for a in current.args if isinstance(a, BaseException)]
        stack += [e for e in (current.__cause__, current.__context__) if e is not None]
        reason = getattr(current, "reason", None)
        if isinstance(reason, BaseException):
            stack.append(reason)
    return "Connection refused" in str(exc)


def check(*, proxy_url: str, check_url: str, timeout: float, own_ip: str | None) -> CheckResult:
    started = time.monotonic()
    try:
        with _session() as session:
            response = session.get(
                check_url, proxies={"http": proxy_url, "https": proxy_url},
                timeout=timeout, allow_redirects=False,
            )  # fmt: skip
            latency = (time.monotonic() - started) * 1000
            if response.status_code != 200:
                return CheckResult(False, latency, "error", f"HTTP {response.status_code}")
            data = response.json()
            origin, headers = str(data.get("origin", "")), dict(data.get("headers") or {})
    except requests.RequestException as exc:
        latency = (time.monotonic() - started) * 1000
        if _refused(exc):
            return CheckResult(False, latency, "refused", "connection refused")
        if isinstance(exc, requests.Timeout) or "timed out" in str(exc):
            return CheckResult(False, latency, "timeout", f"no answer within {timeout:g} s")
        return CheckResult(False, latency, "error", f"{type(exc).__name__}: {exc}"[:500])
    except (ValueError, AttributeError, TypeError):
        return CheckResult(False, latency, "error", "the check URL did not answer with JSON")
    anonymity = classify(origin=origin, headers=headers, own_ip=own_ip)
    return CheckResult(True, latency, anonymity=anonymity)


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
        report = PassReport(synced=services.sync_from_pool())
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
                _tally(report, proxy, services.record_validation(proxy=proxy, result=result),
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
