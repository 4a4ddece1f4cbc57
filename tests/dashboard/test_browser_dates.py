"""One date style on every page, in a real browser (headless Chromium at 1366 px against a real
daphne and real workers; the fixtures: conftest.py). The browser runs in Kathmandu's zone
(UTC+05:45, the server's is UTC): every moment shown must read `2026-11-23 19:12:11` in that
zone, inside a <time> whose hover gives the same time and the zone; an age ("5 min ago") must
have that exact time on hover; and no other text on the page may look like a date or a time of
day, however it is written. Values that arrive later (the crawl list's live updates, the
proxies' health panel, the workers page's refresh) are checked after they arrive."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from crawlhub import tokens
from crawlhub.models import ApiToken
from crawls import schedules, services, webhooks
from crawls.models import Crawl, CrawlEvent, FailedRequest, WebhookDelivery
from proxies import pool
from proxies.models import Proxy, ProxyEvent, ProxyJob
from tests.dashboard.conftest import watch_csp
from tests.dashboard.test_browser import ARTIFACTS, log_in, wait_until
from tests.dashboard.test_pages_browser import make_pages
from tests.support.crawling import wait_for_state
from tests.support.sites import pages_site

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1366, "height": 900}
ZONE = "Asia/Kathmandu"

# The check that runs in the page (a function of no arguments): {"bad": [...], "seen": [...]}.
DATES_ON_PAGE = (Path(__file__).parent / "dates_on_page.js").read_text()


def dates_on(page) -> tuple[list[str], list[str]]:
    found = page.evaluate(DATES_ON_PAGE)
    return found["bad"], found["seen"]


def check(page, url: str, name: str, *, expect: int = 1) -> list[str]:
    """The page at `url` shows at least `expect` dates, every one in the one style."""
    response = page.goto(url)
    assert response.status == 200, url
    page.wait_for_load_state("networkidle")
    bad, seen = dates_on(page)
    page.screenshot(path=str(ARTIFACTS / f"dates-{name}-1366.png"), full_page=True)
    assert bad == [], (url, bad)
    assert len(seen) >= expect, (url, seen)
    return seen


@pytest.fixture
def kathmandu(browser, dashboard):
    """A tab in Kathmandu's time zone at 1366 px; fails the test on any CSP violation."""
    context = browser.new_context(viewport=DESKTOP, timezone_id=ZONE)
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        violations = watch_csp(page)
        yield page
    finally:
        context.close()
    assert violations == [], violations


def a_finished_crawl(user, name: str, minutes_ago: int) -> Crawl:
    now = timezone.now()
    crawl = services.crawl_create(user=user, name=name, seeds=["http://shop.test/"])
    Crawl.objects.filter(pk=crawl.pk).update(
        state="finished",
        started_at=now - timedelta(minutes=minutes_ago + 3),
        finished_at=now - timedelta(minutes=minutes_ago),
    )
    crawl.refresh_from_db()
    return crawl


