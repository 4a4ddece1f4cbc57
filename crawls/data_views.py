"""Pages for a crawl's data: export downloads, schedules and webhooks."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from crawlhub.access import visible_crawls
from crawls import exports, schedules, webhooks
from crawls.models import Channel, Crawl, Webhook, WebhookEvent
from crawls.services import REDIS_ERRORS, CrawlActionError


def export_response(request: HttpRequest, crawl, fmt: str) -> StreamingHttpResponse:
    """The export streamed as a download. Raises exports.ExportError when it cannot be made."""
    chunks = exports.iter_export(crawl, fmt)
    if isinstance(request, ASGIRequest):
        # Django reads a sync iterator to the end before sending it under ASGI.
        chunks = exports.aiter_export(chunks)
    response = StreamingHttpResponse(chunks, content_type=exports.FORMATS[fmt][0])
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(crawl, fmt)}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def crawl_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    try:
        return export_response(request, crawl, fmt)
    except exports.ExportError as exc:
        return HttpResponse(str(exc), status=409, content_type="text/plain; charset=utf-8")


# --- Schedules --------------------------------------------------------------------------------


class ScheduleForm(forms.Form):
    template = forms.ModelChoiceField(
        queryset=Crawl.objects.none(), help_text="Each run copies this crawl's seeds and options."
    )
    cron = forms.CharField(
        max_length=100, initial="0 3 * * *",
        help_text=f"minute hour day-of-month month day-of-week, in {settings.TIME_ZONE}; "
        "or @hourly, @daily, @weekly.",
    )  # fmt: skip
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["template"].queryset = schedules.template_choices(user)


def _form_errors(form: forms.Form, exc: ValidationError) -> None:
    for field, errors in exc.message_dict.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)


def schedule_list(request: HttpRequest) -> HttpResponse:
    return render(request, "crawls/schedule_list.html", {
        "nav": "schedules", "time_zone": settings.TIME_ZONE,
        "schedules": schedules.schedules_listed(request.user),
    })  # fmt: skip


def schedule_new(request: HttpRequest) -> HttpResponse:
    form = ScheduleForm(
        request.POST or None, user=request.user,
        initial={"template": request.GET.get("template")},
    )  # fmt: skip
    if request.method == "POST" and form.is_valid():
        try:
            schedule = schedules.schedule_create(
                user=request.user, template=form.cleaned_data["template"],
                cron=form.cleaned_data["cron"], enabled=form.cleaned_data["enabled"],
            )  # fmt: skip
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, "Schedule created.")
            return redirect(schedule)
    return render(request, "crawls/schedule_new.html", {"nav": "schedules", "form": form},
                  status=400 if form.errors else 200)  # fmt: skip


def schedule_detail(request: HttpRequest, pk: int) -> HttpResponse:
    schedule = get_object_or_404(schedules.schedules_visible_to(request.user), pk=pk)
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "update":
                schedules.schedule_update(
                    schedule=schedule, cron=request.POST.get("cron", schedule.cron),
                    enabled=bool(request.POST.get("enabled")),
                )  # fmt: skip
                messages.success(request, "Schedule saved.")
            elif action == "run":
                crawl = schedules.schedule_run(schedule=schedule, user=request.user)
                messages.success(request, f"Run started: crawl #{crawl.pk}.")
            elif action == "delete":
                schedules.schedule_delete(schedule=schedule)
                messages.success(request, "Schedule deleted; its runs are kept.")
                return redirect("schedule_list")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        except (CrawlActionError, *REDIS_ERRORS) as exc:
            messages.error(request, str(exc))
        return redirect(schedule)
    return render(request, "crawls/schedule_detail.html", {
        "nav": "schedules", "schedule": schedule, "upcoming": schedules.upcoming(schedule),
        "runs": schedule.runs.select_related("channel")[:100],
    })  # fmt: skip


# --- Webhooks ---------------------------------------------------------------------------------


class WebhookForm(forms.Form):
    url = forms.CharField(
        max_length=2000, label="URL",
        help_text="Gets a POST with JSON, signed with the webhook's secret.",
    )  # fmt: skip
    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices, initial=WebhookEvent.values,
        widget=forms.CheckboxSelectMultiple,
    )  # fmt: skip
    crawl = forms.ModelChoiceField(queryset=Crawl.objects.none(), required=False)
    channel = forms.ModelChoiceField(queryset=Channel.objects.none(), required=False,
                                     help_text="Staff: every crawl of a channel.")  # fmt: skip

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["crawl"].queryset = visible_crawls(user)
        if user.is_staff:
            self.fields["channel"].queryset = Channel.objects.all()
        else:
            del self.fields["channel"]


def webhook_list(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(
        request.POST or None, user=request.user,
        initial={"crawl": request.GET.get("crawl"), "channel": request.GET.get("channel")},
    )  # fmt: skip
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            webhook, secret = webhooks.webhook_create(
                user=request.user, url=data["url"], events=data["events"],
                crawl=data.get("crawl"), channel=data.get("channel"),
            )  # fmt: skip
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            # The only time the secret is shown: on the response to its creation.
            return _webhook_page(request, webhook, secret=secret)
    hooks = webhooks.webhooks_visible_to(request.user)
    return render(request, "crawls/webhook_list.html", {
        "nav": "webhooks", "webhooks": hooks, "form": form,
    }, status=400 if form.errors else 200)  # fmt: skip


def _webhook_page(request: HttpRequest, webhook: Webhook, secret: str = "") -> HttpResponse:
    return render(request, "crawls/webhook_detail.html", {
        "nav": "webhooks", "webhook": webhook, "secret": secret,
        "can_change": webhooks.can_change(request.user, webhook),
        "deliveries": webhook.deliveries.select_related("crawl")[:100],
    })  # fmt: skip


def webhook_detail(request: HttpRequest, pk: int) -> HttpResponse:
    webhook = get_object_or_404(webhooks.webhooks_visible_to(request.user), pk=pk)
    if request.method == "POST":
        webhooks.check_can_change(request.user, webhook)
        action = request.POST.get("action")
        if action in ("enable", "disable"):
            webhooks.webhook_update(webhook=webhook, active=action == "enable")
            messages.success(request, f"Webhook {action}d.")
        elif action == "delete":
            webhooks.webhook_delete(webhook=webhook)
            messages.success(request, "Webhook deleted.")
            return redirect("webhook_list")
        return redirect(webhook)
    return _webhook_page(request, webhook)
