"""A crawl's requests through its channel's proxy pool.

Each request leases a proxy, goes through it, and returns it with the outcome. When the proxy
was at fault (it failed, timed out, or the site banned it) the page is tried again through
another proxy right away, without using up the page's own retries.
"""

from __future__ import annotations

from django.conf import settings

from crawls.fetcher import Fetcher, FetchResult
from proxies import pool

PROXY_TRIES = 3


def proxy_fault(result: FetchResult, ban_statuses: frozenset[int]) -> str | None:
    """The pool's name for what the proxy did wrong, or None when it did its job."""
    if result.error_kind == "proxy":
        return "refused" if "refused the connection" in result.error else "error"
    if result.error_kind == "timeout":
        return "timeout"
    if result.status in ban_statuses:
        return "ban"
    return None


def no_proxy(url: str, channel: str) -> FetchResult:
    return FetchResult(
        url=url, final_url=url, status=None, content_type="", body=b"", nbytes=0,
        truncated=False, elapsed_ms=0, redirects=[], error_kind="proxy",
        error=f"no usable proxy in channel {channel!r}",
    )  # fmt: skip


def fetch_via_pool(
    fetcher: Fetcher, url: str, *, channel: str, strategy: str, lease_seconds: float
) -> FetchResult:
    """Fetch url through up to PROXY_TRIES proxies of the channel; the last result if all
    failed (a retryable proxy error, or the ban status the site kept answering)."""
    bans = frozenset(settings.PROXY_BAN_STATUSES)
    result = None
    for _ in range(PROXY_TRIES):
        lease = pool.acquire(channel=channel, lease_seconds=lease_seconds, strategy=strategy)
        if lease is None:
            break
        result = fetcher.fetch(url, proxy=lease.url)
        fault = proxy_fault(result, bans)
        if fault is None:
            pool.release(lease=lease, latency_ms=result.elapsed_ms, ok=True)
            return result
        pool.fail(lease=lease, reason=fault)
    return result or no_proxy(url, channel)
