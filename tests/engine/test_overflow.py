"""A crawl's queue past its window in Redis: the lowest-ranked requests wait in the database and
come back in rank order (crawls/engine/overflow.py). A request is in exactly one place at every
moment, the counters add up with `spilled`, and a holder cut short between any two steps of a
spill or a refill (its worker killed, Redis restarted) loses nothing and doubles nothing."""

from __future__ import annotations

import os

import pytest
from django.db import transaction
from django.test import override_settings

from crawls import services
from crawls.engine.frontier import Frontier
from crawls.engine.frontier_overflow import OverflowFenced
from crawls.engine.jobs import supervise
from crawls.engine.lifecycle import finish_if_done
from crawls.engine.overflow import Overflow
from crawls.engine.request import Outcome, Request
from crawls.engine.scope_changes import drop_out_of_scope
from crawls.engine.slices import run_slice
from crawls.models import SpilledRequest
from crawls.queued import crawl_queue
from tests.support import overflow_process
from tests.support.crawling import (
    assert_exact,
    database_url,
    drive,
    make_crawl,
    start_sample_crawl,
)

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = 50


def assert_invariant(stats: dict[str, int]) -> None:
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"] + stats["cancelled"]
    assert (
        stats["requests"] == stats["responses"] + stats["errors"] + unfinished + stats["spilled"]
    ), stats


def assert_one_place(frontier: Frontier) -> None:
    """`spilled` is what waits in the database: the rows not being removed, and the requests
    being written; no request is in two places."""
    stats = frontier.stats()
    assert_invariant(stats)
    taken, unspilled = frontier.overflow_staged()
    rows = set(
        SpilledRequest.objects.filter(crawl_id=frontier.crawl_id).values_list("fp", flat=True)
    )
    waiting = (rows - set(unspilled)) | {fp for fp, _, _ in taken}
    assert stats["spilled"] == len(waiting), (stats["spilled"], len(waiting))
    queued = {Request.unpack(m).fp for m in frontier.redis.zrange(frontier.key("queue"), 0, -1)}
    assert not queued & waiting, "a request queued and waiting in the database at once"


@pytest.fixture
def crawl(user):
    return make_crawl(user)


@pytest.fixture
def frontier(crawl) -> Frontier:
    frontier = Frontier(crawl.pk)
    frontier.configure(max_pages=1_000_000, max_depth=100, host_delay=0)
    frontier.set_state("running")
    return frontier


def seed(frontier: Frontier, count: int, *, groups: int = 3) -> list[str]:
    """`count` seeds on the crawl's own site (its scope), in `groups` folders."""
    urls = [f"http://127.0.0.1:9/g{n % groups}/p/{n}" for n in range(count)]
    # Depths rank them: the deeper, the later.
    for depth in range(4):
        frontier.add_seeds(urls[depth::4], depth=depth)
    return urls


def drain(frontier: Frontier, overflow: Overflow, *, batch: int = 7) -> list[Request]:
    """Claim and complete everything, as slices do (a balance after each claim)."""
    claimed: list[Request] = []
    for _ in range(10_000):
        got = frontier.claim(batch, lease_seconds=30)
        overflow.balance(queued=frontier.queued_seen, spilled=frontier.spilled_seen)
        assert_invariant(frontier.stats())
        if not got and frontier.is_done():
            return claimed
        claimed += got
        frontier.complete([Outcome(request=r, kind="done", status=200) for r in got])
    raise AssertionError("the crawl never drained")


def test_a_queue_past_its_window_spills_its_lowest_ranked_requests(frontier):
    seed(frontier, 200)
    overflow = Overflow(frontier, window=WINDOW)
    assert overflow.balance() == 200 - WINDOW * 3 // 4
    stats = frontier.stats()
    assert (stats["queued"], stats["spilled"]) == (37, 163)
    assert_one_place(frontier)
    worst_queued = frontier.redis.zrange(frontier.key("queue"), -1, -1, withscores=True)[0][1]
    best_spilled = SpilledRequest.objects.filter(crawl_id=frontier.crawl_id).order_by("score")[0]
    assert best_spilled.score >= worst_queued  # the database holds the tail


