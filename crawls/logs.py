"""A crawl's log as people read it, the same on its page, the log page and the API: the audit
trail (who did what) and its workers' lines (crawls/engine/crawl_log.py) in one timeline,
newest first, filtered by level, kind, host and text, a screen at a time.

Screens are reached by key, not by offset: `before` is the id of the last line shown, `after`
the newest one a live page has (what came since). A crawl's log is bounded (at most
3 x CRAWLHUB_LOG_LINES workers' lines and its audit trail), so the host and text filters may
test each line of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from crawls.engine.crawl_log import WORKER_KINDS
from crawls.models import Crawl, CrawlEvent

Kind, Level = CrawlEvent.Kind, CrawlEvent.Level

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
# The lowest level a screen shows: all lines, warnings and errors, errors.
LEVELS = {"": (), "warning": (Level.WARNING, Level.ERROR), "error": (Level.ERROR,)}
# Kinds as the filter offers them, a group at a time ("actions": what users did).
KIND_GROUPS: dict[str, tuple[str, frozenset[str]]] = {
    "actions": ("User actions", frozenset()),  # any line with a user, and the crawl's end
    "slices": ("Slices", frozenset({Kind.SLICE, Kind.STOPPED})),
    "hosts": (
        "Hosts",
        frozenset(
            {Kind.SLOWED, Kind.PARKED, Kind.HOST_HELD, Kind.HOST_RELEASED, Kind.HOST_DROPPED}
        ),
    ),
    "logins": ("Logins", frozenset({Kind.LOGIN})),
    "errors": ("Errors and retries given up", frozenset({Kind.ERROR, Kind.GAVE_UP})),
    "sitemaps": ("Sitemaps", frozenset({Kind.SITEMAP})),
}
_MAX_QUERY = 200


@dataclass(frozen=True)
class LogFilter:
    level: str = ""  # the lowest level shown ("" for all)
    kind: str = ""  # a group of KIND_GROUPS, or one kind
    host: str = ""  # part of the host a line is about
    q: str = ""  # part of its text

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> LogFilter:
        """The filter of a query string; ValidationError naming each bad parameter."""
        errors: dict[str, list[str]] = {}
        level = params.get("level", "").strip().lower()
        if level == "info":
            level = ""
        if level not in LEVELS:
            errors["level"] = [f"{level[:40]!r} is not a level: use info, warning or error."]
        kind = params.get("kind", "").strip().lower()
        if kind and kind not in KIND_GROUPS and kind not in Kind.values:
            errors["kind"] = [
                f"{kind[:40]!r} is not a kind: use one of {', '.join(KIND_GROUPS)}, or a "
                f"line's own kind ({', '.join(Kind.values)})."
            ]
        host, q = params.get("host", "").strip().lower(), params.get("q", "").strip()
        for name, value in (("host", host), ("q", q)):
            if len(value) > _MAX_QUERY:
                errors[name] = [f"at most {_MAX_QUERY} characters ({len(value)} given)."]
        if errors:
            raise ValidationError(errors)
        return cls(level=level, kind=kind, host=host, q=q)

    @property
    def active(self) -> bool:
        return any(asdict(self).values())

    def params(self) -> dict[str, str]:
        return {name: value for name, value in asdict(self).items() if value}

    def apply(self, lines: QuerySet[CrawlEvent]) -> QuerySet[CrawlEvent]:
        if self.level:
            lines = lines.filter(level__in=LEVELS[self.level])
        if self.kind == "actions":
            lines = lines.filter(Q(user__isnull=False) | ~Q(kind__in=WORKER_KINDS))
        elif self.kind in KIND_GROUPS:
            lines = lines.filter(kind__in=KIND_GROUPS[self.kind][1])
        elif self.kind:
            lines = lines.filter(kind=self.kind)
        if self.host:
            lines = lines.filter(host__contains=self.host)
        if self.q:
            lines = lines.filter(detail__icontains=self.q)
        return lines


@dataclass
class LogPage:
    lines: list[CrawlEvent]
    older: int | None  # the `before` of the next screen, None at the first line
    removed: int  # workers' lines removed to keep the log bounded (Crawl.log_removed)
    kept: int  # how many of each level are kept (CRAWLHUB_LOG_LINES)


def _key(value: str | int | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        key = int(value)
    except (TypeError, ValueError):
        raise ValidationError({name: [f"{str(value)[:40]!r} is not a line id."]}) from None
    if key < 0:
        raise ValidationError({name: [f"{key} is not a line id."]})
    return key


def log_page(
    crawl: Crawl,
    flt: LogFilter,
    *,
    before: str | int | None = None,
    after: str | int | None = None,
    size: int = PAGE_SIZE,
) -> LogPage:
    """A screen of the crawl's log, newest first: the lines before `before` (an id), or those
    after `after` (what came since a live page's newest line: at most `size`, the newest)."""
    before, after = _key(before, "before"), _key(after, "after")
    size = max(1, min(int(size), MAX_PAGE_SIZE))
    lines = flt.apply(CrawlEvent.objects.filter(crawl=crawl)).select_related("user")
    if before is not None:
        lines = lines.filter(id__lt=before)
    if after is not None:
        lines = lines.filter(id__gt=after)
    found = list(lines.order_by("-id")[: size + 1])
    older = found[size - 1].pk if len(found) > size and after is None else None
    return LogPage(
        lines=found[:size],
        older=older,
        removed=crawl.log_removed,
        kept=settings.CRAWLHUB_LOG_LINES,
    )


def log_since(crawl: Crawl, flt: LogFilter, *, after: int, size: int = MAX_PAGE_SIZE) -> list:
    """The lines after id `after`, oldest first, at most `size`: for a reader that follows the
    log and must miss none (log_page's `after` gives the newest of them, for a screen)."""
    size = max(1, min(int(size), MAX_PAGE_SIZE))
    lines = flt.apply(CrawlEvent.objects.filter(crawl=crawl, id__gt=after)).select_related("user")
    return list(lines.order_by("id")[:size])
