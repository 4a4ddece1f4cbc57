"""The proxy pool in Redis: scoring, selection, leases, bans, removal, and crawling through a
real forward proxy on loopback."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import requests

from proxies import pool
from tests.support.forward_proxy import ForwardProxy
from tests.support.sites import Response


def admit(proxy: str, *, latency_ms: float = 100, url: str | None = None) -> None:
    """Put a proxy in the global pool as a fresh validation would (score 5 -> 6)."""
    score, status = pool.record_check(proxy=proxy, url=url or proxy, ok=True, latency_ms=latency_ms)
    assert status == "pool"


def set_score(redis, proxy: str, score: float) -> None:
    redis.zadd(pool.SCORE, {proxy: score})


def age(redis, proxy: str, seconds: float) -> None:
    """Pretend the proxy was last validated `seconds` ago."""
    redis.zadd(pool.CHECKED, {proxy: (time.time() - seconds) * 1000})


def in_global(redis, proxy: str) -> bool:
    return redis.zscore(pool.GLOBAL, proxy) is not None


def test_score_starts_at_5_and_rises_by_one_then_by_shrinking_steps():
    seen = []
    for _ in range(8):
        score, status = pool.record_check(proxy="http://p:1", url="http://p:1", ok=True)
        seen.append(score)
    # 5 -> 6 ... 10 -> 11, then round(10/score, 2): 11 + 0.91, 11.91 + 0.84.
    assert seen == [6, 7, 8, 9, 10, 11, 11.91, 12.75]
    assert status == "pool"


def test_a_timeout_costs_one_point_and_zero_removes(redis):
    admit("http://p:1")  # score 6
    for expected in (5, 4, 3, 2, 1):
        assert pool.record_check(proxy="http://p:1", url="", ok=False, reason="timeout") == (
            expected,
            "pool",
        )
    assert pool.record_check(proxy="http://p:1", url="", ok=False, reason="timeout") == (
        0,
        "removed",
    )
    assert not in_global(redis, "http://p:1")


def test_a_refused_connection_removes_at_once(redis):
    for _ in range(10):
        admit("http://p:1")
    assert pool.record_check(proxy="http://p:1", url="", ok=False, reason="refused")[1] == (
        "removed"
    )
    assert not in_global(redis, "http://p:1")
    assert redis.zscore(pool.SCORE, "http://p:1") is None


def test_a_check_without_admit_scores_but_does_not_pool(redis):
    assert pool.record_check(proxy="http://p:1", url="", ok=True, admit=False) == (6, "out")
    assert not in_global(redis, "http://p:1")


def test_release_records_latency_and_a_success_fail_costs_a_point(redis):
    admit("http://p:1", latency_ms=500)
    lease = pool.acquire(channel="c")
    pool.release(lease=lease, latency_ms=120)
    assert redis.zscore(pool.GLOBAL, "http://p:1") == 120
    assert redis.zscore(pool.SCORE, "http://p:1") == 7
    lease = pool.acquire(channel="c")
    assert pool.fail(lease=lease, reason="timeout") == "kept"
    assert redis.zscore(pool.SCORE, "http://p:1") == 6
    # Still in the channel pool after a timeout: the next acquire gets it again.
    assert pool.acquire(channel="c").proxy == "http://p:1"


def test_failures_in_crawls_remove_and_are_logged_for_the_inventory(redis):
    admit("http://p:1")
    admit("http://p:2")
    lease = pool.acquire(channel="c")
    assert pool.fail(lease=lease, reason="refused") == "removed"
    other = pool.acquire(channel="c")
    pool.release(lease=other, latency_ms=50)
    drained = pool.drain()
    assert drained.successes == {other.proxy: 1}
    assert drained.failures == {lease.proxy: 1}
    assert [(p, why) for p, why, _ in drained.dropped] == [
        (lease.proxy, "connection refused (channel c)")
    ]
    assert pool.drain().dropped == []


def test_acquire_takes_the_least_used_proxy_of_the_channel():
    for p in ("http://a:1", "http://b:1", "http://c:1"):
        admit(p)
    used = []
    for _ in range(6):
        lease = pool.acquire(channel="c")
        used.append(lease.proxy)
        pool.release(lease=lease, latency_ms=10)
    # Each proxy once, then each again: nobody is used twice before the others once.
    assert sorted(used[:3]) == sorted(used[3:]) == ["http://a:1", "http://b:1", "http://c:1"]


def test_the_lease_url_carries_the_credentials_and_the_id_does_not():
    admit("http://p:1", url="http://u:s3cret@p:1")
    lease = pool.acquire(channel="c")
    assert lease == pool.Lease(
        proxy="http://p:1", url="http://u:s3cret@p:1", channel="c", token=lease.token
    )


def test_an_empty_pool_gives_none():
    assert pool.acquire(channel="c") is None
    assert pool.health()["counters"]["empty"] == 1


def test_acquire_or_count_says_how_many_are_leased_when_none_is_free():
    admit("http://a:1")
    admit("http://b:1")
    held = [pool.acquire(channel="c"), pool.acquire(channel="c")]
    assert pool.acquire_or_count(channel="c") == (None, 2)
    pool.release(lease=held[0], latency_ms=1)
    lease, leased = pool.acquire_or_count(channel="c")
    assert (lease.proxy, leased) == (held[0].proxy, 0)
    pool.release(lease=lease, latency_ms=1)
    pool.release(lease=held[1], latency_ms=1)
    pool.remove(proxy="http://a:1")
    pool.remove(proxy="http://b:1")
    assert pool.acquire_or_count(channel="c") == (None, 0)


def test_channels_are_independent_pools():
    admit("http://p:1")
    a = pool.acquire(channel="a")
    b = pool.acquire(channel="b")
    assert a.proxy == b.proxy == "http://p:1"
    assert pool.acquire(channel="a") is None


def test_selection_prefers_the_strict_rule(redis, settings):
    settings.PROXY_CHANNEL_SIZE = 1
    admit("http://strict:1")
    set_score(redis, "http://strict:1", 8)
    admit("http://weak:1")  # score 6: not > 6
    assert pool.acquire(channel="c").proxy == "http://strict:1"
    # Only the strict proxy entered the channel pool: no relaxing was needed.
    assert pool.health()["counters"].get("relaxed", 0) == 0
    # With the strict one leased, the next refill relaxes (and says so) to the weak one.
    assert pool.acquire(channel="c").proxy == "http://weak:1"
    assert pool.health()["counters"]["relaxed"] == 1


def test_selection_relaxes_to_recent_and_fast_then_to_score_and_counts_it(redis, settings):
    settings.PROXY_CHANNEL_SIZE = 10
    settings.PROXY_MAX_LATENCY_MS = 1000
    admit("http://strict:1", latency_ms=100)
    set_score(redis, "http://strict:1", 8)
    admit("http://recent-fast:1", latency_ms=200)  # score 6, fresh, fast
    admit("http://scored-stale:1", latency_ms=300)
    set_score(redis, "http://scored-stale:1", 9)
    age(redis, "http://scored-stale:1", 600)
    admit("http://scored-slow:1", latency_ms=5000)
    set_score(redis, "http://scored-slow:1", 9)
    admit("http://low-stale:1", latency_ms=50)  # score 6, stale: in no tier
    age(redis, "http://low-stale:1", 600)
    admit("http://low-slow:1", latency_ms=4000)  # score 6, slow: in no tier

    got = [pool.acquire(channel="c").proxy for _ in range(4)]
    # Strict first, then recent AND fast, then the union with score (stale or slow but good).
    assert got[:2] == ["http://strict:1", "http://recent-fast:1"]
    assert sorted(got[2:]) == ["http://scored-slow:1", "http://scored-stale:1"]
    assert pool.health()["counters"]["relaxed"] == 1
    assert pool.health()["channels"]["c"]["relaxed"] == 1
    # The low-score stale or slow ones are never chosen.
    assert pool.acquire(channel="c") is None


def test_many_threads_acquiring_at_once_never_share_a_proxy_within_a_channel():
    for i in range(6):
        admit(f"http://p{i}:1")
    holders: dict[str, int] = {}
    lock = threading.Lock()
    clashes, served = [], []
    start = threading.Barrier(16)

    def work(me: int) -> None:
        start.wait()
        for _ in range(60):
            lease = pool.acquire(channel="shared")
            if lease is None:
                continue
            with lock:
                if lease.proxy in holders:
                    clashes.append((lease.proxy, holders[lease.proxy], me))
                holders[lease.proxy] = me
                served.append(lease.proxy)
            time.sleep(0.001)
            with lock:
                del holders[lease.proxy]
            pool.release(lease=lease, latency_ms=5)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clashes == []
    assert len(served) > 100 and len(set(served)) == 6


def test_a_removed_proxy_never_returns_through_a_late_release(redis):
    admit("http://p:1")
    lease = pool.acquire(channel="c")
    pool.remove(proxy="http://p:1")
    pool.release(lease=lease, latency_ms=10)
    assert pool.fail(lease=lease, reason="timeout") == "gone"
    assert not in_global(redis, "http://p:1")
    assert redis.zscore(pool.channel_keys("c").chan, "http://p:1") is None
    assert redis.zscore(pool.SCORE, "http://p:1") is None
    assert pool.acquire(channel="c") is None


def test_remove_takes_a_proxy_out_of_every_pool_at_once(redis):
    admit("http://p:1")
    admit("http://q:1")
    for channel in ("a", "b"):
        pool.release(lease=pool.acquire(channel=channel), latency_ms=1)
    held = pool.acquire(channel="c")
    pool.remove(proxy="http://p:1")
    pool.remove(proxy=held.proxy)
    for channel in ("a", "b", "c"):
        sets = pool.channel_members(channel=channel)
        assert "http://p:1" not in sets["free"] | sets["leased"]
        assert held.proxy not in sets["free"] | sets["leased"]


def test_channel_keys_are_the_keys_the_scripts_write_and_remove_clears(redis):
    # Acquire, release and fail get a channel's keys from channel_keys(); remove builds them
    # from the prefix in Lua. Both must name the same keys, or a removed proxy would linger.
    admit("http://p:1")
    admit("http://q:1")
    keys = pool.channel_keys("c")
    lease = pool.acquire(channel="c")
    assert redis.zscore(keys.lease, lease.proxy) is not None
    assert redis.hget(keys.held, lease.proxy).decode().startswith(lease.token + "|")
    pool.release(lease=lease, latency_ms=1)
    assert redis.zscore(keys.chan, lease.proxy) is not None
    other = pool.acquire(channel="c")
    assert pool.fail(lease=other, reason="ban") == "banned"
    assert redis.zscore(keys.banned, other.proxy) is not None
    pool.remove_many(proxies=["http://p:1", "http://q:1"])
    assert redis.exists(*keys) == 0


def test_an_expired_lease_returns_the_proxy_and_its_holder_cannot_release_it_twice(redis):
    admit("http://p:1")
    crashed = pool.acquire(channel="c", lease_seconds=0.2)
    assert pool.acquire(channel="c") is None
    time.sleep(0.3)
    again = pool.acquire(channel="c", lease_seconds=30)
    assert again.proxy == "http://p:1"
    # The crashed holder's late release does nothing: the new holder keeps it.
    pool.release(lease=crashed, latency_ms=5)
    assert pool.channel_members(channel="c")["leased"] == {"http://p:1"}
    assert pool.acquire(channel="c") is None


def test_reap_returns_expired_leases_of_every_channel():
    admit("http://p:1")
    pool.acquire(channel="a", lease_seconds=0.1)
    pool.acquire(channel="b", lease_seconds=0.1)
    time.sleep(0.2)
    assert pool.reap() == 2
    assert pool.channel_members(channel="a")["free"] == {"http://p:1"}


def test_a_ban_drops_the_proxy_from_that_channel_only(redis, settings):
    admit("http://p:1")
    lease = pool.acquire(channel="strict-site")
    assert pool.fail(lease=lease, reason="ban") == "banned"
    assert pool.acquire(channel="strict-site") is None  # a refill skips it while banned
    assert pool.acquire(channel="other-site").proxy == "http://p:1"
    assert in_global(redis, "http://p:1")
    assert pool.health()["channels"]["strict-site"]["banned"] == 1


def test_a_ban_expires(settings):
    settings.PROXY_BAN_SECONDS = 0.2
    admit("http://p:1")
    pool.fail(lease=pool.acquire(channel="c"), reason="ban")
    assert pool.acquire(channel="c") is None
    time.sleep(0.3)
    assert pool.acquire(channel="c").proxy == "http://p:1"


def test_round_robin_takes_proxies_in_turn_and_sends_a_used_one_to_the_back():
    for p, latency in (("http://a:1", 10), ("http://b:1", 20), ("http://c:1", 30)):
        admit(p, latency_ms=latency)
    order = []
    for _ in range(6):
        lease = pool.acquire(channel="c", strategy="round_robin")
        order.append(lease.proxy[7])
        pool.release(lease=lease, latency_ms=100)
    assert "".join(order) == "abcabc"


def test_greedy_keeps_a_fast_proxy_and_rotates_a_slow_one(settings):
    settings.PROXY_GREEDY_MS = 500
    for p, latency in (("http://a:1", 10), ("http://b:1", 20)):
        admit(p, latency_ms=latency)
    order = []
    for latency in (100, 100, 900, 100, 100):
        lease = pool.acquire(channel="c", strategy="greedy")
        order.append(lease.proxy[7])
        pool.release(lease=lease, latency_ms=latency)
    # a stays while fast; once slow it goes to the back and b takes over.
    assert "".join(order) == "aaabb"
    assert pool.should_keep(latency_ms=100) and not pool.should_keep(latency_ms=900)


def test_unknown_strategy_or_reason_is_refused():
    with pytest.raises(ValueError):
        pool.acquire(channel="c", strategy="random")
    with pytest.raises(ValueError):
        pool.fail(lease=pool.Lease("http://p:1", "http://p:1", "c", "t"), reason="bad")


def test_health_reports_sizes_and_the_strict_count(redis):
    admit("http://a:1", latency_ms=100)
    admit("http://b:1", latency_ms=300)
    set_score(redis, "http://a:1", 9)
    lease = pool.acquire(channel="c")
    snapshot = pool.health()
    assert snapshot["pooled"] == 2
    assert snapshot["selectable"] == 1
    assert snapshot["median_latency_ms"] == 300
    assert snapshot["channels"]["c"]["leased"] == 1
    assert snapshot["counters"]["acquired"] == 1
    pool.release(lease=lease, latency_ms=1)


# Crawling through a real forward proxy ------------------------------------------------------


def test_a_request_through_a_leased_proxy_reaches_the_site_over_the_proxys_connection(make_site):
    site = make_site(lambda request: Response(body="hello"))
    with ForwardProxy(auth=("crawler", "pa:ss"), source_ip="127.0.0.2") as proxy:
        admit(f"http://{proxy.address}", url="http://crawler:pa%3Ass@" + proxy.address)
        lease = pool.acquire(channel="c")
        started = time.monotonic()
        response = requests.get(site.url + "/page", proxies={"http": lease.url}, timeout=5)
        pool.release(lease=lease, latency_ms=(time.monotonic() - started) * 1000)
        assert response.text == "hello"
        seen = site.log[-1]
        assert seen.client[0] == "127.0.0.2"
        assert seen.client in proxy.upstream_addresses()
        assert proxy.refused_auth == 0


def test_the_forward_proxy_refuses_missing_credentials(make_site):
    site = make_site(lambda request: Response(body="hello"))
    with ForwardProxy(auth=("crawler", "secret")) as proxy:
        response = requests.get(site.url, proxies={"http": proxy.url}, timeout=5)
        assert response.status_code == 407
        assert site.log == []


def test_the_forward_proxy_tunnels_connect(make_site):
    site = make_site(lambda request: Response(body="tunnelled"))
    with ForwardProxy(source_ip="127.0.0.2") as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
            sock.sendall(f"CONNECT 127.0.0.1:{site.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
        assert data.endswith(b"tunnelled")
        assert site.log[-1].client in proxy.upstream_addresses()


# Counting relaxing, keeping channels to the rule and their size -------------------------------


def test_polling_a_busy_or_empty_channel_neither_rescans_nor_counts_relaxing(settings):
    settings.PROXY_CHANNEL_SIZE = 2
    assert [pool.acquire_or_count(channel="none") for _ in range(20)] == [(None, 0)] * 20
    assert "refills" not in pool.health()["counters"]
    assert "relaxed" not in pool.health()["counters"]
    admit("http://a:1")  # score 6: the relaxed tier (recent and fast), not the strict one
    admit("http://b:1")
    held = [pool.acquire(channel="c"), pool.acquire(channel="c")]
    counters = pool.health()["counters"]
    assert (counters["refills"], counters["relaxed"]) == (1, 1), counters
    # Both leased, nothing else in the pool: waiting callers poll, and that is not relaxing.
    assert [pool.acquire_or_count(channel="c") for _ in range(20)] == [(None, 2)] * 20
    counters = pool.health()["counters"]
    assert (counters["refills"], counters["relaxed"]) == (1, 1), counters
    for lease in held:
        pool.release(lease=lease, latency_ms=5)


def test_a_member_that_falls_below_the_rule_it_came_in_by_leaves_the_channel(redis, settings):
    settings.PROXY_CHANNEL_SIZE = 2
    for p, latency in (("http://a:1", 10), ("http://b:1", 20)):
        admit(p, latency_ms=latency)
        set_score(redis, p, 8)  # both strict
    pool.release(lease=pool.acquire(channel="c"), latency_ms=10)  # a: used once, b: never
    age(redis, "http://b:1", 600)  # b is no longer validated recently: score alone
    lease = pool.acquire(channel="c")
    # b was next (least used) but came in under the strict rule it no longer meets.
    assert lease.proxy == "http://a:1"
    assert pool.channel_members(channel="c") == {
        "free": set(),
        "leased": {"http://a:1"},
        "banned": set(),
    }
    assert pool.health()["counters"]["evicted"] == 1
    assert in_global(redis, "http://b:1")  # out of the channel only
    assert pool.health()["counters"].get("relaxed", 0) == 0
    # The next acquire tops the channel up; only the relaxed rule lets b in now, and says so.
    pool.release(lease=lease, latency_ms=10)
    pool.acquire(channel="c")
    assert "http://b:1" in pool.channel_members(channel="c")["free"]
    assert pool.health()["counters"]["relaxed"] == 1


def test_a_proxy_admitted_later_joins_a_channel_that_still_has_free_ones(redis, settings):
    settings.PROXY_CHANNEL_SIZE = 3
    admit("http://a:1")
    admit("http://c:1")
    first = pool.acquire(channel="c")
    assert pool.channel_members(channel="c")["free"] == {"http://a:1", "http://c:1"} - {first.proxy}
    admit("http://b:1")
    second = pool.acquire(channel="c")
    assert second.proxy != "http://b:1"  # the least used comes first; b joined after it
    assert pool.channel_members(channel="c")["free"] == {"http://b:1"}
    assert pool.channel_members(channel="c")["leased"] == {first.proxy, second.proxy}


def test_a_full_channel_takes_no_more(settings):
    settings.PROXY_CHANNEL_SIZE = 2
    admit("http://a:1")
    admit("http://b:1")
    pool.release(lease=pool.acquire(channel="c"), latency_ms=5)
    admit("http://late:1")
    for _ in range(4):
        pool.release(lease=pool.acquire(channel="c"), latency_ms=5)
    assert pool.channel_members(channel="c")["free"] == {"http://a:1", "http://b:1"}


def test_acquire_passes_over_excluded_proxies_while_another_is_free():
    admit("http://a:1", latency_ms=10)
    admit("http://b:1", latency_ms=20)
    first = pool.acquire(channel="c", exclude=["http://a:1"])
    assert first.proxy == "http://b:1"  # a was next, but it was tried already
    assert pool.channel_members(channel="c")["free"] == {"http://a:1"}  # and it stays free
    # Only tried ones free: better one of them than none.
    assert pool.acquire(channel="c", exclude=["http://a:1"]).proxy == "http://a:1"
    assert pool.acquire(channel="c", exclude=["http://a:1"]) is None


# keep: the greedy strategy holds a fast proxy for the next request ----------------------------


def test_keep_records_the_success_and_renews_the_lease(redis):
    admit("http://p:1", latency_ms=500)  # score 6
    lease = pool.acquire(channel="c", lease_seconds=0.2)
    assert pool.keep(lease=lease, latency_ms=40, lease_seconds=30)
    assert redis.zscore(pool.GLOBAL, "http://p:1") == 40
    assert redis.zscore(pool.SCORE, "http://p:1") == 7
    time.sleep(0.3)
    assert pool.reap() == 0  # renewed past the 0.2 s it was taken for
    assert pool.keep(lease=lease, latency_ms=None, lease_seconds=30)  # renew only
    assert redis.zscore(pool.SCORE, "http://p:1") == 7
    # Giving it back after keep() does not count that success twice.
    pool.release(lease=lease, latency_ms=40, record=False)
    assert redis.zscore(pool.SCORE, "http://p:1") == 7
    assert pool.channel_members(channel="c")["free"] == {"http://p:1"}
    assert not pool.keep(lease=lease, latency_ms=40, lease_seconds=30)  # no longer held


def test_keep_lets_go_of_a_proxy_that_no_longer_fits_or_was_taken_over(redis):
    admit("http://p:1")
    lease = pool.acquire(channel="c")  # came in as recent and fast
    age(redis, "http://p:1", 600)
    set_score(redis, "http://p:1", 3)
    assert not pool.keep(lease=lease, latency_ms=None, lease_seconds=30)
    assert pool.channel_members(channel="c") == {"free": set(), "leased": set(), "banned": set()}
    admit("http://q:1")
    crashed = pool.acquire(channel="c", lease_seconds=0.1)
    time.sleep(0.2)
    again = pool.acquire(channel="c")
    assert again.proxy == crashed.proxy
    assert not pool.keep(lease=crashed, latency_ms=10, lease_seconds=30)
    assert pool.channel_members(channel="c")["leased"] == {again.proxy}


def test_a_channel_the_pool_cannot_feed_is_not_rescanned_on_every_acquire(redis):
    # In the global pool, but fitting no tier of the rule: low score, validated long ago.
    admit("http://p:1")
    set_score(redis, "http://p:1", 1)
    age(redis, "http://p:1", 3600)

    def scans() -> int:  # ZRANGE of the global pool: run only by a refill or top-up scan
        return int(redis.info("commandstats").get("cmdstat_zrange", {}).get("calls", 0))

    before = scans()
    for _ in range(20):
        assert pool.acquire(channel="c") is None
    assert scans() - before == 1
    # A validation success ends the wait: the proxy fits again and is found at once.
    pool.record_check(proxy="http://p:1", url="http://p:1", ok=True, latency_ms=50)
    set_score(redis, "http://p:1", 8)
    assert pool.acquire(channel="c").proxy == "http://p:1"
