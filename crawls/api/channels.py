"""The channel endpoints of the JSON API: everyone signed in reads them, staff create and
change them."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, permissions, serializers, viewsets
from rest_framework.request import Request

from crawlhub.web import serializers as api_fields
from crawls import services
from crawls.models import Channel


class ChannelSerializer(api_fields.ModelSerializer):
    extract_rules = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="Extraction rules of the channel's crawls that give none of their own.",
    )

    class Meta:
        model = Channel
        fields = [
            "id",
            "slug",
            "name",
            "description",
            "proxy_use",
            "proxy_strategy",
            "host_delay",
            "host_concurrency",
            "user_agent_mode",
            "extract_rules",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]

    def validate_extract_rules(self, value: list) -> list[dict]:
        try:
            return services.clean_rules(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict["extract_rules"]) from None


class IsStaffOrReadOnly(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or bool(request.user.is_staff)


@extend_schema_view(
    list=extend_schema(summary="Channels"),
    retrieve=extend_schema(summary="A channel"),
    create=extend_schema(summary="Create a channel (staff)"),
    update=extend_schema(summary="Change a channel (staff)"),
    partial_update=extend_schema(summary="Change some of a channel's fields (staff)"),
)
class ChannelViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Everyone signed in reads channels; staff create and change them."""

    queryset = Channel.objects.all()
    serializer_class = ChannelSerializer
    permission_classes = [permissions.IsAuthenticated, IsStaffOrReadOnly]
    lookup_field = "slug"
