"""Every crawl action, whichever door it came in by (page, admin, API, CLI).

The database says what a crawl is and who did what; the crawl's frontier in Redis is what workers
read on the hot path. Each action changes Redis first (so workers see it within a claim) and then
the row, and enqueues slices only after the row is committed.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import redis
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from crawls import frontier as frontier_mod
from crawls import netguard, webhooks
from crawls.frontier import Frontier, Request
from crawls.models import Channel, Crawl, CrawlEvent, CrawlState, FailedRequest, Page
from crawls.scope import ScopeError, compile_patterns, validate_url

# Fields a caller may set on a new crawl, besides name, channel and seeds.
CRAWL_OPTIONS = (
    "allowed_domains", "include_patterns", "exclude_patterns", "max_depth", "max_pages",
    "priority", "threads", "slices", "host_delay", "obey_robots", "user_agent_mode",
    "user_agent", "timeout", "max_bytes", "max_retries", "keep_bodies",
)  # fmt: skip


class CrawlActionError(Exception):
    """An action that the crawl's state does not allow, said in words for the user."""


def _event(crawl: Crawl, kind: str, user=None, detail: str = "") -> None:
    CrawlEvent.objects.create(crawl=crawl, kind=kind, user=user, detail=detail)


def clean_seeds(urls: list[str] | str, *, field: str = "seeds") -> list[str]:
    """Validated, stripped, de-duplicated seed URLs (order kept)."""
    if isinstance(urls, str):
        urls = urls.splitlines()
    cleaned, errors = [], []
    for n, raw in enumerate(urls, start=1):
        if not raw.strip():
            continue
        try:
            cleaned.append(validate_url(raw, field=f"line {n}"))
            if settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS:
                netguard.check_url(cleaned[-1])
        except netguard.BlockedAddress as exc:
            errors.append(f"line {n}: {cleaned.pop()!r} is refused: {exc}")
        except ValueError as exc:
            errors.append(str(exc))
    if errors:
        raise ValidationError({field: errors})
    if not cleaned:
        raise ValidationError({field: ["Give at least one http(s) URL."]})
    return list(dict.fromkeys(cleaned))


def _clean_domains(domains: list[str] | str) -> list[str]:
    if isinstance(domains, str):
        domains = domains.replace(",", "\n").splitlines()
    cleaned = []
    for raw in domains:
        domain = raw.strip().lower().rstrip(".")
        if not domain:
            continue
        if "/" in domain or " " in domain or ":" in domain:
            raise ValidationError(
                {"allowed_domains": [f"{raw!r} is not a domain name (no scheme, path or port)"]}
            )
        cleaned.append(domain)
    return cleaned


def _clean_patterns(patterns: list[str] | str, field: str) -> list[str]:
    if isinstance(patterns, str):
        patterns = patterns.splitlines()
    try:
        # Blank lines are skipped there but still counted, so "line N" points at the input.
        compile_patterns(list(patterns), field)
    except ScopeError as exc:
        raise ValidationError({field: [str(exc)]}) from None
    return [p.strip() for p in patterns if p.strip()]


def crawl_clean(
    *, name: str, seeds: list[str] | str, channel: Channel | None = None, **options: Any
) -> Crawl:
    """An unsaved, validated crawl. Raises ValidationError naming every bad field at once."""
    unknown = set(options) - set(CRAWL_OPTIONS)
    if unknown:
        raise TypeError(f"unknown crawl options: {', '.join(sorted(unknown))}")
    errors: dict[str, list[str]] = {}
    values: dict[str, Any] = dict(options)
    cleaners = {
        "seeds": lambda: clean_seeds(seeds),
        "allowed_domains": lambda: _clean_domains(options.get("allowed_domains", [])),
        "include_patterns": lambda: _clean_patterns(
            options.get("include_patterns", []), "include_patterns"
        ),
        "exclude_patterns": lambda: _clean_patterns(
            options.get("exclude_patterns", []), "exclude_patterns"
        ),
    }
    for field, cleaner in cleaners.items():
        try:
            values[field] = cleaner()
        except ValidationError as exc:
            errors.update(exc.message_dict)
    crawl = Crawl(name=(name or "").strip(), channel=channel or Channel.default(), **values)
    try:
        crawl.full_clean(exclude=["seeds", "created_by"] + list(errors))
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    return crawl


