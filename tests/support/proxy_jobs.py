"""Proxy imports and bulk actions run as background jobs (proxies/jobs.py). In tests that share
the test's transaction, the job is run the way the suite runs other jobs: its RQ function,
called in this process (run_job); the doors' answers are followed to the job's end."""

from __future__ import annotations

from django.test import Client

from proxies.jobs import run_job
from proxies.models import ProxyJob


def finish_jobs() -> list[ProxyJob]:
    """Run every job that is queued or running to its end, as workers would: run after run
    (each run hands over after jobs.RUN_SECONDS). The jobs, ended."""
    waiting = ProxyJob.objects.filter(state__in=[ProxyJob.State.QUEUED, ProxyJob.State.RUNNING])
    ended = []
    for job in waiting.order_by("pk"):
        while run_job(job.pk) == "more":
            pass
        job.refresh_from_db()
        assert job.ended, f"{job} is still {job.state}"
        ended.append(job)
    return ended


def import_on_the_page(client: Client, data: dict):
    """Post a list to the Import page as a browser would, let the job run, and open the page
    the answer sent the browser to (the job's progress, now its report)."""
    posted = client.post("/proxies/import", data)
    assert posted.status_code == 302, posted.content.decode()[:2000]
    assert posted["Location"].startswith("/proxies/jobs/"), posted["Location"]
    finish_jobs()
    return client.get(posted["Location"])


def import_by_api(client: Client, data: dict, **auth):
    """(the API's answer to an import, and the job's status once it ended, with its report)."""
    answer = client.post("/api/proxies/import/", data, content_type="application/json", **auth)
    assert answer.status_code == 202, answer.content
    finish_jobs()
    return answer, client.get(answer.json()["status_url"], **auth)
