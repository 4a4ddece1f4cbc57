"""The dashboard's pages on a phone and on a desktop, in a real browser (headless Chromium
against a real daphne and real workers; the fixtures: conftest.py): no page scrolls sideways at
390 px and the nav folds under a button; the crawl list's owner, search, filters, order,
durations and pages; the new-crawl form's errors all at once with a summary on top; a token and
a webhook made once however often the page is reloaded; a webhook's test delivery and its
answer shown as text; styled error pages with the nav; a favicon; `./run` in the hints; worker
hosts and PIDs for staff only. Screenshots at 1366 and 390 px in test-artifacts/."""

from __future__ import annotations

import re
import socket
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from crawlhub.models import ApiToken
from crawls import schedules, services, webhooks
from crawls.models import Crawl, Page, Webhook, WebhookDelivery
from proxies.models import Proxy
from tests.dashboard.test_browser import ARTIFACTS, log_in, wait_until
from tests.dashboard.test_browser_results import no_sideways_scroll
from tests.dashboard.test_pages_browser import make_pages
from tests.support.clients import PASSWORD
from tests.support.sites import Response

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DESKTOP, PHONE = {"width": 1366, "height": 900}, {"width": 390, "height": 844}


def shoot(page, name: str) -> None:
    """The page as it is now, at both widths (the phone's checked for sideways scrolling)."""
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(200)
        page.screenshot(path=str(ARTIFACTS / f"everywhere-{name}-{label}.png"), full_page=True)
        if label == "390":
            assert no_sideways_scroll(page)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (page.url, width)


def a_crawl(user, name: str, *, seed: str = "http://shop.test/", state: str = "", **times):
    crawl = services.crawl_create(user=user, name=name, seeds=[seed])
    if state or times:
        Crawl.objects.filter(pk=crawl.pk).update(**({"state": state} if state else {}), **times)
        crawl.refresh_from_db()
    return crawl


