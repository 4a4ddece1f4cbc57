"""Work that always ends: a page that its slice cannot finish (its row refused, its slice dead
or stopped while holding it) comes back a bounded number of times, then goes to the failure
queue with the reason, and the crawl finishes. (Slices stopped on cancel and pause, on real
workers: tests/end_to_end/test_real_workers.py.)"""

from __future__ import annotations

import time

import django_rq
import pytest
from rq.job import Job, JobStatus

from crawlhub.http.rendering import LAUNCH_SECONDS
from crawlhub.redis.connections import get_redis
from crawls import services
from crawls.engine import jobs
from crawls.engine.crawl_settings import slice_seconds
from crawls.engine.frontier import SUPERVISOR_LOCK_KEY, Frontier
from crawls.engine.jobs import SLICE_WRITE_SECONDS
from crawls.engine.request import Request
from crawls.engine.retry import MAX_CRASHES
from crawls.engine.slices import run_slice
from crawls.models import CrawlState
from tests.support.crawling import database_refuses_pages, drive, start_site_crawl
from tests.support.sites import pages_site

pytestmark = pytest.mark.django_db


def page(*links: str, title: str = "page") -> str:
    anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
    return f"<html><head><title>{title}</title></head><body>{anchors}</body></html>"


def start(user, site, **options):
    return start_site_crawl(user, site, **{"threads": 2, "max_retries": 0, **options})


@pytest.mark.slow
def test_a_page_whose_row_the_database_refuses_is_failed_with_the_reason(
    user, make_site, quick_slices
):
    site = make_site(pages_site({"/": page("/a", "/refused", "/b"), "/a": page(), "/b": page()}))
    crawl = start(user, site)
    with database_refuses_pages("/refused"):
        crawl = drive(crawl, timeout=60)
    assert crawl.state == CrawlState.FINISHED
    assert sorted(crawl.pages.values_list("url", flat=True)) == [
        site.url + path for path in ("/", "/a", "/b")
    ]
    failure = crawl.failures.get()
    assert failure.url == site.url + "/refused"
    assert failure.last_error.startswith(f"given up after {MAX_CRASHES} tries to process it")
    assert "; the last error: " in failure.last_error
    assert "Error: this row is refused on purpose" in failure.last_error
    assert site.paths().count("/refused") == MAX_CRASHES  # fetched again, not forever
    stats = crawl.stats
    assert (stats["responses"], stats["failed"], stats["errors"], stats["retries"]) == (3, 1, 1, 0)
    assert stats["requests"] == 4 and Frontier(crawl.pk).is_done()


def test_a_request_comes_back_from_an_expired_lease_with_one_more_crash(frontier):
    frontier.add_seeds(["http://example.com/a"])
    for crashes in range(3):
        (claimed,) = frontier.claim(1, lease_seconds=0.001)
        assert claimed.crashes == crashes
        time.sleep(0.01)
        assert frontier.requeue_expired() == 1
    (claimed,) = frontier.claim(1, lease_seconds=60)
    assert claimed.crashes == 3
    assert frontier.release([claimed]) == 1  # handed back unfetched: not a crash
    (claimed,) = frontier.claim(1, lease_seconds=60)
    assert claimed == Request(url="http://example.com/a", crashes=3)
    stats = frontier.stats()
    assert stats["requests"] == 1 and stats["in_flight"] == 1 and stats["retries"] == 0


def test_a_request_that_crashed_too_many_slices_is_failed_without_a_fetch(
    user, make_site, quick_slices
):
    site = make_site(pages_site({"/": page(title="never fetched")}))
    crawl = start(user, site)
    frontier = Frontier(crawl.pk)
    for _ in range(MAX_CRASHES):  # MAX_CRASHES slices died holding it
        assert len(frontier.claim(1, lease_seconds=0.001)) == 1
        time.sleep(0.01)
        frontier.requeue_expired()
    run_slice(crawl.pk, "after-the-crashes", budget_seconds=5)
    crawl = drive(crawl, timeout=10)
    assert crawl.state == CrawlState.FAILED  # not one page got an answer
    assert site.paths() == []
    failure = crawl.failures.get()
    assert failure.url == site.url + "/" and failure.attempts == MAX_CRASHES
    assert failure.last_error == (
        f"given up after {MAX_CRASHES} tries to process it: each time its slice ended without "
        "finishing it (the worker died, or the slice was stopped or ran out of time)"
    )
    assert crawl.error.startswith(f"no page could be fetched: given up after {MAX_CRASHES} tries")


def test_a_slice_job_is_killed_after_its_budget_and_its_fetches_deadlines(
    user, settings, django_capture_on_commit_callbacks
):
    """RQ's job_timeout: long enough for the fetches a slice started at the end of its budget
    to run to their own deadlines (robots.txt, then the page: 3 x the crawl's timeout each),
    whatever that timeout; not hours more."""
    settings.CRAWLHUB_SLICE_SECONDS = 20
    slow = services.crawl_create(user=user, name="slow", seeds=["http://e.test/"], timeout=600)
    quick = services.crawl_create(
        user=user, name="quick", seeds=["http://e.test/"], timeout=1, obey_robots=False
    )
    with django_capture_on_commit_callbacks(execute=True):
        services.crawl_start(crawl=slow, user=user)
        services.crawl_start(crawl=quick, user=user)
    timeouts = {}
    for crawl in (slow, quick):
        job_ids = django_rq.get_queue("crawls").get_job_ids()
        (timeout,) = {
            Job.fetch(j, connection=get_redis()).timeout
            for j in job_ids
            if j.startswith(f"slice-{crawl.pk}-")
        }
        timeouts[crawl.name] = timeout
    assert timeouts["slow"] == 20 + (1800 + 2) + 1800 + SLICE_WRITE_SECONDS
    assert timeouts["quick"] == 20 + 3 + SLICE_WRITE_SECONDS


