"""A running crawl's scope changed and its queue read from the crawl page, in headless Chromium
at 1366 px and 390 px, on real workers: Change limits or scope takes an exclusion and says
what it dropped; What is queued shows the counts by host and depth and the requests, a screen
at a time. Screenshots go to test-artifacts/ (scope-*, queue-*)."""

from __future__ import annotations

import re

import pytest

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlEvent, CrawlState
from tests.dashboard.test_browser import log_in, wait_until
from tests.engine.test_scope_changes import tree_site
from tests.support.crawling import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ARTIFACTS = ROOT / "test-artifacts"
DESKTOP, PHONE = {"width": 1366, "height": 900}, {"width": 390, "height": 844}


def shoot(page, name: str) -> None:
    """Screenshots at both widths; at 390 px nothing scrolls sideways."""
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"{name}-{label}.png"), full_page=True)
        if size is PHONE:
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{name}: {width} px wide in a 390 px viewport"
    page.set_viewport_size(DESKTOP)


def test_an_owner_excludes_urls_of_a_running_crawl_and_reads_its_queue(
    page, dashboard, user, make_site
):
    ARTIFACTS.mkdir(exist_ok=True)
    site = make_site(tree_site)
    crawl = services.crawl_create(
        user=user,
        name="scoped",
        seeds=[site.url + "/"],
        obey_robots=False,
        max_depth=20,
        max_pages=100_000,
        threads=2,
        slices=1,
    )
    services.crawl_start(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    wait_until(lambda: frontier.stats()["queued"] >= 80, timeout=120, what="a queue of 80")

    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.click("#change-link")
    page.wait_for_selector("#h-scope")
    page.fill("#id_exclude_patterns", "/s/")
    shoot(page, "scope-change")
    page.click("form.crawl-form button[type=submit]")
    page.wait_for_url(re.compile(rf"/crawls/{crawl.pk}/$"))
    said = page.locator(".messages li").inner_text()
    match = re.fullmatch(
        r"Settings changed: exclude patterns: none -> /s/; ([\d,]+) queued "
        r"request\(s\) dropped: they no longer fit(; .*)?\.",
        said,
    )
    assert match, said
    dropped = int(match.group(1).replace(",", ""))
    assert dropped > 0
    event = crawl.events.get(kind=CrawlEvent.Kind.CHANGED)
    assert f"{dropped:,} queued request(s) dropped" in event.detail
    assert "exclude patterns: none -&gt; /s/" in page.content()  # on the trail, as text
    shoot(page, "scope-changed")

    page.click("#queue-link")
    page.wait_for_selector("#queued")
    counts = page.locator("#queue-counts").inner_text()
    assert re.fullmatch(r"[\d,]+ queued · [\d,]+ retrying", counts), counts
    depths = page.locator("#by-depth tbody td").all_inner_texts()
    assert depths and all(t.replace(",", "").isdigit() for t in depths), depths
    hosts = page.locator("#by-host tbody td").all_inner_texts()
    assert hosts[0] == f"127.0.0.1:{site.url.rsplit(':', 1)[1]}"
    first = page.locator("#queued tbody td.url:nth-child(2)").all_inner_texts()
    assert len(first) == 50 and all(u.startswith(site.url + "/k/") for u in first[:10])
    shoot(page, "queue")
    page.click("a[rel=next]")
    page.wait_for_selector("#queued")
    second = page.locator("#queued tbody td.url:nth-child(2)").all_inner_texts()
    assert second and not set(second) & set(first)
    assert page.locator("#position").inner_text().startswith("about 51–")
    shoot(page, "queue-next")

    services.crawl_cancel(crawl=crawl, user=user)
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.CANCELLED
    stats = crawl.stats
    assert stats["cancelled"] >= stats["descoped"] >= dropped