@pytest.mark.timeout(1200)  # twenty pages, each shot twice, on a busy machine
def test_every_page_fits_a_phone_and_the_nav_folds_under_a_button(
    page, dashboard, staff, user, browser
):
    staff.is_superuser = True  # the admin's channel list
    staff.save(update_fields=["is_superuser"])
    crawl = a_crawl(
        user,
        "shop with a rather long name that goes on and on",
        state="finished",
        started_at=timezone.now() - timedelta(minutes=3),
        finished_at=timezone.now(),
    )
    make_pages(crawl, 40)
    one = Page.objects.filter(crawl=crawl).first()
    for n in range(3):
        a_crawl(staff, f"other {n}", seed=f"http://other{n}.test/very/long/path/" + "x" * 60)
    proxy = Proxy.objects.create(scheme="http", host="10.0.0.1", port=8080, state="active")
    hook, _ = webhooks.webhook_create(
        user=user, url="http://hooks.test/" + "a" * 90, events=["finished"], crawl=crawl
    )
    WebhookDelivery.objects.create(
        webhook=hook,
        crawl=crawl,
        event="finished",
        payload={},
        status="failed",
        attempts=1,
        response_status=500,
        response_snippet="<html><body>" + "oops " * 150,
        error="HTTP 500",
        log=[{"at": timezone.now().isoformat(), "status_code": 500, "error": "HTTP 500", "ms": 9}],
    )
    schedule = schedules.schedule_create(user=staff, template=crawl, cron="0 3 * * *")
    ApiToken.objects.all().delete()

    # Logged out: the login page.
    page.set_viewport_size(PHONE)
    page.goto(dashboard + "/login/")
    shoot(page, "login")
    log_in(page, dashboard, "sam")

    # The nav: one line of bar on a phone, its links under the Menu button.
    page.set_viewport_size(PHONE)
    page.goto(dashboard + "/")
    menu = page.get_by_role("button", name="Menu")
    nav = page.locator('nav[aria-label="Main"]')
    assert menu.is_visible() and nav.is_hidden()
    assert page.locator("#topbar").bounding_box()["height"] < 60
    menu.click()
    assert nav.get_by_role("link", name="Workers").is_visible()
    assert menu.get_attribute("aria-expanded") == "true"
    page.screenshot(path=str(ARTIFACTS / "everywhere-nav-open-390.png"), full_page=True)
    assert no_sideways_scroll(page)
    page.set_viewport_size(DESKTOP)
    assert nav.is_visible() and menu.is_hidden()

    walk = [
        ("/", "crawl-list", "Crawls"),
        ("/?q=shop&state=finished", "crawl-list-search", "Crawls"),
        ("/crawls/new/", "crawl-new", "New crawl"),
        (f"/crawls/{crawl.pk}/pages/", "pages", None),
        (f"/crawls/{crawl.pk}/pages/{one.pk}/", "page-detail", None),
        (f"/crawls/{crawl.pk}/hosts/", "hosts", None),
        ("/proxies/", "proxies", "Proxies"),
        (f"/proxies/{proxy.pk}/", "proxy-detail", None),
        ("/proxies/import", "proxy-import", "Import proxies"),
        ("/workers/", "workers", "Workers"),
        ("/account/tokens/", "tokens", "API tokens"),
        ("/webhooks/", "webhooks", "Webhooks"),
        (f"/webhooks/{hook.pk}/", "webhook", "Webhook"),
        ("/schedules/", "schedules", "Scheduled crawls"),
        ("/schedules/new/", "schedule-new", None),
        (f"/schedules/{schedule.pk}/", "schedule", None),
        ("/admin/crawls/channel/", "channels", None),
    ]
    for path, name, heading in walk:
        page.set_viewport_size(PHONE)
        response = page.goto(dashboard + path)
        assert response.status == 200, path
        assert heading is None or page.locator("h1", has_text=heading).first.is_visible(), path
        shoot(page, name)

    # The error pages: crawlhub's layout and nav, at both widths (DEBUG is off in daphne).
    page.set_viewport_size(PHONE)
    response = page.goto(dashboard + "/no/such/page/")
    assert response.status == 404
    assert page.locator("h1", has_text="Page not found").is_visible()
    assert page.locator("#topbar .brand").is_visible() and menu.is_visible()
    assert page.locator('link[rel="stylesheet"]').count() == 1
    shoot(page, "404")
    assert page.goto(f"{dashboard}/crawls/{crawl.pk + 1000}/").status == 404
    assert page.locator("h1", has_text="Page not found").is_visible()

    # A favicon, linked from every page and at /favicon.ico.
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    answer = page.request.get(dashboard + icon)
    assert answer.status == 200 and "svg" in answer.headers["content-type"]
    assert page.request.get(dashboard + "/favicon.ico").status == 200

    # 403, for alice on the proxies page.
    context = browser.new_context(viewport=PHONE)
    try:
        other = context.new_page()
        log_in(other, dashboard, "alice")
        response = other.goto(dashboard + "/proxies/")
        assert response.status == 403
        assert other.locator("h1", has_text="Not allowed").is_visible()
        assert "Only staff" in other.locator("main").inner_text()
        assert other.locator('nav[aria-label="Main"]').count() == 1
        shoot(other, "403")
    finally:
        context.close()


def test_a_server_error_page_has_the_layout_and_the_nav(page, dashboard, staff, settings):
    """A view that fails: handler500's page, rendered in-process (no view of the product
    fails on purpose) and shown in the browser on the dashboard's origin, for its styles."""
    settings.ROOT_URLCONF = "tests.dashboard.failing_urls"
    client = Client(raise_request_exception=False)
    client.force_login(staff)
    response = client.get("/boom/")
    assert settings.DEBUG is False and response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong" in html and 'aria-label="Main"' in html and "sam" in html
    anonymous = Client(raise_request_exception=False).get("/login-free-boom/")
    assert anonymous.status_code == 500 and "Something went wrong" in anonymous.content.decode()
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/workers/")
    page.set_content(html)
    page.wait_for_load_state()
    assert page.locator("h1", has_text="Something went wrong").is_visible()
    shoot(page, "500")


