"""RQ jobs of the crawl engine, and how slices get on the queue. Thin: each job calls a step
that tests call directly."""

from __future__ import annotations

import logging
import uuid

import django_rq
from django.conf import settings
from django.db import close_old_connections, transaction

from crawls.engine import lifecycle, live
from crawls.engine.frontier import Frontier, supervisor_lock
from crawls.engine.slices import CannotStart, run_slice
from crawls.models import Crawl, CrawlState

log = logging.getLogger(__name__)

# A queued slice may wait long behind other crawls' slices; a started one beats every
# fraction of a second, so its record expires soon after its worker dies.
QUEUED_SLICE_TTL = 3600.0


def enqueue_slices(crawl: Crawl, count: int | None = None) -> int:
    """Put `count` slices (default: the crawl's) on the crawls queue once the current
    transaction commits. Returns how many."""
    count = crawl.slices if count is None else count
    slice_ids = [f"{crawl.pk}-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    transaction.on_commit(lambda: _enqueue(crawl.pk, slice_ids))
    return count


def _enqueue(crawl_id: int, slice_ids: list[str]) -> None:
    Frontier(crawl_id).slice_register(slice_ids, ttl=QUEUED_SLICE_TTL)
    queue = django_rq.get_queue("crawls")
    for slice_id in slice_ids:
        queue.enqueue(
            slice_job,
            crawl_id,
            slice_id,
            job_id=f"slice-{slice_id}",
            description=f"crawl {crawl_id} slice {slice_id}",
            job_timeout=int(settings.CRAWLHUB_SLICE_SECONDS * 3 + 300),
            result_ttl=600,
            failure_ttl=7 * 24 * 3600,
        )


def slice_job(crawl_id: int, slice_id: str) -> dict:
    close_old_connections()
    try:
        try:
            report = run_slice(crawl_id, slice_id)
        except CannotStart as exc:
            # Every slice would refuse it alike: end the crawl rather than leave it running
            # with its queue full and no slice (the supervisor would start more, in vain).
            lifecycle.fail(crawl_id, str(exc))
            return {"reason": "cannot start", "error": str(exc)}
        after_slice(crawl_id)
    finally:
        close_old_connections()
    return report


def after_slice(crawl_id: int) -> None:
    """A slice ended: finish the crawl, settle a pause, or hand over to a successor."""
    crawl = Crawl.objects.filter(pk=crawl_id).select_related("channel").first()
    if crawl is None:
        return
    changed = False
    if crawl.state == CrawlState.PAUSING:
        changed = lifecycle.settle_pause(crawl)
    elif crawl.state == CrawlState.RUNNING:
        changed = lifecycle.finish_if_done(crawl_id)
        if not changed:
            enqueue_slices(crawl, count=1)
    if not changed:
        # A state change announced itself, at once; the slice's last counters go through the
        # throttle (slices end often on a big crawl), but do go out.
        live.publish_crawl(crawl_id, trailing=True)


def supervise() -> dict:
    """Every few seconds: recover expired leases, keep slices alive, finish done crawls."""
    if not supervisor_lock(ttl=settings.CRAWLHUB_SUPERVISOR_SECONDS * 2):
        return {"skipped": "another supervisor is running"}
    close_old_connections()
    report = {"requeued": 0, "slices_started": 0, "finished": 0, "paused": 0}
    for crawl in Crawl.objects.filter(state__in=[CrawlState.RUNNING, CrawlState.PAUSING]):
        frontier = Frontier(crawl.pk)
        report["requeued"] += frontier.requeue_expired()
        if crawl.state == CrawlState.PAUSING:
            report["paused"] += lifecycle.settle_pause(crawl)
        elif lifecycle.finish_if_done(crawl.pk):
            report["finished"] += 1
        else:
            missing = crawl.slices - frontier.live_slices()
            if missing > 0:
                report["slices_started"] += enqueue_slices(crawl, count=missing)
    if any(report.values()):
        log.info("supervisor: %s", report)
    return report
