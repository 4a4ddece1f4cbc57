"""Alert settings and history on a crawl's page, in headless Chromium at 1366 px and 390 px: the
form reports each bad field and keeps what was typed, a rule added shows in the rules, and an
alert that fired shows in the history (what, which crawl, the figures, when). Screenshots go to
test-artifacts/alerts-*.png."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from crawls import alert_checks, services
from crawls.models import Alert, AlertRule
from tests.dashboard.test_browser import log_in
from tests.dashboard.test_browser_crawl_detail import ARTIFACTS, DESKTOP, PHONE, no_sideways_scroll
from tests.support.sites import pages_site

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def shoot(page, name: str) -> None:
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.locator("#alerts").screenshot(path=str(ARTIFACTS / f"alerts-{name}-{label}.png"))
    page.set_viewport_size(DESKTOP)


def test_alert_rules_are_set_and_their_history_read_on_the_crawl_page(
    page, dashboard, user, make_site
):
    pages = pages_site(
        {"/": "".join(f'<a href="/p{n}">p{n}</a>' for n in range(30))}
        | {f"/p{n}": "leaf" for n in range(30)}
    )

    def slow(request):
        time.sleep(0.5)
        return pages(request)

    site = make_site(slow)
    crawl = services.crawl_create(
        user=user, name="watched", seeds=[site.url + "/"], obey_robots=False, threads=1, slices=1
    )
    services.crawl_start(crawl=crawl, user=user)
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.wait_for_selector("#live.ok")
    assert page.locator("#alerts .empty").first.inner_text() == "No alert rule watches this crawl."

    # Every bad field at once, each under its field; what was typed stays.
    page.locator("#alert-new summary").click()
    page.select_option("#id_kind", "error_rate")
    page.fill("#id_percent", "0")
    page.fill("#id_minutes", "")
    page.fill("#id_emails", "ops@example.com, not-an-address")
    page.locator("#alert-new button[type=submit]").click()
    page.wait_for_selector("#id_percent-errors")
    assert page.locator("#id_percent-errors").inner_text() == (
        "N (the error rate, in percent) must be from 1 to 100; 0 is not."
    )
    assert page.locator("#id_minutes-errors").inner_text() == (
        "Enter M (minutes): a whole number from 1 to 1440."
    )
    assert page.locator("#id_emails-errors").inner_text() == (
        "Not an e-mail address: “not-an-address” (address 2)."
    )
    assert page.input_value("#id_emails") == "ops@example.com, not-an-address"
    assert page.input_value("#id_percent") == "0"
    no_sideways_scroll(page)
    shoot(page, "form-errors")

    page.fill("#id_percent", "40")
    page.fill("#id_minutes", "5")
    page.fill("#id_emails", "ops@example.com")
    page.locator("#alert-new button[type=submit]").click()
    page.wait_for_selector("#alert-rules")
    page.locator("#alert-new summary").click()
    page.select_option("#id_kind", "ended_badly")
    page.locator("#alert-new button[type=submit]").click()
    page.wait_for_function("document.querySelectorAll('#alert-rules tbody tr').length === 2")
    rows = page.locator("#alert-rules tbody tr").all_inner_texts()
    assert any("Error rate over 40% in 5 min" in r and "ops@example.com" in r for r in rows)
    assert any("Ended abnormally" in r for r in rows)
    assert AlertRule.objects.filter(crawl=crawl).count() == 2

    # The crawl is cancelled; the next pass of the checks fires "ended abnormally", once.
    services.crawl_cancel(crawl=crawl, user=user)
    alert_checks.check_alerts(now=timezone.now())
    alert_checks.check_alerts(now=timezone.now())
    alert = Alert.objects.get(crawl=crawl)
    page.reload()  # on the page still, at #h-alerts
    page.wait_for_selector("#alert-history tbody tr")
    history = page.locator("#alert-history tbody tr").all_inner_texts()
    assert len(history) == 1
    assert alert.line in history[0]
    assert f"Crawl #{crawl.pk} “watched” ended abnormally" in history[0]
    assert "Cancelled by alice" in history[0]
    api = page.request.get(f"{dashboard}/api/alerts/?crawl={crawl.pk}").json()
    assert [a["line"] for a in api["results"]] == [alert.line]
    no_sideways_scroll(page)
    shoot(page, "history")

    # Switched off from the page.
    page.locator("#alert-rules tbody tr", has_text="Error rate").get_by_role(
        "button", name="Switch off"
    ).click()
    page.wait_for_selector("#alert-rules tbody tr:has-text('Error rate') >> text=off")
    assert not AlertRule.objects.get(kind="error_rate").active

    # The Alerts page lists the rules of one's crawls, with the same form.
    page.goto(f"{dashboard}/alerts/")
    rows = page.locator("#alert-rules tbody tr").all_inner_texts()
    assert len(rows) == 2 and any("Error rate over 40% in 5 min" in r and "off" in r for r in rows)
    no_sideways_scroll(page)
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"alerts-page-{label}.png"), full_page=True)
