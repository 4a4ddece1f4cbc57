"""Alerts: each condition fires once per episode on a real crawl of a local site, is resolved
when it clears, and is told to webhooks and by e-mail through a real SMTP server.

The crawls are real (slices fetch a local site, counters in the session's Redis); the alert
pass's clock is moved instead of waited for: check(now=t0 + 3 min).
"""

from __future__ import annotations

import time
from datetime import timedelta
from urllib.parse import urlsplit

import django_rq
import pytest
from django.utils import timezone
from rq import SimpleWorker

from crawls import alert_checks, alerts, deliveries, services, webhooks
from crawls.engine.frontier import Frontier
from crawls.engine.slices import run_slice
from crawls.models import Alert, AlertMail, WebhookDelivery
from tests.support.crawling import make_crawl, start_site_crawl
from tests.support.sites import Request, Response, pages_site
from tests.support.smtp_server import SMTPServer

pytestmark = pytest.mark.django_db


def check(now):
    return alert_checks.check_alerts(now=now)


def links(paths: list[str]) -> str:
    return "".join(f'<a href="{path}">{path}</a>' for path in paths)


def error_site(make_site, *, good: int, bad: int):
    """A root linking `good` pages that answer and `bad` ones that answer 500."""
    pages = {f"/ok{n}": "<p>ok</p>" for n in range(good)}
    pages |= {f"/bad{n}": Response(status=500, body="down") for n in range(bad)}
    pages["/"] = links(list(pages))
    return make_site(pages_site(pages))


def crawl_once(crawl, name: str = "s") -> None:
    """One slice fetches what is queued; the crawl stays running (nobody finishes it)."""
    run_slice(crawl.pk, name, budget_seconds=10)
    crawl.refresh_from_db()
    assert crawl.state == "running"


# --- Conditions on real crawls ------------------------------------------------------------------


def test_an_error_rate_over_the_rule_fires_once_and_is_resolved_when_it_falls(user, make_site):
    site = error_site(make_site, good=3, bad=6)
    crawl = start_site_crawl(user, site, max_retries=0)
    rule = alerts.rule_create(user=user, crawl=crawl, kind="error_rate", percent=50, minutes=5)
    t0 = timezone.now()
    assert check(t0)["fired"] == 0  # the first sample: nothing done yet
    crawl_once(crawl)
    report = check(t0 + timedelta(seconds=30))
    assert report["fired"] == 1
    alert = Alert.objects.get()
    assert (alert.rule, alert.crawl, alert.kind, alert.resolved_at) == (
        rule,
        crawl,
        "error_rate",
        None,
    )
    assert alert.figures["errors"] == 6 and alert.figures["done"] == 10
    assert alert.figures["rate"] == 60.0
    assert alert.line.startswith(f"Error rate 60% on crawl #{crawl.pk} “t”: 6 of 10 requests")
    assert "(the rule: 50% in 5 min)" in alert.line
    assert alert.fired_at == t0 + timedelta(seconds=30)
    # Still over the rule a minute later: the same episode, not a second alert.
    assert check(t0 + timedelta(seconds=90))["fired"] == 0
    assert Alert.objects.count() == 1
    # Ten pages that answer, and the window past the errors: under the rule, resolved.
    services.crawl_add_seeds(
        crawl=crawl,
        urls=[f"{site.url}/ok{n}?again" for n in range(3)]
        + [f"{site.url}/fine{n}" for n in range(7)],
    )
    crawl_once(crawl, "s2")
    report = check(t0 + timedelta(minutes=7))
    assert report["resolved"] == 1 and report["fired"] == 0
    alert.refresh_from_db()
    assert alert.resolved_at == t0 + timedelta(minutes=7)
    assert alert.resolved_line == (
        f"Resolved on crawl #{crawl.pk} “t”: the error rate is under the rule's again."
    )


def test_an_error_rate_under_the_rule_or_on_too_few_requests_fires_nothing(user, make_site):
    site = error_site(make_site, good=8, bad=1)
    crawl = start_site_crawl(user, site, max_retries=0)
    alerts.rule_create(user=user, crawl=crawl, kind="error_rate", percent=50, minutes=5)
    t0 = timezone.now()
    check(t0)
    crawl_once(crawl)
    assert check(t0 + timedelta(seconds=30))["fired"] == 0
    assert not Alert.objects.exists()


