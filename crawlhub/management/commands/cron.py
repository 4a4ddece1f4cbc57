"""`manage.py cron [crawlhub.cron]`: the periodic jobs (crawlhub/cron.py), as django-rq's
`rqcron` runs them, but waiting out a Redis that went away (a restart, a Sentinel failover)
instead of exiting (crawlhub.processes.rqworker.CronScheduler). `up` runs it."""

import logging
from typing import Any

from django.core.management.base import CommandParser
from django_rq.management.commands import rqcron

from crawlhub.processes.rqworker import CronScheduler


class Command(rqcron.Command):
    help = "Run the periodic jobs (supervisor, schedules, proxy validation, webhook retries)"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "config_path",
            nargs="?",
            default="crawlhub.cron",
            help="the module registering the jobs (default: crawlhub.cron)",
        )
        parser.add_argument(
            "--logging-level",
            "-l",
            default="INFO",
            choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        )

    def handle(self, *args: Any, config_path: str, logging_level: str, **options: Any) -> None:
        scheduler = CronScheduler(logging_level=getattr(logging, logging_level))
        self.stdout.write(f"Loading cron configuration from {config_path}")
        scheduler.load_config_from_file(config_path)
        self.stdout.write(f"Starting cron scheduler with {len(scheduler.get_jobs())} jobs...")
        scheduler.start()
