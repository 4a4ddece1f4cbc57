"""The new-crawl page's Authentication section in a real browser (headless Chromium, see
conftest.py): filled in, a cookies.txt chosen, refused once for a login URL off the seeds' hosts
without showing a secret back, then accepted; the crawl page names what is set, masked, and
where it goes; the owner enters them again for a seed added on another origin.
Screenshots at 1366 px and 390 px in test-artifacts/."""

from __future__ import annotations

import pytest

from crawls import schedules, services
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


def test_the_owner_enters_credentials_again_for_a_seed_on_another_origin(
    page, dashboard, user, make_site
):
    # A draft with credentials for one site, and a seed added on another port: the crawl page
    # says that seed's origin does not get them; entered again, they go to both.
    home, other = (make_site(LoginSite({"/": "<p>home</p>"})) for _ in range(2))
    crawl = services.crawl_create(
        user=user,
        name="two origins",
        seeds=[home.url + "/"],
        auth={
            "headers": f"X-Api-Key: {SECRETS[0]}",
            "basic_user": "bob",
            "basic_password": SECRETS[2],
        },
    )
    services.crawl_add_seeds(crawl=crawl, urls=[other.url + "/"], user=user)
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    note = page.inner_text("#seeds-credentials")
    assert f"The saved credentials go only to {home.url}, the origins they were" in note
    assert "Credentials sent to\n" + home.url in page.inner_text("#settings-list")
    shoot(page, "crawl-credentials-bound", "#add-seeds")

    page.locator("#seeds-credentials").get_by_role("link", name="enter them again").click()
    where = page.inner_text("#credentials-origins")
    assert f"go only to {home.url}" in where and f"seeds on {other.url} are crawled" in where
    shoot(page, "crawl-credentials-again", "#credentials-origins")
    page.fill("#id_headers", f"X-Api-Key: {SECRETS[0]}")
    page.fill("#id_basic_user", "bob")
    page.fill("#id_basic_password", SECRETS[2])
    page.get_by_role("button", name="Save the credentials").click()
    page.wait_for_selector("#settings-list")
    both = sorted([home.url, other.url])
    assert f"Credentials saved: sent to {', '.join(both)}." in page.content()
    assert "Credentials sent to\n" + "\n".join(both) in page.inner_text("#settings-list")
    assert not [secret for secret in SECRETS if secret in page.content()]

    page.goto(f"{dashboard}/crawls/{crawl.pk}/edit/")
    kept = page.inner_text("#credentials-kept")
    assert f"bound to {', '.join(both)}: new origins do not get them" in kept
    shoot(page, "crawl-edit-credentials-bound", "#authentication")

    schedule = schedules.schedule_create(user=user, template=crawl, cron="@daily")
    page.goto(f"{dashboard}/schedules/{schedule.pk}/")
    said = page.inner_text("#schedule-credentials")
    assert f"Each run carries the template's credentials, sent only to {', '.join(both)}" in said
    shoot(page, "schedule-credentials", "#schedule-credentials")
