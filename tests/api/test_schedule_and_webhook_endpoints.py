"""Schedules and webhooks over the JSON API: the same services and the same rights as their
pages; a webhook's secret is in the answer to its creation and nowhere else."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from crawls import schedules, webhooks
from crawls.models import Channel, CrawlSchedule, Webhook, WebhookDelivery
from tests.support.clients import bearer, post
from tests.support.crawling import make_crawl

pytestmark = pytest.mark.django_db


def patch(client: Client, path: str, data: dict, **headers):
    return client.patch(path, data, content_type="application/json", **headers)


def put(client: Client, path: str, data: dict, **headers):
    return client.put(path, data, content_type="application/json", **headers)


def hook_on(user, crawl=None, **fields) -> Webhook:
    fields.setdefault("url", "http://127.0.0.1:9/hook")
    fields.setdefault("events", ["finished"])
    webhook, _ = webhooks.webhook_create(user=user, crawl=crawl or make_crawl(user), **fields)
    return webhook


def test_schedule_and_webhook_endpoints_answer_401_without_credentials(client, user):
    schedule = schedules.schedule_create(user=user, template=make_crawl(user), cron="0 3 * * *")
    webhook = hook_on(user)
    for path in [
        "/api/schedules/",
        f"/api/schedules/{schedule.pk}/",
        "/api/webhooks/",
        f"/api/webhooks/{webhook.pk}/",
    ]:
        for method in ("get", "post", "put", "patch", "delete"):
            response = getattr(client, method)(path, content_type="application/json")
            assert response.status_code == 401, (method, path)
            assert response["Content-Type"] == "application/json", (method, path)
    assert CrawlSchedule.objects.get().cron == "0 3 * * *"
    assert Webhook.objects.get().active


# --- Schedules --------------------------------------------------------------------------------


def test_a_schedule_is_created_listed_changed_and_deleted(client, user):
    template = make_crawl(user, "nightly")
    auth = bearer(user)
    made = post(client, "/api/schedules/", {"template": template.pk, "cron": "0 3 * * *"}, **auth)
    assert made.status_code == 201, made.content
    body = made.json()
    schedule = CrawlSchedule.objects.get(pk=body["id"])
    assert schedule.created_by == user and schedule.template == template
    assert body["template_name"] == "nightly" and body["enabled"] is True
    assert body["next_run_at"] and len(body["upcoming"]) == 5
    assert body["runs"] == [] and body["last_run_at"] is None and body["last_error"] == ""

    CrawlSchedule.objects.filter(pk=schedule.pk).update(
        next_run_at=timezone.now() - timedelta(seconds=1)
    )
    [run_id] = schedules.run_due_schedules()["started"]
    detail = client.get(f"/api/schedules/{schedule.pk}/", **auth).json()
    assert [run["id"] for run in detail["runs"]] == [run_id]
    assert detail["last_run_at"] and detail["run_count"] == 1
    listed = client.get("/api/schedules/", **auth).json()
    assert [(s["id"], s["run_count"]) for s in listed["results"]] == [(schedule.pk, 1)]
    assert "runs" not in listed["results"][0]

    off = patch(client, f"/api/schedules/{schedule.pk}/", {"enabled": False}, **auth)
    assert off.status_code == 200
    assert off.json()["enabled"] is False and off.json()["next_run_at"] is None
    assert off.json()["cron"] == "0 3 * * *"
    both = put(
        client, f"/api/schedules/{schedule.pk}/", {"cron": "@hourly", "enabled": True}, **auth
    )
    assert both.status_code == 200 and both.json()["next_run_at"]
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.enabled) == ("@hourly", True)
    assert put(client, f"/api/schedules/{schedule.pk}/", {"enabled": False}, **auth).json() == {
        "cron": ["This field is required."]
    }

    assert client.delete(f"/api/schedules/{schedule.pk}/", **auth).status_code == 204
    assert not CrawlSchedule.objects.exists()
    assert template.__class__.objects.filter(pk__in=[template.pk, run_id]).count() == 2


@pytest.mark.parametrize("bad", ["61 * * * *", "* * *", "every day", ""])
def test_a_bad_cron_is_400_naming_the_field(client, user, bad):
    template = make_crawl(user)
    auth = bearer(user)
    refused = post(client, "/api/schedules/", {"template": template.pk, "cron": bad}, **auth)
    assert refused.status_code == 400
    assert list(refused.json()) == ["cron"]
    assert not CrawlSchedule.objects.exists()
    schedule = schedules.schedule_create(user=user, template=template, cron="0 3 * * *")
    changed = patch(client, f"/api/schedules/{schedule.pk}/", {"cron": bad}, **auth)
    assert changed.status_code == 400 and list(changed.json()) == ["cron"]
    schedule.refresh_from_db()
    assert schedule.cron == "0 3 * * *"


def test_a_template_must_be_a_crawl_of_yours_that_is_not_a_run(client, user, other_user):
    auth = bearer(user)
    theirs = make_crawl(other_user)
    refused = post(client, "/api/schedules/", {"template": theirs.pk, "cron": "@daily"}, **auth)
    assert refused.status_code == 400
    assert refused.json() == {
        "template": [
            f"No crawl {theirs.pk} of yours to schedule "
            "(the runs of a schedule cannot be templates)."
        ]
    }
    schedule = schedules.schedule_create(user=user, template=make_crawl(user), cron="@daily")
    run = schedules.schedule_run(schedule=schedule)
    again = post(client, "/api/schedules/", {"template": run.pk, "cron": "@daily"}, **auth)
    assert again.status_code == 400 and list(again.json()) == ["template"]
    missing = post(client, "/api/schedules/", {}, **auth)
    assert missing.status_code == 400 and set(missing.json()) == {"template", "cron"}
    assert CrawlSchedule.objects.count() == 1


def test_another_users_schedule_is_404_and_staff_see_every_schedule(
    client, user, other_user, staff
):
    theirs = schedules.schedule_create(
        user=other_user, template=make_crawl(other_user), cron="0 3 * * *"
    )
    auth = bearer(user)
    path = f"/api/schedules/{theirs.pk}/"
    assert client.get("/api/schedules/", **auth).json()["results"] == []
    assert client.get(path, **auth).status_code == 404
    assert patch(client, path, {"enabled": False}, **auth).status_code == 404
    assert put(client, path, {"cron": "@daily", "enabled": False}, **auth).status_code == 404
    assert client.delete(path, **auth).status_code == 404
    theirs.refresh_from_db()
    assert (theirs.cron, theirs.enabled) == ("0 3 * * *", True)
    as_staff = bearer(staff)
    assert [s["id"] for s in client.get("/api/schedules/", **as_staff).json()["results"]] == [
        theirs.pk
    ]
    assert patch(client, path, {"enabled": False}, **as_staff).status_code == 200


# --- Webhooks ---------------------------------------------------------------------------------


def test_a_webhooks_secret_is_shown_at_creation_only(client, user):
    crawl = make_crawl(user)
    auth = bearer(user)
    made = post(
        client,
        "/api/webhooks/",
        {"crawl": crawl.pk, "url": "http://127.0.0.1:9/h", "events": ["finished", "failed"]},
        **auth,
    )
    assert made.status_code == 201, made.content
    body = made.json()
    webhook = Webhook.objects.get(pk=body["id"])
    assert body["secret"] == webhook.secret and body["secret"].startswith("whsec_")
    assert (body["crawl"], body["channel"], body["events"]) == (
        crawl.pk,
        None,
        ["finished", "failed"],
    )
    assert webhook.created_by == user and webhook.active
    for response in [
        client.get("/api/webhooks/", **auth),
        client.get(f"/api/webhooks/{webhook.pk}/", **auth),
        patch(client, f"/api/webhooks/{webhook.pk}/", {"active": False}, **auth),
    ]:
        assert response.status_code == 200
        assert webhook.secret not in response.content.decode()
        assert "secret" not in json.dumps(response.json())


def test_a_webhook_is_listed_changed_and_deleted(client, user):
    webhook = hook_on(user)
    auth = bearer(user)
    path = f"/api/webhooks/{webhook.pk}/"
    listed = client.get("/api/webhooks/", **auth).json()
    assert [h["id"] for h in listed["results"]] == [webhook.pk]
    assert "deliveries" not in listed["results"][0]
    changed = patch(client, path, {"active": False, "events": ["failed", "cancelled"]}, **auth)
    assert changed.status_code == 200
    assert changed.json()["active"] is False
    assert changed.json()["events"] == ["failed", "cancelled"]
    replaced = put(
        client,
        path,
        {"url": " https://hooks.example/x ", "events": ["finished"], "active": True},
        **auth,
    )
    assert replaced.status_code == 200
    webhook.refresh_from_db()
    assert (webhook.url, webhook.events, webhook.active) == (
        "https://hooks.example/x",
        ["finished"],
        True,
    )
    bad = patch(client, path, {"url": "ftp://x/", "events": ["nope"]}, **auth)
    assert bad.status_code == 400 and set(bad.json()) == {"url", "events"}
    webhook.refresh_from_db()
    assert webhook.url == "https://hooks.example/x"
    assert client.delete(path, **auth).status_code == 204
    assert not Webhook.objects.exists()


def test_a_webhook_detail_shows_its_latest_deliveries(client, user):
    webhook = hook_on(user)
    for n in range(25):
        WebhookDelivery.objects.create(
            webhook=webhook,
            crawl=webhook.crawl,
            event="finished",
            payload={},
            attempts=n,
            error=f"HTTP {500 + n}",
        )
    detail = client.get(f"/api/webhooks/{webhook.pk}/", **bearer(user)).json()
    deliveries = detail["deliveries"]
    assert len(deliveries) == 20
    assert deliveries[0]["error"] == "HTTP 524" and deliveries[0]["status"] == "pending"
    assert {"event", "attempts", "log", "response_status", "delivered_at"} <= set(deliveries[0])


def test_a_webhook_names_exactly_one_of_channel_and_crawl(client, user, staff):
    crawl = make_crawl(user)
    channel = Channel.default()
    hook = {"url": "http://127.0.0.1:9/h", "events": ["finished"]}
    both = post(
        client,
        "/api/webhooks/",
        {**hook, "crawl": crawl.pk, "channel": channel.slug},
        **bearer(staff),
    )
    assert both.status_code == 400
    assert both.json() == {"channel": ["Choose a channel or a crawl, not both."]}
    neither = post(client, "/api/webhooks/", hook, **bearer(staff))
    assert neither.status_code == 400
    assert neither.json() == {"channel": ["Choose a channel or a crawl."]}
    bad = post(
        client, "/api/webhooks/", {"crawl": crawl.pk, "url": "nope", "events": []}, **bearer(user)
    )
    assert bad.status_code == 400 and set(bad.json()) == {"url", "events"}
    assert not Webhook.objects.exists()
    on_channel = post(client, "/api/webhooks/", {**hook, "channel": channel.slug}, **bearer(staff))
    assert on_channel.status_code == 201
    assert on_channel.json()["channel"] == "default" and on_channel.json()["crawl"] is None


def test_another_users_webhook_is_404_and_channel_webhooks_are_staffs_to_change(
    client, user, other_user, staff
):
    theirs = hook_on(other_user, url="http://127.0.0.1:9/theirs")
    on_channel, _ = webhooks.webhook_create(
        user=staff, url="http://127.0.0.1:9/channel", events=["failed"], channel=Channel.default()
    )
    auth = bearer(user)
    listed = client.get("/api/webhooks/", **auth).json()
    assert [h["id"] for h in listed["results"]] == [on_channel.pk]
    path = f"/api/webhooks/{theirs.pk}/"
    assert client.get(path, **auth).status_code == 404
    assert patch(client, path, {"active": False}, **auth).status_code == 404
    assert client.delete(path, **auth).status_code == 404
    # A channel's webhook: everyone sees it, staff change it (as on the pages).
    channel_path = f"/api/webhooks/{on_channel.pk}/"
    assert client.get(channel_path, **auth).status_code == 200
    refused = patch(client, channel_path, {"active": False}, **auth)
    assert refused.status_code == 403 and "staff" in refused.json()["detail"]
    assert client.delete(channel_path, **auth).status_code == 403
    hook = {"url": "http://127.0.0.1:9/h", "events": ["finished"]}
    assert post(client, "/api/webhooks/", {**hook, "channel": "default"}, **auth).status_code == 403
    other_crawl = post(client, "/api/webhooks/", {**hook, "crawl": theirs.crawl_id}, **auth)
    assert other_crawl.status_code == 400 and list(other_crawl.json()) == ["crawl"]
    assert Webhook.objects.count() == 2
    assert all(Webhook.objects.values_list("active", flat=True))
    as_staff = bearer(staff)
    assert client.get(path, **as_staff).status_code == 200
    assert client.delete(channel_path, **as_staff).status_code == 204


# --- Admin ------------------------------------------------------------------------------------


def test_the_admin_never_shows_a_secret_and_deliveries_are_read_only(admin_client, user):
    webhook = hook_on(user)
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, crawl=webhook.crawl, event="finished", payload={}
    )
    for path in [
        "/admin/crawls/webhook/",
        f"/admin/crawls/webhook/{webhook.pk}/change/",
        "/admin/crawls/webhookdelivery/",
    ]:
        page = admin_client.get(path)
        assert page.status_code == 200, path
        assert webhook.secret not in page.content.decode(), path
    delivery_page = admin_client.get(f"/admin/crawls/webhookdelivery/{delivery.pk}/change/")
    assert delivery_page.status_code == 200 and b'name="_save"' not in delivery_page.content
    off = admin_client.post(
        f"/admin/crawls/webhook/{webhook.pk}/change/",
        {
            "deliveries-TOTAL_FORMS": "1",
            "deliveries-INITIAL_FORMS": "1",
            "deliveries-0-id": delivery.pk,
            "deliveries-0-webhook": webhook.pk,
        },
    )
    assert off.status_code == 302, off.content.decode()[:2000]
    webhook.refresh_from_db()
    assert webhook.active is False and webhook.url == "http://127.0.0.1:9/hook"


def test_the_admin_changes_a_schedule_through_the_service(admin_client, user):
    schedule = schedules.schedule_create(user=user, template=make_crawl(user), cron="0 3 * * *")
    path = f"/admin/crawls/crawlschedule/{schedule.pk}/change/"
    assert admin_client.get(path).status_code == 200
    bad = admin_client.post(path, {"cron": "61 * * * *", "enabled": "on"})
    assert bad.status_code == 200 and "is not a cron expression" in bad.content.decode()
    assert admin_client.post(path, {"cron": "@hourly"}).status_code == 302
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.enabled, schedule.next_run_at) == ("@hourly", False, None)
