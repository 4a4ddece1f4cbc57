"""Validation: real proxies on loopback fetch an echo site; scores, latency, anonymity, state."""

from __future__ import annotations

import threading

import django_rq
import pytest

from proxies import checks, pool, services, validation
from proxies.models import Anonymity, Proxy, ProxyEvent, ProxyState
from proxies.validation import validate_proxies
from tests.support.forward_proxy import ForwardProxy, StallingProxy, refused_port
from tests.support.proxy_checks import add_proxy, echo_handler
from tests.support.sites import Response

pytestmark = pytest.mark.django_db


@pytest.fixture
def echo(make_site, settings):
    site = make_site(echo_handler)
    settings.PROXY_CHECK_URL = site.url + "/proxies/echo"
    # A working proxy answers in milliseconds, but a busy machine took more than 1 s; the
    # tests of a stalling proxy shorten it (STALL_TIMEOUT) so as not to wait this long.
    settings.PROXY_CHECK_TIMEOUT = 5
    return site


STALL_TIMEOUT = 1


@pytest.mark.parametrize(
    ("mode", "anonymity"),
    [("elite", "elite"), ("anonymous", "anonymous"), ("transparent", "transparent")],
)
def test_a_working_proxy_is_admitted_with_its_latency_and_anonymity(echo, mode, anonymity):
    with ForwardProxy(mode=mode, source_ip="127.0.0.2") as fp:
        proxy = add_proxy(fp.url)
        report = validation.run_pass()
    proxy.refresh_from_db()
    assert (report.checked, report.ok, report.admitted) == (1, 1, 1)
    assert proxy.state == ProxyState.ACTIVE
    assert proxy.anonymity == anonymity
    assert proxy.score == 6 and proxy.successes == 1
    assert proxy.latency_ms is not None and proxy.last_validated_at is not None
    assert proxy.key in pool.members()
    assert proxy.events.filter(kind=ProxyEvent.Kind.ADMITTED).exists()
    # The check went through the proxy: the echo site saw the proxy's connection.
    assert echo.log[-1].client in fp.upstream_addresses()


def test_a_proxy_with_credentials_is_checked_with_them(echo):
    with ForwardProxy(auth=("u", "p@ss"), source_ip="127.0.0.2") as fp:
        proxy = add_proxy(fp.url, username="u", password="p@ss")
        validation.run_pass()
        assert fp.refused_auth == 0
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.ACTIVE
    assert pool.acquire(channel="c").url == f"http://u:p%40ss@{fp.address}"


def test_wrong_credentials_fail_the_check_without_removing(echo):
    with ForwardProxy(auth=("u", "right"), source_ip="127.0.0.2") as fp:
        proxy = add_proxy(fp.url, username="u", password="wrong")
        validation.run_pass()
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.NEW
    assert proxy.score == 4 and "HTTP 407" in proxy.last_error


def test_a_refused_connection_removes_the_proxy_at_once(echo):
    proxy = add_proxy(f"http://127.0.0.1:{refused_port()}")
    report = validation.run_pass()
    proxy.refresh_from_db()
    assert report.failed == {"refused": 1} and report.removed == 1
    assert proxy.state == ProxyState.REMOVED
    assert proxy.removed_why == "validation: connection refused"
    assert proxy.events.get(kind=ProxyEvent.Kind.REMOVED).actor == "validator"


@pytest.mark.slow
def test_a_timeout_costs_a_point_and_the_pool_keeps_an_active_proxy(echo, settings):
    settings.PROXY_CHECK_TIMEOUT = STALL_TIMEOUT
    with StallingProxy() as stalling:
        proxy = add_proxy(stalling.url, state=ProxyState.ACTIVE, score=8)
        pool.record_check(proxy=proxy.key, url=proxy.url, ok=True)  # pooled, score 6 in Redis
        report = validation.run_pass()
    proxy.refresh_from_db()
    assert report.failed == {"timeout": 1}
    assert proxy.state == ProxyState.ACTIVE and proxy.score == 5
    assert "no answer" in proxy.last_error
    assert pool.members()[proxy.key]["score"] == 5


@pytest.mark.slow
def test_a_new_proxy_that_keeps_timing_out_is_removed_at_zero(echo, settings):
    settings.PROXY_CHECK_TIMEOUT = STALL_TIMEOUT
    settings.PROXY_VALIDATE_EVERY = 5
    with StallingProxy() as stalling:
        proxy = add_proxy(stalling.url, score=2)
        validation.run_pass()
        proxy.refresh_from_db()
        assert (proxy.state, proxy.score) == (ProxyState.NEW, 1)
        validation.run_pass()
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.REMOVED
    assert proxy.removed_why == "validation: score fell to 0 (timeout)"


