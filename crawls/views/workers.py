"""The Workers page: live RQ workers, queue lengths and failed jobs (crawlhub.processes.workers
reads them). It lives in the crawls app because what someone who is not staff may see of a
worker's job is decided by the crawl it works for: only their own crawls' jobs are named."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from crawlhub.processes import workers
from crawlhub.redis import redis_config
from crawls.services import visible_crawls


def workers_page(request: HttpRequest) -> HttpResponse:
    """Live workers, queue lengths and failed jobs. A failed job's description and error name
    other people's crawls, URLs and tracebacks: staff only; everyone else sees the counts, and
    what each worker runs only when it is for one of their own crawls."""
    overview = workers.overview(with_failed=request.user.is_staff)
    if not request.user.is_staff:
        running = {w["job_crawl"] for w in overview["workers"] if w["job_crawl"] is not None}
        own = visible_crawls(request.user).filter(pk__in=running).values_list("pk", flat=True)
        workers.hide_jobs(overview, shown_crawls=set(own))
        workers.hide_hosts(overview)
    failed_count = sum(queue["failed"] for queue in overview["queues"])
    # Where the workers meet, for staff: address, TLS, user and db; never the password.
    redis_where = redis_config.where(settings.REDIS_URL) if request.user.is_staff else ""
    return render(
        request,
        "crawls/workers.html",
        {"nav": "workers", "failed_count": failed_count, "redis_where": redis_where, **overview},
    )
