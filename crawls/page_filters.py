"""What a person asks of a crawl's pages: the filter, sort and page size that the pages browser,
the API and the exports read from a query string (PageFilter), and the SQL expressions the
pages are filtered and sorted by. crawls/pages.py pages through what a filter selects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import F, Func, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Substr

from crawls import page_search
from crawls.engine.extraction_rules import is_rule_name
from crawls.models import URL_SORT_CHARS, Change, Page, PageSource

PAGE_SIZES = (25, 50, 100, 200)
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


def sort_expression(sort: str):
    if sort.startswith(FIELD_SORT):
        # One key, the rule's name whole: KT("extracted__a__b") would read b inside a.
        return KeyTextTransform(sort[len(FIELD_SORT) :], "extracted")
    return SORTS[sort]
