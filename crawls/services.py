"""Every crawl action, whichever door it came in by (page, admin, API, CLI).

The database says what a crawl is and who did what; the crawl's frontier in Redis is what workers
read on the hot path. Each action changes Redis first (so workers see it within a claim) and then
the row, and enqueues slices only after the row is committed.
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from crawlhub.connections import REDIS_ERRORS, RedisMemory, redis_memory
from crawlhub.errors import ActionRefused
from crawlhub.http import Fetcher, OptionError, chromium, netguard
from crawlhub.http.urls import validate_url
from crawls.engine import credentials, live
from crawls.engine.crawl_settings import credentials_of, fetcher_options, settings_problems
from crawls.engine.ending import end_line
from crawls.engine.evaluator import Evaluator
from crawls.engine.extraction import RulesError, parse_rules, rules_to_json
from crawls.engine.frontier import Frontier, stats_many
from crawls.engine.jobs import enqueue_slices, stop_slices_soon
from crawls.engine.lifecycle import announce, announce_end, settle_pause
from crawls.engine.overflow import Overflow
from crawls.engine.request import VIA_SITEMAP_ROOT, Request
from crawls.engine.results import extract as extract_fields
from crawls.engine.scope import ScopeError, compile_patterns
from crawls.engine.sitemap_reads import sitemap_roots
from crawls.models import (
    CRAWL_OPTIONS,
    Channel,
    Crawl,
    CrawlAuth,
    CrawlDeletion,
    CrawlEvent,
    CrawlState,
    EndReason,
    FailedRequest,
)


class CrawlActionError(ActionRefused):
    """An action that the crawl's state does not allow, said in words for the user."""


def _event(crawl: Crawl, kind: str, user=None, detail: str = "", *, host: str = "") -> None:
    """A line of the crawl's audit trail (its log: crawls/logs.py)."""
    CrawlEvent.objects.create(crawl=crawl, kind=kind, user=user, detail=detail, host=host)


def _lines(value: list[str] | str, field: str) -> list[str]:
    """A list of lines, given as text (one value per line) or as a list of strings."""
    if isinstance(value, str):
        return value.splitlines()
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return list(value)
    raise ValidationError({field: ["Give a list of strings, or text with one value per line."]})


def clean_seeds(urls: list[str] | str, *, field: str = "seeds") -> list[str]:
    """Validated, stripped, de-duplicated seed URLs (order kept)."""
    cleaned, errors = [], []
    for n, raw in enumerate(_lines(urls, field), start=1):
        if not raw.strip():
            continue
        try:
            cleaned.append(validate_url(raw, field=f"line {n}"))
            netguard.guard_url(cleaned[-1])
        except netguard.BlockedAddress as exc:
            cleaned.pop()
            errors.append(f"line {n}: {raw.strip()!r} is refused: {exc}")
        except ValueError as exc:
            errors.append(str(exc))
    if errors:
        raise ValidationError({field: errors})
    if not cleaned:
        raise ValidationError({field: ["Give at least one http(s) URL."]})
    return list(dict.fromkeys(cleaned))


def _clean_domains(domains: list[str] | str) -> list[str]:
    if isinstance(domains, str):
        domains = domains.replace(",", "\n")
    cleaned, errors = [], []
    for raw in _lines(domains, "allowed_domains"):
        domain = raw.strip().lower().rstrip(".")
        if not domain:
            continue
        if "/" in domain or " " in domain or ":" in domain or not domain.isprintable():
            errors.append(f"{raw!r} is not a domain name (no scheme, path or port)")
        cleaned.append(domain)
    if errors:  # every bad line at once
        raise ValidationError({"allowed_domains": errors})
    return cleaned


def clean_patterns(patterns: list[str] | str, field: str) -> list[str]:
    patterns = _lines(patterns, field)
    try:
        # Blank lines are skipped there but still counted, so "line N" points at the input.
        compile_patterns(list(patterns), field)
    except ScopeError as exc:
        raise ValidationError({field: exc.problems}) from None
    return [p.strip() for p in patterns if p.strip()]


