"""Crawls whose queue outgrows a tiny window in Redis (CRAWLHUB_FRONTIER_WINDOW): most of it
waits in the database and comes back as the queue drains (crawls/engine/overflow.py). In one
process, and on real RQ workers killed with kill -9 again and again or cut off by a Redis
restart: the crawl fetches exactly its site's set, with every counter exact.

A kill at each point of a spill and of a refill, for certain, is in
tests/engine/test_overflow.py; here the kills land wherever the workers are."""

import random
import time

import pytest

from crawls.engine.frontier import Frontier
from crawls.models import CrawlState, SpilledRequest
from tests.support.crawling import (
    FAST_WORKERS,
    WorkerFleet,
    assert_exact,
    assert_refetched_only_held,
    in_flight_paths,
    start_sample_crawl,
    wait_for_progress,
    wait_for_state,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WINDOW = 20


@pytest.fixture
def tiny_window(settings):
    settings.CRAWLHUB_FRONTIER_WINDOW = WINDOW


@pytest.fixture
def overflow_fleet(tiny_window):
    fleet = WorkerFleet(env={**FAST_WORKERS, "CRAWLHUB_FRONTIER_WINDOW": str(WINDOW)})
    try:
        yield fleet
    finally:
        fleet.stop()


def watch_overflow(crawl, fleet: WorkerFleet, *, until: int) -> tuple[int, int]:
    """Until the crawl has `until` responses: the most requests seen queued in Redis and
    waiting in the database, each at one moment."""
    frontier = Frontier(crawl.pk)
    most_queued = most_rows = 0
    deadline = time.monotonic() + 120
    while (stats := frontier.stats())["responses"] < until:
        assert time.monotonic() < deadline, stats
        most_queued = max(most_queued, stats["queued"])
        most_rows = max(most_rows, SpilledRequest.objects.filter(crawl_id=crawl.pk).count())
        fleet.keep_alive()
        time.sleep(0.05)
    return most_queued, most_rows


@pytest.mark.chaos
def test_kill_9_of_workers_with_a_tiny_window_loses_nothing_and_doubles_nothing(
    user, make_site, overflow_fleet
):
    fleet = overflow_fleet
    site, server, crawl = start_sample_crawl(user, make_site, pages=1200, delay=0.004)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    most_queued, most_rows = watch_overflow(crawl, fleet, until=100)
    rng = random.Random(7)
    held = []
    for round_ in range(4):
        wait_for_progress(crawl, 150 * (round_ + 1), fleet)
        fleet.kill9(fleet.busy_worker(rng))
        held.append(in_flight_paths(crawl))
        fleet.keep_alive()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=240, fleet=fleet)
    assert_exact(crawl, site)
    assert crawl.stats["spilled"] == 0
    assert not SpilledRequest.objects.filter(crawl_id=crawl.pk).exists()
    print("most queued in Redis:", most_queued, "most rows:", most_rows)
    assert most_rows > 0, "nothing ever waited in the database"
    assert fleet.killed_horses >= 2, "the kills hit no running slice"
    assert_refetched_only_held(crawl, site, server, held)


@pytest.mark.chaos
def test_redis_restarted_mid_crawl_with_a_tiny_window_finishes_exactly(
    user, make_site, overflow_fleet, redis_server
):
    fleet = overflow_fleet
    site, server, crawl = start_sample_crawl(user, make_site, pages=1000, delay=0.004)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    _, most_rows = watch_overflow(crawl, fleet, until=200)
    redis_server.stop()
    time.sleep(1.5)
    redis_server.start()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=240, fleet=fleet)
    assert_exact(crawl, site)
    assert most_rows > 0, "nothing ever waited in the database"
    assert not SpilledRequest.objects.filter(crawl_id=crawl.pk).exists()
