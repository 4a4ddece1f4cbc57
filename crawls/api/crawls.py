"""The crawl endpoints of the JSON API: a crawl and its actions. Its results, queue and
log are endpoints of the same viewset, kept in results.py, queue.py and log.py. They parse
input and call crawls/services/, like the pages and the CLI do."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.web import serializers as api_fields
from crawlhub.web.api_errors import JSONErrors
from crawls import services
from crawls.api.live_fields import LiveChangeSerializer
from crawls.api.log import LogEndpoint
from crawls.api.queue import QueueEndpoints
from crawls.api.results import ResultsEndpoints
from crawls.models import CRAWL_OPTIONS, Channel, Crawl, LinesField, RulesField
from crawls.services import visible_crawls

# What DRF derives for a JSONField that a ListField also takes (not encoder, decoder, style).
_LIST_KWARGS = {"required", "allow_null", "label", "help_text", "validators", "read_only"}


class CrawlFieldsSerializer(api_fields.ModelSerializer):
    """A crawl serializer's base: a list of lines (LinesField) is a list of strings, not any
    JSON, so the options' types come from the model alone."""

    def build_standard_field(self, field_name: str, model_field) -> tuple[type, dict]:
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        if isinstance(model_field, LinesField):
            kept = {k: v for k, v in kwargs.items() if k in _LIST_KWARGS}
            return serializers.ListField, {**kept, "child": serializers.CharField()}
        if isinstance(model_field, RulesField):
            kept = {k: v for k, v in kwargs.items() if k in _LIST_KWARGS}
            return serializers.ListField, {**kept, "child": serializers.DictField()}
        return field_class, kwargs


class AuthSerializer(serializers.Serializer):
    """A crawl's credentials, write-only: what the form's Authentication section takes, as
    text (services.clean_credentials checks it). Secret values are never sent back. They are
    bound to the origins (scheme, host, port) of the crawl's seeds as they are when they are
    saved: seeds added later on another origin do not get them, unless the crawl's owner
    enters them again (POST .../credentials/)."""

    headers = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="'Name: value' lines, sent to the origins the credentials are bound to.",
    )
    cookie = serializers.CharField(
        required=False, allow_blank=True, help_text="A Cookie header's value: 'a=1; b=2'."
    )
    cookies_txt = serializers.CharField(
        required=False, allow_blank=True, help_text="A Netscape cookies.txt file's text."
    )
    basic_user = serializers.CharField(required=False, allow_blank=True)
    basic_password = serializers.CharField(required=False, allow_blank=True)
    login_url = serializers.CharField(
        required=False, allow_blank=True, help_text="The login page, on a seed's host."
    )
    login_fields = serializers.CharField(
        required=False, allow_blank=True, help_text="The form's fields: 'name=value' lines."
    )
    login_check_selector = serializers.CharField(
        required=False, allow_blank=True, help_text="Logged in when the page has it."
    )
    login_check_url = serializers.CharField(
        required=False, allow_blank=True, help_text="Logged in when the login ends there."
    )


class CrawlSerializer(CrawlFieldsSerializer):
    channel = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    stats = serializers.SerializerMethodField(help_text="Live counters; the final ones once over.")
    page_url = serializers.CharField(source="get_absolute_url", read_only=True)
    waiting = serializers.SerializerMethodField(
        help_text="Why a running crawl fetches nothing now: reason 'memory' while it waits for "
        "Redis memory (Redis holds crawlhub's budget of it, CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT "
        "of maxmemory, and this crawl at least the average of the running crawls, or Redis is "
        "past the mark halfway to maxmemory; it goes on by itself once memory frees), with the "
        "line its page shows; reason and line empty otherwise."
    )
    auth = serializers.SerializerMethodField(
        help_text="The crawl's credentials: header and cookie names, the basic auth user, the "
        "login URL and field names; every secret value is '••••• (set)'. `origins`: where they "
        "are sent, fixed when they were entered (seeds added since on another origin are "
        "crawled without them). {} when none."
    )

    class Meta:
        model = Crawl
        fields = [
            "id",
            "name",
            "channel",
            "seeds",
            *CRAWL_OPTIONS,
            "auth",
            "state",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "error",
            "end_reason",
            "end_line",
            "schedule",
            "stats",
            "page_url",
            "waiting",
        ]
        read_only_fields = fields

    def get_auth(self, crawl: Crawl) -> dict:
        return services.credentials_shown(crawl)

    def get_waiting(self, crawl: Crawl) -> dict:
        if "redis_memory" not in self.context:  # read once for a page of crawls
            self.context["redis_memory"] = services.redis_memory_safe()
        return services.crawl_waiting(crawl=crawl, memory=self.context["redis_memory"])

    def get_stats(self, crawl: Crawl) -> dict:
        stats = self.context.get("stats")
        if stats is not None and crawl.pk in stats:
            return stats[crawl.pk]
        return services.crawl_stats_safe(crawl)