def value_problem(field: models.Field, value: Any) -> str:
    """What full_clean would not say about an option's value, or "": text that is not text,
    numbers that are not finite (NaN passes every min and max), a NUL (PostgreSQL stores none)."""
    if isinstance(field, models.CharField) and not isinstance(value, str):
        return f"Expected text, got {type(value).__name__}."
    numeric = isinstance(field, models.IntegerField | models.FloatField)
    if numeric and isinstance(value, float | str):
        try:
            if not math.isfinite(float(value)):
                return "Enter a finite number."
        except ValueError:
            pass  # not a number at all: full_clean says so
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(text, str) and "\x00" in text for text in texts):
        return "Null characters are not allowed."
    return ""


def clean_rules(data: object) -> list[dict]:
    """Extraction rules as stored: every problem of every rule at once, each naming its rule.
    None (an admin's empty JSON box) is no rules."""
    if data is None:
        return []
    try:
        return rules_to_json(parse_rules(data))
    except RulesError as exc:
        raise ValidationError({"extract_rules": exc.problems}) from None


def rendering_problem() -> str:
    """Why crawls cannot render JavaScript on this installation (with the command that fixes
    it), or "" when they can."""
    return chromium.locate().problem


def crawl_clean(
    *, name: str, seeds: list[str] | str, channel: Channel | None = None, **options: Any
) -> Crawl:
    """An unsaved, validated crawl. Raises ValidationError naming every bad field at once.

    Every door goes through here, creating and editing alike. The crawl's settings are checked
    as a slice will check them when it starts, in the same pass: each of those checks is about
    one field, so a field already refused is left out of them rather than holding back the
    others' messages for a second round."""
    crawl, errors = _crawl_checked(name=name, seeds=seeds, channel=channel, options=options)
    if errors:
        raise ValidationError(errors)
    return crawl


def _crawl_checked(
    *, name: str, seeds: list[str] | str, channel: Channel | None, options: dict[str, Any]
) -> tuple[Crawl, dict[str, list[str]]]:
    """The unsaved crawl and every problem of its fields, by field ({} when it is valid)."""
    unknown = set(options) - set(CRAWL_OPTIONS)
    if unknown:
        raise TypeError(f"unknown crawl options: {', '.join(sorted(unknown))}")
    name = "" if name is None else name
    errors: dict[str, list[str]] = {}
    for field, value in {"name": name, **options}.items():
        if problem := value_problem(Crawl._meta.get_field(field), value):
            errors[field] = [problem]
    values: dict[str, Any] = {k: v for k, v in options.items() if k not in errors}
    cleaners = {
        "seeds": lambda: clean_seeds(seeds),
        "allowed_domains": lambda: _clean_domains(options.get("allowed_domains", [])),
        "include_patterns": lambda: clean_patterns(
            options.get("include_patterns", []), "include_patterns"
        ),
        "exclude_patterns": lambda: clean_patterns(
            options.get("exclude_patterns", []), "exclude_patterns"
        ),
        "extract_rules": lambda: clean_rules(options.get("extract_rules", [])),
    }
    for field, cleaner in cleaners.items():
        if field in errors:
            continue
        try:
            values[field] = cleaner()
        except ValidationError as exc:
            errors.update(exc.message_dict)
    name = "" if "name" in errors else name.strip()
    crawl = Crawl(name=name, channel=channel or Channel.default(), **values)
    try:
        crawl.full_clean(exclude=["seeds", "created_by"] + list(errors))
    except ValidationError as exc:
        errors.update(exc.message_dict)
    # What a slice would refuse when it starts (a user agent with a line break, a domain that
    # is no host name...), by the same checks, on the fields not refused already: those are
    # checked with their defaults in place of what was given.
    checked = copy.copy(crawl)
    for field in errors:
        if field == "seeds":
            checked.seeds = []
        elif field in CRAWL_OPTIONS:
            setattr(checked, field, Crawl._meta.get_field(field).get_default())
    checked.seeds = checked.seeds or []
    for field, problems in settings_problems(checked).items():
        errors.setdefault(field, problems)
    return crawl, errors


