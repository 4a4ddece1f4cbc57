"""What a crawl yields, in a real browser: the rule editor and its preview on the new-crawl
page, the pages table, one page's detail, and the comparison of two runs; each saved as a
screenshot at 1280 and 390 px, and none scrolling sideways on a phone."""

from __future__ import annotations

import json
import re

import pytest
from django.utils import timezone

from crawls import services
from crawls.engine.rows import url_hash
from crawls.models import Crawl, CrawlState, Page
from crawls.pages import SEARCH_LIMIT
from tests.dashboard.test_browser import ARTIFACTS, PHONE, WIDE, log_in, shoot, wait_for_js
from tests.support.sites import Response, pages_site

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOP = {
    "/": "<html><head><title>Shop</title></head><body><h1>Shop</h1>"
    '<a href="/product/1">Lamp</a> <a href="/product/2">Chair</a></body></html>',
    "/product/1": "<html><head><title>Lamp</title></head><body><h1>Lamp</h1>"
    '<p class="price">$12</p><script>document.title = "owned"</script></body></html>',
    "/product/2": "<html><head><title>Chair</title></head><body><h1>Chair</h1>"
    '<p class="price">$40</p></body></html>',
    "/robots.txt": Response(body="User-agent: *\nAllow: /\n", content_type="text/plain"),
}


WIDEST = """() => [...document.querySelectorAll("body *")]
  .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1
                  && !(el.parentElement && el.parentElement.closest(".scroll, .rule-editor")))
  .slice(0, 5)
  .map((el) => `${el.tagName}.${el.className} ${Math.round(el.getBoundingClientRect().right)}`)"""


def no_sideways_scroll(page) -> bool:
    """The page is no wider than the window (tables scroll inside their own box); else the
    elements that stick out, for the message."""
    if page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"):
        return True
    sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    raise AssertionError(f"{page.url} scrolls sideways {sizes}: {page.evaluate(WIDEST)}")


def test_rules_are_written_and_tried_in_the_form_then_browsed_on_the_crawl_s_pages(
    page, dashboard, user, make_site
):
    site = make_site(pages_site(SHOP))
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/crawls/new/")
    page.fill("#id_name", "shop")
    page.fill("#id_seeds", site.url + "/")
    page.check("#id_keep_bodies")
    # The editor starts with one empty row; a second comes with "Add a field".
    rows = page.locator("#rule-editor tbody tr")
    assert rows.count() == 1
    rows.nth(0).get_by_label("Field name").fill("name")
    rows.nth(0).get_by_label("Selector or expression").fill("h1")
    page.click("#rule-add")
    rows.nth(1).get_by_label("Field name").fill("price")
    rows.nth(1).get_by_label("Selector or expression").fill(".price")
    rows.nth(1).get_by_label("Only URLs matching").fill("/product/")
    written = json.loads(page.locator("#id_extract_rules").input_value())
    assert written == [
        {"name": "name", "kind": "css", "expr": "h1"},
        {"name": "price", "kind": "css", "expr": ".price", "url_pattern": "/product/"},
    ]
    page.fill("#preview-url", site.url + "/product/1")
    page.click("#preview-run")
    result = page.locator("#preview-result table")
    result.wait_for()
    assert result.locator("tr").all_inner_texts() == ["name\tLamp", "price\t$12"]
    shoot(page, "crawl-new-rules")
    page.set_viewport_size(PHONE)
    assert no_sideways_scroll(page), "the new-crawl page scrolls sideways at 390 px"
    page.set_viewport_size(WIDE)

    page.click("button[type=submit].primary >> text=Create crawl")
    page.wait_for_url(re.compile(r"/crawls/\d+/$"))
    crawl = Crawl.objects.get()
    wait_for_js(
        page, "document.getElementById('state').textContent.trim() === 'Finished'", timeout=120
    )
    page.click("text=Browse the pages")
    page.wait_for_url(re.compile(r"/crawls/\d+/pages/$"))
    table = page.locator("table.pages-table")
    assert table.locator("tbody tr").count() == 3
    assert table.locator("thead th").all_inner_texts()[-2:] == ["name", "price"]
    shoot(page, "pages-table")
    page.set_viewport_size(PHONE)
    assert no_sideways_scroll(page), "the pages table scrolls the page sideways at 390 px"
    page.set_viewport_size(WIDE)

    # Sort by size, biggest first, then filter: the links keep what is chosen.
    table.locator("thead a", has_text="Size").click()
    page.wait_for_url(re.compile(r"sort=bytes"))
    page.fill("#f-q", "product")
    page.click("button:has-text('Filter')")
    page.wait_for_url(re.compile(r"q=product"))
    urls = page.locator("table.pages-table tbody td.url a:not(.live)").all_inner_texts()
    expected = list(crawl.pages.filter(url__contains="product").order_by("-bytes", "-id"))
    assert urls == [p.url for p in expected]

    page.locator("table.pages-table tbody td.url a:not(.live)", has_text="/product/1").click()
    page.wait_for_url(re.compile(r"/pages/\d+/$"))
    assert page.title() != "owned"  # the page's own script never ran here
    body = page.locator("pre.body").inner_text()
    assert '<script>document.title = "owned"</script>' in body
    assert page.locator("#h-fields + table").inner_text().split("\n")[:2] == [
        "name\tLamp",
        "price\t$12",
    ]
    assert "Linked from 1 page of this crawl" in page.locator("#h-found ~ h3").inner_text()
    shoot(page, "page-detail")
    page.set_viewport_size(PHONE)
    assert no_sideways_scroll(page), "the page detail scrolls sideways at 390 px"


