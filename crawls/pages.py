"""A crawl's pages as people look for them: filtered, sorted and paged, the same way on the
pages browser, the API and the exports (what to show: crawls/page_filters.py).

Made for crawls of millions of pages. Every sort runs on an index of (crawl, column, id)
(crawls.models.Page.Meta), and pages are reached by key, not by offset: a cursor holds the
sort value and the id of the last row shown, so page 20,000 costs what page 1 costs. Counting
stops at COUNT_LIMIT ("more than 10,000"). Text search (`q`) looks inside URLs and titles
through a trigram index (crawls/page_search.py); searches of one or two characters test each
row, and are bounded by the page size when matches are common.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, replace

from django.db import connection
from django.db.models import BooleanField, F, Func, Q, QuerySet

from crawls import page_search
from crawls.models import Crawl, Page
from crawls.page_filters import FIELD_SORT, NULLABLE, PageFilter, Unindexed, sort_expression

COUNT_LIMIT = 10_000
# Filters that keep at most SORT_LIMIT pages are read through their own indexes and sorted;
# those that keep more are tested along the sort's index, on at most WALK_LIMIT rows of it
# before falling back to sorting (page_slice). The count that chooses is the one shown: a
# higher SORT_LIMIT would count further through indexes that do not always bound it (a content
# type's prefix on PostgreSQL, a common word's trigrams), for every screen.
SORT_LIMIT = COUNT_LIMIT
# Text searches count this far: the trigram index only narrows, each match is confirmed on the
# table (a common word's 10,000 matches took over a second on PostgreSQL at 1,000,000 pages).
TEXT_LIMIT = 1_000
WALK_LIMIT = 20_000
# A filter of status and depth alone, sorted by a column their indexes carry (COVERED), has
# its matches sorted on an index alone (crawls.models._covering): cheaper than a long walk that
# reads the table for each row, so its walk is kept short.
COVERED_WALK_LIMIT = 2_000
# A search walks at most this far (each row read from the table), and when these rows hold
# less than a screen, the screen is partial: the matches among them (page_slice).
SEARCH_LIMIT = 10_000
COVERED = frozenset({"id", "status", "depth", "bytes", "elapsed_ms", "fetched_at"})


class QueryError(ValueError):
    """A sort or a cursor that cannot be used; the message says why, for people, and `field`
    names the parameter."""

    field = "sort"


class CursorError(QueryError):
    """A cursor that is not one this module made (edited by hand, or for another sort)."""

    field = "after"


@dataclass
class PageSlice:
    """One screen of pages and how to get to the next and previous ones."""

    rows: list[Page]
    count: int  # at most COUNT_LIMIT
    count_capped: bool  # there are more than `count`
    next: str = ""  # cursor of the next screen, "" on the last
    previous: str = ""  # cursor of the previous screen, "" on the first
    # Partial screens (page_slice): how many pages of the order were read for this screen,
    # whose rows are the matches among them; `count` is then those rows, and more may match.
    # 0: the screen is exact.
    searched: int = 0
    field_names: list[str] = field(default_factory=list)


def page_slice(
    crawl: Crawl,
    flt: PageFilter,
    *,
    after: str = "",
    before: str = "",
    queryset: QuerySet[Page] | None = None,
) -> PageSlice:
    """The screen of the crawl's pages that `flt` selects, after (or before) a cursor.

    Which index does the work is chosen here, not left to the planners, which guess wrong
    when a filter and a sort disagree (error pages are small: a 4xx filter walked the whole
    bytes index backwards). The filters' count, bounded and read through their indexes,
    chooses. At most SORT_LIMIT pages (TEXT_LIMIT with a text search, whose every match the
    table confirms): their ids and sort keys are read through the filters' indexes and sorted,
    then the screen's rows are read by id. More: the sort's index is walked and each row
    tested, on at most the next WALK_LIMIT rows of it; when those hold less than a screen (the
    matches sit far along the order), the matches are sorted as above, or, for a text search,
    whose matches no index sorts, the screen is partial (below). Nothing an index serves (no
    filter, or a search of one or two characters): the sort's index is walked; the screen is
    read first, and a short first screen is its own count.

    A search of one or two characters (no index finds it) or a text search whose matches sit
    far along the order is never read to the end of a big crawl: when the next SEARCH_LIMIT
    pages of the order hold less than a screen, the screen shows the matches among them, and
    only those, with `searched` saying how many pages were read; `next` goes on from there.
    """
    base = queryset if queryset is not None else crawl.pages.all()
    backwards = bool(before) and not after
    cursor = _decode(before if backwards else after, flt) if (after or before) else None
    desc = flt.desc != backwards
    field_sort = flt.sort.startswith(FIELD_SORT)
    short_q = bool(flt.q) and not page_search.indexed(flt.q)
    text = bool(flt.q) and not short_q
    # Sorted up to `limit` pages; counted up to `shown` (or limit) and said "more than".
    limit, shown = (TEXT_LIMIT, TEXT_LIMIT) if text else (SORT_LIMIT, COUNT_LIMIT)
    count = None
    if flt.indexed or field_sort:
        # A short search is left out of this count: no index finds it.
        counted = replace(flt, q="") if short_q else flt
        count = _count(counted.apply(base), max(limit, shown))
    if field_sort and count > COUNT_LIMIT:
        raise QueryError(
            f"Sorting by an extracted field needs filters that leave at most {COUNT_LIMIT:,} "
            "pages (fields have no index)."
        )
    key = sort_expression(flt.sort)

    def in_order(pages: QuerySet[Page], key, beyond: Q | None = None) -> QuerySet[Page]:
        pages = pages.annotate(sort_key=key)
        if flt.sort == "id" and (first := _first_id(base)):
            # Sorted by id, PostgreSQL walks the primary key: from here, not older crawls'.
            pages = pages.filter(id__gte=first)
        if beyond is not None:
            pages = pages.filter(beyond)
        elif cursor is not None:
            pages = pages.filter(_beyond(flt.sort, cursor, desc=desc))
        return pages.order_by(key.desc() if desc else key.asc(), "-id" if desc else "id")

    wanted = flt.size + 1
    rows = edge = None
    if count is None and not short_q:
        # Past a cursor, the NULLs and the values each read on their own (an OR of both
        # would read the index from its start).
        rows = []
        for part in _beyond_parts(flt.sort, cursor, desc=desc) if cursor else [None]:
            unfiltered = flt.apply(base, unindexed=True).defer("body")
            rows += in_order(unfiltered, key, part)[: wanted - len(rows)]
            if len(rows) >= wanted:
                break
    elif count is None or count > limit:
        walk_limit = WALK_LIMIT
        if flt.q:
            walk_limit = min(WALK_LIMIT, SEARCH_LIMIT)
        elif flt.sort in COVERED and _status_and_depth_only(flt):
            walk_limit = min(WALK_LIMIT, COVERED_WALK_LIMIT)
        rows, edge = _walk(in_order, base, flt, key, desc=desc, limit=walk_limit)
        if edge and len(rows) <= flt.size and not flt.q:
            rows = edge = None  # too few in the window: sorted below
    if rows is None:
        sorted_ids = in_order(flt.apply(base), Unindexed(key, kind=_kind(flt.sort)))
        ids = list(sorted_ids.values_list("id", flat=True)[:wanted])
        found = base.filter(id__in=ids).annotate(sort_key=key).defer("body").in_bulk()
        rows = [found[pk] for pk in ids]
    partial = edge is not None and len(rows) <= flt.size
    more = len(rows) > flt.size
    rows = rows[: flt.size]
    if backwards:
        rows.reverse()
    if partial:
        return _partial(rows, edge, cursor, flt, backwards=backwards, searched=walk_limit)
    capped = None  # over the count's limit
    if short_q and (count is None or count > limit):  # the screen found by a walk
        count, capped = _short_count(base, flt, rows, more=more, first=cursor is None)
    elif short_q or count is None:
        if cursor is None and not more:
            count = len(rows)  # the whole of it, read anyway
        else:
            # A short search with filters that keep at most SORT_LIMIT pages: tested on those.
            count = _count(flt.apply(base, unindexed=not short_q), COUNT_LIMIT)
    if capped is None:
        count, capped = min(count, shown), count > shown
    found = PageSlice(rows=rows, count=count, count_capped=capped)
    if rows:
        has_next = more if not backwards else True
        has_previous = more if backwards else cursor is not None
        found.next = _encode(rows[-1], flt) if has_next else ""
        found.previous = _encode(rows[0], flt) if has_previous else ""
    elif cursor is not None:  # an empty screen past partial ones: the way back
        back = _back_to(cursor, flt, backwards=backwards)
        found.next, found.previous = (back, "") if backwards else ("", back)
    return found


def _count(pages: QuerySet[Page], limit: int) -> int:
    """How many pages there are, counted up to limit + 1."""
    return pages.order_by().values("id")[: limit + 1].count()


def _short_count(
    base: QuerySet[Page], flt: PageFilter, rows: list, *, more: bool, first: bool
) -> tuple[int, bool]:
    """(count, capped) of a short search alone (no index finds it), whose screen was found
    within the window: exact on a crawl of at most WALK_LIMIT pages (tested on each); on a
    bigger one, the screen's rows and whether more follow (counting would read it all)."""
    if first and not more:
        return len(rows), False
    if _count(base, SEARCH_LIMIT) <= SEARCH_LIMIT:
        count = _count(flt.apply(base, unindexed=True), COUNT_LIMIT)
        return min(count, COUNT_LIMIT), count > COUNT_LIMIT
    return len(rows), more