def clean_credentials(
    *, seeds: list[str] | str | None, auth: dict[str, Any]
) -> credentials.Credentials | None:
    """A crawl's credentials from a door's inputs (credentials.INPUTS: headers, cookie,
    cookies_txt, basic_user, basic_password, login_url, login_fields, login_check_selector,
    login_check_url); None when they are all empty. ValidationError names each bad input, and
    its line where it has lines, never repeating a secret. Seeds None (they were refused):
    every input is checked but for what depends on the seeds' hosts."""
    unknown = set(auth) - set(credentials.INPUTS)
    if unknown:
        raise TypeError(f"unknown credentials: {', '.join(sorted(unknown))}")
    found = None
    if seeds is not None:
        lines = seeds.splitlines() if isinstance(seeds, str) else [str(seed) for seed in seeds]
        found = [line.strip() for line in lines if line.strip()]
    try:
        parsed = credentials.parse(found, auth)
    except credentials.CredentialsProblems as exc:
        raise ValidationError({k: [v] for k, v in exc.problems.items()}) from None
    return None if credentials.is_empty(parsed) else parsed


def credentials_shown(crawl: Crawl) -> dict:
    """The crawl's credentials as the doors may show them: names, never secret values."""
    return credentials.masked(credentials_of(crawl))


def credentials_note(found: credentials.Credentials, *, verb: str = "") -> str:
    """What the audit trail says of credentials entered: which kinds and the origins they are
    bound to, no value ("credentials: headers X-Api-Key; basic auth as bob; bound to ...";
    with a verb, "credentials re-entered: ...")."""
    shown = credentials.masked(found)
    kinds = [f"{label} {', '.join(shown[key])}" for key, label in (
        ("headers", "headers"), ("cookies", "cookies"), ("login_fields", "login fields"),
    ) if shown.get(key)]  # fmt: skip
    if found.basic_user:
        kinds.append(f"basic auth as {found.basic_user}")
    if found.login_url:
        kinds.append(f"login at {found.login_url}")
    kinds.append(f"bound to {credentials.origins_text(found.origins)}")
    return (f"credentials {verb}: " if verb else "credentials: ") + "; ".join(kinds)


def binding_note(found: credentials.Credentials, seeds: list[str]) -> str:
    """Where saved credentials go, for a crawl of these seeds: "bound to A", or "bound to A
    only: not sent to B" when some seeds are on origins they were not entered for."""
    note = f"bound to {credentials.origins_text(found.origins)}"
    if left_out := credentials.origins_left_out(found, seeds):
        note += f" only: not sent to {', '.join(left_out)}"
    return note


def credentials_left_out(crawl: Crawl) -> list[str]:
    """The origins of the crawl's seeds its saved credentials are not sent to (they stay bound
    to the origins they were entered for); [] without credentials. What the add-seeds doors
    say after adding seeds."""
    found = credentials_of(crawl)
    return credentials.origins_left_out(found, crawl.seeds) if found else []


def crawl_create(
    *, user, name: str, seeds: list[str] | str, channel: Channel | None = None,
    auth: dict[str, Any] | None = None, **options: Any,
) -> Crawl:  # fmt: skip
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


def crawl_problems(
    *, name: str, seeds: list[str] | str, channel: Channel | None = None,
    auth: dict[str, Any] | None = None, **options: Any,
) -> dict[str, list[str]]:  # fmt: skip
    """What crawl_create would refuse in these values, by field; {} when it would create the
    crawl. For a form some of whose inputs could not even be read: it checks the rest in the
    same round, so that every message comes at once."""
    return _crawl_and_credentials(name, seeds, channel, auth, options)[2]


