"""The crawl frontier in Redis: dedup, order, politeness, leases, counters, their invariant."""

from __future__ import annotations

import random
import threading
import time

import pytest

from crawls.engine.frontier import Frontier, supervisor_lock
from crawls.engine.request import (
    FINGERPRINT_VERSION,
    VIA_REDIRECT,
    Outcome,
    Request,
    canonicalize,
    fingerprint,
)

# No database here: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


def assert_invariant(stats: dict[str, int]) -> None:
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"] + stats["cancelled"]
    assert stats["requests"] == stats["responses"] + stats["errors"] + unfinished, stats


def urls(host: str, count: int) -> list[str]:
    return [f"http://{host}/page/{i}" for i in range(count)]


def done(request: Request, status: int | None = 200, **kwargs) -> Outcome:
    return Outcome(request=request, kind="done", status=status, **kwargs)


def claim_all(crawl: Frontier, n: int = 100) -> list[Request]:
    return crawl.claim(n, lease_seconds=30)


# Canonical URLs and fingerprints


def test_fragment_query_order_and_escapes_give_one_fingerprint():
    same = [
        "http://example.com/a b?y=2&x=1",
        "http://example.com/a%20b?x=1&y=2#section",
        "HTTP://EXAMPLE.com/a%20b?x=1&y=2",
    ]
    assert len({canonicalize(url) for url in same}) == 1
    assert len({fingerprint(url) for url in same}) == 1
    assert fingerprint("http://example.com/%7Euser") == fingerprint("http://example.com/%7euser")


def test_different_path_method_or_body_gives_another_fingerprint():
    url = "http://example.com/a"
    others = {
        fingerprint("http://example.com/b"),
        fingerprint(url, method="POST"),
        fingerprint(url, method="POST", body=b"q=1"),
    }
    assert fingerprint(url) not in others and len(others) == 3


def test_fingerprint_is_a_signed_64_bit_int_of_version_1():
    fps = [fingerprint(url) for url in urls("example.com", 200)]
    assert FINGERPRINT_VERSION == 1
    assert all(-(2**63) <= fp < 2**63 for fp in fps)
    assert any(fp < 0 for fp in fps) and any(fp > 0 for fp in fps)


def test_a_packed_request_is_compact_deterministic_and_round_trips():
    request = Request(
        "http://Example.com:8080/x?b=1", depth=2, referrer="http://e.com/", priority=3
    )
    raw = request.pack()
    assert raw == Request(request.url, 2, "http://e.com/", 0, 3).pack()
    assert (
        raw == f"{request.fp}\nexample.com:8080\nhttp://Example.com:8080/x?b=1\n2\n3\nhttp://e.com/"
    )
    link = Request("http://e.com/a/b", depth=1, referrer="http://e.com/a")
    assert link.pack() == f"{link.fp}\n\nhttp://e.com/a/b\n1\n\n/a"
    back = Request.unpack(raw.encode())
    assert back == request
    assert (back.fp, back.host) == (request.fp, "example.com:8080")
    assert Request("http://EXAMPLE.com/").host == "example.com"


# Seeds and dedup


def test_seeds_are_deduplicated_and_repeats_counted(frontier):
    assert frontier.add_seeds(["http://a.test/", "http://a.test/#top", "http://b.test/"]) == (2, 1)
    assert frontier.add_seeds(["http://b.test/", "http://c.test/"]) == (1, 1)
    stats = frontier.stats()
    assert (stats["requests"], stats["repeats"], stats["queued"]) == (3, 2, 3)
    assert_invariant(stats)


def test_seen_fingerprints_are_stored_in_compact_intsets(frontier, redis):
    frontier.add_seeds(urls("a.test", 2000))
    buckets = list(redis.scan_iter(match=frontier.key("seen:*")))
    assert sum(redis.scard(key) for key in buckets) == 2000
    assert {redis.object("encoding", key) for key in buckets} == {b"intset"}


# Claim order and state


def test_claim_order_is_priority_then_breadth_first_then_discovery(frontier):
    frontier.add_seeds(["http://a.test/1", "http://a.test/2"])
    [first] = frontier.claim(1, lease_seconds=30)
    frontier.complete([done(first, links=["http://a.test/deep1", "http://a.test/deep2"])])
    frontier.add_seeds(["http://a.test/late-seed"])
    frontier.add_seeds(["http://a.test/urgent"], priority=5)
    order = [request.url for request in claim_all(frontier)]
    assert order == [
        "http://a.test/urgent",
        "http://a.test/2",
        "http://a.test/late-seed",
        "http://a.test/deep1",
        "http://a.test/deep2",
    ]


