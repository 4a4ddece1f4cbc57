"""The crawl log's serializers and query parameters (the endpoint is CrawlViewSet.log)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from crawls.logs import KIND_GROUPS, MAX_PAGE_SIZE, PAGE_SIZE
from crawls.models import CrawlEvent

LOG_PARAMETERS = [
    OpenApiParameter(
        "level",
        str,
        enum=["info", "warning", "error"],
        description="The lowest level shown: warning shows warnings and errors.",
    ),
    OpenApiParameter(
        "kind",
        str,
        enum=[*KIND_GROUPS, *CrawlEvent.Kind.values],
        description="A group of kinds (actions: what users did), or one kind.",
    ),
    OpenApiParameter("host", str, description="Lines about a host containing this."),
    OpenApiParameter("q", str, description="Lines whose text contains this (any case)."),
    OpenApiParameter("before", int, description="The `next` cursor: lines older than this id."),
    OpenApiParameter("after", int, description="Lines newer than this id (a live view's newest)."),
    OpenApiParameter(
        "size",
        int,
        description=f"Lines per answer, {PAGE_SIZE} by default, {MAX_PAGE_SIZE} at most.",
    ),
]


class LogLineSerializer(serializers.ModelSerializer):
    kind_label = serializers.CharField(source="get_kind_display")
    text = serializers.CharField(source="detail")
    user = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = CrawlEvent
        fields = ["id", "at", "kind", "kind_label", "level", "host", "text", "user"]


class LogSerializer(serializers.Serializer):
    results = LogLineSerializer(many=True, help_text="Newest first.")
    next = serializers.CharField(allow_null=True, help_text="URL of the older lines.")
    removed = serializers.IntegerField(
        help_text="Workers' lines removed to keep the log bounded (the oldest of their level)."
    )
    kept_per_level = serializers.IntegerField(
        help_text="The newest workers' lines kept of each level (info, warning, error); the "
        "audit trail's lines (a user's actions) are all kept."
    )
