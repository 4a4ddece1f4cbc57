"""A crawl's log through the API (/api/crawls/<id>/log/) and its page (/crawls/<id>/log/):
filtered and paged as crawls/logs.py reads it, for the crawl's owner and staff only. The
lines' content is tests/engine/test_crawl_log.py; the page in a browser is
tests/dashboard/test_browser_crawl_log.py."""

from __future__ import annotations

import pytest
from django.test import Client

from crawls import services
from crawls.engine import crawl_log
from crawls.models import CrawlEvent
from tests.support.clients import bearer
from tests.support.crawling import make_crawl

Kind, Level = CrawlEvent.Kind, CrawlEvent.Level
pytestmark = pytest.mark.django_db


@pytest.fixture
def crawl(user):
    crawl = make_crawl(user, "logged")
    crawl_log.write([crawl_log.line(crawl.pk, Kind.SLICE, f"slice s{n} started") for n in range(5)])
    crawl_log.write(
        [
            crawl_log.line(
                crawl.pk,
                Kind.SLOWED,
                "slowed to one request every 2 s: it answered HTTP 429",
                host="a.test",
                level=Level.WARNING,
            ),
            crawl_log.line(
                crawl.pk,
                Kind.GAVE_UP,
                "3 requests given up after 2 attempts, to the failure queue: <b>timeout</b>",
                host="b.test",
                level=Level.ERROR,
            ),
        ]
    )
    services.crawl_start(crawl=crawl, user=user)
    return crawl


def test_the_api_gives_the_log_newest_first_with_both_kinds_of_line(client, user, crawl):
    answer = client.get(f"/api/crawls/{crawl.pk}/log/", **bearer(user)).json()
    lines = answer["results"]
    assert [line["kind"] for line in lines] == [
        "started",
        "gave_up",
        "slowed",
        *["slice"] * 5,
        "created",
    ]
    assert lines[0]["user"] == user.username and lines[1]["user"] is None
    assert lines[1] == {
        "id": lines[1]["id"],
        "at": lines[1]["at"],
        "kind": "gave_up",
        "kind_label": "Retries given up",
        "level": "error",
        "host": "b.test",
        "text": "3 requests given up after 2 attempts, to the failure queue: <b>timeout</b>",
        "user": None,
    }
    assert answer["next"] is None
    assert answer["removed"] == 0 and answer["kept_per_level"] == 5000


def test_the_api_filters_and_pages_the_log(client, user, crawl):
    auth, url = bearer(user), f"/api/crawls/{crawl.pk}/log/"

    def kinds(query: str) -> list[str]:
        return [line["kind"] for line in client.get(url + query, **auth).json()["results"]]

    assert kinds("?level=warning") == ["gave_up", "slowed"]
    assert kinds("?level=error") == ["gave_up"]
    assert kinds("?kind=actions") == ["started", "created"]
    assert kinds("?kind=hosts&host=a.test") == ["slowed"]
    assert kinds("?q=TIMEOUT") == ["gave_up"]
    first = client.get(url + "?kind=slices&size=2", **auth).json()
    assert [line["text"] for line in first["results"]] == ["slice s4 started", "slice s3 started"]
    second = client.get(first["next"], **auth).json()
    assert "kind=slices" in first["next"]
    assert [line["text"] for line in second["results"]] == ["slice s2 started", "slice s1 started"]
    newest = first["results"][0]["id"]
    crawl_log.write([crawl_log.line(crawl.pk, Kind.SLICE, "slice s5 started")])
    since = client.get(f"{url}?after={newest}&kind=slices", **auth).json()["results"]
    assert [line["text"] for line in since] == ["slice s5 started"]


def test_a_bad_filter_is_a_400_naming_each_parameter(client, user, crawl):
    answer = client.get(
        f"/api/crawls/{crawl.pk}/log/?level=loud&kind=nope&before=x", **bearer(user)
    )
    assert answer.status_code == 400
    assert set(answer.json()) >= {"level", "kind"}
    assert client.get(f"/api/crawls/{crawl.pk}/log/?before=x", **bearer(user)).status_code == 400


def test_another_users_crawl_log_is_404_on_the_api_and_the_page(client, crawl, other_user, staff):
    assert client.get(f"/api/crawls/{crawl.pk}/log/", **bearer(other_user)).status_code == 404
    assert client.get(f"/api/crawls/{crawl.pk}/log/").status_code == 401
    assert client.get(f"/api/crawls/{crawl.pk}/log/", **bearer(staff)).status_code == 200
    other = Client()
    other.force_login(other_user)
    assert other.get(f"/crawls/{crawl.pk}/log/").status_code == 404
    anonymous = Client().get(f"/crawls/{crawl.pk}/log/")
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]


def test_the_log_page_shows_the_filtered_lines_and_escapes_what_sites_sent(user_client, crawl):
    page = user_client.get(f"/crawls/{crawl.pk}/log/?level=error").content.decode()
    assert "3 requests given up after 2 attempts" in page
    assert "&lt;b&gt;timeout&lt;/b&gt;" in page and "<b>timeout</b>" not in page
    assert "slowed to one request" not in page
    bad = user_client.get(f"/crawls/{crawl.pk}/log/?level=loud").content.decode()
    assert "level: &#x27;loud&#x27; is not a level" in bad
    detail = user_client.get(f"/crawls/{crawl.pk}/").content.decode()
    assert 'id="h-log"' in detail and "slowed to one request every 2 s" in detail


def test_the_admin_shows_a_crawls_audit_trail_not_its_thousands_of_worker_lines(
    staff_client, staff, crawl
):
    staff.is_superuser = True  # the admin's change page of a crawl
    staff.save()
    crawl_log.write([crawl_log.line(crawl.pk, Kind.ERROR, f"line {n}") for n in range(1500)])
    page = staff_client.get(f"/admin/crawls/crawl/{crawl.pk}/change/")
    assert page.status_code == 200
    [events] = [f for f in page.context["inline_admin_formsets"] if f.formset.prefix == "events"]
    assert [form.instance.kind for form in events.formset.forms] == ["started", "created"]
