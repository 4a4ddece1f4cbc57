"""The crawl form's errors in a real browser (headless Chromium, see conftest.py): every field's
and section's problems in one round (the credentials' with the seeds'), the summary's links
followed one by one to fix each field and the crawl then created, and a draft's saved
credentials removed with their own checkbox, never shown. Screenshots at 1366 px and 390 px
in test-artifacts/."""

from __future__ import annotations

import re

import pytest

from crawls import services
from crawls.models import Crawl, CrawlAuth, CrawlEvent
from tests.dashboard.test_browser import ARTIFACTS, PHONE, log_in
from tests.dashboard.test_browser_results import no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1366, "height": 900}
CREATED = re.compile(r"/crawls/\d+/(#.*)?$")


def shoot(page, name: str) -> None:
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(200)
        page.screenshot(path=str(ARTIFACTS / f"form-{name}-{label}.png"), full_page=True)
        if label == "390":
            assert no_sideways_scroll(page), page.url
    page.set_viewport_size(DESKTOP)


def summary_items(page) -> list[str]:
    return page.locator("#error-summary li").all_inner_texts()


def test_seed_and_credentials_errors_come_in_one_round(page, dashboard, user, tmp_path):
    jar = tmp_path / "cookies.txt"
    jar.write_text("shop.test\tFALSE\t/\n")  # three fields where seven are due
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/crawls/new/")
    page.fill("#id_name", "two rounds")
    page.fill("#id_seeds", "ftp://nope.example/")
    page.fill("#id_headers", "X-Api-Key hdr-SECRET-1111")
    page.set_input_files("#id_cookies_txt", str(jar))
    page.fill("#id_login_fields", "username=alice\npassword=pw-SECRET-2222")
    page.uncheck("#id_start_now")
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_selector("#error-summary")
    items = summary_items(page)
    labels = [text.split(":")[0] for text in items]
    assert labels == ["Seeds", "Extra headers", "cookies.txt", "Login form fields"], items
    assert "line 1: not a header" in items[1] and "found no colon" in items[1]
    assert "cookies.txt line 1: 7 fields" in items[2]
    assert "give the login URL too" in items[3]
    html = page.content()
    assert "hdr-SECRET-1111" not in html and "pw-SECRET-2222" not in html
    shoot(page, "seed-and-credentials")
    assert Crawl.objects.count() == 0


def test_each_error_followed_from_the_summary_and_fixed_creates_the_crawl(page, dashboard, user):
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/crawls/new/")
    page.fill("#id_name", "fixed one by one")
    page.fill("#id_seeds", "ftp://nope.example/")
    page.fill("#id_include_patterns", "(unclosed")
    page.fill("#id_timeout", "0")
    page.uncheck("#id_start_now")
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_selector("#error-summary")
    assert [t.split(":")[0] for t in summary_items(page)] == [
        "Seeds",
        "Include patterns",
        "Timeout",
    ]
    shoot(page, "three-errors")

    fixes = {
        "Seeds": ("#id_seeds", "http://shop.test/"),
        "Include patterns": ("#id_include_patterns", "/shop/"),
        "Timeout": ("#id_timeout", "20"),
    }
    for label, (selector, value) in fixes.items():
        page.locator("#error-summary").get_by_role("link", name=label).click()
        # The link lands on the field itself, ready to type in.
        assert page.evaluate("document.activeElement.id") == selector[1:], label
        page.fill(selector, value)
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_url(CREATED, wait_until="commit", timeout=60_000)
    # The crawl's page, not the form again, and no anchor of the form carried along to it.
    assert re.search(r"/crawls/\d+/$", page.url), page.url
    crawl = Crawl.objects.get()
    assert (crawl.seeds, crawl.include_patterns, crawl.timeout) == (
        ["http://shop.test/"],
        ["/shop/"],
        20.0,
    )


def test_a_draft_removes_its_saved_credentials_with_a_checkbox(page, dashboard, user):
    crawl = services.crawl_create(
        user=user,
        name="behind a login",
        seeds=["http://shop.test/"],
        auth={
            "headers": "X-Api-Key: hdr-SECRET-1111",
            "basic_user": "bob",
            "basic_password": "basic-SECRET-4444",
        },
    )
    log_in(page, dashboard, "alice")
    page.goto(dashboard + f"/crawls/{crawl.pk}/edit/")
    kept = page.locator("#credentials-kept").inner_text()
    assert "X-Api-Key" in kept and "hdr-SECRET-1111" not in page.content()
    shoot(page, "draft-credentials")
    page.check("#id_remove_headers")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url(re.compile(rf"/crawls/{crawl.pk}/$"))
    shown = page.inner_text("#settings-list")
    assert "X-Api-Key" not in shown and "set (user bob, password set)" in shown
    row = CrawlAuth.objects.get(crawl=crawl)
    assert (row.headers, row.basic_password) == ([], "basic-SECRET-4444")
    detail = CrawlEvent.objects.filter(crawl=crawl, kind=CrawlEvent.Kind.EDITED).get().detail
    assert "removed the saved extra headers" in detail and "SECRET" not in detail

    # The last kind of secret removed: the crawl has no credentials left.
    page.goto(dashboard + f"/crawls/{crawl.pk}/edit/")
    page.check("#id_remove_basic_auth")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url(re.compile(rf"/crawls/{crawl.pk}/$"))
    assert not CrawlAuth.objects.filter(crawl=crawl).exists()
    shown = page.inner_text("#settings-list")
    assert "HTTP basic auth\nnot set" in shown and "user bob" not in shown
