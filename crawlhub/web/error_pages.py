"""The pages for 403, 404 and 500 (handler403/404/500 in crawlhub/urls.py) and for a form the
CSRF check refused (CSRF_FAILURE_VIEW): crawlhub's own
layout with its nav, so that a wrong link leaves one a click from the crawls; JSON
`{"detail": ...}` under /api/ as every API error is.

A 500 may come from a database or a template that is away or broken: its page is rendered
with the request (the nav, the user) when that works, and from the template alone when not.
"""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.template import loader

from crawlhub.web.bad_requests import API_PREFIX

log = logging.getLogger(__name__)


def _api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    reason = str(exception or "") or "Your account doesn't have access to this page."
    if _api(request):
        return JsonResponse({"detail": reason}, status=403)
    return render(request, "403.html", {"reason": reason}, status=403)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form the CSRF check refused: most often a page open from before one signed in or out
    (in this tab or another), whose token is no longer the browser's. Django's own page for it
    carries an inline style the Content-Security-Policy refuses, and no way back."""
    if _api(request):
        return JsonResponse({"detail": f"CSRF check failed: {reason}"}, status=403)
    why = (
        "This form was sent with an out-of-date security token (CSRF check: "
        f"{reason.rstrip('.')}). The page it came from was opened before you signed in or out, "
        "here or in another tab. Nothing was changed: reload that page and send the form again."
    )
    return render(request, "403.html", {"reason": why}, status=403)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return render(request, "404.html", {"path": request.path}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if _api(request):
        return JsonResponse({"detail": "Server error: the failure is logged."}, status=500)
    try:
        return render(request, "500.html", status=500)
    except Exception:  # the context (the user, from the database) is what failed: no nav
        log.exception("the 500 page could not be rendered with its request")
        return HttpResponseServerError(loader.render_to_string("500.html"))
