"""Crawls that render JavaScript: pages loaded in headless Chromium (Debian's, found on PATH)
through Playwright, their links and fields taken from the DOM their scripts built; with the
rules of plain fetches (proxies, the private-network guard, retries when a browser dies)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from django.core.exceptions import ValidationError

from crawlhub.http import Fetcher, FetchResult, chromium, rendering
from crawls import services
from crawls.models import Channel, FailedRequest, ProxyUse
from tests.engine.test_crawling_through_proxies import admit
from tests.support.crawling import drive, fetched_paths, start_site_crawl
from tests.support.forward_proxy import ForwardProxy
from tests.support.sites import Request, Response, pages_site, script_site

pytestmark = [pytest.mark.django_db, pytest.mark.browser]

PAGES = 6
ALL_PATHS = sorted(["/", *[f"/p/{n}" for n in range(PAGES)]])
TITLE_RULE = [{"name": "title", "kind": "css", "expr": "h1.title"}]


@pytest.fixture(autouse=True)
def browsers():
    """Chromium is required (CRAWLHUB_REQUIRE_BROWSER=1 in CI) or the test is skipped; the
    process's browsers are closed after each test."""
    found = chromium.locate()
    if not found:
        if os.environ.get("CRAWLHUB_REQUIRE_BROWSER") == "1":
            pytest.fail(found.problem + " (CRAWLHUB_REQUIRE_BROWSER=1)")
        pytest.skip(found.problem)
    yield
    rendering.close_pool()


def test_a_site_built_by_scripts_is_crawled_completely_only_when_rendered(user, make_site):
    site = make_site(script_site(PAGES))
    plain = drive(start_site_crawl(user, site))
    assert fetched_paths(plain) == ["/"]
    rendered = drive(start_site_crawl(user, site, render_javascript=True))
    assert sorted(fetched_paths(rendered)) == ALL_PATHS
    assert rendered.stats["responses"] == len(ALL_PATHS)
    titles = dict(rendered.pages.values_list("url", "title"))
    assert titles[site.url + "/p/3"] == "Item 3"


def test_extraction_rules_see_the_rendered_dom(user, make_site):
    site = make_site(script_site(PAGES))
    crawl = drive(
        start_site_crawl(
            user,
            site,
            render_javascript=True,
            extract_rules=TITLE_RULE,
            render_wait_selector="#app[data-ready]",
        )
    )
    extracted = {
        url: data.get("title") for url, data in crawl.pages.values_list("url", "extracted")
    }
    assert extracted[site.url + "/p/2"] == "Item 2"
    assert extracted[site.url + "/"] == "Home"
    assert len(extracted) == len(ALL_PATHS)


def test_a_channel_that_renders_makes_its_crawls_render_unless_they_say_no(user, make_site):
    site = make_site(script_site(2))
    channel = Channel.objects.create(slug="spa", name="SPA", render_javascript=True)
    inherited = drive(start_site_crawl(user, site, channel=channel))
    assert sorted(fetched_paths(inherited)) == ["/", "/p/0", "/p/1"]
    refused = drive(start_site_crawl(user, site, channel=channel, render_javascript=False))
    assert fetched_paths(refused) == ["/"]


def test_a_rendered_crawl_goes_through_the_leased_proxy(user, make_site):
    site = make_site(script_site(2))
    channel = Channel.objects.create(slug="shop", name="Shop", proxy_use=ProxyUse.POOL)
    with ForwardProxy(auth=("scout", "s3cret")) as proxy:
        admit(proxy.url_with_auth)
        crawl = drive(start_site_crawl(user, site, channel=channel, render_javascript=True))
        relays = list(proxy.relays)
        refused_auth = proxy.refused_auth
    assert sorted(fetched_paths(crawl)) == ["/", "/p/0", "/p/1"]
    # The pages' own API calls (made by the browser's scripts) went through the proxy too,
    # with its credentials; and nothing reached the site but through the proxy.
    assert len(relays) >= 6, relays
    assert refused_auth == 0
    proxy_ends = {relay.upstream[1] for relay in relays}
    assert {request.client[1] for request in site.log} <= proxy_ends
    assert any(request.path == "/api/p/1" for request in site.log)


def test_a_browser_killed_mid_crawl_loses_no_page(user, make_site):
    site = make_site(script_site(PAGES, api_delay=0.3))
    crawl = start_site_crawl(user, site, render_javascript=True, threads=2)
    killed: list[int] = []

    def kill_when_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            # Pages are being rendered: the browser asks the API for them (this thread may
            # not use the test's database).
            if sum(request.path.startswith("/api/p/") for request in site.log) >= 2:
                pids = rendering.shared_pool().browser_pids()
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_busy, daemon=True)
    killer.start()
    crawl = drive(crawl, timeout=180)
    killer.join(timeout=10)
    assert killed, "the browser was never seen running"
    assert sorted(fetched_paths(crawl)) == ALL_PATHS
    assert not FailedRequest.objects.filter(crawl=crawl).exists()
    assert set(crawl.pages.values_list("status", flat=True)) == {200}
    assert crawl.stats["responses"] == len(ALL_PATHS)


def test_a_page_cannot_make_the_browser_reach_a_private_address(make_site, settings):
    api = make_site(script_site(1))
    shell = script_site(1)
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    # A public page (already fetched: the browser is handed it) whose script calls a loopback
    # API; the guard refuses that request as it would refuse a fetch.
    document = _document("http://example.com/", shell)
    document.body = document.body.replace(b"'/api'", f"'{api.url}/api'".encode())
    rendered = rendering.shared_pool().render(
        document, proxy=None, options=rendering.RenderOptions(timeout=10, max_bytes=10**6)
    )
    assert rendered.error == ""
    assert rendered.title == "Loading"  # the script got no answer
    assert api.log == []


