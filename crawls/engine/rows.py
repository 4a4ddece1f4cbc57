"""The rows a slice writes: a Page per request done, a FailedRequest per request that used up
its retries, and the bulk insert that writes the pages.

Page rows are inserted in bulk with one prepared statement. `bulk_create` adapts every value
of every row and builds one SQL string with a placeholder per value: a quarter of a slice
thread's CPU at a thousand pages a second. Here the write only runs one statement that the
database driver repeats per row, and a page's row is made without a Page instance: its values
go straight into the row in the database's form (BulkInsert.prepared), each adapted the way its
field would adapt it, the columns it leaves out taking their field's default, adapted once per
process. A Page instance and the per-field preparation of every column (`get_db_prep_save`,
each JSON value through JSONField's chain) were half of a slice thread's recording CPU.
BulkInsert.row still makes a row from an instance (tests, benches), by the fields' own methods;
tests/engine/test_page_rows.py holds the two to the same rows. Rows that break a unique
constraint are skipped, as with `bulk_create(ignore_conflicts=True)`.

On PostgreSQL the rows are sent with server-side binding: Django's cursors bind client-side,
writing each value into the query text, and a kept body (bytea) then becomes hex text twice
its size, copied several times: a 50 MB body took 400 MB to write; sent as a parameter, 100.
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat

from django.db import DatabaseError, connections, models, transaction
from django.db.models.constants import OnConflict

from crawlhub.http.client import FetchResult
from crawlhub.http.wire import MASK
from crawls.engine.request import VIA_LISTED, VIA_REDIRECT, Request
from crawls.engine.results import Extracted, OutLinks
from crawls.models import Crawl, FailedRequest, Link, Page, PageSource
from crawls.page_search import index_pages_after, last_page_id

# A response's headers as a page keeps them: this many, each value cut to this length.
MAX_HEADERS = 64
MAX_HEADER_CHARS = 1000
# Response headers that can carry the crawl's own session (a site's cookies): masked.
SECRET_RESPONSE_HEADERS = frozenset({"set-cookie", "www-authenticate", "proxy-authenticate"})


class BulkInsert:
    """Insert rows of `model` (every concrete field but the auto primary key)."""

    def __init__(self, model: type[models.Model], using: str = "default") -> None:
        self.model = model
        self.using = using
        self.fields = [f for f in model._meta.concrete_fields if not f.primary_key]

    def row(self, obj: models.Model) -> tuple:
        """obj's values as the database takes them. Safe to call from any thread."""
        connection = connections[self.using]
        return tuple(
            field.get_db_prep_save(field.pre_save(obj, True), connection=connection)
            for field in self.fields
        )

    def prepared(self, values: dict) -> tuple:
        """A row from `values` (attname -> value already in the database's form: JSON and
        datetimes through the connection's `ops` adapters, as page_row does, bytes through
        `binary`); a column not in `values` takes its field's default. Safe to call from any
        thread."""
        names, defaults = self._defaults
        return tuple(map(values.get, names, defaults))  # per column, without a Python loop

    @functools.cached_property
    def _defaults(self) -> tuple[tuple[str, ...], tuple[object, ...]]:
        """The columns' attnames, and their fields' defaults as the database takes them."""
        connection = connections[self.using]
        names = tuple(field.attname for field in self.fields)
        defaults = tuple(
            field.get_db_prep_save(field.get_default(), connection=connection)
            for field in self.fields
        )
        return names, defaults

    def binary(self, value: bytes | None) -> object:
        return None if value is None else connections[self.using].Database.Binary(value)

    def write(self, rows: list[tuple], *, savepoint: bool = True) -> None:
        """Insert rows in one transaction; rows that conflict are left out. Inside another
        transaction, a savepoint keeps that one usable when a row is refused; `savepoint=False`
        leaves it out where the caller's whole transaction is given up on a refused row (two
        statements fewer)."""
        if not rows:
            return
        connection = connections[self.using]
        with (
            transaction.atomic(using=self.using, savepoint=savepoint),
            connection.cursor() as cur,
        ):
            if connection.vendor == "postgresql":
                import psycopg  # here: ~0.3 s of CPU at import, which SQLite's processes paid

                with (
                    connection.wrap_database_errors,
                    psycopg.Cursor(connection.connection) as bound,
                ):
                    bound.executemany(self._sql, rows)
            else:
                self._sqlite_insert(cur, rows)

    def _sqlite_insert(self, cur, rows: list[tuple]) -> None:
        cur.executemany(self._sql, rows)

    @functools.cached_property
    def _sql(self) -> str:
        """The INSERT, built once per BulkInsert (its database is fixed)."""
        ops = connections[self.using].ops
        columns = ", ".join(ops.quote_name(field.column) for field in self.fields)
        values = ", ".join(["%s"] * len(self.fields))
        return (
            f"{ops.insert_statement(on_conflict=OnConflict.IGNORE)} "
            f"{ops.quote_name(self.model._meta.db_table)} ({columns}) VALUES ({values}) "
            f"{ops.on_conflict_suffix_sql(self.fields, OnConflict.IGNORE, None, None) or ''}"
        ).rstrip()


