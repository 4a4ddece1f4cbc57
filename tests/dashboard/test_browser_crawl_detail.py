"""The crawl page as an operator reads it, in headless Chromium at 1366 px and 390 px: progress
that means something, counters that add up with one meaning of "error", states that explain
themselves, every setting shown and changeable where it is safe, one date style, and no
sideways scrolling on a phone. Screenshots go to test-artifacts/."""

from __future__ import annotations

import re
import time

import pytest
from rq.job import Job

from crawlhub.redis.connections import get_redis, redis_memory
from crawlhub.sample_site import SampleSite
from crawls import services
from crawls.engine.frontier import Frontier
from crawls.engine.jobs import slice_job_id, supervise
from crawls.models import CRAWL_OPTIONS, Crawl, CrawlDeletion, CrawlEvent, CrawlState
from tests.dashboard.test_browser import log_in, wait_for_js, wait_until
from tests.support.crawling import ROOT, sample_handler

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ARTIFACTS = ROOT / "test-artifacts"
DESKTOP, PHONE = {"width": 1366, "height": 900}, {"width": 390, "height": 844}
DATE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


def shoot(page, name: str) -> None:
    for label, size in (("1366", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(400)  # the chart resizes on the resize event
        page.screenshot(path=str(ARTIFACTS / f"crawl-detail-{name}-{label}.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


def no_sideways_scroll(page) -> None:
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(400)
    width = page.evaluate("document.documentElement.scrollWidth")
    page.set_viewport_size(DESKTOP)
    assert width <= 390, f"the page is {width} px wide in a 390 px viewport"


def number(page, selector: str) -> int:
    return int(page.locator(selector).first.inner_text().replace(",", ""))


def shown(page, name: str) -> int:
    return number(page, f'#counters [data-counter="{name}"]')


def wait_for_state(crawl: Crawl, *states: str, timeout: float = 120) -> None:
    def reached() -> bool:
        crawl.refresh_from_db()
        return crawl.state in states

    wait_until(reached, timeout=timeout, what=f"crawl #{crawl.pk} to be {states}", step=0.3)


def test_a_finished_crawl_reads_100_percent_and_its_numbers_add_up(
    page, dashboard, user, make_site
):
    site = SampleSite(pages=120, seed=5)  # /broken/11 and /broken/108 answer 500, some 404
    server = make_site(sample_handler(site, 0.0))
    crawl = services.crawl_create(
        user=user,
        name="adds up",
        seeds=[server.url + "/"],
        obey_robots=False,
        max_depth=100,
        max_pages=1000,
        max_retries=0,
        threads=4,
        slices=1,
    )
    services.crawl_start(crawl=crawl, user=user)
    wait_for_state(crawl, CrawlState.FINISHED)
    failures = crawl.failures.count()
    assert failures >= 1  # the site's 500s, out of retries at once

    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.wait_for_selector("#live.ok")

    # 1. Progress is work done against work known: a finished crawl reads 100%.
    assert page.locator("#percent").inner_text() == "100"
    assert number(page, "#done") == number(page, "#known") == crawl.stats["requests"]

    # 3. One meaning of "error": a 500 out of retries is an error, a failure, and a 5xx.
    assert shown(page, "errors") == crawl.stats["errors"] >= failures
    assert shown(page, "failed") == failures
    assert number(page, '#status-bars [data-counter="status_5xx"]') >= failures
    four = number(page, '#status-bars [data-counter="status_4xx"]')
    assert four > 0  # the site's /missing/ pages: responses, not errors
    recent_errors = (
        page.locator("#recent-errors").inner_text()
        if page.locator("#recent-errors").count()
        else ""
    )
    assert "404" not in recent_errors
    bars = sum(
        number(page, f'#status-bars [data-counter="{name}"]')
        for name in ("status_2xx", "status_3xx", "status_4xx", "status_5xx", "no_response")
    )
    assert bars == shown(page, "responses") + shown(page, "errors")
    # requests = responses + errors + queued + in flight + retrying + cancelled, on screen.
    parts = ("responses", "errors", "queued", "in_flight", "delayed", "cancelled")
    assert shown(page, "requests") == sum(shown(page, name) for name in parts)
    # Every counter says what it counts.
    titles = page.eval_on_selector_all("#counters > div", "els => els.map(e => e.title)")
    assert len(titles) >= 10 and all(len(t) > 20 for t in titles), titles

    # 8. One date style, in the browser's zone; "Failed at" has the date too.
    texts = page.eval_on_selector_all("#crawl time", "els => els.map(e => e.textContent)")
    assert texts and all(DATE.match(t) for t in texts), texts
    failed_at = page.locator("#failures tbody tr td:last-child").first.inner_text()
    assert DATE.match(failed_at), failed_at
    # The chart's axes are labelled, and its title says the span its axis shows.
    page.wait_for_selector("#chart canvas", state="attached")
    wait_for_js(page, "!!window.crawlhubChart")
    labels = page.evaluate("window.crawlhubChart.axes.map(a => a.label)")
    assert any("pages/s" in t for t in labels) and any("time" in t for t in labels), labels
    span = page.locator("#chart-span").inner_text()
    assert span in ("the last minute",) or re.fullmatch(r"the last \d+ minutes", span), span

    # 5. The live page on a phone: nothing scrolls sideways; the Retry buttons are in view.
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(400)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    box = page.locator("#failures tbody button").first.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    page.set_viewport_size(DESKTOP)
    shoot(page, "finished")


def test_a_draft_shows_every_setting_and_is_edited_run_again_and_deleted(
    page, dashboard, user, redis
):
    crawl = services.crawl_create(
        user=user,
        name="draft settings",
        seeds=["https://example.com/", "https://example.org/a"],
        allowed_domains=["example.com", "example.org"],
        include_patterns=["^https://example"],
        exclude_patterns=[r"\.pdf$"],
        max_depth=4,
        max_pages=250,
        host_delay=1.5,
        host_concurrency=3,
        obey_robots=False,
        user_agent_mode="fixed",
        user_agent="TestBot/1",
        max_retries=5,
        follow_sitemaps=True,
        extract_rules=[{"name": "price", "kind": "css", "expr": ".price"}],
        auth={"headers": "X-Api-Key: very-secret-value"},
    )
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    settings = page.locator("#settings-list").inner_text()
    for name in CRAWL_OPTIONS:
        label = Crawl._meta.get_field(name).verbose_name
        assert label.lower() in settings.lower(), f"{label} is not shown"
    for value in (
        "https://example.org/a",
        "example.org",
        "^https://example",
        r"\.pdf$",
        "250",
        "1.5 s",
        "TestBot/1",
        "price",
        "X-Api-Key",
    ):
        assert value in settings, f"{value} is not shown"
    assert "very-secret-value" not in page.content()
    assert "Login form\nnot set" in settings
    # A draft has nothing to export.
    assert page.locator("#data a[download]").count() == 0
    shoot(page, "draft")
    no_sideways_scroll(page)

    # Edit: every field, on the new-crawl form filled in with the draft's values.
    page.click("#edit-link")
    assert page.input_value("#id_max_pages") == "250"
    assert "https://example.org/a" in page.input_value("#id_seeds")
    shoot(page, "edit-draft")
    page.fill("#id_max_pages", "300")
    page.fill("#id_name", "draft settings, edited")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url(re.compile(rf"/crawls/{crawl.pk}/$"))
    crawl.refresh_from_db()
    assert (crawl.max_pages, crawl.name) == (300, "draft settings, edited")
    assert crawl.auth.headers == [["X-Api-Key", "very-secret-value"]]  # kept, not wiped
    assert "300" in page.locator("#settings-list").inner_text()
    edited = crawl.events.get(kind=CrawlEvent.Kind.EDITED)
    assert "max pages" in edited.detail and edited.user == user

    # Run again: a new draft with the same settings, and the owner's credentials.
    page.get_by_role("button", name="Run again").click()
    page.wait_for_url(re.compile(r"/crawls/(\d+)/$"))
    copy = Crawl.objects.exclude(pk=crawl.pk).get()
    assert copy.state == CrawlState.DRAFT and copy.pages.count() == 0
    assert {f: getattr(copy, f) for f in CRAWL_OPTIONS} == {
        f: getattr(crawl, f) for f in CRAWL_OPTIONS
    }
    assert copy.seeds == crawl.seeds and copy.auth.headers == crawl.auth.headers

    # Delete: a confirmation page, then the crawl, its rows and its Redis keys are gone.
    Frontier(copy.pk).configure(max_pages=1, max_depth=1, host_delay=0)
    page.click("#delete-link")
    assert "Delete crawl" in page.locator("h1").inner_text()
    assert Crawl.objects.filter(pk=copy.pk).exists()  # nothing happens before confirming
    shoot(page, "delete-confirm")
    page.locator("#confirm-delete button").click()
    page.wait_for_url(re.compile(r"/$"))
    assert not Crawl.objects.filter(pk=copy.pk).exists()
    record = CrawlDeletion.objects.get(crawl_id=copy.pk)
    assert record.user == user and record.name == copy.name
    assert redis.exists(f"ch:{{c{copy.pk}}}:config") == 0


def test_a_running_crawl_changes_its_limits_and_the_crawl_follows(page, dashboard, user, make_site):
    site = SampleSite(pages=300, seed=9)
    server = make_site(sample_handler(site, 0.05))
    crawl = services.crawl_create(
        user=user,
        name="live limits",
        seeds=[server.url + "/"],
        obey_robots=False,
        max_depth=100,
        max_pages=20,
        threads=2,
        slices=1,
    )
    services.crawl_start(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    wait_until(lambda: frontier.stats()["requests"] >= 20, timeout=60, what="20 requests")
    services.crawl_pause(crawl=crawl, user=user)
    wait_for_state(crawl, CrawlState.PAUSED, CrawlState.FINISHED)
    if crawl.state == CrawlState.FINISHED:
        pytest.fail("the crawl finished its 20 pages before it could be paused")

    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    assert page.locator("#capped").is_visible()  # progress is against max pages: it caps
    page.click("#change-link")
    assert page.input_value("#id_max_pages") == "20"
    assert page.locator("#id_seeds").count() == 0  # only what is safe to change live
    shoot(page, "change-limits")
    page.fill("#id_max_pages", "60")
    page.fill("#id_threads", "3")
    page.get_by_role("button", name="Change").click()
    page.wait_for_url(re.compile(rf"/crawls/{crawl.pk}/$"))
    assert "max pages: 20 -> 60" in page.locator(".messages").inner_text()
    event = crawl.events.get(kind=CrawlEvent.Kind.CHANGED)
    assert "max pages: 20 -> 60" in event.detail and "threads: 2 -> 3" in event.detail
    assert event.user == user
    crawl.refresh_from_db()
    assert (crawl.max_pages, crawl.threads) == (60, 3)

    # The frontier takes the new cap: after resuming, the crawl schedules up to 60.
    page.locator('#actions form[data-action="resume"] button').click()
    wait_until(lambda: frontier.stats()["requests"] == 60, timeout=90, what="60 requests")
    time.sleep(1)
    assert frontier.stats()["requests"] == 60
    wait_for_js(
        page,
        "Number(document.querySelector('#counters [data-counter=\"requests\"]')"
        ".textContent.replace(/,/g, '')) === 60",
    )
    services.crawl_cancel(crawl=crawl, user=user)


def test_the_page_says_waiting_pausing_paused_and_drops_stale_messages(
    page, dashboard, user, make_site
):
    site = SampleSite(pages=300, seed=4)
    server = make_site(sample_handler(site, 0.2))
    log_in(page, dashboard, "alice")

    # A running crawl whose slice waits in the queue behind others: "waiting for a worker".
    waiting = services.crawl_create(
        user=user, name="waits", seeds=[server.url + "/"], obey_robots=False, slices=1
    )
    frontier = Frontier(waiting.pk)
    frontier.configure(max_pages=1000, max_depth=3, host_delay=0)
    frontier.slice_register(["queued-behind-others"], ttl=3600)  # what enqueue_slices does
    # Its job exists, as a job queued behind others does, but no worker takes it: the
    # supervisor forgets a registered slice whose job is gone, and would start a real one.
    Job.create(
        "crawls.engine.jobs.slice_job",
        args=(waiting.pk, "queued-behind-others"),
        id=slice_job_id("queued-behind-others"),
        connection=frontier.redis,
    ).save()
    frontier.set_state("running")
    frontier.add_seeds(waiting.seeds)
    Crawl.objects.filter(pk=waiting.pk).update(state=CrawlState.RUNNING)
    supervise()  # as the cron's supervisor may, at any moment
    page.goto(f"{dashboard}/crawls/{waiting.pk}/")
    assert page.locator("#waiting").is_visible()
    assert "worker" in page.locator("#waiting").inner_text()
    shoot(page, "waiting")
    waiting.refresh_from_db()
    services.crawl_cancel(crawl=waiting, user=user)

    # Started from the form: "Crawl started." stays only while the crawl runs.
    page.goto(dashboard + "/crawls/new/")
    page.fill("#id_name", "states")
    page.fill("#id_seeds", server.url + "/")
    page.fill("#id_threads", "2")
    page.fill("#id_slices", "1")
    page.uncheck("#id_obey_robots")
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_url(re.compile(r"/crawls/\d+/$"))
    assert "Crawl started." in page.locator("main").inner_text()
    wait_for_js(
        page,
        "Number(document.querySelector('#counters [data-counter=\"responses\"]').textContent) > 3",
    )
    # Fetching: no "waiting" (between two slices of a busy machine it may come back briefly).
    wait_for_js(page, "document.getElementById('waiting').hidden")

    # Pausing turns into Paused, and the messages of the states before go.
    page.locator('#actions form[data-action="pause"] button').click()
    wait_for_js(page, "document.getElementById('state').textContent.trim() === 'Paused'")
    text = page.locator("main").inner_text()
    assert "Crawl started." not in text
    assert "Pausing: workers stop fetching" not in text
    # Recent pages keep up with the counters without a reload.
    wait_for_js(
        page,
        "Number(document.getElementById('recent-pages').dataset.rows) === "
        "Math.min(15, Number(document.querySelector('#counters "
        "[data-counter=\"responses\"]').textContent.replace(/,/g, '')))",
    )
    shoot(page, "paused")
    crawl = Crawl.objects.get(name="states")
    services.crawl_cancel(crawl=crawl, user=user)


def test_with_the_websocket_blocked_polling_keeps_the_badge_live(page, dashboard, user, make_site):
    site = SampleSite(pages=300, seed=6)
    server = make_site(sample_handler(site, 0.2))
    crawl = services.crawl_create(
        user=user,
        name="polled",
        seeds=[server.url + "/"],
        obey_robots=False,
        max_depth=100,
        threads=2,
        slices=1,
    )
    services.crawl_start(crawl=crawl, user=user)
    page.route_web_socket(re.compile(r"/ws/crawls/\d+/$"), lambda ws: ws.close(code=1011))
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    wait_for_js(page, "document.getElementById('live').dataset.status === 'polling'")
    before = shown(page, "responses")
    wait_until(
        lambda: shown(page, "responses") > before,
        timeout=30,
        what="the counters to move by polling",
    )
    assert page.locator("#live").inner_text() == "live (polling)"
    assert "stale" not in page.locator("#live").get_attribute("class")
    services.crawl_cancel(crawl=crawl, user=user)


def test_run_again_copies_credentials_only_for_the_owner(user, staff):
    crawl = services.crawl_create(
        user=user,
        name="with secrets",
        seeds=["https://example.com/"],
        auth={"headers": "X-Api-Key: s3cret"},
    )
    mine = services.crawl_run_again(crawl=crawl, user=user)
    theirs = services.crawl_run_again(crawl=crawl, user=staff)
    assert mine.auth.headers == [["X-Api-Key", "s3cret"]]
    assert not hasattr(theirs, "auth") or theirs.auth is None
    note = theirs.events.get(kind=CrawlEvent.Kind.CREATED).detail
    assert "without its credentials" in note


def settled_memory(client, *, timeout: float = 15.0) -> int:
    """Redis' used memory once it holds still (within 256 kB for a second): the module's
    earlier tests leave keys that Redis frees in the background, and the budget below is set
    a few MB from what Redis holds."""
    deadline = time.monotonic() + timeout
    last = redis_memory(client).used
    while time.monotonic() < deadline:
        time.sleep(1)
        now = redis_memory(client).used
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    raise AssertionError(f"Redis' memory did not settle in {timeout:g} s (last {last} bytes)")


def test_a_crawl_waiting_for_redis_memory_says_so_and_the_line_goes_when_it_frees(
    page, dashboard, user, make_site
):
    site = SampleSite(pages=50, seed=5)
    server = make_site(sample_handler(site, 0))
    log_in(page, dashboard, "alice")
    crawl = services.crawl_create(
        user=user, name="memory", seeds=[server.url + "/"], obey_robots=False, slices=1
    )
    client = get_redis()
    client.config_set("maxmemory-policy", "noeviction")
    client.set("test:ballast", b"x" * 50_000_000)  # what other crawls would hold
    settled_memory(client)  # the write's buffers and the last test's keys freed
    try:
        # 4 MB past the budget (85% of maxmemory), 4 MB below maxmemory: nothing is fetched.
        client.config_set("maxmemory", str(int(redis_memory(client).used / 0.85 * 0.92)))
        services.crawl_start(crawl=crawl, user=user)
        page.goto(f"{dashboard}/crawls/{crawl.pk}/")
        wait_for_js(page, "!document.getElementById('end-line').hidden")
        line = page.locator("#end-line").inner_text()
        assert line.startswith("Waiting for Redis memory: it holds ") and "85%" in line
        assert server.paths() == []
        shoot(page, "waiting-for-memory")
        no_sideways_scroll(page)
        assert page.locator("#end-line").is_visible() and server.paths() == []
        client.delete("test:ballast")  # memory frees: the crawl goes on by itself
        wait_for_state(crawl, CrawlState.FINISHED)
        wait_for_js(page, "document.getElementById('end-line').textContent.startsWith('Fin')")
    finally:
        client.config_set("maxmemory", "0")
        client.delete("test:ballast")
    assert crawl.stats["requests"] == len(site.expected())