def test_no_progress_for_m_minutes_fires_once_and_is_resolved_by_progress(user, make_site):
    site = make_site(pages_site({"/": links(["/a", "/b"]), "/a": "a", "/b": "b", "/c": "c"}))
    crawl = start_site_crawl(user, site)
    alerts.rule_create(user=user, crawl=crawl, kind="no_progress", minutes=2)
    crawl_once(crawl)
    t0 = timezone.now()
    assert check(t0)["fired"] == 0
    # Not watched for two minutes yet: nothing can be said.
    assert check(t0 + timedelta(minutes=1))["fired"] == 0
    assert check(t0 + timedelta(minutes=2, seconds=5))["fired"] == 1
    alert = Alert.objects.get()
    assert alert.kind == "no_progress" and alert.figures["done"] == 3
    assert alert.line.startswith(f"No progress on crawl #{crawl.pk} “t” for 2 min: 3 requests done")
    assert check(t0 + timedelta(minutes=3))["fired"] == 0
    services.crawl_add_seeds(crawl=crawl, urls=[site.url + "/c"])
    crawl_once(crawl, "s2")
    assert check(t0 + timedelta(minutes=4))["resolved"] == 1
    alert.refresh_from_db()
    assert alert.resolved_at == t0 + timedelta(minutes=4)
    # A new episode, later, is a new alert.
    assert check(t0 + timedelta(minutes=7))["fired"] == 1
    assert Alert.objects.count() == 2


def test_a_host_parked_fires_once_per_host_and_is_resolved_when_released(user, make_site):
    home = pages_site({"/": links([f"/d{n}" for n in range(12)])})

    def handler(request: Request) -> Response:
        if request.path == "/":
            return home(request)
        time.sleep(0.05)  # failures over a little time, in more than one batch
        return Response(status=500)

    site = make_site(handler)
    host = urlsplit(site.url).netloc
    crawl = start_site_crawl(user, site, max_retries=0, threads=2)
    frontier = Frontier(crawl.pk)
    # Park a host after 5 failures in a row over 1 ms (the default waits two minutes).
    frontier.redis.hset(frontier.key("config"), "park_after_ms", 1)
    alerts.rule_create(user=user, crawl=crawl, kind="host_parked")
    crawl_once(crawl)
    t0 = timezone.now()
    assert check(t0)["fired"] == 1
    alert = Alert.objects.get()
    assert alert.subject == host and alert.kind == "host_parked"
    # The reason as the frontier gave it (how many failures it took depends on the batches).
    why = {row["host"]: row["why"] for row in frontier.host_rows()}[host]
    assert why.startswith("parked: none of its last ")
    assert alert.line == f"Host {host} parked on crawl #{crawl.pk} “t”: {why}."
    assert alert.figures == {"host": host, "why": why}
    assert check(t0 + timedelta(minutes=1))["fired"] == 0
    services.crawl_host_release(crawl=crawl, host=host, user=user)
    assert check(t0 + timedelta(minutes=2))["resolved"] == 1
    alert.refresh_from_db()
    assert f"host {host} is not parked any more" in alert.resolved_line


def test_a_cancelled_crawl_fires_ended_abnormally_once(user, make_site):
    site = make_site(pages_site({"/": links(["/a"]), "/a": "a"}))
    crawl = start_site_crawl(user, site)
    alerts.rule_create(user=user, crawl=crawl, kind="ended_badly")
    services.crawl_cancel(crawl=crawl, user=user)
    t0 = timezone.now()
    assert check(t0)["fired"] == 1
    alert = Alert.objects.get()
    crawl.refresh_from_db()
    assert alert.subject == "cancelled"
    assert alert.line == f"Crawl #{crawl.pk} “t” ended abnormally: {crawl.end_line}"
    assert "Cancelled by alice" in alert.line
    assert check(t0 + timedelta(minutes=1)) == {"crawls": 1, "fired": 0, "resolved": 0}
    assert Alert.objects.count() == 1 and Alert.objects.get().resolved_at is None


