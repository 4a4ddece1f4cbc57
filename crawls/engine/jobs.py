"""RQ jobs of the crawl engine, how slices get on the queue, and how they are stopped. Thin:
each job calls a step that tests call directly.

Every slice job ends: RQ kills its work horse at its job_timeout (slice_timeout: the slice's
budget, then the fetches it started, each within its deadlines), and after a cancel or a pause
the crawl's slices still running CRAWLHUB_STOP_GRACE_SECONDS later are stopped with RQ's stop
command (the worker kills the horse, whatever the horse is stuck in). The requests a killed
slice held come back through their leases, or at once for a paused crawl.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid

import django_rq
import redis
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry

from crawlhub.http import rendering
from crawlhub.processes.workers import JOB_CRAWL
from crawls.engine import crawl_log, lifecycle, live
from crawls.engine.crawl_settings import CannotStart, slice_seconds
from crawls.engine.frontier import Frontier, supervisor_lock
from crawls.engine.overflow import Overflow
from crawls.engine.proxying import PROXY_TRIES
from crawls.engine.scope_changes import drop_job
from crawls.engine.slices import run_slice
from crawls.models import Crawl, CrawlEvent, CrawlState, ProxyUse

log = logging.getLogger(__name__)

# A queued slice may wait long behind other crawls' slices; a started one beats every
# fraction of a second, so its record expires soon after its worker dies.
QUEUED_SLICE_TTL = 3600.0
# A slice's last write of pages may wait for the database (SQLite's busy timeout is 30 s).
SLICE_WRITE_SECONDS = 60
# A queued slice whose job RQ holds in one of these never starts.
ENDED_JOB_STATUSES = frozenset(
    status.value
    for status in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
)
# How long a stopped slice's worker may take to kill its work horse and say so.
STOPPED_WITHIN_SECONDS = 10.0


def slice_timeout(crawl: Crawl) -> int:
    """A slice job's hard deadline (RQ's job_timeout), in seconds: its budget
    (crawl_settings.slice_seconds), then the fetches it started, each within its own deadlines, then
    its last write. A fetch has 3 x the crawl's timeout (Fetcher.total_timeout); first the
    host's robots.txt, as long again; through the proxy pool, up to PROXY_TRIES proxies, each
    waited for up to the crawl's timeout."""
    fetch = 3 * crawl.timeout
    page = fetch
    if crawl.channel.proxy_use == ProxyUse.POOL:
        page = PROXY_TRIES * (crawl.timeout + fetch)
    robots = fetch + 2 if crawl.obey_robots else 0
    if crawl.effective_render_javascript():
        # Then rendered, after waiting for one of the process's browser pages (the slice's
        # threads share CRAWLHUB_BROWSER_PAGES of them), in a browser that may have to start.
        turns = math.ceil(crawl.threads / settings.CRAWLHUB_BROWSER_PAGES)
        page += turns * crawl.timeout + rendering.LAUNCH_SECONDS
    return math.ceil(slice_seconds(crawl) + robots + page + SLICE_WRITE_SECONDS)


