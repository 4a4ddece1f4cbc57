"""A crawl's log, as its workers write it: what each slice did (started fetching, ended with
how many pages and why), hosts slowed by a push-back and back to their pace, parked and free
again, logins, errors with their reason and retries given up. The lines are CrawlEvent rows
with no user, beside the audit trail's (crawls.models.CrawlEvent); the services read both.

What a line costs the crawl path: nothing per page. A slice keeps its lines in memory
(SliceLog) and writes them with the rows of its next batch, in the same statement as the
batch's sitemap notes (recording.Recorder.write), or when it ends; what the frontier's scripts
saw (a host parked, eased, released) comes back in the reply of the claim or completion call
the slice makes anyway. Errors are counted per host and reason and told at most every
ERROR_EVERY_SECONDS per slice ("12 requests to a.test got no answer: connection refused"), so a
dead host costs a line every few seconds, not one per request.

The bound: a slice writes at most SLICE_LINES lines (past that it counts them, and its last
line says how many were left out), and when a slice ends, trim() keeps the newest
CRAWLHUB_LOG_LINES workers' lines of each level (info, warning, error: routine slice lines
never push out a warning) and adds the number removed to Crawl.log_removed. The audit trail's
lines are never removed. So a crawl's log holds at most 3 x CRAWLHUB_LOG_LINES workers' lines,
plus SLICE_LINES per slice running, plus its audit trail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from django.conf import settings
from django.db.models import F

from crawls.engine.frontier import HostEvent
from crawls.models import Crawl, CrawlEvent

Kind, Level = CrawlEvent.Kind, CrawlEvent.Level

# A slice writes at most this many lines; past them it counts.
SLICE_LINES = 200
# Errors of a host and reason are told at once, then at most this often per slice.
ERROR_EVERY_SECONDS = 5.0
# The workers' lines (the audit trail's kinds are never trimmed).
WORKER_KINDS = frozenset(
    {
        Kind.SLICE,
        Kind.SLOWED,
        Kind.PARKED,
        Kind.HOST_RELEASED,
        Kind.LOGIN,
        Kind.ERROR,
        Kind.GAVE_UP,
        Kind.STOPPED,
        Kind.SITEMAP,
    }
)
# Why a slice ended (stopping.StopFlag.reason), as its last line says it.
ENDINGS = {
    "budget": "its time was up",
    "turn": "its turn was up, and another crawl's slice waited for a worker",
    "done": "the crawl has nothing left to fetch",
    "idle": "nothing to fetch for a while (retries wait, or hosts' delays)",
    "paused": "the crawl was paused",
    "cancelled": "the crawl was cancelled",
    "sigterm": "its worker is shutting down",
    "gone": "the crawl's state is gone from Redis",
}
_MAX_TEXT = 1000


def line(
    crawl_id: int, kind: str, text: str, *, host: str = "", level: str = Level.INFO
) -> CrawlEvent:
    """One line of the log, not saved."""
    return CrawlEvent(
        crawl_id=crawl_id, kind=kind, level=level, host=host[:255], detail=text[:_MAX_TEXT]
    )


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


class _Errors:
    """Requests of one host that ended alike (no answer, retried, given up) since last told."""

    def __init__(self, example: str) -> None:
        self.count = 0
        self.example = example  # the first one's error, as the page or failure keeps it
        self.attempts = 0


class SliceLog:
    """What one slice has to tell, until it is written. note() from any of its threads."""

    def __init__(self, crawl_id: int, slice_id: str) -> None:
        self.crawl_id = crawl_id
        self.slice_id = slice_id
        self.started = False  # its first line is written once it claims something
        self.left_out = 0
        self._written = 0
        self._lines: list[CrawlEvent] = []
        self._errors: dict[tuple[str, str, str], _Errors] = {}
        self._errors_told = float("-inf")
        self._lock = threading.Lock()

    def note(self, kind: str, text: str, *, host: str = "", level: str = Level.INFO) -> None:
        with self._lock:
            self._add(line(self.crawl_id, kind, text, host=host, level=level))

    def _add(self, noted: CrawlEvent) -> None:
        """Under the lock: one more line, unless the slice has written its SLICE_LINES."""
        if self._written + len(self._lines) >= SLICE_LINES:
            self.left_out += 1
        else:
            self._lines.append(noted)

    def host_events(self, events: Iterable[HostEvent]) -> None:
        """What the frontier's scripts saw happen to hosts (Frontier.complete, claim_ahead)."""
        for event in events:
            if event.kind == "parked":
                self.note(Kind.PARKED, event.text, host=event.host, level=Level.WARNING)
            elif event.kind == "eased":
                why = f" (it had answered {event.text})" if event.text else ""
                self.note(Kind.SLOWED, f"back to its own pace{why}", host=event.host)
            elif event.kind == "released":
                self.note(Kind.HOST_RELEASED, f"asked again: {event.text}", host=event.host)

    def pushed_back(self, host: str, *, delay: float, why: str) -> None:
        self.note(
            Kind.SLOWED,
            f"slowed to one request every {delay:g} s: it answered {why}",
            host=host,
            level=Level.WARNING,
        )

    def count_errors(self, results: Iterable) -> None:
        """The decided results of a batch (recording.Result) that got no answer, were retried
        or given up, counted by host and reason. Main thread only, like the batch."""
        for result in results:
            outcome = result.outcome
            # A sitemap file that is not there ("absent") was answered: its log line is its own.
            answered = outcome.kind == "done" and (
                outcome.status is not None or result.page is None
            )
            if answered or outcome.kind == "absent":
                continue
            self._count(result, outcome)

    def _count(self, result, outcome) -> None:
        """What became of the request ("gave_up", "retried", "crashed", "no_answer"), counted
        with the others of its host that ended alike, for the same reason."""
        fetch, request = result.fetch, result.request
        error = (fetch.error if fetch is not None else "") or result.blocked
        if outcome.kind == "failed":
            what = "gave_up"
            if result.failure is not None:
                error = result.failure.last_error or error
            error = error or f"HTTP {outcome.status}"
            reason = error[:80]
        elif outcome.kind in ("retry", "crashed"):
            what, error = ("retried" if outcome.kind == "retry" else "crashed"), outcome.error
            reason = error[:80]
        else:  # a page without an answer: grouped by the kind of error (timeout, refused...)
            what = "no_answer"
            reason = (fetch.error_kind if fetch is not None else "") or error[:80]
        with self._lock:
            found = self._errors.get((what, request.host, reason))
            if found is None:
                found = self._errors[what, request.host, reason] = _Errors(error)
            found.count += 1
            found.attempts = max(found.attempts, request.attempts + 1)

    def take(self, *, force: bool = False) -> list[CrawlEvent]:
        """The lines to write now: those noted, and the errors counted when they are due (at
        once the first time, then every ERROR_EVERY_SECONDS; all of them with force)."""
        now = time.monotonic()
        with self._lock:
            if self._errors and (force or now - self._errors_told >= ERROR_EVERY_SECONDS):
                self._errors_told = now
                for (what, host, _), errors in self._errors.items():
                    self._add(self._error_line(what, host, errors))
                self._errors = {}
            lines, self._lines = self._lines, []
            self._written += len(lines)
        return lines

    def put_back(self, lines: list[CrawlEvent]) -> None:
        """Lines whose batch the database refused: written with the next one."""
        with self._lock:
            self._lines[:0] = lines
            self._written -= len(lines)

    def _error_line(self, what: str, host: str, errors: _Errors) -> CrawlEvent:
        requests, why = _plural(errors.count, "request"), errors.example or "no answer"
        if what == "gave_up":
            text = (
                f"{requests} given up after {_plural(errors.attempts, 'attempt')}, to the "
                f"failure queue: {why}"
            )
            return line(self.crawl_id, Kind.GAVE_UP, text, host=host, level=Level.ERROR)
        if what == "retried":
            text = f"{requests} failed, tried again later: {why}"
        elif what == "crashed":
            text = f"{requests} could not be recorded, tried again later: {why}"
        elif why == "blocked by robots.txt":
            return line(self.crawl_id, Kind.ERROR, f"{requests} not fetched: {why}", host=host)
        else:
            text = f"{requests} got no answer: {why}"
        return line(self.crawl_id, Kind.ERROR, text, host=host, level=Level.WARNING)

    # -- a slice's first and last lines ---------------------------------------------------------

    def slice_started(self, claimed: int) -> None:
        """Written at once: the first claim that got something (an idle slice tells nothing)."""
        self.started = True
        text = f"slice {self.slice_id} started: {_plural(claimed, 'request')} claimed"
        write([line(self.crawl_id, Kind.SLICE, text)])

    def slice_ended(self, *, pages: int, reason: str, seconds: float, handed_back: int) -> None:
        """The slice's last lines (what it still holds, then its end), and the trim. A slice
        that never claimed anything and ended for want of work writes nothing."""
        if not self.started and reason in ("idle", "done") and not self._lines:
            return
        why = ENDINGS.get(reason, reason or "it stopped")
        text = f"slice {self.slice_id} ended after {seconds:.1f} s: {_plural(pages, 'page')}; {why}"
        if handed_back:
            text += f"; {_plural(handed_back, 'request')} handed back to the queue"
        lines = self.take(force=True)
        if self.left_out:
            text += f"; {_plural(self.left_out, 'more line')} of its log left out"
        write([*lines, line(self.crawl_id, Kind.SLICE, text)])
        trim(self.crawl_id)


def write(lines: list[CrawlEvent]) -> None:
    if lines:
        CrawlEvent.objects.bulk_create(lines)


def trim(crawl_id: int, *, keep: int | None = None) -> int:
    """Keep the newest `keep` (CRAWLHUB_LOG_LINES) workers' lines of each level; returns how
    many were removed, and adds them to Crawl.log_removed."""
    keep = settings.CRAWLHUB_LOG_LINES if keep is None else keep
    workers = CrawlEvent.objects.filter(crawl_id=crawl_id, kind__in=WORKER_KINDS, user=None)
    removed = 0
    for level in Level.values:
        of_level = workers.filter(level=level)
        cut = of_level.order_by("-id").values_list("id", flat=True)[keep : keep + 1]
        if cut:
            removed += of_level.filter(id__lte=cut[0]).delete()[0]
    if removed:
        Crawl.objects.filter(pk=crawl_id).update(log_removed=F("log_removed") + removed)
    return removed
