"""Crawls in a channel with proxies on go through the pool's proxies."""

import pytest

from crawls import services
from crawls.models import Channel, ProxyUse
from proxies import pool
from tests.crawling import drive
from tests.forward_proxy import ForwardProxy, refused_port
from tests.sites import Response, pages_site

pytestmark = pytest.mark.django_db


def admit(proxy_url: str) -> str:
    proxy_id = proxy_url.split("@")[-1] if "@" in proxy_url else proxy_url
    proxy_id = proxy_id if "://" in proxy_id else "http://" + proxy_id
    score, status = pool.record_check(proxy=proxy_id, url=proxy_url, ok=True, latency_ms=50)
    assert status == "pool"
    return proxy_id


@pytest.fixture
def channel():
    return Channel.objects.create(slug="shop", name="Shop", proxy_use=ProxyUse.POOL)


@pytest.fixture
def forward_proxy():
    with ForwardProxy() as proxy:
        yield proxy


def crawl_in(channel, user, site, **options):
    crawl = services.crawl_create(
        user=user, name="via proxy", seeds=[site.url + "/"], channel=channel,
        obey_robots=False, **options,
    )  # fmt: skip
    services.crawl_start(crawl=crawl, user=user)
    return drive(crawl)


def test_a_crawl_through_the_pool_reaches_the_site_over_the_proxy(
    user, channel, forward_proxy, make_site
):
    site = make_site(pages_site({"/": '<a href="/a">a</a>', "/a": "<title>A</title>"}))
    admit(forward_proxy.url)
    crawl = crawl_in(channel, user, site)
    assert crawl.stats["responses"] == 2
    relayed = {relay.target for relay in forward_proxy.relays}
    assert relayed == {site.url + "/", site.url + "/a"}
    # The site saw the proxy's own connections, not ours.
    proxy_ends = {relay.upstream[1] for relay in forward_proxy.relays}
    assert {request.client[1] for request in site.log} <= proxy_ends


def test_a_dead_proxy_is_dropped_and_the_page_goes_through_another(
    user, channel, forward_proxy, make_site
):
    # Least-used rotation: with several pages, both proxies are picked at some point.
    links = "".join(f'<a href="/p{n}">p</a>' for n in range(6))
    site = make_site(pages_site({"/": links, **{f"/p{n}": "<p>x</p>" for n in range(6)}}))
    dead = admit(f"http://127.0.0.1:{refused_port()}")
    admit(forward_proxy.url)
    crawl = crawl_in(channel, user, site, max_retries=0, threads=1)
    assert crawl.stats["responses"] == 7
    assert crawl.stats["retries"] == 0  # the page's own retries were not used
    assert dead not in pool.members()


def test_a_ban_drops_the_proxy_from_the_channel_and_another_fetches_the_page(
    user, channel, make_site
):
    with ForwardProxy() as banned_proxy, ForwardProxy() as good_proxy:
        banned_id = admit(banned_proxy.url)
        good_id = admit(good_proxy.url)
        banned_port = None

        def handler(request):
            # The site bans whichever proxy connects first.
            nonlocal banned_port
            via = next(r for r in [*banned_proxy.relays, *good_proxy.relays]
                       if r.upstream[1] == request.client[1])  # fmt: skip
            if banned_port is None:
                banned_port = via
            if via is banned_port:
                return Response(status=403, body="banned")
            return pages_site({"/": "<title>home</title>"})(request)

        site = make_site(handler)
        crawl = crawl_in(channel, user, site, max_retries=0)
    assert crawl.stats["responses"] == 1
    assert crawl.stats["status_2xx"] == 1
    members = pool.channel_members(channel="shop")
    banned = banned_id if banned_port in banned_proxy.relays else good_id
    kept = good_id if banned == banned_id else banned_id
    assert members["banned"] == {banned}
    assert banned not in members["free"]
    assert kept in members["free"]
    assert banned in pool.members()  # banned on this channel only, still in the global pool


def test_no_usable_proxy_is_a_clear_retryable_error(user, channel, make_site):
    site = make_site(pages_site({"/": "<title>home</title>"}))
    crawl = crawl_in(channel, user, site, max_retries=0)
    failure = crawl.failures.get()
    assert failure.last_error == "no usable proxy in channel 'shop'"
    assert site.log == []


def test_more_threads_than_proxies_wait_their_turn_instead_of_failing(
    user, channel, forward_proxy, make_site
):
    links = "".join(f'<a href="/p{n}">p</a>' for n in range(30))
    pages = {"/": links, **{f"/p{n}": Response(body="<p>x</p>", delay=0.05) for n in range(30)}}
    site = make_site(pages_site(pages))
    admit(forward_proxy.url)  # one proxy for eight fetching threads
    crawl = crawl_in(channel, user, site, max_retries=0, threads=8)
    assert crawl.stats["responses"] == 31
    assert crawl.stats["errors"] == crawl.stats["retries"] == 0
    assert len(forward_proxy.relays) == 31
