"""Proxy imports and bulk actions as background jobs: a ProxyJob row says what to do and how far
it got; RQ jobs on the control queue (run_job) do it, BATCH proxies at a time, each batch one
short transaction that also saves the progress (proxies/inventory.py does the writes).

A run works for at most RUN_SECONDS, then hands the rest to a new run at the back of the queue,
so other control jobs (the crawl supervisor, validation) are never kept waiting long. A run
claims its job (runner, heartbeat); a job whose run stopped answering for STALL_SECONDS (its
worker was killed) is taken over by resume_stalled(), a periodic job, and goes on from its last
batch: nothing is imported or changed twice. The CLI runs jobs in its own process, in the same
batches (run_here).
"""

from __future__ import annotations

import logging
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import django_rq
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from crawlhub.dates import machine
from proxies import importer, inventory, lists, validation
from proxies.health import announce
from proxies.models import Proxy, ProxyJob, ProxyJobLine, ProxyState

log = logging.getLogger(__name__)

BATCH = inventory.CHUNK  # proxies per transaction
RUN_SECONDS = 20  # a run hands over after this long
JOB_TIMEOUT = 300  # RQ's limit for one run: a batch, or fetching a list (lists.FETCH_DEADLINE)
STALL_SECONDS = 120  # a run silent this long is taken to be dead
QUEUE = "control"
# PostgreSQL stores no NUL in text, yet a pasted or downloaded list may hold one (on a line the
# import reports as bad). A job keeps it as U+FFFE, a noncharacter, and reads it back as NUL; a
# reported line shows it as \x00.
_NUL, _NUL_KEPT = "\x00", "\ufffe"

Kind, State = ProxyJob.Kind, ProxyJob.State
# Set by SIGTERM while a run works in a worker's job process (_stopping_on_sigterm).
_stopping = threading.Event()


class TakenOver(Exception):
    """Another run holds the job now (this one was silent too long)."""


@dataclass
class Duplicate:
    line: int
    text: str
    why: str


@dataclass
class ImportReport:
    source: str
    added: list[Proxy] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    errors: list[importer.LineError] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "added": [p.masked_url for p in self.added],
            "duplicates": [d.__dict__ for d in self.duplicates],
            "errors": [e.__dict__ for e in self.errors],
        }


# -- starting --------------------------------------------------------------------------------


def create_import(*, text: str = "", url: str = "", source: str, user=None, actor="") -> ProxyJob:
    """A job importing `text`, or the list at `url` (fetched by the job)."""
    return ProxyJob.objects.create(
        kind=Kind.IMPORT,
        text=_storable(text),
        url=url,
        source=source[:500],
        user=user,
        actor=actor,
    )


def _storable(text: str) -> str:
    return text.replace(_NUL, _NUL_KEPT)


def create_action(*, kind: str, ids: list[int], why: str = "", user=None, actor="") -> ProxyJob:
    """A job removing, disabling or enabling the proxies `ids`."""
    if kind not in (Kind.REMOVE, Kind.DISABLE, Kind.ENABLE):
        raise ValueError(f"not a bulk action: {kind!r}")
    ids = sorted(set(ids))
    return ProxyJob.objects.create(
        kind=kind, ids=ids, total=len(ids), why=why, user=user, actor=actor
    )


def enqueue(job: ProxyJob) -> None:
    """A run of the job on the control queue, once the transaction commits."""
    job_id = job.pk

    def put() -> None:
        django_rq.get_queue(QUEUE).enqueue(
            run_job, job_id, job_timeout=JOB_TIMEOUT, result_ttl=600, failure_ttl=86400
        )

    transaction.on_commit(put)


# -- running ---------------------------------------------------------------------------------


def run_job(job_id: int) -> str:
    """The RQ job: one run of at most RUN_SECONDS; what is left goes on in the next run. A
    SIGTERM (the worker stopping) ends the run after its current batch, as its time would."""
    with _stopping_on_sigterm():
        outcome = run(job_id, until=time.monotonic() + RUN_SECONDS)
    if outcome == "more":
        enqueue(ProxyJob(pk=job_id))
    return outcome


def run_here(job: ProxyJob, *, progress: Callable[[ProxyJob], None] | None = None) -> ProxyJob:
    """Run a job to its end in this process (the CLI), in the same batches as a worker."""
    while run(job.pk, until=None, progress=progress) == "more":
        pass
    job.refresh_from_db()
    return job


def run(
    job_id: int, *, until: float | None, progress: Callable[[ProxyJob], None] | None = None
) -> str:
    """Claim the job and work on it until it ends or `until` (time.monotonic()) has passed:
    "done", "failed", "more" (handed over), or "busy" (another run holds it, or it ended)."""
    token = secrets.token_hex(8)
    if not _claim(job_id, token):
        return "busy"
    job = ProxyJob.objects.select_related("user").get(pk=job_id)
    work = _run_import if job.kind == Kind.IMPORT else _run_action
    try:
        finished = work(job, token, until, progress or (lambda job: None))
        if not finished:
            _release(job, token)
            return "more"
        _finish(job, token)
        return "done"
    except TakenOver:
        return "busy"
    except lists.ImportFailed as exc:
        _end(job, token, state=State.FAILED, error=str(exc))
        return "failed"
    except Exception as exc:
        log.exception("proxy job %s failed", job_id)
        kept = f"; the {job.done:,} proxies before it were dealt with" if job.done else ""
        _end(
            job,
            token,
            state=State.FAILED,
            error=f"stopped by an unexpected error ({type(exc).__name__}){kept}",
        )
        raise


