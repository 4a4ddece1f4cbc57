from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.http import require_safe

from crawlhub.processes import workers
from crawlhub.redis import redis_config
from crawlhub.sample_site import SampleSite
from crawlhub.web.health import health
from crawls.services import visible_crawls

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


def workers_page(request: HttpRequest) -> HttpResponse:
    """Live workers, queue lengths and failed jobs. A failed job's description and error name
    other people's crawls, URLs and tracebacks: staff only; everyone else sees the counts, and
    what each worker runs only when it is for one of their own crawls."""
    overview = workers.overview(with_failed=request.user.is_staff)
    if not request.user.is_staff:
        running = {w["job_crawl"] for w in overview["workers"] if w["job_crawl"] is not None}
        own = visible_crawls(request.user).filter(pk__in=running).values_list("pk", flat=True)
        workers.hide_jobs(overview, shown_crawls=set(own))
        workers.hide_hosts(overview)
    failed_count = sum(queue["failed"] for queue in overview["queues"])
    # Where the workers meet, for staff: address, TLS, user and db; never the password.
    redis_where = redis_config.where(settings.REDIS_URL) if request.user.is_staff else ""
    return render(
        request,
        "crawlhub/workers.html",
        {"nav": "workers", "failed_count": failed_count, "redis_where": redis_where, **overview},
    )


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
