"""What the pages say is what crawlhub does: defects an operator found walking through the
dashboard, each held here server side (the browser's own: test_browser_operator_walkthrough.py).
"""

from __future__ import annotations

import django_rq
import lxml.html
import pytest
from django.test import Client

from crawlhub.http.useragents import DEFAULT_USER_AGENT, USER_AGENTS
from crawls import services
from crawls.models import Channel, Crawl, UserAgentMode, WebhookEvent
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db

HOME = '<html><body><a href="/a">a</a><a href="/b">b</a></body></html>'


def setting(client, crawl, label: str) -> str:
    """The value the crawl page's settings panel gives for `label`."""
    html = lxml.html.fromstring(client.get(f"/crawls/{crawl.pk}/").content)
    (dd,) = html.xpath(f'//dl[@id="settings-list"]/div[dt="{label}"]/dd')
    return dd.text_content().strip()


def test_the_user_agent_the_settings_panel_names_is_the_one_the_site_gets(
    user, user_client, make_site, quick_slices
):
    site = make_site(pages_site({"/": HOME, "/a": HOME, "/b": HOME}))
    # The default channel, as a fresh install has it: random mode.
    assert Channel.default().user_agent_mode == UserAgentMode.RANDOM
    crawl = drive(start_site_crawl(user, site))
    sent = {request.headers.get("User-Agent") for request in site.log}
    assert sent <= set(USER_AGENTS) and DEFAULT_USER_AGENT not in sent
    shown = setting(user_client, crawl, "User agent")
    assert "crawlhub's own" not in shown, shown
    assert shown.startswith("not sent: a random browser's per request")

    fixed = services.crawl_create(
        user=user, name="fixed", seeds=[site.url + "/"], user_agent_mode="fixed", obey_robots=False
    )
    services.crawl_start(crawl=fixed, user=user)
    site.log.clear()
    drive(fixed)
    assert {request.headers.get("User-Agent") for request in site.log} == {DEFAULT_USER_AGENT}
    assert setting(user_client, fixed, "User agent") == f"crawlhub's own: {DEFAULT_USER_AGENT}"


def test_a_wrong_password_keeps_the_username_typed(user):
    page = Client().post("/login/", {"username": "alice", "password": "wrong"})
    html = lxml.html.fromstring(page.content)
    assert "didn't match" in page.content.decode()
    assert html.get_element_by_id("id_username").get("value") == "alice"
    assert html.get_element_by_id("id_password").get("autofocus") is not None


def test_add_seeds_that_fail_keep_what_was_typed(user, user_client):
    crawl = services.crawl_create(user=user, name="s", seeds=["http://127.0.0.1:9/"])
    services.crawl_start(crawl=crawl, user=user)
    typed = "https://ok.example/a\nnot a url at all\nhttps://ok.example/b"
    answer = user_client.post(f"/crawls/{crawl.pk}/add-seeds/", {"urls": typed}, follow=True)
    html = lxml.html.fromstring(answer.content)
    assert html.get_element_by_id("id_urls").text_content().strip() == typed
    assert "not a url at all" in html.xpath('string(//*[contains(@class, "error")])') or (
        "not a url at all" in answer.content.decode()
    )
    again = lxml.html.fromstring(user_client.get(f"/crawls/{crawl.pk}/").content)
    assert again.get_element_by_id("id_urls").text_content() == ""  # shown once


def test_in_flight_does_not_claim_every_request_is_being_fetched(user, user_client):
    crawl = services.crawl_create(user=user, name="f", seeds=["http://127.0.0.1:9/"])
    html = lxml.html.fromstring(user_client.get(f"/crawls/{crawl.pk}/").content)
    (box,) = html.xpath('//dl[@id="counters"]/div[dt="In flight"]')
    assert "fetching now" not in box.get("title")
    assert "claimed and not answered yet" in box.get("title")


def test_priority_does_what_its_field_says(user, django_capture_on_commit_callbacks):
    """Its help said workers did not use it. Above 0, a crawl's slices go ahead of the others'."""
    field = Crawl._meta.get_field("priority")
    assert "not yet used" not in field.help_text
    queue = django_rq.get_queue("crawls")
    queue.empty()
    plain = services.crawl_create(user=user, name="plain", seeds=["http://127.0.0.1:9/"])
    urgent = services.crawl_create(
        user=user, name="urgent", seeds=["http://127.0.0.1:9/"], priority=5
    )
    with django_capture_on_commit_callbacks(execute=True):
        services.crawl_start(crawl=plain, user=user)
    with django_capture_on_commit_callbacks(execute=True):
        services.crawl_start(crawl=urgent, user=user)
    crawls_in_order = [queue.fetch_job(job_id).args[0] for job_id in queue.job_ids]
    queue.empty()
    assert crawls_in_order == [urgent.pk] * urgent.slices + [plain.pk] * plain.slices


def test_the_webhook_form_names_its_event_boxes_in_a_fieldset(user_client):
    """ "Events" was one label wrapped around every box, its text after them."""
    html = lxml.html.fromstring(user_client.get("/webhooks/").content)
    (legend,) = html.xpath('//fieldset[@class="choices"]/legend')
    assert legend.text_content() == "Events"
    boxes = html.xpath('//fieldset[@class="choices"]//input[@type="checkbox"][@name="events"]')
    # Finished, failed, cancelled, and alerts (fired or resolved), each with its own label.
    labels = []
    for box in boxes:
        (label,) = html.xpath(f'//label[@for="{box.get("id")}"]')
        labels.append(label.text_content().strip())
    assert labels == list(WebhookEvent.labels)
    assert not html.xpath("//label//label")


def test_a_5xx_out_of_retries_is_pointed_to_where_it_is(user, user_client, make_site, quick_slices):
    """The 5xx bar counted it, the pages browser's 5xx filter could not find it, and nothing
    said it was in the failure queue."""
    site = make_site(
        pages_site(
            {
                "/": '<a href="/down">down</a>',
                "/down": Response(status=500, body="oops"),
            }
        )
    )
    crawl = drive(start_site_crawl(user, site, max_retries=0))
    assert crawl.stats["status_5xx"] == 1 and crawl.failures.count() == 1
    listed = lxml.html.fromstring(
        user_client.get(f"/crawls/{crawl.pk}/pages/?status_class=5xx").content
    )
    note = listed.get_element_by_id("failed-here")
    assert "1 request with this status is in the failure queue" in note.text_content()
    assert note.xpath(".//a/@href") == [f"/crawls/{crawl.pk}/#h-failures"]
    page = lxml.html.fromstring(user_client.get(f"/crawls/{crawl.pk}/").content)
    pointer = page.get_element_by_id("failed-http")
    assert pointer.get("hidden") is None
    assert pointer.text_content().startswith("1 of the 5xx (or 429) in the failure queue")
    assert page.xpath('//ul[@id="status-bars"]//a[.="5xx"]/@href') == [
        f"/crawls/{crawl.pk}/pages/?status_class=5xx"
    ]
