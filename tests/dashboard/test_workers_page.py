"""The Workers page: live RQ workers with their queues, queue lengths, and failed jobs, whose
descriptions and errors only staff see. Real RQ workers and jobs on the test Redis."""

from __future__ import annotations

import re

import django_rq
import pytest
from rq import SimpleWorker, Worker

from crawlhub.redis.connections import get_redis

pytestmark = pytest.mark.django_db

DESCRIPTION = "crawl 42 slice s-7f3a (bob's crawl)"
ERROR = "RuntimeError: could not fetch http://intranet.example/admin?token=t0k3n"


def explode(message: str) -> None:
    """A job that fails, as a slice that hit a bug would."""
    raise RuntimeError(message)


@pytest.fixture
def live_worker():
    """A worker registered in Redis as RQ does on start (birth), unregistered after."""
    worker = Worker(["control", "crawls"], connection=get_redis(), name="tester-1")
    worker.register_birth()
    yield worker
    worker.register_death()


@pytest.fixture
def failed_job():
    """A job that really ran on a burst worker and failed, in the default queue's failed
    registry; and one job left waiting in the crawls queue."""
    queue = django_rq.get_queue("default")
    job = queue.enqueue(explode, ERROR.removeprefix("RuntimeError: "), description=DESCRIPTION)
    SimpleWorker([queue], connection=queue.connection, name="burst-1").work(burst=True)
    job.refresh()
    assert job.is_failed, f"the job should have failed, it is {job.get_status()}"
    assert job.id in queue.failed_job_registry
    django_rq.get_queue("crawls").enqueue(explode, "never run")
    return job


def queue_row(page: str, name: str) -> tuple[int, int, int]:
    """(queued, running, failed) from the page's Queues table."""
    found = re.search(rf"<tr><td>{name}</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td></tr>", page)
    assert found, f"no row for queue {name!r} in the Queues table"
    return tuple(int(n) for n in found.groups())


def test_staff_see_live_workers_queue_counts_and_failed_jobs(staff_client, live_worker, failed_job):
    page = staff_client.get("/workers/").content.decode()
    assert re.search(r"Live workers <span class=\"count\">1</span>", page)
    assert "<td>tester-1</td>" in page and "<td>control, crawls</td>" in page
    assert "burst-1" not in page  # the burst worker died when its queue ran dry
    assert queue_row(page, "default") == (0, 0, 1)
    assert queue_row(page, "crawls") == (1, 0, 0)
    assert queue_row(page, "control") == (0, 0, 0)
    assert f"<td>{DESCRIPTION}</td><td>default</td>".replace("'", "&#x27;") in page
    assert ERROR in page  # the traceback's last line
    assert "Open the RQ dashboard" in page


def test_other_users_see_counts_but_no_failed_job_details(user_client, live_worker, failed_job):
    page = user_client.get("/workers/").content.decode()
    assert "<td>tester-1</td>" in page and "<td>control, crawls</td>" in page
    assert queue_row(page, "default") == (0, 0, 1)
    for secret in ("s-7f3a", "bob", "intranet.example", "t0k3n", "RuntimeError", "Traceback"):
        assert secret not in page, f"a non-staff user sees {secret!r} of a failed job"
    assert "1 failed job. Which jobs and their errors are shown to staff only." in page
    assert "Open the RQ dashboard" not in page


def test_no_failed_jobs_says_so(user_client, staff_client, live_worker):
    for client in (user_client, staff_client):
        page = client.get("/workers/").content.decode()
        assert "No failed jobs." in page
        assert queue_row(page, "default") == (0, 0, 0)
