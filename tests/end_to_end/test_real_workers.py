"""Crawls on real RQ worker processes: kill -9, cancel, Redis restarts (pause and resume on real
workers: tests/engine/test_pause_resume.py); slices stuck in a page, stopped on cancel and pause.

Nothing is lost: the crawl ends with exactly the expected pages and exact counters.
"""

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import redis
from rq import Queue, Worker
from rq.registry import StartedJobRegistry

from crawlhub.processes import launcher
from crawlhub.redis.connections import get_redis
from crawls import services
from crawls.engine.frontier import Frontier
from crawls.engine.retry import MAX_CRASHES
from crawls.models import CrawlState
from tests.support import processes
from tests.support.crawling import (
    FAST_WORKERS,
    ROOT,
    WorkerFleet,
    assert_exact,
    assert_refetched_only_held,
    database_refuses_pages,
    in_flight_paths,
    start_sample_crawl,
    wait_for_progress,
    wait_for_state,
)
from tests.support.sites import Response, free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.mark.chaos
def test_kill_9_of_workers_again_and_again_loses_nothing(user, make_site, fleet):
    site, server, crawl = start_sample_crawl(user, make_site, pages=1500, delay=0.004)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    rng = random.Random(5)
    held = []  # what was claimed and not completed right after each kill
    for round_ in range(4):
        wait_for_progress(crawl, 150 * (round_ + 1), fleet)
        fleet.kill9(fleet.busy_worker(rng))
        held.append(in_flight_paths(crawl))  # before the dead slice's leases run out (3 s)
        fleet.keep_alive()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180, fleet=fleet)
    assert_exact(crawl, site)
    assert fleet.killed_horses >= 2, "the kills hit no running slice"
    assert_refetched_only_held(crawl, site, server, held)


def test_cancel_stops_for_good_and_keeps_the_pages(user, make_site, fleet):
    site, server, crawl = start_sample_crawl(user, make_site, pages=1200, delay=0.01)
    fleet.start_worker()
    fleet.start_cron()
    wait_for_progress(crawl, 50, fleet)
    services.crawl_cancel(crawl=crawl, user=user)
    time.sleep(2)
    seen = len(server.log)
    time.sleep(2)
    assert len(server.log) == seen
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.CANCELLED
    assert crawl.pages.count() >= 50
    assert Frontier(crawl.pk).is_done()


@pytest.mark.chaos
def test_redis_restarted_mid_crawl_resumes_and_finishes_exactly(
    user, make_site, fleet, redis_server
):
    site, server, crawl = start_sample_crawl(user, make_site, pages=1000, delay=0.004)
    fleet.start_worker()
    fleet.start_worker()
    fleet.start_cron()
    wait_for_progress(crawl, 200, fleet)
    redis_server.stop()
    time.sleep(1.5)
    redis_server.start()
    crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=180, fleet=fleet)
    assert_exact(crawl, site)


def test_a_worker_waits_for_a_redis_that_went_away_mid_job_instead_of_exiting(tmp_path):
    """RQ itself retries only its wait for a job: a worker whose job ended while Redis was
    away exited within 3 s. Ours waits, records the job once Redis is back at the same
    address, and takes the next one."""
    with _worker_on_a_redis_of_its_own(tmp_path, "default") as (server, worker, log):
        _outlive_an_outage(server, worker, log)


@contextlib.contextmanager
def _worker_on_a_redis_of_its_own(tmp_path, *args: str):
    """A worker process (`manage.py rqworker *args`) on an embedded Redis of its own, its
    output in a log: yields (server, worker, log); stops the worker, then the Redis."""
    server = launcher.EmbeddedRedis(tmp_path / "redis", port=free_port())
    server.start()
    log = tmp_path / "worker.log"
    env = {**os.environ, "REDIS_URL": server.url, "CRAWLHUB_DATA_DIR": str(tmp_path / "data")}
    try:
        with log.open("w") as out:
            worker = processes.spawn(
                [sys.executable, "manage.py", "rqworker", *args],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            yield server, worker, log
        finally:
            processes.stop(worker)  # before Redis: a stopping worker says goodbye to Redis
    finally:
        server.stop()


def _outlive_an_outage(server: launcher.EmbeddedRedis, worker, log) -> None:
    queue = Queue("default", connection=redis.Redis.from_url(server.url))
    deadline = time.monotonic() + 60
    while Worker.count(connection=queue.connection) < 1:
        assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    job = queue.enqueue("time.sleep", 2)
    while job.get_status() != "started":
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)

    os.kill(server.process.pid, signal.SIGKILL)  # the job ends while Redis is away
    server.process.wait()
    away = time.monotonic() + 8
    while time.monotonic() < away and worker.poll() is None:
        time.sleep(0.1)
    assert worker.poll() is None, f"the worker exited while Redis was away:\n{log.read_text()}"
    server.restart()

    deadline = time.monotonic() + 30
    while job.get_status() != "finished":
        assert time.monotonic() < deadline, f"job {job.get_status()}:\n{log.read_text()}"
        time.sleep(0.05)
    after = queue.enqueue("time.sleep", 0)
    while after.get_status() != "finished":
        assert time.monotonic() < deadline, f"next job {after.get_status()}:\n{log.read_text()}"
        time.sleep(0.05)
    assert worker.poll() is None

    # Asked to stop while Redis is away, it waits for nothing: Redis may be gone for good.
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=15)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the worker did not stop:\n{log.read_text()}") from None


