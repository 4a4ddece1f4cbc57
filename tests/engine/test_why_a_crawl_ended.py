"""Why a crawl ended, in one line, recorded where it ends: finished (every URL it scheduled
done), max pages reached (links the cap refused), cancelled by whom with how much left, failed
and why; a running crawl nobody fetches is stalled. Progress never reads 100 % for work left
undone. The list, the page, the API and webhooks read the same line (browser:
tests/dashboard/test_browser_why_crawls_ended.py)."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from crawls import services
from crawls.engine import ending, live
from crawls.engine.slices import run_slice
from crawls.models import CrawlState, EndReason, Webhook
from crawls.webhooks import payload_for
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import pages_site

pytestmark = pytest.mark.django_db


def page(*links: str) -> str:
    return "<html><body>" + "".join(f'<a href="{href}">x</a>' for href in links) + "</body></html>"


def site_of(make_site, links: int = 8):
    children = [f"/p{n}" for n in range(links)]
    return make_site(pages_site({"/": page(*children), **{c: page() for c in children}}))


def read_everywhere(crawl, client: Client) -> tuple[str, str, str, dict]:
    """The line as the list, the page and the API show it, and the snapshot's progress."""
    listing = client.get("/").content.decode()
    detail = client.get(f"/crawls/{crawl.pk}/").content.decode()
    api = client.get(f"/api/crawls/{crawl.pk}/").json()
    assert api["end_reason"] == crawl.end_reason
    return listing, detail, api["end_line"], live.snapshot(crawl)


def test_a_crawl_that_did_every_url_reads_finished_at_100_percent(
    user, user_client, make_site, quick_slices
):
    crawl = drive(start_site_crawl(user, site_of(make_site)))
    assert crawl.state == CrawlState.FINISHED and crawl.end_reason == EndReason.FINISHED
    assert crawl.end_line == "Finished: every URL it scheduled was done (9 answered, 0 errors)."
    listing, detail, api_line, snap = read_everywhere(crawl, user_client)
    assert crawl.end_line in listing and crawl.end_line in detail and api_line == crawl.end_line
    assert snap["progress"]["percent"] == 100
    assert snap["end"] == {"reason": "finished", "line": crawl.end_line}
    # Not the "0.0 pages/s" of a crawl that fetches nothing now: its average.
    assert snap["rate_average"] is True and snap["rate"] > 0


def test_a_crawl_stopped_by_max_pages_says_so_and_does_not_read_100(
    user, user_client, make_site, quick_slices
):
    crawl = drive(start_site_crawl(user, site_of(make_site), max_pages=4))
    assert crawl.state == CrawlState.FINISHED and crawl.end_reason == EndReason.MAX_PAGES
    assert crawl.end_line.startswith("Max pages reached: 4 URLs scheduled, the cap of 4; 5 links")
    listing, detail, api_line, snap = read_everywhere(crawl, user_client)
    assert crawl.end_line in listing and crawl.end_line in detail and api_line == crawl.end_line
    assert snap["progress"]["percent"] == 99


def test_a_cancelled_crawl_says_who_cancelled_it_and_how_much_was_left(
    user, user_client, make_site
):
    crawl = start_site_crawl(user, site_of(make_site, links=30))
    services.crawl_add_seeds(crawl=crawl, urls=[crawl.seeds[0] + f"p{n}" for n in range(30)])
    services.crawl_cancel(crawl=crawl, user=user)
    crawl.refresh_from_db()
    assert crawl.end_reason == EndReason.CANCELLED
    assert crawl.end_line == (
        "Cancelled by alice with 31 requests left undone (0 of 31 requests done)."
    )
    listing, detail, api_line, snap = read_everywhere(crawl, user_client)
    assert crawl.end_line in listing and crawl.end_line in detail and api_line == crawl.end_line
    # Before, "0 of 0 done (0%)" or, with some done, "72 of 72 done (100%)": the dropped
    # requests are work known and left undone.
    assert snap["progress"]["known"] == 31 and snap["progress"]["percent"] == 0
    events = crawl.events.filter(kind="cancelled")
    assert events.get().detail == crawl.end_line


def test_a_crawl_cancelled_after_some_pages_never_reads_100(user, make_site, quick_slices):
    pages = pages_site({"/": page(*[f"/p{n}" for n in range(20)])})

    def slow(request):
        time.sleep(0.1)
        return pages(request)

    crawl = start_site_crawl(user, make_site(slow), threads=1)
    run_slice(crawl.pk, "one", budget_seconds=0.5)
    services.crawl_cancel(crawl=crawl, user=None)
    crawl.refresh_from_db()
    progress = live.snapshot(crawl)["progress"]
    assert 0 < progress["done"] < progress["known"] == 21
    assert progress["percent"] < 100
    assert crawl.end_line.startswith("Cancelled with no user named with ")


def test_a_crawl_of_a_dead_host_fails_and_says_why(user, user_client, quick_slices):
    crawl = services.crawl_create(
        user=user, name="dead", seeds=["http://127.0.0.1:9/"], obey_robots=False, max_retries=0
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FAILED and crawl.end_reason == EndReason.FAILED
    assert crawl.end_line.startswith("Failed: no page could be fetched: ")
    listing, detail, api_line, snap = read_everywhere(crawl, user_client)
    # Every request it knew was tried and none answered: 100 % done, and the line says failed.
    assert api_line == crawl.end_line and snap["progress"]["percent"] == 100


def test_webhooks_carry_the_reason(user, make_site, quick_slices):
    crawl = drive(start_site_crawl(user, site_of(make_site), max_pages=4))
    Webhook.objects.create(crawl=crawl, url="http://127.0.0.1:9/hook", secret="s")
    payload = payload_for(crawl, "finished", 1)
    assert payload["crawl"]["end_reason"] == "max_pages"
    assert payload["crawl"]["end_line"] == crawl.end_line


def test_a_running_crawl_that_no_worker_fetches_reads_stalled(user, make_site):
    crawl = start_site_crawl(user, site_of(make_site))
    snap = live.snapshot(crawl)
    assert snap["waiting"] and snap["end"]["reason"] == "stalled"
    assert snap["end"]["line"].startswith("Stalled: 1 requests wait and no worker is fetching")


@pytest.mark.parametrize("requests", [2, 3])
def test_max_pages_reached_counts_the_place_a_missing_sitemap_held(requests):
    # Cap 3: the seed and its guessed /sitemap.xml held two places, one link the third, and
    # three links were refused; the sitemap's 404 then took it back out of the requests (2),
    # or a later link took its place (3). Either way the cap stopped the crawl.
    stats = {"requests": requests, "sitemaps_missing": 1, "dropped": 3}
    assert ending.finished_reason(stats, max_pages=3) == EndReason.MAX_PAGES
    assert ending.finished_reason({**stats, "dropped": 0}, max_pages=3) == EndReason.FINISHED
