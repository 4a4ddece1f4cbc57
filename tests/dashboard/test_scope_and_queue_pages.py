"""The doors of a running crawl's scope change and of its queue view: the Change limits page,
the API and `manage.py crawl` pass the patterns to crawls.services.crawl_change_live (its
behaviour: tests/engine/test_scope_changes.py); the queue view, its API and its command show
what Redis holds, paged by cursor; the crawl's owner and staff only."""

from __future__ import annotations

import io
import json
import re

import lxml.html
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.engine.request import Request
from crawls.models import CrawlEvent
from tests.support.clients import bearer, form_data, post

pytestmark = pytest.mark.django_db


def running(user, **options):
    crawl = services.crawl_create(
        user=user,
        name="scope",
        seeds=["http://a.test/"],
        obey_robots=False,
        max_pages=10_000,
        allowed_domains=["a.test", "b.test", "c.test"],
        **options,
    )
    services.crawl_start(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    frontier.add_seeds([f"http://a.test/s/{i}" for i in range(30)], depth=1)
    frontier.add_seeds([f"http://b.test/k/{i}" for i in range(40)], depth=2)
    frontier.add_seeds([f"http://c.test/k/{i}" for i in range(50)], depth=2, priority=3)
    return crawl


def queued_in_redis(crawl) -> list[Request]:
    frontier = Frontier(crawl.pk)
    return [Request.unpack(m) for m in frontier.redis.zrange(frontier.key("queue"), 0, -1)]


def crawl_cli(*args: str) -> str:
    out = io.StringIO()
    call_command("crawl", *args, stdout=out)
    return out.getvalue()


def texts(html: bytes, xpath: str) -> list[str]:
    return [" ".join(e.text_content().split()) for e in lxml.html.fromstring(html).xpath(xpath)]


# --- Changing the scope -------------------------------------------------------------------


def test_the_change_limits_page_adds_an_exclusion_and_says_what_was_dropped(user_client, user):
    crawl = running(user)
    path = f"/crawls/{crawl.pk}/edit/"
    page = user_client.get(path)
    assert texts(page.content, "//h2[@id='h-scope']") == ["Scope"]
    assert "(121 queued now;" in texts(page.content, "//p[@id='scope-note']")[0]
    data = form_data(user_client, path, exclude_patterns="/s/\n\\.pdf$")
    response = user_client.post(path, data, follow=True)
    said = texts(response.content, "//*[contains(@class, 'messages')]//li")
    assert said == [
        "Settings changed: exclude patterns: none -> /s/, \\.pdf$; 30 queued request(s) dropped: "
        "they no longer fit."
    ], said
    crawl.refresh_from_db()
    assert crawl.exclude_patterns == ["/s/", "\\.pdf$"]
    stats = Frontier(crawl.pk).stats()
    assert (stats["cancelled"], stats["descoped"], stats["queued"]) == (30, 30, 91)
    event = crawl.events.get(kind=CrawlEvent.Kind.CHANGED)
    assert event.user == user and event.detail == said[0].removeprefix(
        "Settings changed: "
    ).removesuffix(".")

    # Removed again: nothing is dropped, and the trail has the old and new value.
    data = form_data(user_client, path, exclude_patterns="\\.pdf$")
    user_client.post(path, data)
    latest = crawl.events.filter(kind=CrawlEvent.Kind.CHANGED).first()
    assert latest.detail.startswith("exclude patterns: /s/, \\.pdf$ -> \\.pdf$; 0 queued")


def test_a_bad_pattern_on_the_page_is_refused_with_the_message_by_its_field(user_client, user):
    crawl = running(user, include_patterns=["a.test|b.test|c.test"])
    path = f"/crawls/{crawl.pk}/edit/"
    data = form_data(user_client, path, include_patterns="(unclosed", exclude_patterns="a{2,1}")
    response = user_client.post(path, data)
    assert response.status_code == 200
    errors = {
        field: texts(response.content, f"//ul[@id='id_{field}-errors']/li")
        for field in ("include_patterns", "exclude_patterns")
    }
    with pytest.raises(ValidationError) as at_creation:
        services.crawl_clean(
            name="x",
            seeds=["http://a.test/"],
            include_patterns=["(unclosed"],
            exclude_patterns=["a{2,1}"],
        )
    assert errors == at_creation.value.message_dict
    crawl.refresh_from_db()
    assert crawl.include_patterns == ["a.test|b.test|c.test"] and crawl.exclude_patterns == []
    assert Frontier(crawl.pk).stats()["cancelled"] == 0


def test_the_api_changes_the_scope_and_returns_what_was_dropped(client, user):
    crawl = running(user)
    auth = bearer(user)
    change = {"exclude_patterns": ["^http://b\\.test/"], "max_pages": 500}
    response = post(client, f"/api/crawls/{crawl.pk}/change/", change, **auth)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["dropped"] == 40 and body["dropping"] is False and body["in_flight"] == 0
    assert body["changed"][:2] == [
        "max pages: 10000 -> 500",
        "exclude patterns: none -> ^http://b\\.test/",
    ]
    assert body["crawl"]["stats"]["cancelled"] == 40
    bad = post(
        client, f"/api/crawls/{crawl.pk}/change/", {"include_patterns": ["ok", "(?<=x)y"]}, **auth
    )
    assert bad.status_code == 400
    [message] = bad.json()["include_patterns"]
    assert message.startswith("line 2: ") and "lookbehind" in message
    nothing = post(client, f"/api/crawls/{crawl.pk}/change/", {}, **auth).json()
    assert nothing["changed"] == [] and nothing["dropped"] is None


def test_the_command_line_adds_and_removes_patterns(user):
    crawl = running(user, exclude_patterns=["\\.zip$"])
    out = crawl_cli("change", str(crawl.pk), "--add-exclude", "/s/", "--user", user.username)
    assert out.splitlines() == [
        "exclude patterns: \\.zip$ -> \\.zip$, /s/",
        "30 queued request(s) dropped: they no longer fit",
    ]
    out = crawl_cli("change", str(crawl.pk), "--remove-exclude", "\\.zip$", "--max-depth", "7")
    assert out.splitlines()[:2] == ["max depth: 3 -> 7", "exclude patterns: \\.zip$, /s/ -> /s/"]
    with pytest.raises(CommandError, match="not one of the crawl's exclude patterns: '/t/'"):
        crawl_cli("change", str(crawl.pk), "--remove-exclude", "/t/")
    with pytest.raises(CommandError, match=r"exclude_patterns: line 2: "):
        crawl_cli("change", str(crawl.pk), "--add-exclude", "(")
    crawl.refresh_from_db()
    assert crawl.exclude_patterns == ["/s/"] and crawl.max_depth == 7


# --- The queue view -------------------------------------------------------------------------


def test_the_queue_page_counts_and_pages_what_redis_holds(user_client, user):
    crawl = running(user)
    Frontier(crawl.pk).claim(3, lease_seconds=60)
    expected = queued_in_redis(crawl)
    path = f"/crawls/{crawl.pk}/queue/"
    first = user_client.get(path + "?size=25")
    assert texts(first.content, "//p[@id='queue-counts']") == [
        f"{len(expected)} queued · 0 retrying"
    ]
    by_host = dict(
        zip(
            texts(first.content, "//table[@id='by-host']//td[1]"),
            map(int, texts(first.content, "//table[@id='by-host']//td[2]")),
            strict=True,
        )
    )
    assert by_host == {"c.test": 50 - 3, "b.test": 40, "a.test": 31}
    by_depth = texts(first.content, "//table[@id='by-depth']//tr/td")
    assert by_depth == ["0", "1", "1", "30", "2", "87"]
    seen, response, screens = [], first, 0
    while True:
        screens += 1
        seen += texts(response.content, "//table[@id='queued']//td[2]")
        more = lxml.html.fromstring(response.content).xpath("//a[@rel='next']/@href")
        if not more:
            break
        response = user_client.get(path + more[0])
        assert response.status_code == 200
    assert seen == [r.url for r in expected] and screens == 5  # 118 requests, 25 a screen
    assert texts(response.content, "//span[@id='position']") == ["about 101–118 of 118"]
    bad = user_client.get(path + "?after=Zm9v")
    assert b"not one of the crawl&#x27;s queue" in bad.content


def test_the_api_and_the_command_line_page_through_the_queue(client, user):
    crawl = running(user)
    expected = [r.url for r in queued_in_redis(crawl)]
    auth = bearer(user)
    body = client.get(f"/api/crawls/{crawl.pk}/queue/?size=50", **auth).json()
    assert body["queued"] == 121 and body["retrying"] == 0
    assert body["by_host"][0] == {"host": "c.test", "queued": 50}
    assert body["by_depth"] == [
        {"depth": 0, "queued": 1},
        {"depth": 1, "queued": 30},
        {"depth": 2, "queued": 90},
    ]
    urls = [r["url"] for r in body["results"]]
    while body["next"]:
        body = client.get(body["next"], **auth).json()
        urls += [r["url"] for r in body["results"]]
    assert urls == expected
    assert client.get(f"/api/crawls/{crawl.pk}/queue/?size=7", **auth).status_code == 400
    bad = client.get(f"/api/crawls/{crawl.pk}/queue/?after=xyz", **auth)
    assert bad.status_code == 400 and "after" in bad.json()

    out = json.loads(crawl_cli("queue", str(crawl.pk), "--json", "--size", "25"))
    assert [r["url"] for r in out["results"]] == expected[:25] and out["next"]
    more = crawl_cli("queue", str(crawl.pk), f"--after={out['next']}", "--size", "25")
    assert re.search(r"^\s+2\s+3\s+" + re.escape(expected[25]) + "$", more, re.M)


# --- Who may ----------------------------------------------------------------------------------


def test_another_user_gets_404_and_staff_may(
    client, user, other_user, other_client, staff_client, staff
):
    crawl = running(user)
    for path in (f"/crawls/{crawl.pk}/queue/", f"/crawls/{crawl.pk}/edit/"):
        assert other_client.get(path).status_code == 404
        assert staff_client.get(path).status_code == 200
    response = other_client.post(f"/crawls/{crawl.pk}/edit/", {"exclude_patterns": ".*"})
    assert response.status_code == 404
    other = bearer(other_user)
    assert client.get(f"/api/crawls/{crawl.pk}/queue/", **other).status_code == 404
    response = post(
        client, f"/api/crawls/{crawl.pk}/change/", {"exclude_patterns": [".*"]}, **other
    )
    assert response.status_code == 404
    assert client.get(f"/api/crawls/{crawl.pk}/queue/").status_code == 401
    crawl.refresh_from_db()
    assert crawl.exclude_patterns == [] and Frontier(crawl.pk).stats()["cancelled"] == 0
    assert client.get(f"/api/crawls/{crawl.pk}/queue/", **bearer(staff)).status_code == 200