def _status_and_depth_only(flt: PageFilter) -> bool:
    kept = replace(flt, status_class="", status=None, depth_min=None, depth_max=None)
    return replace(kept, sort="id", desc=False, size=50) == PageFilter()


def _walk(in_order, base: QuerySet[Page], flt: PageFilter, key, *, desc: bool, limit: int):
    """(rows, edge): the screen (and one row more) found by testing the filters on the next
    `limit` rows of the sort's index, and the (sort key, id) of the last of those rows,
    None when the rest of the order is shorter. With an edge and at most a screen of rows,
    rows are every match in the window, and there may be more beyond it.
    The window is a range of the index, up to the key of its last row (read on the index
    alone), so that the walk stays on the index and stops there."""
    # The window's last row, and whether any follows it (else the window is the rest).
    edge = list(in_order(base, key).values_list("sort_key", "id")[limit - 1 : limit + 1])
    edge = edge[:1] if len(edge) > 1 else []
    pages = in_order(flt.apply(base, unindexed=True).defer("body"), key)
    if edge:
        # Up to the edge row, included: the rows beyond it in the opposite order.
        value, last_id = edge[0]
        pages = pages.filter(
            _beyond(flt.sort, (value, last_id + (-1 if desc else 1)), desc=not desc)
        )
    return list(pages[: flt.size + 1]), (edge[0] if edge else None)


