"""The webhook endpoints of the JSON API. They parse input and call crawls/webhooks.py, like
the pages (crawls/views/webhooks.py) do."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.web import serializers as api_fields
from crawls import webhooks
from crawls.api.fields import RECENT, CrawlField
from crawls.models import Channel, Webhook, WebhookDelivery, WebhookEvent
from crawls.services import visible_crawls


class DeliverySerializer(api_fields.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "crawl",
            "event",
            "status",
            "attempts",
            "log",
            "response_status",
            "response_snippet",
            "error",
            "created_at",
            "delivered_at",
            "next_attempt_at",
        ]


class WebhookSerializer(api_fields.ModelSerializer):
    """Never the secret: it is shown once, in the answer to the webhook's creation."""

    channel = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    page_url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = Webhook
        fields = [
            "id",
            "channel",
            "crawl",
            "url",
            "events",
            "active",
            "created_by",
            "created_at",
            "page_url",
        ]
        read_only_fields = fields


class WebhookDetailSerializer(WebhookSerializer):
    deliveries = serializers.SerializerMethodField(help_text="The latest deliveries, newest first.")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "deliveries"]
        read_only_fields = fields

    @extend_schema_field(DeliverySerializer(many=True))
    def get_deliveries(self, webhook: Webhook) -> list[dict]:
        # Someone else's crawls' deliveries of a channel's webhook are theirs (and staff's).
        deliveries = webhooks.deliveries_visible_to(self.context["request"].user, webhook)
        return DeliverySerializer(deliveries[:RECENT], many=True).data


class NewWebhookSerializer(WebhookDetailSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="Signs every delivery. Shown in this answer only."
    )

    class Meta(WebhookDetailSerializer.Meta):
        fields = [*WebhookDetailSerializer.Meta.fields, "secret"]
        read_only_fields = fields


def _events_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(),
        help_text=f"Any of: {', '.join(WebhookEvent.values)}.",
        **kwargs,
    )


class WebhookCreateSerializer(serializers.Serializer):
    """Exactly one of channel (staff) and crawl."""

    channel = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Channel.objects.all(),
        required=False,
        allow_null=True,
        help_text="Channel slug (staff): every crawl of the channel.",
    )
    crawl = CrawlField(
        visible_crawls,
        required=False,
        allow_null=True,
        help_text="Crawl id.",
        error_messages={"does_not_exist": "No crawl {pk_value} of yours."},
    )
    url = serializers.CharField(max_length=2000)
    events = _events_field(default=list(WebhookEvent.values))


class WebhookUpdateSerializer(serializers.Serializer):
    """PUT gives every field, PATCH any of them."""

    url = serializers.CharField(max_length=2000)
    events = _events_field()
    active = serializers.BooleanField()


@extend_schema_view(
    list=extend_schema(summary="Webhooks of your crawls, and every channel's (staff: all)"),
    retrieve=extend_schema(summary="A webhook and its latest deliveries"),
    create=extend_schema(
        summary="Add a webhook to a crawl or (staff) a channel; the answer shows its secret once",
        request=WebhookCreateSerializer,
        responses={201: NewWebhookSerializer},
    ),
    update=extend_schema(
        summary="Change a webhook's url, events and active",
        request=WebhookUpdateSerializer,
        responses=WebhookDetailSerializer,
    ),
    partial_update=extend_schema(
        summary="Change a webhook's url, events or active",
        request=WebhookUpdateSerializer,
        responses=WebhookDetailSerializer,
    ),
    destroy=extend_schema(summary="Delete a webhook and its delivery log"),
)
class WebhookViewSet(viewsets.ModelViewSet):
    """Users see their crawls' webhooks and every channel's; channel webhooks are staff's to
    change (403), like on the pages."""

    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[Webhook]:
        return webhooks.webhooks_visible_to(self.request.user).select_related("created_by")

    def get_serializer_class(self):
        return WebhookSerializer if self.action == "list" else WebhookDetailSerializer

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = WebhookCreateSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        webhook, _ = webhooks.webhook_create(user=request.user, **body.validated_data)
        # The only answer with the secret in it.
        answer = NewWebhookSerializer(webhook, context=self.get_serializer_context())
        return Response(answer.data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args, partial: bool = False, **kwargs) -> Response:
        webhook = self.get_object()
        webhooks.check_can_change(request.user, webhook)
        body = WebhookUpdateSerializer(data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        webhooks.webhook_update(webhook=webhook, **body.validated_data)
        return Response(
            WebhookDetailSerializer(webhook, context=self.get_serializer_context()).data
        )

    def perform_destroy(self, instance: Webhook) -> None:
        webhooks.check_can_change(self.request.user, instance)
        webhooks.webhook_delete(webhook=instance)