def test_the_whole_crawl_is_claimed_once_in_rank_order_through_a_small_window(frontier):
    urls = seed(frontier, 300)
    overflow = Overflow(frontier, window=WINDOW)
    overflow.balance()
    claimed = drain(frontier, overflow)
    assert sorted(r.url for r in claimed) == sorted(urls)
    depths = [r.depth for r in claimed]
    assert depths == sorted(depths), "a shallower request came back after a deeper one"
    stats = frontier.stats()
    assert stats["responses"] == stats["requests"] == 300 and stats["spilled"] == 0
    assert not SpilledRequest.objects.filter(crawl_id=frontier.crawl_id).exists()


def test_a_spill_cut_short_after_taking_the_requests_is_finished_by_the_next_holder(frontier):
    urls = seed(frontier, 120)
    overflow = Overflow(frontier, window=WINDOW)
    token = frontier.overflow_token()
    taken = frontier.spill(token, 60)  # ...and its worker dies before writing a row
    assert len(taken) == 60
    assert_one_place(frontier)
    assert frontier.stats()["spilled"] == 60
    claimed = drain(frontier, overflow)
    assert sorted(r.url for r in claimed) == sorted(urls)


def test_a_spill_cut_short_after_its_commit_writes_each_row_once(frontier):
    urls = seed(frontier, 120)
    overflow = Overflow(frontier, window=WINDOW)
    with transaction.atomic():
        token = frontier.overflow_token()
        taken = frontier.spill(token, 60)
        overflow._write(taken)
    # Committed; the worker dies before taking them out of :spilling.
    assert_one_place(frontier)
    overflow.recover()
    assert SpilledRequest.objects.filter(crawl_id=frontier.crawl_id).count() == 60
    assert frontier.overflow_staged() == ([], [])
    assert_one_place(frontier)
    assert sorted(r.url for r in drain(frontier, overflow)) == sorted(urls)


def test_a_refill_cut_short_before_its_commit_queues_nothing_twice(frontier):
    urls = seed(frontier, 120)
    overflow = Overflow(frontier, window=WINDOW)
    overflow.balance()
    first = frontier.claim(30, lease_seconds=30)  # the queue is below a quarter of the window
    frontier.complete([Outcome(request=r, kind="done", status=200) for r in first])
    with pytest.raises(RuntimeError), transaction.atomic():
        token = frontier.overflow_token()
        assert overflow._refill_batch(token, 20)[0] == 20
        raise RuntimeError("killed before the commit")  # the rows come back with the rollback
    assert SpilledRequest.objects.filter(crawl_id=frontier.crawl_id).count() == 83
    assert frontier.stats()["queued"] == 27
    assert_one_place(frontier)
    claimed = first + drain(frontier, overflow)
    assert sorted(r.url for r in claimed) == sorted(urls)
    assert frontier.stats()["responses"] == 120


def test_a_refill_cut_short_after_its_commit_is_finished_and_can_spill_again(frontier):
    urls = seed(frontier, 120)
    overflow = Overflow(frontier, window=WINDOW)
    overflow.balance()
    first = frontier.claim(30, lease_seconds=30)
    with transaction.atomic():
        token = frontier.overflow_token()
        moved, _forget = overflow._refill_batch(token, 20)  # never forgotten: killed
    assert moved == 20
    assert_one_place(frontier)
    # A spill waits for what was left, finishes it, then spills.
    seed_more = [f"http://127.0.0.1:9/more/{n}" for n in range(60)]
    frontier.add_seeds(seed_more, depth=5)
    assert overflow.balance() > 0
    assert frontier.overflow_staged() == ([], [])
    assert_one_place(frontier)
    frontier.complete([Outcome(request=r, kind="done", status=200) for r in first])
    claimed = first + drain(frontier, overflow)
    assert sorted(r.url for r in claimed) == sorted(urls + seed_more)


