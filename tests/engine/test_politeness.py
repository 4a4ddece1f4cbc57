"""Politeness: a host is never asked faster than its delay, judged from the site's own log, on
real workers; a host that pushes back (429, 503) is slowed down for every worker and eases back.

The frontier's side of the per-host delay (a claimed request reserves its host until it is sent)
is in tests/engine/test_frontier.py.
"""

import threading
import time

import pytest

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.engine.request import Outcome
from crawls.models import CrawlState
from tests.support.crawling import wait_for_state
from tests.support.sites import Response, pages_site


def page(*links: str) -> str:
    anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
    return f"<html><head><title>p</title></head><body>{anchors}</body></html>"


def linked_site(count: int, **extra) -> dict:
    links = [f"/p{n}" for n in range(count)]
    return {"/": page(*links), **{link: page() for link in links}, **extra}


def gaps(times: list[float]) -> list[float]:
    times = sorted(times)
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def start_crawl(user, seeds: list[str], **options):
    crawl = services.crawl_create(
        user=user,
        name="polite",
        seeds=seeds,
        max_pages=10_000,
        max_depth=5,
        max_retries=3,
        **options,
    )
    services.crawl_start(crawl=crawl, user=user)
    return crawl


# The frontier: push-back and easing


@pytest.mark.once
def test_a_push_back_slows_the_host_down_for_every_worker(frontier):
    frontier.add_seeds([f"http://a.test/{n}" for n in range(20)])
    held = frontier.claim(3, lease_seconds=30)  # no delay: a.test three times
    frontier.add_seeds(["http://b.test/"])
    assert frontier.send(held[0]) == 0
    assert frontier.pushed_back("a.test", wait=None, why="HTTP 429").delay == 1.0
    # Answers to requests already on their way do not slow it more.
    assert frontier.pushed_back("a.test", wait=None, why="HTTP 429").delay == 1.0
    # Another worker gets b.test, and nothing of a.test until its delay has passed.
    other = Frontier(frontier.crawl_id)
    assert [r.host for r in other.claim(10, lease_seconds=30)] == ["b.test"]
    assert frontier.claim(10, lease_seconds=30) == []
    slowed = frontier.redis.hget(frontier.key("hostslow"), "a.test")
    assert int(slowed) == 1000
    assert frontier.redis.hget(frontier.key("hostwhy"), "a.test").endswith(b" HTTP 429")
    # What was claimed before the push-back and not sent yet is not sent: it goes back.
    assert frontier.send(held[1]) is None
    assert frontier.release(held[1:]) == 2


@pytest.mark.once
def test_delayed_hosts_are_those_with_a_delay_of_their_own_or_slowed(frontier):
    assert frontier.delayed_hosts() == frozenset()
    frontier.set_host_delay("A.test", 2)
    frontier.pushed_back("b.test", wait=None, why="HTTP 429")
    assert frontier.delayed_hosts() == {"a.test", "b.test"}


@pytest.mark.once
def test_answers_ease_a_slowed_host_back_once_per_delay(frontier):
    frontier.add_seeds([f"http://a.test/{n}" for n in range(20)])
    held = frontier.claim(3, lease_seconds=30)
    frontier.pushed_back("a.test", wait=None, why="HTTP 429")
    slowed = frontier.key("hostslow")
    # Answers to requests sent before the push-back do not ease it.
    frontier.complete([Outcome(request=r, kind="done", status=200) for r in held[:2]])
    assert int(frontier.redis.hget(slowed, "a.test")) == 1000
    steps = []
    while frontier.redis.hexists(slowed, "a.test"):
        time.sleep(0.05)
        [request] = frontier.claim(1, lease_seconds=30) or [None]
        if request is not None:
            assert frontier.send(request) is not None
            frontier.answered(request)
            frontier.complete([Outcome(request=request, kind="done", status=200)])
            steps.append(int(frontier.redis.hget(slowed, "a.test") or 0))
    # At most one step per delay: an answer that comes sooner leaves the delay as it is.
    eased = [step for n, step in enumerate(steps) if n == 0 or step != steps[n - 1]]
    assert eased == [750, 562, 421, 315, 236, 177, 132, 99, 74, 55, 0]


@pytest.mark.once
def test_retry_after_sets_how_long_the_host_waits(frontier):
    frontier.add_seeds(["http://a.test/1", "http://a.test/2"])
    frontier.claim(1, lease_seconds=30)
    assert frontier.pushed_back("a.test", wait=30, why="HTTP 503, Retry-After 30 s").delay == 30.0
    next_allowed = int(frontier.redis.hget(frontier.key("hosts"), "a.test"))
    now_ms = frontier.redis.time()[0] * 1000
    assert now_ms + 28_000 < next_allowed <= now_ms + 31_000
    assert frontier.claim(5, lease_seconds=30) == []


