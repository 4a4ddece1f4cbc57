"""The schedule and webhook endpoints of the JSON API (the pages are in data_views.py). They
parse input and call crawls/schedules.py and crawls/webhooks.py, like the pages do."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.access import visible_crawls
from crawls import schedules, webhooks
from crawls.models import Channel, Crawl, CrawlSchedule, Webhook, WebhookDelivery, WebhookEvent

# Runs of a schedule and deliveries of a webhook shown on its detail, newest first.
RECENT = 20


class CrawlField(serializers.PrimaryKeyRelatedField):
    """A crawl id, looked up among `crawls_for(user)` for the user making the request: any other
    crawl is an unknown id."""

    def __init__(self, crawls_for, **kwargs) -> None:
        self.crawls_for = crawls_for
        super().__init__(queryset=Crawl.objects.all(), **kwargs)

    def get_queryset(self) -> QuerySet[Crawl]:
        return self.crawls_for(self.context["request"].user)


# --- Schedules --------------------------------------------------------------------------------


class RunSerializer(serializers.ModelSerializer):
    """A crawl a schedule started."""

    class Meta:
        model = Crawl
        fields = ["id", "name", "state", "created_at", "started_at", "finished_at", "error"]


class ScheduleSerializer(serializers.ModelSerializer):
    template_name = serializers.CharField(source="template.name", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    run_count = serializers.IntegerField(read_only=True, help_text="Crawls it has started.")
    page_url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = CrawlSchedule
        fields = [
            "id", "template", "template_name", "cron", "enabled", "next_run_at", "last_run_at",
            "last_error", "created_by", "created_at", "run_count", "page_url",
        ]  # fmt: skip
        read_only_fields = fields


class ScheduleDetailSerializer(ScheduleSerializer):
    upcoming = serializers.SerializerMethodField(help_text="The next five run times.")
    runs = serializers.SerializerMethodField(help_text="The crawls it started, newest first.")

    class Meta(ScheduleSerializer.Meta):
        fields = [*ScheduleSerializer.Meta.fields, "upcoming", "runs"]
        read_only_fields = fields

    def get_upcoming(self, schedule: CrawlSchedule) -> list[str]:
        field = serializers.DateTimeField()
        return [field.to_representation(at) for at in schedules.upcoming(schedule)]

    @extend_schema_field(RunSerializer(many=True))
    def get_runs(self, schedule: CrawlSchedule) -> list[dict]:
        return RunSerializer(schedule.runs.all()[:RECENT], many=True).data


class ScheduleCreateSerializer(serializers.Serializer):
    template = CrawlField(
        schedules.template_choices, help_text="Id of the crawl each run copies.",
        error_messages={"does_not_exist": "No crawl {pk_value} of yours to schedule "
                        "(the runs of a schedule cannot be templates)."},
    )  # fmt: skip
    cron = serializers.CharField(
        max_length=100, help_text="minute hour day-of-month month day-of-week, or @daily."
    )
    enabled = serializers.BooleanField(default=True)


class ScheduleUpdateSerializer(serializers.Serializer):
    """PUT gives both fields, PATCH either."""

    cron = serializers.CharField(max_length=100)
    enabled = serializers.BooleanField()


@extend_schema_view(
    list=extend_schema(summary="Schedules of the crawls you may see (staff: all)"),
    retrieve=extend_schema(summary="A schedule, its next runs and the crawls it started"),
    create=extend_schema(
        summary="Re-run a crawl on a cron expression",
        request=ScheduleCreateSerializer,
        responses={201: ScheduleDetailSerializer},
    ),
    update=extend_schema(summary="Change a schedule's cron and enabled",
                         request=ScheduleUpdateSerializer, responses=ScheduleDetailSerializer),
    partial_update=extend_schema(summary="Change a schedule's cron or enabled",
                                 request=ScheduleUpdateSerializer,
                                 responses=ScheduleDetailSerializer),
    destroy=extend_schema(summary="Delete a schedule; the crawls it started are kept"),
)  # fmt: skip
class ScheduleViewSet(viewsets.ModelViewSet):
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[CrawlSchedule]:
        return schedules.schedules_listed(self.request.user)

    def get_serializer_class(self):
        return ScheduleSerializer if self.action == "list" else ScheduleDetailSerializer

    def _detail(self, schedule: CrawlSchedule, **kwargs) -> Response:
        schedule = self.get_queryset().get(pk=schedule.pk)  # with its run count
        return Response(ScheduleDetailSerializer(schedule).data, **kwargs)

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = ScheduleCreateSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        schedule = schedules.schedule_create(user=request.user, **body.validated_data)
        return self._detail(schedule, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args, partial: bool = False, **kwargs) -> Response:
        schedule = self.get_object()
        body = ScheduleUpdateSerializer(data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        schedules.schedule_update(schedule=schedule, **body.validated_data)
        return self._detail(schedule)

    def perform_destroy(self, instance: CrawlSchedule) -> None:
        schedules.schedule_delete(schedule=instance)


# --- Webhooks ---------------------------------------------------------------------------------


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id", "crawl", "event", "status", "attempts", "log", "response_status",
            "response_snippet", "error", "created_at", "delivered_at", "next_attempt_at",
        ]  # fmt: skip


class WebhookSerializer(serializers.ModelSerializer):
    """Never the secret: it is shown once, in the answer to the webhook's creation."""

    channel = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    page_url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = Webhook
        fields = [
            "id", "channel", "crawl", "url", "events", "active", "created_by", "created_at",
            "page_url",
        ]  # fmt: skip
        read_only_fields = fields