def test_the_crawl_list_has_owners_search_filters_order_durations_and_pages(
    page, dashboard, staff, user, other_user
):
    now = timezone.now()
    long = a_crawl(
        user,
        "long one",
        state="finished",
        started_at=now - timedelta(hours=2, minutes=5),
        finished_at=now,
    )
    a_crawl(
        other_user,
        "short one",
        state="finished",
        started_at=now - timedelta(seconds=40),
        finished_at=now,
    )
    a_crawl(user, "docs crawl", seed="http://docs.example.org/start")
    for n in range(55):
        a_crawl(other_user, f"filler {n:02d}")

    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/")
    headers = page.locator("#crawls thead th").all_inner_texts()
    assert "Owner" in headers and "Duration" in headers, headers
    assert "58 crawls" in page.locator(".list-count").inner_text()
    assert page.locator("#crawls tbody tr").count() == 25
    shoot(page, "list-staff")

    # Paging keeps the filters; the last page has the rest.
    page.get_by_role("link", name="Last page").click()
    page.wait_for_url(re.compile(r"page=3"))
    assert page.locator("#crawls tbody tr").count() == 8

    # Search by a seed, then by a name; a state filter; sorted by duration.
    page.goto(dashboard + "/")
    page.fill("#f-q", "docs.example.org")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url(re.compile(r"q=docs.example.org"))
    assert page.locator("#crawls tbody tr td.c-name").all_inner_texts()[0].startswith("#")
    assert "docs crawl" in page.locator("#crawls tbody").inner_text()
    assert page.locator("#crawls tbody tr").count() == 1
    page.fill("#f-q", "")
    page.get_by_role("button", name="Search").click()
    page.select_option("#f-state", "finished")
    page.wait_for_url(re.compile(r"state=finished"))
    page.select_option("#f-sort", "longest")
    page.wait_for_url(re.compile(r"sort=longest"))
    rows = page.locator("#crawls tbody tr")
    assert rows.count() == 2
    first = rows.nth(0)
    assert "long one" in first.inner_text()
    assert first.locator("td.c-duration").inner_text() == "2 h 5 min"
    assert first.locator("td.c-owner").inner_text() == "alice"
    assert rows.nth(1).locator("td.c-duration").inner_text() == "40 s"
    shoot(page, "list-filtered")

    # On a phone, a crawl is a few short lines, not a card of twelve.
    page.set_viewport_size(PHONE)
    page.goto(dashboard + "/?state=finished&sort=longest")
    row = page.locator(f'tr[data-crawl="{long.pk}"]')
    assert row.bounding_box()["height"] < 100, row.bounding_box()
    assert "2 h 5 min" in row.inner_text() and "by alice" in row.inner_text()
    assert no_sideways_scroll(page)
    page.screenshot(path=str(ARTIFACTS / "everywhere-list-phone-390.png"), full_page=True)

    # Without staff rights: one's own crawls, and no owner column.
    page.context.clear_cookies()
    log_in(page, dashboard, "alice")
    page.set_viewport_size(DESKTOP)
    page.goto(dashboard + "/")
    assert "Owner" not in page.locator("#crawls thead").inner_text()
    assert page.locator("#crawls tbody tr").count() == 2
    assert "filler" not in page.locator("#crawls tbody").inner_text()


