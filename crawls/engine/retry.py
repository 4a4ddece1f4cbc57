"""When a fetch is tried again, as plain functions a slice calls and tests call directly.

A retryable failure (a timeout, a refused connection, a 5xx, a 429) goes back to the frontier
to wait `retry_delay` seconds while the request has retries left; then it lands in the failure
queue. Everything else (a page of any other status, or a request not fetched on purpose) is
done. Proxy failures are retried apart, in crawls/engine/proxying.py, without using these up.

A request that its slice could not finish (its row could not be written, or the slice ended
while holding it) is not the site's doing: it comes back with one more crash
(crawls.engine.request.Request.crashes), and once it has crashed MAX_CRASHES slices it goes to
the failure queue without being fetched again.
"""

from __future__ import annotations

from crawlhub.http.client import FetchResult

MAX_RETRY_DELAY = 60.0
# More than the worker deaths a crawl sees by chance while holding one request (the chaos test
# kills 4 workers and restarts Redis once), few enough that a page that brings down every slice
# that takes it ends within a minute or so.
MAX_CRASHES = 5
# A request that could not be recorded waits this long before it is fetched again: long enough
# for a passing database error to pass, short enough that a page that always fails ends soon.
CRASH_DELAY = 1.0

DONE, RETRY, FAILED = "done", "retry", "failed"  # the kinds of crawls.engine.request.Outcome


def retry_delay(attempts: int, retry_after: float | None) -> float:
    """Retry-After when the site gave one, else exponential backoff from one second."""
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_DELAY)
    return min(2.0**attempts, MAX_RETRY_DELAY)


def gave_up(crashes: int) -> bool:
    """True for a request that has crashed MAX_CRASHES slices: failed, not fetched again."""
    return crashes >= MAX_CRASHES


def decide(fetch: FetchResult | None, *, attempts: int, max_retries: int) -> str:
    """DONE, RETRY or FAILED for a request fetched `attempts` times before this fetch (None:
    not fetched, e.g. blocked by robots.txt, which is done too)."""
    if fetch is None or not fetch.retryable:
        return DONE
    return RETRY if attempts < max_retries else FAILED
