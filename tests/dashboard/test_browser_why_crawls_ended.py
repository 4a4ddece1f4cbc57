"""Why a crawl ended, read by an operator in headless Chromium at 1366 px and 390 px: a
cancelled crawl, one stopped by max pages, a failed one and a finished one each say why in one
line on the list and on their page, and the API says the same; neither of those that left
work undone (cancelled, max pages) reads 100 %. Screenshots go to test-artifacts/why-ended-*.png."""

from __future__ import annotations

import time

import pytest

from crawls import services
from crawls.models import CrawlState, EndReason
from tests.dashboard.test_browser import log_in
from tests.dashboard.test_browser_crawl_detail import (
    ARTIFACTS,
    DESKTOP,
    PHONE,
    no_sideways_scroll,
    wait_for_state,
)
from tests.support.sites import pages_site

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def linking(n: int) -> dict[str, str]:
    links = "".join(f'<a href="/p{i}">p{i}</a>' for i in range(n))
    return {"/": f"<html><body>{links}</body></html>"} | {
        f"/p{i}": "<html><body>leaf</body></html>" for i in range(n)
    }


def shoot(page, name: str) -> None:
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"why-ended-{name}-{label}.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


def test_four_crawls_each_say_why_they_ended_in_the_list_the_page_and_the_api(
    page, dashboard, user, make_site
):
    site = make_site(pages_site(linking(12)))
    pages = pages_site(linking(40))

    def slow(request):
        time.sleep(0.5)
        return pages(request)

    slow_site = make_site(slow)
    create = services.crawl_create
    finished = create(user=user, name="finished", seeds=[site.url + "/"], obey_robots=False)
    capped = create(
        user=user, name="capped", seeds=[site.url + "/"], obey_robots=False, max_pages=5
    )
    failed = create(
        user=user, name="dead host", seeds=["http://127.0.0.1:9/"], obey_robots=False, max_retries=0
    )
    cancelled = create(
        user=user,
        name="cancelled",
        seeds=[slow_site.url + "/"],
        obey_robots=False,
        threads=1,
        slices=1,
    )
    for crawl in (finished, capped, failed, cancelled):
        services.crawl_start(crawl=crawl, user=user)
    for crawl in (finished, capped):
        wait_for_state(crawl, CrawlState.FINISHED)
    wait_for_state(failed, CrawlState.FAILED)
    # The cancelled one has fetched some of its pages and has most left.
    deadline = time.monotonic() + 60
    while services.crawl_stats(cancelled)["responses"] < 3:
        assert time.monotonic() < deadline, "the slow crawl fetched nothing"
        time.sleep(0.2)
    services.crawl_cancel(crawl=cancelled, user=user)
    for crawl in (finished, capped, failed, cancelled):
        crawl.refresh_from_db()
    assert [c.end_reason for c in (finished, capped, failed, cancelled)] == [
        EndReason.FINISHED,
        EndReason.MAX_PAGES,
        EndReason.FAILED,
        EndReason.CANCELLED,
    ]

    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/")
    page.wait_for_selector("#live.ok")
    for crawl in (finished, capped, failed, cancelled):
        row = page.locator(f'tr[data-crawl="{crawl.pk}"]')
        assert row.locator('[data-field="end"]').inner_text() == crawl.end_line
        percent = row.locator('[data-field="percent"]').inner_text()
        assert (percent == "100%") == (crawl in (finished, failed)), (crawl.name, percent)
    assert "Cancelled by alice with " in cancelled.end_line
    assert capped.end_line.startswith("Max pages reached: 5 URLs scheduled, the cap of 5")
    assert failed.end_line.startswith("Failed: no page could be fetched")
    no_sideways_scroll(page)
    shoot(page, "list")

    for crawl in (finished, capped, failed, cancelled):
        page.goto(f"{dashboard}/crawls/{crawl.pk}/")
        page.wait_for_selector("#live.ok")
        assert page.locator("#end-line").inner_text() == crawl.end_line
        percent = page.locator("#percent").inner_text()
        assert (percent == "100") == (crawl in (finished, failed)), (crawl.name, percent)
        if crawl in (capped, cancelled):
            bar = page.evaluate(
                "[document.getElementById('progress').value, "
                "document.getElementById('progress').max]"
            )
            assert bar[0] < bar[1], f"{crawl.name}: a full bar for work left undone"
        api = page.request.get(f"{dashboard}/api/crawls/{crawl.pk}/").json()
        assert (api["end_reason"], api["end_line"]) == (crawl.end_reason, crawl.end_line)
        no_sideways_scroll(page)
        shoot(page, crawl.end_reason)