def _partial(
    rows: list, edge: tuple, cursor, flt: PageFilter, *, backwards: bool, searched: int
) -> PageSlice:
    """A screen of the matches among the `searched` pages read: `next` (or `previous`, going
    back) goes on past the last page read; the other way, back to where this one started."""
    onward = _encode_key(*edge, flt)
    if rows:
        back = _encode(rows[-1] if backwards else rows[0], flt)
    else:
        back = _back_to(cursor, flt, backwards=backwards) if cursor is not None else ""
    found = PageSlice(rows=rows, count=len(rows), count_capped=True, searched=searched)
    found.next, found.previous = (back, onward) if backwards else (onward, back)
    return found


def _back_to(cursor: tuple, flt: PageFilter, *, backwards: bool) -> str:
    """For a screen with no rows: the cursor that reads back the other way from where it
    started, the cursor's own row included (cursors exclude their row)."""
    step = -1 if flt.desc else 1  # (value, id + step) comes just after (value, id) in the order
    value, last_id = cursor
    return _encode_key(value, last_id + (-step if backwards else step), flt)


def _kind(sort: str) -> str:
    if sort in ("id", "status", "bytes", "elapsed_ms", "depth"):
        return "number"
    return "time" if sort == "fetched_at" else "text"


def _first_id(pages: QuerySet[Page]) -> int | None:
    """The id of the crawl's first page (on its (crawl, id) index)."""
    return pages.order_by("id").values_list("id", flat=True).first()


