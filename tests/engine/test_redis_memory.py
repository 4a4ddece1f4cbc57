"""A Redis that fills up: crawls stop taking work from Redis once it holds crawlhub's budget of
its maxmemory (claims stop, the crawl page and the API say why) and go on by themselves when
memory frees; a write Redis refuses for its maxmemory ("OOM command not allowed") writes
nothing and is waited out like a Redis that went away, never a crash in a worker's log.
Between the budget and the stop mark halfway to maxmemory, only the crawls holding at least the
running crawls' average wait: a small crawl beside a big one goes on (crawls.engine.sharing).

The tests lower the session Redis' maxmemory around what it holds now (noeviction, as the
embedded Redis runs) and put it back after.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator

import django_rq
import pytest
import redis as redis_py

from crawlhub.redis.connections import redis_memory
from crawls import services
from crawls.api.crawls import CrawlSerializer
from crawls.engine import live, sharing
from crawls.engine.frontier import Frontier
from crawls.engine.jobs import after_slice, slice_job, supervise
from crawls.engine.slices import run_slice
from crawls.engine.stopping import with_redis_retry
from crawls.models import CrawlState
from tests.support.crawling import start_site_crawl
from tests.support.sites import pages_site


def page(*links: str) -> str:
    return "<html><body>" + "".join(f'<a href="{link}">{link}</a>' for link in links) + "</body>"


@pytest.fixture
def maxmemory(redis) -> Iterator[callable]:
    """set(bytes) sets the Redis' maxmemory (noeviction); put back to none after the test."""
    redis.config_set("maxmemory-policy", "noeviction")

    def set_to(limit: int) -> None:
        redis.config_set("maxmemory", str(limit))

    try:
        yield set_to
    finally:
        redis.config_set("maxmemory", "0")


def full_budget(redis) -> int:
    """A maxmemory whose budget (85%) Redis is already past, with room left below it: what
    Redis holds once it holds still (keys of earlier tests are freed in the background), at
    92% of the maxmemory, 8% past the budget and 8% below the limit."""
    return int(settled_used(redis) / 0.92)


def settled_used(redis, *, timeout: float = 15.0) -> int:
    """Redis' used memory once it moved less than 1% in half a second."""
    deadline = time.monotonic() + timeout
    last = redis_memory(redis).used
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = redis_memory(redis).used
        if abs(now - last) < last / 100:
            return now
        last = now
    raise AssertionError(f"Redis' memory did not settle in {timeout:g} s (last {last} bytes)")


def test_a_write_redis_refuses_for_its_maxmemory_writes_nothing_and_is_waited_out(
    frontier, redis, maxmemory, caplog
):
    frontier.add_seeds(["http://a.test/"])
    seeds = [f"http://a.test/{n}" for n in range(50)]
    maxmemory(redis_memory(redis).used - 100_000)  # past it: Redis refuses what adds
    with pytest.raises(
        redis_py.exceptions.OutOfMemoryError, match="command not allowed when used memory"
    ):
        frontier.add_seeds(seeds)

    threading.Timer(1.0, maxmemory, args=(0,)).start()  # memory frees a second later
    with caplog.at_level(logging.WARNING):
        # 50 new: the refused call had marked none of them seen
        assert with_redis_retry(lambda: frontier.add_seeds(seeds)) == (50, 0)
    stats = frontier.stats()
    assert (stats["requests"], stats["queued"]) == (51, 51)
    assert caplog.records and all(
        r.levelno == logging.WARNING and "Redis full" in r.getMessage() and not r.exc_info
        for r in caplog.records
    )


@pytest.mark.django_db(transaction=True)
def test_a_crawl_waits_for_memory_saying_why_and_goes_on_when_it_frees(
    user, make_site, redis, maxmemory, caplog
):
    paths = [f"/p{n}" for n in range(30)]
    site = make_site(pages_site({"/": page(*paths), **{p: page() for p in paths}}))
    crawl = start_site_crawl(user, site)
    maxmemory(full_budget(redis))
    report: dict = {}
    with caplog.at_level(logging.INFO):
        worker = threading.Thread(
            target=lambda: report.update(run_slice(crawl.pk, "m1", budget_seconds=60))
        )
        worker.start()
        time.sleep(2.5)
        # Nothing fetched; the page and the API say why.
        assert site.paths() == [] and worker.is_alive()
        snapshot = live.snapshot(crawl)
        assert snapshot["end"]["reason"] == "memory"
        assert snapshot["end"]["line"].startswith("Waiting for Redis memory: it holds ")
        assert "85% of its maxmemory" in snapshot["end"]["line"]
        # The API says the same why; what Redis holds is read again, and may have moved.
        api = CrawlSerializer(crawl).data["waiting"]
        assert api["reason"] == "memory"
        assert _without_figure(api["line"]) == _without_figure(snapshot["end"]["line"])
        maxmemory(0)  # memory frees: the slice goes on by itself
        worker.join(timeout=60)
    assert not worker.is_alive() and report["reason"] == "done"
    assert sorted(site.paths()) == sorted(["/", *paths])
    stats = Frontier(crawl.pk).stats()
    assert (stats["requests"], stats["responses"], stats["queued"]) == (31, 31, 0)
    assert live.snapshot(crawl)["end"]["reason"] != "memory"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.RUNNING  # after_slice (not run here) finishes it
    services.crawl_cancel(crawl=crawl, user=user)


