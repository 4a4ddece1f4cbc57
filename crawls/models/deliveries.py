"""What every delivery (a webhook's POST, an alert's e-mail) keeps: its attempts, and how it
ended."""

from __future__ import annotations

from django.db import models


class Delivery(models.Model):
    """Something sent with retries (crawls/deliveries.py): its attempts, and how it ended."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"

    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    # Each attempt: {"at", "error", "ms"}, and what the kind adds (a webhook's "status_code").
    log = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        abstract = True
