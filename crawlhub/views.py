from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.views.decorators.http import require_safe

from crawlhub.sample_site import SampleSite
from crawlhub.web.health import health

# The demo crawl's site, served by crawlhub itself so that it works offline at once.
SAMPLE_SITE = SampleSite(pages=300, prefix="/sample")


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    """For monitors, so no login; error details only for signed-in users."""
    report = health()
    if not request.user.is_authenticated:
        for part in ("database", "redis", "workers"):
            if not report[part]["ok"]:
                report[part]["error"] = report[part]["error"].split(":")[0]
    return JsonResponse(report, status=200 if report["ok"] else 503)


@login_not_required
@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico before they read a page's icon link (the login page too)."""
    return redirect(static("img/favicon.svg"), permanent=True)


@login_not_required
@require_safe
def sample_site(request: HttpRequest, path: str = "") -> HttpResponse:
    """The generated sample site under /sample/, for the demo crawl (no login: crawlers)."""
    origin = request.build_absolute_uri("/").rstrip("/")
    status, headers, body = SAMPLE_SITE.render(request.get_full_path(), origin=origin)
    response = HttpResponse(body, status=status, content_type=headers.pop("Content-Type"))
    for name, value in headers.items():
        response[name] = value
    return response
