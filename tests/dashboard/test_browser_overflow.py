"""A crawl whose queue outgrew its window in Redis, read on its page and its queue view in
headless Chromium at 1366 px and 390 px: "On disk" counts what waits in the database, the sum
still adds up, and the queue view says how many wait there. Screenshots go to test-artifacts/
(overflow-*)."""

from __future__ import annotations

import pytest

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.engine.overflow import Overflow
from tests.dashboard.test_browser import log_in
from tests.dashboard.test_browser_scope_and_queue import ARTIFACTS, shoot

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def shown(page, name: str) -> int:
    return int(page.locator(f'#counters [data-counter="{name}"]').inner_text().replace(",", ""))


def test_the_crawl_page_and_the_queue_view_count_what_waits_in_the_database(page, dashboard, user):
    ARTIFACTS.mkdir(exist_ok=True)
    seeds = [f"http://127.0.0.1:9/p/{n}" for n in range(900)]  # nobody answers: never fetched
    crawl = services.crawl_create(user=user, name="big queue", seeds=seeds, obey_robots=False)
    services.crawl_start(crawl=crawl, user=user)
    services.crawl_pause(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    Overflow(frontier, window=200).balance()
    stats = frontier.stats()
    assert stats["spilled"] > 0

    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.wait_for_selector("#live.ok")
    assert shown(page, "spilled") == stats["spilled"]
    parts = ("responses", "errors", "queued", "spilled", "in_flight", "delayed", "cancelled")
    assert shown(page, "requests") == sum(shown(page, name) for name in parts) == 900
    assert "+ on disk" in page.locator("#sum").inner_text()
    shoot(page, "overflow-crawl")

    page.goto(f"{dashboard}/crawls/{crawl.pk}/queue/")
    counts = page.locator("#queue-counts").inner_text()
    assert f"{stats['spilled']:,} waiting in the database" in counts, counts
    shoot(page, "overflow-queue")
