"""The Proxies pages in a real browser, each test at 1366 px and at 390 px: the health tiles in
plain words, one way of showing dates, a bulk action with nothing ticked, a dead proxy found
with its reason, and no page scrolling sideways on a phone. Screenshots in test-artifacts/."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from proxies import pool
from proxies.models import Proxy, ProxyEvent, ProxyJob, ProxyState
from tests.dashboard.test_browser import ARTIFACTS, log_in, wait_until
from tests.dashboard.test_browser_results import no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SIZES = {"1366": {"width": 1366, "height": 900}, "390": {"width": 390, "height": 844}}
# The one way a proxies page shows when something happened: an age, the exact time in its title.
AGE = re.compile(r"^(just now|\d+ (s|min|h|d) ago|never)$")
TILES = {
    "All proxies",
    "Not checked yet",
    "Failing their first checks",
    "Working",
    "Disabled",
    "Removed",
    "Ready for crawls",
    "Top quality",
    "In use by crawls",
    "Typical response time",
    "Last passed check",
    "Second-best picks",
    "Removed in the last hour",
}


@pytest.fixture(params=list(SIZES))
def width(request, page) -> str:
    page.set_viewport_size(SIZES[request.param])
    return request.param


def shoot(page, name: str, width: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=True)


def validated_proxy(n: int, **fields) -> Proxy:
    """A proxy that has just passed its first check, as a validation pass leaves it."""
    fields = {
        "state": ProxyState.ACTIVE,
        "score": 6,
        "latency_ms": 80 + n,
        "successes": 1,
        "last_validated_at": timezone.now(),
        "anonymity": "elite",
        **fields,
    }
    proxy = Proxy.objects.create(scheme="http", host=f"10.0.0.{n}", port=8080, **fields)
    pool.record_check(proxy=proxy.key, url=proxy.url, ok=True, latency_ms=80 + n)
    return proxy


def dead_proxy() -> Proxy:
    """A proxy the validator removed: its connection was refused."""
    proxy = Proxy.objects.create(
        scheme="socks5h",
        host="dead-proxy.example",
        port=1080,
        username="crawler",
        password="s3cret",
        state=ProxyState.REMOVED,
        score=0,
        failures=1,
        last_error="connection refused",
        removed_at=timezone.now(),
        removed_why="validation: connection refused",
    )
    ProxyEvent.record([proxy], ProxyEvent.Kind.REMOVED, actor="validator", detail=proxy.removed_why)
    return proxy


def tiles(page) -> dict[str, str]:
    """Each health tile's label and its explanation."""
    found = {}
    for tile in page.locator("#health-counters > div").all():
        label = tile.locator("dt").inner_text().strip()
        note = tile.locator("dd.note")
        found[label] = note.inner_text().strip() if note.count() else ""
    return found


def test_every_health_tile_says_in_plain_words_what_it_counts(page, dashboard, staff, width):
    validated_proxy(1)
    validated_proxy(2)
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/proxies/")
    page.wait_for_selector("#pool-health #live.ok")
    shoot(page, "proxies-health", width)
    shown = tiles(page)
    assert set(shown) == TILES, shown
    assert all(len(note) > 15 for note in shown.values()), shown
    # Two proxies that just passed their first check are ready, and the page says why they are
    # not top quality yet (score 6 is not above 6).
    assert page.locator('[data-h="pooled"]').inner_text() == "2"
    assert page.locator('[data-h="selectable"]').inner_text() == "0"
    assert "score above 6" in shown["Top quality"].lower()
    assert "starts at 5" in shown["Top quality"]
    text = page.locator("main").inner_text()
    assert "Relaxed" not in text and "after selection" not in text


