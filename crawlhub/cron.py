"""Periodic jobs, run by `manage.py rqcron crawlhub.cron` (started by `up`)."""

from django.conf import settings
from rq import cron

from crawls.jobs import supervise

cron.register(
    supervise,
    "control",
    interval=settings.CRAWLHUB_SUPERVISOR_SECONDS,
    job_timeout=120,
    result_ttl=60,
    name="crawl supervisor",
)

from proxies.jobs import validate_proxies  # noqa: E402

# Proxy validation: scores, latency, anonymity; new proxies enter the pools only through it.
cron.register(
    validate_proxies,
    "control",
    interval=settings.PROXY_VALIDATE_EVERY,
    job_timeout=1800,
    result_ttl=600,
    name="proxy validation",
)