@pytest.mark.browser
def test_a_rendering_slice_runs_longer_and_its_job_timeout_counts_it(
    user, settings, django_capture_on_commit_callbacks
):
    """A slice of a crawl that renders crawls at least CRAWLHUB_RENDER_SLICE_SECONDS (its
    browser's start is paid once per slice); its job_timeout adds the browser's wait and
    launch to each page."""
    settings.CRAWLHUB_SLICE_SECONDS = 20
    settings.CRAWLHUB_RENDER_SLICE_SECONDS = 45
    settings.CRAWLHUB_BROWSER_PAGES = 4
    crawl = services.crawl_create(
        user=user,
        name="spa",
        seeds=["http://e.test/"],
        timeout=1,
        obey_robots=False,
        threads=4,
        render_javascript=True,
    )
    plain = services.crawl_create(user=user, name="plain", seeds=["http://e.test/"])
    assert slice_seconds(crawl) == 45 and slice_seconds(plain) == 20
    with django_capture_on_commit_callbacks(execute=True):
        services.crawl_start(crawl=crawl, user=user)
    (timeout,) = {
        Job.fetch(j, connection=get_redis()).timeout
        for j in django_rq.get_queue("crawls").get_job_ids()
    }
    assert timeout == 45 + 3 + 1 + LAUNCH_SECONDS + SLICE_WRITE_SECONDS


@pytest.mark.django_db(transaction=True)
def test_a_queued_slice_whose_job_is_gone_is_forgotten_and_replaced(user, redis):
    """A Redis failover can keep a slice's registration and lose the write that queued its job
    (asynchronous replication, in order): the supervisor does not wait an hour for it."""
    crawl = services.crawl_create(user=user, name="t", seeds=["http://127.0.0.1:9/"], slices=1)
    services.crawl_start(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    [first] = frontier.queued_slices()
    frontier.slice_register(["lost"], ttl=jobs.QUEUED_SLICE_TTL)
    assert frontier.live_slices() == 2

    # "lost" has no job: forgotten. The crawl's own slice has one: kept, and not replaced.
    assert jobs.supervise()["slices_started"] == 0
    assert frontier.queued_slices() == [first]

    redis.delete(Job.key_for(jobs.slice_job_id(first)))  # as a failover may lose it
    redis.delete(SUPERVISOR_LOCK_KEY)
    assert jobs.supervise()["slices_started"] == 1
    [queued] = frontier.queued_slices()
    assert queued != first
    assert Job.exists(jobs.slice_job_id(queued), connection=redis)


@pytest.mark.django_db(transaction=True)
def test_a_slice_that_starts_after_its_crawl_was_paused_leaves_no_slice_counted(user, redis):
    """A successor queued while the crawl ran, started once it was paused, returns at once; it
    must not stay registered for QUEUED_SLICE_TTL, or the resumed crawl's slices, counting it
    alive, would start no successor and the crawl would stall with its queue full (CI: a
    resumed crawl still running two minutes on, 236 queued, nothing in flight, "1 live
    slice" and no job)."""
    crawl = services.crawl_create(user=user, name="t", seeds=["http://127.0.0.1:9/"], slices=1)
    services.crawl_start(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    [queued] = frontier.queued_slices()
    services.crawl_pause(crawl=crawl, user=user)
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.PAUSED

    assert jobs.slice_job(crawl.pk, queued) == {"reason": "crawl paused"}
    assert frontier.live_slices() == 0

    services.crawl_resume(crawl=crawl, user=user)
    [resumed] = frontier.queued_slices()
    assert resumed != queued and frontier.live_slices() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ended", [JobStatus.FAILED, JobStatus.FINISHED, JobStatus.STOPPED])
def test_a_queued_slice_whose_job_ended_without_starting_is_forgotten_and_replaced(
    user, redis, ended
):
    """A slice job that failed before its slice began (its crawl's row not readable: "database
    is locked") never said it ended: the supervisor forgets it rather than count it alive for
    an hour, and starts another."""
    crawl = services.crawl_create(user=user, name="t", seeds=["http://127.0.0.1:9/"], slices=1)
    services.crawl_start(crawl=crawl, user=user)
    frontier = Frontier(crawl.pk)
    [first] = frontier.queued_slices()
    job = Job.fetch(jobs.slice_job_id(first), connection=redis)
    django_rq.get_queue("crawls").remove(job)
    job.set_status(ended)

    assert jobs.supervise()["slices_started"] == 1
    [queued] = frontier.queued_slices()
    assert queued != first and frontier.live_slices() == 1
