"""Crawling behind a login: a form login (its session shared by every slice, renewed once when
it expires), HTTP basic auth, extra headers and cookies, and where they are never sent (another
host, even through a redirect). Real local sites play the servers; their logs are the proof."""

from __future__ import annotations

import itertools
import threading

import pytest

from crawls import services
from crawls.engine import lifecycle
from crawls.engine.frontier import Frontier
from crawls.engine.jobs import slice_job
from crawls.engine.slices import run_slice
from crawls.models import CrawlEvent, CrawlState
from tests.support.crawling import drive
from tests.support.sites import LoginSite, Response, basic_auth_site, pages_site

PAGES = 30


def tree(pages: int = PAGES) -> dict[str, str]:
    """/home links /p1 .. /p<pages>, and each page links the next two."""
    site = {"/home": "".join(f'<a href="/p{n}">p{n}</a>' for n in range(1, 4))}
    for n in range(1, pages + 1):
        links = [m for m in (2 * n, 2 * n + 1) if m <= pages]
        site[f"/p{n}"] = "".join(f'<a href="/p{m}">p{m}</a>' for m in links)
    return site


def login_auth(site) -> dict:
    return {
        "login_url": site.url + "/login",
        "login_fields": f"username={LoginSite.USER}\npassword={LoginSite.PASSWORD}",
        "login_check_selector": "#logout",
    }


def start(user, site, *, auth: dict, seed: str = "/home", **options):
    options.setdefault("obey_robots", False)
    options.setdefault("threads", 4)
    crawl = services.crawl_create(
        user=user,
        name="behind a login",
        seeds=[site.url + seed],
        auth=auth,
        max_depth=20,
        exclude_patterns=["/logout"],
        **options,
    )
    services.crawl_start(crawl=crawl, user=user)
    return crawl


def statuses(crawl, site) -> dict[str, int]:
    return {p.url.removeprefix(site.url): p.status for p in crawl.pages.all()}


@pytest.mark.django_db
def test_a_site_behind_a_form_login_is_crawled_whole_logging_in_again_when_the_session_expires(
    user, make_site
):
    login = LoginSite(tree(), expire_after=7)
    site = make_site(login)
    crawl = drive(start(user, site, auth=login_auth(site)))
    assert crawl.state == CrawlState.FINISHED, crawl.error
    found = statuses(crawl, site)
    assert found == {path: 200 for path in tree()}, found  # no page left at the login redirect
    assert login.logins >= 3  # 31 pages, a session serves 7: the crawl logged in again
    assert Frontier(crawl.pk).session() == {}  # over: no live session kept in Redis
    # A new login only once a session was used up: never one per worker or thread that saw it.
    assert login.served >= (login.logins - 1) * login.expire_after


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_slices_running_at_once_share_one_session(user, make_site):
    # Two slices at once (two workers): each starts without a session of its own; the first
    # login is shared through Redis and each expiry brings one new login, not one per slice.
    login = LoginSite(tree(60), expire_after=15)
    site = make_site(login)
    crawl = start(user, site, auth=login_auth(site), threads=3)
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            for n in range(30):
                crawl.refresh_from_db()
                if crawl.state != CrawlState.RUNNING:
                    return
                run_slice(crawl.pk, f"{name}-{n}", budget_seconds=3)
                lifecycle.finish_if_done(crawl.pk)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    slices = [threading.Thread(target=work, args=(name,)) for name in ("a", "b")]
    for thread in slices:
        thread.start()
    for thread in slices:
        thread.join(timeout=120)
    assert not errors, errors
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FINISHED, crawl.error
    assert statuses(crawl, site) == {path: 200 for path in tree(60)}
    assert login.served >= (login.logins - 1) * login.expire_after
    assert login.logins >= 2


