"""The dashboard live: headless Chromium (Debian's) driven by Playwright, against a real daphne
with real RQ workers and the cron supervisor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rq import Worker

from crawlhub.redis.connections import get_redis
from tests.support import processes
from tests.support.crawling import (
    REGISTRATIONS,
    ROOT,
    WorkerFleet,
    database_url,
    kept_between_tests,
)
from tests.support.parallel import WORKER
from tests.support.sites import free_port
from tests.support.web_server import START_SECONDS

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
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


class Dashboard(processes.Started):
    """daphne serving crawlhub on a free port, two RQ workers and the cron supervisor, shared
    by a module's browser tests (one worker runs the module: tests/support/parallel.py). Between
    tests the state is reset, not the processes: the database is flushed and Redis emptied but
    for these processes' registrations (tests.support.crawling.reset_redis); a process that
    died is started again, and workers still busy when a test ends (a crawl it left running)
    are replaced, so that nothing of one test's work reaches the next."""

    def __init__(self, redis_url: str) -> None:
        self.env = {
            **os.environ,
            **FAST,
            "DATABASE_URL": database_url(),
            # redis-py 8's default 5 s read timeout races channels-redis' 5 s BZPOPMIN.
            "REDIS_URL": redis_url,
            "CRAWLHUB_DATA_DIR": os.environ.get("CRAWLHUB_DATA_DIR", str(ROOT / "var")),
        }
        # One log per xdist worker: the workers' dashboards run side by side.
        self.log_path = ARTIFACTS / f"daphne{'-' + WORKER if WORKER else ''}.log"
        self.daphne: subprocess.Popen | None = None
        self.fleet: WorkerFleet | None = None
        self.base = ""

    def start(self) -> Dashboard:
        ARTIFACTS.mkdir(exist_ok=True)
        kept_between_tests[:] = REGISTRATIONS
        self._start_daphne()
        self._start_fleet()
        return self

    def _start_daphne(self) -> None:
        port = free_port()
        with open(self.log_path, "a") as log:
            self.daphne = processes.spawn(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "crawlhub.asgi:application",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                outlives_the_test=True,
            )
        self.base = f"http://127.0.0.1:{port}"

    def _start_fleet(self) -> None:
        env = {k: self.env[k] for k in (*FAST, "REDIS_URL", "CRAWLHUB_DATA_DIR")}
        self.fleet = WorkerFleet(env=env, outlives_the_test=True)
        self.fleet.start_worker()
        self.fleet.start_worker()
        self.fleet.start_cron()

    def ready(self) -> str:
        """The base URL, once daphne answers and both workers are registered; what died since
        the last test is started again first."""
        if self.daphne is None or self.daphne.poll() is not None:
            self._start_daphne()
        if self.fleet is None or len(self.fleet.alive()) < 2 or self.fleet.cron.poll() is not None:
            if self.fleet is not None:
                self.fleet.stop()
            self._start_fleet()
        processes.wait_for_http(
            self.base + "/healthz",
            what="daphne",
            proc=self.daphne,
            log=self.log_path,
            timeout=START_SECONDS,
        )
        self.fleet.wait_until_registered(2, timeout=START_SECONDS)
        return self.base

    def settle(self, *, timeout: float = 5) -> None:
        """After a test, before its rows and keys are reset: wait for a moment when no worker
        runs a job; workers still busy then (with a crawl the test left running) are stopped,
        to be replaced before the next test."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(w.get_state() != "busy" for w in Worker.all(connection=get_redis())):
                return
            time.sleep(0.1)
        self.fleet.stop()

    def stop(self) -> None:
        try:
            if self.fleet is not None:
                self.fleet.stop()
            if self.daphne is not None:
                processes.stop(self.daphne)
        finally:
            kept_between_tests.clear()


@pytest.fixture(scope="module")
def shared_dashboard(redis_server, browser, django_db_setup) -> Iterator[Dashboard]:
    """The module's Dashboard: started by its first browser test, stopped after its last."""
    with Dashboard(redis_server.url) as dashboard:
        yield dashboard


@pytest.fixture
def dashboard(shared_dashboard, transactional_db) -> Iterator[str]:
    """The base URL of a live dashboard: daphne serving crawlhub on a free port, plus two RQ
    workers and the cron supervisor, once daphne answers and both workers have registered.
    The processes are the module's (shared_dashboard); the database and Redis are the test's,
    reset after it (the workers are first left idle: Dashboard.settle)."""
    yield shared_dashboard.ready()
    shared_dashboard.settle()


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
