"""A crawl's pages as people look for them: filtered, sorted and paged, the same way on the
pages browser, the API and the exports.

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
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import BooleanField, F, Func, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Substr

from crawls import page_search
from crawls.engine.extraction_rules import is_rule_name
from crawls.models import URL_SORT_CHARS, Change, Crawl, Page, PageSource

PAGE_SIZES = (25, 50, 100, 200)
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
STATUS_CLASSES = {
    "2xx": (200, 299),
    "3xx": (300, 399),
    "4xx": (400, 499),
    "5xx": (500, 599),
    "none": None,
}
# What a column sorts by (each on an index of the crawl's pages, with id after it).
SORTS = {
    "id": F("id"),
    "url": None,  # LiteralSubstr, below
    "status": F("status"),
    "title": F("title"),
    "content_type": F("content_type"),
    "bytes": F("bytes"),
    "elapsed_ms": F("elapsed_ms"),
    "depth": F("depth"),
    "fetched_at": F("fetched_at"),
    "change": F("change"),
}
NULLABLE = frozenset({"status"})
FIELD_SORT = "field:"  # field:<name> sorts by an extracted field (no index: slower)
MAX_QUERY = 200


@dataclass(frozen=True)
class PageFilter:
    """What to show of a crawl's pages. from_params reads it from a query string."""

    q: str = ""
    status_class: str = ""
    status: int | None = None
    content_type: str = ""
    depth_min: int | None = None
    depth_max: int | None = None
    change: str = ""
    source: str = ""
    sort: str = "id"
    desc: bool = False
    size: int = 50

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> PageFilter:
        """The filter a query string asks for. ValidationError naming every bad parameter
        (with what it accepts); parameters left empty are not filters."""
        values, errors = {}, {}
        for name, reader in _READERS.items():
            raw = params.get(name)
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            try:
                values[name] = reader(str(raw).strip())
            except ValueError as exc:
                errors[name] = [str(exc)]
        if errors:
            raise ValidationError(errors)
        if "order" in values:
            values["desc"] = values.pop("order") == "desc"
        found = cls(**values)
        low, high = found.depth_min, found.depth_max
        if low is not None and high is not None and low > high:
            raise ValidationError({"depth_max": ["Give a maximum depth at least the minimum."]})
        return found

    def params(self, **changes: Any) -> dict[str, str]:
        """The query-string parameters that give this filter (with `changes`); defaults left
        out. Sorting or filtering anew starts from the first page: no cursor in here."""
        target = replace(self, **changes)
        out = {}
        for item in fields(self):
            value = getattr(target, item.name)
            if value == item.default:
                continue
            if item.name == "desc":
                out["order"] = "desc"
            else:
                out[item.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @property
    def active(self) -> bool:
        """Anything filtered (not only sorted or sized)?"""
        kept = ("sort", "desc", "size")
        return any(getattr(self, f.name) != f.default for f in fields(self) if f.name not in kept)

    @property
    def indexed(self) -> bool:
        """Filtered by anything an index serves (all but a search too short for its index)?"""
        unserved = replace(self, sort="id", desc=False, size=50)
        if not page_search.indexed(self.q):
            unserved = replace(unserved, q="")
        return unserved != PageFilter()

    def apply(self, pages: QuerySet[Page], *, unindexed: bool = False) -> QuerySet[Page]:
        """pages with this filter's conditions (not its order). unindexed: the columns are
        tested row by row, their indexes left alone (page_slice says when)."""
        if unindexed:
            pages = pages.annotate(
                **{
                    f"{name}_unindexed": Unindexed(F(name), kind=kind)
                    for name, kind in FILTERED.items()
                }
            )

        def column(name: str) -> str:
            return f"{name}_unindexed" if unindexed else name

        if self.q:
            pages = pages.filter(page_search.contains(self.q, use_index=not unindexed))
        if self.status_class == "none":
            pages = pages.filter(status__isnull=True)
        elif self.status_class:
            low, high = STATUS_CLASSES[self.status_class]
            pages = pages.filter(
                **{f"{column('status')}__gte": low, f"{column('status')}__lte": high}
            )
        conditions = {
            "status": self.status,
            "content_type__startswith": self.content_type or None,
            "depth__gte": self.depth_min,
            "depth__lte": self.depth_max,
            "change": self.change or None,
            "source": self.source or None,
        }
        for lookup, value in conditions.items():
            if value is not None:
                name, _, rest = lookup.partition("__")
                pages = pages.filter(**{column(name) + (f"__{rest}" if rest else ""): value})
        return pages


# The filtered columns, and how each is written past its index (Unindexed).
FILTERED = {
    "status": "number",
    "depth": "number",
    "content_type": "text",
    "change": "text",
    "source": "text",
}


def _one_of(choices, what: str):
    def read(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{what} is one of {', '.join(choices)}, not {text[:40]!r}.")
        return text

    return read


def _whole(low: int, high: int, what: str):
    def read(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"{what} is a whole number, not {text[:40]!r}.") from None
        if not low <= number <= high:
            raise ValueError(f"{what} is from {low} to {high}, not {number}.")
        return number

    return read


def _query(text: str) -> str:
    if len(text) > MAX_QUERY:
        raise ValueError(f"Search for at most {MAX_QUERY} characters.")
    if "\x00" in text:
        raise ValueError("The search has a NUL character.")
    return text


def _sort(text: str) -> str:
    # A field's name goes into a JSON path (sort_expression): only a rule's name is taken.
    if text in SORTS or (text.startswith(FIELD_SORT) and is_rule_name(text[len(FIELD_SORT) :])):
        return text
    raise ValueError(
        f"Sort by one of {', '.join(SORTS)} or field:<name> (a rule's name: letters a-z and "
        f"A-Z, digits, _ and -, starting with a letter), not {text[:40]!r}."
    )


def _size(text: str) -> int:
    size = _whole(1, max(PAGE_SIZES), "The page size")(text)
    if size not in PAGE_SIZES:
        raise ValueError(f"The page size is one of {', '.join(map(str, PAGE_SIZES))}.")
    return size


_READERS = {
    "q": _query,
    "status_class": _one_of(list(STATUS_CLASSES), "The status class"),
    "status": _whole(100, 599, "The status"),
    "content_type": lambda text: _query(text)[:200],
    "depth_min": _whole(0, 4000, "The minimum depth"),
    "depth_max": _whole(0, 4000, "The maximum depth"),
    "change": _one_of(Change.values, "The change"),
    "source": _one_of(PageSource.values, "The source"),
    "sort": _sort,
    "order": _one_of(["asc", "desc"], "The order"),
    "size": _size,
}


# -- paging by key ------------------------------------------------------------------------------


class LiteralSubstr(Substr):
    """The start of a text, as an index of it writes it. On SQLite a query uses an expression
    index only for the very same expression, and Django sends Substr's positions as bound
    parameters: written into the SQL, they match page_url (PostgreSQL's binding writes them
    there already)."""

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"SUBSTR({sql}, 1, {URL_SORT_CHARS})", params


class Unindexed(Func):
    """A column's value written so that no index of it is used: the planner then reads the
    rows another index (or the filter's) finds and sorts them. Numbers + 0; text || ''; a
    time + 0 seconds (PostgreSQL) or || '' (SQLite, which keeps times as text)."""

    def __init__(self, expression, *, kind: str) -> None:
        super().__init__(expression)
        self.kind = kind

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        if self.kind == "number":
            return f"({sql} + 0)", params
        if self.kind == "time" and connection.vendor == "postgresql":
            return f"({sql} + interval '0 seconds')", params
        return f"({sql} || '')", params


SORTS["url"] = LiteralSubstr("url", 1, URL_SORT_CHARS)


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


def sort_expression(sort: str):
    if sort.startswith(FIELD_SORT):
        # One key, the rule's name whole: KT("extracted__a__b") would read b inside a.
        return KeyTextTransform(sort[len(FIELD_SORT) :], "extracted")
    return SORTS[sort]


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
