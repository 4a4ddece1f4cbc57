"""The new-crawl page's Authentication section in a real browser (headless Chromium, see
conftest.py): filled in, a cookies.txt chosen, refused once for a login URL off the seeds' hosts
without showing a secret back, then accepted; the crawl page names what is set, masked.
Screenshots at 1366 px and 390 px in test-artifacts/."""

from __future__ import annotations

import pytest

from crawls.models import Crawl
from tests.dashboard.test_browser import ARTIFACTS, PHONE, log_in
from tests.support.sites import LoginSite

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1366, "height": 900}
SECRETS = ("hdr-SECRET-1111", "ck-SECRET-2222", "basic-SECRET-4444", LoginSite.PASSWORD)


def shoot(page, name: str, selector: str) -> None:
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(200)
        page.screenshot(path=str(ARTIFACTS / f"{name}-{label}.png"), full_page=True)
        page.locator(selector).screenshot(path=str(ARTIFACTS / f"{name}-section-{label}.png"))
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= size["width"], f"{name} overflows at {size['width']} px: {width} px"
    page.set_viewport_size(DESKTOP)


def fill(page, site_url: str, login_url: str, jar) -> None:
    page.fill("#id_name", "behind a login")
    page.fill("#id_seeds", site_url + "/home")
    page.fill("#id_headers", f"X-Api-Key: {SECRETS[0]}")
    page.fill("#id_cookie", f"ck={SECRETS[1]}")
    page.set_input_files("#id_cookies_txt", str(jar))
    page.fill("#id_basic_user", "bob")
    page.fill("#id_basic_password", SECRETS[2])
    page.fill("#id_login_url", login_url)
    page.fill("#id_login_fields", f"username=alice\npassword={SECRETS[3]}")
    page.fill("#id_login_check_selector", "#logout")
    page.uncheck("#id_start_now")


def test_the_authentication_section_takes_secrets_and_never_shows_them(
    page, dashboard, user, make_site, tmp_path
):
    site = make_site(LoginSite({"/home": "<p>home</p>"}))
    jar = tmp_path / "cookies.txt"
    jar.write_text("127.0.0.1\tFALSE\t/\tFALSE\t0\tprefs\ttxt-SECRET-3333\n")
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/crawls/new/")
    shoot(page, "crawl-new-auth-empty", "#authentication")

    fill(page, site.url, "http://elsewhere.example/login", jar)
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_selector("#id_login_url-errors")
    assert "is not on the crawl's own hosts" in page.inner_text("#id_login_url-errors")
    assert "enter them again" in page.inner_text("#authentication")
    html = page.content()
    assert not [secret for secret in (*SECRETS, "txt-SECRET-3333") if secret in html]
    shoot(page, "crawl-new-auth-refused", "#authentication")

    fill(page, site.url, site.url + "/login", jar)
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_selector("#settings-list")
    shown = page.inner_text("#settings-list")
    assert "Extra headers\nset (X-Api-Key)" in shown and "set (user bob, password set)" in shown
    assert not [secret for secret in SECRETS if secret in page.content()]
    shoot(page, "crawl-auth-detail", "#settings")
    assert Crawl.objects.get().auth.basic_password == SECRETS[2]
