"""The "render JavaScript" option on the new-crawl page: where Chromium is missing the option
says so, with the command that installs it, and a crawl that asks for it is refused when
saved; crawls that do not render are not affected."""

from __future__ import annotations

import pytest
from django.urls import reverse

from crawls import services
from crawls.models import Channel, Crawl
from tests.support.crawling import drive, fetched_paths, start_site_crawl
from tests.support.sites import pages_site

pytestmark = pytest.mark.django_db

NOWHERE = "/nonexistent/chromium"


def form_data(**changes) -> dict:
    data = {
        "name": "spa",
        "channel": Channel.default().pk,
        "seeds": "http://127.0.0.1:9/",
        "max_depth": 2,
        "max_pages": 10,
        "priority": 0,
        "threads": 2,
        "slices": 1,
        "timeout": 10,
        "max_bytes": 1_000_000,
        "max_retries": 1,
        "host_concurrency": 0,
    }
    data.update(changes)
    return data


def test_the_form_says_chromium_is_missing_and_how_to_install_it(user_client, settings):
    settings.CRAWLHUB_CHROMIUM = NOWHERE
    page = user_client.get(reverse("crawl_new")).content.decode()
    assert "Render JavaScript" in page
    assert "Not available here" in page
    assert f"CRAWLHUB_CHROMIUM is &#x27;{NOWHERE}&#x27;" in page
    assert "playwright install chromium" in page


def test_a_crawl_that_renders_is_refused_when_chromium_is_missing(user_client, settings):
    settings.CRAWLHUB_CHROMIUM = NOWHERE
    answer = user_client.post(reverse("crawl_new"), form_data(render_javascript="true"))
    assert answer.status_code == 200  # the form again, with the error on the option
    page = answer.content.decode()
    assert "is not an executable file" in page
    assert 'id="id_render_javascript-errors"' in page
    assert not Crawl.objects.exists()


def test_a_bad_wait_selector_is_refused_on_the_form(user_client):
    answer = user_client.post(
        reverse("crawl_new"), form_data(render_javascript="false", render_wait_selector="a >>")
    )
    page = answer.content.decode()
    assert "&#x27;a &gt;&gt;&#x27; is not a CSS selector" in page
    assert 'id="id_render_wait_selector-errors"' in page
    assert not Crawl.objects.exists()


def test_the_form_saves_the_option_and_the_detail_page_says_so(user_client, user, settings):
    settings.CRAWLHUB_CHROMIUM = NOWHERE
    answer = user_client.post(reverse("crawl_new"), form_data(render_javascript="false"))
    assert answer.status_code == 302, answer.content.decode()[:2000]
    crawl = Crawl.objects.get()
    assert crawl.render_javascript is False
    detail = user_client.get(crawl.get_absolute_url()).content.decode()
    assert 'id="rendering"' not in detail
    Crawl.objects.filter(pk=crawl.pk).update(
        render_javascript=True, render_wait_selector="#app[data-ready]"
    )
    detail = user_client.get(crawl.get_absolute_url()).content.decode()
    assert "JavaScript rendered, waiting for <code>#app[data-ready]</code>" in detail


def test_plain_crawls_work_without_chromium(user, make_site, settings):
    settings.CRAWLHUB_CHROMIUM = NOWHERE
    site = make_site(pages_site({"/": '<a href="/a">a</a>', "/a": "<title>A</title>"}))
    crawl = drive(start_site_crawl(user, site))
    assert sorted(fetched_paths(crawl)) == ["/", "/a"]
    assert services.rendering_problem().startswith("CRAWLHUB_CHROMIUM is")