@pytest.mark.once
def test_a_fetch_outside_a_page_s_turn_waits_for_the_host_s_delay(frontier):
    # The login step (crawls/engine/sessions.py: HostTurns) asks Frontier.pace before each of
    # its requests and Frontier.paced after: the host's delay holds between them and the pages.
    frontier.configure(max_pages=0, max_depth=-1, host_delay=2)
    frontier.add_seeds(["http://a.test/1"])
    [request] = frontier.claim(1, lease_seconds=30)
    assert frontier.send(request) == 2.0
    wait = frontier.pace("A.test")  # right after the page: not now
    assert 1.5 < wait <= 2.0
    frontier.answered(request)
    frontier.redis.hset(frontier.key("hosts"), "a.test", 0)  # as if the delay had passed
    assert frontier.pace("a.test") == 0  # may go: the delay runs from now
    assert 1.5 < frontier.pace("a.test") <= 2.0
    assert frontier.pace("b.test") == 0  # another host: its own turns
    frontier.pushed_back("c.test", wait=30, why="HTTP 429, Retry-After 30 s")
    assert 28 < frontier.pace("c.test") <= 30  # a push-back holds the login too
    frontier.configure(max_pages=0, max_depth=-1, host_delay=0)
    assert frontier.pace("d.test") == frontier.pace("d.test") == 0  # no delay: never waits
    frontier.paced("d.test")
    assert frontier.redis.hget(frontier.key("hosts"), "d.test") is None


@pytest.mark.once
def test_a_host_s_next_turn_is_claimed_ahead_with_its_wait_and_never_sent_early(frontier):
    # A slice claims a host whose turn comes within CLAIM_AHEAD_SECONDS, and its thread waits
    # for the turn (crawls/engine/fetching.py): on time, rather than a claim interval late.
    frontier.configure(max_pages=0, max_depth=-1, host_delay=5)
    frontier.add_seeds(["http://a.test/1", "http://a.test/2", "http://b.test/1"])
    first = frontier.claim_ahead(5, lease_seconds=30, ahead=10)
    assert sorted((r.url, wait) for r, wait in first) == [
        ("http://a.test/1", 0),
        ("http://b.test/1", 0),
    ]
    for request, _ in first:
        assert frontier.send(request) == 5.0
        frontier.answered(request)  # each host's next turn: 5 s from now
    assert frontier.claim(5, lease_seconds=30) == []  # not due
    assert frontier.claim_ahead(5, lease_seconds=30, ahead=4) == []  # due later than that
    [(second, wait)] = frontier.claim_ahead(5, lease_seconds=30, ahead=10)
    assert second.url == "http://a.test/2" and 4 < wait <= 5
    assert frontier.claim_ahead(5, lease_seconds=30, ahead=10) == []  # a.test is reserved
    assert frontier.send(second) is None  # sent before its turn: refused, to be handed back
    assert frontier.release([second]) == 1


