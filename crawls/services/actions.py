"""Every crawl action, whichever door it came in by (page, admin, API, CLI): create, start,
pause, resume, cancel, add seeds, retry the failures, delete. Changing a crawl that exists is
in editing.py, a crawl's hosts in hosts.py.

The database says what a crawl is and who did what; the crawl's frontier in Redis is what workers
read on the hot path. Each action changes Redis first (so workers see it within a claim) and then
the row, and enqueues slices only after the row is committed. The engine is driven through its
one face, crawls.engine.control.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from crawlhub.errors import ActionRefused
from crawls.engine import credentials
from crawls.engine.control import CrawlControl
from crawls.engine.request import Request
from crawls.models import (
    Channel,
    Crawl,
    CrawlAuth,
    CrawlDeletion,
    CrawlEvent,
    CrawlState,
    EndReason,
    FailedRequest,
)
from crawls.services.cleaning import (
    _crawl_and_credentials,
    binding_note,
    clean_seeds,
    credentials_note,
)
from crawls.services.reads import credentials_of

# A deleted crawl's state key says "cancelled" this long, for slices still finishing a page.
RETIRED_STATE_SECONDS = 3600


class CrawlActionError(ActionRefused):
    """An action that the crawl's state does not allow, said in words for the user."""


def _event(crawl: Crawl, kind: str, user=None, detail: str = "", *, host: str = "") -> None:
    """A line of the crawl's audit trail (its log: crawls/logs.py)."""
    CrawlEvent.objects.create(crawl=crawl, kind=kind, user=user, detail=detail, host=host)


def crawl_create(
    *,
    user,
    name: str,
    seeds: list[str] | str,
    channel: Channel | None = None,
    auth: dict[str, Any] | None = None,
    **options: Any,
) -> Crawl:
    """A new crawl in draft state. Raises ValidationError naming each bad field (the
    credentials' inputs included: clean_credentials)."""
    crawl, found, errors = _crawl_and_credentials(name, seeds, channel, auth, options)
    if errors:
        raise ValidationError(errors)
    crawl.created_by = user
    with transaction.atomic():
        crawl.save()
        if found is not None:
            CrawlAuth.objects.create(crawl=crawl, **credentials.to_row_values(found))
        _event(crawl, CrawlEvent.Kind.CREATED, user, credentials_note(found) if found else "")
    return crawl


COPIES_GET_NONE = "without its credentials (only the crawl's owner's schedules and copies get them)"


def crawl_copy_credentials(*, source: Crawl, crawl: Crawl, user) -> str:
    """Give `crawl` (a copy of `source` that `user` owns: "run again", a schedule's run) the
    credentials of `source`, unseen and bound to the same origins, if `user` is the owner of
    `source`: whoever else may see a crawl (staff) did not give them, and running them as
    their own would act as the owner on the owner's sites. Returns what the copy's trail says
    of them ("" when `source` has none)."""
    row = CrawlAuth.objects.filter(crawl=source).first()
    if row is None:
        return ""
    if not source.is_owned_by(user):
        return COPIES_GET_NONE
    row.pk, row.crawl = None, crawl
    row.save(force_insert=True)
    return "with its credentials, " + binding_note(credentials.from_row(row), crawl.seeds)


def crawl_start(*, crawl: Crawl, user=None) -> None:
    if not crawl.can_start():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be started.")
    control = CrawlControl(crawl)
    control.start()
    with transaction.atomic():
        crawl.state = CrawlState.RUNNING
        crawl.started_at = timezone.now()
        crawl.save(update_fields=["state", "started_at"])
        _event(crawl, CrawlEvent.Kind.STARTED, user)
        control.enqueue_slices()
        control.announce()


def crawl_pause(*, crawl: Crawl, user=None) -> None:
    """Workers stop claiming at once; the crawl is paused when nothing is in flight. A slice
    still running a few seconds later is stopped (engine.jobs.stop_slices)."""
    if not crawl.can_pause():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be paused.")
    control = CrawlControl(crawl)
    control.pause()
    control.stop_slices_soon()
    with transaction.atomic():
        crawl.state = CrawlState.PAUSING
        crawl.save(update_fields=["state"])
        _event(crawl, CrawlEvent.Kind.PAUSED, user)
        control.announce()
    control.settle_pause()


def crawl_resume(*, crawl: Crawl, user=None) -> None:
    if not crawl.can_resume():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be resumed.")
    control = CrawlControl(crawl)
    control.resume()
    with transaction.atomic():
        crawl.state = CrawlState.RUNNING
        crawl.save(update_fields=["state"])
        _event(crawl, CrawlEvent.Kind.RESUMED, user)
        control.enqueue_slices()
        control.announce()


def crawl_cancel(*, crawl: Crawl, user=None) -> None:
    """Stop for good; pages already fetched are kept. A slice still running a few seconds
    later is stopped (engine.jobs.stop_slices)."""
    if not crawl.can_cancel():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be cancelled.")
    _cancel(crawl, user, CrawlControl(crawl))


