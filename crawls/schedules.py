"""Scheduled crawls: a template crawl re-run on a cron expression.

Each run is a new crawl copied from the template (channel, seeds, every option; its credentials
only for a schedule its owner made), linked to its schedule, created and started through
crawls/services/ like any other crawl. The periodic job run_due_schedules (registered in
crawlhub/cron.py, run by RQ's cron scheduler) starts every due schedule once: a conditional
UPDATE on next_run_at claims each run, so two schedulers running at once never start one
twice. Cron expressions are read in settings.TIME_ZONE.
"""

from __future__ import annotations

import logging
from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import CroniterError, croniter
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import close_old_connections, transaction
from django.db.models import Count, F
from django.utils import timezone

from crawlhub.redis.connections import REDIS_ERRORS
from crawls import services
from crawls.models import CRAWL_OPTIONS, Crawl, CrawlEvent, CrawlSchedule, CrawlState
from crawls.services import visible_crawls

log = logging.getLogger(__name__)

# A run is named "<template name> <time>"; the name column holds 200 characters.
RUN_NAME_TIME = "%Y-%m-%d %H:%M"
CRON_MAX_LENGTH = CrawlSchedule._meta.get_field("cron").max_length


def clean_cron(expression: str) -> str:
    """The expression with its spaces normalised, if it is one that has a next run."""
    if not isinstance(expression, str):
        raise ValidationError({"cron": ["Give the cron expression as text, e.g. '0 3 * * *'."]})
    expression = " ".join(expression.split())
    if len(expression) > CRON_MAX_LENGTH:
        raise ValidationError(
            {"cron": [f"At most {CRON_MAX_LENGTH} characters (this one has {len(expression)})."]}
        )
    fields = expression.split(" ")
    if expression.startswith("@"):
        ok = croniter.is_valid(expression)
    else:
        ok = len(fields) == 5 and croniter.is_valid(expression)
    if not ok:
        raise ValidationError(
            {
                "cron": [
                    f"{expression!r} is not a cron expression: give five fields, minute hour "
                    "day-of-month month day-of-week (e.g. '0 3 * * *' for 03:00 every day), or "
                    "@hourly, @daily, @weekly, @monthly."
                ]
            }
        )
    try:
        next_run(expression, timezone.now())
    except CroniterError:  # valid fields that no date has, such as the 31st of February
        raise ValidationError(
            {
                "cron": [
                    f"{expression!r} never runs: no date has that day in that month "
                    "(e.g. '0 0 30 2 *', the 30th of February)."
                ]
            }
        ) from None
    return expression


def next_run(expression: str, after: datetime) -> datetime:
    """The first time strictly after `after` that matches, in settings.TIME_ZONE."""
    local = after.astimezone(ZoneInfo(settings.TIME_ZONE))
    return croniter(expression, local).get_next(datetime)


def upcoming(schedule: CrawlSchedule, count: int = 5) -> list[datetime]:
    if not schedule.enabled or schedule.next_run_at is None:
        return []
    times = [schedule.next_run_at]
    while len(times) < count:
        times.append(next_run(schedule.cron, times[-1]))
    return times


def schedules_visible_to(user):
    """The schedules of the crawls this user may see (staff: all); any other answers 404."""
    return CrawlSchedule.objects.select_related("template", "created_by").filter(
        template__in=visible_crawls(user)
    )


def schedules_listed(user):
    """The schedules this user may see with their run counts, soonest run first (an aggregate
    drops Meta.ordering, so the order is given here)."""
    return (
        schedules_visible_to(user)
        .annotate(run_count=Count("runs"))
        .order_by(F("next_run_at").asc(nulls_last=True), "id")
    )


def template_choices(user):
    """The crawls this user may schedule: ones they can see that are not runs themselves."""
    return visible_crawls(user).filter(schedule=None)


def runs_credentials(schedule: CrawlSchedule) -> str:
    """What the schedule's runs carry of the template's credentials, in words for its page."""
    shown = services.credentials_shown(schedule.template)
    if not shown:
        return ""
    if schedule.template.is_owned_by(schedule.created_by):
        return (
            "Each run carries the template's credentials, sent only to "
            f"{', '.join(shown['origins'])}, the origins they were entered for."
        )
    return (
        "Runs carry none of the template's credentials: only the schedules its owner makes "
        "do, and this one was made by someone else."
    )


