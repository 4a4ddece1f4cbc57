"""The parts of a crawl's request queue kept in the database: what spilled over from Redis,
and the failure queue."""

from __future__ import annotations

from django.db import models

from crawls.models.crawls import Crawl


class SpilledRequest(models.Model):
    """A queued request of a crawl whose queue outgrew its window in Redis
    (CRAWLHUB_FRONTIER_WINDOW): the lowest-ranked part of the queue waits here, one row per
    request, and goes back to Redis in rank order as the queue drains
    (crawls/engine/overflow.py). `score` is the queue's score (priority, depth, the host's
    turn: lua/_lib.lua's score()), `packed` the request as the queue holds it
    (Request.pack). Written and removed in batches, never per page."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="+", db_index=False)
    fp = models.BigIntegerField()
    score = models.BigIntegerField()
    packed = models.TextField()

    class Meta:
        constraints = [
            # A spill written again after a crash adds nothing: a request is one row.
            models.UniqueConstraint(fields=["crawl", "fp"], name="spilled_unique_per_crawl")
        ]
        indexes = [models.Index(fields=["crawl", "score"], name="spilled_next")]

    def __str__(self) -> str:
        return f"{self.crawl_id}:{self.fp}"


class FailedRequest(models.Model):
    """A request that used up its retries: the crawl's failure queue."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="failures")
    url = models.TextField()
    depth = models.PositiveIntegerField(default=0)
    referrer = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    failed_at = models.DateTimeField()
    url_hash = models.CharField(max_length=40)

    class Meta:
        ordering = ["-failed_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["crawl", "url_hash"], name="failure_unique_per_crawl")
        ]

    def __str__(self) -> str:
        return self.url
