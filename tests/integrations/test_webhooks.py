"""Webhooks: a signed JSON POST when a crawl ends, retried with backoff, every attempt logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import django_rq
import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from crawls import schedules, services, webhooks
from crawls.models import Channel, CrawlState, Webhook, WebhookDelivery
from tests.support import processes
from tests.support.crawling import ROOT, database_url, drive
from tests.support.sites import Request, Response, free_port, pages_site

pytestmark = pytest.mark.django_db
Status = WebhookDelivery.Status


class Receiver:
    """A local endpoint that checks each POST's signature, answering from a list of statuses."""

    def __init__(self, make_site, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.secret = ""
        self.received: list[tuple[Request, bool]] = []
        self.site = make_site(self.handle)
        self.url = self.site.url + "/hook"

    def handle(self, request: Request) -> Response:
        valid = webhooks.verify_signature(
            self.secret, request.body, request.headers.get("X-Crawlhub-Signature")
        )
        self.received.append((request, valid))
        status = self.statuses.pop(0) if self.statuses else 200
        return Response(status=status, body=f"answer {status}", content_type="text/plain")


def make_crawl(user, url="http://127.0.0.1:9/", **options):
    options.setdefault("obey_robots", False)
    return services.crawl_create(user=user, name="hooked", seeds=[url], **options)


def hook_on(receiver: Receiver, user, **target) -> Webhook:
    webhook, secret = webhooks.webhook_create(
        user=user, url=receiver.url, events=["finished", "failed", "cancelled"], **target
    )
    receiver.secret = secret
    return webhook


# --- Signatures -------------------------------------------------------------------------------


def test_a_signature_is_the_hmac_of_the_raw_body():
    body = b'{"event":"crawl.finished"}'
    header = webhooks.sign("s3cret", body)
    assert header.startswith("sha256=") and len(header) == 7 + 64
    assert webhooks.verify_signature("s3cret", body, header)
    assert not webhooks.verify_signature("other", body, header)
    assert not webhooks.verify_signature("s3cret", body + b" ", header)
    assert not webhooks.verify_signature("s3cret", body, header.replace("sha256=", "sha1="))
    assert not webhooks.verify_signature("s3cret", body, None)


# --- Managing webhooks ------------------------------------------------------------------------


def test_a_webhook_names_exactly_one_target_and_a_valid_url(user, staff):
    crawl = make_crawl(user)
    channel = Channel.default()
    with pytest.raises(ValidationError) as both:
        webhooks.webhook_create(
            user=staff, url="http://x.example/", events=["finished"], channel=channel, crawl=crawl
        )
    assert "channel" in both.value.message_dict
    with pytest.raises(ValidationError) as bad:
        webhooks.webhook_create(user=user, url="ftp://x.example/", events=["nope"], crawl=crawl)
    assert set(bad.value.message_dict) == {"url", "events"}
    with pytest.raises(PermissionDenied):
        webhooks.webhook_create(
            user=user, url="http://x.example/", events=["finished"], channel=channel
        )
    hook, secret = webhooks.webhook_create(
        user=user, url=" http://x.example/h ", events=["finished"], crawl=crawl
    )
    assert hook.url == "http://x.example/h" and hook.secret == secret
    assert secret.startswith("whsec_") and len(secret) > 30


def test_the_database_refuses_a_webhook_with_two_targets(user):
    from django.db import IntegrityError

    crawl = make_crawl(user)
    with pytest.raises(IntegrityError):
        Webhook.objects.create(url="http://x/", secret="s", channel=crawl.channel, crawl=crawl)


# --- Deliveries -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_cancelled_crawl_posts_a_signed_delivery_through_a_real_worker(user, make_site):
    receiver = Receiver(make_site)
    crawl = make_crawl(user)
    hook_on(receiver, user, crawl=crawl)
    services.crawl_start(crawl=crawl, user=user)
    services.crawl_cancel(crawl=crawl, user=user)  # autocommit: the event is sent at once
    delivery = WebhookDelivery.objects.get()
    assert (delivery.event, delivery.status) == ("cancelled", Status.PENDING)
    assert django_rq.get_queue("control").count >= 1
    env = {"DATABASE_URL": database_url()}
    processes.run(
        [sys.executable, "manage.py", "rqworker", "control", "--burst"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    delivery.refresh_from_db()
    assert delivery.status == Status.DELIVERED, delivery.error
    assert delivery.attempts == 1 and delivery.response_status == 200
    assert delivery.response_snippet == "answer 200"
    assert len(delivery.log) == 1 and delivery.log[0]["status_code"] == 200
    [(request, valid)] = receiver.received
    assert valid, "the signature checks out with the webhook's secret"
    assert request.method == "POST" and request.path == "/hook"
    assert request.headers["X-Crawlhub-Event"] == "crawl.cancelled"
    assert request.headers["X-Crawlhub-Delivery"] == str(delivery.pk)
    assert request.headers["Content-Type"] == "application/json"
    body = json.loads(request.body)
    assert body["event"] == "crawl.cancelled" and body["delivery"] == delivery.pk
    assert body["crawl"]["id"] == crawl.pk and body["crawl"]["state"] == "cancelled"


def test_a_finished_crawl_notifies_its_channels_webhooks_that_want_it(
    user, staff, make_site, django_capture_on_commit_callbacks
):
    site = make_site(pages_site({"/": "<title>home</title>"}))
    receiver = Receiver(make_site)
    crawl = make_crawl(user, site.url + "/")
    channel_hook = hook_on(receiver, staff, channel=crawl.channel)
    other = Channel.objects.create(slug="other", name="Other")
    webhooks.webhook_create(user=staff, url=receiver.url, events=["finished"], channel=other)
    webhooks.webhook_create(user=user, url=receiver.url, events=["cancelled"], crawl=crawl)
    inactive, _ = webhooks.webhook_create(
        user=user, url=receiver.url, events=["finished"], crawl=crawl
    )
    webhooks.webhook_update(webhook=inactive, active=False)
    services.crawl_start(crawl=crawl, user=user)
    with django_capture_on_commit_callbacks(execute=True):
        crawl = drive(crawl)
    assert crawl.state == CrawlState.FINISHED
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.webhook == channel_hook and delivery.event == "finished"
    assert delivery.payload["crawl"]["stats"]["responses"] == 1
    assert webhooks.deliver(delivery.pk) == Status.DELIVERED
    [(request, valid)] = receiver.received
    assert valid and request.headers["X-Crawlhub-Event"] == "crawl.finished"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_crawl_that_fetches_nothing_fails_and_posts_a_signed_failed_event(user, make_site):
    """The crawl runs on a real worker, ends FAILED (not one answer, only errors), and the same
    worker then sends the delivery the end enqueued."""
    receiver = Receiver(make_site)
    crawl = make_crawl(user, f"http://127.0.0.1:{free_port()}/", max_retries=0)
    hook_on(receiver, user, crawl=crawl)
    services.crawl_start(crawl=crawl, user=user)
    worker = processes.run(
        [sys.executable, "manage.py", "rqworker", "crawls", "control", "--burst"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url()},
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert worker.returncode == 0, f"the worker exited {worker.returncode}: {worker.stderr[-2000:]}"
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FAILED, f"crawl is {crawl.state}, stats {crawl.stats}"
    assert crawl.error.startswith("no page could be fetched")
    delivery = WebhookDelivery.objects.get(crawl=crawl)
    assert delivery.event == "failed"
    assert delivery.status == Status.DELIVERED, f"{delivery.status}: {delivery.error}"
    [(request, valid)] = receiver.received
    assert valid, "the signature checks out with the webhook's secret"
    assert request.headers["X-Crawlhub-Event"] == "crawl.failed"
    body = json.loads(request.body)
    assert body["event"] == "crawl.failed" and body["delivery"] == delivery.pk
    assert body["crawl"]["id"] == crawl.pk and body["crawl"]["state"] == "failed"
    assert body["crawl"]["error"] == crawl.error
    assert body["crawl"]["stats"]["responses"] == 0 and body["crawl"]["stats"]["errors"] >= 1


def test_a_webhook_on_a_schedules_template_fires_for_each_run(
    user, user_client, make_site, django_capture_on_commit_callbacks
):
    site = make_site(pages_site({"/": "<title>home</title>"}))
    receiver = Receiver(make_site)
    template = make_crawl(user, site.url + "/")
    template_hook = hook_on(receiver, user, crawl=template)
    unrelated = make_crawl(user, site.url + "/")
    webhooks.webhook_create(user=user, url=receiver.url, events=["finished"], crawl=unrelated)
    schedule = schedules.schedule_create(user=user, template=template, cron="0 3 * * *")
    runs = []
    for _ in range(2):
        run = schedules.schedule_run(schedule=schedule)
        with django_capture_on_commit_callbacks(execute=True):
            runs.append(drive(run))
    assert [run.state for run in runs] == [CrawlState.FINISHED] * 2
    deliveries = list(WebhookDelivery.objects.order_by("id"))
    assert [(d.webhook, d.crawl, d.event) for d in deliveries] == [
        (template_hook, run, "finished") for run in runs
    ], "one delivery per run, from the template's webhook only"
    for delivery in deliveries:
        assert webhooks.deliver(delivery.pk) == Status.DELIVERED, delivery.error
    assert all(valid for _, valid in receiver.received) and len(receiver.received) == 2
    sent = [json.loads(request.body)["crawl"]["id"] for request, _ in receiver.received]
    assert sent == [run.pk for run in runs], "each POST describes the run, not the template"
    page = user_client.get(runs[0].get_absolute_url()).content.decode()
    assert "fire for this run too" in page, "the run's page says its template's webhooks apply"


def test_a_failing_endpoint_is_retried_with_backoff_and_every_attempt_logged(user, make_site):
    receiver = Receiver(make_site, statuses=[500, 503])
    crawl = make_crawl(user)
    webhook = hook_on(receiver, user, crawl=crawl)
    t0 = timezone.now()
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        crawl=crawl,
        event="finished",
        next_attempt_at=t0,
        payload=webhooks.payload_for(crawl, "finished", 1),
    )

    assert webhooks.deliver(delivery.pk, now=t0) == Status.PENDING
    delivery.refresh_from_db()
    assert delivery.attempts == 1 and delivery.response_status == 500
    assert delivery.error == "HTTP 500" and delivery.response_snippet == "answer 500"
    wait = (delivery.next_attempt_at - t0).total_seconds()
    assert webhooks.BACKOFF[0] <= wait < webhooks.BACKOFF[0] + 5
    # The retry is in RQ's scheduled registry for that time.
    registry = django_rq.get_queue("control").scheduled_job_registry
    [job_id] = registry.get_job_ids()
    at = registry.get_scheduled_time(job_id).replace(tzinfo=UTC)
    assert abs((at - delivery.next_attempt_at).total_seconds()) < 2

    # Not due yet: nothing is sent.
    assert webhooks.deliver(delivery.pk, now=t0 + timedelta(seconds=5)) == "skipped"
    assert len(receiver.received) == 1

    t1 = delivery.next_attempt_at
    assert webhooks.deliver(delivery.pk, now=t1) == Status.PENDING
    delivery.refresh_from_db()
    assert delivery.response_status == 503
    wait = (delivery.next_attempt_at - t1).total_seconds()
    assert webhooks.BACKOFF[1] <= wait < webhooks.BACKOFF[1] + 5

    assert webhooks.deliver(delivery.pk, now=delivery.next_attempt_at) == Status.DELIVERED
    delivery.refresh_from_db()
    assert delivery.attempts == 3 and delivery.error == "" and delivery.next_attempt_at is None
    assert [a["status_code"] for a in delivery.log] == [500, 503, 200]
    assert all(valid for _, valid in receiver.received) and len(receiver.received) == 3
    bodies = {request.body for request, _ in receiver.received}
    assert len(bodies) == 1, "every attempt sends the same signed bytes"


def test_a_delivery_gives_up_after_the_last_attempt(user, make_site):
    receiver = Receiver(make_site, statuses=[500] * 10)
    crawl = make_crawl(user)
    webhook = hook_on(receiver, user, crawl=crawl)
    now = timezone.now()
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        crawl=crawl,
        event="failed",
        payload={"event": "crawl.failed"},
        next_attempt_at=now,
    )
    results = []
    for _ in range(webhooks.MAX_ATTEMPTS + 2):
        results.append(webhooks.deliver(delivery.pk, now=now))
        now += timedelta(hours=1)
    assert results[: webhooks.MAX_ATTEMPTS] == [Status.PENDING] * 5 + [Status.FAILED]
    assert results[webhooks.MAX_ATTEMPTS :] == ["skipped", "skipped"]
    delivery.refresh_from_db()
    assert delivery.attempts == webhooks.MAX_ATTEMPTS == len(delivery.log) == 6
    assert len(receiver.received) == 6 and delivery.next_attempt_at is None


def test_an_unreachable_endpoint_is_logged_and_retried(user):
    crawl = make_crawl(user)
    webhook, _ = webhooks.webhook_create(
        user=user, url=f"http://127.0.0.1:{free_port()}/hook", events=["finished"], crawl=crawl
    )
    now = timezone.now()
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, crawl=crawl, event="finished", payload={}, next_attempt_at=now
    )
    assert webhooks.deliver(delivery.pk, now=now) == Status.PENDING
    delivery.refresh_from_db()
    assert delivery.response_status is None
    assert delivery.error.startswith("ConnectionError")
    assert delivery.log[0]["error"] == delivery.error


def pending_delivery(webhook: Webhook, crawl) -> WebhookDelivery:
    return WebhookDelivery.objects.create(
        webhook=webhook, crawl=crawl, event="finished", payload={}, next_attempt_at=timezone.now()
    )


def test_a_redirect_is_an_answer_that_is_not_followed(user, make_site):
    elsewhere = Receiver(make_site)
    moved = Response(status=302, headers={"Location": elsewhere.url}, body="moved")
    site = make_site(pages_site({"/hook": moved}))
    crawl = make_crawl(user)
    webhook, _ = webhooks.webhook_create(
        user=user, url=site.url + "/hook", events=["finished"], crawl=crawl
    )
    delivery = pending_delivery(webhook, crawl)
    assert webhooks.deliver(delivery.pk) == Status.PENDING
    delivery.refresh_from_db()
    assert (delivery.response_status, delivery.error) == (302, "HTTP 302")
    assert delivery.response_snippet == "moved" and delivery.log[0]["status_code"] == 302
    assert [(r.method, r.path) for r in site.log] == [("POST", "/hook")]
    assert elsewhere.received == []


def test_with_the_guard_on_a_delivery_to_a_private_address_is_refused_unsent(
    user, make_site, settings
):
    receiver = Receiver(make_site)
    crawl = make_crawl(user)
    webhook = hook_on(receiver, user, crawl=crawl)  # made while the guard was off
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    delivery = pending_delivery(webhook, crawl)
    assert webhooks.deliver(delivery.pk) == Status.PENDING
    delivery.refresh_from_db()
    assert delivery.response_status is None
    assert delivery.error == (
        "BlockedAddress: 127.0.0.1 is a loopback address (CRAWLHUB_BLOCK_PRIVATE_NETWORKS)"
    )
    assert delivery.log[0]["error"] == delivery.error
    assert receiver.received == [] and receiver.site.log == []


def test_the_sweep_sends_deliveries_the_scheduler_missed(user):
    crawl = make_crawl(user)
    webhook, _ = webhooks.webhook_create(
        user=user, url="http://127.0.0.1:9/h", events=["finished"], crawl=crawl
    )
    now = timezone.now()
    late = WebhookDelivery.objects.create(
        webhook=webhook,
        crawl=crawl,
        event="finished",
        payload={},
        next_attempt_at=now - timedelta(minutes=5),
    )
    WebhookDelivery.objects.create(
        webhook=webhook,
        crawl=crawl,
        event="finished",
        payload={},
        next_attempt_at=now - timedelta(seconds=5),
    )
    WebhookDelivery.objects.create(
        webhook=webhook,
        crawl=crawl,
        event="finished",
        payload={},
        status=Status.DELIVERED,
        next_attempt_at=None,
    )
    queue = django_rq.get_queue("control")
    queue.empty()
    assert webhooks.deliver_overdue(now=now) == 1
    [job] = queue.get_jobs()
    assert job.args == (late.pk,)


def test_the_crawl_page_shows_its_webhook_deliveries(user, user_client):
    crawl = make_crawl(user)
    webhook, _ = webhooks.webhook_create(
        user=user, url="http://127.0.0.1:9/hook", events=["finished"], crawl=crawl
    )
    WebhookDelivery.objects.create(
        webhook=webhook,
        crawl=crawl,
        event="finished",
        payload={},
        status=Status.FAILED,
        error="HTTP 500",
        attempts=6,
        next_attempt_at=None,
        created_at=datetime.now(UTC),
    )
    page = user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    assert "http://127.0.0.1:9/hook" in page and "HTTP 500" in page


def test_a_webhook_made_on_its_page_shows_its_secret_once(user, user_client):
    crawl = make_crawl(user)
    bad = user_client.post("/webhooks/", {"url": "nope", "events": ["finished"], "crawl": crawl.pk})
    assert bad.status_code == 400 and "http:// or https://" in bad.content.decode()
    response = user_client.post(
        "/webhooks/",
        {
            "url": "http://127.0.0.1:9/hook",
            "events": ["finished", "cancelled"],
            "crawl": crawl.pk,
        },
    )
    # POST, redirect, GET: the secret is on the page the creation redirects to, once.
    webhook = Webhook.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/webhooks/{webhook.pk}/"
    assert webhook.crawl == crawl and webhook.events == ["finished", "cancelled"]
    shown = user_client.get(response["Location"]).content.decode()
    assert f'<code id="secret">{webhook.secret}</code>' in shown
    again = user_client.get(f"/webhooks/{webhook.pk}/").content.decode()
    assert webhook.secret not in again and "Delivery log" in again
    assert user_client.post(f"/webhooks/{webhook.pk}/", {"action": "disable"}).status_code == 302
    webhook.refresh_from_db()
    assert webhook.active is False


def test_only_staff_add_channel_webhooks_and_users_see_only_their_crawls_hooks(
    user, other_user, user_client, staff_client
):
    channel = Channel.default()
    refused = user_client.post(
        "/webhooks/", {"url": "http://127.0.0.1:9/h", "events": ["finished"], "channel": channel.pk}
    )
    assert refused.status_code == 400 and not Webhook.objects.exists()
    made = staff_client.post(
        "/webhooks/", {"url": "http://127.0.0.1:9/h", "events": ["failed"], "channel": channel.pk}
    )
    assert made.status_code == 302
    channel_hook = Webhook.objects.get(channel=channel)
    theirs, _ = webhooks.webhook_create(
        user=other_user,
        url="http://127.0.0.1:9/theirs",
        events=["finished"],
        crawl=make_crawl(other_user),
    )
    assert user_client.get(f"/webhooks/{theirs.pk}/").status_code == 404
    assert user_client.post(f"/webhooks/{theirs.pk}/", {"action": "delete"}).status_code == 404
    listing = user_client.get("/webhooks/").content.decode()
    assert "/theirs" not in listing
    # A channel's webhook is visible to everyone, changed by staff only.
    assert user_client.get(f"/webhooks/{channel_hook.pk}/").status_code == 200
    assert (
        user_client.post(f"/webhooks/{channel_hook.pk}/", {"action": "delete"}).status_code == 403
    )
    assert Webhook.objects.filter(pk=theirs.pk).exists()
    assert Webhook.objects.filter(pk=channel_hook.pk).exists()