def schedule_create(
    *, user, template: Crawl, cron: str, enabled: bool = True, now: datetime | None = None
) -> CrawlSchedule:
    cron = clean_cron(cron)
    now = now or timezone.now()
    return CrawlSchedule.objects.create(
        template=template,
        cron=cron,
        enabled=enabled,
        created_by=user,
        next_run_at=next_run(cron, now) if enabled else None,
    )


def schedule_update(
    *,
    schedule: CrawlSchedule,
    cron: str | None = None,
    enabled: bool | None = None,
    now: datetime | None = None,
) -> CrawlSchedule:
    now = now or timezone.now()
    if cron is not None:
        schedule.cron = clean_cron(cron)
    if enabled is not None:
        schedule.enabled = enabled
    schedule.next_run_at = next_run(schedule.cron, now) if schedule.enabled else None
    schedule.save(update_fields=["cron", "enabled", "next_run_at"])
    return schedule


def schedule_delete(*, schedule: CrawlSchedule) -> None:
    """The runs stay (their link is cleared); the template stays."""
    schedule.delete()


def schedule_run(*, schedule: CrawlSchedule, now: datetime | None = None, user=None) -> Crawl:
    """A new crawl copied from the template, linked to the schedule, and started. It belongs
    to whoever made the schedule, and carries the template's credentials only when that is
    the template's owner (services.crawl_copy_credentials), whoever pressed "Run now"."""
    now = now or timezone.now()
    template = schedule.template
    stamp = timezone.localtime(now).strftime(RUN_NAME_TIME)
    options = {name: getattr(template, name) for name in CRAWL_OPTIONS}
    with transaction.atomic():
        crawl = services.crawl_create(
            user=schedule.created_by,
            name=f"{template.name[:180]} {stamp}",
            seeds=template.seeds,
            channel=template.channel,
            **options,
        )
        # The run is the schedule maker's: the template's credentials only if that is its owner.
        note = services.crawl_copy_credentials(
            source=template, crawl=crawl, user=schedule.created_by
        )
        crawl.events.filter(kind=CrawlEvent.Kind.CREATED).update(
            detail=", ".join(
                [f"a run of schedule #{schedule.pk} of #{template.pk}", *filter(None, [note])]
            )
        )
        crawl.schedule = schedule
        # Compared with the run before it: its pages say what changed since, and their
        # validators make this run's requests conditional.
        finished = schedule.runs.filter(state=CrawlState.FINISHED).exclude(pk=crawl.pk)
        crawl.baseline = finished.order_by("-pk").first()
        crawl.save(update_fields=["schedule", "baseline"])
    services.crawl_start(crawl=crawl, user=user or schedule.created_by)
    return crawl


def _claim(schedule: CrawlSchedule, now: datetime) -> bool:
    """Move next_run_at on, if nobody else did since we read it: then this run is ours."""
    return bool(
        CrawlSchedule.objects.filter(
            pk=schedule.pk, enabled=True, next_run_at=schedule.next_run_at
        ).update(next_run_at=next_run(schedule.cron, now), last_run_at=now)
    )


def run_due_schedules(now: datetime | None = None) -> dict:
    """Start every enabled schedule whose time has come, once. The periodic job's step."""
    now = now or timezone.now()
    report = {"started": [], "errors": 0}
    due = CrawlSchedule.objects.select_related("template__channel", "created_by").filter(
        enabled=True, next_run_at__lte=now
    )
    for schedule in due:
        if not _claim(schedule, now):
            continue
        try:
            crawl = schedule_run(schedule=schedule, now=now)
        except (ValidationError, services.CrawlActionError, *REDIS_ERRORS) as exc:
            text = "; ".join(getattr(exc, "messages", None) or [str(exc)])
            CrawlSchedule.objects.filter(pk=schedule.pk).update(
                last_error=text[:2000]  # when: last_run_at, set by _claim
            )
            log.warning("schedule %s: run not started: %s", schedule.pk, text)
            report["errors"] += 1
            continue
        CrawlSchedule.objects.filter(pk=schedule.pk).update(last_error="")
        report["started"].append(crawl.pk)
    if report["started"] or report["errors"]:
        log.info("schedules: %s", report)
    return report


def run_due_schedules_job() -> dict:
    """The periodic RQ job (crawlhub/cron.py)."""
    close_old_connections()
    try:
        return run_due_schedules()
    finally:
        close_old_connections()