def enqueue_slices(crawl: Crawl, count: int | None = None) -> int:
    """Put `count` slices (default: the crawl's) on the crawls queue once the current
    transaction commits. Returns how many."""
    count = crawl.slices if count is None else count
    slice_ids = [f"{crawl.pk}-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    timeout = slice_timeout(crawl)
    first = crawl.priority > 0
    transaction.on_commit(lambda: _enqueue(crawl.pk, slice_ids, timeout, at_front=first))
    return count


def _enqueue(crawl_id: int, slice_ids: list[str], timeout: int, *, at_front: bool) -> None:
    try:
        _enqueue_jobs(crawl_id, slice_ids, timeout, at_front=at_front)
    except redis.exceptions.OutOfMemoryError as exc:
        # Past its maxmemory Redis takes no job (the slices would wait for memory anyway):
        # the supervisor starts the missing slices once it frees; a slice registered whose
        # job was refused is forgotten (_forget_lost_slices).
        log.warning(
            "crawl %s: Redis is full, %d slice(s) not queued yet: %s", crawl_id, len(slice_ids), exc
        )


def _enqueue_jobs(crawl_id: int, slice_ids: list[str], timeout: int, *, at_front: bool) -> None:
    Frontier(crawl_id).slice_register(slice_ids, ttl=QUEUED_SLICE_TTL)
    queue = django_rq.get_queue("crawls")
    for slice_id in slice_ids:
        queue.enqueue(
            slice_job,
            crawl_id,
            slice_id,
            job_id=slice_job_id(slice_id),
            description=f"crawl {crawl_id} slice {slice_id}",
            meta={JOB_CRAWL: crawl_id},  # the Workers page shows it to the crawl's owner only
            job_timeout=timeout,
            result_ttl=600,
            failure_ttl=7 * 24 * 3600,
            at_front=at_front,  # a crawl's priority above 0: ahead of the others' slices
        )


DROP_JOB_SECONDS = 3600


def enqueue_scope_drop(crawl_id: int, *, gen: int, cursor: str, dropped_before: int) -> None:
    """Once the current transaction commits: the rest of a scope change's drop
    (crawls/engine/scope_changes.py), on the control queue, beside the crawls' slices."""
    transaction.on_commit(
        lambda: django_rq.get_queue("control").enqueue(
            drop_job,
            crawl_id,
            gen,
            cursor,
            dropped_before,
            description=f"crawl {crawl_id}: scope change {gen}, dropping what no longer fits",
            meta={JOB_CRAWL: crawl_id},
            result_ttl=600,
            failure_ttl=7 * 24 * 3600,
        )
    )


SLICE_JOB_PREFIX = "slice-"


def slice_job_id(slice_id: str) -> str:
    return SLICE_JOB_PREFIX + slice_id


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
        # RQ's work horse ends with os._exit, which runs no exit handler: its browsers, if it
        # rendered, are closed here rather than left to notice they lost their parent.
        rendering.close_pool()
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
        # A successor, unless the crawl's slices were lowered while it ran (crawls.services.editing)
        # and the others are enough.
        if not changed and Frontier(crawl_id).live_slices() < crawl.slices:
            enqueue_slices(crawl, count=1)
    if not changed:
        # A state change announced itself, at once; the slice's last counters go through the
        # throttle (slices end often on a big crawl), but do go out.
        live.publish_crawl(crawl_id, trailing=True)


def supervise() -> dict:
    """Every few seconds: recover expired leases, keep slices alive, finish done crawls."""
    try:
        locked = supervisor_lock(ttl=settings.CRAWLHUB_SUPERVISOR_SECONDS * 2)
    except redis.exceptions.OutOfMemoryError:
        # Past its maxmemory Redis takes not even the lock; nothing it could start would run.
        log.warning("supervisor: Redis is full (past its maxmemory); skipped until it frees")
        return {"skipped": "Redis is full"}
    if not locked:
        return {"skipped": "another supervisor is running"}
    close_old_connections()
    report = {"requeued": 0, "slices_started": 0, "finished": 0, "paused": 0, "moved": 0}
    for crawl in Crawl.objects.filter(state__in=[CrawlState.RUNNING, CrawlState.PAUSING]):
        frontier = Frontier(crawl.pk)
        report["requeued"] += frontier.requeue_expired()
        # A spill or refill cut short (its worker died) is finished; a queue past its
        # window, or low with requests in the database, moves a batch.
        report["moved"] += Overflow(frontier).tend()
        if crawl.state == CrawlState.PAUSING:
            report["paused"] += lifecycle.settle_pause(crawl)
        elif lifecycle.finish_if_done(crawl.pk):
            report["finished"] += 1
        else:
            _forget_lost_slices(frontier)
            missing = crawl.slices - frontier.live_slices()
            if missing > 0:
                report["slices_started"] += enqueue_slices(crawl, count=missing)
    if any(report.values()):
        log.info("supervisor: %s", report)
    return report


def _forget_lost_slices(frontier: Frontier) -> None:
    """Forget the queued slices whose RQ job is gone or ended without starting its slice. A
    Redis failover can keep a slice's registration and lose the write that queued its job
    (replication is asynchronous, and in order: _enqueue registers first); a job can fail
    before its slice says it ended (its crawl's row not readable). Such a slice would count as
    alive for QUEUED_SLICE_TTL and the crawl wait for it."""
    queued = frontier.queued_slices()
    if not queued:
        return
    with frontier.redis.pipeline(transaction=False) as pipe:
        for slice_id in queued:
            pipe.hget(Job.key_for(slice_job_id(slice_id)), "status")
        statuses = pipe.execute()
    for slice_id, status in zip(queued, statuses, strict=True):
        if status is None:
            why = "its job is gone"
        elif (status := status.decode()) in ENDED_JOB_STATUSES:
            why = f"its job is {status}"
        else:
            continue
        log.warning("crawl %s: slice %s was queued but %s", frontier.crawl_id, slice_id, why)
        frontier.slice_end(slice_id)


# Stopping slices ------------------------------------------------------------------------------


def stop_slices_soon(crawl_id: int) -> threading.Thread:
    """After a cancel or a pause: in a thread of this process, stop_slices. Not a job: a stuck
    slice may hold every worker. Not a daemon: a command that cancels waits for it."""
    thread = threading.Thread(
        target=_stop_slices_thread, args=(crawl_id,), name=f"stop-slices-{crawl_id}"
    )
    thread.start()
    return thread


def stop_grace(crawl: Crawl | None) -> float:
    """How long a stopped crawl's slices have to end on their own before they are stopped:
    CRAWLHUB_STOP_GRACE_SECONDS, and for a crawl that renders at least its timeout, within
    which the pages its browsers are rendering finish (a slice killed mid-page would fetch
    them again after a resume)."""
    grace = settings.CRAWLHUB_STOP_GRACE_SECONDS
    if crawl is not None and crawl.effective_render_javascript():
        grace = max(grace, crawl.timeout)
    return grace


def _stop_slices_thread(crawl_id: int) -> None:
    try:
        crawl = Crawl.objects.filter(pk=crawl_id).select_related("channel").first()
        stop_slices(crawl_id, grace=stop_grace(crawl))
    except Exception:  # a thread of its own: nobody else would hear of it
        log.exception("stopping the slices of crawl %s failed", crawl_id)
    finally:
        connection.close()


def stop_slices(crawl_id: int, *, grace: float) -> list[str]:
    """Stop the crawl's slice jobs still running `grace` seconds from now, unless the crawl runs
    again by then (a quick resume): RQ's stop command makes their workers kill their work
    horses, wherever those are stuck. Then, for a paused crawl none of whose slices runs any
    more, the requests they held go back to the queue at once (not counted as crashes) and the
    pause settles. Returns the job ids of the slices stopped."""
    frontier = Frontier(crawl_id)
    deadline = time.monotonic() + grace
    while running := _running_slice_jobs(crawl_id):
        if frontier.state() == "running":
            return []
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if running and frontier.state() != "running":
        rq_connection = django_rq.get_queue("crawls").connection
        for job_id in running:
            with contextlib.suppress(InvalidJobOperation, NoSuchJobError):
                send_stop_job_command(rq_connection, job_id)
        log.warning(
            "crawl %s: stopped %d slice(s) still running %s s after it stopped",
            crawl_id,
            len(running),
            grace,
        )
        ended_by = time.monotonic() + STOPPED_WITHIN_SECONDS
        while set(running) & set(_running_slice_jobs(crawl_id)) and time.monotonic() < ended_by:
            time.sleep(0.1)
        for job_id in running:
            frontier.slice_end(job_id.removeprefix(SLICE_JOB_PREFIX))
        state = frontier.state() or "over"
        crawl_log.write(
            [
                crawl_log.line(
                    crawl_id,
                    CrawlEvent.Kind.STOPPED,
                    level=CrawlEvent.Level.WARNING,
                    text=f"{len(running)} slice(s) still running {grace:g} s after the crawl was "
                    f"{state} were stopped; what they held goes back to the queue",
                )
            ]
        )
    else:
        running = []
    if frontier.state() == "paused" and not _running_slice_jobs(crawl_id):
        frontier.release_claimed()
        crawl = Crawl.objects.filter(pk=crawl_id).first()
        if crawl is not None and crawl.state == CrawlState.PAUSING:
            lifecycle.settle_pause(crawl)
    return running


def _running_slice_jobs(crawl_id: int) -> list[str]:
    """The ids of the crawl's slice jobs that RQ has started and not seen end (one whose
    worker was killed stays there until RQ cleans up: stopping it again does no harm)."""
    registry = StartedJobRegistry("crawls", connection=django_rq.get_queue("crawls").connection)
    prefix = slice_job_id(f"{crawl_id}-")
    return [job_id for job_id in registry.get_job_ids(cleanup=False) if job_id.startswith(prefix)]