@pytest.mark.django_db(transaction=True)  # slice_job runs as on a worker: its own transactions
def test_a_login_that_fails_fails_the_crawl_and_says_why(user, make_site):
    login = LoginSite(tree(3))
    site = make_site(login)
    auth = {**login_auth(site), "login_fields": "username=alice\npassword=wrong"}
    crawl = start(user, site, auth=auth)
    assert slice_job(crawl.pk, "first")["reason"] == "cannot start"
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FAILED
    assert "the login step failed" in crawl.error and "'#logout' is not on" in crawl.error
    assert "wrong" not in crawl.error
    assert crawl.pages.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_login_redirected_to_another_host_is_not_followed(user, make_site):
    other = make_site(pages_site({"/welcome": "<p>hi</p>"}))
    away = other.url.replace("127.0.0.1", "localhost") + "/welcome"

    def handler(request):
        if request.path == "/login" and request.method == "POST":
            return Response(status=302, headers={"Location": away, "Set-Cookie": "sid=x"})
        return Response(body='<form method="post"><input type="password" name="pw"></form>')

    site = make_site(handler)
    auth = {"login_url": site.url + "/login", "login_fields": "pw=hunter2"}
    crawl = start(user, site, auth=auth, seed="/")
    assert slice_job(crawl.pk, "first")["reason"] == "cannot start"
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FAILED
    assert "redirected to another host" in crawl.error
    assert other.log == []


@pytest.mark.django_db
def test_a_site_behind_basic_auth_is_crawled_whole(user, make_site):
    site = make_site(basic_auth_site(tree(), user="bob", password="b4sic-PW-987"))
    auth = {"basic_user": "bob", "basic_password": "b4sic-PW-987"}
    crawl = drive(start(user, site, auth=auth))
    assert crawl.state == CrawlState.FINISHED, crawl.error
    assert statuses(crawl, site) == {path: 200 for path in tree()}
    # What the pages recorded as sent: the Authorization header, masked.
    sent = crawl.pages.first().request_headers
    assert sent["Authorization"] == "••••••"


@pytest.mark.django_db
def test_credentials_never_go_to_another_host_not_even_through_a_redirect(user, make_site):
    other = make_site(pages_site({"/moved": "<p>moved</p>", "/linked": "<p>linked</p>"}))
    there = other.url.replace("127.0.0.1", "localhost")
    site = make_site(
        basic_auth_site(
            {
                "/home": f'<a href="/go">go</a><a href="{there}/linked">there</a>',
                "/go": Response(status=302, headers={"Location": there + "/moved"}),
            },
            user="bob",
            password="pw-ZZZ",
        )
    )
    auth = {
        "basic_user": "bob",
        "basic_password": "pw-ZZZ",
        "headers": "X-Token: tok-QQQ",
        "cookie": "sid=cookie-WWW; theme=dark",
    }
    crawl = drive(start(user, site, auth=auth, allowed_domains=["127.0.0.1", "localhost"]))
    assert crawl.state == CrawlState.FINISHED, crawl.error
    assert sorted(r.path for r in other.log) == ["/linked", "/moved"]  # both fetched...
    for request in other.log:  # ... with no credential of the crawl
        names = {name.lower() for name in request.headers}
        assert not names & {"authorization", "cookie", "x-token"}, request.headers
    for request in site.log:
        assert request.headers["X-Token"] == "tok-QQQ"
        assert request.headers["Cookie"] == "sid=cookie-WWW; theme=dark"
    assert statuses(crawl, site) == {
        "/home": 200,
        "/go": 302,
        there + "/linked": 200,
        there + "/moved": 200,
    }


@pytest.mark.django_db
def test_a_login_that_fails_mid_crawl_is_tried_once_and_the_pages_say_why(user, make_site):
    login = LoginSite(tree(12), expire_after=4)

    def handler(request):
        if login.logins:  # the password changed after the first login
            login.PASSWORD = "changed"
        return login(request)

    site = make_site(handler)
    crawl = drive(start(user, site, auth=login_auth(site), threads=2))
    assert crawl.state == CrawlState.FINISHED
    found = statuses(crawl, site)
    assert 1 <= list(found.values()).count(200) <= login.expire_after  # the first session's
    failed = crawl.pages.exclude(error="")
    assert failed.exists()
    for page in failed:
        assert page.error.startswith(
            "the session expired and the login failed: the login did "
            "not succeed: '#logout' is not on"
        )
    # The failure is shared for a while: one failed login, not one per page.
    posts = [r for r in site.log if r.method == "POST"]
    assert len(posts) == 2


