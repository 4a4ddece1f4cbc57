"""The API's documentation page in a real browser (headless Chromium against daphne; fixtures in
conftest.py): Swagger UI runs under the dashboard's Content-Security-Policy with no console
error, shows every operation of the schema, opens one, and fits a phone. Screenshots at 1366
and 390 px in test-artifacts/."""

from __future__ import annotations

import pytest

from tests.api.test_schema import ENDPOINTS
from tests.dashboard.test_browser import ARTIFACTS, log_in, wait_for_js
from tests.dashboard.test_browser_results import no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DESKTOP, PHONE = {"width": 1366, "height": 900}, {"width": 390, "height": 844}
OPERATIONS = "document.querySelectorAll('.swagger-ui .opblock').length"


def shoot(page, name: str) -> None:
    """The window at both widths, where it is scrolled to; the phone's never scrolls sideways."""
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"api-docs-{name}-{label}.png"))
        if label == "390":
            assert no_sideways_scroll(page)


def test_the_api_docs_show_every_operation_with_no_error(page, dashboard, user):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed: list[str] = []
    page.on("requestfailed", lambda r: None if _favicon_left(r) else failed.append(r.url))
    log_in(page, dashboard, user.username)
    page.goto(dashboard + "/api/docs/")
    expected = sum(len(methods) for methods in ENDPOINTS.values())
    wait_for_js(page, f"{OPERATIONS} >= {expected}")
    assert page.evaluate(OPERATIONS) == expected
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("crawlhub API")
    shown = page.locator(".swagger-ui .opblock-summary-path").all_inner_texts()
    assert {"/api/crawls/", "/api/crawls/{id}/export/", "/api/tokens/"} <= {
        path.replace("\u200b", "") for path in shown
    }
    shoot(page, "top")
    # An operation opens on its parameters and answers.
    page.set_viewport_size(DESKTOP)
    page.locator("#operations-crawls-crawls_export_retrieve .opblock-summary").click()
    wait_for_js(page, "!!document.querySelector('.opblock.is-open .parameters')")
    opened = page.locator(".opblock.is-open").inner_text()
    assert "application/wacz" in opened and "errors are still JSON" not in opened
    shoot(page, "operation")
    assert errors == [] and failed == [], (errors, failed)


def _favicon_left(request) -> bool:
    """A page's favicon, still loading when the page was left (the login form sent, the next
    page opened: on a loaded machine the browser asks for it late) is aborted by the
    navigation: not an error of any page."""
    return request.url.endswith("/favicon.svg") and request.failure == "net::ERR_ABORTED"
