"""Alert checks: every CRAWLHUB_ALERTS_SECONDS the cron process (crawlhub/cron.py) reads the
counters crawlhub already keeps in Redis for each watched crawl, in one round trip for them
all, and fires or resolves alerts. Nothing here runs on the crawl path: a page costs what it
cost before.

Each pass appends one sample (its time, responses, errors) to a crawl's alert series
(frontier.alert_views, record_alert_samples), so that a window of M minutes is the difference
between the newest sample and the newest one at least M minutes older. The pass's clock is its
argument: tests move it rather than wait.

An alert is an episode: it fires once when its condition begins to hold (an Alert row, a
webhook delivery of the "alert" event, an e-mail), and is resolved once when the condition is
seen to be false (the same, with "resolved"). A condition that cannot be told (too few
requests in the window, a crawl not watched for M minutes yet) changes nothing. A crawl that
ended is not watched any more: its open alerts are resolved with the line that says why it
ended, but the one that says it ended badly.
"""

from __future__ import annotations

import contextlib
import logging
import smtplib
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone

from crawlhub.dates import machine
from crawls import deliveries, webhooks
from crawls.alerts import MAX_MINUTES
from crawls.engine.frontier_alerts import (
    alert_views,
    alerts_lock,
    forget_alert_samples,
    record_alert_samples,
)
from crawls.engine.live import waiting_for_worker
from crawls.models import (
    Alert,
    AlertKind,
    AlertMail,
    AlertRule,
    Crawl,
    CrawlState,
    DeliveryEvent,
    EndReason,
)

log = logging.getLogger(__name__)

# An error rate is told from this many requests done in its window at least.
MIN_REQUESTS = 5
# A crawl waiting for a worker this long with no progress is stalled (between two slices it
# waits a moment).
STALL_SECONDS = 60
# Crawls that ended this recently are looked at for "ended abnormally".
ENDED_LOOKBACK = timedelta(days=1)
FIRED, RESOLVED = "fired", "resolved"


# --- One pass ---------------------------------------------------------------------------------


def check_alerts(*, now: datetime | None = None) -> dict:
    """Evaluate every active rule against the crawls it watches; fire and resolve episodes.
    Returns counts of what it did."""
    now = now or timezone.now()
    report = {"crawls": 0, "fired": 0, "resolved": 0}
    rules = list(AlertRule.objects.filter(active=True))
    if not rules:
        return report
    by_crawl, by_channel = defaultdict(list), defaultdict(list)
    for rule in rules:
        (by_crawl[rule.crawl_id] if rule.crawl_id else by_channel[rule.channel_id]).append(rule)
    watched = (
        Q(pk__in=list(by_crawl))
        | Q(channel_id__in=list(by_channel))
        | Q(schedule__template_id__in=list(by_crawl))
    )
    live = [CrawlState.RUNNING, CrawlState.PAUSING, CrawlState.PAUSED]
    ended = [CrawlState.CANCELLED, CrawlState.FAILED]
    crawls = list(
        Crawl.objects.filter(watched)
        .filter(Q(state__in=live) | Q(state__in=ended, finished_at__gte=now - ENDED_LOOKBACK))
        .select_related("schedule", "channel")
    )

    def rules_of(crawl: Crawl) -> list[AlertRule]:
        template = crawl.schedule.template_id if crawl.schedule_id else None
        return by_crawl[crawl.pk] + by_channel[crawl.channel_id] + by_crawl.get(template, [])

    running = [crawl for crawl in crawls if crawl.state == CrawlState.RUNNING]
    forget_alert_samples(
        [c.pk for c in crawls if c.state in (CrawlState.PAUSING, CrawlState.PAUSED)]
    )
    views = alert_views([crawl.pk for crawl in running]) if running else {}
    at = int(now.timestamp())
    samples = {}
    for crawl in running:
        stats = views[crawl.pk]["stats"]
        sample = (at, int(stats["responses"]), int(stats["errors"]))
        views[crawl.pk]["samples"] = [*(s for s in views[crawl.pk]["samples"] if s[0] < at), sample]
        samples[crawl.pk] = sample
    if samples:
        record_alert_samples(samples, keep_from=at - MAX_MINUTES * 60)
    for crawl in crawls:
        report["crawls"] += 1
        for rule in rules_of(crawl):
            if crawl.state == CrawlState.RUNNING:
                holding, clear = _findings(rule, crawl, views[crawl.pk], now)
            elif crawl.is_over() and rule.kind == AlertKind.ENDED_BADLY:
                holding, clear = {crawl.end_reason: _ended(crawl)}, set()
            else:
                continue
            fired, resolved = _settle(rule, crawl, holding, clear, now)
            report["fired"] += fired
            report["resolved"] += resolved
    report["resolved"] += _resolve_ended(now)
    if report["fired"] or report["resolved"]:
        log.info("alerts: %s", report)
    return report