def test_the_scheduler_a_worker_forks_outlives_a_redis_error_and_runs_delayed_jobs(tmp_path):
    """RQ's scheduler process (delayed jobs: webhook retries) ended on the first Redis error its
    connection's retries did not cover, and its worker started another only at its next
    maintenance, ten minutes later: a zombie meanwhile, and no delayed job enqueued (a crawl
    under `up` left one behind when Redis was killed). Ours goes on. The error here is its own
    key made a string: WRONGTYPE on every heartbeat until the key is gone."""
    with _worker_on_a_redis_of_its_own(tmp_path, "--with-scheduler", "default") as started:
        server, worker, log = started
        _outlive_a_redis_error(redis.Redis.from_url(server.url), worker, log)


def _outlive_a_redis_error(connection: redis.Redis, worker, log) -> None:
    deadline = time.monotonic() + 60

    def wait_for(what: str, done) -> None:
        while not done():
            assert worker.poll() is None, f"the worker exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no {what}:\n{log.read_text()}"
            time.sleep(0.05)

    started = re.compile(r"Scheduler for default started with PID (\d+)")
    wait_for(
        "scheduler", lambda: started.search(log.read_text()) and connection.keys("rq:scheduler:*")
    )
    pid = int(started.search(log.read_text())[1])
    [key] = connection.keys("rq:scheduler:*")

    connection.set(key, "in the way")
    wait_for(
        "Redis error",
        lambda: re.search(
            r"Scheduler: Redis failed \(ResponseError: .* WRONGTYPE", log.read_text()
        ),
    )
    time.sleep(1.5)  # more heartbeats, and as many errors
    assert processes.alive(pid), f"the scheduler ended:\n{log.read_text()}"
    connection.delete(key)

    job = Queue("default", connection=connection).enqueue_in(timedelta(seconds=1), "time.sleep", 0)
    wait_for("delayed job run", lambda: job.get_status() == "finished")
    assert processes.alive(pid), f"the scheduler ended:\n{log.read_text()}"
    assert connection.type(key) == b"hash"  # its heartbeats again
    assert "raised an exception" not in log.read_text()


def test_a_page_whose_row_is_refused_ends_in_the_failure_queue_and_the_crawl_finishes(
    user, make_site, fleet
):
    """The database refuses one page's row (as SQLite refused a 2 GB body): on real workers,
    the page is fetched MAX_CRASHES times, then failed with the database's error; the crawl
    ends. It used to be fetched again and again, the crawl running until cancelled."""
    links = "".join(f'<a href="/p/{n}">x</a>' for n in range(20)) + '<a href="/refused">x</a>'
    site = make_site(lambda r: Response(body=links if r.path == "/" else "<title>leaf</title>"))
    crawl = services.crawl_create(
        user=user,
        name="refused",
        seeds=[site.url + "/"],
        obey_robots=False,
        threads=4,
        slices=2,
        max_retries=0,
    )
    with database_refuses_pages("/refused"):
        fleet.start_worker()
        fleet.start_worker()
        fleet.start_cron()
        services.crawl_start(crawl=crawl, user=user)
        crawl = wait_for_state(crawl, {CrawlState.FINISHED}, timeout=120, fleet=fleet)
    assert crawl.pages.count() == 21 and site.paths().count("/refused") == MAX_CRASHES
    failure = crawl.failures.get()
    assert failure.url == site.url + "/refused"
    assert "this row is refused on purpose" in failure.last_error
    assert crawl.stats["failed"] == 1 and crawl.stats["responses"] == 21


