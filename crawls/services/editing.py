"""Changing a crawl once it exists, whichever door it came in by: a draft's settings (every
one), its credentials, a running or paused crawl's live settings (limits, delay, threads,
slices, scope) and "run again" (a new draft with the same settings). Each is on the crawl's
audit trail.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db import transaction

from crawls.engine import credentials
from crawls.engine.control import CrawlControl
from crawls.models import CRAWL_OPTIONS, Channel, Crawl, CrawlAuth, CrawlEvent, CrawlState
from crawls.services.actions import CrawlActionError, crawl_copy_credentials, crawl_create
from crawls.services.cleaning import (
    binding_note,
    clean_credentials,
    clean_patterns,
    crawl_clean,
    credentials_note,
    value_problem,
)

# What a running or paused crawl may change: the frontier's limits (read by every claim and
# completion), what each slice reads when it starts (its threads, the host delay; more slices
# are started at once, fewer take effect as slices end) and its scope's patterns (taken by
# every slice with its next claim: crawls/engine/scope_changes.py).
SCOPE_FIELDS = ("include_patterns", "exclude_patterns")
LIVE_FIELDS = (
    "max_pages",
    "max_depth",
    "host_delay",
    "host_concurrency",
    "threads",
    "slices",
    *SCOPE_FIELDS,
)
LIVE_STATES = (CrawlState.RUNNING, CrawlState.PAUSING, CrawlState.PAUSED)
SETTINGS = ("name", "channel", "seeds", *CRAWL_OPTIONS)


def can_edit(crawl: Crawl) -> bool:
    return crawl.state == CrawlState.DRAFT


def can_change_live(crawl: Crawl) -> bool:
    return crawl.state in LIVE_STATES


def _shown(value: Any) -> str:
    if isinstance(value, list):
        # A pattern may hold a comma: quoted then, so that the list reads as what it was.
        items = (repr(x) if isinstance(x, str) and "," in x else str(x) for x in value)
        return ", ".join(items) or "none"
    return "none" if value is None or value == "" else str(value)


def crawl_update(
    *,
    crawl: Crawl,
    user,
    name: str,
    seeds: list[str] | str,
    channel: Channel | None = None,
    auth: dict[str, Any] | None = None,
    remove_credentials: list[str] | tuple[str, ...] = (),
    **options: Any,
) -> list[str]:
    """Change every setting of a draft; credentials are replaced only when some are given
    (secrets are write-only: left empty, the crawl keeps its own), and the saved ones of each
    kind in `remove_credentials` (credentials.KINDS: headers, cookies, basic_auth, login) are
    removed. Credentials given are bound to the origins of the seeds given with them; kept,
    they stay bound where they were, whatever the seeds become. Only the crawl's owner gives
    them; anyone who may edit the draft may remove them. Raises ValidationError naming every
    bad field at once, the credentials' with the seeds', as crawl_create does. Returns the
    names of the fields changed ("credentials" for any change to them)."""
    if not can_edit(crawl):
        raise CrawlActionError(
            f"A {crawl.get_state_display().lower()} crawl's settings cannot be edited; "
            "a running or paused one can change its limits, delay, threads and slices."
        )
    errors: dict[str, list[str]] = {}
    fresh = None
    try:
        fresh = crawl_clean(name=name, seeds=seeds, channel=channel, **options)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    found = None
    if auth and any(auth.values()) and not crawl.is_owned_by(user):
        errors[NON_FIELD_ERRORS] = [owner_only(crawl)]
    elif auth and any(auth.values()):
        try:
            found = clean_credentials(
                seeds=None if "seeds" in errors else fresh.seeds if fresh else seeds, auth=auth
            )
        except ValidationError as exc:
            errors.update(exc.message_dict)
    unknown = set(remove_credentials) - set(credentials.KINDS)
    if unknown:
        raise TypeError(f"unknown kinds of credentials: {', '.join(sorted(unknown))}")
    for kind, message in credentials.removal_conflicts(auth or {}, remove_credentials).items():
        errors[f"remove_{kind}"] = [message]
    if errors:
        raise ValidationError(errors)
    changed = [f for f in SETTINGS if getattr(crawl, f) != getattr(fresh, f)]
    with transaction.atomic():
        for field in changed:
            setattr(crawl, field, getattr(fresh, field))
        crawl.save()
        notes = [f"changed {', '.join(_label(f) for f in changed)}"] if changed else []
        if found is not None:
            notes.append(_save_credentials(crawl, found))
        if removed := _remove_credentials(crawl, remove_credentials):
            notes.append("removed the saved " + ", ".join(removed))
        kept = None if found else CrawlAuth.objects.filter(crawl=crawl).first()
        if notes and kept is not None:  # what the change did to them: nothing, said where
            what = "the other credentials kept" if removed else "credentials kept"
            where = binding_note(credentials.from_row(kept), crawl.seeds)
            notes.append(f"{what}, {where}")
        if found is not None or removed:
            changed.append("credentials")
        if notes:
            CrawlEvent.objects.create(
                crawl=crawl, kind=CrawlEvent.Kind.EDITED, user=user, detail="; ".join(notes)
            )
    return changed


def crawl_admin_changed(*, crawl: Crawl, before: Crawl, user) -> None:
    """On the trail: the settings an admin changed in Django's admin (`before`: the row as it
    was; saved there, in any state), and where the credentials stay: the seeds' origins may
    have changed, the credentials' have not."""
    fields = [f for f in SETTINGS if getattr(before, f) != getattr(crawl, f)]
    if not fields:
        return
    notes = [f"changed {', '.join(_label(f) for f in fields)} in the admin"]
    if kept := CrawlAuth.objects.filter(crawl=crawl).first():
        where = binding_note(credentials.from_row(kept), crawl.seeds)
        notes.append(f"credentials kept, {where}")
    CrawlEvent.objects.create(
        crawl=crawl, kind=CrawlEvent.Kind.EDITED, user=user, detail="; ".join(notes)
    )


