"""Crawls on real RQ worker processes: kill -9, cancel, Redis restarts (pause and resume on real
workers: tests/engine/test_pause_resume.py).

Nothing is lost: the crawl ends with exactly the expected pages and exact counters.
"""

import random
import time

import pytest

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support.crawling import (
    assert_exact,
    refetched,
    start_sample_crawl,
    wait_for_progress,
    wait_for_state,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


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
