"""Crawls run end to end against local sites, slices driven in this process."""

from collections import Counter
from urllib.parse import urlsplit

import pytest

from crawlhub.http.useragents import USER_AGENTS
from crawlhub.sample_site import SampleSite
from crawls import services, webhooks
from crawls.engine import jobs, lifecycle, slices
from crawls.engine.frontier import Frontier
from crawls.engine.jobs import slice_job
from crawls.engine.request import canonicalize
from crawls.engine.slices import run_slice
from crawls.models import Crawl, CrawlState, WebhookDelivery
from tests.support.crawling import drive, fetched_paths, sample_handler, start_site_crawl
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db


def page(*links: str, title: str = "page") -> str:
    anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
    return f"<html><head><title>{title}</title></head><body>{anchors}</body></html>"


start = start_site_crawl


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def page_requests(site) -> list[str]:
    return [p for p in site.paths() if p != "/robots.txt"]


@pytest.fixture
def sample(make_site):
    """A generated site served by a LocalSite, whose log says what reached it."""
    site = SampleSite(pages=600, seed=7)
    server = make_site(sample_handler(site, delay=0))
    return site, server, server.url


@pytest.mark.slow
def test_a_generated_site_is_fetched_exactly_once_per_url_with_exact_counters(user, sample):
    site, server, base = sample
    crawl = services.crawl_create(
        user=user,
        name="sample",
        seeds=[base + "/"],
        obey_robots=False,
        threads=8,
        max_pages=100_000,
        max_depth=1000,
        max_retries=1,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=120)
    assert crawl.state == CrawlState.FINISHED

    expected = site.expected()
    fetched = fetched_paths(crawl) + list(crawl.failures.values_list("url", flat=True))
    fetched = {p if p.startswith("/") else "/" + p.split("/", 3)[-1] for p in fetched}
    assert fetched == expected
    assert len(crawl.pages.all()) + crawl.failures.count() == len(expected)

    stats = crawl.stats
    broken = crawl.failures.count()
    assert stats["requests"] == len(expected)
    assert stats["responses"] == len(expected) - broken
    assert stats["failed"] == broken == stats["errors"]
    assert stats["retries"] == broken * 1
    assert stats["queued"] == stats["in_flight"] == stats["delayed"] == 0
    # Every final status in its class: the responses, and the 500s that used up their retries.
    assert stats["failed_http"] == broken
    assert (
        stats["status_2xx"] + stats["status_3xx"] + stats["status_4xx"] + stats["status_5xx"]
        == stats["responses"] + stats["failed_http"]
    )
    moved = {path for path in expected if path.startswith("/moved/")}
    assert stats["status_3xx"] == len(moved) > 0  # each redirect is a page of its own
    # What reached the site: every URL once, whatever form it was found in, a redirect's target
    # too (it is also linked directly); a 500 once more for its retry.
    fetches = Counter(
        path_of(canonicalize(base + path)) for path in server.paths() if path != "/robots.txt"
    )
    assert set(fetches) == expected
    assert {path: n for path, n in fetches.items() if n != 1} == {
        path: 2 for path in expected if path.startswith("/broken/")
    }


def test_each_url_reaches_the_site_once(user, make_site):
    pages = {
        "/": page("/a", "/a#top", "a", "/b?y=2&x=1", "/b?x=1&y=2", "HTTP://127.0.0.1:{port}/a"),
        "/a": page("/", "/b?x=1&y=2"),
        "/b?x=1&y=2": page("/a"),
        "/b?y=2&x=1": page("/a"),
    }
    site = make_site(lambda r: pages_site(pages)(r))
    pages["/"] = pages["/"].replace("{port}", str(site.port))
    crawl = drive(start(user, site))
    counts = Counter(page_requests(site))
    assert set(counts.values()) == {1}, counts
    assert len(counts) == 3
    assert crawl.stats["requests"] == 3
    # "/" links 6 times to 2 distinct new URLs, "/a" twice to seen ones, "/b" once: 7 repeats
    assert crawl.stats["repeats"] == 7


def test_links_that_are_not_http_are_ignored(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": page(
                    "mailto:a@b.c", "javascript:alert(1)", "data:text/html,hi", "tel:123", "/ok"
                ),
                "/ok": page(),
            }
        )
    )
    crawl = drive(start(user, site))
    assert crawl.stats["requests"] == 2
    assert sorted(page_requests(site)) == ["/", "/ok"]


def test_max_depth_stops_following_links(user, make_site):
    site = make_site(
        pages_site({"/": page("/1"), "/1": page("/2"), "/2": page("/3"), "/3": page()})
    )
    crawl = drive(start(user, site, max_depth=2))
    assert sorted(page_requests(site)) == ["/", "/1", "/2"]
    assert crawl.stats["requests"] == 3


