"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright, against a
real daphne and real RQ workers (the browser, dashboard and page fixtures: conftest.py). Each page
is saved as a screenshot, 1280 px and 390 px wide, in test-artifacts/."""

from __future__ import annotations

import re
import threading
import time

import django_rq
import pytest

from crawlhub.sample_site import SampleSite
from crawls import services
from crawls.engine.frontier import Frontier
from crawls.models import Crawl, CrawlState
from proxies import pool
from proxies import services as proxy_services
from proxies.models import Proxy, ProxyState
from tests.dashboard.conftest import watch_csp
from tests.support.clients import PASSWORD
from tests.support.crawling import ROOT, sample_handler

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ARTIFACTS = ROOT / "test-artifacts"
WIDE, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}


def shoot(page, name: str) -> None:
    """Screenshots of the current page at desktop and phone width."""
    for label, size in (("1280", WIDE), ("390", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)  # the chart resizes on the resize event
        page.screenshot(path=str(ARTIFACTS / f"{name}-{label}.png"), full_page=True)
    page.set_viewport_size(WIDE)


def log_in(page, base: str, username: str) -> None:
    page.goto(base + "/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"^(?!.*/login/)"))


def wait_for_js(page, expression: str, *, timeout: float = 30, explain=None) -> None:
    """Wait until the JavaScript expression is true on the page. Not page.wait_for_function:
    Playwright evaluates its predicate with eval() in the page, which the Content-Security-Policy
    refuses, as it should; page.evaluate goes through the DevTools protocol instead. On a
    timeout, explain() (if given) says what the rest of the system saw."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        if time.monotonic() >= deadline:
            seen = f"; {explain()}" if explain else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {expression}{seen}")
        page.wait_for_timeout(100)


def counter(page, name: str) -> int:
    text = page.locator(f'#counters [data-counter="{name}"]').inner_text()
    return int(text.replace(",", ""))


def wait_until(predicate, *, timeout: float, what: str, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)


