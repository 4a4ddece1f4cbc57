"""Schedules: a crawl re-run on a cron expression."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from crawls.models.crawls import Crawl


class CrawlSchedule(models.Model):
    """A crawl re-run on a cron expression: each run is a new crawl copied from the template."""

    template = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(
        max_length=100, help_text="Five fields: minute hour day-of-month month day-of-week."
    )
    enabled = models.BooleanField(default=True)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["next_run_at", "id"]

    def __str__(self) -> str:
        return f"{self.template.name} ({self.cron})"

    def get_absolute_url(self) -> str:
        return reverse("schedule_detail", args=[self.pk])
