"""Periodic jobs, run by `manage.py cron` (started by `up`;
crawlhub.processes.rqworker.CronScheduler).

Each job is named by its function's dotted path, as Django names what it loads (INSTALLED_APPS,
ROOT_URLCONF): the apps own their jobs and crawlhub never imports an app. rq's cron.register
takes the function itself (it names the job by the function's module and name), so the names
are resolved here, with Django's import_string.
"""

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string
from rq import cron


def register(job: str, queue: str, **options: Any) -> None:
    """Register the function at the dotted path `job` on rq's cron table."""
    cron.register(import_string(job), queue, **options)


register(
    "crawls.engine.jobs.supervise",
    "control",
    interval=settings.CRAWLHUB_SUPERVISOR_SECONDS,
    job_timeout=120,
    result_ttl=60,
    name="crawl supervisor",
)

# Proxy validation: scores, latency, anonymity; new proxies enter the pools only through it.
register(
    "proxies.validation.validate_proxies",
    "control",
    interval=settings.PROXY_VALIDATE_EVERY,
    job_timeout=1800,
    result_ttl=600,
    name="proxy validation",
)

# Scheduled crawls: each due schedule starts one new crawl (claimed, so never twice).
register(
    "crawls.schedules.run_due_schedules_job",
    "control",
    interval=settings.CRAWLHUB_SCHEDULES_SECONDS,
    job_timeout=300,
    result_ttl=600,
    name="scheduled crawls",
)
# Webhook deliveries whose retry RQ's scheduler did not run in time.
register(
    "crawls.webhooks.deliver_overdue_job",
    "control",
    interval=60,
    job_timeout=120,
    result_ttl=600,
    name="webhook retries",
)
# Alert e-mails whose retry RQ's scheduler did not run in time (the same sweep as webhooks').
register(
    "crawls.alert_checks.send_overdue_mail_job",
    "control",
    interval=60,
    job_timeout=120,
    result_ttl=600,
    name="alert e-mail retries",
)
# Proxy imports and bulk actions whose worker died: taken over where they stopped.
register(
    "proxies.jobs.resume_stalled",
    "control",
    interval=60,
    job_timeout=60,
    result_ttl=600,
    name="stalled proxy jobs",
)
# Alert rules checked against the running crawls' counters (never on the crawl path).
register(
    "crawls.alert_checks.check_alerts_job",
    "control",
    interval=settings.CRAWLHUB_ALERTS_SECONDS,
    job_timeout=300,
    result_ttl=600,
    name="alert checks",
)
