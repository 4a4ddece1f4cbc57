"""The dashboard live: headless Chromium (Debian's) driven by Playwright, against a real daphne
with real RQ workers and the cron supervisor."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.crawling import ROOT, WorkerFleet, database_url
from tests.support.web_server import START_SECONDS, web_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
ARTIFACTS = ROOT / "test-artifacts"
FAST = {
    "CRAWLHUB_LEASE_SECONDS": "5",
    "CRAWLHUB_SLICE_SECONDS": "3",
    "CRAWLHUB_SUPERVISOR_SECONDS": "1",
}
WIDE = {"width": 1280, "height": 900}


def _browser_missing() -> str:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return f"Chromium is not installed ({CHROMIUM}); .ci/run installs it"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed"
    return ""


@pytest.fixture(scope="module")
def browser() -> Iterator:
    missing = _browser_missing()
    if missing:
        if os.environ.get("CRAWLHUB_REQUIRE_BROWSER") == "1":
            pytest.fail(missing + " (CRAWLHUB_REQUIRE_BROWSER=1)")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread for as long as it runs; the
    # tests' own ORM calls (and the database flush after each) are still plain sync code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


@pytest.fixture
def dashboard(redis_server, browser) -> Iterator[str]:
    """daphne serving crawlhub on a free port, plus two RQ workers and the cron supervisor; the
    base URL, once daphne answers and both workers have registered. Every process is registered
    for stopping as it starts, and stopped even when the start-up fails."""
    ARTIFACTS.mkdir(exist_ok=True)
    env = {
        **os.environ,
        **FAST,
        "DATABASE_URL": database_url(),
        # redis-py 8's default 5 s read timeout races channels-redis' 5 s BZPOPMIN: see the report.
        "REDIS_URL": redis_server.url,
        "CRAWLHUB_DATA_DIR": os.environ.get("CRAWLHUB_DATA_DIR", str(ROOT / "var")),
    }
    fleet = WorkerFleet(env={k: env[k] for k in (*FAST, "REDIS_URL", "CRAWLHUB_DATA_DIR")})
    try:
        fleet.start_worker()  # they start while daphne does
        fleet.start_worker()
        fleet.start_cron()
        with web_server(env, ARTIFACTS / "daphne.log") as (_, base):
            fleet.wait_until_registered(2, timeout=START_SECONDS)
            yield base
    finally:
        fleet.stop()


# Every document reports what the Content-Security-Policy refused on the console, as Chromium
# does itself ("Refused to execute inline script ..."); the page fixture collects both.
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => console.error(
  `CSP violation: ${event.effectiveDirective} refused ${event.blockedURI || "inline"} ` +
  `at ${event.sourceFile}:${event.lineNumber} on ${location.pathname}`));
"""


def watch_csp(page) -> list[str]:
    """The Content-Security-Policy violations the page meets from now on, as they come."""
    violations: list[str] = []
    page.context.add_init_script(REPORT_CSP_VIOLATIONS)

    def seen(message) -> None:
        text = message.text
        if text.startswith("CSP violation:") or "Content Security Policy" in text:
            violations.append(f"{page.url}: {text}")

    page.on("console", seen)
    return violations


@pytest.fixture
def page(browser, dashboard) -> Iterator:
    """A browser tab on the dashboard. Any Content-Security-Policy violation on any page it
    shows fails the test that used it."""
    context = browser.new_context(viewport=WIDE)
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)  # a busy machine renders slowly
        page.on("dialog", lambda dialog: dialog.accept())
        violations = watch_csp(page)
        yield page
        page.wait_for_timeout(100)  # a violation reported by the last page's last script
    finally:
        context.close()
    assert violations == [], "the Content-Security-Policy refused:\n" + "\n".join(violations)