def test_links_inherit_priority_and_get_parent_depth_plus_one(frontier):
    frontier.add_seeds(["http://a.test/"], depth=2, priority=7)
    [page] = claim_all(frontier)
    frontier.complete([done(page, links=["http://a.test/child"])])
    [child] = claim_all(frontier)
    assert (child.depth, child.priority, child.referrer) == (3, 7, "http://a.test/")


def redirected(request: Request, target: str, status: int = 301) -> Outcome:
    return done(request, status, links=[target], links_via=VIA_REDIRECT)


def test_a_redirect_target_keeps_its_depth_and_carries_the_chain(frontier):
    frontier.configure(max_pages=100, max_depth=2, host_delay=0)
    frontier.add_seeds(["http://a.test/"], depth=2, priority=7)
    [old] = claim_all(frontier)
    frontier.complete([redirected(old, "http://a.test/mid")])
    [mid] = claim_all(frontier)
    assert (mid.depth, mid.priority, mid.referrer) == (2, 7, "http://a.test/")
    assert (mid.via, mid.redirects) == (VIA_REDIRECT, ("http://a.test/",))
    frontier.complete([redirected(mid, "http://a.test/new", 302)])
    [new] = claim_all(frontier)  # at max_depth, and still admitted: a redirect is no step
    assert (new.depth, new.redirects) == (2, ("http://a.test/", "http://a.test/mid"))
    frontier.complete([done(new, links=["http://a.test/deeper"])])
    stats = frontier.stats()
    assert (stats["requests"], stats["status_3xx"], stats["dropped"]) == (3, 2, 1)
    assert_invariant(stats)


def test_a_redirect_to_a_url_already_seen_is_a_repeat(frontier):
    frontier.add_seeds(["http://a.test/old", "http://a.test/new"])
    old, new = claim_all(frontier)
    frontier.complete([redirected(old, "http://a.test/new#x"), done(new)])
    stats = frontier.stats()
    assert (stats["requests"], stats["repeats"], stats["responses"], stats["queued"]) == (
        2,
        1,
        2,
        0,
    )
    assert_invariant(stats)
    assert frontier.is_done()


def test_claimed_requests_are_backed_up_with_a_lease(frontier, redis):
    frontier.add_seeds(["http://a.test/"])
    before_ms = time.time() * 1000
    [request] = frontier.claim(1, lease_seconds=60)
    assert Request.unpack(redis.hget(frontier.key("backup"), request.fp)) == request
    deadline = redis.zscore(frontier.key("leases"), request.fp)
    assert before_ms + 59_000 < deadline < before_ms + 61_000
    assert frontier.stats()["in_flight"] == 1


# Politeness


@pytest.mark.slow
def test_host_delay_gives_one_request_per_host_per_delay(frontier):
    frontier.configure(max_pages=100, max_depth=5, host_delay=1.0)
    frontier.add_seeds(urls("a.test", 3) + urls("b.test", 3))
    first = claim_all(frontier)
    assert sorted(request.host for request in first) == ["a.test", "b.test"]
    for request in first:
        assert frontier.send(request) == 1.0
        frontier.answered(request)
    assert claim_all(frontier) == []
    frontier.add_seeds(["http://c.test/"])
    assert [request.host for request in claim_all(frontier)] == ["c.test"]
    time.sleep(1.05)
    assert sorted(request.url for request in claim_all(frontier)) == [
        "http://a.test/page/1",
        "http://b.test/page/1",
    ]
    assert frontier.stats()["queued"] == 2