def _claim(job_id: int, token: str) -> bool:
    now = timezone.now()
    free = Q(runner="") | Q(heartbeat__lt=now - timedelta(seconds=STALL_SECONDS))
    claimed = ProxyJob.objects.filter(
        Q(pk=job_id), Q(state__in=[State.QUEUED, State.RUNNING]), free
    ).update(runner=token, heartbeat=now, state=State.RUNNING)
    return claimed == 1


def _advance(job: ProxyJob, token: str, **counts: int) -> None:
    """Add a batch's counts to the job, in the batch's transaction; TakenOver (and the batch
    rolled back) when another run holds the job now."""
    changes = {name: F(name) + n for name, n in counts.items()}
    if not ProxyJob.objects.filter(pk=job.pk, runner=token).update(
        heartbeat=timezone.now(), **changes
    ):
        raise TakenOver
    for name, n in counts.items():
        setattr(job, name, getattr(job, name) + n)


def _release(job: ProxyJob, token: str) -> None:
    ProxyJob.objects.filter(pk=job.pk, runner=token).update(runner="", heartbeat=timezone.now())


def _end(job: ProxyJob, token: str, *, state: str, error: str = "") -> bool:
    """The job's last word; its work (the list, the ids) is dropped: it held passwords."""
    ended = ProxyJob.objects.filter(pk=job.pk, runner=token).update(
        state=state, error=error, runner="", finished_at=timezone.now(), text="", url="", ids=[]
    )
    announce()
    return ended == 1


def _finish(job: ProxyJob, token: str) -> None:
    """Done: and what it added or enabled is validated (one pass over all of them)."""
    with transaction.atomic():
        if not _end(job, token, state=State.DONE):
            raise TakenOver
        if job.kind == Kind.IMPORT and job.changed:
            ids = list(job.added.order_by("pk").values_list("pk", flat=True))
            validation.request_validation(ids=ids)
        elif job.kind == Kind.ENABLE and job.changed:
            enabled = [
                pk
                for chunk in inventory.chunks(job.ids)
                for pk in Proxy.objects.filter(pk__in=chunk, state=ProxyState.NEW).values_list(
                    "pk", flat=True
                )
            ]
            validation.request_validation(ids=enabled)


def _run_import(job: ProxyJob, token: str, until: float | None, progress) -> bool:
    if job.total is None and job.url and not job.text:
        text = lists.fetch_list(url=job.url)
        if not ProxyJob.objects.filter(pk=job.pk, runner=token).update(text=_storable(text)):
            raise TakenOver
        job.text = _storable(text)
    parsed = importer.parse(job.text.replace(_NUL_KEPT, _NUL))
    if job.total is None:
        _record_rejects(job, token, parsed)
    items = parsed.proxies
    while job.done < len(items):  # a run does one batch at least, then sees the time
        batch = items[job.done : job.done + BATCH]
        with transaction.atomic():
            added, duplicates = inventory.add_proxies(
                items=batch, job=job, source=job.source, user=job.user, actor=job.actor
            )
            _lines(job, ProxyJobLine.Kind.DUPLICATE, duplicates)
            _advance(job, token, done=len(batch), changed=len(added), duplicates=len(duplicates))
        progress(job)
        _let_others_write()
        if job.done < len(items) and _past(until):
            return False
    return True


# Between two batches on SQLite, this long without the write lock. SQLite has one writer at a
# time, and a writer kept waiting (a page creating a crawl) polls for the lock every 25-100 ms:
# batches committed back to back kept it waiting through a whole import.
SQLITE_WRITER_PAUSE = 0.1


def _let_others_write() -> None:
    if connection.vendor == "sqlite":
        time.sleep(SQLITE_WRITER_PAUSE)


def _past(until: float | None) -> bool:
    return until is not None and (_stopping.is_set() or time.monotonic() >= until)


