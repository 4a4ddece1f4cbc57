"""A crawl run again is compared with the run it came from, and "Compare with another crawl"
offers the earlier run of the same site: the operator's "what changed since the last run"."""

from __future__ import annotations

import lxml.html
import pytest

from crawls import services
from crawls.models import Change
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import pages_site

pytestmark = pytest.mark.django_db

HOME = '<html><body><a href="/a">a</a></body></html>'


def selected(html: str, select_id: str) -> str:
    """The value a browser shows chosen: the selected option, else the first."""
    options = lxml.html.fromstring(html).xpath(f'//select[@id="{select_id}"]/option')
    chosen = [option for option in options if option.get("selected") is not None]
    return (chosen or options)[0].get("value")


def test_run_again_is_compared_with_the_run_it_came_from(user, user_client, make_site):
    pages = {"/": HOME, "/a": "<p>one</p>"}
    site = make_site(pages_site(pages))
    first = drive(start_site_crawl(user, site))
    again = services.crawl_run_again(crawl=first, user=user)
    assert again.baseline_id == first.pk
    pages["/a"] = "<p>two</p>"
    services.crawl_start(crawl=again, user=user)
    again = drive(again)
    changed = again.pages.get(url=site.url + "/a")
    assert changed.change == Change.CHANGED
    detail = user_client.get(changed.get_absolute_url()).content.decode()
    assert "Changed since the last run" in detail
    crawl_page = user_client.get(again.get_absolute_url()).content.decode()
    assert f"Compare with the last run (#{first.pk})" in crawl_page


def test_a_draft_run_again_from_a_draft_has_no_baseline(user):
    draft = services.crawl_create(user=user, name="d", seeds=["http://127.0.0.1:9/"])
    assert services.crawl_run_again(crawl=draft, user=user).baseline_id is None


def test_compare_with_another_crawl_offers_the_earlier_run_of_the_same_site(
    user, user_client, make_site
):
    site = make_site(pages_site({"/": HOME, "/a": "<p>a</p>"}))
    earlier = drive(start_site_crawl(user, site))
    later = drive(start_site_crawl(user, site))
    # The newest crawl of all is of another site: it used to be preselected as "Earlier".
    services.crawl_create(user=user, name="other", seeds=["http://127.0.0.1:9/"])
    page = user_client.get(later.get_absolute_url()).content.decode()
    (href,) = lxml.html.fromstring(page).xpath(
        '//a[normalize-space()="Compare with another crawl"]/@href'
    )
    html = user_client.get(href).content.decode()
    assert selected(html, "c-a") == str(earlier.pk)
    assert selected(html, "c-b") == str(later.pk)


def test_with_no_earlier_run_nothing_is_preselected_as_earlier(user, user_client, make_site):
    site = make_site(pages_site({"/": HOME, "/a": "<p>a</p>"}))
    only = drive(start_site_crawl(user, site))
    services.crawl_create(user=user, name="other", seeds=["http://127.0.0.1:9/"])
    html = user_client.get(f"/crawls/compare/?b={only.pk}").content.decode()
    assert selected(html, "c-a") == ""
    assert selected(html, "c-b") == str(only.pk)
