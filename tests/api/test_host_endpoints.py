"""A crawl's hosts through the API and `manage.py crawl`: listed as the host view lists them;
held, released and dropped through the same services as the page's buttons, each action in the
crawl's events and a drop counted as cancelled. The page's side is tests/dashboard/test_hosts.py."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlEvent
from tests.support.clients import bearer, post

pytestmark = pytest.mark.django_db


def running(user, *hosts: str):
    seeds = [f"http://{host}/{n}" for host in hosts for n in range(3)]
    crawl = services.crawl_create(user=user, name="hosts", seeds=seeds, obey_robots=False)
    services.crawl_start(crawl=crawl, user=user)
    return crawl


def crawl_cli(*args: str) -> str:
    out = io.StringIO()
    call_command("crawl", *args, stdout=out)
    return out.getvalue()


# --- The API ----------------------------------------------------------------------------------


def test_the_api_lists_every_host_with_what_it_is_doing(client, user):
    crawl = running(user, "a.test", "b.test")
    frontier = Frontier(crawl.pk)
    [claimed] = frontier.claim(1, lease_seconds=30)
    frontier.pushed_back(claimed.host, wait=30, why="HTTP 429, Retry-After 30 s")
    rows = client.get(f"/api/crawls/{crawl.pk}/hosts/", **bearer(user)).json()
    assert [row["host"] for row in rows] == [
        claimed.host,
        ({"a.test", "b.test"} - {claimed.host}).pop(),
    ]
    slowed = rows[0]
    assert (slowed["queued"], slowed["in_flight"], slowed["done"], slowed["errors"]) == (2, 1, 0, 0)
    assert slowed["delay"] == 30 and slowed["why"] == "HTTP 429, Retry-After 30 s"
    next_at = datetime.fromisoformat(slowed["next_at"].replace("Z", "+00:00"))
    assert timedelta(seconds=20) < next_at - datetime.now(UTC) < timedelta(seconds=40)
    assert slowed["held_until"] is None and rows[1]["next_at"] is None


def test_an_owner_holds_releases_and_drops_a_host_through_the_api(client, user):
    crawl = running(user, "a.test", "b.test")
    auth = bearer(user)
    held = post(
        client, f"/api/crawls/{crawl.pk}/hosts/hold/", {"host": "A.test", "minutes": 5}, **auth
    )
    assert held.status_code == 200, held.json()
    until = datetime.fromisoformat(held.json()["held_until"].replace("Z", "+00:00"))
    assert held.json()["host"] == "a.test"
    assert timedelta(minutes=4) < until - datetime.now(UTC) < timedelta(minutes=6)
    frontier = Frontier(crawl.pk)
    assert {r.host for r in frontier.claim(10, lease_seconds=30)} == {"b.test"}
    listed = {
        row["host"]: row for row in client.get(f"/api/crawls/{crawl.pk}/hosts/", **auth).json()
    }
    assert listed["a.test"]["held_until"] is not None
    event = crawl.events.get(kind=CrawlEvent.Kind.HOST_HELD)
    assert event.user == user and event.detail == "a.test for 5 min"

    released = post(client, f"/api/crawls/{crawl.pk}/hosts/release/", {"host": "a.test"}, **auth)
    assert released.status_code == 200 and released.json() == {"host": "a.test"}
    assert crawl.events.filter(
        kind=CrawlEvent.Kind.HOST_RELEASED, user=user, detail="a.test"
    ).exists()

    dropped = post(client, f"/api/crawls/{crawl.pk}/hosts/drop/", {"host": "a.test"}, **auth)
    assert dropped.status_code == 200 and dropped.json() == {"host": "a.test", "dropped": 3}
    assert frontier.stats()["cancelled"] == 3
    event = crawl.events.get(kind=CrawlEvent.Kind.HOST_DROPPED)
    assert event.user == user and event.detail == "a.test: 3 request(s) dropped"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"host": "a.test", "minutes": "soon"}, "minutes", "A valid number is required."),
        ({"host": "a.test", "minutes": 0}, "minutes", "hold a host from 1 to 10080 minutes."),
        ({"host": "a b/c", "minutes": 5}, "host", "'a b/c' is not a host name (hostname[:port])."),
        ({"minutes": 5}, "host", "This field is required."),
    ],
)
def test_a_bad_hold_is_a_400_naming_the_field(client, user, body, field, message):
    crawl = running(user, "a.test")
    response = post(client, f"/api/crawls/{crawl.pk}/hosts/hold/", body, **bearer(user))
    assert response.status_code == 400
    assert response.json() == {field: [message]}
    assert not crawl.events.filter(kind=CrawlEvent.Kind.HOST_HELD).exists()


def test_host_actions_on_a_crawl_that_is_over_are_a_409(client, user):
    crawl = running(user, "a.test")
    services.crawl_cancel(crawl=crawl, user=user)
    response = post(
        client, f"/api/crawls/{crawl.pk}/hosts/drop/", {"host": "a.test"}, **bearer(user)
    )
    assert response.status_code == 409
    assert "cancelled crawl has no hosts" in response.json()["detail"]


def test_host_actions_need_a_token_and_the_crawl(client, user, other_user):
    crawl = running(user, "a.test")
    assert (
        post(client, f"/api/crawls/{crawl.pk}/hosts/drop/", {"host": "a.test"}).status_code == 401
    )
    assert client.get(f"/api/crawls/{crawl.pk}/hosts/").status_code == 401
    other = bearer(other_user)
    assert client.get(f"/api/crawls/{crawl.pk}/hosts/", **other).status_code == 404
    response = post(client, f"/api/crawls/{crawl.pk}/hosts/drop/", {"host": "a.test"}, **other)
    assert response.status_code == 404
    assert Frontier(crawl.pk).stats()["queued"] == 3
    assert not crawl.events.filter(kind=CrawlEvent.Kind.HOST_DROPPED).exists()


# --- The command line -------------------------------------------------------------------------


def test_the_cli_lists_holds_releases_and_drops_hosts(user):
    crawl = running(user, "a.test", "b.test")
    listed = json.loads(crawl_cli("hosts", str(crawl.pk), "--json"))
    assert {(row["host"], row["queued"]) for row in listed} == {("a.test", 3), ("b.test", 3)}
    table = crawl_cli("hosts", str(crawl.pk))
    assert table.splitlines()[0].startswith("host") and "a.test" in table

    out = crawl_cli("hold-host", str(crawl.pk), "a.test", "--until", "2h", "--user", user.username)
    assert out.startswith("a.test held until ")
    frontier = Frontier(crawl.pk)
    assert {r.host for r in frontier.claim(10, lease_seconds=30)} == {"b.test"}
    assert "held until" in crawl_cli("hosts", str(crawl.pk))
    event = crawl.events.get(kind=CrawlEvent.Kind.HOST_HELD)
    assert event.user == user and event.detail == "a.test for 120 min"

    assert crawl_cli("release-host", str(crawl.pk), "a.test").strip() == "a.test released"
    assert crawl.events.filter(kind=CrawlEvent.Kind.HOST_RELEASED, detail="a.test").exists()
    dropped = crawl_cli("drop-host", str(crawl.pk), "a.test")
    assert dropped.strip() == "a.test: 3 queued request(s) dropped"
    assert frontier.stats()["cancelled"] == 3
    assert crawl.events.filter(kind=CrawlEvent.Kind.HOST_DROPPED).count() == 1


def test_the_cli_holds_until_a_time(user):
    crawl = running(user, "a.test")
    when = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0, tzinfo=None)
    out = crawl_cli("hold-host", str(crawl.pk), "a.test", "--until", when.isoformat())
    held = datetime.strptime(out.strip()[len("a.test held until ") :], "%Y-%m-%d %H:%M:%S UTC")
    assert abs(held - when) < timedelta(seconds=5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hold-host", "{id}", "a.test", "--until", "0m"], "minutes: hold a host from 1 to"),
        (["hold-host", "{id}", "a.test", "--until", "2000-01-01T00:00"], "minutes: hold a host"),
        (["drop-host", "{id}", "a b"], "host: 'a b' is not a host name"),
        (["release-host", "999999", "a.test"], "no crawl with id 999999"),
        (["drop-host", "{id}", "a.test", "--user", "nobody"], "no user named 'nobody'"),
    ],
)
def test_a_bad_host_command_says_what_is_wrong(user, args, message):
    crawl = running(user, "a.test")
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        crawl_cli(*(arg.format(id=crawl.pk) for arg in args))
    assert Frontier(crawl.pk).stats()["queued"] == 3
    assert not crawl.events.filter(kind__startswith="host_").exists()


def test_an_unreadable_until_is_refused_by_name(user):
    crawl = running(user, "a.test")
    with pytest.raises(CommandError, match="--until: 'soonish' is neither a duration"):
        crawl_cli("hold-host", str(crawl.pk), "a.test", "--until", "soonish")
    assert not crawl.events.filter(kind__startswith="host_").exists()
