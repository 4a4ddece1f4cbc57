"""Redirects in a crawl: every hop of a chain is a page of its own and goes through the crawl's
dedup set, so each URL reaches the site once, whether it is found through a redirect, a link or
both. Checked from the local sites' access logs, with the counters exact."""

from __future__ import annotations

from collections import Counter

import pytest

from crawls import changes, services
from crawls.engine.results import NOTE_LOOP
from crawls.models import CrawlState
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db


def page(*links: str) -> str:
    return "".join(f'<a href="{link}">{link}</a>' for link in links)


def moved(to: str, status: int = 301, delay: float = 0.0) -> Response:
    return Response(status=status, headers={"Location": to}, delay=delay)


def requested(site) -> Counter:
    """How many times the site was asked for each path (robots.txt is off in these crawls)."""
    return Counter(site.paths())


def rows(crawl, site) -> dict:
    return {p.url.removeprefix(site.url): p for p in crawl.pages.all()}


def assert_counters(crawl, **expected: int) -> None:
    stats = crawl.stats
    assert {name: stats[name] for name in expected} == expected, stats
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"] + stats["cancelled"]
    assert (
        stats["requests"]
        == stats["responses"] + stats["errors"] + unfinished
        == (crawl.pages.count() + crawl.failures.count())
    )


@pytest.mark.parametrize("first", ["redirect", "link"])
def test_a_target_reached_by_a_redirect_and_a_link_is_fetched_once(user, make_site, first):
    # "/" links /old (which redirects to /new) and /a (which links /new): whichever reaches
    # /new first, the other finds it seen. The delay decides which one does.
    slow = 0.6
    site = make_site(
        pages_site(
            {
                "/": page("/old", "/a"),
                "/old": moved("/new", delay=slow if first == "link" else 0),
                "/a": Response(body=page("/new"), delay=slow if first == "redirect" else 0),
                "/new": page("/"),
            }
        )
    )
    crawl = drive(start_site_crawl(user, site))
    assert crawl.state == CrawlState.FINISHED
    assert requested(site) == {"/": 1, "/old": 1, "/a": 1, "/new": 1}
    # /new's link back to "/" and the second way to /new are the repeats.
    assert_counters(
        crawl,
        requests=4,
        responses=4,
        errors=0,
        repeats=2,
        status_2xx=3,
        status_3xx=1,
    )
    pages = rows(crawl, site)
    assert (pages["/old"].status, pages["/old"].redirect_to) == (301, site.url + "/new")
    new = pages["/new"]
    if first == "redirect":  # at the redirect's depth, with its chain
        found = ([site.url + "/old"], site.url + "/old", "redirect", 1)
    else:  # one link deeper than /a
        found = ([], site.url + "/a", "link", 2)
    assert new.status == 200
    assert (new.redirects, new.referrer, new.source, new.depth) == found
    # Either way both pages lead there.
    assert changes.inlinks(new, limit=5).total == 2


def test_a_chain_is_fetched_hop_by_hop_once_each_at_one_depth(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": page("/a"),
                "/a": moved("/b", 301),
                "/b": moved("/c", 302),
                "/c": page("/d", "/b"),
                "/d": page(),
            }
        )
    )
    # max_depth=1: /a is one link from the seed, and so are /b and /c; /d, linked from /c, is 2.
    crawl = drive(start_site_crawl(user, site, max_depth=1))
    assert requested(site) == {"/": 1, "/a": 1, "/b": 1, "/c": 1}
    assert_counters(crawl, requests=4, responses=4, repeats=0, status_3xx=2)
    pages = rows(crawl, site)
    a, b, c = pages["/a"], pages["/b"], pages["/c"]
    assert (a.depth, b.depth, c.depth) == (1, 1, 1)
    assert (a.status, a.redirects, a.redirect_to) == (301, [], site.url + "/b")
    assert (b.status, b.redirects, b.redirect_to) == (302, [site.url + "/a"], site.url + "/c")
    assert (c.status, c.redirects, c.redirect_to) == (200, [site.url + "/a", site.url + "/b"], "")
    assert (c.final_url, c.referrer) == (c.url, b.url)
    assert [note for _url, _text, note in c.links] == ["depth limit", "depth limit"]


def test_a_redirect_loop_ends_with_each_url_fetched_once(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": page("/x", "/self"),
                "/x": moved("/y", 302),
                "/y": moved("/x#again", 302),
                "/self": moved("/self", 307),
            }
        )
    )
    crawl = drive(start_site_crawl(user, site))
    assert crawl.state == CrawlState.FINISHED
    assert requested(site) == {"/": 1, "/x": 1, "/y": 1, "/self": 1}
    # /y's target and /self's are already seen: dropped as repeats, and noted as loops.
    assert_counters(crawl, requests=4, responses=4, repeats=2, status_3xx=3, errors=0)
    pages = rows(crawl, site)
    assert pages["/y"].links == [[site.url + "/x", "HTTP 302 redirect", NOTE_LOOP]]
    assert pages["/y"].redirects == [site.url + "/x"] and pages["/y"].error == ""
    assert pages["/self"].links == [[site.url + "/self", "HTTP 307 redirect", NOTE_LOOP]]
    assert pages["/x"].links == [[site.url + "/y", "HTTP 302 redirect", ""]]


