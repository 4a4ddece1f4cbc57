"""A crawl's log (its audit trail and what its workers did), and the trail of deleted crawls."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from crawls.models.crawls import Crawl, CrawlState


class CrawlEvent(models.Model):
    """What happened to a crawl, and when: its log. Two kinds of line in one timeline:
    - the audit trail: who did what to it (created, paused, a host held...), with the user,
      written by the services; never removed while the crawl exists;
    - what its workers did (a slice, a host slowed or parked, a login, errors, retries given
      up), with no user, written by the engine (crawls/engine/crawl_log.py) per slice and per
      event, never per page; kept bounded (crawl_log.trim)."""

    class Kind(models.TextChoices):
        CREATED = "created"
        STARTED = "started"
        PAUSED = "paused"
        RESUMED = "resumed"
        CANCELLED = "cancelled"
        FINISHED = "finished"
        FAILED = "failed"
        RETRIED = "retried"
        SEEDS_ADDED = "seeds_added"
        SITEMAP = "sitemap"  # a sitemap could not be read whole: detail says why
        HOST_HELD = "host_held"  # detail: the host and until when
        HOST_RELEASED = "host_released"  # by a user, or a hold or parking that ended
        HOST_DROPPED = "host_dropped"  # detail: the host and how many requests
        EDITED = "edited"  # a draft's settings: detail names each field changed
        CHANGED = "changed", "Settings changed"  # while it ran: detail says "field: old -> new"
        # Entered again by the owner, or bound by an upgrade: detail names kinds and origins.
        CREDENTIALS = "credentials", "Credentials"
        # What the workers did (crawls/engine/crawl_log.py):
        SLICE = "slice", "Slice"  # a slice started fetching, or ended: pages, why
        SLOWED = "slowed", "Host slowed"  # a 429/503 push-back, or back to its pace
        PARKED = "parked", "Host parked"  # none of its requests got an answer for a while
        LOGIN = "login", "Login"  # logged in, session renewed, or the login failed
        ERROR = "error", "Errors"  # requests without an answer (or retried): how many, why
        GAVE_UP = "gave_up", "Retries given up"  # to the failure queue: how many, why
        STOPPED = "stopped", "Slices stopped"  # still running after a pause or cancel

    class Level(models.TextChoices):
        INFO = "info"
        WARNING = "warning"
        ERROR = "error"

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=Kind)
    level = models.CharField(max_length=7, choices=Level, default=Level.INFO)
    host = models.CharField(max_length=255, blank=True)  # the host it is about, if one
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    detail = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]
        # The log's screens (newest first, by level) and its trimming (per level).
        indexes = [models.Index(fields=["crawl", "level", "id"], name="crawlevent_level")]

    def __str__(self) -> str:
        return f"{self.kind} {self.at:%Y-%m-%d %H:%M:%S}"


class CrawlDeletion(models.Model):
    """The audit trail of deleted crawls: a crawl's own trail goes with it."""

    crawl_id = models.PositiveIntegerField(db_index=True)
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    state = models.CharField(max_length=10, choices=CrawlState)  # when it was deleted
    pages = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"crawl #{self.crawl_id} {self.name} deleted {self.at:%Y-%m-%d %H:%M:%S}"