def test_a_user_creates_a_crawl_and_watches_it_live_through_pause_and_resume(
    page, dashboard, user, make_site
):
    site = SampleSite(pages=400, seed=7)
    # 80 ms a page until the resume, so that the counters are seen rising and the pause lands
    # mid-crawl; the rest of the crawl proves nothing by being slow, and goes at full speed.
    paced = threading.Event()
    paced.set()
    server = make_site(sample_handler(site, lambda: 0.08 if paced.is_set() else 0.0))
    log_in(page, dashboard, "alice")
    assert page.get_by_role("button", name="Try a demo crawl").is_visible()
    shoot(page, "crawls-empty")

    # The form names what is wrong next to the field.
    page.goto(dashboard + "/crawls/new/")
    page.fill("#id_name", "browser crawl")
    page.fill("#id_seeds", "ftp://nope.example/")
    page.get_by_role("button", name="Create crawl").click()
    assert "http" in page.locator("#id_seeds-errors").inner_text()
    shoot(page, "crawl-new-errors")
    page.fill("#id_seeds", server.url + "/")
    page.fill("#id_max_depth", "100")
    page.fill("#id_max_pages", "1000")
    page.fill("#id_threads", "2")
    page.fill("#id_slices", "1")
    assert page.is_checked("#id_start_now")
    page.get_by_role("button", name="Create crawl").click()
    page.wait_for_url(re.compile(r"/crawls/\d+/$"))
    crawl = Crawl.objects.get(name="browser crawl")

    # Counters rise on the open page, without a reload.
    page.evaluate("window.__sameDocument = true")
    page.wait_for_selector("#live.ok")
    seen = [counter(page, "responses")]
    wait_until(
        lambda: seen.append(counter(page, "responses")) or len(set(seen)) >= 4,
        timeout=30,
        what="the responses counter to rise",
    )
    assert seen == sorted(seen)
    wait_for_js(
        page,
        "document.querySelectorAll('#hosts tr td.url').length > 0 "
        "|| document.querySelector('#chart canvas')",
    )
    shoot(page, "crawl-live-running")

    # Pause: the state changes on the page, then the counters stand still.
    page.locator('#actions form[data-action="pause"] button').click()
    wait_for_js(page, "document.getElementById('state').textContent.trim() === 'Paused'")
    paused_at = counter(page, "responses")
    time.sleep(2.5)
    assert counter(page, "responses") == paused_at
    assert page.locator('#actions form[data-action="resume"]').is_visible()
    assert not page.locator('#actions form[data-action="pause"]').is_visible()
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.PAUSED
    shoot(page, "crawl-live-paused")

    # Resume: it runs on and finishes, still on the same page.
    paced.clear()
    page.locator('#actions form[data-action="resume"] button').click()

    def explain() -> str:
        crawl.refresh_from_db()
        return (
            f"the page says {page.locator('#state').inner_text()!r}, the database "
            f"{crawl.state!r}, the frontier {Frontier(crawl.pk).stats()}, "
            f"{Frontier(crawl.pk).live_slices()} live slice(s), the crawl queue "
            f"{django_rq.get_queue('crawls').count} job(s)"
        )

    wait_for_js(
        page,
        "document.getElementById('state').textContent.trim() === 'Finished'",
        timeout=120,
        explain=explain,
    )
    assert page.evaluate("window.__sameDocument") is True
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FINISHED
    assert counter(page, "responses") == crawl.stats["responses"] > paused_at
    assert counter(page, "requests") == len(site.expected())
    wait_for_js(
        page, "document.querySelector('#h-log').parentElement.textContent.includes('Finished')"
    )
    shoot(page, "crawl-live-finished")

    page.goto(dashboard + "/")
    row = page.locator(f'tr[data-crawl="{crawl.pk}"]')
    assert "Finished" in row.inner_text()
    shoot(page, "crawls-list")
    # Choosing a filter applies it at once (crawl_list.js: no inline handler under the CSP).
    page.select_option("#f-state", "finished")
    page.wait_for_url(re.compile(r"[?&]state=finished(&|$)"))
    assert page.locator(f'tr[data-crawl="{crawl.pk}"]').is_visible()
    page.goto(dashboard + "/workers/")
    assert page.locator("h1", has_text="Workers").is_visible()
    page.wait_for_selector("#live.ok")  # the tables refresh in place
    shoot(page, "workers")


