"""The pages of a crawl: the browser (filter, sort, page through), one page's detail, and its
body as text or as the bytes it was.

A fetched body is never served as a document of this site: the text is escaped into the page,
and the raw bytes are a download (application/octet-stream, attachment, nosniff, a sandboxing
Content-Security-Policy), which no browser renders here. Only its file name says what it is
(the extension of its Content-Type), for the program that opens it once saved.
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import replace
from urllib.parse import urlencode

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from crawlhub.http import charsets
from crawlhub.web import csp
from crawls import changes
from crawls.models import Change, Crawl, Page, PageSource
from crawls.page_filters import PAGE_SIZES, STATUS_CLASSES, PageFilter
from crawls.pages import QueryError, page_slice
from crawls.services import visible_crawls

# Columns of the pages table: (sort key, heading, numeric).
COLUMNS = (
    ("url", "URL", False),
    ("status", "Status", True),
    ("title", "Title", False),
    ("content_type", "Type", False),
    ("bytes", "Size", True),
    ("elapsed_ms", "Time", True),
    ("depth", "Depth", True),
    ("fetched_at", "Fetched", False),
)
TEXT_SHOWN = 1024 * 1024  # of a kept body, shown as text on the detail page
LINKS_SHOWN = 100
# Python's own table of types (not the machine's mime.types: the same name everywhere), and the
# extensions it lacks or names oddly (application/xml is ".xsl" there).
MEDIA_TYPES = mimetypes.MimeTypes()
EXTENSIONS = {
    "application/xml": ".xml",
    "text/javascript": ".js",
    "image/webp": ".webp",
    "application/xhtml+xml": ".xhtml",
    "application/rss+xml": ".xml",
    "application/atom+xml": ".xml",
    "font/woff2": ".woff2",
    "font/woff": ".woff",
    "application/gzip": ".gz",
    "image/avif": ".avif",
    "application/ld+json": ".jsonld",
}
MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")


def _crawl(request: HttpRequest, pk: int) -> Crawl:
    return get_object_or_404(visible_crawls(request.user).select_related("channel"), pk=pk)


def field_names(crawl: Crawl) -> list[str]:
    """The names of the crawl's extraction rules: the extra columns of its pages."""
    rules = crawl.effective_extract_rules()
    return [r["name"] for r in rules if isinstance(r, dict) and isinstance(r.get("name"), str)]


def _failed_here(crawl: Crawl, flt: PageFilter) -> int:
    """Requests the status filter asks for that are not pages: those that used up their
    retries on such a status are in the failure queue (the 5xx bar counts them)."""
    if flt.status is not None:
        return crawl.failures.filter(last_status=flt.status).count() if flt.status >= 400 else 0
    if flt.status_class in ("4xx", "5xx"):
        low = int(flt.status_class[0]) * 100
        return crawl.failures.filter(last_status__gte=low, last_status__lt=low + 100).count()
    return 0


def _position(request: HttpRequest, found, flt: PageFilter) -> dict | None:
    """Where the screen sits in the whole list: its first and last row's places, and the
    places the Next and Previous links start at. Pages go by cursor (crawls/pages.py), so the
    links carry the place (`at`); a link without one, past the first screen, has none."""
    raw = request.GET.get("at", "")
    cursor = request.GET.get("after") or request.GET.get("before")
    if found.searched or not found.rows or (cursor and not raw.isdigit()):
        return None
    first = int(raw) if cursor and len(raw) < 10 else 1
    last = first + len(found.rows) - 1
    return {
        "first": max(1, first),
        "last": last,
        "next": last + 1,
        "previous": max(1, first - flt.size),
    }


