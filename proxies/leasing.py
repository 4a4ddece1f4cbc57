"""What a crawl may do with the proxy pool: lease a proxy of its channel, give it back with the
outcome, keep a fast one between requests (greedy), and say what a proxy did wrong.

The one module of proxies that crawls import (an import contract in pyproject.toml checks it).
"""

from __future__ import annotations

from django.conf import settings

from crawlhub.http.client import FetchResult
from proxies.pool import Lease, acquire_or_count, fail, keep, release, should_keep

__all__ = ["Lease", "acquire_or_count", "fail", "keep", "release", "should_keep", "fault_of"]


def fault_of(result: FetchResult) -> str | None:
    """The pool's name for what the proxy did wrong in this fetch ("refused", "error",
    "timeout", or "ban" for a status in PROXY_BAN_STATUSES), or None when it did its job."""
    if result.error_kind == "proxy":
        return "refused" if "refused the connection" in result.error else "error"
    if result.error_kind == "timeout":
        return "timeout"
    if result.status in settings.PROXY_BAN_STATUSES:
        return "ban"
    return None
