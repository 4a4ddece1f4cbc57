"""The comparison of two crawls (a schedule's runs, or any two someone picks): how many pages
are new, changed, unchanged and gone, with the list of each, and each list as CSV."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render

from crawlhub.web.lookups import typed_id
from crawls import changes, exports
from crawls.models import Crawl, CrawlState
from crawls.services import visible_crawls

SHOWN = 100
CHOICES = 200  # crawls offered in the pickers, newest first


def _pick(request: HttpRequest, name: str) -> tuple[Crawl | None, str]:
    """The crawl the parameter names, if this user may see it; else the error."""
    raw = request.GET.get(name, "").strip()
    if not raw:
        return None, ""
    number = typed_id(raw)
    if number is None:
        return None, f"{raw[:20]!r} is not a crawl id."
    crawl = visible_crawls(request.user).filter(pk=number).first()
    return crawl, "" if crawl else f"There is no crawl #{raw} that you can see."


def _pair(request: HttpRequest) -> tuple[Crawl | None, Crawl | None, list[str], str]:
    older, error_a = _pick(request, "a")
    newer, error_b = _pick(request, "b")
    errors = [e for e in (error_a, error_b) if e]
    kind = request.GET.get("show", "")
    if kind and kind not in changes.KINDS:
        errors.append(f"Show one of {', '.join(changes.KINDS)}, not {kind[:20]!r}.")
        kind = ""
    return older, newer, errors, kind


def _earlier_run(user, crawl: Crawl) -> Crawl | None:
    """The latest crawl before `crawl` of the same seeds that this user may see and that was
    started: what "Compare with another crawl" means first, rather than the newest of any."""
    before = visible_crawls(user).filter(pk__lt=crawl.pk).exclude(state=CrawlState.DRAFT)
    for candidate in before.order_by("-pk").only("id", "seeds")[:CHOICES]:
        if candidate.seeds == crawl.seeds:
            return candidate
    return None


def compare(request: HttpRequest) -> HttpResponse:
    older, newer, errors, kind = _pair(request)
    if newer is not None and older is None and not request.GET.get("a", "").strip():
        older = _earlier_run(request.user, newer)
    context = {
        "nav": "crawls",
        "older": older,
        "newer": newer,
        "errors": errors,
        "kind": kind or changes.Change.CHANGED,
        "kinds": changes.KINDS,
        "choices": visible_crawls(request.user).only("id", "name", "created_at")[:CHOICES],
    }
    if older and newer and not errors:
        context["counts"] = list(changes.counts(older, newer).items())
        shown = changes.compared(older, newer, context["kind"]).defer("body").order_by("id")
        context["rows"] = list(shown[:SHOWN])
    return render(request, "crawls/compare.html", context, status=400 if errors else 200)


def compare_export(request: HttpRequest) -> HttpResponse:
    """One kind of the comparison as CSV: the pages (of the newer crawl; gone ones of the
    older) with their columns, streamed."""
    older, newer, errors, kind = _pair(request)
    if errors or not (older and newer and kind):
        errors = errors or ["Give two crawls (a, b) and which pages to show."]
        return HttpResponse("\n".join(errors), status=400, content_type="text/plain")
    pages = changes.compared(older, newer, kind)
    response = StreamingHttpResponse(exports.csv_of(pages), content_type=exports.FORMATS["csv"][0])
    name = f"crawls-{older.pk}-{newer.pk}-{kind}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