@pytest.mark.slow
def test_the_delay_runs_from_when_a_request_is_sent_and_answered_not_claimed(frontier):
    frontier.configure(max_pages=100, max_depth=5, host_delay=0.5)
    frontier.add_seeds(urls("a.test", 3))
    [first] = claim_all(frontier)
    # Claimed, not sent: the host is reserved however long the request waits in its worker.
    time.sleep(0.6)
    assert claim_all(frontier) == []
    assert frontier.send(first) == 0.5
    # Sent and not answered, for longer than the delay: still reserved.
    time.sleep(0.6)
    assert claim_all(frontier) == []
    frontier.answered(first)
    assert claim_all(frontier) == []
    time.sleep(0.55)
    [second] = claim_all(frontier)
    # A request that goes back unsent frees its host at once: nothing reached the host.
    assert frontier.release([second]) == 1
    [third] = claim_all(frontier)
    assert third.url == "http://a.test/page/2"  # the released one went behind its peer
    # So does one completed without being sent (blocked by the guard or robots.txt).
    frontier.complete([Outcome(request=third, kind="done")])
    assert [r.url for r in claim_all(frontier)] == [second.url]


def test_host_delay_override_for_one_host(frontier):
    frontier.add_seeds(urls("slow.test", 3) + urls("fast.test", 3))
    frontier.set_host_delay("SLOW.test", 30)
    hosts = [request.host for request in claim_all(frontier)]
    assert sorted(hosts) == ["fast.test"] * 3 + ["slow.test"]
    assert claim_all(frontier) == []


def test_hosts_take_turns_in_the_queue(frontier):
    frontier.add_seeds(urls("a.test", 3))
    frontier.add_seeds(urls("b.test", 3))
    turns = [(r.host, r.url[-1]) for r in claim_all(frontier)]
    # Each host's first, then each one's second...; in its host, discovery order.
    assert sorted(turns[:2]) == [("a.test", "0"), ("b.test", "0")]
    assert sorted(turns[2:4]) == [("a.test", "1"), ("b.test", "1")]
    assert sorted(turns[4:]) == [("a.test", "2"), ("b.test", "2")]


def test_claim_scans_a_bounded_window(frontier):
    frontier.configure(max_pages=100, max_depth=5, host_delay=30)
    frontier.add_seeds(urls("a.test", 50))
    frontier.add_seeds(["http://b.test/"], depth=1)  # behind every a.test request
    assert [r.url for r in frontier.claim(1, lease_seconds=30)] == ["http://a.test/page/0"]
    # 10 entries scanned, all for a.test: b.test (50th) is not reached.
    assert frontier.claim(1, lease_seconds=30) == []
    # 50 entries scanned: b.test is the 50th of what is left.
    assert [r.url for r in frontier.claim(5, lease_seconds=30)] == ["http://b.test/"]


# Completion and counters


def test_complete_counts_exactly(frontier):
    frontier.add_seeds(urls("a.test", 7))
    r = claim_all(frontier)
    frontier.complete(
        [
            done(r[0], 200, nbytes=1000),
            done(r[1], 204, nbytes=0),
            done(r[2], 301, nbytes=10),
            done(r[3], 404, nbytes=100),
            done(r[4], 503, nbytes=5),
            done(r[5], None),
            Outcome(r[6], "failed"),
        ]
    )
    stats = frontier.stats()
    expected = {
        "requests": 7,
        "responses": 5,
        "errors": 2,
        "failed": 1,
        "retries": 0,
        "bytes": 1115,
        "status_2xx": 2,
        "status_3xx": 1,
        "status_4xx": 1,
        "status_5xx": 1,
        "queued": 0,
        "delayed": 0,
        "in_flight": 0,
        "repeats": 0,
        "dropped": 0,
    }
    assert {name: stats[name] for name in expected} == expected
    assert_invariant(stats)
    assert frontier.is_done()


def test_link_twice_on_one_page_counts_one_request_and_one_repeat(frontier):
    frontier.add_seeds(["http://a.test/"])
    [page] = claim_all(frontier)
    links = ["http://a.test/x", "http://a.test/x#again", "http://a.test/"]
    frontier.complete([done(page, links=links)])
    stats = frontier.stats()
    assert (stats["requests"], stats["repeats"], stats["queued"]) == (2, 2, 1)
    assert_invariant(stats)


def test_max_pages_drops_links_without_marking_them_seen(frontier):
    frontier.configure(max_pages=3, max_depth=5, host_delay=0)
    seeds = ["http://a.test/", "http://a.test/seed2", "http://a.test/s3"]
    assert frontier.add_seeds(seeds) == (3, 0)
    assert frontier.add_seeds(["http://a.test/s4", "http://a.test/"]) == (0, 1)
    page = claim_all(frontier)[0]
    frontier.complete([done(page, links=["http://a.test/l1", "http://a.test/seed2"])])
    stats = frontier.stats()
    assert (stats["requests"], stats["dropped"], stats["repeats"]) == (3, 2, 2)
    frontier.configure(max_pages=10, max_depth=5, host_delay=0)
    assert frontier.add_seeds(["http://a.test/s4"]) == (1, 0)
    page = claim_all(frontier)[0]
    frontier.complete([done(page, links=["http://a.test/l1"])])
    stats = frontier.stats()
    assert (stats["requests"], stats["dropped"], stats["repeats"]) == (5, 2, 2)
    assert_invariant(stats)


