"""Webhooks: URLs told when a crawl ends or an alert fires, and each delivery to them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from crawls.models.channels import Channel
from crawls.models.crawls import Crawl
from crawls.models.deliveries import Delivery


class WebhookEvent(models.TextChoices):
    FINISHED = "finished", "Crawl finished"
    FAILED = "failed", "Crawl failed"
    CANCELLED = "cancelled", "Crawl cancelled"
    ALERT = "alert", "Alert fired or resolved"


class DeliveryEvent(models.TextChoices):
    """What a delivery tells: a crawl's end or an alert (WebhookEvent), or a test sent from the
    page."""

    FINISHED = "finished", "Crawl finished"
    FAILED = "failed", "Crawl failed"
    CANCELLED = "cancelled", "Crawl cancelled"
    ALERT = "alert", "Alert fired or resolved"
    TEST = "test", "Test delivery"


def _all_events() -> list[str]:
    return list(WebhookEvent.values)


class Webhook(models.Model):
    """A URL that gets a signed POST when a crawl of its channel (or the one crawl) ends."""

    channel = models.ForeignKey(
        Channel, on_delete=models.CASCADE, null=True, blank=True, related_name="webhooks"
    )
    crawl = models.ForeignKey(
        Crawl, on_delete=models.CASCADE, null=True, blank=True, related_name="webhooks"
    )
    url = models.URLField(max_length=2000)
    # Kept in clear because every delivery is signed with it; shown once, at creation.
    secret = models.CharField(max_length=100)
    events = models.JSONField(default=_all_events)
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
                name="webhook_channel_xor_crawl",
            )
        ]

    def __str__(self) -> str:
        return self.url

    def get_absolute_url(self) -> str:
        return reverse("webhook_detail", args=[self.pk])

    @property
    def target(self) -> str:
        return f"channel {self.channel}" if self.channel_id else f"crawl {self.crawl}"


class WebhookDelivery(Delivery):
    """One event sent to one webhook: every attempt, and how it ended."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    crawl = models.ForeignKey(
        Crawl, on_delete=models.SET_NULL, null=True, blank=True, related_name="deliveries"
    )
    event = models.CharField(max_length=20, choices=DeliveryEvent)
    payload = models.JSONField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_snippet = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} -> {self.webhook}"
