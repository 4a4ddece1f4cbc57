"""The crawl list's query without a browser (tests/dashboard/test_browser_everywhere.py has
it in one): search by name, seed or number, filters, order, staff's owner column; and a
request that asks for nothing that exists is the list as usual, not an error."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from crawls import services
from crawls.models import Crawl, CrawlState

pytestmark = pytest.mark.django_db


def a_crawl(user, name: str, seed: str = "http://shop.test/", **fields) -> Crawl:
    crawl = services.crawl_create(user=user, name=name, seeds=[seed])
    if fields:
        Crawl.objects.filter(pk=crawl.pk).update(**fields)
    return crawl


def names(response) -> list[str]:
    return [crawl.name for crawl, *_ in response.context["rows"]]


def test_search_finds_a_crawl_by_name_seed_or_number(user, user_client):
    shop = a_crawl(user, "Shop prices")
    a_crawl(user, "Docs", seed="http://docs.example.org/start")
    assert names(user_client.get("/?q=shop+PRICES")) == ["Shop prices"]
    assert names(user_client.get("/?q=docs.example.org")) == ["Docs"]
    assert names(user_client.get(f"/?q=%23{shop.pk}")) == ["Shop prices"]


def test_a_state_or_order_that_does_not_exist_is_ignored(user, user_client):
    a_crawl(user, "one", state=CrawlState.FINISHED)
    response = user_client.get("/?state=bogus&sort=nonsense&q=%23999999999999999")
    assert response.status_code == 200
    assert "No crawls match" in response.content.decode()
    assert names(user_client.get("/?state=bogus&sort=nonsense")) == ["one"]


def test_order_by_duration_puts_crawls_not_started_last(user, user_client):
    now = timezone.now()
    a_crawl(user, "never started")
    a_crawl(user, "short", started_at=now - timedelta(seconds=5), finished_at=now)
    a_crawl(user, "long", started_at=now - timedelta(hours=1), finished_at=now)
    assert names(user_client.get("/?sort=longest")) == ["long", "short", "never started"]
    assert names(user_client.get("/?sort=shortest")) == ["short", "long", "never started"]


def test_staff_see_owners_and_find_crawls_by_owner(user, other_user, staff_client, user_client):
    a_crawl(user, "alice's")
    a_crawl(other_user, "bob's")
    page = staff_client.get("/?q=alice").content.decode()
    assert "<th>Owner</th>" in page and "alice&#x27;s" in page and "bob&#x27;s" not in page
    assert "<th>Owner</th>" not in user_client.get("/").content.decode()
    assert names(user_client.get("/?sort=owner")) == ["alice's"]  # no owner order: the default


def test_the_workers_page_hint_says_run(user_client):
    page = user_client.get("/workers/").content.decode()
    assert "No worker is running" in page and "./run up" in page and "manage.py" not in page


def test_a_finished_crawl_reads_100_percent_in_the_list_whatever_its_max_pages(user, user_client):
    """Progress is done against known work, as on the crawl's page: 13 answered of 13 known,
    not 13 requests of a max of 60."""
    now = timezone.now()
    a_crawl(
        user,
        "small site",
        max_pages=60,
        state=CrawlState.FINISHED,
        started_at=now,
        finished_at=now,
        stats={"requests": 13, "responses": 12, "errors": 1},
    )
    response = user_client.get("/")
    ((crawl, stats, progress, duration),) = response.context["rows"]
    assert (progress["done"], progress["known"], progress["percent"]) == (13, 13, 100)
    assert duration == timedelta(0)
    html = response.content.decode()
    assert 'data-field="percent">100%<' in html and 'max="100" value="100"' in html
