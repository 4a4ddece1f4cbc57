"""The crawl's host view: every host's queue, in flight, done, errors, delay, next allowed time
and why it is slowed; an operator (the crawl's owner, or staff) holds, releases or drops one,
through the page's forms with their CSRF token, each action in the crawl's events.

The frontier's side of hold, release and drop is in tests/engine/test_politeness.py."""

import re

import lxml.html
import pytest
from django.test import Client

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlEvent

pytestmark = pytest.mark.django_db


def running(user, *hosts: str):
    seeds = [f"http://{host}/{n}" for host in hosts for n in range(3)]
    crawl = services.crawl_create(user=user, name="hosts", seeds=seeds, obey_robots=False)
    services.crawl_start(crawl=crawl, user=user)
    return crawl


def strict_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def post_form(client: Client, crawl, action: str, host: str, **fields):
    """Submit the host view's `action` form of `host`, token included, as a browser would."""
    page = client.get(f"/crawls/{crawl.pk}/hosts/")
    assert page.status_code == 200
    for form in lxml.html.fromstring(page.content).forms:
        if form.action.endswith(f"/{action}/") and form.fields.get("host") == host:
            values = dict(form.form_values())
            return client.post(form.action, {**values, **fields})
    raise AssertionError(f"no {action} form for {host}")


def test_the_host_view_shows_what_each_host_is_doing(user, user_client):
    crawl = running(user, "a.test", "b.test")
    frontier = Frontier(crawl.pk)
    [claimed] = frontier.claim(1, lease_seconds=30)
    frontier.pushed_back(claimed.host, wait=30, why="HTTP 429, Retry-After 30 s")
    page = user_client.get(f"/crawls/{crawl.pk}/hosts/").content.decode()
    row = re.search(rf"<tr>\s*<td class=\"url\">{claimed.host}</td>.*?</tr>", page, re.S)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[1:5] == ["2", "1", "0", "0"]  # queued, in flight, done, no answer
    # Not "Errors": the crawl's Errors counts requests, this every attempt without an answer.
    heads = re.findall(r"<th[^>]*>(.*?)</th>", page)
    assert "Errors" not in heads and "Attempts without an answer" in heads
    assert cells[5] == "30"  # its delay now, from the Retry-After
    # Next allowed, some 30 s ahead: a <time> in the one date style (static/js/dates.js).
    assert re.fullmatch(
        r'<time datetime="[^"]+\+00:00" title="[^"]+">[-\d]{10} [:\d]{8}</time>', cells[6]
    )
    assert cells[7] == "HTTP 429, Retry-After 30 s"
    assert "Every host" in user_client.get(f"/crawls/{crawl.pk}/").content.decode()


def test_an_owner_holds_and_releases_a_host_through_the_page(user):
    crawl = running(user, "a.test", "b.test")
    client = strict_client(user)
    response = post_form(client, crawl, "host-hold", "a.test", minutes="5")
    assert response.status_code == 302
    frontier = Frontier(crawl.pk)
    assert {r.host for r in frontier.claim(10, lease_seconds=30)} == {"b.test"}
    event = crawl.events.get(kind=CrawlEvent.Kind.HOST_HELD)
    assert event.user == user and event.detail == "a.test for 5 min"
    page = client.get(f"/crawls/{crawl.pk}/hosts/").content.decode()
    assert "Release a.test" in page

    assert post_form(client, crawl, "host-release", "a.test").status_code == 302
    assert {r.host for r in frontier.claim(10, lease_seconds=30)} == {"a.test"}
    assert crawl.events.filter(kind=CrawlEvent.Kind.HOST_RELEASED, detail="a.test").exists()


def test_drop_queue_asks_first_and_drops_nothing_on_the_first_click(user):
    """One click on "Drop queue" used to throw away every queued request of the host."""
    crawl = running(user, "a.test", "b.test")
    client = strict_client(user)
    response = post_form(client, crawl, "host-drop", "a.test")
    assert response.status_code == 302
    assert Frontier(crawl.pk).stats()["queued"] == 6
    assert not crawl.events.filter(kind=CrawlEvent.Kind.HOST_DROPPED).exists()
    page = client.get(response["Location"]).content.decode()
    assert "Drop the 3 queued requests of a.test?" in page
    html = lxml.html.fromstring(page)
    (confirm,) = [f for f in html.forms if f.fields.get("confirm") == "yes"]
    assert confirm.fields["host"] == "a.test"
    # "Keep them" goes back to the host view, which asks nothing more.
    assert html.xpath('//a[normalize-space()="Keep them"]/@href') == [f"/crawls/{crawl.pk}/hosts/"]


def test_staff_drops_a_host_s_queue_and_it_is_counted(user, staff):
    crawl = running(user, "a.test", "b.test")
    client = strict_client(staff)
    response = post_form(client, crawl, "host-drop", "a.test")
    assert Frontier(crawl.pk).stats()["cancelled"] == 0  # asked first
    response = post_form(client, crawl, "host-drop", "a.test", confirm="yes")
    assert response.status_code == 302
    stats = Frontier(crawl.pk).stats()
    assert stats["cancelled"] == 3 and stats["queued"] == 3
    event = crawl.events.get(kind=CrawlEvent.Kind.HOST_DROPPED)
    assert event.user == staff and event.detail == "a.test: 3 request(s) dropped"


def test_host_actions_need_the_csrf_token_login_and_the_crawl(user, other_user):
    crawl = running(user, "a.test")
    url = f"/crawls/{crawl.pk}/host-drop/"
    assert strict_client(user).post(url, {"host": "a.test"}).status_code == 403
    anonymous = Client().post(url, {"host": "a.test"})
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    assert Client().get(f"/crawls/{crawl.pk}/hosts/").status_code == 302
    other = Client()
    other.force_login(other_user)
    assert other.get(f"/crawls/{crawl.pk}/hosts/").status_code == 404
    assert other.post(url, {"host": "a.test"}).status_code == 404
    assert Frontier(crawl.pk).stats()["queued"] == 3
    assert not crawl.events.filter(kind=CrawlEvent.Kind.HOST_DROPPED).exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"host": "a.test", "minutes": "soon"}, "minutes: &#x27;soon&#x27; is not a number."),
        ({"host": "a.test", "minutes": "0"}, "minutes: hold a host from 1 to 10080 minutes."),
        ({"host": "", "minutes": "5"}, "host: say which host"),
        ({"host": "a b/c", "minutes": "5"}, "host: &#x27;a b/c&#x27; is not a host name"),
    ],
)
def test_a_bad_hold_says_what_is_wrong(user, user_client, fields, message):
    crawl = running(user, "a.test")
    response = user_client.post(f"/crawls/{crawl.pk}/host-hold/", fields, follow=True)
    assert message in response.content.decode()
    assert not crawl.events.filter(kind=CrawlEvent.Kind.HOST_HELD).exists()


def test_a_crawl_that_is_over_has_no_host_actions(user, user_client):
    crawl = running(user, "a.test")
    services.crawl_cancel(crawl=crawl, user=user)
    page = user_client.get(f"/crawls/{crawl.pk}/hosts/").content.decode()
    assert "host-hold" not in page
    response = user_client.post(
        f"/crawls/{crawl.pk}/host-hold/",
        {"host": "a.test", "minutes": "5"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 409
    assert "cancelled crawl has no hosts" in response.json()["message"]
