"""Checking one proxy: fetch PROXY_CHECK_URL through it with the HTTP kit's client, time it, and
tell from what the target saw whether the proxy hides us (haipproxy's validator).

The check URL answers {"origin": the address it saw, "headers": {proxy-revealing headers}}:
crawlhub's own /proxies/echo does, and so does any httpbin-style /get. It is the operator's own
setting, usually on crawlhub's own host, so the client's private-network guard lets it through
(Fetcher.get(operator_url=True)).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from crawlhub.http import Fetcher, FetchResult
from proxies.models import Anonymity

# Headers by which a proxy gives itself (or its client) away to the target.
PROXY_HEADERS = (
    "Via",
    "X-Forwarded-For",
    "Forwarded",
    "X-Real-IP",
    "Proxy-Connection",
    "Client-IP",
)
_LOWER_HEADERS = {h.lower() for h in PROXY_HEADERS}
_TOKENS = re.compile(r"[\s,;=\"\[\]]+")
USER_AGENT = "crawlhub-proxy-check/1"
# An echo answer is a few hundred bytes; a check URL that sends more is not one.
MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    latency_ms: float = 0.0
    reason: str = ""  # "" when ok, else "timeout", "refused" or "error"
    error: str = ""
    anonymity: str = ""


def check(*, proxy_url: str, check_url: str, timeout: float, own_ip: str | None) -> CheckResult:
    """Fetch check_url through the proxy: how long it took and how well it hides us, or why
    it failed (the reason decides the score: see proxies.pool.record_check)."""
    started = time.monotonic()
    with _client(timeout) as client:
        result = client.get(check_url, proxy=proxy_url, operator_url=True)
    latency = (time.monotonic() - started) * 1000
    if result.status is not None and result.status != 200:
        return CheckResult(False, latency, "error", f"HTTP {result.status}")
    if result.error:
        return _failed(result, latency, timeout)
    try:
        data = result.json()
        origin, headers = str(data.get("origin", "")), dict(data.get("headers") or {})
    except (ValueError, AttributeError, TypeError):
        return CheckResult(False, latency, "error", "the check URL did not answer with JSON")
    anonymity = classify(origin=origin, headers=headers, own_ip=own_ip)
    return CheckResult(True, latency, anonymity=anonymity)


def own_address(*, check_url: str, timeout: float) -> str | None:
    """Our address as the check URL sees it without a proxy (None if it cannot be reached)."""
    with _client(timeout) as client:
        result = client.get(check_url, operator_url=True)
    if result.error:
        return None
    try:
        return result.json()["origin"].split(",")[0].strip()
    except (ValueError, KeyError, AttributeError, TypeError):
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


def _client(timeout: float) -> Fetcher:
    # One client per check, as each check is on its own: no cookie or connection of one
    # proxy's check is carried into another's. Redirects are not followed (max_redirects=0):
    # a check URL that redirects answers with its 3xx, which fails the check.
    # The whole check, connecting included, takes at most `timeout` (PROXY_CHECK_TIMEOUT is
    # "seconds per check"): a validation pass knows how long a batch of checks can take.
    return Fetcher(
        timeout=timeout,
        total_timeout=timeout,
        max_bytes=MAX_ANSWER_BYTES,
        user_agent_mode="fixed",
        user_agent=USER_AGENT,
        pool_size=1,
        max_redirects=0,
    )


def _failed(result: FetchResult, latency: float, timeout: float) -> CheckResult:
    if result.refused:
        return CheckResult(False, latency, "refused", "connection refused")
    if result.timed_out:
        return CheckResult(False, latency, "timeout", f"no answer within {timeout:g} s")
    return CheckResult(False, latency, "error", result.error[:500])