def test_a_stalled_crawl_fires_ended_abnormally_and_is_resolved_when_a_worker_fetches(
    user, make_site
):
    site = make_site(pages_site({"/": "home"}))
    crawl = start_site_crawl(user, site)  # its slices are queued; no worker runs them
    alerts.rule_create(user=user, crawl=crawl, kind="ended_badly")
    t0 = timezone.now()
    assert check(t0)["fired"] == 0
    assert check(t0 + timedelta(seconds=61))["fired"] == 1
    alert = Alert.objects.get()
    assert alert.subject == "stalled"
    assert alert.line.startswith(f"Crawl #{crawl.pk} “t” stalled: 1 requests wait and no worker")
    assert check(t0 + timedelta(seconds=90))["fired"] == 0
    crawl_once(crawl)
    assert check(t0 + timedelta(seconds=120))["resolved"] == 1


def test_a_channel_rule_watches_every_crawl_of_the_channel(user, staff, make_site):
    site = make_site(pages_site({"/": "home"}))
    first, second = start_site_crawl(user, site), start_site_crawl(user, site)
    alerts.rule_create(user=staff, channel=first.channel, kind="ended_badly")
    services.crawl_cancel(crawl=first, user=user)
    services.crawl_cancel(crawl=second, user=user)
    assert check(timezone.now())["fired"] == 2
    assert {a.crawl_id for a in Alert.objects.all()} == {first.pk, second.pk}


def test_an_open_alert_is_resolved_when_its_crawl_ends(user, make_site):
    site = make_site(pages_site({"/": "home"}))
    crawl = start_site_crawl(user, site)
    alerts.rule_create(user=user, crawl=crawl, kind="no_progress", minutes=1)
    crawl_once(crawl)
    t0 = timezone.now()
    check(t0)
    assert check(t0 + timedelta(minutes=2))["fired"] == 1
    services.crawl_cancel(crawl=crawl, user=user)
    assert check(t0 + timedelta(minutes=3))["resolved"] == 1
    assert "the crawl ended. Cancelled by alice" in Alert.objects.get().resolved_line


# --- Telling: webhooks and e-mail -----------------------------------------------------------


class Receiver:
    """A local endpoint that keeps each POST and whether its signature is right."""

    def __init__(self, make_site) -> None:
        self.secret = ""
        self.received: list[tuple[Request, bool]] = []
        self.site = make_site(self.handle)
        self.url = self.site.url + "/hook"

    def handle(self, request: Request) -> Response:
        valid = webhooks.verify_signature(
            self.secret, request.body, request.headers.get("X-Crawlhub-Signature")
        )
        self.received.append((request, valid))
        return Response(status=200, body="ok", content_type="text/plain")


def use_smtp(settings, port: int) -> None:
    """Django's SMTP backend to the local server (pytest-django's default is locmem)."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port


def run_control_jobs() -> None:
    """What `up`'s control worker does with the queued deliveries and e-mails."""
    queue = django_rq.get_queue("control")
    SimpleWorker([queue], connection=queue.connection).work(burst=True)