@contextmanager
def _stopping_on_sigterm() -> Iterator[None]:
    """While a run works, in a worker's job process: SIGTERM (`up` or `worker` stopping) ends
    it at the end of its batch, handing the rest to the next run, which the next workers take
    on (a worker lets a job that ignores SIGTERM run out its RUN_SECONDS, longer than `up`
    waits). The process's own handler is back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only
        return
    _stopping.clear()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: _stopping.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _record_rejects(job: ProxyJob, token: str, parsed: importer.ParseResult) -> None:
    """Bad lines and repeats first, BATCH lines per transaction; then the job's total. Run
    again after a crash, it writes each line once (a line has one row per job)."""
    rejects = [(ProxyJobLine.Kind.ERROR, (e.line, e.text, e.reason)) for e in parsed.errors]
    rejects += [
        (ProxyJobLine.Kind.REPEAT, (line, text, f"repeats line {first}"))
        for line, text, first in parsed.repeats
    ]
    for chunk in inventory.chunks(rejects):
        with transaction.atomic():
            for kind in (ProxyJobLine.Kind.ERROR, ProxyJobLine.Kind.REPEAT):
                _lines(job, kind, [row for k, row in chunk if k == kind])
            _advance(job, token)
    counts = {
        "total": len(parsed.proxies),
        "errors": len(parsed.errors),
        "duplicates": len(parsed.repeats),
    }
    if not ProxyJob.objects.filter(pk=job.pk, runner=token).update(**counts):
        raise TakenOver
    for name, n in counts.items():
        setattr(job, name, n)


def _lines(job: ProxyJob, kind: str, rows: list[tuple[int, str, str]]) -> None:
    ProxyJobLine.objects.bulk_create(
        [
            ProxyJobLine(job=job, line=line, kind=kind, text=text.replace(_NUL, "\\x00"), why=why)
            for line, text, why in rows
        ],
        batch_size=BATCH,
        ignore_conflicts=True,
    )


def _run_action(job: ProxyJob, token: str, until: float | None, progress) -> bool:
    act = {
        Kind.REMOVE: lambda ps: inventory.remove_proxies(
            proxies=ps, why=job.why, user=job.user, actor=job.actor, publish=False
        ),
        Kind.DISABLE: lambda ps: inventory.disable_proxies(
            proxies=ps, why=job.why, user=job.user, actor=job.actor, publish=False
        ),
        Kind.ENABLE: lambda ps: inventory.enable_proxies(
            proxies=ps, user=job.user, actor=job.actor, validate=False, publish=False
        ),
    }[job.kind]
    while job.done < len(job.ids):  # a run does one batch at least, then sees the time
        chunk = job.ids[job.done : job.done + BATCH]
        with transaction.atomic():
            changed = act([Proxy(pk=pk) for pk in chunk])
            _advance(job, token, done=len(chunk), changed=len(changed))
        progress(job)
        _let_others_write()
        if job.done < len(job.ids) and _past(until):
            return False
    return True


def resume_stalled() -> int:
    """The periodic job: a new run for each job that is queued or running but whose last run
    has been silent for STALL_SECONDS (its worker died, or its queued run was lost)."""
    now = timezone.now()
    stale = now - timedelta(seconds=STALL_SECONDS)
    waiting = ProxyJob.objects.filter(state__in=[State.QUEUED, State.RUNNING]).filter(
        Q(heartbeat__lt=stale) | Q(heartbeat__isnull=True, created_at__lt=stale)
    )
    ids = list(waiting.values_list("pk", flat=True))
    # Not again before STALL_SECONDS, however long the queue is.
    ProxyJob.objects.filter(pk__in=ids, runner="").update(heartbeat=now)
    for job_id in ids:
        log.warning("proxy job %s: its last run stopped; resuming it", job_id)
        enqueue(ProxyJob(pk=job_id))
    return len(ids)


# -- reading ---------------------------------------------------------------------------------

# The Import page lists this many bad lines and duplicates; the whole report is in its JSON.
SHOWN_LINES = 1000


def import_report(job: ProxyJob, *, limit: int | None = None) -> ImportReport:
    """The report an import makes (so far): bad lines and duplicates by line number (repeats
    within the list first), and the proxies added, in the list's order."""
    lines = job.lines.all()
    errors = lines.filter(kind=ProxyJobLine.Kind.ERROR)
    repeats = lines.filter(kind=ProxyJobLine.Kind.REPEAT)
    known = lines.filter(kind=ProxyJobLine.Kind.DUPLICATE)
    added = job.added.order_by("pk")
    if limit is not None:
        errors, repeats, known, added = errors[:limit], repeats[:limit], known[:limit], []
    duplicates = [Duplicate(r.line, r.text, r.why) for r in [*repeats, *known]]
    return ImportReport(
        source=job.source,
        added=list(added),
        duplicates=duplicates[: limit or None],
        errors=[importer.LineError(r.line, r.text, r.why) for r in errors],
    )


def status(job: ProxyJob, *, report: bool = False) -> dict:
    """A job as the progress page's script and the API see it; with the whole report when
    asked and the import has ended."""
    if job.kind == Kind.IMPORT:
        counts = {"added": job.changed, "duplicates": job.duplicates, "errors": job.errors}
    else:
        counts = {
            "selected": job.total or 0,
            f"{job.kind}d": job.changed,
            "unchanged": job.done - job.changed,
        }
    shown = {
        "id": job.pk,
        "kind": job.kind,
        "state": job.state,
        "source": job.source,
        "total": job.total,
        "done": job.done,
        "percent": job.percent,
        "counts": counts,
        "error": job.error,
        "created_at": machine(job.created_at),
        "finished_at": machine(job.finished_at),
    }
    if report and job.kind == Kind.IMPORT and job.ended:
        shown["report"] = import_report(job).as_dict()
    return shown