class CrawlCreateSerializer(CrawlFieldsSerializer):
    """A new crawl: name and seeds, any option of the crawl form; `start` starts it at once."""

    channel = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Channel.objects.all(),
        required=False,
        help_text="Channel slug; the default channel when left out.",
    )
    seeds = serializers.ListField(child=serializers.CharField(), allow_empty=False)
    start = serializers.BooleanField(default=False, write_only=True)
    auth = AuthSerializer(required=False, write_only=True)

    class Meta:
        model = Crawl
        fields = ["name", "channel", "seeds", *CRAWL_OPTIONS, "auth", "start"]

    def create(self, validated_data: dict) -> Crawl:
        data = dict(validated_data)
        start = data.pop("start", False)
        user = self.context["request"].user
        crawl = services.crawl_create(
            user=user,
            name=data.pop("name"),
            seeds=data.pop("seeds"),
            channel=data.pop("channel", None),
            auth=data.pop("auth", None),
            **data,
        )
        if start:
            services.crawl_start(crawl=crawl, user=user)
        return crawl


class SeedsSerializer(serializers.Serializer):
    urls = serializers.ListField(child=serializers.CharField(), allow_empty=False)


class SeedsResultSerializer(serializers.Serializer):
    added = serializers.IntegerField()
    already_seen = serializers.IntegerField()
    credentials_not_sent_to = serializers.ListField(
        child=serializers.CharField(),
        help_text="Origins of the crawl's seeds its saved credentials are not sent to: they "
        "stay bound to the origins they were entered for, and new origins do not get them "
        "unless the crawl's owner enters them again (POST .../credentials/). [] when every "
        "seed's origin gets them, or the crawl has none.",
    )


class RetrySerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        help_text="Failure ids to retry; all of the crawl's failures when left out.",
    )


class RetryResultSerializer(serializers.Serializer):
    retried = serializers.IntegerField()


class LiveChangedSerializer(serializers.Serializer):
    changed = serializers.ListField(
        child=serializers.CharField(),
        help_text='Each change as "field: old -> new", as on '
        "the crawl's audit trail, and what a change of patterns dropped.",
    )
    dropped = serializers.IntegerField(
        allow_null=True,
        help_text="Queued requests and retries dropped because they no "
        "longer fit the patterns (counted as cancelled); null when the patterns did not change.",
    )
    dropping = serializers.BooleanField(
        help_text="A big queue: the rest is looked at in the background, and an event on the "
        "crawl says how many were dropped in all."
    )
    in_flight = serializers.IntegerField(
        help_text="Requests being fetched at the change that no longer fit: they finish."
    )
    crawl = CrawlSerializer()


def _action_schema(summary: str, **kwargs):
    return extend_schema(summary=summary, request=None, responses=CrawlSerializer, **kwargs)