def owner_only(crawl: Crawl) -> str:
    owner = crawl.created_by.get_username() if crawl.created_by else "nobody: its owner is gone"
    return (
        f"Only the crawl's owner ({owner}) can enter its credentials: they are the owner's, "
        "for the owner's sites. Saved ones can be removed."
    )


def _save_credentials(crawl: Crawl, found: credentials.Credentials) -> str:
    """Save credentials just entered for the crawl, replacing any (they come bound to the
    origins of the seeds they were entered with); what the trail says of it."""
    row, created = CrawlAuth.objects.update_or_create(
        crawl=crawl, defaults=credentials.to_row_values(found)
    )
    crawl.auth = row  # what crawl.auth reads from now on
    return credentials_note(found, verb="entered" if created else "re-entered")


def _remove_credentials(crawl: Crawl, kinds: list[str] | tuple[str, ...]) -> list[str]:
    """Empty the saved credentials of these kinds (the row goes once nothing is left); the
    words for the kinds that were there."""
    row = CrawlAuth.objects.filter(crawl=crawl).first()
    if row is None:
        return []
    held = credentials.kinds_set(credentials.from_row(row))
    removed = [kind for kind in credentials.KINDS if kind in kinds and kind in held]
    for kind in removed:
        for field in credentials.KINDS[kind][2]:
            setattr(row, field, CrawlAuth._meta.get_field(field).get_default())
    if removed and not credentials.kinds_set(credentials.from_row(row)):
        row.delete()
    elif removed:
        row.save()
    return [credentials.KINDS[kind][0] for kind in removed]


# Where the owner may enter a crawl's credentials again: while it may still fetch.
CREDENTIAL_STATES = (CrawlState.DRAFT, *LIVE_STATES)


def can_enter_credentials(crawl: Crawl, user) -> bool:
    return crawl.state in CREDENTIAL_STATES and crawl.is_owned_by(user)


def origins_of_seeds(seeds: list[str]) -> list[str]:
    """Where credentials entered now for a crawl of these seeds would go."""
    return sorted(credentials.origin_text(found) for found in credentials.bound_origins(seeds))


def crawl_enter_credentials(*, crawl: Crawl, user, auth: dict[str, Any]) -> list[str]:
    """The owner enters the crawl's credentials again (credentials.INPUTS): they replace the
    saved ones whole and are bound to the origins of the crawl's seeds as they are now, seeds
    added since included. A running crawl's slices take them when they start (within
    CRAWLHUB_SLICE_SECONDS), and a login step logs in anew with them. PermissionDenied for
    anyone but the owner; ValidationError naming each bad input, never a secret. Returns the
    origins they are bound to."""
    if not crawl.is_owned_by(user):
        raise PermissionDenied(owner_only(crawl))
    if crawl.state not in CREDENTIAL_STATES:
        raise CrawlActionError(
            f"A {crawl.get_state_display().lower()} crawl fetches nothing more: its "
            "credentials cannot change; Run again makes a draft that can take them."
        )
    found = clean_credentials(seeds=crawl.seeds, auth=auth)
    if found is None:
        raise ValidationError(
            {
                NON_FIELD_ERRORS: [
                    "Give the credentials to send, all of them: they replace the saved ones whole."
                ]
            }
        )
    with transaction.atomic():
        note = _save_credentials(crawl, found)
        CrawlEvent.objects.create(
            crawl=crawl, kind=CrawlEvent.Kind.CREDENTIALS, user=user, detail=note
        )
        if crawl.state != CrawlState.DRAFT:
            CrawlControl(crawl).forget_session_on_commit()
    return sorted(credentials.origin_text(bound) for bound in found.origins)


@dataclasses.dataclass
class LiveChange:
    """What crawl_change_live did: each change as "field: old -> new" (`lines`, also on the
    trail), and for a change of patterns, what it did to the requests waiting."""

    lines: list[str] = dataclasses.field(default_factory=list)
    # Queued requests and retries dropped as no longer in scope while the change was made;
    # None when the patterns did not change.
    dropped: int | None = None
    dropping: bool = False  # a big queue: the rest is looked at in the background
    # Requests already claimed that no longer fit: on their way, they are fetched (their URLs).
    in_flight_urls: list[str] = dataclasses.field(default_factory=list)

    @property
    def in_flight(self) -> int:
        return len(self.in_flight_urls)