def test_the_live_page_charts_the_crawl_and_goes_stale_and_live_again_when_its_socket_drops(
    page, dashboard, user, make_site
):
    site = SampleSite(pages=300, seed=3)
    server = make_site(sample_handler(site, 0.2))  # slow enough to outlast the test
    crawl = services.crawl_create(
        user=user,
        name="reconnect",
        seeds=[server.url + "/"],
        obey_robots=False,
        max_depth=100,
        max_pages=1000,
        threads=2,
        slices=1,
    )
    services.crawl_start(crawl=crawl, user=user)
    # The page's websocket goes through Playwright, which can drop it as a network would.
    sockets = []

    def relay(ws) -> None:
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(re.compile(r"/ws/crawls/\d+/$"), relay)
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.wait_for_selector("#live.ok")

    # The pages/s chart is drawn, and the 2xx bar grows with the 2xx counter.
    page.wait_for_selector("#chart canvas", state="attached")
    assert page.locator("#chart-empty").is_hidden()
    wait_for_js(
        page, "parseFloat(document.querySelector('[data-bar=\"status_2xx\"]').style.width) > 0"
    )
    assert counter_at(page, '#status-bars [data-counter="status_2xx"]') > 0
    shoot(page, "crawl-live-chart")

    # Every status the indicator shows from now on, with its text.
    page.evaluate(
        """() => {
             const el = document.getElementById("live");
             window.__statuses = [];
             new MutationObserver(() => window.__statuses.push(
               [el.dataset.status, el.textContent, el.className]
             )).observe(el, {attributes: true, childList: true});
           }"""
    )
    assert len(sockets) == 1
    sockets[0].close(code=1011, reason="dropped by the test")
    wait_for_js(
        page,
        "window.__statuses.some(s => s[0] === 'stale') && document.getElementById('live')"
        ".dataset.status === 'live'",
    )
    statuses = page.evaluate("window.__statuses")
    assert ["stale", "stale: reconnecting", "health stale"] in statuses, statuses
    assert statuses[-1] == ["live", "live", "health ok"], statuses
    assert len(sockets) == 2

    # Snapshots flow again on the new socket: the counters move on.
    after = counter(page, "responses")
    wait_until(
        lambda: counter(page, "responses") > after,
        timeout=15,
        what="the responses counter to rise after reconnecting",
    )

    # The list: the snapshots sent on connect include a draft this filtered page does not
    # show, which is not news; the running crawl's row follows it live.
    services.crawl_create(user=user, name="waiting", seeds=[server.url + "/x"])
    page.goto(dashboard + "/?state=running")
    page.wait_for_selector("#live.ok")
    row = f'tr[data-crawl="{crawl.pk}"]'
    # The row's responses cell (on a phone, its one-line summary says the same).
    first = counter_at(page, f'{row} td[data-counter="responses"]')
    wait_until(
        lambda: counter_at(page, f'{row} td[data-counter="responses"]') > first,
        timeout=15,
        what="the list row to follow the crawl",
    )
    assert page.locator("#list-news").is_hidden()
    page.locator(f'{row} form[data-action="cancel"] button').click()
    wait_for_js(
        page, f"document.querySelector('{row} [data-field=\"state\"]').textContent === 'Cancelled'"
    )


def counter_at(page, selector: str) -> int:
    return int(page.locator(selector).inner_text().replace(",", ""))


def test_the_other_pages_are_saved_as_screenshots(page, dashboard, staff, browser):
    proxy = pooled_proxy(1)
    staff.is_superuser = True  # for the admin's model pages
    staff.save(update_fields=["is_superuser"])
    page.goto(dashboard + "/login/")
    assert page.locator("h1", has_text="Log in").is_visible()
    shoot(page, "login")
    log_in(page, dashboard, "sam")
    pages = [
        (f"/proxies/{proxy.pk}/", "proxy-detail", "10.0.0.1"),
        ("/proxies/import", "proxy-import", "Import proxies"),
        ("/account/tokens/", "tokens", "API tokens"),
        ("/schedules/", "schedules", "Scheduled crawls"),
        ("/webhooks/", "webhooks", "Webhooks"),
        # Django's admin and django-rq's dashboard work under the policy too.
        ("/admin/", "admin", "Site administration"),
        ("/admin/crawls/crawl/", "admin-crawls", "Select crawl to change"),
        ("/rq/", "rq", "Queues"),
        ("/rq/queues/0/", "rq-queue", None),  # inline scripts, allowed there only
    ]
    for path, name, heading in pages:
        response = page.goto(dashboard + path)
        assert response.status == 200, path
        assert heading is None or page.locator("h1", has_text=heading).is_visible(), path
        for width in ("1280", "390"):
            (ARTIFACTS / f"{name}-{width}.png").unlink(missing_ok=True)
        shoot(page, name)
        for width in ("1280", "390"):
            assert (ARTIFACTS / f"{name}-{width}.png").stat().st_size > 0, (name, width)
    check_the_csp_check(browser, dashboard)


def test_the_demo_crawl_runs_on_the_sample_site_crawlhub_serves(page, dashboard, user):
    log_in(page, dashboard, "alice")
    page.get_by_role("button", name="Try a demo crawl").click()
    page.wait_for_url(re.compile(r"/crawls/\d+/$"))
    wait_for_js(
        page, "document.getElementById('state').textContent.trim() === 'Finished'", timeout=120
    )
    crawl = Crawl.objects.get()
    assert crawl.stats["requests"] == len(SampleSite(pages=300).expected())
    assert counter(page, "responses") == crawl.stats["responses"]