def check_alerts_job() -> dict:
    """The periodic RQ job (crawlhub/cron.py): one pass at a time."""
    if not alerts_lock(ttl=max(60, settings.CRAWLHUB_ALERTS_SECONDS * 2)):
        return {"skipped": "another pass is running"}
    close_old_connections()
    try:
        return check_alerts()
    finally:
        close_old_connections()


# --- Conditions -------------------------------------------------------------------------------


Finding = tuple[str, dict]  # the line, the figures


def _window(samples: list[tuple], seconds: int) -> tuple | None:
    """The newest sample at least `seconds` older than the last one, or None."""
    start = samples[-1][0] - seconds
    older = [sample for sample in samples[:-1] if sample[0] <= start]
    return older[-1] if older else None


def _since(sample: tuple) -> str:
    return machine(datetime.fromtimestamp(sample[0], tz=UTC))


def _findings(rule: AlertRule, crawl: Crawl, view: dict, now: datetime) -> tuple[dict, set]:
    """(subject -> finding, for each episode that holds now; subjects known to hold no more)."""
    samples = view["samples"]
    name = f"crawl #{crawl.pk} “{crawl.name}”"
    if rule.kind == AlertKind.ERROR_RATE:
        start = _window(samples, rule.minutes * 60) or (samples[0] if len(samples) > 1 else None)
        if start is None:
            return {}, set()
        _, responses, errors = samples[-1]
        errors, done = errors - start[2], (responses - start[1]) + (errors - start[2])
        if done < MIN_REQUESTS:
            return {}, set()
        rate = round(100 * errors / done, 1)
        if rate < rule.percent:
            return {}, {""}
        figures = {
            "rate": rate,
            "errors": errors,
            "done": done,
            "percent": rule.percent,
            "minutes": rule.minutes,
            "since": _since(start),
        }
        return {
            "": (
                f"Error rate {rate:g}% on {name}: {errors:,} of {done:,} requests done since "
                f"{figures['since']} got no answer "
                f"(the rule: {rule.percent}% in {rule.minutes} min).",
                figures,
            )
        }, set()
    if rule.kind == AlertKind.NO_PROGRESS:
        start = _window(samples, rule.minutes * 60)
        if start is None:
            return {}, set()
        done = samples[-1][1] + samples[-1][2]
        if done > start[1] + start[2]:
            return {}, {""}
        stats = view["stats"]
        waiting, flying = stats["queued"] + stats["delayed"], stats["in_flight"]
        figures = {
            "done": done,
            "minutes": rule.minutes,
            "since": _since(start),
            "queued": waiting,
            "in_flight": flying,
        }
        return {
            "": (
                f"No progress on {name} for {rule.minutes} min: {done:,} requests done since "
                f"{figures['since']}, {waiting:,} waiting, {flying:,} in flight.",
                figures,
            )
        }, set()
    if rule.kind == AlertKind.HOST_PARKED:
        holding = {
            host: (f"Host {host} parked on {name}: {why}.", {"host": host, "why": why})
            for host, why in sorted(view["parked"].items())
        }
        return holding, {"*"}  # every open episode whose host is not parked now
    # ENDED_BADLY, while it runs: stalled, waiting for a worker and making no progress.
    stats = view["stats"]
    if not waiting_for_worker(crawl, stats, view["slices_running"]):
        return {}, {"stalled"}
    start = _window(samples, STALL_SECONDS)
    if start is None or samples[-1][1:] != start[1:]:
        return {}, set()
    waiting = stats["queued"] + stats["delayed"]
    return {
        "stalled": (
            f"Crawl #{crawl.pk} “{crawl.name}” stalled: {waiting:,} requests wait and no "
            f"worker has fetched one since {_since(start)}.",
            {"waiting": waiting, "since": _since(start)},
        )
    }, set()


def _ended(crawl: Crawl) -> Finding:
    return (
        f"Crawl #{crawl.pk} “{crawl.name}” ended abnormally: {crawl.end_line}",
        {
            "end_reason": crawl.end_reason,
            "finished_at": machine(crawl.finished_at),
            "stats": {k: crawl.stats.get(k, 0) for k in ("requests", "responses", "errors")},
        },
    )


# --- Episodes ---------------------------------------------------------------------------------


