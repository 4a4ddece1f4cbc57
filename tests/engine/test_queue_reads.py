"""What the frontier reads of its queue for a scope change and the queue view: requests that no
longer fit dropped exactly (queued, retrying, claimed), the counts by host and depth, and
paging through the queue by cursor while it moves. Checked against what Redis holds."""

from __future__ import annotations

import pytest

from crawls.engine.frontier import Frontier
from crawls.engine.request import Outcome, Request

pytestmark = pytest.mark.once


def assert_invariant(stats: dict[str, int]) -> None:
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"] + stats["cancelled"]
    assert stats["requests"] == stats["responses"] + stats["errors"] + unfinished, stats


def queued_urls(frontier: Frontier) -> list[str]:
    """The queue as Redis holds it, in order (read here, by the test, to check the frontier)."""
    return [Request.unpack(m).url for m in frontier.redis.zrange(frontier.key("queue"), 0, -1)]


def not_skip(request: Request) -> bool:
    return "/skip/" not in request.url


def test_dropping_what_no_longer_fits_is_exact_and_keeps_the_sum(frontier):
    frontier.add_seeds([f"http://a.test/keep/{i}" for i in range(300)], depth=1)
    frontier.add_seeds([f"http://a.test/skip/{i}" for i in range(200)], depth=1)
    frontier.add_seeds([f"http://b.test/skip/{i}" for i in range(50)], depth=1)
    claimed = frontier.claim(40, lease_seconds=60)  # in flight (both hosts): left alone
    # Two retries waiting, one of which no longer fits.
    retry = [r for r in claimed if "/keep/" in r.url][:1] + [
        r for r in claimed if "/skip/" in r.url
    ][:1]
    frontier.complete([Outcome(request=r, kind="retry", retry_delay=60) for r in retry])
    waiting = [u for u in queued_urls(frontier) if "/skip/" in u]
    cursor, dropped, calls = "", 0, 0
    while True:  # in small budgets, as the job goes on from its cursor
        more, cursor = frontier.drop_unfit(not_skip, cursor=cursor, budget=60, batch=20)
        dropped, calls = dropped + more, calls + 1
        if not cursor:
            break
    assert calls > 5
    assert dropped == len(waiting) + 1  # and the retry
    assert all("/skip/" not in url for url in queued_urls(frontier))
    stats = frontier.stats()
    assert stats["cancelled"] == stats["descoped"] == dropped
    assert stats["delayed"] == 1 and stats["in_flight"] == 38
    assert stats["queued"] == frontier.redis.zcard(frontier.key("queue"))
    assert_invariant(stats)
    # The queue per host stays exact: b.test had only requests that no longer fit.
    assert frontier.queue_counts()["hosts"] == {"a.test": len(queued_urls(frontier))}


def test_claimed_requests_that_no_longer_fit_are_dropped_once(frontier):
    frontier.add_seeds(["http://a.test/skip/1", "http://a.test/skip/2", "http://a.test/k"])
    claimed = frontier.claim(3, lease_seconds=60)
    gen, in_flight = frontier.scope_change()
    assert gen == 1 and sorted(r.url for r in in_flight) == sorted(r.url for r in claimed)
    unfit = [r for r in claimed if "/skip/" in r.url]
    assert frontier.drop_claimed(unfit) == 2
    assert frontier.drop_claimed(unfit) == 0  # no longer claimed: counted once
    stats = frontier.stats()
    assert (stats["in_flight"], stats["cancelled"], stats["descoped"]) == (1, 2, 2)
    assert_invariant(stats)
    assert frontier.redis.hgetall(frontier.key("hostflight")) == {b"a.test": b"1"}


def test_every_claim_returns_the_scope_generation(frontier):
    frontier.add_seeds([f"http://a.test/{i}" for i in range(3)])
    frontier.claim(1, lease_seconds=60)
    assert frontier.scope_gen == 0
    assert frontier.scope_change()[0] == 1
    frontier.claim(1, lease_seconds=60)
    assert frontier.scope_gen == 1 == frontier.scope_generation()


def test_queue_counts_by_host_and_depth_match_the_queue(frontier):
    frontier.add_seeds([f"http://a.test/{i}" for i in range(7)], depth=0)
    frontier.add_seeds([f"http://b.test/{i}" for i in range(5)], depth=3)
    frontier.add_seeds([f"http://c.test/{i}" for i in range(4)], depth=3, priority=5)
    frontier.add_seeds([f"http://c.test/deep/{i}" for i in range(2)], depth=5000)
    frontier.add_seeds([f"http://d.test/{i}" for i in range(3)], depth=1, priority=-7)
    frontier.claim(2, lease_seconds=60)
    counts = frontier.queue_counts()
    by_depth: dict[int, int] = {}
    by_host: dict[str, int] = {}
    for member in frontier.redis.zrange(frontier.key("queue"), 0, -1):
        request = Request.unpack(member)
        depth = min(request.depth, 4095)
        by_depth[depth] = by_depth.get(depth, 0) + 1
        by_host[request.host] = by_host.get(request.host, 0) + 1
    assert counts["depths"] == dict(sorted(by_depth.items()))
    assert counts["hosts"] == by_host and list(counts["hosts"].values()) == sorted(
        by_host.values(), reverse=True
    )
    assert counts["queued"] == sum(by_host.values()) == 19 and counts["retrying"] == 0
    assert counts["depths_partial"] is False


def test_paging_through_the_queue_gives_each_request_once_in_order(frontier):
    for host in ("a.test", "b.test", "c.test"):
        frontier.add_seeds([f"http://{host}/{i}" for i in range(17)], depth=1)
    frontier.add_seeds([f"http://a.test/p/{i}" for i in range(5)], priority=3)
    expected = queued_urls(frontier)
    seen, cursor, pages = [], "", 0
    while True:
        requests, cursor = frontier.queue_page(after=cursor, size=10)
        seen += [r.url for r in requests]
        pages += 1
        if not cursor:
            break
    assert seen == expected and pages == 6  # 56 requests: the last page holds 6


def test_a_page_goes_on_from_where_the_last_ended_while_the_queue_moves(frontier):
    frontier.add_seeds([f"http://a.test/{i:02}" for i in range(30)], depth=1)
    frontier.add_seeds([f"http://b.test/{i:02}" for i in range(30)], depth=1)
    first, cursor = frontier.queue_page(size=10)
    order = queued_urls(frontier)
    # Claims take the head, the cursor's own request with it; links join further on.
    frontier.claim(12, lease_seconds=60)
    frontier.add_seeds(["http://c.test/new"], depth=9)
    second, _ = frontier.queue_page(after=cursor, size=10)
    assert [r.url for r in first] == order[:10]
    assert [r.url for r in second] == order[12:22]
    # Past an entry still queued, from its rank.
    _, cursor = frontier.queue_page(after=cursor, size=3)
    third, _ = frontier.queue_page(after=cursor, size=3)
    assert [r.url for r in third] == order[15:18]


def test_a_cursor_not_made_by_the_queue_is_refused(frontier):
    for bad in ("nope", "bmFuIHg=", "MTIz"):  # not base64; "nan x"; "123" with no entry
        with pytest.raises(ValueError, match="not a cursor"):
            frontier.queue_page(after=bad)
    with pytest.raises(ValueError, match="not a cursor"):
        frontier.drop_unfit(not_skip, cursor="elsewhere:3")
