"""A crawl's results in the JSON API: its pages (a screen at a time, as the pages browser, and
one at a time), its failure queue and its exports. CrawlViewSet (crawls/api/crawls.py) takes
these endpoints from ResultsEndpoints, and gives them the crawl (get_object) and pagination."""

from __future__ import annotations

from urllib.parse import urlencode

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import renderers, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.web import serializers as api_fields
from crawls import exports
from crawls.models import Change, FailedRequest, Page, PageSource
from crawls.page_filters import PAGE_SIZES, STATUS_CLASSES, PageFilter
from crawls.pages import QueryError, page_slice
from crawls.views.exports import export_response


class PageSerializer(api_fields.ModelSerializer):
    fields_ = serializers.JSONField(
        source="extracted", read_only=True, help_text="Extracted values by rule name."
    )
    # As the exports write them (crawls.exports.counted): the meaning of "error" on screen.
    counted_as = serializers.SerializerMethodField(
        help_text='"responses" (an HTTP status came) or "errors" (no usable answer came).'
    )
    error = serializers.SerializerMethodField(
        help_text="Why no usable answer came; empty for a response."
    )
    note = serializers.SerializerMethodField(
        help_text="What went wrong with a response that still counts as one (e.g. too many "
        "redirects); empty for an error."
    )

    def get_counted_as(self, page: Page) -> str:
        return self._counted(page)["counted_as"]

    def get_error(self, page: Page) -> str:
        return self._counted(page)["error"]

    def get_note(self, page: Page) -> str:
        return self._counted(page)["note"]

    @staticmethod
    def _counted(page: Page) -> dict[str, str]:
        """exports.counted() once a page for its three fields."""
        if not hasattr(page, "_counted"):
            page._counted = exports.counted(page.status, page.error)
        return page._counted

    class Meta:
        model = Page
        fields = [*exports.COLUMNS, "fields_"]

    def get_fields(self) -> dict:
        found = super().get_fields()
        found["fields"] = found.pop("fields_")  # "fields" is a name DRF's Meta reserves
        return found


class PageDetailSerializer(PageSerializer):
    class Meta:
        model = Page
        fields = [
            *exports.COLUMNS,
            "fields_",
            "extract_errors",
            "structured_data",
            "headers",
            "request_headers",
            "proxy",
            "links",
            "links_total",
            "attempts",
            "history",
            "truncated",
        ]


# The pages browser's filters, for the API's pages and export.
PAGE_FILTER_PARAMETERS = [
    OpenApiParameter("q", str, description="Text in the URL or the title."),
    OpenApiParameter("status_class", str, enum=list(STATUS_CLASSES)),
    OpenApiParameter("status", int, description="An exact HTTP status."),
    OpenApiParameter("content_type", str, description="The content type starts with this."),
    OpenApiParameter("depth_min", int),
    OpenApiParameter("depth_max", int),
    OpenApiParameter(
        "change",
        str,
        enum=list(Change.values),
        description="Against the crawl's baseline (the last run).",
    ),
    OpenApiParameter("source", str, enum=list(PageSource.values)),
    OpenApiParameter("sort", str, description="A column, or field:<name>; id by default."),
    OpenApiParameter("order", str, enum=["asc", "desc"]),
    OpenApiParameter("size", int, enum=list(PAGE_SIZES)),
    OpenApiParameter("after", str, description="The `next` cursor of the previous answer."),
    OpenApiParameter("before", str, description="The `previous` cursor of an answer."),
]


class PageListSerializer(serializers.Serializer):
    count = serializers.IntegerField(
        help_text="Matching pages, counted up to 10,000 (1,000 with a text search `q`); with "
        "`searched`, the matches among the pages searched."
    )
    count_capped = serializers.BooleanField(
        help_text="More match than `count` (with `searched`: more may match further on)."
    )
    searched = serializers.IntegerField(
        allow_null=True,
        help_text="Set when the answer is partial: a search (one of one or two characters, "
        "which no index finds, or one whose matches sit far along the order) read only this "
        "many pages of the order, and `results` are the matches among them; `next` searches "
        "on from there. null: the answer is exact.",
    )
    next = serializers.CharField(allow_null=True, help_text="URL of the next pages.")
    previous = serializers.CharField(allow_null=True, help_text="URL of the previous pages.")
    results = PageSerializer(many=True)