def crawl_jobs_running(crawl) -> list[str]:
    """The crawl's slice jobs that RQ has started and not seen end."""
    started = StartedJobRegistry("crawls", connection=get_redis()).get_job_ids(cleanup=False)
    return [job_id for job_id in started if job_id.startswith(f"slice-{crawl.pk}-")]


@pytest.mark.parametrize("action", ["cancel", "pause"])
def test_slices_stuck_in_a_page_are_stopped_within_seconds_of_a_cancel_or_pause(
    user, make_site, action
):
    """Pages under /stuck make their slice's work horse spin in a regex holding the GIL
    (tests.support.stuck_worker): the slice cannot even see the cancel. Its worker kills it a
    grace period (CRAWLHUB_STOP_GRACE_SECONDS) after the cancel or pause."""
    # Both workers stuck: a slice whose lease ran out hands its stuck page to the other.
    stuck = ("/stuck/1", "/a", "/stuck/2", "/b")
    _stop_stuck_slices(
        user, make_site, action, stuck, lambda paths: any(p.startswith("/stuck") for p in paths)
    )


@pytest.mark.parametrize("action", ["cancel", "pause"])
def test_a_slice_stuck_holding_a_lock_on_its_crawl_is_stopped_by_a_cancel_or_pause(
    user, make_site, action
):
    """/stuck/locked makes its slice's work horse spin holding a lock on the crawl's row (on
    SQLite the database's write lock), as a slice stuck while it wrote its pages did in a busy
    run; the other slice, given the page when the first one's lease ran out, waits for that
    lock. The cancel or pause writes the crawl's row: it now waits for the slices' end, and
    ends; it waited for the lock first, and stopped the slices only after, which was never
    (SQLite gave up after 30 s: "database is locked")."""
    stuck = ("/a", "/stuck/locked", "/b", "/c")
    _stop_stuck_slices(user, make_site, action, stuck, lambda paths: "/stuck/locked" in paths)


def _stop_stuck_slices(user, make_site, action, links, got_stuck) -> None:
    hub = "".join(f'<a href="{path}">x</a>' for path in links)
    site = make_site(lambda r: Response(body=hub if r.path == "/" else "<title>leaf</title>"))
    crawl = services.crawl_create(
        user=user,
        name="stuck",
        seeds=[site.url + "/"],
        obey_robots=False,
        threads=2,
        slices=2,
        max_retries=0,
    )
    fleet = WorkerFleet(
        env=FAST_WORKERS, worker_class="tests.support.stuck_worker.StuckPagesWorker"
    )
    try:
        fleet.start_worker()
        fleet.start_worker()
        fleet.start_cron()
        services.crawl_start(crawl=crawl, user=user)
        deadline = time.monotonic() + 120
        while not (got_stuck(site.paths()) and len(crawl_jobs_running(crawl)) == 2):
            assert time.monotonic() < deadline, f"no slice got stuck: {site.paths()}"
            time.sleep(0.1)
        time.sleep(2)  # stuck for a while: nothing ends it by itself
        horses = {pid for worker in fleet.alive() for pid in processes.children(worker.pid)}
        assert crawl_jobs_running(crawl) and horses, "no slice is stuck"

        asked = time.monotonic()
        getattr(services, f"crawl_{action}")(crawl=crawl, user=user)
        while crawl_jobs_running(crawl) or any(processes.alive(pid) for pid in horses):
            assert time.monotonic() - asked < 30, "the stuck slices are still running after 30 s"
            time.sleep(0.05)
        idle = time.monotonic() - asked
        expected = CrawlState.CANCELLED if action == "cancel" else CrawlState.PAUSED
        crawl = wait_for_state(crawl, {expected}, timeout=10)
        settled = time.monotonic() - asked
        print(
            f"{action}: stuck slices stopped in {idle:.1f} s, crawl {crawl.state} in "
            f"{settled:.1f} s"
        )
        assert idle < 10 and settled < 10
        stats = Frontier(crawl.pk).stats()
        assert stats["in_flight"] == 0
        if action == "pause":  # what the stopped slices held is queued again
            assert stats["queued"] >= 2 and crawl.pages.count() + stats["queued"] == 5
    finally:
        fleet.stop()