def test_a_holder_that_lost_its_lock_has_its_writes_refused(frontier):
    seed(frontier, 120)
    stale = frontier.overflow_token()
    frontier.overflow_token()  # another holder took the lock meanwhile
    with pytest.raises(OverflowFenced):
        frontier.spill(stale, 10)
    assert frontier.stats()["spilled"] == 0
    with pytest.raises(OverflowFenced):
        frontier.unspill(stale, [(1, 0, "1\n\nhttp://x.test/\n0\n\n")], mode="queue")
    assert_one_place(frontier)


def test_a_redis_restart_between_the_steps_of_a_spill_loses_nothing(frontier, redis_server):
    urls = seed(frontier, 120)
    overflow = Overflow(frontier, window=WINDOW)
    frontier.spill(frontier.overflow_token(), 70)
    redis_server.stop()
    redis_server.start()
    frontier = Frontier(frontier.crawl_id)
    assert_one_place(frontier)
    claimed = drain(frontier, Overflow(frontier, window=WINDOW))
    assert sorted(r.url for r in claimed) == sorted(urls)
    del overflow


def test_cancel_counts_what_waits_in_the_database_and_removes_its_rows(user, frontier, crawl):
    seed(frontier, 200)
    Overflow(frontier, window=WINDOW).balance()
    crawl.state = "running"
    crawl.save(update_fields=["state"])
    services.crawl_cancel(crawl=crawl, user=user)
    stats = frontier.stats()
    assert stats["cancelled"] == 200 and stats["spilled"] == 0
    assert_invariant(stats)
    assert not SpilledRequest.objects.filter(crawl_id=crawl.pk).exists()
    assert frontier.is_done()


def test_a_change_of_scope_drops_what_no_longer_fits_from_the_database_too(frontier, crawl):
    seed(frontier, 200, groups=2)
    Overflow(frontier, window=WINDOW).balance()
    crawl.exclude_patterns = ["/g1/"]
    crawl.save(update_fields=["exclude_patterns"])
    gen = frontier.scope_generation()
    dropped, cursor = 0, ""
    while True:
        more, cursor = drop_out_of_scope(crawl, gen=gen, cursor=cursor, budget=40)
        dropped += more
        if not cursor:
            break
    assert dropped == 100
    stats = frontier.stats()
    assert stats["descoped"] == 100 and stats["queued"] + stats["spilled"] == 100
    assert_one_place(frontier)
    rows = SpilledRequest.objects.filter(crawl_id=crawl.pk).values_list("packed", flat=True)
    assert all("/g0/" in Request.unpack(p).url for p in rows)


def test_the_queue_view_says_how_many_wait_in_the_database(frontier, crawl):
    seed(frontier, 200)
    Overflow(frontier, window=WINDOW).balance()
    screen = crawl_queue(crawl)
    assert (screen.queued, screen.on_disk) == (37, 163)


@pytest.mark.parametrize("point", overflow_process.POINTS)
def test_a_worker_killed_at_any_point_of_a_step_loses_nothing_and_doubles_nothing(frontier, point):
    """kill -9 of a real process in the middle of the step, its transaction and lock open:
    the lock goes with it, and the next holder finishes or undoes what it left."""
    urls = seed(frontier, 120)
    overflow = Overflow(frontier, window=WINDOW)
    first: list[Request] = []
    if point.startswith("refill"):
        overflow.balance()
        first = frontier.claim(30, lease_seconds=30)  # below a quarter of the window
    env = {**os.environ, "DATABASE_URL": database_url()}
    overflow_process.kill_at(frontier.crawl_id, point, window=WINDOW, env=env)
    assert_one_place(frontier)
    frontier.complete([Outcome(request=r, kind="done", status=200) for r in first])
    claimed = first + drain(frontier, overflow)
    assert sorted(r.url for r in claimed) == sorted(urls)
    stats = frontier.stats()
    assert stats["responses"] == stats["requests"] == 120 and stats["spilled"] == 0
    assert not SpilledRequest.objects.filter(crawl_id=frontier.crawl_id).exists()
    assert frontier.overflow_staged() == ([], []), "a step left unfinished"