def check_the_csp_check(browser, dashboard: str) -> None:
    """The check every page fixture makes (conftest.watch_csp) does see what the policy
    refuses: an inline script, an inline handler and a style attribute put into a page. In a
    browser context of its own, so that the test's page stays clean."""
    context = browser.new_context(viewport=WIDE)
    try:
        page = context.new_page()
        violations = watch_csp(page)
        page.goto(dashboard + "/login/")
        assert violations == []
        page.evaluate("""() => {
            const script = document.createElement("script");
            script.textContent = "window.__ran = true";
            document.body.appendChild(script);
            document.body.insertAdjacentHTML("beforeend",
              '<img src="/static/none.png" onerror="window.__handler = true">' +
              '<p style="color: red">styled</p>');
        }""")
        # Playwright hands over console messages while it waits, not while Python sleeps.
        wait_until(
            lambda: page.wait_for_timeout(100) or len(violations) >= 3,
            timeout=10,
            what="three violations",
        )
        assert page.evaluate("[window.__ran, window.__handler]") == [None, None]
        text = "\n".join(violations)
        assert "script-src" in text and "style-src" in text, text
    finally:
        context.close()


def pooled_proxy(n: int) -> Proxy:
    proxy = Proxy.objects.create(scheme="http", host=f"10.0.0.{n}", port=80, state="active")
    pool.record_check(proxy=proxy.key, url=proxy.url, ok=True, latency_ms=100 * n)
    return proxy


def health_number(page, key: str) -> int:
    """A number of the health panel; -1 while it still shows its placeholder (…)."""
    text = page.locator(f'#pool-health [data-h="{key}"]').inner_text().replace(",", "")
    return int(text) if text.isdigit() else -1


def test_a_staff_user_removes_a_proxy_and_it_leaves_the_pool_and_the_health_numbers(
    page, dashboard, staff
):
    proxies = [pooled_proxy(n) for n in (1, 2, 3)]
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/proxies/")
    page.wait_for_selector("#pool-health #live.ok")
    wait_until(lambda: health_number(page, "inventory.known") == 3, timeout=15, what="health")
    assert health_number(page, "pooled") == 3
    shoot(page, "proxies")

    page.get_by_label("select http://10.0.0.1:80").check()
    page.select_option("select[name=action]", "remove")
    page.fill("input[name=why]", "leaks our address")
    page.get_by_role("button", name="Apply to selected").click()
    page.wait_for_selector(".messages")
    page.wait_for_selector("#pool-health #live.ok")
    # "Ready for crawls" is in the page as served; the inventory comes with the first push.
    wait_until(lambda: health_number(page, "pooled") == 2, timeout=15, what="pooled == 2")
    wait_until(
        lambda: health_number(page, "inventory.removed") == 1, timeout=15, what="removed == 1"
    )
    assert health_number(page, "removed_last_hour") == 1
    assert "10.0.0.1:80" not in page.locator("table").last.inner_text()
    assert proxies[0].key not in pool.members()
    assert Proxy.objects.get(pk=proxies[0].pk).state == ProxyState.REMOVED

    # A removal made elsewhere (CLI, admin, another staff user) shows up without a reload.
    page.evaluate("window.__sameDocument = true")
    proxy_services.remove_proxies(proxies=proxies[1:2], why="elsewhere", user=staff)
    wait_until(lambda: health_number(page, "pooled") == 1, timeout=15, what="a live update")
    assert health_number(page, "inventory.removed") == 2
    assert page.evaluate("window.__sameDocument") is True
    shoot(page, "proxies-after-removal")


