"""Routine job lines folded into a summary a minute.

RQ logs four lines for every job a worker runs (taken, done, its result kept) and its cron
process one for every job it enqueues: an idle `up` printed some 130 lines a minute of the
supervisor's runs every few seconds, and pushed the one-time admin password off the screen.
This filter (on the console handler, settings.LOGGING) drops those INFO lines, counts them,
and once a minute (CRAWLHUB_LOG_SUMMARY_SECONDS) lets one line through that says what they
were. Warnings and errors, job failures included, pass untouched, as does everything else.
CRAWLHUB_LOG_EVERY_JOB=1 shows every line again.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter

SUMMARY_SECONDS = 60.0

# The format strings of RQ's per-job INFO lines (rq/worker/base.py, rq/cron.py). A worker logs
# "taken" itself; the rest comes from the work horse it forks for the job (done, result kept).
_TAKEN = "Worker %s: %s: %s (%s)"
_HORSE = (
    "Successfully completed %s job in %ss on worker %s",
    "Successfully completed job %s in %ss on worker %s",
    "Worker %s: job %s result is kept for %s seconds",
    "Worker %s: job %s result discarded immediately",
)
_ENQUEUED = re.compile(r"^Enqueued job (\S+) to queue (\S+)$")
# "crawls.engine.jobs.supervise()" -> "supervise"; "crawl 12 slice 12-ab3f" -> "crawl 12 slices"
_FUNCTION = re.compile(r"(?:^|\.)(\w+)\(")
_SLICE = re.compile(r"^crawl (\d+) slice ")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


class RoutineJobs(logging.Filter):
    """Drops RQ's per-job INFO lines and, at most once a SUMMARY_SECONDS, turns the next one
    into a summary of what was dropped since the last."""

    def __init__(
        self, name: str = "", *, every_job: bool = False, seconds: float = SUMMARY_SECONDS
    ) -> None:
        super().__init__(name)
        self.every_job, self.seconds = every_job, seconds
        self.done: Counter[str] = Counter()
        self.enqueued: Counter[str] = Counter()
        self.since = time.monotonic()
        # A work horse is a fork of its worker, with a copy of this filter that dies with it:
        # it drops the routine lines and sums up nothing (its worker counted the job).
        self.pid = os.getpid()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.every_job or record.levelno != logging.INFO:
            return True
        if not self._counted(record):
            return True
        if os.getpid() != self.pid or time.monotonic() - self.since < self.seconds:
            return False
        record.name, record.msg, record.args = "crawlhub.activity", self.summary(), None
        self.done.clear()
        self.enqueued.clear()
        self.since = time.monotonic()
        return True

    def _counted(self, record: logging.LogRecord) -> bool:
        """True for a routine line (counted here, to be dropped or summed up)."""
        if record.name == "rq.worker":
            if record.msg == _TAKEN and isinstance(record.args, tuple) and len(record.args) == 4:
                what = _COLOUR.sub("", str(record.args[2]))
                if what != "Job OK":  # the horse's "done" in the same words
                    self.done[_kind(what)] += 1
                return True
            return record.msg in _HORSE
        found = record.name == "rq.cron" and _ENQUEUED.match(str(record.msg))
        if found:
            self.enqueued[found[1]] += 1
        return bool(found)

    def summary(self) -> str:
        seconds = time.monotonic() - self.since
        span = (
            f"the last {round(seconds)} s" if seconds < 90 else f"the last {seconds / 60:.0f} min"
        )
        parts = []
        if self.done:
            parts.append(f"{sum(self.done.values())} jobs run ({_counts(self.done)})")
        if self.enqueued:
            parts.append(f"{sum(self.enqueued.values())} enqueued ({_counts(self.enqueued)})")
        return f"{span} (pid {os.getpid()}): " + "; ".join(parts or ["nothing"])


def _kind(description: str) -> str:
    if found := _SLICE.match(description):
        return f"crawl {found[1]} slices"
    found = _FUNCTION.search(description)
    return found[1] if found else description.split(" ", 1)[0] or "job"


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counter.most_common())


class OrdinaryRefusals(logging.Filter):
    """A 4xx that a view raised on purpose (PermissionDenied: a user who is not staff, not the
    owner) is one line, not a traceback: django.request logs the exception with it, which made
    every ordinary 403 look like a crash. Server errors keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.name == "django.request" and status is not None and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