def test_two_runs_are_compared_on_their_own_page(page, dashboard, user):
    now = timezone.now()
    runs = []
    for name, pages in (
        ("monday", {"/a": "1", "/b": "2", "/c": "3"}),
        ("tuesday", {"/a": "1", "/b": "2b", "/d": "4"}),
    ):
        crawl = services.crawl_create(user=user, name=name, seeds=["http://shop.test/"])
        Crawl.objects.filter(pk=crawl.pk).update(state=CrawlState.FINISHED)
        for path, digest in pages.items():
            Page.objects.create(
                crawl=crawl,
                url="http://shop.test" + path,
                url_hash=path,
                fp=hash(path) >> 1,
                digest=digest,
                status=200,
                fetched_at=now,
            )
        runs.append(crawl)
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/compare/?a={runs[0].pk}&b={runs[1].pk}")
    counts = {
        link.get_attribute("data-kind"): int(link.inner_text())
        for link in page.locator("dl.counters a").all()
    }
    assert counts == {"new": 1, "changed": 1, "unchanged": 1, "gone": 1}
    page.locator("dl.counters a[data-kind=gone]").click()
    page.wait_for_url(re.compile(r"show=gone"))
    assert page.locator("#h-list ~ div td.url").all_inner_texts() == ["http://shop.test/c"]
    shoot(page, "compare")
    page.set_viewport_size(PHONE)
    assert no_sideways_scroll(page), "the comparison scrolls sideways at 390 px"


def test_a_short_search_on_a_big_crawl_says_which_pages_it_read(page, dashboard, user):
    """A search of two characters (no index finds it) on a crawl of more pages than one
    search reads (pages.SEARCH_LIMIT): the screen says it read only those, and searching on
    finds the matches past them."""
    crawl = services.crawl_create(user=user, name="big", seeds=["http://big.test/"])
    now = timezone.now()
    total = SEARCH_LIMIT + 20
    urls = [f"http://big.test/{'zq-' if n >= total - 3 else ''}page/{n}" for n in range(total)]
    Page.objects.bulk_create(
        [
            Page(
                crawl=crawl,
                url=u,
                url_hash=url_hash(u),
                status=200,
                title=f"Page {n}",
                fetched_at=now,
            )
            for n, u in enumerate(urls)
        ],
        batch_size=2000,
    )
    log_in(page, dashboard, "alice")
    page.set_viewport_size(WIDE)
    page.goto(f"{dashboard}/crawls/{crawl.pk}/pages/?q=zq")
    heading = page.locator("#h-pages").inner_text()
    assert heading == f"0 pages found in the {SEARCH_LIMIT:,} searched", heading
    notice = page.locator(".partial-search")
    assert f"Only the next {SEARCH_LIMIT:,} pages in this order were searched" in (
        notice.inner_text()
    )
    assert page.locator(".empty").count() == 0
    for label, size in (("1366", {"width": 1366, "height": 900}), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"pages-partial-search-{label}.png"), full_page=True)
        assert no_sideways_scroll(page)
    page.set_viewport_size(WIDE)
    notice.get_by_role("link", name="Search the next pages →").click()
    page.wait_for_selector("table.pages-table")
    assert page.locator("#h-pages").inner_text() == "3 pages match"
    shown = page.locator("table.pages-table tbody td.url a:not(.live)").all_inner_texts()
    assert shown == urls[-3:]