def crawl_change_live(*, crawl: Crawl, user, **changes: Any) -> LiveChange:
    """Change what a running or paused crawl may change (LIVE_FIELDS), checked as at
    creation. The frontier's limits change at once; slices read their threads and delay when
    they start (within CRAWLHUB_SLICE_SECONDS); more slices start at once. New include or
    exclude patterns are taken by every slice with its next claim, and the waiting requests
    that no longer fit are dropped, counted as cancelled (crawls/engine/scope_changes.py).
    Each change goes on the trail as "field: old -> new", with what was dropped."""
    unknown = set(changes) - set(LIVE_FIELDS)
    if unknown:
        raise ValidationError(
            {f: ["Only a draft can change this; a running crawl keeps it."] for f in unknown}
        )
    if not can_change_live(crawl):
        raise CrawlActionError(
            f"A {crawl.get_state_display().lower()} crawl's settings cannot be changed."
        )
    checked = _checked(crawl, changes)
    changed = {
        f: (getattr(crawl, f), getattr(checked, f))
        for f in LIVE_FIELDS
        if getattr(crawl, f) != getattr(checked, f)
    }
    if not changed:
        return LiveChange()
    more_slices = checked.slices - crawl.slices
    for name, (_old, new) in changed.items():
        setattr(crawl, name, new)
    control = CrawlControl(crawl)
    control.configure()
    done = LiveChange(
        lines=[f"{_label(f)}: {_shown(old)} -> {_shown(new)}" for f, (old, new) in changed.items()]
    )
    # Saved before the slices hear of it: a slice reads the patterns when it does.
    with transaction.atomic():
        crawl.save(update_fields=list(changed))
    if set(changed) & set(SCOPE_FIELDS):
        done.lines.append(_rescope(control, done))
    with transaction.atomic():
        CrawlEvent.objects.create(
            crawl=crawl, kind=CrawlEvent.Kind.CHANGED, user=user, detail="; ".join(done.lines)
        )
        if more_slices > 0 and crawl.state == CrawlState.RUNNING:
            control.enqueue_slices(count=more_slices)
        control.announce(state_change=False)
    return done


def _rescope(control: CrawlControl, done: LiveChange) -> str:
    """The scope changed (saved): slices take it with their next claim; the queue and the
    retries are looked at, the first part now, the rest in a job. What happened, in words."""
    dropped = control.rescope()
    done.dropped, done.dropping = dropped.dropped, dropped.dropping
    done.in_flight_urls = dropped.in_flight_urls
    line = f"{done.dropped:,} queued request(s) dropped: they no longer fit"
    if done.dropping:
        line += " (so far: the rest of the queue is looked at in the background)"
    if done.in_flight:
        line += f"; {done.in_flight:,} already being fetched that no longer fit will finish"
    return line


def _checked(crawl: Crawl, changes: dict[str, Any]) -> Crawl:
    """A copy of the crawl with the changes, each checked as its field checks it at creation,
    and their sum too (threads x max bytes). ValidationError names every bad field."""
    checked = Crawl(**{f: getattr(crawl, f) for f in ("id", "channel", *CRAWL_OPTIONS)})
    errors: dict[str, list[str]] = {}
    for name, value in changes.items():
        field = Crawl._meta.get_field(name)
        if value in ("", None) and not field.null and name not in SCOPE_FIELDS:
            errors[name] = ["Give a value."]
            continue
        problem = value_problem(field, value)
        try:
            if problem:
                raise ValidationError(problem)
            if name in SCOPE_FIELDS:  # checked as at creation, with the same messages
                setattr(checked, name, clean_patterns(value, name))
                continue
            setattr(checked, name, field.clean(value, checked))
        except ValidationError as exc:
            errors[name] = exc.messages
    if not errors:
        try:
            checked.clean()
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    return checked


def _label(field: str) -> str:
    return Crawl._meta.get_field(field).verbose_name if field != "credentials" else field


def crawl_run_again(*, crawl: Crawl, user) -> Crawl:
    """A new draft with the crawl's settings (not its results). Its credentials come along,
    bound to the same origins, only for the crawl's owner (crawl_copy_credentials).
    A crawl that ran is the new one's baseline, as a schedule's previous run is: its pages say
    what changed since, and their validators make its requests conditional."""
    options = {f: getattr(crawl, f) for f in CRAWL_OPTIONS}
    with transaction.atomic():
        copy = crawl_create(
            user=user, name=crawl.name, seeds=crawl.seeds, channel=crawl.channel, **options
        )
        if crawl.state != CrawlState.DRAFT:
            copy.baseline = crawl
            copy.save(update_fields=["baseline"])
        note = crawl_copy_credentials(source=crawl, crawl=copy, user=user)
        CrawlEvent.objects.filter(crawl=copy, kind=CrawlEvent.Kind.CREATED).update(
            detail=", ".join([f"a copy of #{crawl.pk}", *filter(None, [note])])
        )
    return copy
