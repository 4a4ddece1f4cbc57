"""Extraction rules that run away, against the real servers: daphne saving a crawl and
running the rules preview, and RQ workers crawling a local site.

The attacks (tests/engine/test_rules_that_run_away.py has them one by one): a JMESPath
expression whose every level makes ten times more items, evaluated when the crawl was saved
(105 s and 744 MB in daphne for 204 characters) and in the workers; an XPath whose cost grows
with the cube of the page, run by the preview in the web server with no deadline, on after its
client had gone; a CSS selector as bad, on a crawled page.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from crawlhub import tokens
from crawls import services
from crawls.models import Crawl, CrawlState
from tests.support.clients import PASSWORD
from tests.support.crawling import FAST_WORKERS, WorkerFleet, database_url, wait_for_state
from tests.support.runaway import (
    CUBIC_XPATH,
    LONGEST,
    PARAGRAPHS,
    SIBLINGS_CSS,
    TENFOLD,
)
from tests.support.sites import Response, pages_site
from tests.support.web_server import web_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TOO_LONG = "the rule took too long: over "


@pytest.fixture
def web(redis_server, tmp_path) -> Iterator[tuple[psutil.Process, str]]:
    """daphne on the test database: (its process, its base URL)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_server.url,
        "CRAWLHUB_DATA_DIR": str(tmp_path),
    }
    with web_server(env, tmp_path / "daphne.log") as (daphne, base):
        yield psutil.Process(daphne.pid), base


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def peak_rss_mb(process: psutil.Process) -> float:
    """VmHWM: the most the process has held in RAM since it started."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def rule_processes(process: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in process.children(recursive=True):
        try:
            if "crawls.engine.rule_process" in child.cmdline() and child.status() != "zombie":
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def signed_in(user, base: str) -> requests.Session:
    """`user` logged in on the live server through its login page, with the CSRF token."""
    session = requests.Session()
    session.get(base + "/login/", timeout=60)
    token = session.cookies["csrftoken"]
    answer = session.post(
        base + "/login/",
        data={"username": user.username, "password": PASSWORD},
        headers={"X-CSRFToken": token},
        timeout=60,
    )
    assert answer.status_code == 200 and "/login/" not in answer.url, answer.url
    session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
    session.headers["Accept"] = "application/json"
    return session


def preview_data(url: str, rules: list[dict]) -> dict:
    return {"preview_url": url, "extract_rules": json.dumps(rules), "timeout": "10"}


def busiest_thread(daphne: psutil.Process, *, seconds: float = 3) -> float:
    """The most CPU one of daphne's threads uses in the next `seconds`: a view still working
    is one busy thread, seen on a busy machine as well (where the whole process's share of
    the CPU may be small)."""
    before = {thread.id: thread.user_time + thread.system_time for thread in daphne.threads()}
    time.sleep(seconds)
    after = {thread.id: thread.user_time + thread.system_time for thread in daphne.threads()}
    busiest = max(after[tid] - before.get(tid, 0.0) for tid in after)
    print(f"daphne's busiest thread used {busiest:.2f} s of CPU in {seconds} s")
    return busiest


def test_the_web_server_saves_a_crawl_with_a_tenfold_rule_at_once(user, web):
    """The 1,000-character limit allows 41 tenfold levels: evaluated on {} when saved, the
    request never ended (8 levels, 191 characters, took 100 s and 800 MB)."""
    daphne, base = web
    _, token = tokens.token_create(user=user, name="script")
    rules = [{"name": "tenfold", "kind": "json", "expr": LONGEST}]
    body = {"name": "tenfold", "seeds": ["http://127.0.0.1:9/"], "extract_rules": rules}
    cpu, started = cpu_seconds(daphne), time.monotonic()
    response = requests.post(
        base + "/api/crawls/", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    took, used = time.monotonic() - started, cpu_seconds(daphne) - cpu
    assert response.status_code == 201, response.text
    assert Crawl.objects.get().extract_rules == rules
    print(f"saved in {took:.2f} s, {used:.2f} s of daphne's CPU, peak {peak_rss_mb(daphne):.0f} MB")
    assert used < 2
    assert peak_rss_mb(daphne) < 300


def test_a_cubic_xpath_in_the_preview_is_stopped_at_its_deadline(user, web, make_site):
    daphne, base = web
    site = make_site(pages_site({"/big": Response(body=PARAGRAPHS)}))
    rules = [
        {"name": "heading", "kind": "css", "expr": "h1"},
        {"name": "cubic", "kind": "xpath", "expr": CUBIC_XPATH},
    ]
    session = signed_in(user, base)
    started = time.monotonic()
    response = session.post(
        base + "/crawls/preview/", data=preview_data(site.url + "/big", rules), timeout=120
    )
    took = time.monotonic() - started
    assert response.status_code == 200, response.text[:300]
    answer = response.json()
    print(f"answered in {took:.1f} s: {answer['field_errors']}")
    assert answer["status"] == 200
    assert answer["field_errors"]["cubic"].startswith(TOO_LONG)
    assert answer["fields"] == {"heading": "Heading", "cubic": None}
    # Its deadline, the page's fetch and a busy machine's start of the rules' process.
    assert took < services.PREVIEW_RULES_SECONDS + 15
    assert not rule_processes(daphne)
    assert busiest_thread(daphne) < 0.1


def test_a_preview_whose_client_has_gone_ends_at_its_deadline(user, web, make_site):
    """Django's sync views under daphne run on in their thread when the client goes: the
    deadline of the rules' process is what stops the work."""
    daphne, base = web
    site = make_site(pages_site({"/big": Response(body=PARAGRAPHS)}))
    rules = [{"name": "cubic", "kind": "xpath", "expr": CUBIC_XPATH}]
    session = signed_in(user, base)
    with pytest.raises(requests.ReadTimeout):
        session.post(
            base + "/crawls/preview/",
            data=preview_data(site.url + "/big", rules),
            timeout=(10, 1),
        )
    session.close()
    deadline = time.monotonic() + services.PREVIEW_RULES_SECONDS + 20
    while rule_processes(daphne) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not rule_processes(daphne)
    assert busiest_thread(daphne) < 0.1