def test_a_staff_user_imports_a_large_proxy_list_and_follows_its_progress(page, dashboard, staff):
    """The Import page answers at once with the import's progress page, which follows the job
    (a background job on the workers) and shows the report when it ends."""
    lines = [f"198.18.{n // 256}.{n % 256}:8080" for n in range(30_000)]
    lines[4] = "http://u:hunter2@bad-port.example:99999"
    log_in(page, dashboard, "sam")
    page.goto(dashboard + "/proxies/import")
    page.set_input_files(
        "#id_file",
        files=[
            {
                "name": "list.txt",
                "mimeType": "text/plain",
                "buffer": "\n".join(lines).encode(),
            }
        ],
    )
    started = time.monotonic()
    page.get_by_role("button", name="Import").click()
    page.wait_for_url(re.compile(r"/proxies/jobs/\d+/$"))
    answered = time.monotonic() - started
    assert answered < 10, f"the Import page answered after {answered:.1f} s"
    assert page.locator("#job progress").count() == 1
    # Under way (or, on a quick machine, already over): the bar moves without a reload.
    page.wait_for_function(
        "() => document.getElementById('h-result') || document.getElementById('job-bar').value > 0",
        timeout=120_000,
    )
    shoot(page, "proxy-import-progress")
    page.wait_for_selector("#h-result", timeout=180_000)  # the page reloads once the job ends
    text = page.locator("main").inner_text()
    assert "29,999 added" in text and "1 bad lines" in text
    assert "port must be a number from 1 to 65535" in text and "hunter2" not in page.content()
    assert page.locator("#job-state").inner_text() == "done"
    shoot(page, "proxy-import-report")
    page.goto(dashboard + "/proxies/import")
    assert page.locator("#h-recent").is_visible()
    shoot(page, "proxy-import-recent")


def test_a_user_who_is_not_staff_gets_neither_the_proxies_page_nor_its_websocket(
    page, dashboard, user
):
    log_in(page, dashboard, "alice")
    assert page.locator('nav a[href="/proxies/"]').count() == 0
    response = page.goto(dashboard + "/proxies/")
    assert response.status == 403
    assert "Only staff" in page.content()
    shoot(page, "proxies-forbidden")
    outcome = page.evaluate(
        """() => new Promise(resolve => {
             const ws = new WebSocket("ws://" + location.host + "/ws/proxies/");
             let messages = 0;
             ws.onmessage = () => { messages += 1; };
             ws.onclose = (event) => resolve({code: event.code, messages: messages});
           })"""
    )
    assert outcome["messages"] == 0
    assert outcome["code"] in (1006, 4403), outcome
    # The same browser session does get a websocket it may have.
    health = page.evaluate(
        """() => new Promise(resolve => {
             const ws = new WebSocket("ws://" + location.host + "/ws/health/");
             ws.onmessage = (event) => { resolve(JSON.parse(event.data).type); ws.close(); };
             ws.onclose = () => resolve("closed");
           })"""
    )
    assert health == "health"


def test_the_host_view_holds_and_releases_a_host(page, dashboard, user):
    seeds = [f"http://127.0.0.1:{port}/" for port in (9, 19)]  # nobody answers: errors
    crawl = services.crawl_create(
        user=user, name="hosts", seeds=seeds, host_delay=30, obey_robots=False, max_depth=0
    )
    services.crawl_start(crawl=crawl, user=user)
    services.crawl_add_seeds(crawl=crawl, urls=[s + "more" for s in seeds], user=user)
    log_in(page, dashboard, "alice")
    page.goto(f"{dashboard}/crawls/{crawl.pk}/")
    page.get_by_role("link", name="Every host").click()
    page.wait_for_url(re.compile(rf"/crawls/{crawl.pk}/hosts/$"))
    assert page.locator("td.url", has_text="127.0.0.1:19").is_visible()
    page.get_by_label("Minutes to hold 127.0.0.1:19").fill("15")
    page.get_by_role("button", name="Hold 127.0.0.1:19").click()
    assert page.get_by_text("127.0.0.1:19 held until").is_visible()
    shoot(page, "crawl-hosts")
    page.get_by_role("button", name="Release 127.0.0.1:19").click()
    assert page.get_by_text("127.0.0.1:19 released.").is_visible()
    kinds = list(crawl.events.values_list("kind", flat=True))
    assert "host_held" in kinds and "host_released" in kinds
