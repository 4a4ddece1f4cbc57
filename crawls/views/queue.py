"""The queue view: what a crawl has waiting, by host and by depth, and the queued requests a
screen at a time (crawls.queued). The crawl's owner and staff only, as every crawl page."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from crawlhub.redis.connections import REDIS_ERRORS
from crawls import queued
from crawls.services import visible_crawls

HOSTS_SHOWN = 20


def crawl_queue(request: HttpRequest, pk: int) -> HttpResponse:
    crawl = get_object_or_404(visible_crawls(request.user), pk=pk)
    size = _size(request.GET.get("size", ""))
    problem, screen = "", queued.QueueScreen()
    try:
        screen = queued.crawl_queue(crawl, after=request.GET.get("after", ""), size=size)
    except queued.CursorError as exc:
        problem = str(exc)
    except REDIS_ERRORS as exc:
        problem = f"Redis is not reachable: {exc}"
    size_query = urlencode({"size": size}) if size != queued.DEFAULT_SIZE else ""
    # Where the screen starts, counted from the head as the link that led here saw it.
    at = _number(request.GET.get("at", "")) if not screen.first else 1
    return render(
        request,
        "crawls/crawl_queue.html",
        {
            "nav": "crawls",
            "crawl": crawl,
            "screen": screen,
            "problem": problem,
            "hosts": screen.hosts[:HOSTS_SHOWN],
            "hosts_more": max(0, len(screen.hosts) - HOSTS_SHOWN),
            "size": size,
            "sizes": queued.PAGE_SIZES,
            "size_query": size_query,
            "first_row": at,
            "last_row": at + len(screen.rows) - 1,
            "next_query": urlencode(
                {
                    **({"size": size} if size_query else {}),
                    "after": screen.next,
                    "at": at + len(screen.rows),
                }
            ),
        },
    )


def _number(text: str) -> int:
    return int(text) if text.isdigit() and 0 < len(text) < 12 else 0


def _size(text: str) -> int:
    return int(text) if text.isdigit() and int(text) in queued.PAGE_SIZES else queued.DEFAULT_SIZE