def test_max_pages_caps_the_requests(user, make_site):
    links = [f"/p{n}" for n in range(50)]
    site = make_site(pages_site({"/": page(*links), **{p: page() for p in links}}))
    crawl = drive(start(user, site, max_pages=10))
    assert crawl.stats["requests"] == 10
    assert len(page_requests(site)) == 10


def test_scope_rules_keep_the_crawl_in_bounds(user, make_site):
    other = make_site(pages_site({"/": page()}))
    site = make_site(
        pages_site(
            {
                "/": page(
                    "/docs/a", "/docs/private/b", "/blog/c", f"http://localhost:{other.port}/"
                ),
                "/docs/a": page(),
                "/docs/private/b": page(),
                "/blog/c": page(),
            }
        )
    )
    crawl = drive(
        start(user, site, include_patterns=[r"/docs/", r"/$"], exclude_patterns=["private"])
    )
    assert sorted(page_requests(site)) == ["/", "/docs/a"]
    assert other.paths() == []
    assert crawl.stats["requests"] == 2


def test_robots_txt_is_obeyed(user, make_site):
    site = make_site(
        pages_site(
            {
                "/robots.txt": Response(
                    body="User-agent: *\nDisallow: /secret", content_type="text/plain"
                ),
                "/": page("/open", "/secret/x"),
                "/open": page(),
                "/secret/x": page(),
            }
        )
    )
    crawl = drive(start(user, site, obey_robots=True))
    assert "/secret/x" not in site.paths()
    assert site.paths().count("/robots.txt") == 1
    blocked = crawl.pages.get(url=site.url + "/secret/x")
    assert blocked.error == "blocked by robots.txt"
    assert blocked.status is None


@pytest.mark.slow
def test_per_host_delay_spaces_requests_at_the_site(user, make_site):
    links = [f"/p{n}" for n in range(5)]
    site = make_site(pages_site({"/": page(*links), **{p: page() for p in links}}))
    drive(start(user, site, host_delay=0.3, threads=4))
    times = sorted(r.at for r in site.log if r.path != "/robots.txt")
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) == 6
    assert min(gaps) >= 0.27, gaps


@pytest.mark.slow
def test_server_errors_are_retried_then_land_in_the_failure_queue(user, make_site):
    site = make_site(pages_site({"/": page("/boom"), "/boom": Response(status=503)}))
    crawl = drive(start(user, site, max_retries=2))
    assert page_requests(site).count("/boom") == 3
    failure = crawl.failures.get()
    assert failure.url == site.url + "/boom"
    assert failure.attempts == 3
    assert failure.last_status == 503
    assert crawl.stats["retries"] == 2
    assert crawl.stats["failed"] == 1

    assert services.crawl_retry_failed(crawl=crawl, user=user) == 1
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.RUNNING
    crawl = drive(crawl)
    assert page_requests(site).count("/boom") == 6
    assert crawl.failures.count() == 1
    assert crawl.stats["requests"] == 2


def test_random_user_agents_reach_the_site(user, make_site):
    links = [f"/p{n}" for n in range(30)]
    site = make_site(pages_site({"/": page(*links), **{p: page() for p in links}}))
    drive(start(user, site, user_agent_mode="random"))
    agents = {r.headers["User-Agent"] for r in site.log}
    assert agents <= set(USER_AGENTS)
    assert len(agents) > 3


def test_a_fixed_user_agent_is_sent(user, make_site):
    site = make_site(pages_site({"/": page("/a"), "/a": page()}))
    drive(start(user, site, user_agent_mode="fixed", user_agent="docs-bot/1.0"))
    assert {r.headers["User-Agent"] for r in site.log} == {"docs-bot/1.0"}


@pytest.mark.slow
def test_two_crawls_share_neither_dedup_nor_counters(user, make_site):
    site = make_site(pages_site({"/": page("/a", "/b"), "/a": page("/b"), "/b": page()}))
    first, second = start(user, site), start(user, site)
    first, second = drive(first), drive(second)
    assert first.stats["requests"] == second.stats["requests"] == 3
    assert first.stats["repeats"] == second.stats["repeats"] == 1
    assert Counter(page_requests(site)) == {"/": 2, "/a": 2, "/b": 2}