@pytest.mark.django_db(transaction=True)
def test_fired_and_resolved_are_posted_to_webhooks_and_mailed_through_smtp(
    user, make_site, settings
):
    receiver = Receiver(make_site)
    site = make_site(pages_site({"/": links(["/a"]), "/a": "a", "/b": "b"}))
    crawl = start_site_crawl(user, site)
    hook, receiver.secret = webhooks.webhook_create(
        user=user, url=receiver.url, events=["alert"], crawl=crawl
    )
    # Another webhook that wants only the end of crawls: told nothing of alerts.
    webhooks.webhook_create(user=user, url=receiver.url + "/ends", events=["finished"], crawl=crawl)
    alerts.rule_create(
        user=user,
        crawl=crawl,
        kind="no_progress",
        minutes=1,
        emails=["ops@example.com", "oncall@example.org"],
    )
    crawl_once(crawl)
    with SMTPServer() as smtp:
        use_smtp(settings, smtp.port)
        t0 = timezone.now()
        check(t0)
        check(t0 + timedelta(minutes=1, seconds=1))
        run_control_jobs()
        [mail] = smtp.wait_for(1)
        services.crawl_add_seeds(crawl=crawl, urls=[site.url + "/b"])
        crawl_once(crawl, "s2")
        check(t0 + timedelta(minutes=2))
        run_control_jobs()
        received = smtp.wait_for(2)
    alert = Alert.objects.get()
    assert mail.recipients == ["ops@example.com", "oncall@example.org"]
    assert mail.subject == f"[crawlhub] Alert: No progress for 1 min on crawl #{crawl.pk} t"
    assert (
        alert.line in mail.body
        and f"Fired at: {t0 + timedelta(minutes=1, seconds=1):%Y-%m-%dT%H:%M:%S}" in mail.body
    )
    assert f"/crawls/{crawl.pk}/" in mail.body and "done: 2" in mail.body
    resolved = received[1]
    assert resolved.subject.startswith("[crawlhub] Resolved: No progress for 1 min on crawl")
    assert alert.resolved_line in resolved.body
    assert [entry["error"] for entry in alert.mail_log] == ["", ""]
    assert [entry["notice"] for entry in alert.mail_log] == ["fired", "resolved"]
    # The webhook got both notices, signed, as deliveries of the "alert" event.
    assert [valid for _, valid in receiver.received] == [True, True]
    events = [request.headers["X-Crawlhub-Event"] for request, _ in receiver.received]
    assert events == ["alert.fired", "alert.resolved"]
    deliveries = WebhookDelivery.objects.filter(webhook=hook).order_by("pk")
    assert [(d.event, d.status) for d in deliveries] == [("alert", "delivered")] * 2
    payload = deliveries[0].payload
    assert payload["alert"]["id"] == alert.pk and payload["alert"]["kind"] == "no_progress"
    assert payload["alert"]["line"] == alert.line and payload["crawl"]["id"] == crawl.pk
    assert payload["alert"]["figures"]["minutes"] == 1


def test_an_smtp_server_that_is_down_is_logged_on_the_alert(user, make_site, settings):
    site = make_site(pages_site({"/": "home"}))
    crawl = start_site_crawl(user, site)
    rule = alerts.rule_create(user=user, crawl=crawl, kind="ended_badly", emails=["a@example.com"])
    services.crawl_cancel(crawl=crawl, user=user)
    check(timezone.now())
    with SMTPServer() as smtp:
        port = smtp.port
    use_smtp(settings, port)  # nobody listens there now
    alert = Alert.objects.get(rule=rule)
    [mail] = alert.mails.all()
    assert alert_checks.send_mail(mail.pk) == "pending"  # tried again later (below)
    alert.refresh_from_db()
    assert alert.mail_log[0]["to"] == ["a@example.com"]
    assert alert.mail_log[0]["error"].startswith("ConnectionRefusedError")


def scheduled_mail_jobs() -> list[tuple]:
    """The arguments of the alert e-mail attempts waiting in RQ's scheduled registry."""
    queue = django_rq.get_queue("control")
    jobs = [queue.fetch_job(job_id) for job_id in queue.scheduled_job_registry.get_job_ids()]
    return [job.args for job in jobs if job and job.func_name.endswith(".send_mail_job")]


