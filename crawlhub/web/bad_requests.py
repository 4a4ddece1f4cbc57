"""Requests refused before a view could say why, answered with what was wrong and the limit:
JSON `{"detail": ...}` under /api/ (like every API error), a page everywhere else.

- A body past DATA_UPLOAD_MAX_MEMORY_SIZE, or with more fields or files than Django reads, or a
  multipart body it cannot parse. Django raises these when request.POST or request.body is
  first read (a middleware, a form, DRF's parser) and hands them to `handler400`
  (crawlhub/urls.py), whose default is a bare "Bad Request (400)".
- A NUL character in the path or the query string. No field takes one, and PostgreSQL refuses
  it in any text it is asked to compare, so `?state=%00` would be a 500 on every list filter.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from django.views import defaults

API_PREFIX = "/api/"
MB = 1024 * 1024


def refusal(request: HttpRequest, message: str, status: int = 400) -> HttpResponse:
    """The answer to a request refused for `message`: JSON on the API, a page elsewhere."""
    if request.path_info.startswith(API_PREFIX):
        return JsonResponse({"detail": message}, status=status)
    return render(request, "crawlhub/refused.html", {"message": message}, status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400: says which limit a refused body passed; anything else as Django answers it
    (a host not in ALLOWED_HOSTS must stay a plain page, since no message can be trusted)."""
    if isinstance(exception, RequestDataTooBig):
        limit = f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE / MB:g} MB"
        return refusal(
            request,
            f"The request is larger than {limit} (uploaded files aside), the most crawlhub reads.",
            status=413,
        )
    if isinstance(exception, TooManyFieldsSent):
        return refusal(
            request,
            f"The form has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} "
            "fields, the most crawlhub reads.",
        )
    if isinstance(exception, TooManyFilesSent):
        return refusal(
            request,
            f"More than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files were "
            "sent at once, the most crawlhub reads.",
        )
    if isinstance(exception, MultiPartParserError):
        return refusal(request, f"The form's data could not be read: {exception}.")
    return defaults.bad_request(request, exception)


def _has_nul(request: HttpRequest) -> bool:
    if "\x00" in request.path_info:
        return True
    return any(
        "\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()
    )


class RefuseNulMiddleware:
    """A path or query string with a NUL character (%00) is refused with 400."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _has_nul(request):
            return refusal(request, "The address has a NUL character (%00); no field takes one.")
        return self.get_response(request)
