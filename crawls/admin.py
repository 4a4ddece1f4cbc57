from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html

from crawls import alerts, schedules, services, webhooks
from crawls.logs import LogFilter
from crawls.models import (
    CRAWL_OPTIONS,
    Alert,
    AlertRule,
    Channel,
    Crawl,
    CrawlEvent,
    CrawlSchedule,
    FailedRequest,
    Page,
    Webhook,
    WebhookDelivery,
)


class ChannelAdminForm(forms.ModelForm):
    class Meta:
        model = Channel
        fields = [
            "slug",
            "name",
            "description",
            "proxy_use",
            "proxy_strategy",
            "host_delay",
            "host_concurrency",
            "user_agent_mode",
            "extract_rules",
        ]

    def clean_extract_rules(self) -> list[dict]:
        """The channel's default rules, checked as a crawl's are."""
        return services.clean_rules(self.cleaned_data.get("extract_rules"))


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    form = ChannelAdminForm
    list_display = ["name", "slug", "proxy_use", "proxy_strategy", "host_delay", "user_agent_mode"]
    prepopulated_fields = {"slug": ["name"]}
    search_fields = ["name", "slug"]


def _crawl_action(action, label: str, verb: str):
    def run(modeladmin, request, queryset):
        done = 0
        for crawl in queryset.select_related("channel"):
            try:
                action(crawl=crawl, user=request.user)
                done += 1
            except (services.CrawlActionError, ValidationError) as exc:
                modeladmin.message_user(request, f"#{crawl.pk}: {exc}", messages.WARNING)
        if done:
            modeladmin.message_user(request, f"{verb} {done} crawl(s).", messages.SUCCESS)

    run.__name__ = f"crawl_{label.lower()}"
    run.short_description = f"{label} selected crawls"
    return run