class FailureSerializer(api_fields.ModelSerializer):
    class Meta:
        model = FailedRequest
        fields = list(exports.FAILURE_COLUMNS)


class _ExportRenderer(renderers.BaseRenderer):
    """Selects an export format (?format= or Accept); the view streams the bytes itself."""

    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return renderers.JSONRenderer().render(data)


class JSONLRenderer(_ExportRenderer):
    media_type, format = "application/x-ndjson", "jsonl"


class CSVRenderer(_ExportRenderer):
    media_type, format = "text/csv", "csv"


class WARCRenderer(_ExportRenderer):
    media_type, format = "application/warc", "warc"


class WACZRenderer(_ExportRenderer):
    media_type, format = "application/wacz", "wacz"


class ResultsEndpoints:
    """/api/crawls/{id}/pages/, pages/{page id}/, failures/ and export/ (CrawlViewSet's)."""

    @extend_schema(
        summary="Fetched pages: filtered, sorted, a screen at a time (as the pages browser)",
        parameters=PAGE_FILTER_PARAMETERS,
        responses=PageListSerializer,
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def pages(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        try:
            flt = PageFilter.from_params(request.query_params)
            found = page_slice(
                crawl,
                flt,
                after=request.query_params.get("after", ""),
                before=request.query_params.get("before", ""),
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        except QueryError as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from None
        base, params = request.build_absolute_uri(request.path), flt.params()
        return Response(
            {
                "count": found.count,
                "count_capped": found.count_capped,
                "searched": found.searched or None,
                "next": f"{base}?{urlencode({**params, 'after': found.next})}"
                if found.next
                else None,
                "previous": (
                    f"{base}?{urlencode({**params, 'before': found.previous})}"
                    if found.previous
                    else None
                ),
                "results": PageSerializer(found.rows, many=True).data,
            }
        )

    @extend_schema(
        summary="One page: request, response, links, fields",
        responses=PageDetailSerializer,
        operation_id="crawls_page_retrieve",
    )
    @action(detail=True, methods=["get"], url_path=r"pages/(?P<page_pk>[0-9]{1,18})")
    def page(self, request: Request, pk=None, page_pk=None) -> Response:
        crawl = self.get_object()
        page = get_object_or_404(crawl.pages.defer("body"), pk=int(page_pk))
        return Response(PageDetailSerializer(page).data)

    @extend_schema(summary="The failure queue", responses=FailureSerializer(many=True))
    @action(detail=True, methods=["get"])
    def failures(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        page = self.paginate_queryset(crawl.failures.all())
        return self.get_paginated_response(FailureSerializer(page, many=True).data)

    @extend_schema(
        summary="Download the crawl's pages (JSONL, CSV) or kept responses (WARC, WACZ)",
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=[*exports.FORMATS],
                description="Export format; jsonl when left out.",
            )
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiTypes.BINARY,
            (200, "text/csv"): OpenApiTypes.BINARY,
            (200, "application/warc"): OpenApiTypes.BINARY,
            (200, "application/wacz"): OpenApiTypes.BINARY,
        },
    )
    @action(
        detail=True,
        methods=["get"],
        pagination_class=None,
        renderer_classes=[JSONLRenderer, CSVRenderer, WARCRenderer, WACZRenderer],
    )
    def export(self, request: Request, pk=None):
        crawl = self.get_object()
        try:
            flt = PageFilter.from_params(request.query_params)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        flt = flt if flt.active else None
        return export_response(request._request, crawl, request.accepted_renderer.format, flt)
