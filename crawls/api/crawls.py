"""The crawl and channel endpoints of the JSON API. They parse input and call crawls/services/
(and crawls/exports.py), like the pages and the CLI do."""

from __future__ import annotations

from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, renderers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.web import serializers as api_fields
from crawlhub.web.api_errors import JSONErrors
from crawls import exports, queued, services
from crawls.api.live_fields import LiveChangeSerializer, QueueSerializer
from crawls.api.log import LOG_PARAMETERS, LogLineSerializer, LogSerializer
from crawls.logs import PAGE_SIZE, LogFilter, log_page
from crawls.models import (
    CRAWL_OPTIONS,
    Change,
    Channel,
    Crawl,
    FailedRequest,
    LinesField,
    Page,
    PageSource,
    RulesField,
)
from crawls.pages import PAGE_SIZES, STATUS_CLASSES, PageFilter, QueryError, page_slice
from crawls.services import visible_crawls
from crawls.views.exports import export_response


def _size(value: str | None) -> int:
    if not value:
        return PAGE_SIZE
    try:
        return int(value)
    except ValueError:
        raise serializers.ValidationError({"size": [f"{value[:40]!r} is not a number."]}) from None


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
        help_text="Why a running crawl fetches nothing now: reason 'memory' while Redis holds "
        "crawlhub's budget of its memory (CRAWLHUB_REDIS_MEMORY_BUDGET_PERCENT of maxmemory; "
        "it goes on by itself once memory frees), with the line its page shows; reason and "
        "line empty otherwise."
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


class HostSerializer(serializers.Serializer):
    host = serializers.CharField(help_text="hostname[:port], as the crawl names it.")
    queued = serializers.IntegerField(help_text="Requests waiting in the queue.")
    in_flight = serializers.IntegerField(help_text="Requests claimed and not yet answered.")
    done = serializers.IntegerField(help_text="Requests it answered.")
    errors = serializers.IntegerField(
        help_text="Attempts that got no usable answer: errors, each retry, failures (the "
        "crawl's errors count requests, once each)."
    )
    delay = serializers.FloatField(help_text="Seconds between requests now, push-back included.")
    next_at = api_fields.DateTimeField(
        allow_null=True, help_text="When it may be asked next; null: now."
    )
    held_until = api_fields.DateTimeField(allow_null=True, help_text="null: not held.")
    why = serializers.CharField(allow_blank=True, help_text="Why it is parked or slowed.")


class HostActionSerializer(serializers.Serializer):
    host = serializers.CharField(max_length=300, help_text="As `hosts` lists it.")


class HostHoldSerializer(HostActionSerializer):
    minutes = serializers.FloatField(help_text=f"1 to {services.HOLD_MAX_MINUTES}.")


class HostHeldSerializer(serializers.Serializer):
    host = serializers.CharField()
    held_until = api_fields.DateTimeField()


class HostDroppedSerializer(serializers.Serializer):
    host = serializers.CharField()
    dropped = serializers.IntegerField(help_text="Queued requests and retries dropped.")


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


class IsStaffOrReadOnly(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or bool(request.user.is_staff)


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
        summary="Every host of the crawl, busiest first (as the host view)",
        responses=HostSerializer(many=True),
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def hosts(self, request: Request, pk=None) -> Response:
        return Response(HostSerializer(services.crawl_hosts(self.get_object()), many=True).data)

    def _host_action(self, serializer: type[serializers.Serializer], fn):
        """Parse the body, run the service on the crawl: (host, what the service returned)."""
        crawl = self.get_object()
        body = serializer(data=self.request.data)
        body.is_valid(raise_exception=True)
        fields = dict(body.validated_data)
        try:
            return fields["host"], fn(crawl=crawl, user=self.request.user, **fields)
        except services.CrawlActionError as exc:
            # The service names a bad input's field first ("minutes: ..."): a 400 for it; the
            # crawl's state refusing the action stays a 409.
            field, _, message = str(exc).partition(": ")
            if field in fields:
                raise serializers.ValidationError({field: [message]}) from None
            raise

    @extend_schema(
        summary="Ask a host nothing until a time; what is being fetched finishes",
        request=HostHoldSerializer,
        responses=HostHeldSerializer,
    )
    @action(detail=True, methods=["post"], url_path="hosts/hold")
    def hosts_hold(self, request: Request, pk=None) -> Response:
        host, until = self._host_action(HostHoldSerializer, services.crawl_host_hold)
        return Response({"host": host.strip().lower(), "held_until": until})

    @extend_schema(
        summary="End a host's hold", request=HostActionSerializer, responses=HostActionSerializer
    )
    @action(detail=True, methods=["post"], url_path="hosts/release")
    def hosts_release(self, request: Request, pk=None) -> Response:
        host, _ = self._host_action(HostActionSerializer, services.crawl_host_release)
        return Response({"host": host.strip().lower()})

    @extend_schema(
        summary="Drop a host's queued requests and retries (counted as cancelled)",
        request=HostActionSerializer,
        responses=HostDroppedSerializer,
    )
    @action(detail=True, methods=["post"], url_path="hosts/drop")
    def hosts_drop(self, request: Request, pk=None) -> Response:
        host, dropped = self._host_action(HostActionSerializer, services.crawl_host_drop)
        return Response({"host": host.strip().lower(), "dropped": dropped})

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

    @extend_schema(
        summary="What is queued: counts by host and depth, and the requests, a screen at a time",
        parameters=[
            OpenApiParameter("after", str, description="`next` gives it: the screen after."),
            OpenApiParameter(
                "size",
                int,
                enum=[*queued.PAGE_SIZES],
                description=f"Requests per screen; {queued.DEFAULT_SIZE} by default.",
            ),
        ],
        responses=QueueSerializer,
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def queue(self, request: Request, pk=None) -> Response:
        crawl = self.get_object()
        size_text = request.query_params.get("size", "")
        size = int(size_text) if size_text.isdigit() else queued.DEFAULT_SIZE
        if size not in queued.PAGE_SIZES:
            raise serializers.ValidationError(
                {"size": [f"One of {', '.join(map(str, queued.PAGE_SIZES))}."]}
            )
        try:
            screen = queued.crawl_queue(
                crawl, after=request.query_params.get("after", ""), size=size
            )
        except queued.CursorError as exc:
            raise serializers.ValidationError({"after": [str(exc)]}) from None
        base = request.build_absolute_uri(request.path)
        return Response(
            {
                "queued": screen.queued,
                "on_disk": screen.on_disk,
                "retrying": screen.retrying,
                "by_host": [{"host": h, "queued": n} for h, n in screen.hosts],
                "by_depth": [{"depth": d, "queued": n} for d, n in screen.depths],
                "depths_partial": screen.depths_partial,
                "next": f"{base}?{urlencode({'size': size, 'after': screen.next})}"
                if screen.next
                else None,
                "results": screen.rows,
            }
        )

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
