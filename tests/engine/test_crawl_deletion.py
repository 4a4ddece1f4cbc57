"""Deleting a crawl means one thing whichever door it came in by (the crawl's page, the API,
`manage.py crawl delete`, the admin): services.crawl_delete. A crawl that may still fetch is
cancelled first; its rows go; its Redis keys go once that is committed, but for its state,
which says "cancelled" for a while to a slice still finishing a page. A crawl a real worker is
fetching when it is deleted is fetched no more within seconds, and nothing of it comes back."""

from __future__ import annotations

import io
import time

import pytest
from django.core.management import call_command
from rq.registry import StartedJobRegistry

from crawlhub.redis.connections import get_redis
from crawlhub.sample_site import SampleSite
from crawls import services
from crawls.models import Crawl, CrawlDeletion, CrawlEvent, CrawlState, FailedRequest, Page
from tests.support.clients import bearer
from tests.support.crawling import drive, sample_handler, wait_for_progress
from tests.support.sites import pages_site

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def delete_on_the_page(crawl: Crawl, staff, client) -> None:
    response = client.post(f"/crawls/{crawl.pk}/delete/")
    assert response.status_code == 302, response.content[:300]


def delete_by_the_api(crawl: Crawl, staff, client) -> None:
    response = client.delete(f"/api/crawls/{crawl.pk}/", **bearer(staff))
    assert response.status_code == 204, response.content[:300]


def delete_by_the_cli(crawl: Crawl, staff, client) -> None:
    out = io.StringIO()
    call_command("crawl", "delete", str(crawl.pk), "--user", staff.username, stdout=out)
    assert out.getvalue().startswith(f"crawl {crawl.pk} deleted")


def delete_in_the_admin(crawl: Crawl, staff, client) -> None:
    response = client.post(f"/admin/crawls/crawl/{crawl.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302, response.content[:300]


DOORS = [delete_on_the_page, delete_by_the_api, delete_by_the_cli, delete_in_the_admin]


def crawl_keys(pk: int) -> list[bytes]:
    return sorted(get_redis().scan_iter(match=f"ch:{{c{pk}}}:*"))


def crawl_jobs_running(pk: int) -> list[str]:
    """The crawl's slice jobs that RQ has started and not seen end."""
    started = StartedJobRegistry("crawls", connection=get_redis()).get_job_ids(cleanup=False)
    return [job_id for job_id in started if job_id.startswith(f"slice-{pk}-")]


def assert_deleted(pk: int, *, by, was: str) -> None:
    """No row of the crawl is left; its deletion is on the trail; of its Redis keys only the
    state is left, saying "cancelled", for at most services.RETIRED_STATE_SECONDS."""
    assert not Crawl.objects.filter(pk=pk).exists()
    for model in (Page, FailedRequest, CrawlEvent):
        assert not model.objects.filter(crawl_id=pk).exists(), model.__name__
    record = CrawlDeletion.objects.get(crawl_id=pk)
    assert (record.user, record.state) == (by, was)
    # A slice being stopped may still take the live-update throttle (ch:{c<ID>}:publish, gone
    # by itself within live.PUBLISH_EVERY_MS) as it ends: every other key stays gone.
    deadline = time.monotonic() + 2
    while (keys := crawl_keys(pk)) != [f"ch:{{c{pk}}}:state".encode()]:
        assert time.monotonic() < deadline and set(keys) <= {
            f"ch:{{c{pk}}}:state".encode(),
            f"ch:{{c{pk}}}:publish".encode(),
        }, keys
        time.sleep(0.05)
    redis = get_redis()
    assert redis.get(f"ch:{{c{pk}}}:state") == b"cancelled"
    assert 0 < redis.pttl(f"ch:{{c{pk}}}:state") <= services.RETIRED_STATE_SECONDS * 1000


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
def test_every_door_deletes_an_active_and_a_finished_crawl_alike(
    door, staff, staff_client, make_site, fleet
):
    staff.is_superuser = True  # the admin's delete asks for the model's delete permission
    staff.save()
    small = make_site(pages_site({"/": "<title>one</title>"}))
    finished = services.crawl_create(
        user=staff, name="done", seeds=[small.url + "/"], obey_robots=False
    )
    services.crawl_start(crawl=finished, user=staff)
    finished = drive(finished)
    assert finished.state == CrawlState.FINISHED and crawl_keys(finished.pk)

    site = SampleSite(pages=2000, seed=3)
    server = make_site(sample_handler(site, 0.02))
    active = services.crawl_create(
        user=staff,
        name="active",
        seeds=[server.url + "/"],
        obey_robots=False,
        max_pages=100_000,
        max_depth=1000,
        threads=2,
        slices=1,
    )
    services.crawl_start(crawl=active, user=staff)
    fleet.start_worker()
    wait_for_progress(active, 20, fleet)
    assert crawl_jobs_running(active.pk), "no worker is fetching the crawl"

    door(finished, staff, staff_client)
    assert_deleted(finished.pk, by=staff, was=CrawlState.FINISHED)

    door(active, staff, staff_client)
    asked = time.monotonic()
    assert_deleted(active.pk, by=staff, was=CrawlState.CANCELLED)
    # No worker still fetching: its slice ends within seconds, the site hears nothing more.
    while crawl_jobs_running(active.pk):
        assert time.monotonic() - asked < 20, "a slice still runs 20 s after the delete"
        time.sleep(0.1)
    fetched = len(server.log)
    time.sleep(1.5)
    assert len(server.log) == fetched, "the site was fetched after the crawl's slice ended"
    # What the slice did as it ended brought nothing back.
    assert_deleted(active.pk, by=staff, was=CrawlState.CANCELLED)