@pytest.mark.django_db(transaction=True)
def test_an_email_the_server_refuses_is_tried_again_as_webhooks_are_and_sent_once(
    user, make_site, settings
):
    site = make_site(pages_site({"/": "home"}))
    crawl = start_site_crawl(user, site)
    rule = alerts.rule_create(user=user, crawl=crawl, kind="ended_badly", emails=["a@example.com"])
    services.crawl_cancel(crawl=crawl, user=user)
    with SMTPServer(refuse=1) as smtp:
        use_smtp(settings, smtp.port)
        check(timezone.now())
        run_control_jobs()  # the first attempt, as `up`'s control worker makes it: refused
        [mail] = AlertMail.objects.filter(alert__rule=rule)
        assert (mail.status, mail.attempts) == ("pending", 1)
        assert mail.error.startswith("SMTPConnectError: (421"), mail.error
        # The next try waits in RQ's scheduler, after the webhooks' first backoff.
        tried = timezone.now()
        wait = (mail.next_attempt_at - tried).total_seconds()
        assert deliveries.BACKOFF[0] - 5 < wait <= deliveries.BACKOFF[0], wait
        assert scheduled_mail_jobs() == [(mail.pk,)]
        # Not due yet: nothing is sent.
        assert alert_checks.send_mail(mail.pk, now=tried) == "skipped"
        # Its time comes: sent, once; later attempts and the sweep find nothing to do.
        assert alert_checks.send_mail(mail.pk, now=mail.next_attempt_at) == "delivered"
        later = tried + timedelta(hours=1)
        assert alert_checks.send_mail(mail.pk, now=later) == "skipped"
        assert alert_checks.send_overdue_mail(now=later) == 0
        run_control_jobs()
        [received] = smtp.wait_for(1)
        time.sleep(0.3)
        assert len(smtp.received) == 1
    assert received.recipients == ["a@example.com"]
    assert received.subject.startswith("[crawlhub] Alert: Ended abnormally")
    mail.refresh_from_db()
    assert (mail.status, mail.attempts, mail.error) == ("delivered", 2, "")
    alert = mail.alert
    refused, sent = alert.mail_log
    assert refused["error"].startswith("SMTPConnectError: (421")
    assert f"(attempt 1 of {deliveries.MAX_ATTEMPTS}; tried again at " in refused["error"]
    assert (sent["error"], sent["to"], sent["notice"]) == ("", ["a@example.com"], "fired")


@pytest.mark.django_db(transaction=True)
def test_the_sweep_sends_an_email_whose_retry_the_scheduler_missed(user, make_site, settings):
    site = make_site(pages_site({"/": "home"}))
    crawl = start_site_crawl(user, site)
    rule = alerts.rule_create(user=user, crawl=crawl, kind="ended_badly", emails=["a@example.com"])
    services.crawl_cancel(crawl=crawl, user=user)
    check(timezone.now())
    [mail] = AlertMail.objects.filter(alert__rule=rule)
    AlertMail.objects.filter(pk=mail.pk).update(
        attempts=1, next_attempt_at=timezone.now() - timedelta(minutes=5)
    )
    queue = django_rq.get_queue("control")
    queue.empty()
    with SMTPServer() as smtp:
        use_smtp(settings, smtp.port)
        assert alert_checks.send_overdue_mail() == 1
        run_control_jobs()
        [received] = smtp.wait_for(1)
    assert received.recipients == ["a@example.com"]
    mail.refresh_from_db()
    assert (mail.status, mail.attempts) == ("delivered", 2)


def test_an_email_with_no_mail_server_set_is_not_tried_again(user, make_site, settings):
    site = make_site(pages_site({"/": "home"}))
    crawl = start_site_crawl(user, site)
    alerts.rule_create(user=user, crawl=crawl, kind="ended_badly", emails=["a@example.com"])
    services.crawl_cancel(crawl=crawl, user=user)
    check(timezone.now())
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = ""
    [mail] = AlertMail.objects.all()
    # Trying again cannot help until someone sets it: given up at once, and said why.
    assert alert_checks.send_mail(mail.pk) == "failed"
    assert scheduled_mail_jobs() == []
    mail.alert.refresh_from_db()
    assert mail.alert.mail_log[0]["error"] == "not sent: no EMAIL_HOST is set"


@pytest.mark.django_db(transaction=True)
def test_one_pass_of_the_checks_runs_at_a_time(user):
    alerts.rule_create(user=user, crawl=make_crawl(user), kind="ended_badly")
    assert alert_checks.check_alerts_job() == {"crawls": 0, "fired": 0, "resolved": 0}
    # The lock the first pass took is held until it expires: a pass started meanwhile skips.
    assert alert_checks.check_alerts_job() == {"skipped": "another pass is running"}
