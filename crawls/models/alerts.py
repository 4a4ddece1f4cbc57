"""Alerts: the rules watched on crawls, each episode of a rule's condition, and its e-mails."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from crawls.models.channels import Channel
from crawls.models.crawls import Crawl
from crawls.models.deliveries import Delivery


class AlertKind(models.TextChoices):
    """What an alert rule watches (crawls/alert_checks.py evaluates them)."""

    ERROR_RATE = "error_rate", "Error rate over N% in M minutes"
    NO_PROGRESS = "no_progress", "No progress for M minutes"
    HOST_PARKED = "host_parked", "A host parked"
    ENDED_BADLY = "ended_badly", "Ended abnormally (cancelled, failed or stalled)"


class AlertRule(models.Model):
    """A condition watched on one crawl, or on every crawl of a channel, and who is told."""

    channel = models.ForeignKey(
        Channel, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules"
    )
    crawl = models.ForeignKey(
        Crawl, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules"
    )
    kind = models.CharField(max_length=20, choices=AlertKind)
    # N of "error rate over N%", 1..100; M of "in M minutes" and "no progress for M minutes".
    percent = models.PositiveSmallIntegerField(null=True, blank=True)
    minutes = models.PositiveIntegerField(null=True, blank=True)
    # Addresses told by e-mail; the webhooks of the crawl (or channel) that want "alert" are
    # told too.
    emails = models.JSONField(default=list, blank=True)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(channel__isnull=False, crawl__isnull=True)
                | models.Q(channel__isnull=True, crawl__isnull=False),
                name="alert_rule_channel_xor_crawl",
            )
        ]

    def __str__(self) -> str:
        return f"{self.condition} ({self.target})"

    @property
    def target(self) -> str:
        return f"channel {self.channel}" if self.channel_id else f"crawl {self.crawl}"

    @property
    def condition(self) -> str:
        """The condition in words, with its figures."""
        if self.kind == AlertKind.ERROR_RATE:
            return f"Error rate over {self.percent}% in {self.minutes} min"
        if self.kind == AlertKind.NO_PROGRESS:
            return f"No progress for {self.minutes} min"
        return self.get_kind_display()


class Alert(models.Model):
    """One episode of a rule's condition on one crawl: fired once when it began, resolved once
    when it cleared. `subject` tells episodes of one rule apart: the host parked, the way a
    crawl ended ("cancelled", "failed", "stalled"), or "" for the crawl as a whole."""

    rule = models.ForeignKey(
        AlertRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=20, choices=AlertKind)
    subject = models.CharField(max_length=255, blank=True)
    # What happened, which crawl, the figures and when, in one line each way.
    line = models.CharField(max_length=500)
    resolved_line = models.CharField(max_length=500, blank=True)
    figures = models.JSONField(default=dict, blank=True)
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Each attempt at an e-mail for it: {"at", "notice", "to", "error"}; AlertMail holds the
    # e-mail itself, with its retries.
    mail_log = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [
            # One open episode per rule, crawl and subject: the evaluator fires it only once.
            models.UniqueConstraint(
                fields=["rule", "crawl", "subject"],
                condition=models.Q(resolved_at__isnull=True),
                name="alert_one_open_episode",
            )
        ]

    def __str__(self) -> str:
        return self.line

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class AlertMail(Delivery):
    """One notice of an alert (fired, resolved) e-mailed to its rule's addresses, tried again as
    a webhook delivery is (crawls/deliveries.py)."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="mails")
    notice = models.CharField(max_length=10)  # "fired" | "resolved"

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.notice} e-mail of alert {self.alert_id}"
