"""The state changes a crawl makes on its own, decided from its frontier: a pausing crawl is
paused once nothing is in flight, a running crawl ends once its queue, retries and backup are
all empty, and one whose slices cannot start fails. Workers (after a slice, the supervisor) and
the services call these.
"""

from __future__ import annotations

from collections import Counter

from django.db import transaction
from django.utils import timezone

from crawls.engine import live
from crawls.engine.ending import end_line, finished_reason
from crawls.engine.frontier import Frontier
from crawls.engine.overflow import Overflow
from crawls.models import Crawl, CrawlEvent, CrawlState, EndReason, FailedRequest, Page
from crawls.signals import crawl_ended


def announce(crawl_id: int, *, state_change: bool = True) -> None:
    """Push a snapshot to the crawl's live pages once the change is committed: at once for a
    state change; otherwise through the publish throttle, waiting at most its 250 ms when the
    slot is taken so that the new counters still get out."""
    if state_change:
        transaction.on_commit(lambda: live.publish_crawl(crawl_id, force=True))
    else:
        transaction.on_commit(lambda: live.publish_crawl(crawl_id, trailing=True))


def announce_end(crawl_id: int, event: str) -> None:
    """Once committed, tell the integrations (webhooks) that the crawl ended. Its login session
    (crawls/engine/sessions.py) is dropped now: a crawl that is over keeps no live session."""
    Frontier(crawl_id).session_forget()
    transaction.on_commit(
        lambda: crawl_ended.send_robust(sender=Crawl, crawl_id=crawl_id, event=event)
    )


def settle_pause(crawl: Crawl) -> bool:
    """Pausing becomes paused once no request is in flight. True when it did."""
    if Frontier(crawl.pk).stats()["in_flight"]:
        return False
    updated = Crawl.objects.filter(pk=crawl.pk, state=CrawlState.PAUSING).update(
        state=CrawlState.PAUSED
    )
    if updated:
        crawl.state = CrawlState.PAUSED
        announce(crawl.pk)
    return bool(updated)


def finish_if_done(crawl_id: int) -> bool:
    """End a running crawl once its queue, retries and backup are all empty: finished, or
    failed when not a single page got an answer (the commonest error says why).

    Decided by the frontier's atomic emptiness check, never by comparing counters; the
    conditional UPDATE makes concurrent callers (slices, supervisor) end it once.
    """
    frontier = Frontier(crawl_id)
    if not frontier.is_done():
        return False
    stats = frontier.stats()
    state, kind, error = CrawlState.FINISHED, CrawlEvent.Kind.FINISHED, ""
    max_pages = Crawl.objects.filter(pk=crawl_id).values_list("max_pages", flat=True).first() or 0
    reason = finished_reason(stats, max_pages=max_pages)
    if stats["responses"] == 0 and stats["errors"] > 0:
        state, kind, error = CrawlState.FAILED, CrawlEvent.Kind.FAILED, _commonest_error(crawl_id)
        reason = EndReason.FAILED
    line = end_line(reason=reason, stats=stats, max_pages=max_pages, error=error)
    ended = Crawl.objects.filter(pk=crawl_id, state=CrawlState.RUNNING).update(
        state=state,
        finished_at=timezone.now(),
        stats=stats,
        error=error,
        end_reason=reason,
        end_line=line,
    )
    if ended:
        # The log's last line says why, as the page does (a failure's, with its error).
        CrawlEvent.objects.create(crawl_id=crawl_id, kind=kind, detail=error or line)
        announce(crawl_id)
        announce_end(crawl_id, kind)
    return bool(ended)


def fail(crawl_id: int, error: str) -> bool:
    """End an active crawl that cannot go on (a slice refused its settings): failed, with the
    reason in `error`. Its unfinished requests are dropped, as on cancel, since a failed crawl
    is over; slices still running see the state change and stop. True when it did."""
    with transaction.atomic():
        ended = Crawl.objects.filter(
            pk=crawl_id, state__in=[CrawlState.RUNNING, CrawlState.PAUSING]
        ).update(state=CrawlState.FAILED, finished_at=timezone.now(), error=error)
        if not ended:
            return False
        frontier = Frontier(crawl_id)
        frontier.cancel()
        Overflow(frontier).purge()
        stats = frontier.stats()
        Crawl.objects.filter(pk=crawl_id).update(
            stats=stats,
            end_reason=EndReason.FAILED,
            end_line=end_line(reason=EndReason.FAILED, stats=stats, error=error),
        )
        CrawlEvent.objects.create(crawl_id=crawl_id, kind=CrawlEvent.Kind.FAILED, detail=error)
        announce(crawl_id)
        announce_end(crawl_id, CrawlEvent.Kind.FAILED)
    return True


def _commonest_error(crawl_id: int) -> str:
    """Why no page of a crawl could be fetched, from its pages and failure queue."""
    pages = Page.objects.filter(crawl_id=crawl_id).exclude(error="")
    failures = FailedRequest.objects.filter(crawl_id=crawl_id)
    errors = Counter(
        list(pages.values_list("error", flat=True)[:1000])
        + list(failures.values_list("last_error", flat=True)[:1000])
    )
    if not errors:
        return "no page could be fetched"
    message, count = errors.most_common(1)[0]
    return f"no page could be fetched: {message} ({count}x)"