def test_a_disabled_proxy_validated_with_all_stays_out_of_the_pools(echo):
    with ForwardProxy(source_ip="127.0.0.2") as fp:
        proxy = add_proxy(fp.url, state=ProxyState.DISABLED)
        assert validation.run_pass().checked == 0
        assert validation.run_pass(everything=True).checked == 1
    proxy.refresh_from_db()
    assert proxy.state == ProxyState.DISABLED and proxy.score == 6
    assert pool.members() == {}


def test_one_validation_pass_at_a_time(echo):
    add_proxy(f"http://127.0.0.1:{refused_port()}")
    with pool.validation_lock(timeout=30) as lock:
        assert lock is not None
        assert validation.run_pass() is None
        assert validate_proxies() == {"skipped": "another validation pass is running"}
    assert validation.run_pass().checked == 1


def test_passes_started_together_on_several_workers_run_one_at_a_time():
    inside, overlaps, entered = [], [], []
    guard = threading.Lock()
    start = threading.Barrier(4)

    def worker() -> None:
        start.wait()
        with pool.validation_lock(timeout=10) as lock:
            if lock is None:
                return
            with guard:
                overlaps.append(len(inside))
                inside.append(1)
                entered.append(1)
            threading.Event().wait(0.3)
            with guard:
                inside.pop()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert entered == [1] and overlaps == [0]


def test_an_admin_removal_during_a_validation_is_not_undone(echo, staff):
    with ForwardProxy(source_ip="127.0.0.2") as fp:
        proxy = add_proxy(fp.url)
        services.remove_proxies(proxies=[proxy], why="bad", user=staff)
        # A check that was already under way finishes after the removal: it cannot admit it.
        score, status = pool.record_check(proxy=proxy.key, url=proxy.url, ok=True)
    assert status == "out" and pool.members() == {}


def test_new_proxies_are_validated_by_a_job_before_they_enter_the_pools(
    echo, django_capture_on_commit_callbacks
):
    with ForwardProxy(source_ip="127.0.0.2") as fp:
        with django_capture_on_commit_callbacks(execute=True):
            report = services.import_proxies(text=fp.address, source="paste")
        assert pool.members() == {}
        queue = django_rq.get_queue("control")
        [job] = queue.get_jobs()
        assert job.func_name == "proxies.validation.validate_proxies"
        assert job.kwargs == {"proxy_ids": [report.added[0].pk]}
        assert validate_proxies(**job.kwargs)["admitted"] == 1
    assert list(pool.members()) == [report.added[0].key]


def test_a_pass_brings_crawl_outcomes_into_the_inventory(echo):
    good = add_proxy("http://10.0.0.1:1", state=ProxyState.ACTIVE)
    bad = add_proxy("http://10.0.0.2:1", state=ProxyState.ACTIVE)
    for p in (good, bad):
        pool.record_check(proxy=p.key, url=p.url, ok=True, latency_ms=50)
    lease = pool.acquire(channel="c")
    other = pool.acquire(channel="c")
    by_key = {good.key: good, bad.key: bad}
    pool.release(lease=lease, latency_ms=42)
    pool.fail(lease=other, reason="refused")
    synced = validation.sync_from_pool()
    assert synced["dropped"] == 1
    kept, dropped = by_key[lease.proxy], by_key[other.proxy]
    kept.refresh_from_db()
    dropped.refresh_from_db()
    assert (kept.successes, kept.latency_ms, kept.score) == (1, 42, 7)
    assert dropped.state == ProxyState.REMOVED and dropped.failures == 1
    assert dropped.removed_why == "connection refused (channel c)"


def test_counting_crawl_outcomes_takes_a_statement_per_distinct_step_not_per_proxy(
    echo, django_assert_max_num_queries
):
    # As many proxies as a channel takes (PROXY_CHANNEL_SIZE, 20), used 2 or 3 times each.
    proxies = [add_proxy(f"http://10.0.1.{n}:1", state=ProxyState.ACTIVE) for n in range(20)]
    for p in proxies:
        pool.record_check(proxy=p.key, url=p.url, ok=True, latency_ms=50)
    for _ in range(50):
        pool.release(lease=pool.acquire(channel="c"), latency_ms=40)
    with django_assert_max_num_queries(8):
        synced = validation.sync_from_pool()
    assert synced["counted"] == 20
    successes = sorted(
        Proxy.objects.filter(pk__in=[p.pk for p in proxies]).values_list("successes", flat=True)
    )
    assert successes == [2] * 10 + [3] * 10