def _nullable(sort: str) -> bool:
    return sort in NULLABLE or sort.startswith(FIELD_SORT)


def _nulls_last() -> bool:
    """Where NULLs go in an ascending order: last on PostgreSQL, first on SQLite."""
    return connection.vendor == "postgresql"


class RowBeyond(Func):
    """(key, id) > (value, last), or < descending: a row-value comparison, which both
    databases seek to on an index of (crawl, key, id); written as key >= value AND (key >
    value OR id > last), PostgreSQL read every row of the value's run before the cursor (the
    500,000th row of sort=status: half a million 200s). The value is made the key's type."""

    output_field = BooleanField()

    def __init__(self, key, pk, *, value, last_id: int, desc: bool) -> None:
        super().__init__(key, pk)
        self.value, self.last_id, self.desc = value, last_id, desc

    def as_sql(self, compiler, connection, **extra_context):
        key_sql, key_params = compiler.compile(self.source_expressions[0])
        id_sql, id_params = compiler.compile(self.source_expressions[1])
        field = self.source_expressions[0].output_field
        value = field.get_db_prep_value(field.to_python(self.value), connection)
        op = "<" if self.desc else ">"
        return (
            f"(({key_sql}, {id_sql}) {op} (%s, %s))",
            [*key_params, *id_params, value, self.last_id],
        )


def _beyond(sort: str, cursor: tuple, *, desc: bool) -> Q:
    """The rows after (value, id) in the order (key, id), descending or not, written so that
    an index seeks to them: (key, id) > (value, last) (RowBeyond), not an OR.
    Where the key's NULLs sit is the database's (_nulls_last), as the order puts them."""
    parts = _beyond_parts(sort, cursor, desc=desc)
    return parts[0] if len(parts) == 1 else parts[0] | parts[1]


def _beyond_parts(sort: str, cursor: tuple, *, desc: bool) -> list[Q]:
    """_beyond as the runs of the order it spans, in order: past a value of a nullable key,
    the rest of the values then the NULLs when they come after; inside the NULLs, the rest of
    them then the values when those come after."""
    value, last_id = cursor
    name = "sort_key"
    step = "lt" if desc else "gt"
    # Is NULL "after" every value in this direction?
    nulls_after = _nulls_last() != desc
    if value is None:
        tie = Q(**{f"{name}__isnull": True, f"id__{step}": last_id})
        # Past the NULLs there is nothing when they come last; everything when first.
        return [tie] if nulls_after else [tie, Q(**{f"{name}__isnull": False})]
    later = Q(RowBeyond(F(name), F("id"), value=value, last_id=last_id, desc=desc))
    if _nullable(sort) and nulls_after:
        return [later, Q(**{f"{name}__isnull": True})]
    return [later]


def _encode(row: Page, flt: PageFilter) -> str:
    return _encode_key(row.sort_key, row.pk, flt)


def _encode_key(value, pk: int, flt: PageFilter) -> str:
    if hasattr(value, "isoformat"):
        value = value.isoformat()
    raw = json.dumps([flt.sort, flt.desc, value, pk], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str, flt: PageFilter) -> tuple:
    """(value, id) of a cursor made for this sort; CursorError otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        sort, desc, value, last_id = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise CursorError("This link to a page of results is broken: start again.") from None
    if sort != flt.sort or desc != flt.desc or not isinstance(last_id, int):
        raise CursorError("This link to a page of results is for another order: start again.")
    if isinstance(value, list | dict) or (isinstance(value, str) and len(value) > 10_000):
        raise CursorError("This link to a page of results is broken: start again.")
    return value, last_id