def test_the_crawl_form_says_every_problem_at_once_with_a_summary_and_units(page, dashboard, user):
    log_in(page, dashboard, "alice")
    page.set_viewport_size(PHONE)
    page.goto(dashboard + "/crawls/new/")
    # Units and help by every number.
    assert page.locator("#id_timeout + .unit").inner_text() == "seconds"
    assert page.locator("#id_host_delay + .unit").inner_text() == "seconds"
    assert page.input_value("#id_max_bytes") == "5 MB"
    assert "Higher means more important" in page.locator("#id_priority_helptext").inner_text()
    for name in (
        "max_depth",
        "max_pages",
        "priority",
        "threads",
        "slices",
        "host_delay",
        "host_concurrency",
        "timeout",
        "max_retries",
    ):
        assert page.locator(f"#id_{name} + .unit").inner_text(), name
        assert page.locator(f"#id_{name}_helptext").inner_text(), name

    # Inputs the form refuses itself (a name and a depth left empty, a size with an unknown
    # unit) and values the services refuse (a seed, a pattern, a timeout): all in one round.
    page.fill("#id_name", "")
    page.fill("#id_seeds", "ftp://nope.example/")
    page.fill("#id_include_patterns", "(unclosed")
    page.fill("#id_max_depth", "")
    page.fill("#id_timeout", "0")
    page.fill("#id_max_bytes", "5 parsecs")
    page.get_by_role("button", name="Create crawl").click()
    summary = page.locator("#error-summary")
    assert summary.is_visible()
    items = summary.locator("li").all_inner_texts()
    assert "6 problems" in summary.locator("h2").inner_text(), items
    labels = [text.split(":")[0] for text in items]
    assert labels == [
        "Name",
        "Seeds",
        "Include patterns",
        "Max depth",
        "Timeout",
        "Max bytes a page",
    ], items
    assert not any(re.search(r"\b[a-z]+_[a-z_]+:", text) for text in items), items
    assert "line 1: '(unclosed' is not a valid regular expression" in items[2]
    page.screenshot(path=str(ARTIFACTS / "everywhere-form-errors-390.png"), full_page=True)
    assert no_sideways_scroll(page)
    # Each links to its field.
    summary.get_by_role("link", name="Include patterns").click()
    assert page.evaluate("location.hash") == "#id_include_patterns"
    assert "line 1:" in page.locator("#id_include_patterns-errors").inner_text()
    assert Crawl.objects.count() == 0


def test_a_refused_form_once_fixed_creates_the_crawl_with_the_size_as_typed(page, dashboard, user):
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/crawls/new/")
    page.fill("#id_name", "")
    page.fill("#id_max_depth", "")
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_selector("#error-summary")
    page.fill("#id_name", "form crawl")
    page.fill("#id_seeds", "http://shop.test/")
    page.fill("#id_max_depth", "3")
    page.fill("#id_max_bytes", "512 KB")
    page.uncheck("#id_start_now")
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_url(re.compile(r"/crawls/\d+/$"), wait_until="commit", timeout=60_000)
    assert Crawl.objects.get().max_bytes == 512 * 1024


def test_a_token_is_made_once_however_often_its_page_is_reloaded(page, dashboard, user):
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/account/tokens/")
    page.fill("#id_name", "nightly export")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text()
    assert ApiToken.objects.filter(user=user).count() == 1
    assert page.url == dashboard + "/account/tokens/"
    page.reload()
    page.reload()
    assert ApiToken.objects.filter(user=user).count() == 1
    assert page.locator("#new-token").count() == 0 and token not in page.content()
    shoot(page, "tokens-after-reload")


