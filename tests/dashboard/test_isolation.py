"""What other users do stays theirs: the Workers page names only your own crawls' jobs, a
channel webhook's delivery log shows only your own crawls' deliveries; and a form's `next`
leads only to a page of this site."""

from __future__ import annotations

import time
from urllib.parse import urljoin, urlsplit

import pytest
from rq import Worker

from crawlhub.redis.connections import get_redis
from crawlhub.sample_site import SampleSite
from crawls import services, webhooks
from crawls.models import Channel, CrawlState, WebhookDelivery
from proxies.models import Proxy
from tests.support.clients import PASSWORD, bearer
from tests.support.crawling import sample_handler

pytestmark = pytest.mark.django_db


def wait_for_page(client, path: str, *, contains: str, refuse: str, timeout: float = 60) -> str:
    """GET path until the page shows `contains`; no page on the way may show `refuse`."""
    deadline = time.monotonic() + timeout
    while True:
        page = client.get(path).content.decode()
        assert refuse not in page, f"{path} shows {refuse!r}"
        if contains in page:
            return page
        assert time.monotonic() < deadline, f"{path} never showed {contains!r}"
        time.sleep(0.2)


def slice_running(crawl_id: int) -> bool:
    jobs = [w.get_current_job() for w in Worker.all(connection=get_redis())]
    return any(job and job.description.startswith(f"crawl {crawl_id} slice") for job in jobs)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_workers_page_names_only_your_own_crawls_jobs(
    user, user_client, other_client, staff_client, fleet, make_site
):
    server = make_site(sample_handler(SampleSite(pages=200, seed=5), 0.3))
    crawl = services.crawl_create(
        user=user,
        name="alice's",
        seeds=[server.url + "/"],
        obey_robots=False,
        max_depth=100,
        threads=1,
        slices=1,
    )
    services.crawl_start(crawl=crawl, user=user)
    fleet.start_worker()
    deadline = time.monotonic() + 120
    while not slice_running(crawl.pk):
        assert time.monotonic() < deadline, "no worker ran the crawl's slice"
        time.sleep(0.2)
    described = f"crawl {crawl.pk} slice"
    # Bob sees a busy worker, not whose crawl or which slice.
    wait_for_page(other_client, "/workers/", contains="<td>busy</td>", refuse=described)
    # The owner and staff see what it is.
    wait_for_page(user_client, "/workers/", contains=described, refuse="<td>busy</td>")
    wait_for_page(staff_client, "/workers/", contains=described, refuse="<td>busy</td>")
    services.crawl_cancel(crawl=crawl, user=user)


@pytest.fixture
def channel_deliveries(user, other_user, staff):
    """A staff webhook on the default channel, with a delivery for a crawl of alice's and one
    for a crawl of bob's, each with its own answer."""
    hook, _ = webhooks.webhook_create(
        user=staff, url="http://127.0.0.1:9/hook", events=["finished"], channel=Channel.default()
    )
    crawls = {}
    for who in (user, other_user):
        crawl = services.crawl_create(user=who, name=f"{who}'s", seeds=["http://127.0.0.1:9/"])
        crawl.state = CrawlState.FINISHED
        crawl.save(update_fields=["state"])
        [delivery_id] = webhooks.crawl_ended(crawl.pk, "finished")
        WebhookDelivery.objects.filter(pk=delivery_id).update(
            status=WebhookDelivery.Status.DELIVERED,
            response_status=200,
            response_snippet=f"answer about {who}'s crawl",
        )
        crawls[who.username] = crawl
    return hook, crawls


def test_a_channel_webhooks_delivery_log_shows_a_user_only_their_own_crawls_deliveries(
    channel_deliveries, user, user_client, other_client, staff_client
):
    hook, crawls = channel_deliveries
    alice, bob = crawls["alice"], crawls["bob"]
    mine = user_client.get(f"/webhooks/{hook.pk}/").content.decode()
    assert f"#{alice.pk}</a>" in mine and "answer about alice&#x27;s crawl" in mine
    assert f"#{bob.pk}</a>" not in mine and "about bob" not in mine
    theirs = other_client.get(f"/webhooks/{hook.pk}/").content.decode()
    assert f"#{bob.pk}</a>" in theirs and "about alice" not in theirs
    everything = staff_client.get(f"/webhooks/{hook.pk}/").content.decode()
    assert f"#{alice.pk}</a>" in everything and f"#{bob.pk}</a>" in everything

    api = user_client.get(f"/api/webhooks/{hook.pk}/", **bearer(user)).json()
    assert [d["crawl"] for d in api["deliveries"]] == [alice.pk]
    assert "about bob" not in str(api)
    staff_api = staff_client.get(f"/api/webhooks/{hook.pk}/").json()
    assert sorted(d["crawl"] for d in staff_api["deliveries"]) == sorted([alice.pk, bob.pk])