def _settle(
    rule: AlertRule, crawl: Crawl, holding: dict[str, Finding], clear: set[str], now: datetime
) -> tuple[int, int]:
    """Fire what holds and has no open episode; resolve the open episodes that cleared. An
    ended crawl's "ended abnormally" fires once ever (no episode of it is resolved)."""
    if rule.kind == AlertKind.ENDED_BADLY and crawl.is_over():
        if crawl.end_reason not in (EndReason.CANCELLED, EndReason.FAILED):
            return 0, 0
        if Alert.objects.filter(rule=rule, crawl=crawl, subject=crawl.end_reason).exists():
            return 0, 0
    open_ones = {
        a.subject: a for a in Alert.objects.filter(rule=rule, crawl=crawl, resolved_at=None)
    }
    fired = resolved = 0
    for subject, (line, figures) in holding.items():
        if subject in open_ones:
            continue
        try:
            with transaction.atomic():
                alert = Alert.objects.create(
                    rule=rule,
                    crawl=crawl,
                    kind=rule.kind,
                    subject=subject,
                    line=line[:500],
                    figures=figures,
                    fired_at=now,
                )
                _notify(alert, FIRED)
        except IntegrityError:
            continue  # another pass fired it meanwhile
        fired += 1
    for subject, alert in open_ones.items():
        if subject in holding or not (subject in clear or "*" in clear):
            continue
        resolved += _resolve(alert, now, _cleared_line(alert, crawl))
    return fired, resolved


def _cleared_line(alert: Alert, crawl: Crawl) -> str:
    what = {
        AlertKind.ERROR_RATE: "the error rate is under the rule's again",
        AlertKind.NO_PROGRESS: "it makes progress again",
        AlertKind.HOST_PARKED: f"host {alert.subject} is not parked any more",
        AlertKind.ENDED_BADLY: "a worker fetches its requests again",
    }[alert.kind]
    return f"Resolved on crawl #{crawl.pk} “{crawl.name}”: {what}."


def _resolve(alert: Alert, now: datetime, line: str) -> int:
    with transaction.atomic():
        if not Alert.objects.filter(pk=alert.pk, resolved_at=None).update(
            resolved_at=now, resolved_line=line[:500]
        ):
            return 0
        alert.resolved_at, alert.resolved_line = now, line[:500]
        _notify(alert, RESOLVED)
    return 1


def _resolve_ended(now: datetime) -> int:
    """Open episodes of crawls no longer running (ended, paused) or of rules switched off or
    deleted: resolved, with the reason. An ended crawl's "ended abnormally" stays as it is."""
    stale = (
        Alert.objects.filter(resolved_at=None)
        .exclude(crawl__state=CrawlState.RUNNING, rule__active=True)
        .exclude(kind=AlertKind.ENDED_BADLY, subject__in=[EndReason.CANCELLED, EndReason.FAILED])
        .select_related("crawl", "rule")
    )
    resolved = 0
    for alert in stale:
        crawl = alert.crawl
        if crawl.is_over():
            why = f"the crawl ended. {crawl.end_line}"
        elif alert.rule is None or not alert.rule.active:
            why = "its rule was switched off or deleted."
        else:
            why = f"the crawl is {crawl.get_state_display().lower()}."
        resolved += _resolve(alert, now, f"Resolved on crawl #{crawl.pk} “{crawl.name}”: {why}")
    return resolved


# --- Telling ----------------------------------------------------------------------------------


def payload_for(alert: Alert, notice: str, delivery_id: int | None = None) -> dict:
    """What a webhook delivery of an alert sends (and what the e-mail says, in words)."""
    crawl = alert.crawl
    return {
        "event": f"alert.{notice}",
        "delivery": delivery_id,
        "alert": {
            "id": alert.pk,
            "rule": alert.rule_id,
            "kind": alert.kind,
            "condition": alert.rule.condition if alert.rule else alert.get_kind_display(),
            "subject": alert.subject,
            "line": alert.resolved_line if notice == RESOLVED else alert.line,
            "figures": alert.figures,
            "fired_at": machine(alert.fired_at),
            "resolved_at": machine(alert.resolved_at),
        },
        "crawl": {
            "id": crawl.pk,
            "name": crawl.name,
            "state": crawl.state,
            "channel": crawl.channel.slug,
            "page": crawl.get_absolute_url(),
            "api": f"/api/crawls/{crawl.pk}/",
        },
    }


def _notify(alert: Alert, notice: str) -> None:
    """Inside the transaction that fired or resolved it: a delivery to each webhook that wants
    alerts, and an e-mail to the rule's addresses, both sent once it commits."""
    webhooks.send_event(
        alert.crawl,
        DeliveryEvent.ALERT,
        lambda delivery_id: payload_for(alert, notice, delivery_id),
    )
    if alert.rule is not None and alert.rule.emails:
        mail = AlertMail.objects.create(alert=alert, notice=notice, next_attempt_at=timezone.now())
        transaction.on_commit(lambda: enqueue_mail(mail.pk))


def enqueue_mail(mail_id: int, *, delay: float = 0) -> None:
    """Send an alert's e-mail (again) on the control queue, now or after `delay` seconds."""
    deliveries.enqueue(send_mail_job, mail_id, delay=delay, what=f"alert e-mail {mail_id}")