def test_fetch_errors_are_recorded_per_page(user, make_site):
    from tests.support.sites import free_port

    closed = f"http://127.0.0.1:{free_port()}/"
    site = make_site(pages_site({"/": page(closed, "http://nosuch.invalid/")}))
    crawl = services.crawl_create(
        user=user,
        name="t",
        seeds=[site.url + "/"],
        obey_robots=False,
        max_retries=0,
        allowed_domains=["127.0.0.1", "nosuch.invalid"],
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    errors = dict(crawl.failures.values_list("url", "last_error"))
    errors.update(crawl.pages.exclude(error="").values_list("url", "error"))
    assert "refused" in errors[closed]
    assert "nosuch.invalid" in errors["http://nosuch.invalid/"]


def test_a_crawl_that_fetched_nothing_ends_failed_saying_why(user):
    from tests.support.sites import free_port

    crawl = services.crawl_create(
        user=user,
        name="t",
        seeds=[f"http://127.0.0.1:{free_port()}/"],
        obey_robots=False,
        max_retries=0,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FAILED
    assert crawl.error.startswith("no page could be fetched: connection refused")
    assert crawl.events.filter(kind="failed").exists()
    assert crawl.stats["errors"] == 1


def test_a_slice_ends_as_soon_as_the_crawl_has_nothing_left(user, make_site, monkeypatch):
    # An idle wait far longer than two pages take on a loaded machine, so that ending before
    # it says the slice did not wait it out.
    monkeypatch.setattr(slices, "IDLE_EXIT_SECONDS", 60.0)
    site = make_site(pages_site({"/": page("/a"), "/a": page("/")}))
    crawl = start(user, site)
    report = run_slice(crawl.pk, "only", budget_seconds=120)
    assert report["reason"] == "done"
    assert report["pages"] == 2
    assert report["seconds"] < slices.IDLE_EXIT_SECONDS  # not the idle wait
    assert lifecycle.finish_if_done(crawl.pk)


def test_while_the_queue_is_empty_a_page_s_links_are_written_at_once(user, make_site, monkeypatch):
    # A chain: each page's only link is found by fetching the one before it, so the queue is
    # empty after each claim. Written only every hour (or at 100 pages), the first page's link
    # would wait in memory until the slice gave up idle, having fetched one page.
    monkeypatch.setattr(slices, "FLUSH_EVERY_SECONDS", 3600.0)
    monkeypatch.setattr(slices, "IDLE_EXIT_SECONDS", 60.0)
    chain = [f"/{i}" for i in range(1, 7)]
    pages = {"/": page(chain[0])} | {p: page(*chain[i + 1 : i + 2]) for i, p in enumerate(chain)}
    site = make_site(pages_site(pages))
    crawl = start(user, site, max_depth=10)
    report = run_slice(crawl.pk, "only", budget_seconds=120)
    assert (report["reason"], report["pages"]) == ("done", 7)
    assert report["seconds"] < slices.IDLE_EXIT_SECONDS
    assert sorted(page_requests(site)) == sorted(["/", *chain])


@pytest.mark.slow
def test_a_slice_waits_while_a_retry_is_pending(user, make_site):
    calls = Counter()

    def handler(request):
        calls[request.path] += 1
        if calls[request.path] == 1:
            return Response(status=503, body="busy")
        return pages_site({"/": page()})(request)

    site = make_site(handler)
    crawl = start(user, site, max_retries=1)
    report = run_slice(crawl.pk, "only", budget_seconds=30)
    # The retry was due a second later: the slice stayed for it, then ended once it was done.
    assert (report["reason"], report["pages"], calls["/"]) == ("done", 1, 2)


@pytest.mark.django_db(transaction=True)  # slice_job runs as on a worker: its own transactions
@pytest.mark.parametrize(
    ("breakage", "reason"),
    [
        ({"user_agent": "Bot/1\nX-Evil: 1"}, "user_agent: must be a single line"),
        (
            {"include_patterns": ["/docs/", "/(?=guide)"]},
            "include_patterns: line 2: '/(?=guide)' uses a lookahead (?=...), which crawlhub's "
            "linear-time pattern engine does not support",
        ),
        ({"allowed_domains": ["ü" * 64]}, "allowed_domains: line 1: "),
    ],
    ids=["user-agent-line-break", "lookahead-pattern", "domain-no-host-name"],
)
def test_a_crawl_whose_saved_settings_no_slice_accepts_fails_with_the_reason(
    user, breakage, reason
):
    crawl = services.crawl_create(user=user, name="t", seeds=["http://127.0.0.1:9/"])
    webhooks.webhook_create(
        user=user, url="http://127.0.0.1:9/hook", events=["failed"], crawl=crawl
    )
    services.crawl_start(crawl=crawl, user=user)
    # Written past crawl_clean, as a row saved before an upgrade, or edited in the database.
    Crawl.objects.filter(pk=crawl.pk).update(**breakage)
    report = slice_job(crawl.pk, "first")
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FAILED
    assert crawl.error.startswith("a slice cannot start with this crawl's settings: " + reason)
    assert report == {"reason": "cannot start", "error": crawl.error}
    assert crawl.finished_at is not None
    assert list(crawl.events.filter(kind="failed").values_list("detail", flat=True)) == [
        crawl.error
    ]
    # Over for good: the seed it could not fetch is dropped, counted, and nothing restarts it.
    assert (crawl.stats["requests"], crawl.stats["cancelled"]) == (1, 1)
    assert Frontier(crawl.pk).is_done()
    assert jobs.supervise()["slices_started"] == 0
    assert slice_job(crawl.pk, "second") == {"reason": "crawl failed"}
    # The integrations hear of it through the usual end signal.
    assert list(WebhookDelivery.objects.values_list("event", flat=True)) == ["failed"]