def test_the_proxies_pages_show_every_date_the_same_way(page, dashboard, staff, width):
    proxy = validated_proxy(1)
    validated_proxy(2, last_validated_at=timezone.now() - timezone.timedelta(hours=3))
    ProxyEvent.record([proxy], ProxyEvent.Kind.ADMITTED, actor="validator", detail="80 ms")
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/proxies/")
    page.wait_for_selector("#pool-health #live.ok")
    wait_until(
        lambda: page.locator('[data-h="last_validated_age_s"]').inner_text() != "…",
        timeout=15,
        what="the live age",
    )
    dates = page.locator("main time").all_inner_texts()
    dates.append(page.locator('[data-h="last_validated_age_s"]').inner_text())
    assert len(dates) >= 3 and all(AGE.match(d.strip()) for d in dates), dates
    assert "3 h ago" in dates
    # The exact time is one hover away, in the one date style with the browser's zone (the
    # live age's too, tests/dashboard/test_browser_dates.py checks the time itself).
    titles = page.locator("main time").evaluate_all("els => els.map(e => e.title)")
    exact = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \((.+, )?UTC[+-]\d\d:\d\d\)$"
    assert titles and all(re.match(exact, t) for t in titles), titles
    shoot(page, "proxies-dates", width)

    page.goto(dashboard + f"/proxies/{proxy.pk}/")
    dates = page.locator("main time").all_inner_texts()
    assert len(dates) >= 3 and all(AGE.match(d.strip()) for d in dates), dates
    assert not re.search(r"\d{4}-\d\d-\d\d", page.locator("main").inner_text())
    shoot(page, "proxy-detail-dates", width)


def test_a_bulk_action_with_nothing_selected_says_what_to_do(page, dashboard, staff, width):
    validated_proxy(1)
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/proxies/")
    page.select_option("select[name=action]", "disable")
    page.get_by_role("button", name="Apply to selected").click()
    page.wait_for_selector(".messages")
    messages = page.locator(".messages").inner_text()
    assert "Tick at least one proxy" in messages, messages
    assert "This field is required" not in messages
    assert Proxy.objects.get().state == ProxyState.ACTIVE
    shoot(page, "proxies-nothing-selected", width)


def test_a_dead_proxy_is_found_with_its_reason(page, dashboard, staff, width):
    validated_proxy(1)
    dead = dead_proxy()
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/proxies/")
    # The default list says removed proxies are left out, and leads to them.
    page.get_by_role("link", name="1 removed proxy").click()
    page.wait_for_url(re.compile(r"state=removed"))
    row = page.locator("tbody tr", has_text="dead-proxy.example")
    assert row.count() == 1
    assert "validation: connection refused" in row.inner_text()
    assert "crawler:****@" in row.inner_text() and "s3cret" not in page.content()
    shoot(page, "proxies-removed", width)
    # Searching for its address finds it too, whatever the state filter says.
    page.goto(dashboard + "/proxies/")
    page.get_by_label("Address").fill("dead-proxy")
    page.get_by_role("button", name="Filter").click()
    row = page.locator("tbody tr", has_text="dead-proxy.example")
    assert "validation: connection refused" in row.inner_text()
    row.get_by_role("link").first.click()
    page.wait_for_url(re.compile(rf"/proxies/{dead.pk}/$"))
    assert "validation: connection refused" in page.locator("main").inner_text()


def test_the_proxies_pages_do_not_scroll_sideways_on_a_phone(page, dashboard, staff, width):
    long_error = "proxy failed: " + "Tunnel connection failed: 502 Bad Gateway " * 6
    proxy = validated_proxy(
        1, source="https://lists.example.com/" + "free-proxies/" * 8, last_error=long_error
    )
    socks = Proxy.objects.create(
        scheme="socks5h",
        host="a-rather-long-proxy-host-name.proxies.example.com",
        port=1080,
        username="a-long-user-name-for-the-proxy",
        password="x",
        last_error=long_error,
    )
    ProxyEvent.record([socks], ProxyEvent.Kind.CHECK_FAILED, actor="validator", detail=long_error)
    dead_proxy()
    job = ProxyJob.objects.create(
        kind=ProxyJob.Kind.IMPORT,
        source="https://lists.example.com/" + "long-name-" * 10,
        state=ProxyJob.State.DONE,
        total=1,
        done=1,
        user=staff,
    )
    log_in(page, dashboard, "sam")
    for path, name in [
        ("/proxies/", "proxies-list"),
        ("/proxies/?state=removed", "proxies-list-removed"),
        (f"/proxies/{proxy.pk}/", "proxy-detail"),
        (f"/proxies/{socks.pk}/", "proxy-detail-socks"),
        ("/proxies/import", "proxy-import"),
        (f"/proxies/jobs/{job.pk}/", "proxy-job"),
    ]:
        page.goto(dashboard + path)
        shoot(page, name, width)
        assert no_sideways_scroll(page), f"{path} scrolls sideways at {width} px"
