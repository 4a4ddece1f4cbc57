"""Pause, resume and cancel of a crawl that renders JavaScript, on real RQ workers whose work
horses run headless Chromium: a pause stops the fetches (the pages being rendered finish) and a
resume finishes the crawl exactly; a cancel stops it and keeps what was rendered; and no Chromium
is left running once the slices are gone."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from crawlhub.http import chromium
from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support import processes
from tests.support.crawling import fetched_paths, wait_for_progress, wait_for_state
from tests.support.sites import script_site

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.browser]

# The fleet's short leases (3 s, for tests of recovery) are shorter than a page's rendering on a
# loaded machine can keep a slice's own loop from renewing them; these tests are not about
# recovery, and count it (stats["recovered"]) to prove no page was taken from a live slice.
RENDERING_WORKERS = {"CRAWLHUB_LEASE_SECONDS": "30"}

# The pause or cancel lands after the 4th page, with at most 4 pages rendering (2 slices x 2
# threads) and 4 more claimed: 21 pages leave some in the queue, and each costs a rendering.
PAGES = 20
ALL_PATHS = sorted(["/", *[f"/p/{n}" for n in range(PAGES)]])


@pytest.fixture(autouse=True)
def needs_chromium():
    found = chromium.locate()
    if not found:
        if os.environ.get("CRAWLHUB_REQUIRE_BROWSER") == "1":
            pytest.fail(found.problem + " (CRAWLHUB_REQUIRE_BROWSER=1)")
        pytest.skip(found.problem)


@pytest.fixture
def rendering_fleet(fleet):
    fleet.env.update(RENDERING_WORKERS)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    return fleet


def start_rendered_crawl(user, site):
    """Its slices, once paused or cancelled, have its timeout to finish the pages they are
    rendering (jobs.stop_grace) before they are stopped."""
    crawl = services.crawl_create(
        user=user,
        name="rendered",
        seeds=[site.url + "/"],
        obey_robots=False,
        max_retries=1,
        threads=2,
        slices=2,
        render_javascript=True,
        timeout=60,
    )
    services.crawl_start(crawl=crawl, user=user)
    return crawl


def documents(site) -> list[str]:
    """The pages the site was asked for (the crawl's fetches), not its API (the browsers')."""
    return [path for path in site.paths() if not path.startswith("/api/")]


def browsers_under(fleet) -> list[str]:
    """The Chromium processes running below the fleet's workers (their work horses' browsers)."""
    below = set().union(*(processes.descendants(proc.pid) for proc in fleet.alive()))
    found = [processes.command_line(pid) for pid in below if processes.alive(pid)]
    return [command for command in found if "chrom" in command.split(" ")[0]]


def wait_for_no_browser(fleet, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while left := browsers_under(fleet):
        assert time.monotonic() < deadline, f"Chromium still running: {left[:3]}"
        time.sleep(0.5)


def wait_for_browser(fleet, *, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not browsers_under(fleet):
        assert time.monotonic() < deadline, "no Chromium ever ran below the workers"
        time.sleep(0.2)


def assert_quiet(site, seconds: float = 3.0) -> None:
    """The site (documents and API alike) is asked nothing for `seconds`."""
    seen = len(site.log)
    time.sleep(seconds)
    assert site.paths()[seen:] == [], "the site was fetched after the crawl stopped"


def test_pause_stops_rendering_and_resume_finishes_exactly(user, make_site, rendering_fleet):
    site = make_site(script_site(PAGES, api_delay=0.2))
    crawl = start_rendered_crawl(user, site)
    wait_for_browser(rendering_fleet)
    wait_for_progress(crawl, 4, rendering_fleet, timeout=240)
    services.crawl_pause(crawl=crawl, user=user)
    crawl = wait_for_state(crawl, {CrawlState.PAUSED}, timeout=120, fleet=rendering_fleet)
    assert_quiet(site)
    stats = Frontier(crawl.pk).stats()
    assert stats["in_flight"] == 0 and stats["queued"] > 0, stats
    # The pages the slices were rendering when paused finished under their leases: none was
    # taken back from a slice still rendering it.
    assert stats["recovered"] == 0, stats
    fetched_before = len(documents(site))
    assert 4 <= fetched_before < len(ALL_PATHS)
    wait_for_no_browser(rendering_fleet)

    services.crawl_resume(crawl=crawl, user=user)
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=300, fleet=rendering_fleet)
    # Every page once: one row each, rendered (its title came from the script), and asked of
    # the site once; counters exact.
    assert sorted(fetched_paths(crawl)) == ALL_PATHS
    titles = dict(crawl.pages.values_list("url", "title"))
    assert titles[site.url + "/p/7"] == "Item 7"
    assert titles[site.url + "/"] == "Home"
    twice = {path: n for path, n in Counter(documents(site)).items() if n > 1}
    assert twice == {}, twice
    assert sorted(set(documents(site))) == ALL_PATHS
    stats = crawl.stats
    assert stats["requests"] == stats["responses"] == len(ALL_PATHS), stats
    assert stats["errors"] == stats["failed"] == stats["retries"] == 0, stats
    assert stats["queued"] == stats["in_flight"] == stats["recovered"] == 0, stats
    assert crawl.pages.count() == len(ALL_PATHS)
    wait_for_no_browser(rendering_fleet)


def test_cancel_stops_rendering_and_keeps_what_was_rendered(user, make_site, rendering_fleet):
    site = make_site(script_site(PAGES, api_delay=0.2))
    crawl = start_rendered_crawl(user, site)
    wait_for_progress(crawl, 4, rendering_fleet, timeout=240)
    services.crawl_cancel(crawl=crawl, user=user)
    assert crawl.state == CrawlState.CANCELLED
    # The slices end (the pages being rendered finish and are kept), their browsers with them.
    wait_for_no_browser(rendering_fleet)
    deadline = time.monotonic() + 60
    while Frontier(crawl.pk).live_slices():
        assert time.monotonic() < deadline, "the cancelled crawl's slices did not end"
        time.sleep(0.2)
    assert_quiet(site)
    kept = sorted(fetched_paths(crawl))
    assert len(kept) == len(set(kept))
    assert 4 <= len(kept) < len(ALL_PATHS), kept
    # What was fetched was kept, rendered: every document the site served is a page row with
    # the title its script wrote.
    assert sorted(set(documents(site))) == kept
    for url, title in crawl.pages.values_list("url", "title"):
        expected = "Home" if url == site.url + "/" else f"Item {url.rsplit('/', 1)[1]}"
        assert title == expected, (url, title)
    # The counters taken at the cancel count no page that was not kept.
    crawl.refresh_from_db()
    assert crawl.stats["responses"] <= len(kept)
    assert crawl.state == CrawlState.CANCELLED