def _cancel(crawl: Crawl, user, control: CrawlControl) -> None:
    stats, line = control.cancel(by=user.get_username() if user else None)
    with transaction.atomic():
        crawl.state = CrawlState.CANCELLED
        crawl.finished_at = timezone.now()
        crawl.stats = stats
        crawl.end_reason = EndReason.CANCELLED
        crawl.end_line = line
        crawl.save(update_fields=["state", "finished_at", "stats", "end_reason", "end_line"])
        _event(crawl, CrawlEvent.Kind.CANCELLED, user, crawl.end_line)
        control.announce()
        control.announce_end("cancelled")


def crawl_add_seeds(*, crawl: Crawl, urls: list[str] | str, user=None) -> tuple[int, int]:
    """Add start URLs, also to a running crawl. Returns (added, already seen). The crawl's
    credentials stay bound to the origins they were entered for: a seed on another origin is
    crawled without them (credentials_left_out says which) until the owner enters them again
    (editing.crawl_enter_credentials)."""
    if not crawl.can_add_seeds():
        raise CrawlActionError(
            f"Seeds cannot be added to a {crawl.get_state_display().lower()} crawl."
        )
    seeds = clean_seeds(urls)
    new = [url for url in seeds if url not in crawl.seeds]
    added, repeats = (len(new), len(seeds) - len(new))
    control = CrawlControl(crawl)
    if crawl.state != CrawlState.DRAFT:
        added, repeats = control.add_seeds(seeds)
    with transaction.atomic():
        crawl.seeds = crawl.seeds + new
        crawl.save(update_fields=["seeds"])
        note = f"{added} added, {repeats} already seen"
        if saved := credentials_of(crawl):  # bound where they were entered: they stay there
            note += "; credentials kept, " + binding_note(saved, crawl.seeds)
        _event(crawl, CrawlEvent.Kind.SEEDS_ADDED, user, note)
        control.announce(state_change=False)
    return added, repeats


def crawl_retry_failed(*, crawl: Crawl, user=None, ids: list[int] | None = None) -> int:
    """Put failed requests (all, or the given ids) back in the queue; a finished crawl runs
    again. Returns how many."""
    if crawl.state in (CrawlState.DRAFT, CrawlState.CANCELLED):
        raise CrawlActionError(
            f"A {crawl.get_state_display().lower()} crawl has no failure queue to retry."
        )
    failures = crawl.failures.all()
    if ids is not None:
        failures = failures.filter(pk__in=ids)
    failures = list(failures)
    if not failures:
        return 0
    requests = [Request(url=f.url, depth=f.depth, referrer=f.referrer) for f in failures]
    restart = crawl.state in (CrawlState.FINISHED, CrawlState.FAILED)
    control = CrawlControl(crawl)
    count = control.retry(requests, [f.last_status for f in failures], restart=restart)
    with transaction.atomic():
        FailedRequest.objects.filter(pk__in=[f.pk for f in failures]).delete()
        _event(crawl, CrawlEvent.Kind.RETRIED, user, f"{count} request(s)")
        control.announce(state_change=restart)
        if restart:
            crawl.state = CrawlState.RUNNING
            crawl.finished_at = None
            crawl.end_reason = crawl.end_line = ""
            crawl.save(update_fields=["state", "finished_at", "end_reason", "end_line"])
            control.enqueue_slices()
    return count


def crawl_delete(*, crawl: Crawl, user=None) -> CrawlDeletion:
    """Delete the crawl with its pages, failures and trail, and every Redis key it had; every
    door deletes through here. A crawl that may still fetch (running, pausing, paused) is
    cancelled first: its slices see "cancelled" and stop, and its keys go once the rows are
    gone (committed), but its state key, which says "cancelled" for RETIRED_STATE_SECONDS
    more to the slices still finishing a page. The deletion is recorded in CrawlDeletion."""
    control = CrawlControl(crawl)
    if crawl.can_cancel():
        _cancel(crawl, user, control)
    ran = crawl.state != CrawlState.DRAFT  # a draft has no slice to tell
    with transaction.atomic():
        # The crawl's row locked first: a slice still finishing a page may write a row of the
        # crawl's (its log) meanwhile; its reference then waits for this deletion and fails,
        # instead of this deletion failing at commit on the row it missed (PostgreSQL).
        Crawl.objects.select_for_update().filter(pk=crawl.pk).first()
        record = CrawlDeletion.objects.create(
            crawl_id=crawl.pk,
            name=crawl.name,
            owner_id=crawl.created_by_id,
            user=user,
            state=crawl.state,
            pages=crawl.pages.count(),
        )
        crawl.delete()
        transaction.on_commit(
            lambda: control.retire(RETIRED_STATE_SECONDS) if ran else control.forget()
        )
    return record
