"""A crawl's requests through its channel's proxy pool.

Each request leases a proxy, goes through it, and returns it with the outcome. When the proxy
was at fault (it failed, timed out, or the site banned it) the page is tried again through
another proxy right away, without using up the page's own retries.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings

from crawls.fetcher import Fetcher, FetchResult
from proxies import pool

PROXY_TRIES = 3


class Stopped(Exception):
    """The slice is stopping: the page was not fetched and goes back to the queue."""


def acquire_waiting(
    *, channel: str, strategy: str, lease_seconds: float, wait_seconds: float,
    stop: threading.Event | None = None,
) -> pool.Lease | None:  # fmt: skip
    """A proxy of the channel, waiting up to wait_seconds for one to come free.

    A channel has fewer proxies than a crawl has fetching threads as often as not, and a proxy
    is never leased to two of them: a page waits its turn rather than failing.
    """
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        if stop is not None and stop.is_set():
            raise Stopped
        lease, leased = pool.acquire_or_count(
            channel=channel, lease_seconds=lease_seconds, strategy=strategy
        )  # fmt: skip
        # Wait only while another holder has one of the channel's proxies: it comes back.
        if lease is not None or not leased or time.monotonic() >= deadline:
            return lease
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)


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
    fetcher: Fetcher, url: str, *, channel: str, strategy: str, lease_seconds: float,
    wait_seconds: float = 0.0, stop: threading.Event | None = None,
) -> FetchResult:  # fmt: skip
    """Fetch url through up to PROXY_TRIES proxies of the channel; the last result if all
    failed (a retryable proxy error, or the ban status the site kept answering). Raises
    Stopped when `stop` is set before a proxy came free."""
    bans = frozenset(settings.PROXY_BAN_STATUSES)
    result = None
    for _ in range(PROXY_TRIES):
        lease = acquire_waiting(
            channel=channel, strategy=strategy, lease_seconds=lease_seconds,
            wait_seconds=wait_seconds, stop=stop,
        )  # fmt: skip
        if lease is None:
            break
        result = fetcher.fetch(url, proxy=lease.url)
        fault = proxy_fault(result, bans)
        if fault is None:
            pool.release(lease=lease, latency_ms=result.elapsed_ms, ok=True)
            return result
        pool.fail(lease=lease, reason=fault)
    return result or no_proxy(url, channel)
