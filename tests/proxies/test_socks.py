"""SOCKS5 proxies end to end, through a real SOCKS5 server on loopback (tests/support): socks5://
and socks5h:// lines are imported, validated through the SOCKS server, leased by crawls that
fetch every page through it, and shown with their credentials masked."""

from __future__ import annotations

import pytest
from django.urls import reverse

from crawlhub.http import Fetcher
from crawlhub.http.errors import PROXY_AUTH_REFUSED
from crawls import services as crawl_services
from crawls.models import Channel, ProxyUse
from proxies import pool, services, validation
from proxies.models import Proxy, ProxyEvent, ProxyState
from tests.support.crawling import drive
from tests.support.proxy_checks import echo_handler
from tests.support.sites import pages_site
from tests.support.socks_server import SocksServer

pytestmark = pytest.mark.django_db

PAGES = {
    "/": '<title>home</title><a href="/a">a</a> <a href="/b">b</a> <a href="/c">c</a>',
    "/a": '<title>A</title><a href="/b">b</a> <a href="/d">d</a>',
    "/b": "<title>B</title>",
    "/c": '<title>C</title><a href="/">home</a>',
    "/d": "<title>D</title>",
}
EVERY_PAGE = {f"GET {path} HTTP/1.1" for path in PAGES}


@pytest.fixture
def echo(make_site, settings):
    site = make_site(echo_handler)
    settings.PROXY_CHECK_URL = site.url + "/proxies/echo"
    settings.PROXY_CHECK_TIMEOUT = 2
    return site


@pytest.fixture
def channel():
    return Channel.objects.create(slug="socks", name="Socks", proxy_use=ProxyUse.POOL)


def imported(line: str) -> Proxy:
    """The proxy of a one-line list, imported the way every door imports."""
    report = services.import_proxies(text=line + "\n", source="paste", actor="test")
    assert report.errors == [] and len(report.added) == 1, report.as_dict()
    return Proxy.objects.get(pk=report.added[0].pk)


def crawl_through(channel, user, seed: str):
    crawl = crawl_services.crawl_create(
        user=user,
        name="via socks",
        seeds=[seed],
        channel=channel,
        obey_robots=False,
        max_retries=0,
        threads=2,
    )
    crawl_services.crawl_start(crawl=crawl, user=user)
    return drive(crawl)


def test_socks5_and_socks5h_lines_are_imported_with_the_password_masked():
    report = services.import_proxies(
        text="socks5://203.0.113.7:1080\nsocks5h://crawler:p%40ss%20w0rd@proxy.example:1080\n",
        source="paste",
        actor="test",
    )
    assert report.errors == []
    assert [p.masked_url for p in report.added] == [
        "socks5://203.0.113.7:1080",
        "socks5h://crawler:****@proxy.example:1080",
    ]
    socks5h = Proxy.objects.get(scheme="socks5h")
    assert (socks5h.username, socks5h.password) == ("crawler", "p@ss w0rd")
    assert socks5h.url == "socks5h://crawler:p%40ss%20w0rd@proxy.example:1080"


def test_the_proxies_pages_and_the_admin_show_a_socks_proxy_with_its_password_masked(
    staff_client, staff
):
    staff.is_superuser = True
    staff.save()
    proxy = imported("socks5h://crawler:Zq8s0cksW0rd@proxy.example:1080")
    pages = [
        reverse("proxy_list"),
        reverse("proxy_detail", args=[proxy.pk]),
        reverse("admin:proxies_proxy_changelist"),
        reverse("admin:proxies_proxy_change", args=[proxy.pk]),
    ]
    for url in pages:
        content = staff_client.get(url).content.decode()
        assert "socks5h://crawler:****@proxy.example:1080" in content, url
        assert "Zq8s0cksW0rd" not in content, url


def test_a_socks5_proxy_is_validated_through_the_socks_server(echo):
    with SocksServer() as socks:
        proxy = imported(socks.url("socks5"))
        report = validation.run_pass()
    proxy.refresh_from_db()
    assert (report.checked, report.ok, report.admitted) == (1, 1, 1)
    assert proxy.state == ProxyState.ACTIVE and proxy.last_error == ""
    assert proxy.key in pool.members()
    # The check went through the SOCKS server, to the echo site's address.
    [relay] = socks.relays
    assert (relay.kind, relay.target, relay.reply) == ("ipv4", ("127.0.0.1", echo.port), 0)
    assert relay.requests == ["GET /proxies/echo HTTP/1.1"]
    assert echo.log[-1].client == relay.upstream


