"""A crawl's log in the JSON API: its endpoint (CrawlViewSet in crawls/api/crawls.py takes it
from LogEndpoint, and gives it the crawl), serializers and query parameters."""

from __future__ import annotations

from urllib.parse import urlencode

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from crawls.logs import KIND_GROUPS, MAX_PAGE_SIZE, PAGE_SIZE, LogFilter, log_page
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


def _size(value: str | None) -> int:
    if not value:
        return PAGE_SIZE
    try:
        return int(value)
    except ValueError:
        raise serializers.ValidationError({"size": [f"{value[:40]!r} is not a number."]}) from None


class LogEndpoint:
    """/api/crawls/{id}/log/ (CrawlViewSet's)."""

    @extend_schema(
        summary="The crawl's log: what its workers did and what users did to it, newest first",
        parameters=LOG_PARAMETERS,
        responses=LogSerializer,
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def log(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        params = request.query_params
        try:
            flt = LogFilter.from_params(params)
            found = log_page(
                crawl,
                flt,
                before=params.get("before"),
                after=params.get("after"),
                size=_size(params.get("size")),
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        base, query = request.build_absolute_uri(request.path), flt.params()
        if params.get("size"):
            query["size"] = params["size"]
        older = f"{base}?{urlencode({**query, 'before': found.older})}" if found.older else None
        return Response(
            {
                "results": LogLineSerializer(found.lines, many=True).data,
                "next": older,
                "removed": found.removed,
                "kept_per_level": found.kept,
            }
        )
