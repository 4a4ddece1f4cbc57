"""The API's errors, JSON for every door: service errors mapped to HTTP statuses."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError
from rest_framework import exceptions, renderers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from crawlhub.errors import ActionRefused
from crawlhub.redis.connections import REDIS_ERRORS


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The crawl's state does not allow this."
    default_code = "conflict"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "A service crawlhub needs is not reachable; nothing was changed."
    default_code = "service_unavailable"


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Service errors as JSON: ValidationError -> 400 {field: [messages]}, a refused crawl
    action -> 409 {detail}, Redis away -> 503 {detail}."""
    if isinstance(exc, DjangoValidationError):
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(detail)
    elif isinstance(exc, ActionRefused):
        exc = Conflict(str(exc))
    elif isinstance(exc, ProtectedError):
        exc = Conflict("It is still in use and cannot be deleted.")
    elif isinstance(exc, REDIS_ERRORS):
        exc = ServiceUnavailable(f"Redis is not reachable; nothing was changed ({exc}).")
    return drf_exception_handler(exc, context)


class JSONErrors:
    """For views that render files or YAML: their errors are still JSON."""

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, Response) and response.status_code >= 400:
            request.accepted_renderer = renderers.JSONRenderer()
            request.accepted_media_type = request.accepted_renderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)