def test_max_depth_drops_links_without_marking_them_seen(frontier):
    frontier.configure(max_pages=100, max_depth=1, host_delay=0)
    frontier.add_seeds(["http://a.test/"])
    [seed] = claim_all(frontier)
    frontier.complete([done(seed, links=["http://a.test/d1"])])
    [page] = claim_all(frontier)
    assert page.depth == 1
    frontier.complete([done(page, links=["http://a.test/d2", "http://a.test/d2b"])])
    stats = frontier.stats()
    assert (stats["requests"], stats["dropped"], stats["queued"]) == (2, 2, 0)
    frontier.configure(max_pages=100, max_depth=2, host_delay=0)
    frontier.add_seeds(["http://a.test/other"], depth=1)
    [other] = claim_all(frontier)
    frontier.complete([done(other, links=["http://a.test/d2"])])
    assert [r.url for r in claim_all(frontier)] == ["http://a.test/d2"]
    assert_invariant(frontier.stats())


def test_retry_waits_in_delayed_then_returns_without_dedup(frontier):
    frontier.add_seeds(["http://a.test/"])
    [request] = claim_all(frontier)
    frontier.complete([Outcome(request, "retry", status=503, nbytes=7, retry_delay=0.3)])
    stats = frontier.stats()
    assert (stats["delayed"], stats["retries"], stats["in_flight"], stats["bytes"]) == (1, 1, 0, 7)
    assert_invariant(stats)
    assert claim_all(frontier) == []
    time.sleep(0.35)
    [again] = claim_all(frontier)
    assert (again.url, again.attempts) == (request.url, 1)
    frontier.complete([done(again)])
    stats = frontier.stats()
    assert (stats["requests"], stats["responses"], stats["repeats"]) == (1, 1, 0)
    assert_invariant(stats)


def test_stale_completion_is_ignored(frontier):
    frontier.add_seeds(["http://a.test/"])
    [request] = frontier.claim(1, lease_seconds=0.2)
    time.sleep(0.3)
    assert frontier.requeue_expired() == 1
    frontier.complete([done(request, links=["http://a.test/new"])])
    assert frontier.stats()["responses"] == 0 and frontier.stats()["requests"] == 1
    [again] = claim_all(frontier)
    frontier.complete([done(again)])
    frontier.complete([done(again), Outcome(again, "failed")])
    stats = frontier.stats()
    assert (stats["responses"], stats["errors"], stats["requests"]) == (1, 0, 1)
    assert_invariant(stats)


def test_unknown_outcome_kind_is_refused(frontier):
    frontier.add_seeds(["http://a.test/"])
    [request] = claim_all(frontier)
    with pytest.raises(ValueError):
        frontier.complete([Outcome(request, "skipped")])


# Handing requests back


def test_release_returns_claimed_requests_to_the_queue(frontier):
    frontier.add_seeds(["http://a.test/1", "http://a.test/2"], priority=1)
    frontier.add_seeds(["http://a.test/low"])
    held = frontier.claim(1, lease_seconds=30)
    before = frontier.stats()
    assert frontier.release(held) == 1
    assert frontier.release(held) == 0
    after = frontier.stats()
    assert (after["queued"], after["in_flight"]) == (3, 0)
    assert {k: v for k, v in after.items() if k not in ("queued", "in_flight")} == {
        k: v for k, v in before.items() if k not in ("queued", "in_flight")
    }
    order = [r.url for r in claim_all(frontier)]
    assert order == ["http://a.test/2", "http://a.test/1", "http://a.test/low"]


