"""The rows a slice writes: a Page per request done, a FailedRequest per request that used up
its retries, and the bulk insert that writes the pages.

Page rows are inserted in bulk with one prepared statement. `bulk_create` adapts every value
of every row and builds one SQL string with a placeholder per value: a quarter of a slice
thread's CPU at a thousand pages a second. Here a row is adapted when it is made
(BulkInsert.row, safe on any thread) by the same field methods `bulk_create` uses, and the
write only runs one statement that the database driver repeats per row. Rows that break a
unique constraint are skipped, as with `bulk_create(ignore_conflicts=True)`.

On PostgreSQL the rows are sent with server-side binding: Django's cursors bind client-side,
writing each value into the query text, and a kept body (bytea) then becomes hex text twice
its size, copied several times: a 50 MB body took 400 MB to write; sent as a parameter, 100.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from datetime import datetime

import psycopg
from django.db import DatabaseError, connections, models, transaction
from django.db.models.constants import OnConflict

from crawlhub.http.client import MASK, FetchResult
from crawls.engine.request import VIA_LISTED, VIA_REDIRECT, Request
from crawls.engine.results import Extracted, OutLinks
from crawls.models import Crawl, FailedRequest, Link, Page, PageSource

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

    def write(self, rows: list[tuple]) -> None:
        """Insert rows in one transaction; rows that conflict are left out."""
        if not rows:
            return
        connection = connections[self.using]
        # Outermost (a worker's), the block is the transaction; inside another one, a savepoint
        # keeps that one usable when a row is refused.
        with transaction.atomic(using=self.using), connection.cursor() as cur:
            if connection.vendor == "postgresql":
                with (
                    connection.wrap_database_errors,
                    psycopg.Cursor(connection.connection) as bound,
                ):
                    bound.executemany(self._sql, rows)
            else:
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


PAGE_ROWS = BulkInsert(Page)
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
    crawl: Crawl, request: Request, now: datetime, *, fetch: FetchResult | None = None,
    error: str = "", extras: PageExtras | None = None,
) -> tuple:  # fmt: skip
    """The page's row, ready for PAGE_ROWS.write; without a fetch, `error` says why there was
    none (e.g. blocked by robots.txt)."""
    page = Page(
        crawl_id=crawl.pk,
        url=request.url,
        depth=request.depth,
        referrer=request.referrer,
        fetched_at=now,
        url_hash=url_hash(request.url),
        error=error,
        fp=request.fp,
        source=source_of(request),
        attempts=request.attempts + 1,
        history=list(request.history),
        redirects=list(request.redirects),
    )
    if fetch is not None:
        _fill_response(page, crawl, fetch)
    if extras is not None:
        _fill_extras(page, extras)
    return PAGE_ROWS.row(page)


def _fill_response(page: Page, crawl: Crawl, fetch: FetchResult) -> None:
    page.final_url = fetch.final_url
    page.status = fetch.status
    page.content_type = fetch.content_type[:200]
    page.bytes = fetch.nbytes
    page.elapsed_ms = fetch.elapsed_ms
    page.title = fetch.title[:500]
    page.error = fetch.error
    page.redirect_to = fetch.redirect_to
    page.truncated = fetch.truncated
    page.headers = kept_headers(fetch.headers, secret=SECRET_RESPONSE_HEADERS)
    page.request_headers = kept_headers(fetch.request_headers)
    page.proxy = fetch.proxy[:300]
    # Never more than max_bytes, which the databases take (crawls.models.MAX_BODY_BYTES).
    if crawl.keep_bodies and fetch.status is not None and len(fetch.body) <= crawl.max_bytes:
        page.body = fetch.body
        # What the WARC export needs besides the body: heads as they went and came.
        if fetch.exchange is not None:
            page.heads = fetch.exchange.text(secret=SECRET_RESPONSE_HEADERS)


def _fill_extras(page: Page, extras: PageExtras) -> None:
    page.digest = extras.digest
    page.change = extras.change
    if extras.carried:
        for name, value in extras.carried.items():
            setattr(page, name, value)
    if extras.extracted is not None:
        page.extracted = extras.extracted.fields
        page.extract_errors = extras.extracted.errors
        page.structured_data = extras.extracted.structured
    if extras.links is not None:
        page.links = extras.links.kept
        page.links_total = extras.links.total


def source_of(request: Request) -> str:
    if request.reads_sitemap:
        return PageSource.SITEMAP_FILE
    if request.via == VIA_LISTED:
        return PageSource.SITEMAP
    if request.via == VIA_REDIRECT:
        return PageSource.REDIRECT
    return PageSource.SEED if request.depth == 0 and not request.referrer else PageSource.LINK


def kept_headers(headers: dict[str, str], *, secret: frozenset[str] = frozenset()) -> dict:
    """Headers as a page keeps them: at most MAX_HEADERS, values cut, secret ones masked, and
    nothing a database refuses (NUL)."""
    kept = {}
    for name, value in list(headers.items())[:MAX_HEADERS]:
        clean = str(value).replace("\x00", "")[:MAX_HEADER_CHARS]
        kept[str(name).replace("\x00", "")[:200]] = MASK if name.lower() in secret else clean
    return kept


def link_rows(crawl: Crawl, links: OutLinks) -> list[tuple]:
    """The Link rows of a page's in-scope links, ready for LINK_ROWS.write: made as they are
    written (LINK_COLUMNS), two integers and a str, with no Link instance; ~18 instances a page
    took longer to make than the page's own row."""
    crawl_id = crawl.pk
    return [(crawl_id, source, target, text) for source, target, text in links.rows]


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