def _crawl_and_credentials(
    name, seeds, channel, auth, options
) -> tuple[Crawl, credentials.Credentials | None, dict[str, list[str]]]:
    crawl, errors = _crawl_checked(name=name, seeds=seeds, channel=channel, options=options)
    found = None
    if auth:
        # Checked in the same round as the seeds; with seeds that are wrong, but for what
        # depends on their hosts (that would only add noise).
        try:
            found = clean_credentials(seeds=None if "seeds" in errors else crawl.seeds, auth=auth)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    return crawl, found, errors


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


def _frontier(crawl: Crawl) -> Frontier:
    return Frontier(crawl.pk)


def visible_crawls(user, queryset=None):
    """The crawls this user may see and drive: their own; staff, every crawl. Anything else
    answers 404, so that a crawl's existence does not leak."""
    queryset = Crawl.objects.all() if queryset is None else queryset
    if user.is_staff:
        return queryset
    return queryset.filter(created_by=user)


def crawl_start(*, crawl: Crawl, user=None) -> None:
    if not crawl.can_start():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be started.")
    frontier = _frontier(crawl)
    frontier.configure(
        max_pages=crawl.max_pages,
        max_depth=crawl.max_depth,
        host_delay=crawl.effective_host_delay(),
        host_concurrency=crawl.host_concurrency,
    )
    frontier.set_state("running")
    # A start that failed half-way (Redis done, row not saved) must not count seeds twice.
    if frontier.stats()["requests"] == 0:
        frontier.add_seeds(crawl.seeds)
        if crawl.follow_sitemaps:
            frontier.add_seeds(sitemap_roots(crawl.seeds), via=VIA_SITEMAP_ROOT)
        Overflow(frontier).balance()  # more seeds than the window: the rest to the database
    frontier.replicated()
    with transaction.atomic():
        crawl.state = CrawlState.RUNNING
        crawl.started_at = timezone.now()
        crawl.save(update_fields=["state", "started_at"])
        _event(crawl, CrawlEvent.Kind.STARTED, user)
        enqueue_slices(crawl)
        announce(crawl.pk)


def crawl_pause(*, crawl: Crawl, user=None) -> None:
    """Workers stop claiming at once; the crawl is paused when nothing is in flight. A slice
    still running a few seconds later is stopped (engine.jobs.stop_slices)."""
    if not crawl.can_pause():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be paused.")
    frontier = _frontier(crawl)
    frontier.set_state("paused")
    frontier.replicated()
    with transaction.atomic():
        crawl.state = CrawlState.PAUSING
        crawl.save(update_fields=["state"])
        _event(crawl, CrawlEvent.Kind.PAUSED, user)
        announce(crawl.pk)
        transaction.on_commit(lambda: stop_slices_soon(crawl.pk))
    settle_pause(crawl)


def crawl_resume(*, crawl: Crawl, user=None) -> None:
    if not crawl.can_resume():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be resumed.")
    frontier = _frontier(crawl)
    frontier.set_state("running")
    frontier.replicated()
    with transaction.atomic():
        crawl.state = CrawlState.RUNNING
        crawl.save(update_fields=["state"])
        _event(crawl, CrawlEvent.Kind.RESUMED, user)
        enqueue_slices(crawl)
        announce(crawl.pk)


def crawl_cancel(*, crawl: Crawl, user=None) -> None:
    """Stop for good; pages already fetched are kept. A slice still running a few seconds
    later is stopped (engine.jobs.stop_slices)."""
    if not crawl.can_cancel():
        raise CrawlActionError(f"A {crawl.get_state_display().lower()} crawl cannot be cancelled.")
    frontier = _frontier(crawl)
    frontier.cancel()
    frontier.replicated()
    Overflow(frontier).purge()  # counted in "cancelled" by cancel()
    with transaction.atomic():
        crawl.state = CrawlState.CANCELLED
        crawl.finished_at = timezone.now()
        crawl.stats = frontier.stats()
        crawl.end_reason = EndReason.CANCELLED
        crawl.end_line = end_line(
            reason=EndReason.CANCELLED, stats=crawl.stats, by=user.get_username() if user else None
        )
        crawl.save(update_fields=["state", "finished_at", "stats", "end_reason", "end_line"])
        _event(crawl, CrawlEvent.Kind.CANCELLED, user, crawl.end_line)
        announce(crawl.pk)
        announce_end(crawl.pk, "cancelled")
        transaction.on_commit(lambda: stop_slices_soon(crawl.pk))


