"""What a crawl has waiting, for its owner and staff (the queue view, the API, the CLI): counts
by host and by depth, and the queued requests themselves, a screen at a time, in the order
workers take them. The frontier reads and decodes the queue (Frontier.queue_counts,
Frontier.queue_page); this module only shapes what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from crawls.engine.frontier import Frontier
from crawls.engine.request import VIA_LISTED, VIA_REDIRECT, VIA_SITEMAP, VIA_SITEMAP_ROOT, Request
from crawls.models import Crawl

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_SIZE = 50
VIA_WORDS = {
    VIA_SITEMAP: "a sitemap file",
    VIA_SITEMAP_ROOT: "the site's sitemap",
    VIA_LISTED: "listed by a sitemap",
    VIA_REDIRECT: "a redirect's target",
}


class CursorError(ValueError):
    """An `after` that is not a cursor of the crawl's queue (edited by hand, or stale)."""


@dataclass
class QueueScreen:
    queued: int = 0  # waiting in the queue (in Redis)
    # waiting in the database: the queue past its window (crawls/engine/overflow.py), listed
    # once they come back to the queue
    on_disk: int = 0
    retrying: int = 0  # retries waiting for their time (not listed)
    hosts: list[tuple[str, int]] = field(default_factory=list)  # most first
    depths: list[tuple[int, int]] = field(default_factory=list)  # shallowest first
    depths_partial: bool = False
    rows: list[dict] = field(default_factory=list)
    next: str = ""  # the cursor of the next screen, "" on the last
    first: bool = True  # the screen starts at the head of the queue


def crawl_queue(crawl: Crawl, *, after: str = "", size: int = DEFAULT_SIZE) -> QueueScreen:
    """The crawl's waiting requests: counts, and `size` of them in queue order after the
    cursor `after` ("" from the head). CursorError for a cursor that is not one; a size that is
    not one of PAGE_SIZES is the default."""
    size = size if size in PAGE_SIZES else DEFAULT_SIZE
    frontier = Frontier(crawl.pk)
    counts = frontier.queue_counts()
    try:
        requests, cursor = frontier.queue_page(after=after, size=size)
    except ValueError:
        raise CursorError(
            "This cursor is not one of the crawl's queue: start again from the head."
        ) from None
    return QueueScreen(
        queued=counts["queued"],
        on_disk=counts["spilled"],
        retrying=counts["retrying"],
        hosts=list(counts["hosts"].items()),
        depths=list(counts["depths"].items()),
        depths_partial=counts["depths_partial"],
        rows=[row(r) for r in requests],
        next=cursor,
        first=not after,
    )


def row(request: Request) -> dict:
    """A queued request as the view, the API and the CLI show it."""
    return {
        "url": request.url,
        "host": request.host,
        "depth": request.depth,
        "priority": request.priority,
        "via": _how_found(request),
        "referrer": request.referrer,
        "attempts": request.attempts,
        "crashes": request.crashes,
    }


def _how_found(request: Request) -> str:
    if request.via:
        return VIA_WORDS.get(request.via, request.via)
    return "a seed" if request.depth == 0 and not request.referrer else "a link"