# Real workers, judged from the sites' own logs


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_no_host_is_asked_faster_than_its_delay(user, make_site, fleet):
    robots = Response(body="User-agent: *\nAllow: /\n", content_type="text/plain")
    sites = [make_site(pages_site(linked_site(6, **{"/robots.txt": robots}))) for _ in range(3)]
    crawl = start_crawl(
        user,
        [site.url + "/" for site in sites],
        host_delay=0.4,
        threads=4,
        slices=2,
        obey_robots=True,
    )
    fleet.start_worker()
    fleet.start_worker()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=120, fleet=fleet)
    for site in sites:
        # robots.txt counts: it is a request to the host like any other.
        assert len(site.log) == 8, site.paths()
        shortest = min(gaps([r.at for r in site.log]))
        assert shortest >= 0.4 - 0.05, (site.url, sorted((r.at, r.path) for r in site.log))
    assert crawl.stats["responses"] == 3 * 7


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_crawl_delay_holds_in_a_crawl_without_a_delay_of_its_own(user, make_site, fleet):
    # Without a delay or a cap, requests skip their turn at the host (send, answered) unless
    # the host has a delay of its own: here robots.txt gives one, to one of the two sites.
    robots = Response(body="User-agent: *\nCrawl-delay: 0.4\n", content_type="text/plain")
    slow = make_site(pages_site(linked_site(6, **{"/robots.txt": robots})))
    fast = make_site(pages_site(linked_site(6)))
    crawl = start_crawl(
        user,
        [slow.url + "/", fast.url + "/"],
        host_delay=0,
        threads=4,
        slices=2,
        obey_robots=True,
    )
    fleet.start_worker()
    fleet.start_worker()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=120, fleet=fleet)
    assert crawl.stats["responses"] == 2 * 7  # pages only: robots.txt is not one
    pages = sorted(r.at for r in slow.log if r.path != "/robots.txt")
    assert len(pages) == 7, slow.paths()
    assert min(gaps(pages)) >= 0.4 - 0.05, sorted((r.at, r.path) for r in slow.log)
    assert Frontier(crawl.pk).delayed_hosts() == {site_host(slow)}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_host_answering_429_slows_down_for_every_worker_and_recovers(user, make_site, fleet):
    pages = linked_site(60)
    asked = []
    lock = threading.Lock()

    def handler(request):
        # The 8th to 10th requests the site sees are refused with a 429, once each.
        with lock:
            asked.append(request.path)
            refused = 8 <= len(asked) <= 10
        if refused:
            return Response(status=429, body="slow down", delay=0.02)
        response = pages_site(pages)(request)
        response.delay = 0.02
        return response

    site = make_site(handler)
    crawl = start_crawl(user, [site.url + "/"], host_delay=0, threads=4, slices=2)
    fleet.start_worker()
    fleet.start_worker()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=120, fleet=fleet)
    log = sorted(site.log, key=lambda r: r.at)
    assert crawl.stats["responses"] == 61
    first_429 = log[7].at
    # Requests on their way when the 429 came back still arrive (a slice's first pages can
    # take a worker well over half a second to get through); after that, one request a second
    # or slower (the delay doubles on a later 429, eases by a quarter per answer), whichever of
    # the 8 threads on 2 workers asks. Unslowed, they come 0.02 s apart.
    after = [r.at for r in log if r.at >= first_429 + 1.0]
    shown = str([(round(r.at - first_429, 2), r.path) for r in log])[:3000]
    assert len([at for at in after if at <= first_429 + 3.0]) <= 3, shown
    assert min(gaps(after[:3])) >= 0.6, shown
    # Then it eases back: the crawl ends at full speed again (10 requests in well under the
    # ~7 s they would take slowed).
    assert log[-1].at - log[-10].at < 3.0, [round(r.at - first_429, 2) for r in log]
    assert not Frontier(crawl.pk).redis.hexists(Frontier(crawl.pk).key("hostslow"), site_host(site))


def site_host(site) -> str:
    return site.url.split("://", 1)[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_per_host_cap_holds_over_every_worker(user, make_site, fleet):
    pages = linked_site(40)
    lock = threading.Lock()
    at_once = [0, 0]  # now, most

    def handler(request):
        with lock:
            at_once[0] += 1
            at_once[1] = max(at_once[1], at_once[0])
        try:
            time.sleep(0.1)
            return pages_site(pages)(request)
        finally:
            with lock:
                at_once[0] -= 1

    site = make_site(handler)
    crawl = start_crawl(
        user,
        [site.url + "/"],
        host_delay=0,
        host_concurrency=2,
        threads=8,
        slices=2,
        obey_robots=False,
    )
    fleet.start_worker()
    fleet.start_worker()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=120, fleet=fleet)
    assert crawl.stats["responses"] == 41
    # 16 threads on 2 workers, and the site never saw more than 2 requests at once.
    assert at_once[1] == 2
    frontier = Frontier(crawl.pk)
    assert frontier.redis.hlen(frontier.key("hostflight")) == 0
    assert frontier.redis.hlen(frontier.key("flying")) == 0


@pytest.mark.once
def test_requests_in_flight_per_host_are_counted_until_answered(frontier):
    frontier.configure(max_pages=100, max_depth=5, host_delay=0, host_concurrency=2)
    frontier.add_seeds([f"http://a.test/{n}" for n in range(5)] + ["http://b.test/"])
    held = frontier.claim(10, lease_seconds=30)
    assert sorted(r.host for r in held) == ["a.test", "a.test", "b.test"]
    flight = frontier.key("hostflight")
    assert frontier.redis.hgetall(flight) == {b"a.test": b"2", b"b.test": b"1"}
    a_one = next(r for r in held if r.host == "a.test")
    frontier.send(a_one)
    frontier.answered(a_one)
    assert frontier.redis.hget(flight, "a.test") == b"1"
    [more] = frontier.claim(10, lease_seconds=30)
    assert more.host == "a.test"
    # Completed (unanswered ones too), released or requeued: counted out once each.
    frontier.complete([Outcome(request=r, kind="done", status=200) for r in held])
    frontier.release([more])
    assert frontier.redis.hgetall(flight) == {}
    assert frontier.redis.hlen(frontier.key("flying")) == 0


# An operator's hold, release and drop (the frontier; the doors: tests/dashboard/test_hosts.py)