def crawl_create(
    *, user, name: str, seeds: list[str] | str, channel: Channel | None = None, **options: Any
) -> Crawl:
    """A new crawl in draft state. Raises ValidationError naming each bad field."""
    crawl = crawl_clean(name=name, seeds=seeds, channel=channel, **options)
    crawl.created_by = user
    with transaction.atomic():
        crawl.save()
        _event(crawl, CrawlEvent.Kind.CREATED, user)
    return crawl


def _frontier(crawl: Crawl) -> Frontier:
    return Frontier(crawl.pk)


def _announce(crawl_id: int, *, state_change: bool = True) -> None:
    """Push a snapshot to the crawl's live pages once the change is committed: at once for a
    state change; otherwise through the publish throttle, waiting at most its 250 ms when the
    slot is taken so that the new counters still get out."""
    from crawls import live

    if state_change:
        transaction.on_commit(lambda: live.publish_crawl(crawl_id, force=True))
    else:
        transaction.on_commit(lambda: live.publish_crawl(crawl_id, trailing=True))


def enqueue_slices(crawl: Crawl, count: int | None = None) -> int:
    """Put slices of the crawl on the crawls queue (after the current transaction commits)."""
    from crawls import jobs

    count = crawl.slices if count is None else count
    slice_ids = [f"{crawl.pk}-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    transaction.on_commit(lambda: jobs.enqueue_slices(crawl.pk, slice_ids))
    return count


def crawl_start(*, crawl: Crawl, user=None) -> None:
    if not crawl.can_start():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be started.")
    frontier = _frontier(crawl)
    frontier.configure(
        max_pages=crawl.max_pages,
        max_depth=crawl.max_depth,
        host_delay=crawl.effective_host_delay(),
    )
    frontier.set_state("running")
    # A start that failed half-way (Redis done, row not saved) must not count seeds twice.
    if frontier.stats()["requests"] == 0:
        frontier.add_seeds(crawl.seeds)
    with transaction.atomic():
        crawl.state = CrawlState.RUNNING
        crawl.started_at = timezone.now()
        crawl.save(update_fields=["state", "started_at"])
        _event(crawl, CrawlEvent.Kind.STARTED, user)
        enqueue_slices(crawl)
        _announce(crawl.pk)


def crawl_pause(*, crawl: Crawl, user=None) -> None:
    """Workers stop claiming at once; the crawl is paused when nothing is in flight."""
    if not crawl.can_pause():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be paused.")
    _frontier(crawl).set_state("paused")
    with transaction.atomic():
        crawl.state = CrawlState.PAUSING
        crawl.save(update_fields=["state"])
        _event(crawl, CrawlEvent.Kind.PAUSED, user)
        _announce(crawl.pk)
    settle_pause(crawl)


def settle_pause(crawl: Crawl) -> bool:
    """Pausing becomes paused once no request is in flight. True when it did."""
    if _frontier(crawl).stats()["in_flight"]:
        return False
    updated = Crawl.objects.filter(pk=crawl.pk, state=CrawlState.PAUSING).update(
        state=CrawlState.PAUSED
    )
    if updated:
        crawl.state = CrawlState.PAUSED
        _announce(crawl.pk)
    return bool(updated)


def crawl_resume(*, crawl: Crawl, user=None) -> None:
    if not crawl.can_resume():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be resumed.")
    _frontier(crawl).set_state("running")
    with transaction.atomic():
        crawl.state = CrawlState.RUNNING
        crawl.save(update_fields=["state"])
        _event(crawl, CrawlEvent.Kind.RESUMED, user)
        enqueue_slices(crawl)
        _announce(crawl.pk)


def crawl_cancel(*, crawl: Crawl, user=None) -> None:
    """Stop for good; pages already fetched are kept."""
    if not crawl.can_cancel():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be cancelled.")
    frontier = _frontier(crawl)
    frontier.cancel()
    with transaction.atomic():
        crawl.state = CrawlState.CANCELLED
        crawl.finished_at = timezone.now()
        crawl.stats = frontier.stats()
        crawl.save(update_fields=["state", "finished_at", "stats"])
        _event(crawl, CrawlEvent.Kind.CANCELLED, user)
        _announce(crawl.pk)
        transaction.on_commit(lambda: webhooks.crawl_ended(crawl.pk, "cancelled"), robust=True)


def crawl_add_seeds(*, crawl: Crawl, urls: list[str] | str, user=None) -> tuple[int, int]:
    """Add start URLs, also to a running crawl. Returns (added, already seen)."""
    if not crawl.can_add_seeds():
        raise CrawlActionError(
            f"Seeds cannot be added to a {crawl.get_state_display().lower()} crawl."
        )
    seeds = clean_seeds(urls)
    new = [url for url in seeds if url not in crawl.seeds]
    added, repeats = (len(new), len(seeds) - len(new))
    if crawl.state != CrawlState.DRAFT:
        added, repeats = _frontier(crawl).add_seeds(seeds)
    with transaction.atomic():
        crawl.seeds = crawl.seeds + new
        crawl.save(update_fields=["seeds"])
        _event(crawl, CrawlEvent.Kind.SEEDS_ADDED, user, f"{added} added, {repeats} already seen")
        _announce(crawl.pk, state_change=False)
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
    frontier = _frontier(crawl)
    count = frontier.retry_failed(requests)
    with transaction.atomic():
        FailedRequest.objects.filter(pk__in=[f.pk for f in failures]).delete()
        _event(crawl, CrawlEvent.Kind.RETRIED, user, f"{count} request(s)")
        restart = crawl.state in (CrawlState.FINISHED, CrawlState.FAILED)
        _announce(crawl.pk, state_change=restart)
        if restart:
            frontier.set_state("running")
            crawl.state = CrawlState.RUNNING
            crawl.finished_at = None
            crawl.save(update_fields=["state", "finished_at"])
            enqueue_slices(crawl)
    return count


def crawl_finish_if_done(crawl_id: int) -> bool:
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
    if stats["responses"] == 0 and stats["errors"] > 0:
        state, kind, error = CrawlState.FAILED, CrawlEvent.Kind.FAILED, _commonest_error(crawl_id)
    ended = Crawl.objects.filter(pk=crawl_id, state=CrawlState.RUNNING).update(
        state=state, finished_at=timezone.now(), stats=stats, error=error
    )
    if ended:
        CrawlEvent.objects.create(crawl_id=crawl_id, kind=kind, detail=error)
        _announce(crawl_id)
        transaction.on_commit(lambda: webhooks.crawl_ended(crawl_id, kind), robust=True)
    return bool(ended)


def _commonest_error(crawl_id: int) -> str:
    """Why no page of a crawl could be fetched, from its pages and failure queue."""
    errors = Counter(
        list(
            Page.objects.filter(crawl_id=crawl_id)
            .exclude(error="")
            .values_list("error", flat=True)[:1000]
        )
        + list(
            FailedRequest.objects.filter(crawl_id=crawl_id).values_list("last_error", flat=True)[
                :1000
            ]
        )
    )
    if not errors:
        return "no page could be fetched"
    message, count = errors.most_common(1)[0]
    return f"no page could be fetched: {message} ({count}x)"


def crawl_stats(crawl: Crawl) -> dict[str, int]:
    """Live counters from Redis while the crawl can change; the saved ones after it ended."""
    if crawl.is_over() and crawl.stats:
        return crawl.stats
    return _frontier(crawl).stats()


def crawl_delete(*, crawl: Crawl, user=None) -> None:
    """Delete the crawl, its results and every Redis key it had."""
    if crawl.is_active():
        raise CrawlActionError("Cancel or pause the crawl before deleting it.")
    frontier_mod.Frontier(crawl.pk).delete()
    crawl.delete()


REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError)


def crawl_stats_safe(crawl: Crawl) -> dict:
    """Counters for a page: when Redis is away, the saved ones plus the error, not a crash."""
    try:
        return crawl_stats(crawl)
    except REDIS_ERRORS as exc:
        return {**crawl.stats, "redis_error": str(exc)}


def crawls_stats_safe(crawls: list[Crawl]) -> dict[int, dict]:
    """crawl_stats_safe for a page of crawls, in one Redis round trip."""
    live = [c.pk for c in crawls if not (c.is_over() and c.stats)]
    try:
        stats = frontier_mod.stats_many(live) if live else {}
    except REDIS_ERRORS as exc:
        stats = {pk: {"redis_error": str(exc)} for pk in live}
    return {c.pk: {**c.stats, **stats[c.pk]} if c.pk in stats else c.stats for c in crawls}
