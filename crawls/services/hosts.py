"""One host of a crawl: what the crawl page's host view shows, and an operator's hold, release
and drop. Any crawl its owner or staff can see (visible_crawls), while it is not over."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from crawls.engine.control import CrawlControl
from crawls.models import Crawl, CrawlEvent, CrawlState
from crawls.services.actions import CrawlActionError

HOLD_MAX_MINUTES = 7 * 24 * 60
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_:[]")


def crawl_hosts(crawl: Crawl) -> list[dict]:
    """Every host the crawl knows of, as Frontier.host_rows() reads them, busiest first, with
    "next_at" and "held_until" as datetimes (None for none or past)."""
    return CrawlControl(crawl).hosts()


def _host_arg(crawl: Crawl, host: str) -> str:
    """The host as the frontier names it (lowercased hostname[:port]), for a crawl that is
    not over; CrawlActionError saying what is wrong otherwise."""
    if crawl.is_over() or crawl.state == CrawlState.DRAFT:
        raise CrawlActionError(
            f"A {crawl.get_state_display().lower()} crawl has no hosts to hold, release or drop."
        )
    host = (host or "").strip().lower()
    if not host:
        raise CrawlActionError("host: say which host (as the host view shows it).")
    if len(host) > 260 or not set(host) <= _HOST_CHARS:
        raise CrawlActionError(f"host: {host[:80]!r} is not a host name (hostname[:port]).")
    return host


def _event(crawl: Crawl, kind: str, user, detail: str, host: str) -> None:
    CrawlEvent.objects.create(crawl=crawl, kind=kind, user=user, detail=detail, host=host)


def crawl_host_hold(*, crawl: Crawl, host: str, minutes: Any, user=None) -> datetime:
    """Ask the host nothing for `minutes` (1 to a week); requests already being fetched
    finish. Returns until when (a datetime)."""
    host = _host_arg(crawl, host)
    try:
        minutes = float(minutes)
    except (TypeError, ValueError):
        raise CrawlActionError(f"minutes: {str(minutes)[:40]!r} is not a number.") from None
    if not (math.isfinite(minutes) and 1 <= minutes <= HOLD_MAX_MINUTES):
        raise CrawlActionError(f"minutes: hold a host from 1 to {HOLD_MAX_MINUTES} minutes.")
    until = CrawlControl(crawl).hold_host(host, seconds=minutes * 60)
    # How long, not until when: the trail shows the event's own time in the one date style.
    _event(crawl, CrawlEvent.Kind.HOST_HELD, user, f"{host} for {round(minutes)} min", host)
    return until


def crawl_host_release(*, crawl: Crawl, host: str, user=None) -> None:
    """End a hold: the host is asked again as its delay allows."""
    host = _host_arg(crawl, host)
    CrawlControl(crawl).release_host(host)
    _event(crawl, CrawlEvent.Kind.HOST_RELEASED, user, host, host)


def crawl_host_drop(*, crawl: Crawl, host: str, user=None) -> int:
    """Drop the host's queued requests and retries (counted in "cancelled"); what is being
    fetched finishes, and links found later are queued as usual. Returns how many."""
    host = _host_arg(crawl, host)
    control = CrawlControl(crawl)
    dropped = control.drop_host(host)
    _event(crawl, CrawlEvent.Kind.HOST_DROPPED, user, f"{host}: {dropped} request(s) dropped", host)
    control.announce(state_change=False)
    return dropped
