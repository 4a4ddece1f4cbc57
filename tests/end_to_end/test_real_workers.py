"""Crawls on real RQ worker processes: kill -9, pause, resume, cancel, Redis restarts.

Nothing is lost: the crawl ends with exactly the expected pages and exact counters.
"""

import random
import time
from collections import Counter

import pytest

from crawlhub.sample_site import SampleSite
from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support.crawling import (
    assert_exact,
    refetched,
    sample_handler,
    wait_for_progress,
    wait_for_state,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def start_sample_crawl(user, make_site, *, pages: int, delay: float, **options):
    site = SampleSite(pages=pages, seed=3)
    server = make_site(sample_handler(site, delay))
    crawl = services.crawl_create(
        user=user, name="chaos", seeds=[server.url + "/"], obey_robots=False, max_pages=100_000,
        max_depth=1000, max_retries=1, threads=4, slices=2, **options,
    )  # fmt: skip
    services.crawl_start(crawl=crawl, user=user)
    return site, server, crawl


@pytest.mark.chaos
def test_kill_9_of_workers_again_and_again_loses_nothing(user, make_site, fleet):
    site, server, crawl = start_sample_crawl(user, make_site, pages=1500, delay=0.004)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    rng = random.Random(5)
    for round_ in range(4):
        wait_for_progress(crawl, 150 * (round_ + 1), fleet)
        fleet.kill9(rng.choice(fleet.alive()))
        fleet.keep_alive()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180, fleet=fleet)
    assert_exact(crawl, site)
    # Only requests whose worker died may have been fetched twice.
    assert fleet.killed_horses >= 2, "the kills hit no running slice"
    twice = refetched(crawl, site, server)
    print("repeated fetches:", twice)
    assert 0 <= twice <= 4 * 2 * 4 * 2  # kills * slices * threads * 2


def test_pause_stops_fetching_and_resume_finishes_exactly(user, make_site, fleet):
    site, server, crawl = start_sample_crawl(user, make_site, pages=1200, delay=0.01)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    wait_for_progress(crawl, 100, fleet)
    paused_at = time.monotonic()
    services.crawl_pause(crawl=crawl, user=user)
    crawl = wait_for_state(crawl, {CrawlState.PAUSED}, timeout=30, fleet=fleet)
    settled = time.monotonic()
    assert settled - paused_at < 2.5, "pause took too long to stop the fetches"
    seen = len(server.log)
    time.sleep(2.5)
    assert len(server.log) == seen, "the site was fetched after the pause settled"
    last_fetch = max(request.at for request in server.log)
    assert last_fetch - paused_at < 2.0, "a fetch started more than 2 s after the pause"
    stats = Frontier(crawl.pk).stats()
    assert stats["in_flight"] == 0 and stats["queued"] > 0

    services.crawl_resume(crawl=crawl, user=user)
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180, fleet=fleet)
    assert_exact(crawl, site)
    counts = Counter(p for p in server.paths() if p != "/robots.txt")
    retried = {p for p in counts if site.render(p)[0] >= 500}
    # A redirect target is also linked directly: fetched once through the redirect, once itself.
    targets = {f"/p/{site.moved_target(n)}" for n in range(site.pages) if site.is_moved(n)}
    twice = {p: n for p, n in counts.items() if n > 1 and p not in retried}
    assert {p.split("?")[0] for p in twice} <= targets, twice
    assert all(n == 2 for n in twice.values()), twice


def test_cancel_stops_for_good_and_keeps_the_pages(user, make_site, fleet):
    site, server, crawl = start_sample_crawl(user, make_site, pages=1200, delay=0.01)
    fleet.start_worker()
    fleet.start_cron()
    wait_for_progress(crawl, 50, fleet)
    services.crawl_cancel(crawl=crawl, user=user)
    time.sleep(2)
    seen = len(server.log)
    time.sleep(2)
    assert len(server.log) == seen
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.CANCELLED
    assert crawl.pages.count() >= 50
    assert Frontier(crawl.pk).is_done()


@pytest.mark.chaos
def test_redis_restarted_mid_crawl_resumes_and_finishes_exactly(
    user, make_site, fleet, redis_server
):
    site, server, crawl = start_sample_crawl(user, make_site, pages=1000, delay=0.004)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    wait_for_progress(crawl, 200, fleet)
    redis_server.stop()
    time.sleep(1.5)
    redis_server.start()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180, fleet=fleet)
    assert_exact(crawl, site)