class PageInsert(BulkInsert):
    """Page rows, and on SQLite their URLs and titles into the text index (crawls/page_search.py)
    in one statement per batch. The insert trigger did it row by row before (migration
    0019_page_text_fed_in_batches drops it): the trigger alone, even one that did nothing,
    cost as much as the rest of a page row's insert, in SQLite's one write lock that both
    workers wait on."""

    def _sqlite_insert(self, cur, rows: list[tuple]) -> None:
        after = last_page_id(cur)
        cur.executemany(self._sql, rows)
        index_pages_after(cur, after)


PAGE_ROWS = PageInsert(Page)
LINK_ROWS = BulkInsert(Link)
# The columns of a Link row, in LINK_ROWS' order (link_rows makes its rows without a model).
LINK_COLUMNS = ("crawl_id", "source_fp", "target_fp", "text")


def url_hash(url: str) -> str:
    """The key of a page or failure in its crawl (unique with the crawl), whatever its length."""
    return hashlib.sha1(url.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class PageExtras:
    """What a page row holds besides its fetch: crawls/engine/results.py and baseline.py."""

    digest: str = ""
    extracted: Extracted | None = None
    links: OutLinks | None = None
    change: str = ""
    # For a 304 Not Modified: the baseline page's title, fields... (baseline.CARRIED)
    carried: dict | None = None


def page_row(
    crawl: Crawl,
    request: Request,
    now: datetime,
    *,
    fetch: FetchResult | None = None,
    error: str = "",
    extras: PageExtras | None = None,
) -> tuple:
    """The page's row, ready for PAGE_ROWS.write; without a fetch, `error` says why there was
    none (e.g. blocked by robots.txt). Made as the Page model would write it (module docstring)."""
    rows = PAGE_ROWS
    # This thread's connection's adapters, looked up once a row (connections[] reads a
    # thread-local: ~35 bytecode instructions a value). A JSONField's value as the database
    # takes it is what JSONField.get_db_prep_save makes of a plain value.
    ops = connections[rows.using].ops
    json = functools.partial(ops.adapt_json_value, encoder=None)
    values = {
        "crawl_id": crawl.pk,
        "url": request.url,
        "depth": request.depth,
        "referrer": request.referrer,
        "fetched_at": ops.adapt_datetimefield_value(now),
        "url_hash": url_hash(request.url),
        "error": error,
        "fp": request.fp,
        "source": source_of(request),
        "attempts": request.attempts + 1,
    }
    if request.history:
        values["history"] = json(list(request.history))
    if request.redirects:
        values["redirects"] = json(list(request.redirects))
    if fetch is not None:
        _fill_response(values, crawl, fetch, json)
    if extras is not None:
        _fill_extras(values, extras, json)
    return rows.prepared(values)


def _fill_response(values: dict, crawl: Crawl, fetch: FetchResult, json: Callable) -> None:
    values.update(
        final_url=fetch.final_url,
        status=fetch.status,
        content_type=fetch.content_type[:200],
        bytes=fetch.nbytes,
        elapsed_ms=fetch.elapsed_ms,
        title=fetch.title[:500],
        error=fetch.error,
        redirect_to=fetch.redirect_to,
        truncated=fetch.truncated,
        headers=json(kept_headers(fetch.headers, secret=SECRET_RESPONSE_HEADERS)),
        request_headers=json(kept_headers(fetch.request_headers)),
        proxy=fetch.proxy[:300],
    )
    # Never more than max_bytes, which the databases take (crawls.models.MAX_BODY_BYTES).
    if crawl.keep_bodies and fetch.status is not None and len(fetch.body) <= crawl.max_bytes:
        values["body"] = PAGE_ROWS.binary(fetch.body)
        # What the WARC export needs besides the body: heads as they went and came.
        if fetch.exchange is not None:
            values["heads"] = fetch.exchange.text(secret=SECRET_RESPONSE_HEADERS)


def _fill_extras(values: dict, extras: PageExtras, json: Callable) -> None:
    values["digest"] = extras.digest
    values["change"] = extras.change
    if extras.carried:
        for name, value in extras.carried.items():
            values[name] = _prepared_field(name, value)
    if extras.extracted is not None:
        values["extracted"] = json(extras.extracted.fields)
        values["extract_errors"] = json(extras.extracted.errors)
        if extras.extracted.structured is not None:  # None is SQL NULL, as the field saves it
            values["structured_data"] = json(extras.extracted.structured)
    if extras.links is not None:
        values["links"] = json(extras.links.kept)
        values["links_total"] = extras.links.total


def _prepared_field(name: str, value: object) -> object:
    """A value of Page's field `name` as the database takes it, by the field's own methods
    (for what a 304 carries over from the baseline: a few fields of a few pages)."""
    field = Page._meta.get_field(name)
    return field.get_db_prep_save(value, connection=connections[PAGE_ROWS.using])


def source_of(request: Request) -> str:
    if request.reads_sitemap:
        return PageSource.SITEMAP_FILE
    if request.via == VIA_LISTED:
        return PageSource.SITEMAP
    if request.via == VIA_REDIRECT:
        return PageSource.REDIRECT
    return PageSource.SEED if request.depth == 0 and not request.referrer else PageSource.LINK


_NO_NUL = operator.methodcaller("replace", "\x00", "")
_LOWER = operator.methodcaller("lower")
_NAME_CUT, _VALUE_CUT = slice(200), slice(MAX_HEADER_CHARS)


def kept_headers(headers: dict[str, str], *, secret: frozenset[str] = frozenset()) -> dict:
    """Headers as a page keeps them: at most MAX_HEADERS, values cut, secret ones masked, and
    nothing a database refuses (NUL). Two per page: each made by map and zip (a loop in C),
    not a Python loop per header."""
    items = list(headers.items())[:MAX_HEADERS]
    if not items:
        return {}
    names, values = zip(*items, strict=True)
    kept_names = map(operator.getitem, map(_NO_NUL, map(str, names)), repeat(_NAME_CUT))
    kept_values = map(operator.getitem, map(_NO_NUL, map(str, values)), repeat(_VALUE_CUT))
    if secret and not secret.isdisjoint(map(_LOWER, names)):
        kept_values = [
            MASK if name.lower() in secret else value
            for name, value in zip(names, kept_values, strict=True)
        ]
    return dict(zip(kept_names, kept_values, strict=True))


def link_rows(crawl: Crawl, links: OutLinks) -> list[tuple]:
    """The Link rows of a page's in-scope links, ready for LINK_ROWS.write: made as they are
    written (LINK_COLUMNS), two integers and a str, with no Link instance; ~18 instances a page
    took longer to make than the page's own row."""
    # (crawl_id,) + row, by map: no Python loop per link.
    return list(map((crawl.pk,).__add__, links.rows))


def failure_row(crawl: Crawl, request: Request, fetch: FetchResult, now: datetime) -> FailedRequest:
    """The failure queue's row for a request whose last retry failed with `fetch`."""
    return FailedRequest(
        crawl_id=crawl.pk,
        url=request.url,
        depth=request.depth,
        referrer=request.referrer,
        attempts=request.attempts + 1,
        last_error=fetch.error or f"HTTP {fetch.status}",
        last_status=fetch.status,
        failed_at=now,
        url_hash=url_hash(request.url),
    )


def crash_failure_row(crawl: Crawl, request: Request, now: datetime) -> FailedRequest:
    """The failure queue's row for a request given up after it crashed too many slices."""
    tries = f"given up after {request.crashes} tries to process it"
    if request.crash_error:
        last_error = f"{tries}; the last error: {request.crash_error}"
    else:
        last_error = (
            f"{tries}: each time its slice ended without finishing it (the worker died, or the "
            "slice was stopped or ran out of time)"
        )
    return FailedRequest(
        crawl_id=crawl.pk,
        url=request.url,
        depth=request.depth,
        referrer=request.referrer,
        attempts=request.attempts + request.crashes,
        last_error=last_error,
        last_status=None,
        failed_at=now,
        url_hash=url_hash(request.url),
    )


def database_answers(using: str = "default") -> bool:
    """True when the database runs a query, reconnecting once: a row it refused was refused
    for what the row holds, not because the database is away."""
    connection = connections[using]
    for _ in range(2):
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT 1")
            return True
        except DatabaseError:
            if connection.in_atomic_block:
                return False
            connection.close()
    return False
