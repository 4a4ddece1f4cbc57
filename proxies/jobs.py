"""RQ jobs of the proxy pool: thin wrappers around steps that tests call directly."""

from __future__ import annotations

from proxies import validation


def validate_proxies(proxy_ids: list[int] | None = None, everything: bool = False) -> dict:
    """The periodic validation pass (from crawlhub.cron), or "validate now" for some proxies.

    A periodic pass skips when another is under way; a targeted one waits for it."""
    report = validation.run_pass(
        proxy_ids=proxy_ids, everything=everything, wait=0 if proxy_ids is None else 120
    )
    return {"skipped": "another validation pass is running"} if report is None else report.as_dict()
