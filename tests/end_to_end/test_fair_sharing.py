"""Crawls sharing real RQ workers: a big crawl's slices hold every worker, and a small crawl
started beside it ends while the big one still runs, because the big crawl's slices end their
turn for the small crawl's waiting ones (crawls.engine.sharing) long before their budget.
(Sharing Redis' memory: tests/engine/test_redis_memory.py.)
"""

import time

import pytest
from rq.registry import StartedJobRegistry

from crawlhub.redis.connections import get_redis
from crawlhub.sample_site import SampleSite
from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlEvent, CrawlState
from tests.support.crawling import (
    FAST_WORKERS,
    WorkerFleet,
    assert_exact,
    sample_handler,
    start_sample_crawl,
    wait_for_state,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# A slice's budget far past what the test waits for the small crawl: slices that held their
# worker for their whole budget would keep the small crawl waiting for it.
SLICE_SECONDS = 120
SMALL_CRAWL_WITHIN = 45.0


@pytest.fixture
def long_slices_fleet():
    fleet = WorkerFleet(
        env={
            **FAST_WORKERS,
            "CRAWLHUB_SLICE_SECONDS": str(SLICE_SECONDS),
            "CRAWLHUB_SLICE_TURN_SECONDS": "1",
        }
    )
    try:
        yield fleet
    finally:
        fleet.stop()


def running_slices(crawl) -> list[str]:
    registry = StartedJobRegistry("crawls", connection=get_redis())
    return [
        job_id
        for job_id in registry.get_job_ids(cleanup=False)
        if job_id.startswith(f"slice-{crawl.pk}-")
    ]


def test_a_small_crawl_started_beside_a_big_one_ends_while_the_big_one_runs(
    user, make_site, long_slices_fleet
):
    fleet = long_slices_fleet
    # 5,000 pages at 0.2 s each through 2 slices of 4 threads: two minutes at least.
    _, _, big = start_sample_crawl(user, make_site, pages=5000, delay=0.2)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    fleet.wait_until_registered(2)
    deadline = time.monotonic() + 60
    while len(running_slices(big)) < 2:  # the big crawl holds both workers
        assert time.monotonic() < deadline, "the big crawl's two slices did not both start"
        time.sleep(0.1)

    small_site = SampleSite(pages=60, seed=4)
    small_server = make_site(sample_handler(small_site, 0))
    small = services.crawl_create(
        user=user,
        name="small",
        seeds=[small_server.url + "/"],
        obey_robots=False,
        max_pages=1000,
        max_depth=1000,
        max_retries=1,
        threads=4,
        slices=2,
    )
    services.crawl_start(crawl=small, user=user)
    small = wait_for_state(small, {CrawlState.FINISHED}, timeout=SMALL_CRAWL_WITHIN, fleet=fleet)
    assert_exact(small, small_site)
    big.refresh_from_db()
    assert big.state == CrawlState.RUNNING and Frontier(big.pk).stats()["queued"] > 0
    # The big crawl's slices ended their turn for the small crawl's, and said so.
    turns = CrawlEvent.objects.filter(crawl=big, detail__contains="its turn was up")
    assert turns.exists()
    services.crawl_cancel(crawl=big, user=user)
