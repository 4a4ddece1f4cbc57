"""The crawl's log page: its whole log, filtered and paged (crawls/logs.py), following the crawl
while it runs; the crawl's page shows its newest lines (crawls.views.crawls._activity)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from crawls.logs import KIND_GROUPS, LogFilter, log_page
from crawls.models import CrawlEvent
from crawls.services import visible_crawls

LEVEL_CHOICES = [("", "All levels"), ("warning", "Warnings and errors"), ("error", "Errors")]


def crawl_log(request: HttpRequest, pk: int) -> HttpResponse:
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    problems: dict[str, list[str]] = {}
    try:
        flt = LogFilter.from_params(request.GET)
        found = log_page(crawl, flt, before=request.GET.get("before"))
    except ValidationError as exc:
        problems = exc.message_dict
        flt = LogFilter()
        found = log_page(crawl, flt)
    before = request.GET.get("before", "") if not problems else ""
    return render(
        request,
        "crawls/crawl_log.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "lines": found.lines,
            "log": found,
            "filter": flt,
            "problems": problems,
            "levels": LEVEL_CHOICES,
            "kinds": [(name, label) for name, (label, _) in KIND_GROUPS.items()],
            "one_kind": dict(CrawlEvent.Kind.choices).get(flt.kind, ""),
            "older": urlencode({**flt.params(), "before": found.older}) if found.older else "",
            "newest": urlencode(flt.params()) if before else "",
            # The first screen follows the crawl; an older one stays as it is.
            "follow": not before and not crawl.is_over(),
        },
    )