class WebhookDetailSerializer(WebhookSerializer):
    deliveries = serializers.SerializerMethodField(help_text="The latest deliveries, newest first.")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "deliveries"]
        read_only_fields = fields

    @extend_schema_field(DeliverySerializer(many=True))
    def get_deliveries(self, webhook: Webhook) -> list[dict]:
        return DeliverySerializer(webhook.deliveries.all()[:RECENT], many=True).data


class NewWebhookSerializer(WebhookDetailSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="Signs every delivery. Shown in this answer only."
    )

    class Meta(WebhookDetailSerializer.Meta):
        fields = [*WebhookDetailSerializer.Meta.fields, "secret"]
        read_only_fields = fields


def _events_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(), help_text=f"Any of: {', '.join(WebhookEvent.values)}.",
        **kwargs,
    )  # fmt: skip


class WebhookCreateSerializer(serializers.Serializer):
    """Exactly one of channel (staff) and crawl."""

    channel = serializers.SlugRelatedField(
        slug_field="slug", queryset=Channel.objects.all(), required=False, allow_null=True,
        help_text="Channel slug (staff): every crawl of the channel.",
    )  # fmt: skip
    crawl = CrawlField(
        visible_crawls, required=False, allow_null=True, help_text="Crawl id.",
        error_messages={"does_not_exist": "No crawl {pk_value} of yours."},
    )  # fmt: skip
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
    update=extend_schema(summary="Change a webhook's url, events and active",
                         request=WebhookUpdateSerializer, responses=WebhookDetailSerializer),
    partial_update=extend_schema(summary="Change a webhook's url, events or active",
                                 request=WebhookUpdateSerializer,
                                 responses=WebhookDetailSerializer),
    destroy=extend_schema(summary="Delete a webhook and its delivery log"),
)  # fmt: skip
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
        return Response(NewWebhookSerializer(webhook).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args, partial: bool = False, **kwargs) -> Response:
        webhook = self.get_object()
        webhooks.check_can_change(request.user, webhook)
        body = WebhookUpdateSerializer(data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        webhooks.webhook_update(webhook=webhook, **body.validated_data)
        return Response(WebhookDetailSerializer(webhook).data)

    def perform_destroy(self, instance: Webhook) -> None:
        webhooks.check_can_change(self.request.user, instance)
        webhooks.webhook_delete(webhook=instance)
