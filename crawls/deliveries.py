"""Sending with retries: one mechanism for whatever crawlhub sends to the outside and tries
again, webhook deliveries (crawls/webhooks.py) and alert e-mails (crawls/alert_checks.py).

Each thing sent is a row (a models.Delivery) with its status, attempts, log and next attempt
time. An attempt is a job on the control queue; attempt() claims it with a conditional UPDATE
(so two jobs for one row never both send it), calls the kind's `send`, logs the outcome on the
row and, when it failed, schedules the next try after BACKOFF with RQ's enqueue_in (run by the
worker started with --with-scheduler). Should that scheduler be down, Redis away when a try was
due, or a worker killed mid-attempt, the periodic sweep (overdue()) enqueues the row again. Up
to MAX_ATTEMPTS tries, then the row is failed (given up).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import django_rq
import redis
from django.db.models import F
from django.utils import timezone

from crawlhub.dates import machine
from crawls.models import Delivery

log = logging.getLogger(__name__)

BACKOFF = (10, 30, 60, 300, 900)  # seconds before retry 1, 2, ...
MAX_ATTEMPTS = len(BACKOFF) + 1
TIMEOUT = 10  # seconds per connect or read; an attempt takes at most twice that
# An attempt in progress holds its row this long (longer than an attempt, plus a margin).
ATTEMPT_LEASE = timedelta(seconds=60)
# The sweep re-enqueues rows this late: RQ's scheduler should have run them.
OVERDUE = timedelta(seconds=60)
Status = Delivery.Status


@dataclass
class Sent:
    """What one attempt's `send` reports: "" or what went wrong; whether trying again could
    help (a setting that is missing will still be missing); what else goes in the attempt's
    log entry and on the row (its fields, saved with it)."""

    error: str = ""
    retry: bool = True
    entry: dict = field(default_factory=dict)
    fields: dict = field(default_factory=dict)


def enqueue(job: Callable[[int], object], row_id: int, *, delay: float = 0, what: str) -> None:
    """Run job(row_id) on the control queue, now or after `delay` seconds. `what` names it in
    RQ's job list ("webhook delivery 12")."""
    queue = django_rq.get_queue("control")
    options = {
        "job_timeout": TIMEOUT * 3,
        "result_ttl": 600,
        "failure_ttl": 7 * 24 * 3600,
        "description": what,
    }
    try:
        if delay:
            queue.enqueue_in(timedelta(seconds=delay), job, row_id, **options)
        else:
            queue.enqueue(job, row_id, **options)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        # The row is pending with its next attempt time: the sweep sends it later.
        log.warning("%s not enqueued: %s", what, exc)


def _claim(model: type[Delivery], row_id: int, now: datetime) -> bool:
    """Take the next attempt of a due, pending row; False when not due or taken."""
    return bool(
        model.objects.filter(pk=row_id, status=Status.PENDING, next_attempt_at__lte=now).update(
            attempts=F("attempts") + 1, next_attempt_at=now + ATTEMPT_LEASE
        )
    )


def attempt(
    model: type[Delivery],
    row_id: int,
    send: Callable[[Delivery], Sent],
    *,
    job: Callable[[int], object],
    what: str,
    now: datetime | None = None,
    retry: bool = True,
    after: Callable[[Delivery, Sent], None] | None = None,
) -> str:
    """One attempt of the row if it is due: send(row), logged on the row; the next try
    scheduled (job(row_id), after BACKOFF) when it failed and tries are left, unless `retry`
    is False or the send said trying again cannot help. `after(row, sent)` runs once the row
    is saved. Returns the row's status after the attempt, or "skipped"."""
    now = now or timezone.now()
    if not _claim(model, row_id, now):
        return "skipped"
    row = model.objects.get(pk=row_id)
    started = time.monotonic()
    sent = send(row)
    elapsed_ms = round((time.monotonic() - started) * 1000)
    finished = now + timedelta(milliseconds=elapsed_ms)
    row.log = [*row.log, {"at": machine(now), **sent.entry, "error": sent.error, "ms": elapsed_ms}]
    row.error = sent.error
    for name, value in sent.fields.items():
        setattr(row, name, value)
    delay = None
    if not sent.error:
        row.status, row.delivered_at, row.next_attempt_at = Status.DELIVERED, finished, None
    elif row.attempts >= MAX_ATTEMPTS or not (retry and sent.retry):
        row.status, row.next_attempt_at = Status.FAILED, None
    else:
        delay = BACKOFF[row.attempts - 1]
        row.next_attempt_at = finished + timedelta(seconds=delay)
    row.save(
        update_fields=[
            "log",
            "error",
            "status",
            "delivered_at",
            "next_attempt_at",
            *sent.fields,
        ]
    )
    if after is not None:
        after(row, sent)
    if delay is not None:
        enqueue(job, row_id, delay=delay, what=what)
    return row.status


def overdue(
    model: type[Delivery],
    job: Callable[[int], object],
    *,
    what: str,
    now: datetime | None = None,
) -> int:
    """The sweep: enqueue again the pending rows well past their time. Returns how many."""
    now = now or timezone.now()
    ids = list(
        model.objects.filter(status=Status.PENDING, next_attempt_at__lte=now - OVERDUE).values_list(
            "pk", flat=True
        )[:500]
    )
    for row_id in ids:
        enqueue(job, row_id, what=f"{what} {row_id}")
    return len(ids)
