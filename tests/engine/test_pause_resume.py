"""Pause and resume: a paused crawl's frontier takes seeds but hands out nothing; pause and resume
are allowed only in the states that allow them, and audited; on real workers, pause stops the
fetches within seconds and resume finishes the crawl exactly, nothing lost or fetched twice.

Where the doors only pass pause and resume on, their tests stay with the door: the API
(tests/api/test_endpoints.py), the crawl pages (tests/dashboard/test_crawl_pages.py), the live
page's pushes (tests/dashboard/test_live_updates.py), the browser
(tests/dashboard/test_browser.py), the CLI's refusal (tests/end_to_end/test_bad_input.py), and
quick pauses under chaos (tests/end_to_end/test_chaos.py).
"""

import time
from collections import Counter

import pytest

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support.crawling import (
    assert_exact,
    start_sample_crawl,
    wait_for_progress,
    wait_for_state,
)


def urls(host: str, count: int) -> list[str]:
    return [f"http://{host}/page/{i}" for i in range(count)]


def create(user, **kwargs):
    kwargs.setdefault("name", "docs")
    kwargs.setdefault("seeds", ["http://127.0.0.1:9/"])
    return services.crawl_create(user=user, **kwargs)


# The frontier: claims stop, seeds do not


def test_seeds_are_added_in_any_state(frontier):
    frontier.set_state("paused")
    assert frontier.add_seeds(["http://a.test/"]) == (1, 0)
    assert frontier.claim(5, lease_seconds=30) == []


def test_claim_only_when_running(frontier):
    frontier.add_seeds(urls("a.test", 3))
    for state in ("paused", "cancelled"):
        frontier.set_state(state)
        assert frontier.claim(3, lease_seconds=30) == []
    unconfigured = Frontier(2)
    unconfigured.add_seeds(["http://a.test/"])
    assert unconfigured.state() is None and unconfigured.claim(1, lease_seconds=30) == []
    frontier.set_state("running")
    assert frontier.state() == "running"
    assert len(frontier.claim(3, lease_seconds=30)) == 3
    with pytest.raises(ValueError):
        frontier.set_state("finished")


# The services: which state allows what


@pytest.mark.django_db
def test_actions_follow_the_state(user):
    crawl = create(user)
    with pytest.raises(services.CrawlActionError, match="cannot be paused"):
        services.crawl_pause(crawl=crawl, user=user)
    with pytest.raises(services.CrawlActionError, match="cannot be resumed"):
        services.crawl_resume(crawl=crawl, user=user)
    services.crawl_start(crawl=crawl, user=user)
    with pytest.raises(services.CrawlActionError, match="cannot be started"):
        services.crawl_start(crawl=crawl, user=user)
    services.crawl_pause(crawl=crawl, user=user)
    assert crawl.state == CrawlState.PAUSED  # nothing was in flight
    services.crawl_resume(crawl=crawl, user=user)
    services.crawl_cancel(crawl=crawl, user=user)
    with pytest.raises(services.CrawlActionError, match="cannot be resumed"):
        services.crawl_resume(crawl=crawl, user=user)
    kinds = list(crawl.events.order_by("id").values_list("kind", flat=True))
    assert kinds == ["created", "started", "paused", "resumed", "cancelled"]


# Real workers


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
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
    # Every URL once, redirect targets (also linked directly) included; 500s once per retry.
    twice = {p: n for p, n in counts.items() if n > 1 and p not in retried}
    assert twice == {}, twice