def test_a_browser_is_replaced_after_its_pages(make_site):
    site = make_site(script_site(4))
    found = chromium.locate()
    pool = rendering.BrowserPool(found.path, pages=2, recycle_after=2)
    try:
        with Fetcher(timeout=10, max_bytes=10**6) as fetcher:
            for n in range(5):
                document = fetcher.fetch(f"{site.url}/p/{n % 4}", follow_redirects=False)
                rendered = pool.render(
                    document,
                    proxy=None,
                    options=rendering.RenderOptions(timeout=10, max_bytes=10**6),
                )
                assert rendered.title == f"Item {n % 4}"
        assert pool.launches == 3
    finally:
        pool.close()


# Each page says what it sees of the last one's cookies, and which user agent runs it.
WHO_AM_I = (
    "<!doctype html><html><head><title>-</title></head><body><script>"
    "document.title = 'ua=' + navigator.userAgent + ' cookie=' + document.cookie;"
    "document.cookie = 'seen=' + location.pathname.slice(1);"
    "</script></body></html>"
)


def test_pages_through_one_proxy_reuse_a_tab_that_carries_nothing_over(make_site):
    site = make_site(pages_site({f"/{n}": WHO_AM_I for n in range(4)}))
    pool = rendering.BrowserPool(chromium.locate().path, pages=2, recycle_after=100)
    options = rendering.RenderOptions(timeout=20, max_bytes=10**6)
    try:
        with Fetcher(timeout=10, max_bytes=10**6) as fetcher:
            for n in range(4):
                document = fetcher.fetch(f"{site.url}/{n}", follow_redirects=False)
                rendered = pool.render(document, proxy=None, options=options)
                # The client's user agent (it changes from page to page), and no cookie the
                # page before set.
                agent = document.request_headers["User-Agent"]
                assert rendered.title == f"ua={agent} cookie=", (n, rendered.title)
        assert pool.tabs_made == 1
        assert pool.launches == 1
    finally:
        pool.close()


# The page logs in through its API (a cookie set by the answer, one set by its script), posts,
# is redirected, and shows what the API saw.
API_CLIENT = (
    "<!doctype html><html><head><title>-</title></head><body><script>"
    "document.cookie = 'theme=dark';"
    "fetch('/api/login', {method: 'POST', body: 'user=ann'})"
    ".then(() => fetch('/api/moved'))"
    ".then(answer => answer.text())"
    ".then(text => { document.title = text + ' | page sees ' + document.cookie; });"
    "</script></body></html>"
)


def api_site(request: Request) -> Response:
    if request.path == "/api/login" and request.method == "POST":
        return Response(
            body="ok",
            content_type="text/plain",
            headers={"Set-Cookie": f"sid=S-{request.body.decode()}; Path=/; HttpOnly"},
        )
    if request.path == "/api/moved":
        return Response(status=302, headers={"Location": "/api/me"})
    if request.path == "/api/me":
        return Response(body=f"api sees {request.headers.get('Cookie')}", content_type="text/plain")
    return Response(body=API_CLIENT)


def test_a_pages_api_calls_carry_its_cookies_and_post_bodies_and_follow_redirects(make_site):
    site = make_site(api_site)
    with Fetcher(timeout=10, max_bytes=10**6) as fetcher:
        document = fetcher.fetch(site.url + "/", follow_redirects=False)
    rendered = rendering.shared_pool().render(
        document, proxy=None, options=rendering.RenderOptions(timeout=20, max_bytes=10**6)
    )
    assert rendered.title == "api sees theme=dark; sid=S-user=ann | page sees theme=dark"


def test_a_page_being_rendered_is_given_up_at_once_and_the_browser_goes_on(make_site):
    site = make_site(script_site(2, api_delay=30))  # the page waits 30 s for its API
    pool = rendering.shared_pool()
    options = rendering.RenderOptions(timeout=60, max_bytes=10**6)
    with Fetcher(timeout=10, max_bytes=10**6) as fetcher:
        document = fetcher.fetch(site.url + "/p/0", follow_redirects=False)
    give_up = threading.Event()
    threading.Timer(2, give_up.set).start()
    started = time.monotonic()
    with pytest.raises(rendering.RenderingStopped):
        pool.render(document, proxy=None, options=options, give_up=give_up)
    assert time.monotonic() - started < 5
    # The tab it had is closed; the next page renders as ever.
    page = _document("http://example.com/", pages_site({"/": "<title>next</title>"}))
    assert pool.render(page, proxy=None, options=options).title == "next"


def test_a_bad_wait_selector_is_refused_when_saved(user):
    with pytest.raises(ValidationError) as refused:
        services.crawl_create(
            user=user,
            name="x",
            seeds=["http://127.0.0.1:9/"],
            render_javascript=False,
            render_wait_selector="div[data-ready",
        )
    errors = refused.value.message_dict
    assert list(errors) == ["render_wait_selector"]
    assert "'div[data-ready' is not a CSS selector" in errors["render_wait_selector"][0]


def _document(url: str, handler) -> FetchResult:
    answer = handler(Request(method="GET", path="/", headers={}, client=("", 0), at=0))
    body = answer.body.encode() if isinstance(answer.body, str) else answer.body
    return FetchResult(
        url=url,
        final_url=url,
        status=200,
        content_type=answer.content_type,
        body=body,
        nbytes=len(body),
        truncated=False,
        elapsed_ms=0,
        redirects=[],
        error="",
        error_kind="",
        headers={"content-type": answer.content_type},
    )