class EventInline(admin.TabularInline):
    """The crawl's audit trail; its workers' lines (thousands) are on its log page."""

    model = CrawlEvent
    extra = 0
    can_delete = False
    readonly_fields = ["kind", "level", "host", "user", "detail", "at"]
    verbose_name_plural = "audit trail (what users did; the whole log is on the crawl's log page)"

    def get_queryset(self, request):
        return LogFilter(kind="actions").apply(super().get_queryset(request))

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class CrawlAdminForm(forms.ModelForm):
    class Meta:
        model = Crawl
        fields = ["name", "channel", "seeds", *CRAWL_OPTIONS]

    def clean(self) -> dict:
        """The same validation as every other door: services.crawl_clean."""
        data = super().clean()
        fields = {k: data[k] for k in CRAWL_OPTIONS if k in data}
        try:
            services.crawl_clean(
                name=data.get("name", ""),
                seeds=data.get("seeds") or [],
                channel=data.get("channel"),
                **fields,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                for error in errors:
                    self.add_error(field if field in self.fields else None, error)
        return data


@admin.register(Crawl)
class CrawlAdmin(admin.ModelAdmin):
    form = CrawlAdminForm
    list_display = ["id", "name", "channel", "state", "created_by", "created_at", "finished_at"]
    list_filter = ["state", "channel"]
    search_fields = ["name"]
    readonly_fields = ["state", "created_by", "created_at", "started_at", "finished_at", "stats"]
    inlines = [EventInline]
    actions = [
        _crawl_action(services.crawl_start, "Start", "Started"),
        _crawl_action(services.crawl_pause, "Pause", "Paused"),
        _crawl_action(services.crawl_resume, "Resume", "Resumed"),
        _crawl_action(services.crawl_cancel, "Cancel", "Cancelled"),
    ]

    def delete_model(self, request, obj) -> None:
        """As every door deletes (services.crawl_delete): a crawl that may still fetch is
        cancelled first, and its Redis keys go with it."""
        services.crawl_delete(crawl=obj, user=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for crawl in queryset:
            self.delete_model(request, crawl)

    def save_model(self, request, obj, form, change) -> None:
        """New crawls go through crawl_create, like every other door."""
        if change:
            before = Crawl.objects.get(pk=obj.pk)
            super().save_model(request, obj, form, change)
            services.crawl_admin_changed(crawl=obj, before=before, user=request.user)
            return
        fields = {k: getattr(obj, k) for k in CRAWL_OPTIONS}
        created = services.crawl_create(
            user=request.user, name=obj.name, seeds=obj.seeds, channel=obj.channel, **fields
        )
        obj.pk = created.pk
        obj.refresh_from_db()


@admin.register(Page)
class PageAdmin(admin.ModelAdmin):
    list_display = ["url", "crawl", "status", "bytes", "elapsed_ms", "depth", "fetched_at"]
    list_filter = ["status"]
    search_fields = ["url", "title"]
    raw_id_fields = ["crawl"]
    exclude = ["body"]


@admin.register(FailedRequest)
class FailedRequestAdmin(admin.ModelAdmin):
    list_display = ["url", "crawl", "attempts", "last_status", "last_error", "failed_at"]
    search_fields = ["url"]
    raw_id_fields = ["crawl"]


class ScheduleAdminForm(forms.ModelForm):
    class Meta:
        model = CrawlSchedule
        fields = ["cron", "enabled"]

    def clean_cron(self) -> str:
        """The check every door makes: schedules.clean_cron."""
        try:
            return schedules.clean_cron(self.cleaned_data["cron"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["cron"]) from None


@admin.register(CrawlSchedule)
class CrawlScheduleAdmin(admin.ModelAdmin):
    """Made on the Schedules page or the API; here cron and enabled change, through
    schedule_update (which also moves next_run_at)."""

    form = ScheduleAdminForm

    list_display = ["id", "template", "cron", "enabled", "next_run_at", "last_run_at", "created_by"]
    list_select_related = ["template", "created_by"]
    list_filter = ["enabled"]
    search_fields = ["template__name", "cron"]
    fields = [
        "template",
        "cron",
        "enabled",
        "next_run_at",
        "last_run_at",
        "last_error",
        "created_by",
        "created_at",
    ]
    readonly_fields = [
        "template",
        "next_run_at",
        "last_run_at",
        "last_error",
        "created_by",
        "created_at",
    ]

    def has_add_permission(self, request) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        schedules.schedule_update(schedule=obj, cron=obj.cron, enabled=obj.enabled)

    def delete_model(self, request, obj) -> None:
        schedules.schedule_delete(schedule=obj)


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    """Made on the Webhooks page or the API, where the secret is shown once; never here."""

    list_display = ["id", "url", "channel", "crawl", "events", "active", "created_by"]
    list_filter = ["active", "channel"]
    search_fields = ["url"]
    list_select_related = ["channel", "crawl", "created_by"]
    fields = [
        "channel",
        "crawl",
        "url",
        "events",
        "active",
        "created_by",
        "created_at",
        "deliveries",
    ]
    readonly_fields = [
        "channel",
        "crawl",
        "url",
        "events",
        "created_by",
        "created_at",
        "deliveries",
    ]

    @admin.display(description="Deliveries")
    def deliveries(self, obj: Webhook) -> str:
        """A link to its deliveries' list: a channel's webhook gathers one per crawl, for ever,
        too many to show inline."""
        url = reverse("admin:crawls_webhookdelivery_changelist") + f"?webhook__id__exact={obj.pk}"
        return format_html('<a href="{}">{} deliveries</a>', url, obj.deliveries.count())

    def has_add_permission(self, request) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        webhooks.webhook_update(webhook=obj, active=obj.active)

    def delete_model(self, request, obj) -> None:
        webhooks.webhook_delete(webhook=obj)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """A record of what was sent and how it went: read only."""

    list_display = [
        "id",
        "webhook",
        "event",
        "crawl",
        "status",
        "attempts",
        "response_status",
        "created_at",
        "delivered_at",
    ]
    list_filter = ["status", "event", "webhook"]
    search_fields = ["webhook__url"]
    list_select_related = ["webhook", "crawl"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    """Made on a crawl's page, the Alerts page or the API, where every field is checked; here
    a rule is switched on or off, or deleted."""

    list_display = ["id", "kind", "percent", "minutes", "channel", "crawl", "active", "created_by"]
    list_filter = ["active", "kind", "channel"]
    list_select_related = ["channel", "crawl", "created_by"]
    fields = [
        "channel",
        "crawl",
        "kind",
        "percent",
        "minutes",
        "emails",
        "active",
        "created_by",
        "created_at",
    ]
    readonly_fields = [
        "channel",
        "crawl",
        "kind",
        "percent",
        "minutes",
        "emails",
        "created_by",
        "created_at",
    ]

    def has_add_permission(self, request) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        alerts.rule_update(rule=obj, active=obj.active)

    def delete_model(self, request, obj) -> None:
        alerts.rule_delete(rule=obj)


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    """The alert history: read only."""

    list_display = ["id", "kind", "crawl", "subject", "fired_at", "resolved_at"]
    list_filter = ["kind"]
    search_fields = ["line", "subject"]
    list_select_related = ["crawl"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