@pytest.mark.timeout(1200)
def test_every_page_with_a_date_shows_it_one_way(kathmandu, dashboard, staff, user, make_site):
    page = kathmandu
    now = timezone.now()
    older = a_finished_crawl(user, "shop last week", 7 * 24 * 60)
    crawl = a_finished_crawl(user, "shop", 30)
    make_pages(older, 5)
    pages = make_pages(crawl, 12)
    FailedRequest.objects.create(
        crawl=crawl,
        url="http://shop.test/boom",
        attempts=3,
        last_error="HTTP 500",
        last_status=500,
        failed_at=now - timedelta(minutes=31),
        url_hash="b" * 40,
    )
    CrawlEvent.objects.create(crawl=crawl, kind=CrawlEvent.Kind.STARTED, user=user)
    hook, _ = webhooks.webhook_create(
        user=user, url="http://hooks.test/in", events=["finished"], crawl=crawl
    )
    WebhookDelivery.objects.create(
        webhook=hook,
        crawl=crawl,
        event="finished",
        payload={},
        status="failed",
        attempts=1,
        response_status=500,
        response_snippet="oops",
        error="HTTP 500",
        next_attempt_at=now + timedelta(minutes=5),
        log=[
            {
                "at": (now - timedelta(minutes=2)).isoformat(),
                "status_code": 500,
                "error": "HTTP 500",
                "ms": 9,
            }
        ],
    )
    schedule = schedules.schedule_create(user=user, template=crawl, cron="0 3 * * *")
    schedule.last_run_at = now - timedelta(hours=5)
    schedule.save(update_fields=["last_run_at"])
    Crawl.objects.filter(pk=older.pk).update(schedule=schedule)
    token, _ = tokens.token_create(user=user, name="ci")
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now - timedelta(minutes=3))
    proxy = Proxy.objects.create(
        scheme="http",
        host="10.0.0.1",
        port=8080,
        state="active",
        last_validated_at=now - timedelta(minutes=7),
    )
    pool.record_check(proxy=proxy.key, url=proxy.url, ok=True, latency_ms=90)
    ProxyEvent.objects.create(proxy=proxy, kind=ProxyEvent.Kind.VALIDATED, detail="ok")
    job = ProxyJob.objects.create(
        kind=ProxyJob.Kind.IMPORT, state=ProxyJob.State.DONE, user=staff, finished_at=now
    )

    log_in(page, dashboard, "alice")
    base = dashboard
    check(page, base + "/", "crawl-list", expect=2)
    check(page, f"{base}/crawls/{crawl.pk}/", "crawl-detail", expect=4)
    check(page, f"{base}/crawls/{crawl.pk}/pages/", "pages", expect=12)
    check(page, f"{base}/crawls/{crawl.pk}/pages/{pages[0].pk}/", "page-detail")
    check(page, f"{base}/crawls/{crawl.pk}/hosts/", "hosts", expect=0)
    check(page, f"{base}/crawls/compare/?a={older.pk}&b={crawl.pk}&show=new", "compare", expect=2)
    check(page, base + "/webhooks/", "webhooks")
    check(page, f"{base}/webhooks/{hook.pk}/", "webhook", expect=3)
    check(page, base + "/schedules/", "schedules", expect=2)
    check(page, f"{base}/schedules/{schedule.pk}/", "schedule", expect=4)
    check(page, base + "/account/tokens/", "tokens", expect=2)
    check(page, base + "/workers/", "workers", expect=2)  # both workers' heartbeats
    # A refresh of the workers page rewrites its tables: still the one style.
    page.wait_for_timeout(3500)
    assert dates_on(page)[0] == []

    # Staff pages: the proxies, their ages (the exact time on hover), the health panel's
    # age that arrives over the websocket.
    page.context.clear_cookies()
    log_in(page, dashboard, "sam")
    check(page, base + "/proxies/", "proxies", expect=1)
    wait_until(
        lambda: page.locator('[data-h="last_validated_age_s"] time[data-age]').count(),
        timeout=30,
        what="the health panel's last check, over the websocket",
    )
    assert dates_on(page)[0] == []
    check(page, f"{base}/proxies/{proxy.pk}/", "proxy-detail", expect=3)
    check(page, base + "/proxies/import", "proxy-import")
    check(page, f"{base}/proxies/jobs/{job.pk}/", "proxy-job")

    # A crawl that starts while the list is open: its start arrives over the websocket.
    site = make_site(
        pages_site(
            {
                "/": "<html><body><a href='/a'>a</a></body></html>",
                "/a": "<html><body>a</body></html>",
            }
        )
    )
    live = services.crawl_create(
        user=staff, name="live one", seeds=[site.url + "/"], obey_robots=False
    )
    page.goto(base + "/")
    row = page.locator(f'tr[data-crawl="{live.pk}"]')
    assert row.locator(".c-started time").count() == 0
    services.crawl_start(crawl=live, user=staff)
    wait_until(
        lambda: row.locator(".c-started time").count(),
        timeout=60,
        what="the start of the crawl, over the websocket",
    )
    wait_for_state(live, {"finished"}, timeout=120)
    wait_until(
        lambda: row.locator('[data-field="duration"][data-when]').count(),
        timeout=60,
        what="the end of the crawl, over the websocket",
    )
    bad, _ = dates_on(page)
    page.screenshot(path=str(ARTIFACTS / "dates-crawl-list-live-1366.png"), full_page=True)
    assert bad == []
