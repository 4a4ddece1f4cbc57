from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from crawlhub import workers
from crawlhub.health import health


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    """For monitors, so no login; error details only for signed-in users."""
    report = health()
    if not request.user.is_authenticated:
        for part in ("database", "redis", "workers"):
            if not report[part]["ok"]:
                report[part]["error"] = report[part]["error"].split(":")[0]
    return JsonResponse(report, status=200 if report["ok"] else 503)


def workers_page(request: HttpRequest) -> HttpResponse:
    return render(request, "crawlhub/workers.html", workers.overview())
