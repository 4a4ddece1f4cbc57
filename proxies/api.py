"""The proxy endpoints of the JSON API (staff only): list, import, remove, validate, and the
pool's health. They call proxies/services.py and proxies/pool.py, like the pages and the CLI."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from crawlhub.web import serializers as api_fields
from proxies import pool, services, validation
from proxies.models import Proxy, ProxyJob


class ProxySerializer(api_fields.ModelSerializer):
    url = serializers.CharField(
        source="masked_url",
        read_only=True,
        help_text="Credentials masked; the password is never shown.",
    )

    class Meta:
        model = Proxy
        fields = [
            "id",
            "url",
            "scheme",
            "host",
            "port",
            "username",
            "state",
            "score",
            "latency_ms",
            "last_validated_at",
            "successes",
            "failures",
            "last_error",
            "anonymity",
            "source",
            "added_at",
            "removed_at",
            "removed_why",
        ]
        read_only_fields = fields


class ImportSerializer(serializers.Serializer):
    text = serializers.CharField(
        required=False,
        help_text="One proxy per line: host:port or scheme://[user:pass@]host:port (http, https, "
        "socks5 or socks5h)",
    )
    url = serializers.URLField(required=False, help_text="A plain-text list to fetch.")

    def validate(self, attrs: dict) -> dict:
        if len([k for k in ("text", "url") if attrs.get(k)]) != 1:
            raise ValidationError({"non_field_errors": ["Give exactly one of text or url."]})
        return attrs


class ImportReportSerializer(serializers.Serializer):
    source = serializers.CharField()
    added = serializers.ListField(child=serializers.CharField())
    duplicates = serializers.ListField(child=serializers.DictField())
    errors = serializers.ListField(child=serializers.DictField())


class JobSerializer(serializers.Serializer):
    """What an import or a bulk action running in the background has done so far."""

    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=ProxyJob.Kind.choices)
    state = serializers.ChoiceField(choices=ProxyJob.State.choices)
    source = serializers.CharField(help_text="An import's source (passwords masked).")
    total = serializers.IntegerField(
        allow_null=True, help_text="Proxies of the list (or of the selection) to deal with."
    )
    done = serializers.IntegerField(help_text="Of total, dealt with so far.")
    percent = serializers.IntegerField()
    counts = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Import: added, duplicates, errors. Bulk action: selected, removed (disabled, "
        "enabled), unchanged.",
    )
    error = serializers.CharField(help_text="Why the job failed.")
    created_at = api_fields.DateTimeField()
    finished_at = api_fields.DateTimeField(allow_null=True)
    status_url = serializers.URLField(help_text="Where to follow it.")
    report = ImportReportSerializer(
        required=False, help_text="An import's whole report, once it has ended."
    )


class RemoveSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.IntegerField(), required=False, default=list)
    addresses = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        help_text="host:port or scheme://host:port",
    )
    why = serializers.CharField(help_text="Goes in the audit log.")

    def validate(self, attrs: dict) -> dict:
        if not attrs["ids"] and not attrs["addresses"]:
            raise ValidationError({"ids": ["Name the proxies to remove by ids or addresses."]})
        return attrs


class RemoveResultSerializer(serializers.Serializer):
    removed = serializers.ListField(child=serializers.CharField())
    unknown = serializers.ListField(child=serializers.CharField())


class RemoveLaterSerializer(JobSerializer):
    unknown = serializers.ListField(child=serializers.CharField())


class ValidateSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        help_text="Proxies to validate now; a full validation pass when left out.",
    )


class ValidateResultSerializer(serializers.Serializer):
    queued = serializers.IntegerField(allow_null=True, help_text="null: a full pass.")


@extend_schema_view(
    list=extend_schema(
        summary="Proxies in the inventory (staff)",
        parameters=[
            OpenApiParameter(name, str, description=description)
            for name, description in [
                ("state", "new, active, disabled or removed (default: all but removed)"),
                ("channel", "Only proxies in this channel's pool"),
                ("score", "0-5, 5-6, 6-10 or 10+"),
                ("anonymity", "transparent, anonymous, elite or unknown"),
                ("source", "Part of the import source"),
                ("q", "Part of the host or source"),
                ("sort", "score, latency, validated, failures or added"),
            ]
        ],
    ),
    retrieve=extend_schema(summary="A proxy (staff)"),
)
class ProxyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = ProxySerializer
    permission_classes = [permissions.IsAdminUser]
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        if self.action == "list":
            return services.filter_proxies(self.request.query_params)
        return Proxy.objects.all()

    @extend_schema(
        summary="Import a list (staff)",
        request=ImportSerializer,
        responses={202: JobSerializer},
        description="The list is imported in the background: the answer is the job, and its "
        "status_url gives the progress, then the report (every bad line and duplicate).",
    )
    @action(detail=False, methods=["post"], url_path="import")
    def import_list(self, request: Request) -> Response:
        body = ImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            if data.get("url"):
                job = services.start_import_from_url(url=data["url"], user=request.user)
            else:
                job = services.start_import(text=data["text"], source="api", user=request.user)
        except services.ImportFailed as exc:
            raise ValidationError({"url" if data.get("url") else "text": [str(exc)]}) from None
        return Response(job_answer(request, job), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Remove proxies from every pool (staff)",
        request=RemoveSerializer,
        responses={200: RemoveResultSerializer, 202: RemoveLaterSerializer},
        description=f"Up to {services.INLINE_LIMIT} proxies are removed before the answer "
        "(200); more are removed in the background (202, with the job to follow).",
    )
    @action(detail=False, methods=["post"])
    def remove(self, request: Request) -> Response:
        body = RemoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        ids, unknown = services.known_ids(data["ids"])
        found, missing = services.resolve(addresses=data["addresses"])
        result = services.bulk_action(
            action="remove", ids=ids, proxies=found, why=data["why"], user=request.user
        )
        unknown = [str(i) for i in unknown] + missing
        if result.job is not None:
            answer = {**job_answer(request, result.job), "unknown": unknown}
            return Response(answer, status=status.HTTP_202_ACCEPTED)
        return Response({"removed": [p.masked_url for p in result.done], "unknown": unknown})

    @extend_schema(
        summary="Validate proxies now (staff)",
        request=ValidateSerializer,
        responses={202: ValidateResultSerializer},
    )
    @action(detail=False, methods=["post"])
    def validate(self, request: Request) -> Response:
        body = ValidateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ids = body.validated_data.get("ids")
        if ids is None:
            validation.request_validation()
            return Response({"queued": None}, status=status.HTTP_202_ACCEPTED)
        known, _ = services.known_ids(ids)
        result = services.bulk_action(action="validate", ids=known, user=request.user)
        return Response({"queued": result.selected}, status=status.HTTP_202_ACCEPTED)


def job_answer(request: Request, job: ProxyJob, *, report: bool = False) -> dict:
    url = request.build_absolute_uri(reverse("api-proxy-job-detail", args=[job.pk]))
    return {**services.job_status(job, report=report), "status_url": url}


@extend_schema_view(
    list=extend_schema(summary="Recent imports and bulk actions (staff)"),
    retrieve=extend_schema(
        summary="An import's or bulk action's progress; an import's report once ended (staff)"
    ),
)
class ProxyJobViewSet(viewsets.GenericViewSet):
    serializer_class = JobSerializer
    permission_classes = [permissions.IsAdminUser]
    lookup_value_regex = r"\d+"
    queryset = ProxyJob.objects.all()

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        shown = [job_answer(request, job) for job in page]
        return self.get_paginated_response(shown)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(job_answer(request, self.get_object(), report=True))


class PoolHealthView(APIView):
    """Sizes, selectable proxies, per-channel free/leased/banned counts and counters."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(summary="Proxy pool health (staff)", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return Response(pool.health())
