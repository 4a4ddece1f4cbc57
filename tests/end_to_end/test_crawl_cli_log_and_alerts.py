"""`manage.py crawl log` and `crawl alerts`: a crawl's log, filtered, paged and followed, and
alert rules listed, added and removed from the shell; each bad flag is named in its error."""

from __future__ import annotations

import io
import json
import threading
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from crawls import services
from crawls.models import AlertRule, Channel, CrawlEvent
from tests.support.crawling import drive, make_crawl
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db


def crawl_cli(*args: str) -> str:
    out = io.StringIO()
    call_command("crawl", *args, stdout=out)
    return out.getvalue()


def finished_crawl_with_a_warning(user, make_site):
    """A crawl that ended, whose log has info lines and one warning (a sitemap its site's
    robots.txt lists that is not there)."""
    pages = {"/": "<h1>home</h1>"}
    site = make_site(pages_site(pages))
    pages["/robots.txt"] = Response(
        body=f"Sitemap: {site.url}/gone.xml\n", content_type="text/plain"
    )
    crawl = services.crawl_create(
        user=user, name="logged", seeds=[site.url + "/"], obey_robots=False, follow_sitemaps=True
    )
    services.crawl_start(crawl=crawl, user=user)
    return drive(crawl), site


# -- crawl log ----------------------------------------------------------------------------------


def test_log_prints_the_crawl_s_lines_oldest_first_and_filters_them(user, make_site):
    crawl, site = finished_crawl_with_a_warning(user, make_site)
    lines = crawl_cli("log", str(crawl.pk)).splitlines()
    events = list(CrawlEvent.objects.filter(crawl=crawl).order_by("id"))
    assert len(lines) == len(events) >= 4  # created, started, slices, sitemaps, finished
    assert [int(line.split()[0]) for line in lines] == [e.pk for e in events]
    assert "Created" in lines[0] and "(by alice)" in lines[0]
    assert "Finished" in lines[-1]
    # The lowest level shown: warnings (and errors) only.
    [warning] = crawl_cli("log", str(crawl.pk), "--level", "warning").splitlines()
    assert "warning" in warning and f"{site.url}/gone.xml: listed in robots.txt" in warning
    # By host and text, and as JSON, one object a line.
    host = warning.split("Sitemap")[1].split()[0]
    by_host = crawl_cli("log", str(crawl.pk), "--host", host, "--text", "no sitemap", "--json")
    [line] = [json.loads(text) for text in by_host.splitlines()]
    assert line["text"] == f"no sitemap at {site.url}/sitemap.xml (404)"
    assert (line["level"], line["kind"], line["user"]) == ("info", "sitemap", None)


def test_log_pages_back_through_older_lines(user, make_site):
    crawl, _ = finished_crawl_with_a_warning(user, make_site)
    events = [e.pk for e in CrawlEvent.objects.filter(crawl=crawl).order_by("id")]
    newest = crawl_cli("log", str(crawl.pk), "--size", "2", "--kind", "")
    hint, *shown = newest.splitlines()
    assert [int(line.split()[0]) for line in shown] == events[-2:]
    assert hint == f"older lines: crawl log {crawl.pk} --before {events[-2]}"
    older = crawl_cli("log", str(crawl.pk), "--before", str(events[-2])).splitlines()
    assert [int(line.split()[0]) for line in older] == events[:-2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["999999"], "no crawl with id 999999"),
        (
            ["{id}", "--level", "loud"],
            "--level: 'loud' is not a level: use info, warning or error.",
        ),
        (["{id}", "--kind", "noise"], "--kind: 'noise' is not a kind: use one of actions, "),
        (["{id}", "--before", "yesterday"], "--before: 'yesterday' is not a line id."),
        (["{id}", "--size", "0"], "--size: from 1 to 200 lines, not 0"),
    ],
)
def test_a_bad_log_flag_is_named_in_its_error(user, args, message):
    crawl = make_crawl(user)
    with pytest.raises(CommandError) as raised:
        crawl_cli("log", *[arg.format(id=crawl.pk) for arg in args])
    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.django_db(transaction=True)
def test_log_follow_prints_new_lines_as_they_come_until_the_crawl_ends(user):
    crawl = make_crawl(user)  # a seed nobody answers; no worker runs its slices here
    services.crawl_start(crawl=crawl, user=user)
    out, failed = io.StringIO(), []

    def follow() -> None:
        try:
            call_command("crawl", "log", str(crawl.pk), "--follow", stdout=out)
        except BaseException as exc:
            failed.append(exc)
        finally:
            connections.close_all()

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        time.sleep(1.5)
        services.crawl_pause(crawl=crawl, user=user)
        time.sleep(1.5)
        services.crawl_cancel(crawl=crawl, user=user)
    finally:
        follower.join(30)
    assert not follower.is_alive(), "crawl log --follow did not stop once the crawl ended"
    assert not failed, failed
    kinds = [line.split()[4] for line in out.getvalue().splitlines()]
    assert kinds == ["Created", "Started", "Paused", "Cancelled"], out.getvalue()