@pytest.mark.slow
@pytest.mark.django_db
def test_a_login_renewed_mid_crawl_keeps_the_host_s_delay(user, make_site):
    # Every request the host sees (pages, the login form, its post, the page asked again after
    # the renewal) comes at least the crawl's delay after the one before, judged from its log.
    login = LoginSite(tree(8), expire_after=3)
    site = make_site(login)
    crawl = drive(start(user, site, auth=login_auth(site), host_delay=0.4), timeout=120)
    assert crawl.state == CrawlState.FINISHED, crawl.error
    assert statuses(crawl, site) == {path: 200 for path in tree(8)}
    assert login.logins >= 3  # 9 pages, a session serves 3: renewed mid-crawl
    arrivals = sorted((r.at, r.method, r.path) for r in site.log)
    gaps = [(b[0] - a[0], a[1:], b[1:]) for a, b in itertools.pairwise(arrivals)]
    assert min(gap for gap, _, _ in gaps) >= 0.4 - 0.05, gaps


@pytest.mark.django_db
def test_robots_txt_and_sitemaps_behind_basic_auth_are_read_with_the_crawl_s_credentials(
    user, make_site
):
    # Everything of the site needs the password, robots.txt and the sitemaps included: read
    # without it, robots.txt would be a 401 (allow all: /private crawled) and the sitemaps
    # unread (/hidden, which no page links, never found). A sitemap that redirects to another
    # host is followed there without any credential of the crawl.
    other = make_site(
        pages_site(
            {
                "/moved.xml": Response(
                    body='<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"></urlset>',
                    content_type="application/xml",
                )
            }
        )
    )
    there = other.url.replace("127.0.0.1", "localhost")
    holder = {}

    def handler(request):
        base = holder["url"]
        index = (
            '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<sitemap><loc>{base}/listed.xml</loc></sitemap>"
            f"<sitemap><loc>{base}/away.xml</loc></sitemap></sitemapindex>"
        )
        listed = (
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{base}/hidden</loc></url></urlset>"
        )
        return basic_auth_site(
            {
                "/": '<a href="/private">private</a> <a href="/open">open</a>',
                "/open": "open",
                "/private": "private",
                "/hidden": "only in the sitemap",
                "/robots.txt": Response(
                    body=f"User-agent: *\nDisallow: /private\nSitemap: {base}/index.xml\n",
                    content_type="text/plain",
                ),
                "/index.xml": Response(body=index, content_type="application/xml"),
                "/listed.xml": Response(body=listed, content_type="application/xml"),
                "/away.xml": Response(status=302, headers={"Location": there + "/moved.xml"}),
            },
            user="bob",
            password="rob0ts-PW",
        )(request)

    site = make_site(handler)
    holder["url"] = site.url
    auth = {
        "basic_user": "bob",
        "basic_password": "rob0ts-PW",
        "headers": "X-Token: tok-RRR",
        "cookie": "sid=cookie-SSS",
    }
    crawl = drive(
        start(
            user,
            site,
            auth=auth,
            seed="/",
            obey_robots=True,
            follow_sitemaps=True,
            allowed_domains=["127.0.0.1", "localhost"],
        )
    )
    assert crawl.state == CrawlState.FINISHED, crawl.error
    paths = sorted(site.paths())
    assert "/robots.txt" in paths and "/hidden" in paths and "/listed.xml" in paths
    assert "/private" not in paths  # robots.txt was read, with the password
    for request in site.log:  # every request, robots.txt and sitemaps too, had them all
        assert request.headers["Authorization"].startswith("Basic "), request.path
        assert request.headers["X-Token"] == "tok-RRR"
        assert request.headers["Cookie"] == "sid=cookie-SSS"
    assert [r.path for r in other.log] == ["/moved.xml"]  # followed, and bare
    names = {name.lower() for name in other.log[0].headers}
    assert not names & {"authorization", "cookie", "x-token"}, other.log[0].headers
    sitemap = crawl.pages.get(url=site.url + "/listed.xml")
    assert sitemap.request_headers["Authorization"] == "••••••"
    assert sitemap.request_headers["X-Token"] == "••••••"
    # Every sitemap it could reach was read with them; the site has no /sitemap.xml (a note).
    notes = crawl.events.filter(kind=CrawlEvent.Kind.SITEMAP).exclude(detail__contains="away.xml")
    assert [n.detail for n in notes] == [f"no sitemap at {site.url}/sitemap.xml (404)"]