# -- one check, through a real forward proxy ---------------------------------------------------


def test_a_check_through_a_real_proxy_times_it_and_sees_what_the_target_saw(echo, settings):
    with ForwardProxy(mode="transparent", source_ip="127.0.0.2") as fp:
        result = checks.check(
            proxy_url=fp.url, check_url=settings.PROXY_CHECK_URL, timeout=1, own_ip="127.0.0.1"
        )
        [relay] = fp.relays
    assert (result.ok, result.reason, result.error) == (True, "", "")
    assert result.anonymity == Anonymity.TRANSPARENT and 0 < result.latency_ms < 1000
    assert (relay.method, relay.target, relay.status) == ("GET", settings.PROXY_CHECK_URL, 200)
    assert echo.log[-1].headers["User-Agent"] == checks.USER_AGENT
    assert checks.own_address(check_url=settings.PROXY_CHECK_URL, timeout=1) == "127.0.0.1"


def failed_check(proxy_url: str, check_url: str) -> tuple[str, str]:
    result = checks.check(proxy_url=proxy_url, check_url=check_url, timeout=1, own_ip=None)
    assert not result.ok and result.anonymity == ""
    return result.reason, result.error


def test_a_failed_check_says_why(echo, make_site, settings):
    check_url = settings.PROXY_CHECK_URL
    assert failed_check(f"http://127.0.0.1:{refused_port()}", check_url) == (
        "refused",
        "connection refused",
    )
    with StallingProxy() as stalling:
        assert failed_check(stalling.url, check_url) == ("timeout", "no answer within 1 s")
    not_json = make_site(lambda r: Response(body="<p>hello</p>"))
    moved = make_site(lambda r: Response(status=302, headers={"Location": check_url}))
    with ForwardProxy(auth=("u", "right")) as locked, ForwardProxy() as fp:
        assert failed_check(locked.url, check_url) == ("error", "HTTP 407")
        dead_target = f"http://127.0.0.1:{refused_port()}/proxies/echo"
        assert failed_check(fp.url, dead_target) == ("error", "HTTP 502")
        assert failed_check(fp.url, not_json.url + "/") == (
            "error",
            "the check URL did not answer with JSON",
        )
        assert failed_check(fp.url, moved.url + "/") == ("error", "HTTP 302")
    assert echo.log == [], "the redirect to the check URL was not followed"


def test_checks_reach_the_operators_check_url_with_the_private_network_guard_on(echo, settings):
    """PROXY_CHECK_URL is the operator's own setting (by default crawlhub's /proxies/echo on
    loopback): the guard, which refuses loopback to everything else, lets it through."""
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    with ForwardProxy(source_ip="127.0.0.2") as fp:
        proxy = add_proxy(fp.url)
        report = validation.run_pass()
    proxy.refresh_from_db()
    assert (report.checked, report.ok) == (1, 1) and proxy.state == ProxyState.ACTIVE
    assert checks.own_address(check_url=settings.PROXY_CHECK_URL, timeout=1) == "127.0.0.1"


def test_classify_tells_transparent_anonymous_and_elite_apart():
    own = "203.0.113.5"
    assert checks.classify(origin=own, headers={}, own_ip=own) == Anonymity.TRANSPARENT
    xff = {"X-Forwarded-For": "203.0.113.5, 10.0.0.1"}
    assert checks.classify(origin="198.51.100.1", headers=xff, own_ip=own) == "transparent"
    via = {"Via": "1.1 squid"}
    assert checks.classify(origin="198.51.100.1", headers=via, own_ip=own) == "anonymous"
    assert checks.classify(origin="198.51.100.1", headers={}, own_ip=own) == "elite"
    # httpbin-style answers carry every header; only the revealing ones count.
    everything = {"Host": "x", "User-Agent": "y", "Accept": "*/*"}
    assert checks.classify(origin="198.51.100.1", headers=everything, own_ip=own) == "elite"
    assert checks.classify(origin="203.0.113.50", headers={}, own_ip=own) == "elite"


def test_the_echo_endpoint_needs_no_session_and_reveals_only_what_a_check_needs(client):
    response = client.get(
        "/proxies/echo",
        HTTP_VIA="1.1 p",
        HTTP_X_FORWARDED_FOR="1.2.3.4",
        HTTP_COOKIE="a=b",
        HTTP_AUTHORIZATION="Basic eA==",
    )
    assert response.status_code == 200
    assert response.json() == {
        "origin": "127.0.0.1",
        "headers": {"Via": "1.1 p", "X-Forwarded-For": "1.2.3.4"},
    }
    assert client.post("/proxies/echo").status_code == 405