def mail_for(alert: Alert, notice: str) -> EmailMessage:
    """The e-mail of a notice: the subject says what and which crawl, the body the figures
    and when."""
    crawl = alert.crawl
    condition = alert.rule.condition if alert.rule else alert.get_kind_display()
    head = "Alert" if notice == FIRED else "Resolved"
    about = f" ({alert.subject})" if alert.subject else ""
    lines = [alert.line, ""]
    if notice == RESOLVED:
        lines = [alert.resolved_line, "", f"It fired: {alert.line}", ""]
    lines += [
        f"Crawl: #{crawl.pk} {crawl.name} ({crawl.get_state_display().lower()})",
        f"Condition: {condition}{about}",
        f"Fired at: {machine(alert.fired_at)}",
    ]
    if alert.resolved_at:
        lines.append(f"Resolved at: {machine(alert.resolved_at)}")
    lines += [f"{name}: {value}" for name, value in alert.figures.items()]
    lines += ["", f"The crawl's page: {crawl.get_absolute_url()}"]
    return EmailMessage(
        subject=f"[crawlhub] {head}: {condition}{about} on crawl #{crawl.pk} {crawl.name}"[:200],
        body="\n".join(lines) + "\n",
        to=list(alert.rule.emails if alert.rule else []),
    )


def send_mail(mail_id: int, *, now: datetime | None = None) -> str:
    """One attempt at an alert's e-mail (an AlertMail) through Django's mail settings, if it is
    due, tried again as webhook deliveries are (crawls/deliveries.py: BACKOFF, at most
    MAX_ATTEMPTS, never two attempts at once); each attempt is also logged on the alert.
    Returns the e-mail's status after the attempt, or "skipped"."""
    return deliveries.attempt(
        AlertMail,
        mail_id,
        _send,
        job=send_mail_job,
        what=f"alert e-mail {mail_id}",
        now=now,
        after=_log_attempt,
    )


def _send(mail: AlertMail) -> deliveries.Sent:
    alert = Alert.objects.select_related("rule", "crawl__channel").get(pk=mail.alert_id)
    if alert.rule is None or not alert.rule.emails:
        return deliveries.Sent(error="not sent: its rule has no addresses now", retry=False)
    message = mail_for(alert, mail.notice)
    to = {"to": message.to}
    if not settings.EMAIL_HOST and settings.EMAIL_BACKEND.endswith("smtp.EmailBackend"):
        # Trying again cannot help until someone sets it.
        return deliveries.Sent(error="not sent: no EMAIL_HOST is set", retry=False, entry=to)
    try:
        _send_once(message)
    except (smtplib.SMTPException, OSError) as exc:
        return deliveries.Sent(error=f"{type(exc).__name__}: {exc}"[:500], entry=to)
    return deliveries.Sent(entry=to)


def _send_once(message: EmailMessage) -> None:
    """Send on a connection of our own, so that a server that took the message and then failed
    to say goodbye (QUIT) does not count as a failure: it would be sent again."""
    connection = get_connection(timeout=settings.EMAIL_TIMEOUT or deliveries.TIMEOUT)
    connection.open()
    try:
        connection.send_messages([message])
    finally:
        with contextlib.suppress(smtplib.SMTPException, OSError):
            connection.close()


def send_mail_job(mail_id: int) -> str:
    close_old_connections()
    try:
        return send_mail(mail_id)
    finally:
        close_old_connections()


def send_overdue_mail(now: datetime | None = None) -> int:
    """The sweep, for the e-mails whose retry RQ's scheduler did not run in time."""
    return deliveries.overdue(AlertMail, send_mail_job, what="alert e-mail", now=now)


def send_overdue_mail_job() -> int:
    """The periodic RQ job (crawlhub/cron.py)."""
    close_old_connections()
    try:
        return send_overdue_mail()
    finally:
        close_old_connections()


def _log_attempt(mail: AlertMail, sent: deliveries.Sent) -> None:
    """The alert's history says each attempt: sent, or why not and whether it is tried again."""
    error = sent.error
    if error and mail.status == AlertMail.Status.PENDING:
        error += (
            f" (attempt {mail.attempts} of {deliveries.MAX_ATTEMPTS}; tried again at "
            f"{machine(mail.next_attempt_at)})"
        )
    elif error and sent.retry:
        error += f" (attempt {mail.attempts} of {deliveries.MAX_ATTEMPTS}: given up)"
    _log_mail(mail.alert_id, mail.notice, sent.entry.get("to", []), error)


def _log_mail(alert_id: int, notice: str, to: list[str], error: str) -> None:
    with transaction.atomic():
        alert = Alert.objects.select_for_update().filter(pk=alert_id).first()
        if alert is None:
            return
        entry = {"at": machine(timezone.now()), "notice": notice, "to": to, "error": error}
        alert.mail_log = [*alert.mail_log, entry]
        alert.save(update_fields=["mail_log"])
