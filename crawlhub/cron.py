"""Periodic jobs, run by `manage.py cron` (started by `up`;
crawlhub.processes.rqworker.CronScheduler)."""

from django.conf import settings
from rq import cron

from crawls.alert_checks import check_alerts_job, send_overdue_mail_job
from crawls.engine.jobs import supervise
from crawls.schedules import run_due_schedules_job
from crawls.webhooks import deliver_overdue_job
from proxies.jobs import resume_stalled as resume_stalled_proxy_jobs
from proxies.validation import validate_proxies

cron.register(
    supervise,
    "control",
    interval=settings.CRAWLHUB_SUPERVISOR_SECONDS,
    job_timeout=120,
    result_ttl=60,
    name="crawl supervisor",
)

# Proxy validation: scores, latency, anonymity; new proxies enter the pools only through it.
cron.register(
    validate_proxies,
    "control",
    interval=settings.PROXY_VALIDATE_EVERY,
    job_timeout=1800,
    result_ttl=600,
    name="proxy validation",
)

# Scheduled crawls: each due schedule starts one new crawl (claimed, so never twice).
cron.register(
    run_due_schedules_job,
    "control",
    interval=settings.CRAWLHUB_SCHEDULES_SECONDS,
    job_timeout=300,
    result_ttl=600,
    name="scheduled crawls",
)
# Webhook deliveries whose retry RQ's scheduler did not run in time.
cron.register(
    deliver_overdue_job,
    "control",
    interval=60,
    job_timeout=120,
    result_ttl=600,
    name="webhook retries",
)
# Alert e-mails whose retry RQ's scheduler did not run in time (the same sweep as webhooks').
cron.register(
    send_overdue_mail_job,
    "control",
    interval=60,
    job_timeout=120,
    result_ttl=600,
    name="alert e-mail retries",
)
# Proxy imports and bulk actions whose worker died: taken over where they stopped.
cron.register(
    resume_stalled_proxy_jobs,
    "control",
    interval=60,
    job_timeout=60,
    result_ttl=600,
    name="stalled proxy jobs",
)
# Alert rules checked against the running crawls' counters (never on the crawl path).
cron.register(
    check_alerts_job,
    "control",
    interval=settings.CRAWLHUB_ALERTS_SECONDS,
    job_timeout=300,
    result_ttl=600,
    name="alert checks",
)