def test_a_crawl_through_a_socks5_proxy_fetches_every_page_through_it(
    echo, user, channel, make_site
):
    site = make_site(pages_site(PAGES))
    with SocksServer() as socks:
        proxy = imported(socks.url("socks5"))
        validation.run_pass()
        crawl = crawl_through(channel, user, site.url + "/")
    assert crawl.stats["responses"] == len(PAGES)
    assert crawl.stats["errors"] == 0
    relayed = [line for line in socks.requests_relayed() if "/proxies/echo" not in line]
    assert sorted(relayed) == sorted(EVERY_PAGE)  # each page once, each through the proxy
    # Every connection the site saw was one the SOCKS server made.
    assert {request.client for request in site.log} <= {r.upstream for r in socks.relays}
    assert {r.kind for r in socks.relays} == {"ipv4"}  # socks5: names resolved here
    assert set(crawl.pages.values_list("proxy", flat=True)) == {proxy.key}


def test_a_crawl_through_a_socks5h_proxy_with_a_password_lets_the_proxy_resolve_names(
    echo, user, channel, make_site
):
    site = make_site(pages_site(PAGES))
    named = f"http://localhost:{site.port}/"
    with SocksServer(auth=("crawler", "p@ss w0rd")) as socks:
        proxy = imported(f"socks5h://crawler:p%40ss%20w0rd@{socks.address}")
        validation.run_pass()
        proxy.refresh_from_db()
        assert proxy.state == ProxyState.ACTIVE, proxy.last_error
        crawl = crawl_through(channel, user, named)
    assert crawl.stats["responses"] == len(PAGES)
    relayed = [line for line in socks.requests_relayed() if "/proxies/echo" not in line]
    assert sorted(relayed) == sorted(EVERY_PAGE)
    page_relays = [r for r in socks.relays if r.target[1] == site.port]
    # The proxy got the name and resolved it itself; it logged everyone in as the proxy's user.
    assert {(r.kind, r.target) for r in page_relays} == {("domain", ("localhost", site.port))}
    assert {r.user for r in socks.relays} == {"crawler"} and socks.refused_auth == 0
    assert {request.client for request in site.log} <= {r.upstream for r in socks.relays}


def test_a_wrong_socks_password_fails_the_check_and_says_why(echo):
    with SocksServer(auth=("crawler", "right")) as socks:
        proxy = imported(socks.url_with_auth("socks5h", password="wrong"))
        report = validation.run_pass()
    proxy.refresh_from_db()
    assert report.ok == 0 and socks.refused_auth == 1
    assert proxy.state == ProxyState.NEW and proxy.key not in pool.members()
    assert proxy.score == 4 and proxy.failures == 1
    assert proxy.last_error == PROXY_AUTH_REFUSED
    event = proxy.events.get(kind=ProxyEvent.Kind.CHECK_FAILED)
    assert event.detail == f"error: {PROXY_AUTH_REFUSED}"
    assert not any(relay.requests for relay in socks.relays)  # nothing went through


def test_a_dead_socks_proxy_is_removed_at_once(echo):
    with SocksServer() as socks:
        address = socks.address
    proxy = imported(f"socks5://{address}")  # the server is gone: nothing listens there
    validation.run_pass()
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.REMOVED
    assert proxy.removed_why == "validation: connection refused"


def test_the_private_network_guard_checks_the_target_before_the_socks_proxy(settings, make_site):
    """With socks5h the proxy resolves the target's name, but the guard has already resolved
    it here and refused: the SOCKS server is never asked."""
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    site = make_site(pages_site(PAGES))
    with SocksServer() as socks, Fetcher(timeout=2, max_bytes=10_000) as client:
        by_name = client.fetch(f"http://localhost:{site.port}/", proxy=socks.url("socks5h"))
        by_address = client.fetch(site.url + "/", proxy=socks.url("socks5"))
    for result in (by_name, by_address):
        assert result.error_kind == "blocked" and "loopback" in result.error, result.error
    assert socks.relays == [] and site.log == []
