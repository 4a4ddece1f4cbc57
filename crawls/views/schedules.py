"""Pages of scheduled crawls: the list, a new schedule, one schedule and its runs."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from crawlhub.redis.connections import REDIS_ERRORS
from crawls import schedules
from crawls.services import CrawlActionError
from crawls.views.forms import ScheduleForm, add_service_errors


def schedule_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "crawls/schedule_list.html",
        {
            "nav": "schedules",
            "time_zone": settings.TIME_ZONE,
            "schedules": schedules.schedules_listed(request.user),
        },
    )


def schedule_new(request: HttpRequest) -> HttpResponse:
    form = ScheduleForm(
        request.POST or None,
        user=request.user,
        initial={"template": request.GET.get("template")},
    )
    if request.method == "POST" and form.is_valid():
        try:
            schedule = schedules.schedule_create(
                user=request.user,
                template=form.cleaned_data["template"],
                cron=form.cleaned_data["cron"],
                enabled=form.cleaned_data["enabled"],
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Schedule created.")
            return redirect(schedule)
    return render(
        request,
        "crawls/schedule_new.html",
        {"nav": "schedules", "form": form},
        status=400 if form.errors else 200,
    )


def schedule_detail(request: HttpRequest, pk: int) -> HttpResponse:
    schedule = get_object_or_404(schedules.schedules_visible_to(request.user), pk=pk)
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "update":
                schedules.schedule_update(
                    schedule=schedule,
                    cron=request.POST.get("cron", schedule.cron),
                    enabled=bool(request.POST.get("enabled")),
                )
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
    return render(
        request,
        "crawls/schedule_detail.html",
        {
            "nav": "schedules",
            "schedule": schedule,
            "upcoming": schedules.upcoming(schedule),
            "runs": schedule.runs.select_related("channel")[:100],
            "runs_credentials": schedules.runs_credentials(schedule),
        },
    )