# -- crawl alerts -------------------------------------------------------------------------------


def test_alert_rules_are_added_listed_and_removed(user, staff):
    crawl = make_crawl(user)
    channel = Channel.default()
    added = crawl_cli(
        "alerts",
        "add",
        "--crawl",
        str(crawl.pk),
        "--kind",
        "error_rate",
        "--percent",
        "20",
        "--minutes",
        "5",
        "--email",
        "ops@example.com",
        "--user",
        "alice",
    )
    rule = AlertRule.objects.get(crawl=crawl)
    assert added.strip() == f"alert rule {rule.pk}: Error rate over 20% in 5 min on crawl {crawl}"
    assert (rule.percent, rule.minutes, rule.emails, rule.created_by) == (
        20,
        5,
        ["ops@example.com"],
        user,
    )
    crawl_cli("alerts", "add", "--channel", channel.slug, "--kind", "ended_badly", "--user", "sam")
    on_channel = AlertRule.objects.get(channel=channel)
    # A crawl's rules: its own and its channel's.
    listed = crawl_cli("alerts", "list", "--crawl", str(crawl.pk)).splitlines()
    assert listed == [
        f"{rule.pk:>5}  crawl {crawl.pk:<14} Error rate over 20% in 5 min  -> ops@example.com",
        f"{on_channel.pk:>5}  channel {channel.slug:<12} Ended abnormally (cancelled, failed or "
        "stalled)  -> webhooks only",
    ]
    rows = json.loads(crawl_cli("alerts", "list", "--channel", channel.slug, "--json"))
    assert [(r["id"], r["kind"], r["channel"]) for r in rows] == [
        (on_channel.pk, "ended_badly", channel.slug)
    ]
    removed = crawl_cli("alerts", "remove", str(rule.pk))
    assert removed.strip() == (
        f"alert rule {rule.pk} removed: Error rate over 20% in 5 min on crawl {crawl}"
    )
    crawl_cli("alerts", "remove", str(on_channel.pk))
    assert crawl_cli("alerts", "list").strip() == "no alert rules"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--crawl", "999999", "--kind", "ended_badly"], "no crawl with id 999999"),
        (
            ["--crawl", "{id}", "--kind", "error_rate", "--percent", "150", "--minutes", "5"],
            "invalid alert rule:\n  --percent: N (the error rate, in percent) must be from 1 to "
            "100; 150 is not.",
        ),
        (
            ["--crawl", "{id}", "--kind", "error_rate", "--percent", "lots", "--minutes", "0"],
            "invalid alert rule:\n  --percent: Enter N (the error rate, in percent) as a whole "
            "number from 1 to 100, not “lots”.\n  --minutes: M (minutes) must be from 1 to 1440; "
            "0 is not.",
        ),
        (
            ["--crawl", "{id}", "--kind", "no_progress"],
            "invalid alert rule:\n  --minutes: Enter M (minutes): a whole number from 1 to 1440.",
        ),
        (
            ["--crawl", "{id}", "--kind", "loud"],
            "invalid alert rule:\n  --kind: Choose one of: error_rate, no_progress, host_parked, "
            "ended_badly.",
        ),
        (
            ["--crawl", "{id}", "--kind", "ended_badly", "--email", "ops@"],
            "invalid alert rule:\n  --email: Not an e-mail address: “ops@” (address 1).",
        ),
        (
            ["--channel", "nowhere", "--kind", "ended_badly"],
            "--channel: no channel with slug 'nowhere'",
        ),
        (
            ["--channel", "default", "--kind", "ended_badly"],
            "--user alice: Only staff add alert rules to a channel.",
        ),
    ],
)
def test_a_bad_alert_rule_is_refused_naming_each_flag(user, args, message):
    crawl = make_crawl(user)
    Channel.default()
    with pytest.raises(CommandError) as raised:
        crawl_cli("alerts", "add", *[arg.format(id=crawl.pk) for arg in args], "--user", "alice")
    assert str(raised.value) == message
    assert not AlertRule.objects.exists()


def test_removing_a_rule_that_is_not_there_says_so(user):
    with pytest.raises(CommandError, match=r"no alert rule with id 424242 \(crawl alerts list"):
        crawl_cli("alerts", "remove", "424242")


def test_adding_a_rule_without_user_and_no_single_admin_names_the_flag(user):
    crawl = make_crawl(user)
    with pytest.raises(CommandError, match="^--user: name who adds the rule"):
        crawl_cli("alerts", "add", "--crawl", str(crawl.pk), "--kind", "ended_badly")
