"""Defects an operator found walking through the dashboard, held in headless Chromium at 1366 px
and 390 px: a page's detail that scrolled sideways on a phone, a host's queue dropped in one
click, a host view that did not follow the crawl. Screenshots: test-artifacts/walk-*.png."""

from __future__ import annotations

import re

import pytest

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.dashboard.test_browser import log_in, wait_until
from tests.dashboard.test_browser_crawl_detail import ARTIFACTS, DESKTOP, PHONE, wait_for_state
from tests.support.sites import Response, pages_site

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LONG = "x" * 180
# A real docs site's page, as far as widths go: long unbroken URLs, titles, header values,
# link texts, extracted values, JSON-LD and body lines.
DOC = (
    f"<html><head><title>Reference {LONG}</title>"
    '<script type="application/ld+json">{"@type": "Article", "headline": "' + LONG + '"}'
    "</script></head><body><h1>API reference</h1>"
    f'<a href="/docs/{LONG}?q={LONG}">{LONG}</a><a href="/other">other</a>'
    f"<pre>{LONG * 2}</pre></body></html>"
)
RULES = [
    {"name": "heading", "kind": "css", "expr": "h1"},
    {"name": "href", "kind": "css", "expr": "a", "get": "attr", "attr": "href", "many": True},
]


def shoot(page, name: str) -> None:
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"walk-{name}-{label}.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


def overflow(page) -> tuple[int, list[str]]:
    """How wide the page is at 390 px, and the widest elements past the viewport."""
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(300)
    width = page.evaluate("document.documentElement.scrollWidth")
    culprits = page.evaluate("""() => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > 391 && !e.closest('.scroll, pre'))
        .sort((a, b) => b.getBoundingClientRect().right - a.getBoundingClientRect().right)
        .map(e => e.tagName + '.' + e.className + '#' + e.id + ' '
             + Math.round(e.getBoundingClientRect().right))
        .slice(0, 8)""")
    page.set_viewport_size(DESKTOP)
    return width, culprits


def test_a_page_s_detail_does_not_scroll_sideways_on_a_phone(page, dashboard, user, make_site):
    headers = {"X-Trace": LONG, "Link": f"</docs/{LONG}>; rel=preload"}
    site = make_site(pages_site({"/": Response(body=DOC, headers=headers), "/other": DOC}))
    crawl = services.crawl_create(
        user=user,
        name="docs",
        seeds=[site.url + "/"],
        obey_robots=False,
        max_depth=0,
        keep_bodies=True,
        keep_structured_data=True,
        extract_rules=RULES,
    )
    services.crawl_start(crawl=crawl, user=user)
    wait_for_state(crawl, CrawlState.FINISHED)
    home = crawl.pages.get(url=site.url + "/")
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}{home.get_absolute_url()}")
    width, culprits = overflow(page)
    shoot(page, "page-detail")
    assert width <= 390, f"the page is {width} px wide at 390 px: {culprits}"


def test_drop_queue_asks_first_and_the_host_view_follows_the_crawl(page, dashboard, user):
    seeds = [f"http://127.0.0.1:{port}/" for port in (9, 19)]  # nobody answers
    crawl = services.crawl_create(
        user=user, name="hosts", seeds=seeds, host_delay=30, obey_robots=False, max_depth=0
    )
    services.crawl_start(crawl=crawl, user=user)
    services.crawl_add_seeds(crawl=crawl, urls=[s + f"p{n}" for s in seeds for n in range(4)])
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/hosts/")
    page.get_by_role("button", name="Drop the queue of 127.0.0.1:19").click()
    question = page.locator("#confirm-drop")
    question.wait_for()
    assert re.search(r"Drop the \d+ queued requests of 127\.0\.0\.1:19\?", question.inner_text())
    assert Frontier(crawl.pk).stats()["cancelled"] == 0  # nothing dropped yet
    shoot(page, "drop-confirm")
    page.get_by_role("link", name="Keep them").click()
    page.wait_for_url(re.compile(r"/hosts/$"))
    assert Frontier(crawl.pk).stats()["cancelled"] == 0

    # The table follows the crawl: a drop made elsewhere shows without a reload.
    row = page.locator("tr", has=page.locator("td.url", has_text="127.0.0.1:9"))
    before = int(row.locator("td").nth(1).inner_text())
    assert before > 0
    dropped = services.crawl_host_drop(crawl=crawl, host="127.0.0.1:9", user=user)
    assert dropped > 0
    wait_until(
        lambda: row.locator("td").nth(1).inner_text() == "0",
        timeout=20,
        what="the host view to show the drop",
    )

    page.get_by_role("button", name="Drop the queue of 127.0.0.1:19").click()
    page.get_by_role("button", name=re.compile(r"^Drop \d+ requests?$")).click()
    page.get_by_text(re.compile(r"127\.0\.0\.1:19: \d+ queued request\(s\) dropped")).wait_for()
    events = crawl.events.filter(kind="host_dropped").values_list("detail", flat=True)
    assert sorted(detail.split(":")[0] + ":" + detail.split(":")[1] for detail in events) == [
        "127.0.0.1:19",
        "127.0.0.1:9",
    ]
    assert Frontier(crawl.pk).stats()["cancelled"] > dropped


def test_idle_workers_are_not_drawn_as_a_warning(page, dashboard, user):
    """Two workers waiting for work were drawn in the warning's amber, as a paused crawl is."""
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/workers/")
    badge = page.locator(".state-idle").first
    badge.wait_for()
    idle = badge.evaluate("e => getComputedStyle(e).backgroundColor")
    warning = page.evaluate("""() => { const probe = document.createElement('span');
        probe.className = 'state state-paused'; document.body.append(probe);
        const colour = getComputedStyle(probe).backgroundColor; probe.remove(); return colour; }""")
    assert idle != warning, f"an idle worker is drawn as a warning ({idle})"
    shoot(page, "workers")