def test_requeue_expired_after_lease_expiry(frontier):
    frontier.add_seeds(urls("a.test", 3))
    short = frontier.claim(2, lease_seconds=0.5)
    [long] = frontier.claim(1, lease_seconds=30)
    assert frontier.requeue_expired() == 0
    time.sleep(0.6)
    assert frontier.requeue_expired() == 2
    stats = frontier.stats()
    assert (stats["queued"], stats["in_flight"], stats["requests"]) == (2, 1, 3)
    assert stats["recovered"] == 2
    assert sorted(r.url for r in claim_all(frontier)) == sorted(r.url for r in short)
    frontier.complete([done(long)])
    assert_invariant(frontier.stats())


def test_retry_failed_requeues_without_dedup_and_fixes_counters(frontier):
    frontier.add_seeds(urls("a.test", 2))
    requests = claim_all(frontier)
    frontier.complete([Outcome(request, "failed") for request in requests])
    assert frontier.stats()["failed"] == 2
    assert frontier.retry_failed(requests + requests) == 2
    stats = frontier.stats()
    assert (stats["failed"], stats["errors"], stats["queued"]) == (0, 0, 2)
    assert_invariant(stats)
    assert {r.attempts for r in claim_all(frontier)} == {0}
    assert frontier.retry_failed(requests) == 0


def test_is_done_only_when_nothing_is_queued_delayed_or_claimed(frontier):
    assert frontier.is_done()
    frontier.add_seeds(["http://a.test/"])
    assert not frontier.is_done()
    [request] = claim_all(frontier)
    assert not frontier.is_done()
    frontier.complete([Outcome(request, "retry", retry_delay=60)])
    assert not frontier.is_done()


# The invariant, concurrency and isolation


def test_invariant_holds_through_random_operations(frontier):
    rng = random.Random(20240607)
    universe = [f"http://h{i % 5}.test/p/{i}" for i in range(400)]
    held: list[Request] = []
    failed: list[Request] = []
    for _ in range(400):
        op = rng.choice(
            ["seed", "claim", "claim", "complete", "complete", "release", "expire", "retry_failed"]
        )
        if op == "seed":
            frontier.add_seeds(rng.sample(universe, rng.randint(1, 5)))
        elif op == "claim":
            held += frontier.claim(rng.randint(1, 8), lease_seconds=30)
        elif op == "expire":
            frontier.claim(rng.randint(1, 3), lease_seconds=0)  # leases due at once
            held += frontier.claim(1, lease_seconds=30)
            frontier.requeue_expired()
        elif op == "release" and held:
            frontier.release(pop_some(rng, held))
        elif op == "retry_failed" and failed:
            frontier.retry_failed(pop_some(rng, failed))
        elif op == "complete" and held:
            outcomes = [random_outcome(rng, request, universe) for request in pop_some(rng, held)]
            failed += [outcome.request for outcome in outcomes if outcome.kind == "failed"]
            frontier.complete(outcomes)
        assert_invariant(frontier.stats())
    stats = frontier.stats()
    assert stats["responses"] > 50 and stats["retries"] > 5 and stats["repeats"] > 50


def pop_some(rng: random.Random, items: list[Request]) -> list[Request]:
    chosen = rng.sample(items, rng.randint(1, len(items)))
    for item in chosen:
        items.remove(item)
    return chosen


def random_outcome(rng: random.Random, request: Request, universe: list[str]) -> Outcome:
    kind = rng.choice(["done", "done", "done", "retry", "failed"])
    status = rng.choice([200, 200, 301, 404, 500, None])
    links = rng.sample(universe, rng.randint(0, 6)) if kind == "done" else []
    return Outcome(request, kind, status=status, nbytes=rng.randint(0, 9999), links=links)