@pytest.mark.once
def test_a_held_host_gives_nothing_until_released(frontier):
    frontier.add_seeds([f"http://a.test/{n}" for n in range(3)] + ["http://b.test/"])
    frontier.host_hold("A.test", until_ms=frontier.now_ms() + 60_000)
    assert [r.host for r in frontier.claim(10, lease_seconds=30)] == ["b.test"]
    frontier.host_release("a.test")
    assert [r.host for r in frontier.claim(10, lease_seconds=30)] == ["a.test"] * 3


@pytest.mark.once
def test_a_hold_ends_by_itself(frontier):
    frontier.add_seeds(["http://a.test/"])
    frontier.host_hold("a.test", until_ms=frontier.now_ms() + 300)
    assert frontier.claim(10, lease_seconds=30) == []
    time.sleep(0.35)
    assert len(frontier.claim(10, lease_seconds=30)) == 1


@pytest.mark.once
def test_dropping_a_host_drops_its_queue_and_retries_and_counts_them(frontier):
    frontier.add_seeds([f"http://a.test/{n}" for n in range(4)] + ["http://b.test/"])
    [first] = [r for r in frontier.claim(1, lease_seconds=30)]
    frontier.complete([Outcome(request=first, kind="retry", retry_delay=60)])
    assert frontier.host_drop(first.host) == (4 if first.host == "a.test" else 1)
    stats = frontier.stats()
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"] + stats["cancelled"]
    assert stats["requests"] == stats["responses"] + stats["errors"] + unfinished
    assert {r.host for r in frontier.claim(10, lease_seconds=30)} == {"a.test", "b.test"} - {
        first.host
    }


@pytest.mark.once
def test_host_rows_say_what_each_host_is_doing(frontier):
    frontier.configure(max_pages=100, max_depth=5, host_delay=0.5)
    frontier.add_seeds([f"http://a.test/{n}" for n in range(3)] + ["http://b.test/"])
    held = frontier.claim(10, lease_seconds=30)
    a = next(r for r in held if r.host == "a.test")
    b = next(r for r in held if r.host == "b.test")
    frontier.send(a)
    frontier.answered(a)
    frontier.pushed_back("a.test", wait=None, why="HTTP 503")
    frontier.complete(
        [
            Outcome(request=a, kind="retry", retry_delay=1),
            Outcome(request=b, kind="done", status=200),
        ]
    )
    rows = {row["host"]: row for row in frontier.host_rows()}
    assert rows["a.test"]["queued"] == 2 and rows["a.test"]["errors"] == 1
    assert rows["a.test"]["delay"] == 1.0 and rows["a.test"]["why"] == "HTTP 503"
    assert rows["a.test"]["next_at"] > frontier.now_ms()
    assert rows["b.test"] == {
        "host": "b.test",
        "queued": 0,
        "in_flight": 0,
        "done": 1,
        "errors": 0,
        "delay": 0.5,
        "next_at": 0,
        "held_until": 0,
        "why": "",
    }


# Parking: a host whose every request fails for a while


@pytest.mark.once
def test_a_host_whose_every_request_fails_for_a_while_is_parked_with_the_reason(frontier):
    frontier.configure(max_pages=100, max_depth=5, host_delay=0, park_after=0.3, park_for=60)
    frontier.add_seeds([f"http://a.test/{n}" for n in range(20)] + ["http://b.test/"])

    def finish(count: int, kind: str = "failed", status: int | None = None) -> None:
        """`count` a.test requests end as `kind`; whatever else was claimed goes back."""
        claimed = frontier.claim(30, lease_seconds=30)
        ending = [r for r in claimed if r.host == "a.test"][:count]
        frontier.complete([Outcome(request=r, kind=kind, status=status) for r in ending])
        frontier.release([r for r in claimed if r not in ending])

    def fail(count: int) -> None:
        finish(count)

    fail(3)
    finish(1, "done", 200)  # an answer ends the run of failures
    time.sleep(0.35)
    fail(4)
    assert frontier.redis.hget(frontier.key("hostheld"), "a.test") is None  # 4 in no time
    time.sleep(0.35)
    fail(1)  # 5 failures in a row over 0.35 s: parked
    rows = {row["host"]: row for row in frontier.host_rows()}
    assert rows["a.test"]["held_until"] > frontier.now_ms() + 50_000
    assert rows["a.test"]["why"] == "parked: none of its last 5 requests got an answer in 0 s"
    assert {r.host for r in frontier.claim(20, lease_seconds=30)} == {"b.test"}
    frontier.host_release("a.test")
    assert {row["host"]: row for row in frontier.host_rows()}["a.test"]["why"] == ""
