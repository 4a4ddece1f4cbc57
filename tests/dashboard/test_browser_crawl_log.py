"""A crawl's log read by its owner in headless Chromium at 1366 px and 390 px, on real workers:
the crawl page's Log panel and the log page follow the crawl while it runs (slices, a host that
pushes back, a dead host's errors, retries given up), the log page filters by level, kind, host
and text, and neither page scrolls sideways. Screenshots go to test-artifacts/crawl-log-*.png."""

from __future__ import annotations

import threading
import time

import pytest

from crawls import services
from crawls.models import CrawlEvent, CrawlState
from tests.dashboard.test_browser import log_in, wait_for_js
from tests.dashboard.test_browser_crawl_detail import (
    ARTIFACTS,
    DESKTOP,
    PHONE,
    no_sideways_scroll,
    wait_for_state,
)
from tests.support.sites import Response, free_port, pages_site

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PAGES = 30


def shoot(page, name: str) -> None:
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"crawl-log-{name}-{label}.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


def shown(page) -> list[str]:
    return page.locator("#log-lines .log-line").all_inner_texts()


def test_the_log_follows_a_running_crawl_and_is_filtered_on_its_page(
    page, dashboard, user, make_site
):
    dead = f"127.0.0.1:{free_port()}"
    leaves = {f"/p{n}": "<p>leaf</p>" for n in range(PAGES)}
    links = "".join(f'<a href="/p{n}">p{n}</a>' for n in range(PAGES))
    site_pages = pages_site(
        {"/": links + '<a href="/busy">b</a><a href="/broken">x</a>', "/busy": "fine", **leaves}
    )
    busy = {"asked": 0}
    # /broken's first answer waits until the log page is open: the crawl runs until then
    # (a busy machine took longer to log in than the crawl took), and its errors come after.
    opened = threading.Event()

    def handler(request):
        time.sleep(0.3)  # slow enough to watch it run
        if request.path == "/busy":
            busy["asked"] += 1
            if busy["asked"] == 1:
                return Response(status=429, headers={"Retry-After": "1"})
        if request.path == "/broken":
            opened.wait(timeout=90)
            return Response(status=500, body="<b>broken</b>")
        return site_pages(request)

    site = make_site(handler)
    crawl = services.crawl_create(
        user=user,
        name="a crawl with a log",
        seeds=[site.url + "/", f"http://{dead}/"],
        obey_robots=False,
        max_retries=1,
        threads=2,
        slices=1,
        timeout=120,  # /broken is held: not a timeout
    )
    services.crawl_start(crawl=crawl, user=user)

    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.wait_for_selector("#live.ok")
    # The panel follows the crawl: a slice's first line comes in without a reload.
    wait_for_js(page, "document.querySelector('#log [data-kind=\"slice\"]') !== null", timeout=60)
    assert page.locator("#log .by-user").first.inner_text().endswith("by alice")

    page.goto(f"{dashboard}/crawls/{crawl.pk}/log/")
    assert crawl.refresh_from_db() or crawl.state == CrawlState.RUNNING
    assert page.locator("#log-live").inner_text() != ""
    before = len(shown(page))
    opened.set()
    wait_for_js(
        page, f"document.querySelectorAll('#log-lines .log-line').length > {before}", timeout=60
    )
    wait_for_state(crawl, CrawlState.FINISHED)
    page.reload()
    lines = shown(page)
    # The crawl's end, among the newest lines (its last slice may write its own end after it:
    # the supervisor can find the frontier empty first).
    assert any("Finished: every URL it scheduled was done" in line for line in lines[:2]), lines
    everything = "\n".join(lines)
    assert "slowed to one request every 1 s: it answered HTTP 429, Retry-After 1 s" in everything
    assert f"{dead}" in everything and "refused" in everything
    assert "to the failure queue" in everything
    no_sideways_scroll(page)
    shoot(page, "page")

    # Filters: errors only; one host; text; a group of kinds.
    page.select_option("#log-level", "error")
    page.click(".log-filter button[type=submit]")
    page.wait_for_url("**level=error**")
    errors = shown(page)
    levels = page.eval_on_selector_all("#log-lines .log-line", "ls => ls.map(l => l.dataset.level)")
    assert errors and set(levels) == {"error"}, errors
    assert any("given up after 2 attempts" in line and "HTTP 500" in line for line in errors)
    no_sideways_scroll(page)
    shoot(page, "errors")
    page.select_option("#log-level", "")
    page.fill("#log-host", dead)
    page.click(".log-filter button[type=submit]")
    page.wait_for_url("**host=**")
    assert shown(page) and all(dead in line for line in shown(page))
    page.goto(f"{dashboard}/crawls/{crawl.pk}/log/?kind=actions")
    assert all("by alice" in line or "Finished" in line for line in shown(page)), shown(page)
    page.goto(f"{dashboard}/crawls/{crawl.pk}/log/?q=HTTP%20429")
    assert len(shown(page)) >= 1 and all("429" in line for line in shown(page))

    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.wait_for_selector("#live.ok")
    panel = page.locator("#log")
    assert "Finished" in " ".join(panel.locator(".log-line").all_inner_texts()[:2])
    panel.scroll_into_view_if_needed()
    no_sideways_scroll(page)
    shoot(page, "crawl-page")
    for label, size in (("1366", DESKTOP), ("390", PHONE)):  # the panel alone, to read it
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        panel.screenshot(path=str(ARTIFACTS / f"crawl-log-panel-{label}.png"))
    assert CrawlEvent.objects.filter(crawl=crawl, kind=CrawlEvent.Kind.SLICE).count() >= 2