def test_a_crawl_whose_rules_run_away_finishes_with_the_errors_on_their_pages(user, make_site):
    links = '<title>Home</title><a href="/data.json">d</a><a href="/big">b</a>'
    site = make_site(
        pages_site(
            {
                "/": links,
                "/data.json": Response(body='{"a": 1}', content_type="application/json"),
                "/big": Response(body=PARAGRAPHS),
            }
        )
    )
    rules = [
        {"name": "tenfold", "kind": "json", "expr": TENFOLD, "url_pattern": r"\.json$"},
        {"name": "siblings", "kind": "css", "expr": SIBLINGS_CSS, "many": True},
        {"name": "title", "kind": "css", "expr": "title"},
    ]
    crawl = services.crawl_create(
        user=user,
        name="runaway",
        seeds=[site.url + "/"],
        obey_robots=False,
        threads=2,
        max_retries=0,
        extract_rules=rules,
    )
    fleet = WorkerFleet(env=FAST_WORKERS)
    try:
        worker = fleet.start_worker()
        fleet.start_cron()
        fleet.wait_until_registered(1)
        started = time.monotonic()
        services.crawl_start(crawl=crawl, user=user)
        crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180, fleet=fleet)
        print(f"the crawl took {time.monotonic() - started:.1f} s")
        pages = {page.url.removeprefix(site.url): page for page in crawl.pages.all()}
        assert set(pages) == {"/", "/data.json", "/big"}
        assert (
            pages["/data.json"]
            .extract_errors["tenfold"]
            .startswith((TOO_LONG, "the rule needed more than 512 MB"))
        )
        assert pages["/big"].extract_errors == {
            "siblings": TOO_LONG + "1 s of CPU on this page; it was stopped"
        }
        assert pages["/big"].extracted["title"] == "Big"
        assert pages["/"].extracted == {"siblings": [], "title": "Home"}
        # The slices ended their rule processes with them.
        deadline = time.monotonic() + 30
        while rule_processes(psutil.Process(worker.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not rule_processes(psutil.Process(worker.pid))
    finally:
        fleet.stop()