def test_a_crawl_of_a_site_through_a_tiny_window_fetches_exactly_its_set(user, make_site, settings):
    settings.CRAWLHUB_FRONTIER_WINDOW = 20
    site, _server, crawl = start_sample_crawl(user, make_site, pages=400, delay=0)
    most_rows = 0
    for n in range(200):  # slices of a second, as drive() runs them, watched in between
        crawl.refresh_from_db()
        if crawl.state != "running":
            break
        run_slice(crawl.pk, f"t-{n}", budget_seconds=1)
        finish_if_done(crawl.pk)
        most_rows = max(most_rows, SpilledRequest.objects.filter(crawl_id=crawl.pk).count())
        assert_invariant(Frontier(crawl.pk).stats())
    crawl.refresh_from_db()
    assert crawl.state == "finished"
    assert_exact(crawl, site)
    assert most_rows > 0, "nothing ever waited in the database"


def test_a_crawl_deleted_takes_its_rows_with_it(user, frontier, crawl):
    seed(frontier, 200)
    Overflow(frontier, window=WINDOW).balance()
    assert SpilledRequest.objects.filter(crawl_id=crawl.pk).count() == 163
    services.crawl_delete(crawl=crawl, user=user)
    assert not SpilledRequest.objects.filter(crawl_id=crawl.pk).exists()


def test_a_paused_crawl_resumes_with_what_waits_in_the_database(user, make_site, settings):
    settings.CRAWLHUB_FRONTIER_WINDOW = 20
    site, _server, crawl = start_sample_crawl(user, make_site, pages=300, delay=0)
    while not SpilledRequest.objects.filter(crawl_id=crawl.pk).exists():
        run_slice(crawl.pk, "before", budget_seconds=0.3)
    services.crawl_pause(crawl=crawl, user=user)
    crawl.refresh_from_db()
    assert crawl.state == "paused"
    stats = Frontier(crawl.pk).stats()
    assert stats["spilled"] > 0 and stats["in_flight"] == 0
    assert_invariant(stats)
    services.crawl_resume(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=120)
    assert crawl.state == "finished"
    assert_exact(crawl, site)


def test_a_hosts_drop_takes_its_requests_out_of_the_database_too(user, frontier, crawl):
    urls = [f"http://{host}.test/p/{n}" for n in range(100) for host in ("a", "b")]
    frontier.add_seeds(urls)
    Overflow(frontier, window=WINDOW).balance()
    crawl.state = "running"
    crawl.save(update_fields=["state"])
    assert services.crawl_host_drop(crawl=crawl, host="b.test", user=user) == 100
    stats = frontier.stats()
    assert stats["cancelled"] == 100 and stats["descoped"] == 0
    assert_one_place(frontier)
    left = [Request.unpack(p).host for p in SpilledRequest.objects.values_list("packed", flat=True)]
    assert left and set(left) == {"a.test"}


def test_the_supervisor_finishes_a_step_left_when_the_queue_crosses_no_mark(frontier, crawl):
    seed(frontier, 120)
    frontier.spill(frontier.overflow_token(), 70)  # ...and its worker dies
    assert frontier.stats()["queued"] == WINDOW  # neither past the window nor low: no balance
    crawl.state = "running"
    crawl.save(update_fields=["state"])
    with override_settings(CRAWLHUB_FRONTIER_WINDOW=WINDOW):
        supervise()
    assert frontier.overflow_staged() == ([], [])
    assert SpilledRequest.objects.filter(crawl_id=crawl.pk).count() == 70
    assert_one_place(frontier)
