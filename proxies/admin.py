"""The proxy inventory in the Django admin: read-only rows, changes only through actions that
call proxies.services (the same code path as the Proxies page and the CLI)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html

from proxies import pool, services
from proxies.models import Proxy, ProxyEvent


class ChannelFilter(admin.SimpleListFilter):
    title = "channel pool"
    parameter_name = "channel"

    def lookups(self, request, model_admin):
        return [(c, c) for c in pool.channels()]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        sets = pool.channel_members(channel=self.value())
        keys = sets["free"] | sets["leased"]
        return queryset.filter(pk__in=[p.pk for p in queryset if p.key in keys])


class ScoreFilter(admin.SimpleListFilter):
    title = "score"
    parameter_name = "score"
    RANGES = {"0-5": (0, 5), "5-6": (5, 6), "6-10": (6, 10), "10+": (10, None)}

    def lookups(self, request, model_admin):
        return [(r, r) for r in self.RANGES]

    def queryset(self, request, queryset):
        if self.value() not in self.RANGES:
            return queryset
        low, high = self.RANGES[self.value()]
        queryset = queryset.filter(score__gte=low)
        return queryset if high is None else queryset.filter(score__lt=high)


class ProxyEventInline(admin.TabularInline):
    model = ProxyEvent
    fields = ("at", "kind", "user", "actor", "detail")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-at", "-id")
    max_num = 0

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user")


@admin.register(Proxy)
class ProxyAdmin(admin.ModelAdmin):
    list_display = (
        "masked_url",
        "state",
        "score",
        "latency_ms",
        "last_validated_at",
        "successes",
        "failures",
        "anonymity",
        "source",
    )
    list_filter = ("state", ChannelFilter, ScoreFilter, "anonymity", "source")
    search_fields = ("host", "source")
    ordering = ("-score",)
    sortable_by = ("score", "latency_ms", "last_validated_at", "failures", "successes", "state")
    actions = ("remove_selected", "disable_selected", "enable_selected", "validate_selected")
    # Credentials are never shown: the password is left out of every view.
    readonly_fields = (
        "masked_url",
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
        "added_by",
        "removed_at",
        "removed_by",
        "removed_why",
    )
    fields = readonly_fields
    inlines = [ProxyEventInline]
    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # proxies come in through an import, which reports bad lines

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # removal is a state with an audit row, not a deleted row

    @admin.display(description="proxy")
    def masked_url(self, obj: Proxy) -> str:
        return obj.masked_url

    @admin.action(
        permissions=["change"],
        description="Remove selected proxies (from every pool, with a reason)",
    )
    def remove_selected(self, request, queryset):
        why = (request.POST.get("why") or "").strip()
        if request.POST.get("apply") and why:
            self.act(request, "remove", queryset, why=why)
            return None
        return TemplateResponse(
            request,
            "proxies/admin_remove.html",
            {
                **self.admin_site.each_context(request),
                "proxies": list(queryset[:1000]),
                "count": queryset.count(),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "opts": self.model._meta,
            },
        )

    @admin.action(permissions=["change"], description="Disable selected proxies")
    def disable_selected(self, request, queryset):
        self.act(request, "disable", queryset, why="admin")

    @admin.action(
        permissions=["change"],
        description="Enable selected proxies (validated before they enter the pools)",
    )
    def enable_selected(self, request, queryset):
        self.act(request, "enable", queryset)

    @admin.action(permissions=["change"], description="Validate selected proxies now")
    def validate_selected(self, request, queryset):
        result = services.bulk_action(action="validate", proxies=queryset, user=request.user)
        self.message_user(request, f"Validation of {result.selected} proxies queued.")

    def act(self, request, action: str, queryset, why: str = "") -> None:
        """Through the same service as the Proxies page: a large selection becomes a job."""
        result = services.bulk_action(action=action, proxies=queryset, why=why, user=request.user)
        past = {"remove": "Removed", "disable": "Disabled", "enable": "Enabled"}[action]
        if result.job is None:
            self.message_user(request, f"{past} {result.changed} proxies.", messages.SUCCESS)
            return
        link = format_html('<a href="{}">follow it</a>', result.job.get_absolute_url())
        self.message_user(
            request,
            format_html("{} {} proxies in the background: {}.", past, f"{result.selected:,}", link),
            messages.INFO,
        )


@admin.register(ProxyEvent)
class ProxyEventAdmin(admin.ModelAdmin):
    list_display = ("at", "proxy", "kind", "who", "detail")
    list_filter = ("kind", "actor")
    search_fields = ("proxy__host", "detail")
    list_select_related = ("proxy", "user")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
