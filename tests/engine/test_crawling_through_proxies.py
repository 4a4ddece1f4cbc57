"""Crawls in a channel with proxies on go through the pool's proxies."""

import pytest

from crawls import services
from crawls.models import Channel, ProxyStrategy, ProxyUse
from proxies import pool
from tests.support.crawling import drive
from tests.support.forward_proxy import ForwardProxy, StallingProxy, refused_port
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db


def admit(proxy_url: str, *, latency_ms: float = 50) -> str:
    proxy_id = proxy_url.split("@")[-1] if "@" in proxy_url else proxy_url
    proxy_id = proxy_id if "://" in proxy_id else "http://" + proxy_id
    score, status = pool.record_check(proxy=proxy_id, url=proxy_url, ok=True, latency_ms=latency_ms)
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
        user=user,
        name="via proxy",
        seeds=[site.url + "/"],
        channel=channel,
        obey_robots=False,
        **options,
    )
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
            via = next(
                r
                for r in [*banned_proxy.relays, *good_proxy.relays]
                if r.upstream[1] == request.client[1]
            )
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


@pytest.mark.slow
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


def test_greedy_keeps_a_fast_proxy_for_the_next_pages_and_gives_it_back_at_the_end(
    user, channel, make_site, settings
):
    settings.PROXY_GREEDY_MS = 5000  # every page on loopback is fast
    channel.proxy_strategy = ProxyStrategy.GREEDY
    channel.save()
    links = "".join(f'<a href="/p{n}">p</a>' for n in range(8))
    site = make_site(pages_site({"/": links, **{f"/p{n}": "<p>x</p>" for n in range(8)}}))
    with ForwardProxy() as first, ForwardProxy() as second:
        admit(first.url)
        admit(second.url)
        crawl = crawl_in(channel, user, site, max_retries=0, threads=1)
    assert crawl.stats["responses"] == 9
    counters = pool.health()["counters"]
    # One lease, renewed page after page (a slice kept idle a moment may give it back once).
    assert counters["acquired"] <= 2 and counters["kept"] >= 7, counters
    assert len(first.relays) == 9 or len(second.relays) == 9, (first.relays, second.relays)
    members = pool.channel_members(channel="shop")
    assert members["leased"] == set(), f"still leased after the crawl: {members['leased']}"
    assert len(members["free"]) == 2


def test_greedy_gives_back_a_slow_proxy_after_each_page(
    user, channel, forward_proxy, make_site, settings
):
    settings.PROXY_GREEDY_MS = 1  # no page is that fast
    channel.proxy_strategy = ProxyStrategy.GREEDY
    channel.save()
    site = make_site(pages_site({"/": '<a href="/a">a</a>', "/a": Response(body="a", delay=0.01)}))
    admit(forward_proxy.url)
    crawl_in(channel, user, site, max_retries=0, threads=1)
    counters = pool.health()["counters"]
    assert (counters["acquired"], counters.get("kept", 0)) == (2, 0), counters
    assert pool.channel_members(channel="shop")["leased"] == set()


def test_a_page_retried_after_a_proxy_timeout_goes_through_a_proxy_not_yet_tried(
    user, channel, forward_proxy, make_site
):
    site = make_site(pages_site({"/": "<title>home</title>"}))
    with StallingProxy() as stalling:
        stalling_id = admit(stalling.url, latency_ms=10)  # the fastest, so the first taken
        good_id = admit(forward_proxy.url, latency_ms=50)
        # Make the stalling proxy the least used by far: a timeout puts it back with one use
        # more, and it would still come before the good one on the page's next two tries.
        first = pool.acquire(channel="shop")
        assert first.proxy == stalling_id
        for _ in range(3):
            good = pool.acquire(channel="shop")
            assert good.proxy == good_id
            pool.release(lease=good, latency_ms=50)
        pool.release(lease=first, latency_ms=50)
        crawl = crawl_in(channel, user, site, max_retries=0, threads=1, timeout=0.5)
        tried_stalling = len(stalling.accepted)
    assert crawl.stats["responses"] == 1 and crawl.stats["status_2xx"] == 1, crawl.stats
    assert crawl.stats["retries"] == crawl.stats["errors"] == 0, crawl.stats
    assert tried_stalling == 1, f"the stalling proxy was tried {tried_stalling} times"
    assert [relay.target for relay in forward_proxy.relays] == [site.url + "/"]


def test_the_ban_statuses_setting_decides_what_a_ban_is(user, channel, make_site, settings):
    settings.PROXY_BAN_STATUSES = [418]
    with ForwardProxy() as one, ForwardProxy() as other:
        ids = {admit(one.url): one, admit(other.url): other}
        first_port = None

        def handler(request):
            # The site answers 418 through whichever proxy connects first, 403 on /forbidden.
            nonlocal first_port
            via = next(
                r for r in [*one.relays, *other.relays] if r.upstream[1] == request.client[1]
            )
            first_port = first_port or via
            if via is first_port:
                return Response(status=418, body="I'm a teapot")
            if request.path == "/forbidden":
                return Response(status=403, body="no")
            return pages_site({"/": '<a href="/forbidden">f</a>'})(request)

        site = make_site(handler)
        crawl = crawl_in(channel, user, site, max_retries=0, threads=1)
        banned = {p for p, proxy in ids.items() if first_port in proxy.relays}
    assert crawl.stats["status_2xx"] == 1, crawl.stats
    # 403 is no ban under this setting: the page is recorded as the site answered it.
    assert crawl.stats["status_4xx"] == 1 and crawl.stats["responses"] == 2, crawl.stats
    assert pool.channel_members(channel="shop")["banned"] == banned
