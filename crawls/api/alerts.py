"""The alert endpoints of the JSON API: rules (made, changed, deleted as on the pages, through
crawls/alerts.py) and the alert history of the crawls one may see."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import ValidationError as APIValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.web import serializers as api_fields
from crawlhub.web.lookups import typed_id
from crawls import alerts
from crawls.api.fields import CrawlField
from crawls.models import Alert, AlertKind, AlertRule, Channel
from crawls.services import visible_crawls


class AlertRuleSerializer(api_fields.ModelSerializer):
    channel = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    condition = serializers.CharField(read_only=True, help_text="The condition, in words.")

    class Meta:
        model = AlertRule
        fields = [
            "id",
            "channel",
            "crawl",
            "kind",
            "percent",
            "minutes",
            "condition",
            "emails",
            "active",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class AlertSerializer(api_fields.ModelSerializer):
    class Meta:
        model = Alert
        fields = [
            "id",
            "rule",
            "crawl",
            "kind",
            "subject",
            "line",
            "figures",
            "fired_at",
            "resolved_at",
            "resolved_line",
            "mail_log",
        ]
        read_only_fields = fields


def _figure(**kwargs) -> serializers.IntegerField:
    return serializers.IntegerField(required=False, allow_null=True, **kwargs)


class AlertRuleCreateSerializer(serializers.Serializer):
    """Exactly one of channel (staff) and crawl. The figures are checked by the service (the
    same errors as the pages')."""

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
    kind = serializers.ChoiceField(choices=AlertKind.choices)
    percent = _figure(help_text="N, for error_rate: 1 to 100.")
    minutes = _figure(help_text=f"M, for error_rate and no_progress: 1 to {alerts.MAX_MINUTES}.")
    emails = serializers.ListField(child=serializers.CharField(), required=False, default=list)


class AlertRuleUpdateSerializer(serializers.Serializer):
    """The kind and the target stay; PATCH any of these."""

    percent = _figure()
    minutes = _figure()
    emails = serializers.ListField(child=serializers.CharField())
    active = serializers.BooleanField()


@extend_schema_view(
    list=extend_schema(summary="Alert rules of your crawls, and every channel's (staff: all)"),
    retrieve=extend_schema(summary="An alert rule"),
    create=extend_schema(
        summary="Add an alert rule to a crawl or (staff) a channel",
        request=AlertRuleCreateSerializer,
        responses={201: AlertRuleSerializer},
    ),
    update=extend_schema(
        summary="Change a rule's figures, addresses and active",
        request=AlertRuleUpdateSerializer,
        responses=AlertRuleSerializer,
    ),
    partial_update=extend_schema(
        summary="Change a rule's figures, addresses or active",
        request=AlertRuleUpdateSerializer,
        responses=AlertRuleSerializer,
    ),
    destroy=extend_schema(summary="Delete an alert rule (its alerts stay in the history)"),
)
class AlertRuleViewSet(viewsets.ModelViewSet):
    """Users see their crawls' rules and every channel's; channel rules are staff's to change
    (403), like on the pages."""

    lookup_value_regex = r"\d+"
    serializer_class = AlertRuleSerializer

    def get_queryset(self) -> QuerySet[AlertRule]:
        return alerts.rules_visible_to(self.request.user)

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = AlertRuleCreateSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        rule = alerts.rule_create(user=request.user, **body.validated_data)
        return Response(AlertRuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args, partial: bool = False, **kwargs) -> Response:
        rule = self.get_object()
        alerts.check_can_change(request.user, rule)
        body = AlertRuleUpdateSerializer(data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        alerts.rule_update(rule=rule, **body.validated_data)
        return Response(AlertRuleSerializer(rule).data)

    def perform_destroy(self, instance: AlertRule) -> None:
        alerts.check_can_change(self.request.user, instance)
        alerts.rule_delete(rule=instance)


@extend_schema_view(
    list=extend_schema(
        summary="Alerts of the crawls you may see, newest first",
        parameters=[OpenApiParameter("crawl", OpenApiTypes.INT, description="One crawl's.")],
    ),
    retrieve=extend_schema(summary="An alert: what fired, the figures, when, when resolved"),
)
class AlertViewSet(viewsets.ReadOnlyModelViewSet):
    lookup_value_regex = r"\d+"
    serializer_class = AlertSerializer

    def get_queryset(self) -> QuerySet[Alert]:
        found = alerts.alerts_visible_to(self.request.user)
        crawl = self.request.query_params.get("crawl")
        if crawl is not None:
            crawl_id = typed_id(crawl)
            if crawl_id is None:
                problem = f"A crawl id is a number, not {crawl[:40]!r}."
                raise APIValidationError({"crawl": [problem]})
            found = found.filter(crawl_id=crawl_id)
        return found