def crawl_add_seeds(*, crawl: Crawl, urls: list[str] | str, user=None) -> tuple[int, int]:
    """Add start URLs, also to a running crawl. Returns (added, already seen). The crawl's
    credentials stay bound to the origins they were entered for: a seed on another origin is
    crawled without them (credentials_left_out says which) until the owner enters them again
    (crawls.editing.crawl_enter_credentials)."""
    if not crawl.can_add_seeds():
        raise CrawlActionError(
            f"Seeds cannot be added to a {crawl.get_state_display().lower()} crawl."
        )
    seeds = clean_seeds(urls)
    new = [url for url in seeds if url not in crawl.seeds]
    added, repeats = (len(new), len(seeds) - len(new))
    if crawl.state != CrawlState.DRAFT:
        frontier = _frontier(crawl)
        added, repeats = frontier.add_seeds(seeds)
        if crawl.follow_sitemaps:
            frontier.add_seeds(sitemap_roots(seeds), via=VIA_SITEMAP_ROOT)
        Overflow(frontier).balance()
        frontier.replicated()
    with transaction.atomic():
        crawl.seeds = crawl.seeds + new
        crawl.save(update_fields=["seeds"])
        note = f"{added} added, {repeats} already seen"
        if saved := credentials_of(crawl):  # bound where they were entered: they stay there
            note += "; credentials kept, " + binding_note(saved, crawl.seeds)
        _event(crawl, CrawlEvent.Kind.SEEDS_ADDED, user, note)
        announce(crawl.pk, state_change=False)
    return added, repeats


# One host of a crawl: what the crawl page's host view shows, and an operator's hold, release
# and drop. Any crawl its owner or staff can see (visible_crawls), while it is not over.

HOLD_MAX_MINUTES = 7 * 24 * 60
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_:[]")


def crawl_hosts(crawl: Crawl) -> list[dict]:
    """Every host the crawl knows of, as Frontier.host_rows() reads them, busiest first, with
    "next_at" and "held_until" as datetimes (None for none or past)."""
    frontier = _frontier(crawl)
    now_ms = frontier.now_ms()
    rows = frontier.host_rows()
    for row in rows:
        for name in ("next_at", "held_until"):
            ms = row[name]
            row[name] = _datetime_of(ms) if ms > now_ms else None
    rows.sort(key=lambda row: (-(row["queued"] + row["in_flight"]), row["host"]))
    return rows


