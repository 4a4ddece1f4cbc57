"""The crawl list's query: search by name, seed or number, a state and channel filter, an order,
and each crawl's duration; one database query a page whatever the number of crawls (the
counters of the page's rows come from Redis, crawls.services.crawls_stats_safe).

The duration is computed by the database only to sort by it: as a column of every row it cost
SQLite a Python call per crawl matched, not per crawl shown (the rows are sorted whole before
the page is cut), 150 ms a page at 10,000 crawls. The page's own rows get it from durations()."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import DurationField, ExpressionWrapper, F, Q, QuerySet, TextField
from django.db.models.functions import Cast, Coalesce, Now
from django.utils import timezone

from crawlhub.web.lookups import typed_id
from crawls.models import Crawl, CrawlState
from crawls.services import visible_crawls

# value -> (label, ordering); the first is the default.
SORTS: dict[str, tuple[str, tuple]] = {
    "newest": ("Newest first", (F("created_at").desc(), F("id").desc())),
    "oldest": ("Oldest first", (F("created_at").asc(), F("id").asc())),
    "name": ("Name, A to Z", (F("name").asc(), F("id").desc())),
    "started": ("Started most recently", (F("started_at").desc(nulls_last=True), F("id").desc())),
    "longest": ("Longest running", (F("run_time").desc(nulls_last=True), F("id").desc())),
    "shortest": ("Shortest running", (F("run_time").asc(nulls_last=True), F("id").desc())),
    "state": ("State", (F("state").asc(), F("id").desc())),
}
OWNER_SORT = ("owner", ("Owner, A to Z", (F("created_by__username").asc(), F("id").desc())))


@dataclass(frozen=True)
class ListQuery:
    """What the list was asked for, each value as given when it is known, else empty."""

    q: str = ""
    state: str = ""
    channel: str = ""
    sort: str = "newest"

    @classmethod
    def from_params(cls, params, *, staff: bool) -> ListQuery:
        state = params.get("state", "")
        sort = params.get("sort", "")
        return cls(
            q=params.get("q", "").strip()[:200],
            state=state if state in CrawlState.values else "",
            channel=params.get("channel", "")[:50],
            sort=sort if sort in sorts_for(staff=staff) else "newest",
        )

    def params(self, **changes: str) -> dict[str, str]:
        """The non-default values as URL parameters (a link to the same list, changed)."""
        values = {
            "q": self.q,
            "state": self.state,
            "channel": self.channel,
            "sort": self.sort,
            **changes,
        }
        if values["sort"] == "newest":
            values["sort"] = ""
        return {key: value for key, value in values.items() if value}

    @property
    def filtered(self) -> bool:
        return bool(self.q or self.state or self.channel)


def sorts_for(*, staff: bool) -> dict[str, tuple[str, tuple]]:
    return {**SORTS, **dict([OWNER_SORT])} if staff else SORTS


def crawl_list(user, query: ListQuery) -> QuerySet[Crawl]:
    """The crawls `user` may see that match `query`, in its order (by `run_time`, started to
    finished or to now, for the duration sorts)."""
    crawls = visible_crawls(user).select_related("channel", "created_by")
    if query.state:
        crawls = crawls.filter(state=query.state)
    if query.channel:
        crawls = crawls.filter(channel__slug=query.channel)
    if query.q:
        crawls = crawls.annotate(seeds_text=Cast("seeds", TextField()))
        crawls = crawls.filter(_search(query.q, staff=user.is_staff))
    if query.sort in ("longest", "shortest"):
        crawls = crawls.annotate(
            run_time=ExpressionWrapper(
                Coalesce("finished_at", Now()) - F("started_at"), output_field=DurationField()
            )
        )
    return crawls.order_by(*sorts_for(staff=user.is_staff)[query.sort][1])


def durations(crawls: Iterable[Crawl]) -> dict[int, timedelta | None]:
    """Each crawl's duration by id: started to finished, or to now while it runs; None before
    it started."""
    now = timezone.now()
    return {
        crawl.pk: (crawl.finished_at or now) - crawl.started_at if crawl.started_at else None
        for crawl in crawls
    }


def _search(text: str, *, staff: bool) -> Q:
    """Name or seed containing the text (any case); "#12" or "12" is crawl 12 too; staff
    also find crawls by their owner's user name."""
    found = Q(name__icontains=text) | Q(seeds_text__icontains=text)
    if (number := typed_id(text.removeprefix("#"))) is not None:
        found |= Q(pk=number)
    if staff:
        found |= Q(created_by__username__iexact=text)
    return found
