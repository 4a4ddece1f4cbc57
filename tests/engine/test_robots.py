"""robots.txt: rules and Crawl-delay, what each fetch outcome means, fetched from real sites."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from crawlhub.http.client import Fetcher
from crawlhub.http.useragents import DEFAULT_USER_AGENT, USER_AGENTS
from crawls import services
from crawls.engine import robots
from crawls.engine.frontier import Frontier
from crawls.engine.request import Request
from crawls.engine.robots import RobotsCache, RobotsPolicy, policy_from_response, robots_url
from tests.support.crawling import drive
from tests.support.sites import Response, free_port, pages_site

ROBOTS = """
# comments and blank lines are fine

User-agent: *
Disallow: /private/
Allow: /private/open.html
Crawl-delay: 2.5

User-agent: crawlhub
Disallow: /no-crawlhub/
Crawl-delay: 7
"""
BROWSER = USER_AGENTS[0]


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(timeout=0.5, max_bytes=1024 * 1024, user_agent_mode="fixed")
    yield f
    f.close()


def policy_of(fetcher: Fetcher, url: str) -> RobotsPolicy:
    return policy_from_response(*fetcher.fetch_text(robots_url(url)))


def test_disallow_is_honoured_and_allow_is_more_specific():
    policy = RobotsPolicy.parse(ROBOTS)
    assert not policy.allowed("https://example.com/private/data", BROWSER)
    assert policy.allowed("https://example.com/private/open.html", BROWSER)
    assert policy.allowed("https://example.com/public", BROWSER)


def test_our_own_group_applies_to_our_user_agent():
    policy = RobotsPolicy.parse(ROBOTS)
    assert not policy.allowed("https://example.com/no-crawlhub/x", DEFAULT_USER_AGENT)
    assert policy.allowed("https://example.com/private/x", DEFAULT_USER_AGENT)  # its group only
    assert policy.allowed("https://example.com/no-crawlhub/x", BROWSER)


def test_crawl_delay_is_read_per_user_agent():
    policy = RobotsPolicy.parse(ROBOTS)
    assert policy.crawl_delay(BROWSER) == 2.5
    assert policy.crawl_delay(DEFAULT_USER_AGENT) == 7.0
    assert RobotsPolicy.parse("User-agent: *\nDisallow: /x\n").crawl_delay(BROWSER) is None
    assert RobotsPolicy.parse("User-agent: *\nCrawl-delay: soon\n").crawl_delay(BROWSER) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<html><body><h1>Welcome!</h1><a href='/'>home</a></body></html>",
        "\x00\xff binary \ufffd garbage\n" * 50,
        "Disallow /everything\nUser agent: *\n",
    ],
)
def test_garbage_robots_txt_allows_everything(text):
    policy = RobotsPolicy.parse(text)
    assert policy.allowed("https://example.com/any/page?x=1", BROWSER)
    assert policy.crawl_delay(BROWSER) is None


def test_pathological_wildcards_are_matched_quickly():
    policy = RobotsPolicy.parse("User-agent: *\nDisallow: /" + "*a" * 5_000 + "b\n")
    started = time.perf_counter()
    assert policy.allowed("https://example.com/" + "a" * 5_000, BROWSER)
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize(
    ("status", "allowed"),
    [(200, False), (404, True), (410, True), (401, True), (403, True), (500, False), (503, False)],
)
def test_policy_from_each_status(status, allowed):
    policy = policy_from_response(status, "User-agent: *\nDisallow: /\n")
    assert policy.allowed("https://example.com/page", BROWSER) is allowed


def test_no_response_disallows_everything_for_now():
    policy = policy_from_response(None, "")
    assert not policy.allowed("https://example.com/", BROWSER)
    assert policy.crawl_delay(BROWSER) is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/a/b?c=d#e", "https://example.com/robots.txt"),
        ("HTTP://User:Pw@WWW.Example.COM:8080/x", "http://www.example.com:8080/robots.txt"),
        ("http://example.com:80/x", "http://example.com/robots.txt"),
        ("https://example.com:443", "https://example.com/robots.txt"),
        ("http://[::1]:8000/x", "http://[::1]:8000/robots.txt"),
    ],
)
def test_robots_url(url, expected):
    assert robots_url(url) == expected


def test_robots_url_rejects_non_http():
    with pytest.raises(ValueError, match="is not an http"):
        robots_url("ftp://example.com/x")


# -- fetched from a real site ----------------------------------------------------------------


def test_site_robots_txt_is_fetched_and_honoured(make_site, fetcher):
    site = make_site(pages_site({"/robots.txt": Response(body=ROBOTS, content_type="text/plain")}))
    policy = policy_of(fetcher, site.url + "/private/page.html")
    assert site.paths() == ["/robots.txt"]
    assert not policy.allowed(site.url + "/private/page.html", BROWSER)
    assert policy.allowed(site.url + "/index.html", BROWSER)
    assert policy.crawl_delay(DEFAULT_USER_AGENT) == 7.0


def test_site_without_robots_txt_allows_everything(make_site, fetcher):
    site = make_site(pages_site({}))  # 404 everywhere
    assert policy_of(fetcher, site.url + "/").allowed(site.url + "/anything", BROWSER)


def test_robots_txt_server_error_disallows_everything(make_site, fetcher):
    site = make_site(lambda r: Response(status=500, body="User-agent: *\nAllow: /\n"))
    assert not policy_of(fetcher, site.url + "/").allowed(site.url + "/page", BROWSER)


def test_unreachable_site_disallows_everything(fetcher):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert fetcher.fetch_text(f"http://127.0.0.1:{port}/robots.txt") == (None, "")
    assert not policy_of(fetcher, f"http://127.0.0.1:{port}/").allowed("http://x/", BROWSER)


def test_robots_txt_redirect_is_followed(make_site, fetcher):
    site = make_site(
        pages_site(
            {
                "/robots.txt": Response(status=301, headers={"Location": "/real-robots.txt"}),
                "/real-robots.txt": Response(body=ROBOTS, content_type="text/plain"),
            }
        )
    )
    assert not policy_of(fetcher, site.url + "/").allowed(site.url + "/private/x", BROWSER)


def test_robots_txt_redirect_loop_counts_as_unavailable(make_site, fetcher):
    loop = Response(status=302, headers={"Location": "/robots.txt"})
    site = make_site(pages_site({"/robots.txt": loop}))
    status, text = fetcher.fetch_text(site.url + "/robots.txt")
    assert (status, text) == (302, "")
    assert policy_from_response(status, text).allowed(site.url + "/page", BROWSER)


def test_html_served_as_robots_txt_allows_everything(make_site, fetcher):
    # Many sites answer every path, robots.txt included, with their HTML home page.
    site = make_site(lambda r: Response(body="<html><a href='/'>Home</a></html>"))
    assert policy_of(fetcher, site.url + "/").allowed(site.url + "/private/x", BROWSER)


# -- the cache slices share through the frontier ---------------------------------------------


def running_frontier(crawl_id: int = 1) -> Frontier:
    frontier = Frontier(crawl_id)
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    frontier.set_state("running")
    return frontier


def test_robots_txt_is_fetched_once_for_every_slice_of_the_crawl(make_site, fetcher):
    site = make_site(pages_site({"/robots.txt": Response(body=ROBOTS, content_type="text/plain")}))
    frontier = running_frontier()
    one, two = (RobotsCache(frontier, fetcher, user_agent=BROWSER, host_delay=0) for _ in range(2))
    assert not one.allows(Request(site.url + "/private/data"))
    assert one.allows(Request(site.url + "/private/open.html"))
    assert not two.allows(Request(site.url + "/private/data"))
    assert two.allows(Request(site.url + "/public"))
    assert site.paths() == ["/robots.txt"]


def test_a_longer_crawl_delay_becomes_the_host_s_delay(make_site, fetcher):
    site = make_site(pages_site({"/robots.txt": Response(body=ROBOTS, content_type="text/plain")}))
    frontier = running_frontier(1)
    frontier.add_seeds([site.url + "/a", site.url + "/b"])
    cache = RobotsCache(frontier, fetcher, user_agent=BROWSER, host_delay=0)
    assert cache.allows(Request(site.url + "/public"))
    # Crawl-delay 2.5 s for browsers: one request of the host now, the next one later.
    assert len(frontier.claim(2, lease_seconds=30)) == 1
    # A crawl that waits longer already (5 s) keeps its own delay: nothing is overridden, so
    # this frontier (configured with none) hands out both.
    frontier = running_frontier(2)
    frontier.add_seeds([site.url + "/a", site.url + "/b"])
    cache = RobotsCache(frontier, fetcher, user_agent=BROWSER, host_delay=5)
    assert cache.allows(Request(site.url + "/public"))
    assert len(frontier.claim(2, lease_seconds=30)) == 2


def test_an_unreachable_robots_txt_disallows_for_a_while_then_is_asked_again(
    make_site, fetcher, monkeypatch
):
    monkeypatch.setattr(robots, "UNREACHABLE_ROBOTS_SECONDS", 0.5)
    answers = iter([Response(delay=1.0)])  # the first answer comes after the fetch timeout

    def site_handler(request):
        return next(answers, Response(status=404))

    site = make_site(site_handler)
    frontier = running_frontier()
    cache = RobotsCache(frontier, fetcher, user_agent=BROWSER, host_delay=0)
    page = Request(site.url + "/page")
    assert not cache.allows(page)
    assert frontier.robots_text(page.host) is None  # not kept for the other slices
    assert not cache.allows(page)  # nor asked again at once
    assert site.paths() == ["/robots.txt"]
    time.sleep(0.6)
    assert cache.allows(page)  # a 404 now: no restrictions
    assert site.paths() == ["/robots.txt", "/robots.txt"]
    assert frontier.robots_text(page.host) is not None


@pytest.mark.django_db
def test_a_dead_host_is_unreachable_not_blocked_and_its_pages_are_retried(user, quick_slices):
    """Its robots.txt could not be fetched because nothing answers: the page says so (not
    "blocked by robots.txt", which is a site's rule), and it is retried like any fetch that got
    no answer, asking for robots.txt again each time, then goes to the failure queue."""
    port = free_port()  # nobody listens: connection refused
    crawl = services.crawl_create(
        user=user,
        name="dead",
        seeds=[f"http://127.0.0.1:{port}/"],
        obey_robots=True,
        max_retries=2,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=60)
    stats = crawl.stats
    assert (stats["retries"], stats["failed"], stats["errors"]) == (2, 1, 1)
    failure = crawl.failures.get()
    assert failure.attempts == 3
    assert failure.last_error.startswith("robots.txt could not be fetched: ")
    assert "refused" in failure.last_error
    assert "blocked by robots.txt" not in crawl.end_line
