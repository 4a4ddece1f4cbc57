"""Export downloads of a crawl's pages (JSONL, CSV, WARC) and failure queue (JSONL, CSV),
streamed."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404

from crawls import exports
from crawls.page_filters import PageFilter
from crawls.services import visible_crawls


def export_response(
    request: HttpRequest, crawl, fmt: str, flt: PageFilter | None = None
) -> StreamingHttpResponse:
    """The export streamed as a download: every page, or those the filter (the pages
    browser's) selects. Raises exports.ExportError when it cannot be made."""
    chunks = exports.iter_export(crawl, fmt, flt)
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
        flt = PageFilter.from_params(request.GET)
    except ValidationError as exc:
        text = "The filters cannot be used: " + " ".join(exc.messages)
        return HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
    try:
        return export_response(request, crawl, fmt, flt if flt.active else None)
    except exports.ExportError as exc:
        return HttpResponse(str(exc), status=409, content_type="text/plain; charset=utf-8")


def failures_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    try:
        chunks = exports.iter_failures(crawl, fmt)
    except exports.ExportError as exc:
        return HttpResponse(str(exc), status=404, content_type="text/plain; charset=utf-8")
    if isinstance(request, ASGIRequest):
        chunks = exports.aiter_export(chunks)
    response = StreamingHttpResponse(chunks, content_type=exports.FORMATS[fmt][0])
    name = exports.failures_filename(crawl, fmt)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