# -- next ------------------------------------------------------------------------------------

# Each leads elsewhere when a browser follows it, or cannot be sent in a header at all.
HOSTILE_NEXT = [
    "//elsewhere.example/x",
    "/\\elsewhere.example/x",
    "\\\\elsewhere.example/x",
    "https://elsewhere.example/x",
    "http:elsewhere.example",
    "https:%2F%2Felsewhere.example/x",
    "\t//elsewhere.example/x",
    " //elsewhere.example/x",
    "/\t/elsewhere.example/x",
    "/\n/elsewhere.example/x",
    "///elsewhere.example/x",
    "javascript:alert(1)",
    "/x\r\nLocation: //elsewhere.example/",
    "\u202e//elsewhere.example/x",
    "https://testserver.elsewhere.example/",
    "%2F%2Felsewhere.example/x",
    "%09//elsewhere.example/x",
]
# Encoded slashes inside a path stay a path: a browser does not decode them into a host.
ENCODED_PATHS = ["/%2F%2Felsewhere.example/x", "/%5C%5Celsewhere.example/x", "/%2F/x"]


def location(response) -> str:
    assert response.status_code == 302, response.status_code
    return response["Location"]


def followed_host(url: str, page: str = "http://testserver/crawls/1/") -> str:
    """The host a browser goes to from page with Location: url (WHATWG URL parsing: leading
    C0 controls and spaces dropped, tabs and newlines removed, backslashes read as slashes)."""
    url = url.lstrip("".join(map(chr, range(0x21))))
    url = url.replace("\t", "").replace("\n", "").replace("\r", "").replace("\\", "/")
    return urlsplit(urljoin(page, url)).netloc


def test_the_browser_model_sees_where_the_hostile_values_lead():
    assert followed_host("/\\elsewhere.example/x") == "elsewhere.example"
    assert followed_host("\t//elsewhere.example/x") == "elsewhere.example"
    assert followed_host("/\t/elsewhere.example/x") == "elsewhere.example"
    assert followed_host("/%2F%2Felsewhere.example/x") == "testserver"


@pytest.mark.parametrize("hostile", HOSTILE_NEXT)
def test_a_crawl_action_goes_back_only_to_a_page_of_this_site(user, user_client, hostile):
    crawl = services.crawl_create(user=user, name="c", seeds=["http://127.0.0.1:9/"])
    response = user_client.post(f"/crawls/{crawl.pk}/cancel/", {"next": hostile})
    assert location(response) == crawl.get_absolute_url()


@pytest.mark.parametrize("hostile", HOSTILE_NEXT)
def test_a_proxy_action_goes_back_only_to_a_page_of_this_site(staff_client, hostile):
    proxy = Proxy.objects.create(scheme="http", host="10.0.0.1", port=80)
    done = {"next": hostile, "action": "validate", "ids": proxy.pk}
    assert location(staff_client.post("/proxies/action", done)) == "/proxies/"
    # No proxy selected: the form is refused with a message, and the page goes back too.
    refused = {"next": hostile, "action": "validate"}
    assert location(staff_client.post("/proxies/action", refused)) == "/proxies/"


def test_a_next_on_this_site_is_followed(user, user_client, staff_client):
    crawl = services.crawl_create(user=user, name="c", seeds=["http://127.0.0.1:9/"])
    back = "/?state=draft&channel=default"
    response = user_client.post(f"/crawls/{crawl.pk}/cancel/", {"next": back})
    assert location(response) == back
    response = staff_client.post("/proxies/action", {"next": "/proxies/?state=new"})
    assert location(response) == "/proxies/?state=new"


@pytest.mark.parametrize("encoded", ENCODED_PATHS)
def test_encoded_slashes_in_a_path_stay_on_this_site(user, user_client, encoded):
    crawl = services.crawl_create(user=user, name="c", seeds=["http://127.0.0.1:9/"])
    response = user_client.post(f"/crawls/{crawl.pk}/cancel/", {"next": encoded})
    assert followed_host(location(response)) == "testserver"


@pytest.mark.parametrize("hostile", HOSTILE_NEXT)
def test_logging_in_and_out_go_only_to_a_page_of_this_site(user, client, hostile):
    response = client.post("/login/", {"username": "alice", "password": PASSWORD, "next": hostile})
    assert followed_host(location(response)) == "testserver"
    response = client.post("/logout/", {"next": hostile})
    assert followed_host(location(response)) == "testserver"
