"""What a crawl has left to fetch, in the JSON API: its hosts (and holding, releasing or
dropping one, as the host view does) and its queue. CrawlViewSet (crawls/api/crawls.py) takes
these endpoints from QueueEndpoints, and gives them the crawl (get_object)."""

from __future__ import annotations

from urllib.parse import urlencode

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from crawlhub.web import serializers as api_fields
from crawls import queued, services
from crawls.api.live_fields import QueueSerializer


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


class QueueEndpoints:
    """/api/crawls/{id}/hosts/, hosts/hold/, hosts/release/, hosts/drop/ and queue/
    (CrawlViewSet's)."""

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
