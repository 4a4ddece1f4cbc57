"""The schedule endpoints of the JSON API. They parse input and call crawls/schedules.py, like
the pages (crawls/views/schedules.py) do."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.web import serializers as api_fields
from crawls import schedules
from crawls.api.fields import RECENT, CrawlField
from crawls.models import Crawl, CrawlSchedule


class RunSerializer(api_fields.ModelSerializer):
    """A crawl a schedule started."""

    class Meta:
        model = Crawl
        fields = ["id", "name", "state", "created_at", "started_at", "finished_at", "error"]


class ScheduleSerializer(api_fields.ModelSerializer):
    template_name = serializers.CharField(source="template.name", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    run_count = serializers.IntegerField(read_only=True, help_text="Crawls it has started.")
    page_url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = CrawlSchedule
        fields = [
            "id",
            "template",
            "template_name",
            "cron",
            "enabled",
            "next_run_at",
            "last_run_at",
            "last_error",
            "created_by",
            "created_at",
            "run_count",
            "page_url",
        ]
        read_only_fields = fields


class ScheduleDetailSerializer(ScheduleSerializer):
    upcoming = serializers.SerializerMethodField(help_text="The next five run times.")
    runs = serializers.SerializerMethodField(help_text="The crawls it started, newest first.")

    class Meta(ScheduleSerializer.Meta):
        fields = [*ScheduleSerializer.Meta.fields, "upcoming", "runs"]
        read_only_fields = fields

    def get_upcoming(self, schedule: CrawlSchedule) -> list[str]:
        field = api_fields.DateTimeField()
        return [field.to_representation(at) for at in schedules.upcoming(schedule)]

    @extend_schema_field(RunSerializer(many=True))
    def get_runs(self, schedule: CrawlSchedule) -> list[dict]:
        return RunSerializer(schedule.runs.all()[:RECENT], many=True).data


class ScheduleCreateSerializer(serializers.Serializer):
    template = CrawlField(
        schedules.template_choices,
        help_text="Id of the crawl each run copies.",
        error_messages={
            "does_not_exist": "No crawl {pk_value} of yours to schedule "
            "(the runs of a schedule cannot be templates)."
        },
    )
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
    update=extend_schema(
        summary="Change a schedule's cron and enabled",
        request=ScheduleUpdateSerializer,
        responses=ScheduleDetailSerializer,
    ),
    partial_update=extend_schema(
        summary="Change a schedule's cron or enabled",
        request=ScheduleUpdateSerializer,
        responses=ScheduleDetailSerializer,
    ),
    destroy=extend_schema(summary="Delete a schedule; the crawls it started are kept"),
)
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