@pytest.mark.django_db(transaction=True)
def test_a_slice_on_a_redis_past_its_maxmemory_waits_without_an_error_and_finishes(
    user, make_site, redis, maxmemory, caplog
):
    """Past maxmemory, not only the budget: Redis refuses the slice's beats and snapshots too.
    None of it is an error in the worker's log; the slice job waits and then ends the crawl."""
    paths = [f"/p{n}" for n in range(20)]
    site = make_site(pages_site({"/": page(*paths), **{p: page() for p in paths}}))
    crawl = start_site_crawl(user, site)
    maxmemory(redis_memory(redis).used - 50_000)
    report: dict = {}
    with caplog.at_level(logging.INFO):
        worker = threading.Thread(target=lambda: report.update(slice_job(crawl.pk, "m2")))
        worker.start()
        time.sleep(2.5)
        assert site.paths() == [] and worker.is_alive()
        assert live.snapshot(crawl)["end"]["reason"] == "memory"
        maxmemory(0)
        worker.join(timeout=60)
    assert not worker.is_alive() and report["reason"] == "done"
    assert sorted(site.paths()) == sorted(["/", *paths])
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FINISHED
    assert (crawl.stats["requests"], crawl.stats["responses"]) == (21, 21)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.django_db(transaction=True)
def test_slices_redis_refuses_to_queue_are_a_warning_and_the_supervisor_queues_them_later(
    user, redis, maxmemory, caplog
):
    crawl = services.crawl_create(
        user=user, name="full", seeds=["http://127.0.0.1:9/"], obey_robots=False, slices=2
    )
    services.crawl_start(crawl=crawl, user=user)
    redis.delete(Frontier(crawl.pk).key("slices"))  # as if its slices had ended
    maxmemory(redis_memory(redis).used - 50_000)
    with caplog.at_level(logging.WARNING):
        after_slice(crawl.pk)  # a slice's successor
        assert supervise() == {"skipped": "Redis is full"}
    said = [r.getMessage() for r in caplog.records if r.name == "crawls.engine.jobs"]
    assert len(said) == 2 and said[0].startswith(
        f"crawl {crawl.pk}: Redis is full, 1 slice(s) not queued yet: command not allowed when "
        "used memory > 'maxmemory'."
    )
    assert said[1] == "supervisor: Redis is full (past its maxmemory); skipped until it frees"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert Frontier(crawl.pk).live_slices() == 0
    maxmemory(0)
    assert supervise()["slices_started"] == 2 and Frontier(crawl.pk).live_slices() == 2
    services.crawl_cancel(crawl=crawl, user=user)


@pytest.mark.django_db(transaction=True)
def test_past_the_budget_the_crawl_holding_the_memory_waits_and_a_small_one_beside_it_finishes(
    user, make_site, redis, maxmemory, caplog
):
    """Redis between crawlhub's budget and the stop mark, most of it held by a big crawl's
    queue: the big crawl claims nothing and says why; a small crawl, holding less than the
    running crawls' average, fetches every page and ends."""
    big_site = make_site(pages_site({"/": page()}))
    big = start_site_crawl(user, big_site, max_pages=100_000)
    frontier = Frontier(big.pk)
    for start in range(0, 60_000, 5_000):
        frontier.add_seeds([f"{big_site.url}/q{n}" for n in range(start, start + 5_000)])
    paths = [f"/p{n}" for n in range(30)]
    small_site = make_site(pages_site({"/": page(*paths), **{p: page() for p in paths}}))
    small = start_site_crawl(user, small_site)
    # No worker runs here: the slices are the two run_slice calls below. Their queued jobs
    # would have the big one end its turn for the small one's (crawls.engine.sharing).
    django_rq.get_queue("crawls").empty()
    limit = int(settled_used(redis) / 0.88)  # 88%: past the 85% budget, below the 92.5% mark
    maxmemory(limit)
    memory = redis_memory(redis)
    assert memory.full and not memory.stopped
    footprints = sharing.running_footprints()
    average = sharing.fair_share(footprints)
    assert footprints[big.pk] >= average > footprints[small.pk], footprints

    reports: dict = {}
    with caplog.at_level(logging.INFO):
        big_slice = threading.Thread(
            target=lambda: reports.update(big=run_slice(big.pk, "b1", budget_seconds=60))
        )
        big_slice.start()
        small_report = run_slice(small.pk, "s1", budget_seconds=60)
        # The small crawl was done while the big one waited, alive, having fetched nothing.
        assert small_report["reason"] == "done"
        assert sorted(small_site.paths()) == sorted(["/", *paths])
        assert big_slice.is_alive() and big_site.paths() == []
        waiting = live.snapshot(big)["end"]
        assert waiting["reason"] == "memory"
        assert "this crawl holds about" in waiting["line"]
        assert "at least the average of the 2 running crawls" in waiting["line"]
        assert "crawls holding less go on" in waiting["line"]
        api = CrawlSerializer(big).data["waiting"]  # read again: what Redis holds moved
        assert (api["reason"], _without_figure(api["line"])) == (
            waiting["reason"],
            _without_figure(waiting["line"]),
        )
        assert live.snapshot(small)["end"]["reason"] != "memory"
        assert CrawlSerializer(small).data["waiting"] == {"reason": "", "line": ""}
        services.crawl_cancel(crawl=big, user=user)
        big_slice.join(timeout=60)
    # Cancelled: its queue dropped, memory frees and the slice finds nothing left, or sees the
    # state first.
    assert not big_slice.is_alive() and reports["big"]["reason"] in ("cancelled", "done")
    assert big_site.paths() == []
    after_slice(small.pk)
    small.refresh_from_db()
    assert small.state == CrawlState.FINISHED
    assert (small.stats["requests"], small.stats["responses"]) == (31, 31)
    assert redis_memory(redis).used < limit  # Redis never reached its maxmemory
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def _without_figure(line: str) -> str:
    """A waiting line without what Redis held when it was read (it moves between two reads)."""
    return re.sub(r"it holds [0-9.]+ [KMG]?B", "it holds N", line)
