"""Alert rules on the pages and the API: every field checked with an error that names it, the
rights of owners, others and staff, and the history on the crawl's page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from crawls import alerts
from crawls.models import Alert, AlertRule, Channel
from tests.support.clients import bearer, post
from tests.support.crawling import make_crawl

pytestmark = pytest.mark.django_db


def errors_of(response) -> str:
    return response.content.decode()


def test_the_crawl_page_form_reports_every_bad_field_at_once_and_keeps_what_was_typed(
    user, user_client
):
    crawl = make_crawl(user)
    response = user_client.post(
        f"/crawls/{crawl.pk}/alerts/",
        {
            "kind": "error_rate",
            "percent": "0",
            "minutes": "0",
            "emails": "ops@example.com, bad@, nope",
        },
    )
    assert response.status_code == 400
    page = errors_of(response)
    assert "N (the error rate, in percent) must be from 1 to 100; 0 is not." in page
    assert "M (minutes) must be from 1 to 1440; 0 is not." in page
    assert "Not an e-mail address: “bad@” (address 2); “nope” (address 3)." in page
    assert "ops@example.com, bad@, nope" in page  # nothing typed is lost
    assert not AlertRule.objects.exists()


def test_figures_that_are_not_numbers_or_missing_are_named(user, user_client):
    crawl = make_crawl(user)
    page = errors_of(
        user_client.post(
            f"/crawls/{crawl.pk}/alerts/",
            {
                "kind": "error_rate",
                "percent": "half",
                "minutes": "",
            },
        )
    )
    assert (
        "Enter N (the error rate, in percent) as a whole number from 1 to 100, not “half”." in page
    )
    assert "Enter M (minutes): a whole number from 1 to 1440." in page
    page = errors_of(
        user_client.post(
            f"/crawls/{crawl.pk}/alerts/",
            {
                "kind": "no_progress",
                "minutes": "-3",
            },
        )
    )
    assert "M (minutes) must be from 1 to 1440; -3 is not." in page
    page = errors_of(user_client.post(f"/crawls/{crawl.pk}/alerts/", {"kind": "sometimes"}))
    assert "Select a valid choice. sometimes is not one of the available choices." in page


def test_a_valid_rule_is_added_from_the_crawl_page(user, user_client):
    crawl = make_crawl(user)
    response = user_client.post(
        f"/crawls/{crawl.pk}/alerts/",
        {
            "kind": "error_rate",
            "percent": "25",
            "minutes": "10",
            "emails": "ops@example.com\noncall@example.org",
            # Figures a kind has not are not kept.
        },
    )
    assert response.status_code == 302 and response["Location"].endswith("#h-alerts")
    rule = AlertRule.objects.get()
    assert (rule.crawl, rule.kind, rule.percent, rule.minutes) == (crawl, "error_rate", 25, 10)
    assert rule.emails == ["ops@example.com", "oncall@example.org"]
    assert rule.created_by == user
    user_client.post(f"/crawls/{crawl.pk}/alerts/", {"kind": "host_parked", "percent": "7"})
    assert AlertRule.objects.get(kind="host_parked").percent is None
    page = user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    assert "Error rate over 25% in 10 min" in page and "ops@example.com, oncall@example.org" in page


def test_others_cannot_see_or_add_or_change_a_crawls_rules(user, other_client, user_client):
    crawl = make_crawl(user)
    rule = alerts.rule_create(user=user, crawl=crawl, kind="host_parked")
    assert (
        other_client.post(f"/crawls/{crawl.pk}/alerts/", {"kind": "host_parked"}).status_code == 404
    )
    assert other_client.post(f"/alerts/{rule.pk}/", {"action": "delete"}).status_code == 404
    assert 'id="alert-rules"' not in other_client.get("/alerts/").content.decode()
    # The /alerts/ form offers a crawl of one's own only.
    response = other_client.post("/alerts/", {"kind": "host_parked", "crawl": crawl.pk})
    assert response.status_code == 400 and "Select a valid choice" in errors_of(response)
    assert AlertRule.objects.count() == 1
    # The owner switches it off and deletes it.
    user_client.post(f"/alerts/{rule.pk}/", {"action": "disable"})
    rule.refresh_from_db()
    assert rule.active is False
    user_client.post(f"/alerts/{rule.pk}/", {"action": "delete"})
    assert not AlertRule.objects.exists()


def test_only_staff_add_and_change_channel_rules(user, staff, user_client, staff_client):
    channel = Channel.default()
    with pytest.raises(alerts.PermissionDenied):
        alerts.rule_create(user=user, channel=channel, kind="ended_badly")
    # The form has no channel field for others: the rule needs a crawl.
    response = user_client.post("/alerts/", {"kind": "ended_badly", "channel": channel.pk})
    assert response.status_code == 400 and "Choose a crawl, or (staff) a channel." in errors_of(
        response
    )
    response = staff_client.post(
        "/alerts/",
        {
            "kind": "no_progress",
            "minutes": "15",
            "channel": channel.pk,
            "emails": "ops@example.com",
        },
    )
    assert response.status_code == 302
    rule = AlertRule.objects.get()
    assert rule.channel == channel and rule.created_by == staff
    # Everyone sees a channel's rules (they watch their crawls); only staff change them.
    assert "No progress for 15 min" in user_client.get("/alerts/").content.decode()
    assert user_client.post(f"/alerts/{rule.pk}/", {"action": "disable"}).status_code == 403
    crawl = make_crawl(user)
    assert "No progress for 15 min" in user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    staff_client.post(f"/alerts/{rule.pk}/", {"action": "disable"})
    rule.refresh_from_db()
    assert not rule.active


def test_the_crawl_page_shows_its_alert_history(user, user_client, other_client):
    crawl = make_crawl(user)
    rule = alerts.rule_create(user=user, crawl=crawl, kind="no_progress", minutes=5)
    now = timezone.now()
    Alert.objects.create(
        rule=rule,
        crawl=crawl,
        kind="no_progress",
        line="No progress on crawl #1 for 5 min",
        fired_at=now - timedelta(minutes=9),
        resolved_at=now - timedelta(minutes=2),
        resolved_line="Resolved: it makes progress again.",
        mail_log=[
            {"at": "", "notice": "fired", "to": ["a@example.com"], "error": "SMTPException: no"}
        ],
    )
    Alert.objects.create(
        rule=rule, crawl=crawl, kind="no_progress", line="No progress, again", fired_at=now
    )
    page = user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    assert page.index("No progress, again") < page.index("No progress on crawl #1 for 5 min")
    assert "Resolved: it makes progress again." in page and "fired: SMTPException: no" in page
    assert other_client.get(f"/crawls/{crawl.pk}/").status_code == 404


# --- The API ----------------------------------------------------------------------------------


def api_post(client: Client, path: str, data: dict, headers: dict):
    return post(client, path, data, **headers)


def test_the_api_makes_rules_with_the_same_checks_and_lists_alerts(user, other_user, client):
    crawl = make_crawl(user)
    headers = bearer(user)
    bad = api_post(
        client,
        "/api/alert-rules/",
        {
            "crawl": crawl.pk,
            "kind": "error_rate",
            "percent": 101,
            "emails": ["x@", "ok@example.com"],
        },
        headers,
    )
    assert bad.status_code == 400
    assert bad.json() == {
        "percent": ["N (the error rate, in percent) must be from 1 to 100; 101 is not."],
        "minutes": ["Enter M (minutes): a whole number from 1 to 1440."],
        "emails": ["Not an e-mail address: “x@” (address 1)."],
    }
    made = api_post(
        client,
        "/api/alert-rules/",
        {
            "crawl": crawl.pk,
            "kind": "error_rate",
            "percent": 30,
            "minutes": 5,
            "emails": ["ok@example.com"],
        },
        headers,
    )
    assert made.status_code == 201, made.content
    assert made.json()["condition"] == "Error rate over 30% in 5 min"
    rule = AlertRule.objects.get()
    changed = client.patch(
        f"/api/alert-rules/{rule.pk}/", {"minutes": 0}, content_type="application/json", **headers
    )
    assert changed.status_code == 400 and "0 is not" in changed.content.decode()
    Alert.objects.create(
        rule=rule, crawl=crawl, kind="error_rate", line="Error rate 50%", fired_at=timezone.now()
    )
    listed = client.get(f"/api/alerts/?crawl={crawl.pk}", **headers).json()
    assert [a["line"] for a in listed["results"]] == ["Error rate 50%"]
    assert client.get("/api/alerts/?crawl=x", **headers).status_code == 400
    # Past every database's integer range (SQLite's driver raised OverflowError: a 500).
    huge = client.get("/api/alerts/?crawl=" + "9" * 30, **headers)
    assert huge.status_code == 400 and "crawl" in huge.json(), huge.content[:200]
    # Another user sees none of it and cannot add a rule to the crawl.
    others = bearer(other_user)
    assert client.get("/api/alerts/", **others).json()["results"] == []
    assert client.get(f"/api/alert-rules/{rule.pk}/", **others).status_code == 404
    refused = api_post(
        client, "/api/alert-rules/", {"crawl": crawl.pk, "kind": "host_parked"}, others
    )
    assert (
        refused.status_code == 400 and f"No crawl {crawl.pk} of yours." in refused.content.decode()
    )
    channel_rule = {"channel": "default", "kind": "host_parked"}
    staff_only = api_post(client, "/api/alert-rules/", channel_rule, others)
    assert staff_only.status_code == 403