def test_concurrent_claims_never_share_a_request(frontier):
    frontier.add_seeds(urls("a.test", 1000) + urls("b.test", 1000))
    claimed: list[list[Request]] = [[] for _ in range(8)]

    def worker(mine: list[Request]) -> None:
        crawl = Frontier(1)
        while batch := crawl.claim(7, lease_seconds=30):
            mine += batch

    threads = [threading.Thread(target=worker, args=(mine,)) for mine in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [request.url for mine in claimed for request in mine]
    assert len(everything) == len(set(everything)) == 2000
    assert sum(1 for mine in claimed if mine) > 1


def test_concurrent_workers_fetch_every_url_once(frontier):
    """Workers claim, complete pages full of shared links and hand some requests back: each URL
    is claimed once, plus once more per release, and the counters come out exact."""
    site = {
        i: [f"http://h{j % 3}.test/{j}" for j in ((i * 7) % 500, (i * 13) % 500, (i + 1) % 500)]
        for i in range(500)
    }
    frontier.add_seeds(["http://h0.test/0"])
    claims: list[str] = []
    released: list[str] = []

    def worker(seed: int) -> None:
        rng, crawl, idle = random.Random(seed), Frontier(1), 0
        while idle < 20:
            batch = crawl.claim(rng.randint(1, 6), lease_seconds=60)
            idle = 0 if batch else idle + 1
            claims.extend(r.url for r in batch)
            back = [r for r in batch if rng.random() < 0.1]
            released.extend(r.url for r in back)
            crawl.release(back)
            pages = [r for r in batch if r not in back]
            crawl.complete([done(r, links=site[int(r.url.rsplit("/", 1)[1])]) for r in pages])
            time.sleep(0.001 if batch else 0.01)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = frontier.stats()
    assert frontier.is_done() and stats["requests"] == stats["responses"] == 500
    assert sorted(claims) == sorted(released + [f"http://h{j % 3}.test/{j}" for j in range(500)])


def test_two_crawls_share_neither_dedup_nor_counters(frontier):
    other = Frontier(2)
    other.set_state("running")
    assert frontier.add_seeds(["http://a.test/"]) == (1, 0)
    assert other.add_seeds(["http://a.test/", "http://a.test/"]) == (1, 1)
    [mine] = claim_all(frontier)
    frontier.complete([done(mine, nbytes=5)])
    assert (frontier.stats()["responses"], other.stats()["responses"]) == (1, 0)
    assert (frontier.stats()["repeats"], other.stats()["repeats"]) == (0, 1)
    assert [r.url for r in claim_all(other)] == ["http://a.test/"]


# Cancel and delete


def test_cancel_drops_unfinished_work_and_keeps_seen_and_counters(frontier):
    frontier.add_seeds(urls("a.test", 5))
    held = frontier.claim(3, lease_seconds=30)
    frontier.complete([done(held[0]), Outcome(held[1], "retry", retry_delay=60)])
    frontier.cancel()
    stats = frontier.stats()
    assert frontier.state() == "cancelled"
    assert (stats["queued"], stats["delayed"], stats["in_flight"]) == (0, 0, 0)
    assert (stats["responses"], stats["cancelled"], stats["requests"]) == (1, 4, 5)
    assert_invariant(stats)
    frontier.complete([done(held[2])])
    assert frontier.stats() == stats
    assert frontier.claim(5, lease_seconds=30) == []
    assert frontier.add_seeds(urls("a.test", 1)) == (0, 1)
    assert frontier.is_done()


def test_delete_removes_every_key_of_the_crawl_only(frontier, redis):
    frontier.configure(max_pages=100, max_depth=3, host_delay=1)
    frontier.set_host_delay("a.test", 2)
    frontier.add_seeds(urls("a.test", 300))
    held = claim_all(frontier)
    frontier.complete([Outcome(held[0], "retry", retry_delay=60)])
    frontier.robots_store("a.test", "User-agent: *")
    frontier.robots_lock("a.test")
    neighbour = Frontier(10)
    neighbour.add_seeds(["http://a.test/"])
    assert len(redis.keys(frontier.key("*"))) > 10
    frontier.delete()
    assert redis.keys(frontier.key("*")) == []
    assert neighbour.stats()["queued"] == 1


# robots.txt


def test_robots_cache_and_lock(frontier):
    assert frontier.robots_text("a.test") is None
    assert frontier.robots_lock("a.test") is True
    assert frontier.robots_lock("A.test") is False
    frontier.robots_store("a.test", "User-agent: *\nDisallow: /private")
    assert frontier.robots_text("a.test") == "User-agent: *\nDisallow: /private"
    assert Frontier(2).robots_text("a.test") is None
    assert frontier.robots_lock("b.test", ttl=0.1) is True
    time.sleep(0.15)
    assert frontier.robots_lock("b.test", ttl=0.1) is True


# Cost


def simulate_crawl(crawl: Frontier, pages: int, batch: int) -> int:
    """Crawl a site where page i links to pages 10i+1..10i+10 and back home; returns pages."""
    crawl.add_seeds(["http://site.test/p/0"])
    fetched = 0
    while claimed := crawl.claim(batch, lease_seconds=30):
        outcomes = []
        for request in claimed:
            i = int(request.url.rsplit("/", 1)[1])
            links = [f"http://site.test/p/{j}" for j in range(10 * i + 1, 10 * i + 11) if j < pages]
            outcomes.append(done(request, nbytes=100, links=[*links, "http://site.test/p/0"]))
        crawl.complete(outcomes)
        fetched += len(claimed)
    return fetched


def script_calls(redis) -> int:
    """Commands sent by clients for scripts. INFO commandstats also counts each command a script
    runs inside Redis; those are not round trips and are left out."""
    stats = redis.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


def test_redis_commands_per_page(frontier, redis):
    before = script_calls(redis)
    pages = simulate_crawl(frontier, pages=2000, batch=50)
    calls = script_calls(redis) - before
    assert pages == 2000
    assert frontier.is_done()
    assert calls / pages <= 2
    stats = frontier.stats()
    assert (stats["requests"], stats["responses"], stats["repeats"]) == (2000, 2000, 2000)


# Slices and the supervisor


def test_live_slices_count_registered_and_beating_slices_until_their_ttl(frontier):
    frontier.slice_register(["s1", "s2", "s3"], ttl=3600)
    frontier.slice_beat("s4", ttl=0.2)
    assert frontier.live_slices() == 4
    frontier.slice_end("s1")
    frontier.slice_beat("s2", ttl=0.2)
    time.sleep(0.3)
    assert frontier.live_slices() == 1
    assert Frontier(2).live_slices() == 0


def test_a_slice_of_a_retired_crawl_beats_without_writing_a_key_again(frontier):
    """A slice still finishing a page of a deleted crawl (its keys retired, its state
    "cancelled") leaves no key of the crawl behind but that state."""
    frontier.slice_register(["s1"], ttl=3600)
    frontier.retire(60)
    frontier.slice_beat("s1")
    frontier.slice_register(["s2"], ttl=3600)
    assert sorted(frontier.redis.keys(frontier.prefix + "*")) == [frontier.key("state").encode()]


def test_a_slice_beating_while_its_crawl_is_retired_leaves_no_key_behind(frontier):
    """The slice beats while the deletion removes its crawl's keys (many of them: a while): the
    state says "cancelled" all along, so no beat writes the slices key again."""
    frontier.slice_register(["s1"], ttl=3600)
    pipe = frontier.redis.pipeline(transaction=False)
    for n in range(20_000):
        pipe.set(f"{frontier.prefix}filler:{n}", 1)  # what scan_iter finds and removes
    pipe.execute()
    stop = threading.Event()
    beats = []

    def beat():
        beater = Frontier(frontier.crawl_id, frontier.redis)
        while not stop.is_set():
            beats.append(beater.slice_beat("s1"))

    beating = threading.Thread(target=beat)
    beating.start()
    try:
        while len(beats) < 10:
            time.sleep(0.001)
        frontier.retire(60)
        time.sleep(0.05)  # beats after the retirement too
    finally:
        stop.set()
        beating.join()
    assert sorted(frontier.redis.keys(frontier.prefix + "*")) == [frontier.key("state").encode()]
    assert frontier.redis.pttl(frontier.key("state")) > 50_000


def test_supervisor_lock_lets_one_supervisor_run():
    assert supervisor_lock(ttl=0.2) is True
    assert supervisor_lock(ttl=0.2) is False
    time.sleep(0.3)
    assert supervisor_lock(ttl=0.2) is True


def test_renewing_a_lease_keeps_a_slow_request_from_going_back(redis):
    from crawls.engine.frontier import Frontier

    frontier = Frontier(990, redis)
    frontier.configure(max_pages=10, max_depth=3, host_delay=0)
    frontier.set_state("running")
    frontier.add_seeds(["http://renew.test/a", "http://renew.test/b"])
    held = frontier.claim(2, lease_seconds=0.3)
    assert len(held) == 2
    time.sleep(0.2)
    frontier.renew(held[:1], lease_seconds=0.5)  # only the first is still held
    time.sleep(0.2)
    assert frontier.requeue_expired() == 1  # the second expired, the renewed one did not
    assert frontier.stats()["in_flight"] == 1
    time.sleep(0.4)
    assert frontier.requeue_expired() == 1
    frontier.renew(held[:1], lease_seconds=5)  # expired and gone back: not brought back
    assert frontier.stats()["in_flight"] == 0
    assert frontier.stats()["queued"] == 2