def _datetime_of(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _host_arg(crawl: Crawl, host: str) -> str:
    """The host as the frontier names it (lowercased hostname[:port]), for a crawl that is
    not over; CrawlActionError saying what is wrong otherwise."""
    if crawl.is_over() or crawl.state == CrawlState.DRAFT:
        raise CrawlActionError(
            f"A {crawl.get_state_display().lower()} crawl has no hosts to hold, release or drop."
        )
    host = (host or "").strip().lower()
    if not host:
        raise CrawlActionError("host: say which host (as the host view shows it).")
    if len(host) > 260 or not set(host) <= _HOST_CHARS:
        raise CrawlActionError(f"host: {host[:80]!r} is not a host name (hostname[:port]).")
    return host


def crawl_host_hold(*, crawl: Crawl, host: str, minutes: Any, user=None) -> datetime:
    """Ask the host nothing for `minutes` (1 to a week); requests already being fetched
    finish. Returns until when (a datetime)."""
    host = _host_arg(crawl, host)
    try:
        minutes = float(minutes)
    except (TypeError, ValueError):
        raise CrawlActionError(f"minutes: {str(minutes)[:40]!r} is not a number.") from None
    if not (math.isfinite(minutes) and 1 <= minutes <= HOLD_MAX_MINUTES):
        raise CrawlActionError(f"minutes: hold a host from 1 to {HOLD_MAX_MINUTES} minutes.")
    frontier = _frontier(crawl)
    until_ms = frontier.now_ms() + round(minutes * 60_000)
    frontier.host_hold(host, until_ms=until_ms)
    until = _datetime_of(until_ms)
    # How long, not until when: the trail shows the event's own time in the one date style.
    _event(crawl, CrawlEvent.Kind.HOST_HELD, user, f"{host} for {round(minutes)} min", host=host)
    return until


def crawl_host_release(*, crawl: Crawl, host: str, user=None) -> None:
    """End a hold: the host is asked again as its delay allows."""
    host = _host_arg(crawl, host)
    _frontier(crawl).host_release(host)
    _event(crawl, CrawlEvent.Kind.HOST_RELEASED, user, host, host=host)


def crawl_host_drop(*, crawl: Crawl, host: str, user=None) -> int:
    """Drop the host's queued requests and retries (counted in "cancelled"); what is being
    fetched finishes, and links found later are queued as usual. Returns how many."""
    host = _host_arg(crawl, host)
    frontier = _frontier(crawl)
    dropped = frontier.host_drop(host)
    # What waits in the database too: only rows that hold the host's name are read.
    overflow, after = Overflow(frontier), 0
    while after is not None:
        more, after = overflow.drop_unfit(
            lambda request: request.host != host, after=after, containing=host, descoped=False
        )
        dropped += more
    note = f"{host}: {dropped} request(s) dropped"
    _event(crawl, CrawlEvent.Kind.HOST_DROPPED, user, note, host=host)
    announce(crawl.pk, state_change=False)
    return dropped


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
    count = frontier.retry_failed(requests, [f.last_status for f in failures])
    restart = crawl.state in (CrawlState.FINISHED, CrawlState.FAILED)
    if restart:
        frontier.set_state("running")
    frontier.replicated()
    with transaction.atomic():
        FailedRequest.objects.filter(pk__in=[f.pk for f in failures]).delete()
        _event(crawl, CrawlEvent.Kind.RETRIED, user, f"{count} request(s)")
        announce(crawl.pk, state_change=restart)
        if restart:
            crawl.state = CrawlState.RUNNING
            crawl.finished_at = None
            crawl.end_reason = crawl.end_line = ""
            crawl.save(update_fields=["state", "finished_at", "end_reason", "end_line"])
            enqueue_slices(crawl)
    return count


def crawl_stats(crawl: Crawl) -> dict[str, int]:
    """Live counters from Redis while the crawl can change; the saved ones after it ended."""
    if crawl.is_over() and crawl.stats:
        return crawl.stats
    return _frontier(crawl).stats()


def crawl_delete(*, crawl: Crawl, user=None) -> None:
    """Delete the crawl, its results and every Redis key it had."""
    if crawl.is_active():
        raise CrawlActionError("Cancel or pause the crawl before deleting it.")
    Frontier(crawl.pk).delete()
    with transaction.atomic():
        CrawlDeletion.objects.create(
            crawl_id=crawl.pk, name=crawl.name, owner_id=crawl.created_by_id, user=user,
            state=crawl.state, pages=crawl.pages.count(),
        )  # fmt: skip
        crawl.delete()


def crawl_stats_safe(crawl: Crawl) -> dict:
    """Counters for a page: when Redis is away, the saved ones plus the error, not a crash."""
    try:
        return crawl_stats(crawl)
    except REDIS_ERRORS as exc:
        return {**crawl.stats, "redis_error": str(exc)}


def redis_memory_safe() -> RedisMemory | None:
    """Redis' memory against crawlhub's budget; None when Redis is away."""
    try:
        return redis_memory()
    except REDIS_ERRORS:
        return None


def crawl_waiting(*, crawl: Crawl, memory: RedisMemory | None) -> dict[str, str]:
    """Why a running crawl fetches nothing right now that is not its own doing: {"reason":
    "memory", "line": ...} while Redis holds crawlhub's budget of its memory (`memory`:
    redis_memory_safe(), read once for many crawls); empty reason and line otherwise, or when
    Redis is away (None)."""
    if memory is None:
        return {"reason": "", "line": ""}
    return live.memory_status(crawl, memory)


def crawls_stats_safe(crawls: list[Crawl]) -> dict[int, dict]:
    """crawl_stats_safe for a page of crawls, in one Redis round trip."""
    live = [c.pk for c in crawls if not (c.is_over() and c.stats)]
    try:
        stats = stats_many(live) if live else {}
    except REDIS_ERRORS as exc:
        stats = {pk: {"redis_error": str(exc)} for pk in live}
    return {c.pk: {**c.stats, **stats[c.pk]} if c.pk in stats else c.stats for c in crawls}


def crawl_progress(crawl: Crawl, stats: dict) -> dict:
    """Done against known work, as the crawl's page shows it (live.progress)."""
    return live.progress(crawl, stats)


# The rule preview waits at most this long for its page, whatever the crawl's timeout.
PREVIEW_TIMEOUT = 10.0
# ... and this long for its rules (in a process of their own, killed then): the web server
# spends no more on a preview whose client has gone.
PREVIEW_RULES_SECONDS = 5.0


def rules_preview(*, url: str, rules: object, channel: Channel | None = None,
                  **options: Any) -> dict:  # fmt: skip
    """What each extraction rule yields on one page, fetched as the crawl would fetch it (its
    user agent, timeout and size limit, the private-network guard) and read as a crawl reads
    it (evaluator.py), every rule in the rule process, in at most PREVIEW_RULES_SECONDS: a rule
    still running then is stopped and says it took too long. Raises ValidationError for a bad
    URL or bad rules, naming them; a page that cannot be fetched is said in "error"."""
    errors: dict[str, list[str]] = {}
    try:
        url = validate_url(url, "url")
    except ValueError as exc:
        errors["url"] = [str(exc)]
    try:
        parsed = parse_rules(rules)
    except RulesError as exc:
        errors["extract_rules"] = exc.problems
    if errors:
        raise ValidationError(errors)
    fetch_options = {k: v for k, v in options.items() if k in PREVIEW_OPTIONS}
    crawl = Crawl(channel=channel or Channel.default(), **fetch_options)
    settings = fetcher_options(crawl)
    settings["timeout"] = min(float(settings["timeout"] or PREVIEW_TIMEOUT), PREVIEW_TIMEOUT)
    try:
        fetcher = Fetcher(**{**settings, "pool_size": 1})
    except OptionError as exc:
        raise ValidationError({exc.option: [str(exc)]}) from None
    with fetcher:
        fetch = fetcher.fetch(url)
    # As the crawl extracts (results.extract): from complete 2xx responses only; a 404's fields
    # would show what the crawl never keeps.
    with Evaluator(parsed, deadline=PREVIEW_RULES_SECONDS, linear_here=False) as evaluator:
        found = extract_fields(fetch, extractor=evaluator, structured=False)
    fields, errors = (found.fields, found.errors) if found else ({}, {})
    not_kept = "" if found else (
        "The crawl keeps fields of complete 2xx responses only: "
        + ("this page was cut at the size limit." if fetch.truncated else
           f"this page answered {'HTTP ' + str(fetch.status) if fetch.status else 'nothing'}.")
    )  # fmt: skip
    return {
        "url": url, "final_url": fetch.final_url, "status": fetch.status, "error": fetch.error,
        "content_type": fetch.content_type, "bytes": fetch.nbytes, "truncated": fetch.truncated,
        "fields": fields, "field_errors": errors, "not_kept": not_kept,
        # Rules whose URL pattern leaves this page out.
        "skipped": [r.name for r in parsed if r.name not in {**fields, **errors}] if found else [],
    }  # fmt: skip


# The options a preview fetches with (the rest do not change a single fetch).
PREVIEW_OPTIONS = ("timeout", "max_bytes", "user_agent_mode", "user_agent")