@extend_schema_view(
    list=extend_schema(
        summary="Crawls you may see (staff: all)",
        parameters=[
            OpenApiParameter("state", str, description="Only crawls in this state."),
            OpenApiParameter("channel", str, description="Only crawls of this channel (slug)."),
        ],
    ),
    retrieve=extend_schema(summary="A crawl with its counters"),
    destroy=extend_schema(
        summary="Delete a crawl with its pages, failures and trail (cancelled first if it may "
        "still fetch)"
    ),
    create=extend_schema(
        summary="Create a crawl (and start it with start=true)",
        request=CrawlCreateSerializer,
        responses={201: CrawlSerializer},
    ),
)
class CrawlViewSet(
    JSONErrors,
    ResultsEndpoints,
    QueueEndpoints,
    LogEndpoint,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """The crawls you may see (staff: every crawl), with their pages, failures, hosts and
    exports. An action does what its button on the crawl's page does; one the crawl's state
    does not allow answers 409 with the reason."""

    serializer_class = CrawlSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[Crawl]:
        crawls = visible_crawls(self.request.user).select_related("channel", "created_by", "auth")
        if state := self.request.query_params.get("state"):
            crawls = crawls.filter(state=state)
        if channel := self.request.query_params.get("channel"):
            crawls = crawls.filter(channel__slug=channel)
        return crawls

    def get_serializer_class(self):
        return CrawlCreateSerializer if self.action == "create" else super().get_serializer_class()

    def list(self, request: Request, *args, **kwargs) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        stats = services.crawls_stats_safe(page)
        context = {**self.get_serializer_context(), "stats": stats}
        serializer = CrawlSerializer(page, many=True, context=context)
        return self.get_paginated_response(serializer.data)

    def create(self, request: Request, *args, **kwargs) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        crawl = serializer.save()
        return Response(
            CrawlSerializer(crawl, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    def perform_destroy(self, instance: Crawl) -> None:
        services.crawl_delete(crawl=instance, user=self.request.user)

    def _act(self, fn) -> Response:
        crawl = self.get_object()
        fn(crawl=crawl, user=self.request.user)
        return Response(CrawlSerializer(crawl, context=self.get_serializer_context()).data)

    @_action_schema("Start a draft crawl")
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk=None) -> Response:
        return self._act(services.crawl_start)

    @_action_schema("Pause: workers stop fetching within seconds")
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk=None) -> Response:
        return self._act(services.crawl_pause)

    @_action_schema("Resume a paused crawl")
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk=None) -> Response:
        return self._act(services.crawl_resume)

    @_action_schema("Cancel for good; fetched pages are kept")
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk=None) -> Response:
        return self._act(services.crawl_cancel)

    @extend_schema(
        summary="Add start URLs", request=SeedsSerializer, responses=SeedsResultSerializer
    )
    @action(detail=True, methods=["post"])
    def seeds(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        body = SeedsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        added, seen = services.crawl_add_seeds(
            crawl=crawl, urls=body.validated_data["urls"], user=request.user
        )
        return Response(
            {
                "added": added,
                "already_seen": seen,
                "credentials_not_sent_to": services.credentials_left_out(crawl),
            }
        )

    @extend_schema(
        summary="The owner enters the crawl's credentials again, for its seeds as they are now",
        description="They replace the saved ones whole (every kind: give all you want sent) "
        "and are bound to the origins of the crawl's seeds now, seeds added since included. "
        "Only the crawl's owner (403 for anyone else); a draft, running or paused crawl.",
        request=AuthSerializer,
        responses=CrawlSerializer,
    )
    @action(detail=True, methods=["post"])
    def credentials(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        if not crawl.is_owned_by(request.user):  # before reading a body that is not theirs
            raise PermissionDenied(services.owner_only(crawl))
        body = AuthSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.crawl_enter_credentials(crawl=crawl, user=request.user, auth=body.validated_data)
        return Response(CrawlSerializer(crawl, context=self.get_serializer_context()).data)

    @extend_schema(
        summary="Put failed requests back in the queue",
        request=RetrySerializer,
        responses=RetryResultSerializer,
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        body = RetrySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        count = services.crawl_retry_failed(
            crawl=crawl, user=request.user, ids=body.validated_data.get("ids")
        )
        return Response({"retried": count})

    @extend_schema(
        summary="Change a running or paused crawl's limits or scope (as Change limits)",
        description="Give only what changes. New include or exclude patterns are taken by "
        "every worker with its next requests; queued requests and retries that no longer fit "
        "are dropped unfetched and counted as cancelled; requests being fetched finish.",
        request=LiveChangeSerializer,
        responses=LiveChangedSerializer,
    )
    @action(detail=True, methods=["post"])
    def change(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        body = LiveChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        done = services.crawl_change_live(crawl=crawl, user=request.user, **body.validated_data)
        return Response(
            {
                "changed": done.lines,
                "dropped": done.dropped,
                "dropping": done.dropping,
                "in_flight": done.in_flight,
                "crawl": CrawlSerializer(crawl, context=self.get_serializer_context()).data,
            }
        )