def test_a_redirect_to_another_site_is_recorded_and_fetched_only_in_scope(user, make_site):
    other = make_site(pages_site({"/x": page()}))
    # Another host name for the same loopback server: another site for the crawl's scope.
    elsewhere = other.url.replace("127.0.0.1", "localhost") + "/x"
    site = make_site(pages_site({"/": page("/out"), "/out": moved(elsewhere, 302)}))
    crawl = drive(start_site_crawl(user, site))
    assert requested(site) == {"/": 1, "/out": 1} and other.log == []
    assert_counters(crawl, requests=2, responses=2, repeats=0)
    out = rows(crawl, site)["/out"]
    assert (out.status, out.redirect_to) == (302, elsewhere)
    assert out.links == [[elsewhere, "HTTP 302 redirect", "other site (localhost)"]]
    # With that site allowed, the redirect is followed: its target is a page of the crawl.
    again = drive(start_site_crawl(user, site, allowed_domains=["127.0.0.1", "localhost"]))
    assert requested(other) == {"/x": 1}
    target = again.pages.get(url=elsewhere)
    assert (target.status, target.redirects) == (200, [site.url + "/out"])
    assert_counters(again, requests=3, responses=3)


def test_retries_apply_to_a_redirect_s_target_not_to_its_source(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": page("/to-broken", "/to-missing"),
                "/to-broken": moved("/broken"),
                "/to-missing": moved("/missing"),
                "/broken": Response(status=500, body="down"),
            }
        )
    )
    crawl = drive(start_site_crawl(user, site, max_retries=2))
    assert requested(site) == {
        "/": 1,
        "/to-broken": 1,
        "/to-missing": 1,
        "/broken": 3,
        "/missing": 1,
    }
    assert_counters(
        crawl,
        requests=5,
        responses=4,
        errors=1,
        failed=1,
        retries=2,
        status_3xx=2,
        status_4xx=1,
    )
    [failure] = crawl.failures.all()
    assert (failure.url, failure.last_status, failure.attempts) == (site.url + "/broken", 500, 3)
    assert failure.referrer == site.url + "/to-broken"
    missing = rows(crawl, site)["/missing"]
    assert (missing.status, missing.redirects) == (404, [site.url + "/to-missing"])


def test_robots_txt_and_max_pages_apply_to_a_redirect_s_target(user, make_site):
    robots = "User-agent: *\nDisallow: /private\n"
    site = make_site(
        pages_site(
            {
                "/robots.txt": Response(body=robots, content_type="text/plain"),
                "/": page("/in"),
                "/in": moved("/private/x"),
                "/old": moved("/new"),
                "/new": page(),
            }
        )
    )
    crawl = drive(start_site_crawl(user, site, obey_robots=True))
    assert requested(site) == {"/robots.txt": 1, "/": 1, "/in": 1}
    assert_counters(crawl, requests=3, responses=2, errors=1)
    blocked = rows(crawl, site)["/private/x"]
    assert (blocked.status, blocked.error) == (None, "blocked by robots.txt")
    assert blocked.redirects == [site.url + "/in"]
    # A target counts as a request: past max_pages it is dropped, and not fetched.
    site.log.clear()
    crawl = services.crawl_create(
        user=user, name="capped", seeds=[site.url + "/old"], obey_robots=False, max_pages=1
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    assert requested(site) == {"/old": 1}
    assert_counters(crawl, requests=1, responses=1, dropped=1)


def test_a_chain_longer_than_ten_redirects_ends_with_an_error_on_its_last_page(user, make_site):
    site = make_site(
        lambda r: (
            Response(body=page("/hop/0")) if r.path == "/" else moved(f"/hop/{int(r.path[5:]) + 1}")
        )
    )
    crawl = drive(start_site_crawl(user, site))
    hops = [f"/hop/{n}" for n in range(11)]
    assert requested(site) == Counter(["/", *hops])
    last = rows(crawl, site)["/hop/10"]
    assert (last.status, last.error) == (301, "too many redirects (over 10)")
    assert last.redirects == [site.url + hop for hop in hops[:10]]
    assert last.links[0] == [site.url + "/hop/11", "HTTP 301 redirect", last.error]
    assert_counters(crawl, requests=12, responses=12, repeats=0, status_3xx=11)
    assert crawl.failures.count() == 0  # not retried
