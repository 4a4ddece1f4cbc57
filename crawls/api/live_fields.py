"""The API's bodies for changing a running crawl (limits and scope) and for its queue; the
endpoints are CrawlViewSet's `change` (crawls/api/crawls.py) and `queue` (crawls/api/queue.py)."""

from __future__ import annotations

from rest_framework import serializers


def _patterns(name: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text=f"Every {name} pattern the crawl is to have from now on (the whole list: "
        "add or remove lines of the one the crawl shows), checked as at creation.",
    )


class LiveChangeSerializer(serializers.Serializer):
    """What a running or paused crawl may change (crawls.services.LIVE_FIELDS); the service
    checks each value as at creation. A field left out keeps its value."""

    max_pages = serializers.IntegerField(required=False)
    max_depth = serializers.IntegerField(required=False)
    host_delay = serializers.FloatField(
        required=False, allow_null=True, help_text="null: the channel's."
    )
    host_concurrency = serializers.IntegerField(required=False)
    threads = serializers.IntegerField(required=False)
    slices = serializers.IntegerField(required=False)
    include_patterns = _patterns("include")
    exclude_patterns = _patterns("exclude")


class QueuedRequestSerializer(serializers.Serializer):
    url = serializers.CharField()
    host = serializers.CharField()
    depth = serializers.IntegerField()
    priority = serializers.IntegerField()
    via = serializers.CharField(help_text="How it was found.")
    referrer = serializers.CharField(allow_blank=True, help_text="The page it was found on.")
    attempts = serializers.IntegerField(help_text="Attempts before, each a retryable failure.")
    crashes = serializers.IntegerField(help_text="Slices that ended while holding it.")


class HostQueuedSerializer(serializers.Serializer):
    host = serializers.CharField()
    queued = serializers.IntegerField()


class DepthQueuedSerializer(serializers.Serializer):
    depth = serializers.IntegerField(help_text="4095 counts that depth and deeper.")
    queued = serializers.IntegerField()


class QueueSerializer(serializers.Serializer):
    queued = serializers.IntegerField(help_text="Requests waiting in the queue.")
    on_disk = serializers.IntegerField(
        help_text="Requests waiting in the database: the queue past its window in Redis "
        "(CRAWLHUB_FRONTIER_WINDOW), the lowest-ranked; not listed until they come back."
    )
    retrying = serializers.IntegerField(help_text="Retries waiting for their time (not listed).")
    by_host = HostQueuedSerializer(many=True, help_text="Most queued first.")
    by_depth = DepthQueuedSerializer(many=True, help_text="Shallowest first.")
    depths_partial = serializers.BooleanField(
        help_text="Some (priority, depth) groups were left out of by_depth."
    )
    next = serializers.CharField(allow_null=True, help_text="URL of the next requests.")
    results = QueuedRequestSerializer(many=True, help_text="In the order workers take them.")
