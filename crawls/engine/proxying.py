"""A crawl's requests through its channel's proxy pool.

A request leases a proxy, goes through it, and returns it with the outcome. The greedy
strategy keeps a proxy that answered faster than PROXY_GREEDY_MS for the slice's next request
(KeptProxies), renewing its lease, and gives it back once it is slow, fails, or the slice has
nothing in flight or ends. When the proxy was at fault (it failed, timed out, or the site
banned it) the page is tried again right away through another proxy, one not yet tried for it
when the channel has one free, without using up the page's own retries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from crawlhub.http.client import FetchResult
from proxies import leasing

PROXY_TRIES = 3


class Stopped(Exception):
    """The slice is stopping: the page was not fetched and goes back to the queue."""


class KeptProxies:
    """Leases the greedy strategy keeps between a slice's requests, free for its next one.

    Each lease is kept with the monotonic time its Redis deadline was last pushed back. Only
    the thread that took a lease out uses it; release_all() gives back whatever is kept.
    """

    def __init__(self) -> None:
        self._kept: list[tuple[leasing.Lease, float]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def put(self, lease: leasing.Lease, renewed_at: float) -> None:
        with self._lock:
            self._kept.append((lease, renewed_at))

    def take(self) -> tuple[leasing.Lease, float] | None:
        """The lease kept longest, or None: oldest first, so that none sits unused until its
        lease runs out while fewer requests run than leases are kept."""
        with self._lock:
            return self._kept.pop(0) if self._kept else None

    def release_all(self) -> int:
        """Give every kept lease back to its channel (their successes are recorded already)."""
        with self._lock:
            kept, self._kept = self._kept, []
        for lease, _ in kept:
            leasing.release(lease=lease, latency_ms=0, record=False)
        return len(kept)


def acquire_waiting(
    *,
    channel: str,
    strategy: str,
    lease_seconds: float,
    wait_seconds: float,
    stop: threading.Event | None = None,
    exclude: tuple[str, ...] = (),
    kept: KeptProxies | None = None,
    fetch_seconds: float = 0.0,
) -> leasing.Lease | None:
    """A proxy of the channel, waiting up to wait_seconds for one to come free (from the
    pool, or a lease another thread of the slice has just kept).

    A channel has fewer proxies than a crawl has fetching threads as often as not, and a proxy
    is never leased to two of them: a page waits its turn rather than failing.
    """
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        if stop is not None and stop.is_set():
            raise Stopped
        lease, leased = leasing.acquire_or_count(
            channel=channel, lease_seconds=lease_seconds, strategy=strategy, exclude=exclude
        )
        # Wait only while another holder has one of the channel's proxies: it comes back.
        if lease is not None or not leased or time.monotonic() >= deadline:
            return lease
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)
        if kept is not None and (found := _renewed(kept, lease_seconds, fetch_seconds)) is not None:
            return found


def _renewed(kept: KeptProxies, lease_seconds: float, fetch_seconds: float) -> leasing.Lease | None:
    """A kept lease with at least fetch_seconds (and a second) left on it, renewing it when it
    has less; None when none is kept, or the ones kept were lost (expired, proxy removed)."""
    while (entry := kept.take()) is not None:
        lease, renewed_at = entry
        if time.monotonic() - renewed_at < lease_seconds - fetch_seconds - 1:
            return lease
        if leasing.keep(lease=lease, latency_ms=None, lease_seconds=lease_seconds):
            return lease
    return None


def no_proxy(url: str, channel: str) -> FetchResult:
    return FetchResult(
        url=url,
        final_url=url,
        status=None,
        content_type="",
        body=b"",
        nbytes=0,
        truncated=False,
        elapsed_ms=0,
        redirects=[],
        error_kind="proxy",
        error=f"no usable proxy in channel {channel!r}",
    )


def fetch_via_pool(
    fetch: Callable[..., FetchResult],
    url: str,
    *,
    channel: str,
    strategy: str,
    lease_seconds: float,
    fetch_seconds: float,
    wait_seconds: float = 0.0,
    stop: threading.Event | None = None,
    kept: KeptProxies | None = None,
) -> FetchResult:
    """Fetch url with `fetch(url, proxy=...)` (a Fetcher's fetch, or its get) through up to
    PROXY_TRIES proxies of the channel, each one not yet tried for it while the channel has
    such a proxy free; the last result if all failed (a retryable proxy error, or the ban
    status the site kept answering). Raises Stopped when `stop` is set before a proxy came
    free. fetch_seconds: how long one fetch may take (the Fetcher's total_timeout).

    With the greedy strategy and `kept`, a kept lease is used first, and a proxy that answered
    faster than PROXY_GREEDY_MS is kept for the next request instead of being released.
    """
    greedy = kept if strategy == "greedy" else None
    tried: list[str] = []
    result = None
    for _ in range(PROXY_TRIES):
        lease = None
        if greedy is not None and not tried:
            lease = _renewed(greedy, lease_seconds, fetch_seconds)
        if lease is None:
            lease = acquire_waiting(
                channel=channel,
                strategy=strategy,
                lease_seconds=lease_seconds,
                wait_seconds=wait_seconds,
                stop=stop,
                exclude=tuple(tried),
                kept=greedy,
                fetch_seconds=fetch_seconds,
            )
        if lease is None:
            break
        tried.append(lease.proxy)
        try:
            result = fetch(url, proxy=lease.url)
        except Stopped:  # given up half-way (a page being rendered): not the proxy's doing
            leasing.release(lease=lease, latency_ms=0, record=False)
            raise
        result.proxy = lease.proxy
        fault = leasing.fault_of(result)
        if fault is None:
            _done_with(lease, result.elapsed_ms, greedy, lease_seconds)
            return result
        leasing.fail(lease=lease, reason=fault)
    return result or no_proxy(url, channel)


def _done_with(
    lease: leasing.Lease, latency_ms: float, kept: KeptProxies | None, lease_seconds: float
) -> None:
    """Keep a fast proxy for the next request (greedy), else give it back with the outcome."""
    if kept is None or not leasing.should_keep(latency_ms=latency_ms):
        leasing.release(lease=lease, latency_ms=latency_ms, ok=True)
        return
    renewed_at = time.monotonic()
    if leasing.keep(lease=lease, latency_ms=latency_ms, lease_seconds=lease_seconds):
        kept.put(lease, renewed_at)
