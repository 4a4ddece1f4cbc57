"""The proxy endpoints of the JSON API (staff only): list, import, remove, validate, and the
pool's health. They call proxies/services.py and proxies/pool.py, like the pages and the CLI."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from proxies import pool, services, validation
from proxies.models import Proxy


class ProxySerializer(serializers.ModelSerializer):
    url = serializers.CharField(
        source="masked_url", read_only=True,
        help_text="Credentials masked; the password is never shown.",
    )  # fmt: skip

    class Meta:
        model = Proxy
        fields = [
            "id", "url", "scheme", "host", "port", "username", "state", "score", "latency_ms",
            "last_validated_at", "successes", "failures", "last_error", "anonymity", "source",
            "added_at", "removed_at", "removed_why",
        ]  # fmt: skip
        read_only_fields = fields


class ImportSerializer(serializers.Serializer):
    text = serializers.CharField(
        required=False,
        help_text="One proxy per line: host:port or scheme://[user:pass@]host:port",
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


class RemoveSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.IntegerField(), required=False, default=list)
    addresses = serializers.ListField(child=serializers.CharField(), required=False, default=list,
                                      help_text="host:port or scheme://host:port")  # fmt: skip
    why = serializers.CharField(help_text="Goes in the audit log.")

    def validate(self, attrs: dict) -> dict:
        if not attrs["ids"] and not attrs["addresses"]:
            raise ValidationError({"ids": ["Name the proxies to remove by ids or addresses."]})
        return attrs


class RemoveResultSerializer(serializers.Serializer):
    removed = serializers.ListField(child=serializers.CharField())
    unknown = serializers.ListField(child=serializers.CharField())


class ValidateSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(), required=False,
        help_text="Proxies to validate now; a full validation pass when left out.",
    )  # fmt: skip


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

    @extend_schema(summary="Import a list (staff)", request=ImportSerializer,
                   responses={201: ImportReportSerializer})  # fmt: skip
    @action(detail=False, methods=["post"], url_path="import")
    def import_list(self, request: Request) -> Response:
        body = ImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            if data.get("url"):
                report = services.import_from_url(url=data["url"], user=request.user)
            else:
                report = services.import_proxies(text=data["text"], source="api", user=request.user)
        except services.ImportFailed as exc:
            raise ValidationError({"url" if data.get("url") else "text": [str(exc)]}) from None
        return Response(report.as_dict(), status=status.HTTP_201_CREATED)

    @extend_schema(summary="Remove proxies from every pool (staff)", request=RemoveSerializer,
                   responses=RemoveResultSerializer)  # fmt: skip
    @action(detail=False, methods=["post"])
    def remove(self, request: Request) -> Response:
        body = RemoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        proxies = list(Proxy.objects.filter(pk__in=data["ids"]))
        unknown = [str(i) for i in set(data["ids"]) - {p.pk for p in proxies}]
        found, missing = services.resolve(addresses=data["addresses"])
        done = services.remove_proxies(proxies=proxies + found, why=data["why"], user=request.user)
        return Response({"removed": [p.masked_url for p in done], "unknown": unknown + missing})

    @extend_schema(summary="Validate proxies now (staff)", request=ValidateSerializer,
                   responses={202: ValidateResultSerializer})  # fmt: skip
    @action(detail=False, methods=["post"])
    def validate(self, request: Request) -> Response:
        body = ValidateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ids = body.validated_data.get("ids")
        proxies = None if ids is None else list(Proxy.objects.filter(pk__in=ids))
        validation.request_validation(proxies=proxies)
        queued = None if proxies is None else len(proxies)
        return Response({"queued": queued}, status=status.HTTP_202_ACCEPTED)


class PoolHealthView(APIView):
    """Sizes, selectable proxies, per-channel free/leased/banned counts and counters."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(summary="Proxy pool health (staff)", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return Response(pool.health())