def test_a_webhook_sends_a_test_delivery_and_shows_the_answer_as_text(
    page, dashboard, user, make_site
):
    received = []
    answer = '<b id="injected">hello</b><script>window.__ran = 1</script>' + "z" * 900

    def hook(request):
        received.append(request)
        return Response(status=200, body=answer)

    site = make_site(hook)
    crawl = a_crawl(user, "hooked")
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/webhooks/")
    page.fill("#id_url", site.url + "/hook")
    page.select_option("#id_crawl", str(crawl.pk))
    page.get_by_role("button", name="Create webhook").click()
    page.wait_for_url(re.compile(r"/webhooks/\d+/$"))
    webhook = Webhook.objects.get()
    secret = page.locator("#secret").inner_text()
    assert secret == webhook.secret
    page.reload()
    assert Webhook.objects.count() == 1 and page.locator("#secret").count() == 0

    page.get_by_role("button", name="Send a test delivery").click()
    page.wait_for_selector(".messages")
    assert "delivered: HTTP 200" in page.locator(".messages").inner_text()
    assert len(received) == 1
    headers = {name.lower(): value for name, value in received[0].headers.items()}
    assert webhooks.verify_signature(secret, received[0].body, headers["x-crawlhub-signature"])
    assert headers["x-crawlhub-event"] == "webhook.test"
    row = page.locator("table.deliveries tbody tr").first
    assert "Test delivery" in row.inner_text()
    shown = row.locator("pre.snippet").inner_text()
    assert shown.startswith('<b id="injected">hello</b><script>')
    assert len(shown) <= 300 and shown.endswith("…")
    assert page.locator("#injected").count() == 0
    assert page.evaluate("window.__ran") is None
    shoot(page, "webhook-test-delivery")


def test_worker_hosts_and_pids_are_for_staff_and_hints_say_run(page, dashboard, user, staff):
    host = socket.gethostname()
    log_in(page, dashboard, "alice")
    # An empty list says how to start workers with ./run.
    assert "./run up" in page.locator(".welcome").inner_text()
    assert "manage.py" not in page.content()
    page.goto(dashboard + "/workers/")
    wait_until(
        lambda: page.locator("#workers-live table").count() > 0,
        timeout=30,
        what="the workers table",
    )
    headers = page.locator("#workers-live table").first.locator("th").all_inner_texts()
    assert "Host" not in headers and "PID" not in headers, headers
    assert host not in page.locator("#workers-live").inner_text()
    shoot(page, "workers-user")
    page.context.clear_cookies()
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/workers/")
    headers = page.locator("#workers-live table").first.locator("th").all_inner_texts()
    assert "Host" in headers and "PID" in headers, headers
    assert host in page.locator("#workers-live").inner_text()


def test_a_signed_out_workers_page_stops_refreshing_without_touching_the_login_cookie(
    page, dashboard, user
):
    """The workers page reads itself again every 3 s. Signed out (cookies gone), its poll is
    redirected to the login page; followed, that page set a new CSRF cookie under the login
    form just opened in the tab (a run beside a crawl had its next login refused so). The poll
    does not follow it: it says so and stops."""
    log_in(page, dashboard, "alice")
    page.goto(dashboard + "/workers/")
    wait_until(lambda: page.locator("#live").inner_text() == "live", timeout=30, what="live")
    page.context.clear_cookies()
    wait_until(
        lambda: page.locator("#live").inner_text().startswith("signed out"),
        timeout=30,
        what="the badge saying signed out",
    )
    page.wait_for_timeout(3500)  # a turn of the poll, had it gone on
    assert page.context.cookies() == []
    shoot(page, "workers-signed-out")


def test_a_form_with_an_out_of_date_token_gets_crawlhub_s_page_saying_to_reload(
    page, dashboard, user
):
    """A login form opened, then cookies cleared and the login page opened in another tab (a
    new CSRF cookie): the first form is refused by the CSRF check with crawlhub's 403 page,
    which says what happened and what to do; not Django's page, whose inline style the
    Content-Security-Policy refuses (the page fixture fails a test on any violation)."""
    page.goto(dashboard + "/login/")
    page.context.clear_cookies()
    other = page.context.new_page()
    other.goto(dashboard + "/login/")
    other.close()
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    with page.expect_response(lambda r: r.request.method == "POST") as sent:
        page.click("button[type=submit]")
    assert sent.value.status == 403
    page.wait_for_load_state()
    assert page.locator("h1", has_text="Not allowed").is_visible()
    text = page.locator("main").inner_text()
    assert "out-of-date security token" in text and "reload that page" in text, text
    assert page.locator('a[href="/"]', has_text="Back to the crawls").count() == 1
    shoot(page, "csrf-refused")
    # Reloaded, the form goes through.
    log_in(page, dashboard, "alice")
    assert "/login/" not in page.url