def page_list(request: HttpRequest, pk: int) -> HttpResponse:
    crawl = _crawl(request, pk)
    errors: dict[str, list[str]] = {}
    try:
        flt = PageFilter.from_params(request.GET)
    except ValidationError as exc:
        flt, errors = PageFilter(), exc.message_dict
    try:
        found = page_slice(
            crawl, flt, after=request.GET.get("after", ""), before=request.GET.get("before", "")
        )
    except QueryError as exc:
        errors[exc.field] = [str(exc)]
        found = page_slice(crawl, flt if exc.field == "after" else replace(flt, sort="id"))
    names = field_names(crawl)
    context = {
        "nav": "crawls",
        "crawl": crawl,
        "flt": flt,
        "found": found,
        "position": _position(request, found, flt),
        "failed_here": _failed_here(crawl, flt),
        "errors": errors,
        "field_names": names,
        "columns": _columns(flt, names),
        "query": urlencode(flt.params()),
        "status_classes": list(STATUS_CLASSES),
        "changes": Change.choices,
        "sources": PageSource.choices,
        "sizes": PAGE_SIZES,
        "export_query": urlencode(flt.params(sort="id", desc=False, size=50)),
    }
    return render(request, "crawls/page_list.html", context, status=400 if errors else 200)


def _columns(flt: PageFilter, names: list[str]) -> list[dict]:
    """Each column's heading and the link that sorts by it (the other way round when it
    already sorts by it)."""
    columns = [(key, label, numeric) for key, label, numeric in COLUMNS]
    columns += [(f"field:{name}", name, False) for name in names]
    out = []
    for key, label, numeric in columns:
        current = flt.sort == key
        desc = not flt.desc if current else numeric  # numbers: the biggest first
        out.append(
            {
                "key": key,
                "label": label,
                "numeric": numeric,
                "sorted": ("desc" if flt.desc else "asc") if current else "",
                "link": urlencode(flt.params(sort=key, desc=desc)),
            }
        )
    return out


def page_detail(request: HttpRequest, pk: int, page_pk: int) -> HttpResponse:
    crawl = _crawl(request, pk)
    page = get_object_or_404(Page.objects.defer("body"), crawl=crawl, pk=page_pk)
    body = Page.objects.filter(pk=page.pk).values_list("body", flat=True).first()
    context = {
        "nav": "crawls",
        "crawl": crawl,
        "page": page,
        "found_by": changes.found_by(page),
        "chain": changes.redirect_chain(page),
        "inlinks": changes.inlinks(page, limit=LINKS_SHOWN),
        "outlinks": page.links[:LINKS_SHOWN],
        "outlinks_more": max(0, page.links_total - LINKS_SHOWN),
        "field_names": field_names(crawl),
        "baseline_page": changes.baseline_page(page, crawl),
        "body": _body(page, body),
    }
    return render(request, "crawls/page_detail.html", context)


def _body(page: Page, body: bytes | None) -> dict | None:
    """What the detail page shows of a kept body: its text, cut, or that it is binary."""
    if body is None:
        return None
    data = bytes(body)
    binary = b"\x00" in data[:8192]
    charset = ""
    if "charset=" in page.content_type.lower():
        charset = page.content_type.lower().split("charset=", 1)[1].split(";")[0]
    text = "" if binary else charsets.decode(data[:TEXT_SHOWN], charset)
    return {"size": len(data), "binary": binary, "text": text, "cut": len(data) > TEXT_SHOWN}


def page_body(request: HttpRequest, pk: int, page_pk: int) -> HttpResponse:
    """A kept body as the bytes it was, to download: never a document of this site."""
    crawl = _crawl(request, pk)
    page = get_object_or_404(
        Page.objects.only("id", "body", "content_type"), crawl=crawl, pk=page_pk
    )
    if page.body is None:
        return HttpResponse(
            "This crawl kept no body of this page.", status=404, content_type="text/plain"
        )
    response = HttpResponse(bytes(page.body), content_type="application/octet-stream")
    name = f"crawl-{crawl.pk}-page-{page.pk}{extension_of(page.content_type)}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    # The site's policy, and a sandbox: were a browser to show it anyway, no script would run
    # and it would have no origin.
    response["Content-Security-Policy"] = csp.policy(request) + "; sandbox"
    return response


def extension_of(content_type: str) -> str:
    """The file extension of a Content-Type (".html" for "text/html; charset=utf-8"); ".bin"
    for a type without one, or for anything that is not a media type."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if not MEDIA_TYPE.fullmatch(media_type):
        return ".bin"
    return EXTENSIONS.get(media_type) or MEDIA_TYPES.guess_extension(media_type) or ".bin"
