"""A crawl's results as files: JSONL and CSV of its pages, WARC of the responses it kept.

Every export reads the pages with `.iterator()` over `.values_list()` of the columns it needs, a
chunk of rows at a time, and hands out bytes in buffers of about BUFFER_BYTES: memory stays flat
whether the crawl has a hundred pages or millions. The download views, the API and
`manage.py crawl export` all call these functions.
"""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import BinaryIO

from asgiref.sync import sync_to_async
from django.db.models import QuerySet

from crawlhub.dates import machine
from crawls import archives
from crawls.models import Crawl, Page
from crawls.page_filters import PageFilter
from crawls.services import CrawlActionError

FORMATS = {
    # format: (media type, file extension)
    "jsonl": ("application/x-ndjson; charset=utf-8", "jsonl"),
    "csv": ("text/csv; charset=utf-8", "csv"),
    "warc": ("application/warc", "warc.gz"),
    "wacz": ("application/wacz", "wacz"),
}
# The formats of a web archive: the responses a crawl kept, whatever the filters select.
ARCHIVES = ("warc", "wacz")
# The columns of a page, as the crawl page counts it (README, "Exports"): `counted_as` names the
# counter the page is in ("responses": it got an HTTP status; "errors": it got no usable
# answer); `error` is why an error got none, and is empty for a response; `note` is what went
# wrong with a response that still counts as one (too many redirects, a body that could not be
# decoded). A request that used up its retries (a 500 each time) is no page: it is in the
# failure queue and its export (FAILURE_COLUMNS).
COLUMNS = (
    "id",
    "url",
    "final_url",
    "status",
    "counted_as",
    "content_type",
    "bytes",
    "elapsed_ms",
    "depth",
    "referrer",
    "fetched_at",
    "title",
    "error",
    "note",
    "redirects",
    "redirect_to",
    "source",
    "digest",
    "change",
)
# The columns of COLUMNS read as they are stored; the others are made from `status` and `error`.
STORED = tuple(c for c in COLUMNS if c not in ("counted_as", "note"))
# Read with the columns: the extracted fields (JSONL "fields"; a CSV column per rule) and the
# structured data (JSONL only).
EXTRA = ("extracted", "structured_data")
# A request in the failure queue (it used up its retries): each counts in the errors and
# failed counters, and one whose last attempt had an answer (`last_status`, a 500) also in
# that status class and in failed_http. `last_error` is what the last attempt got ("HTTP 500",
# "timed out ..."), as the failure queue shows it.
FAILURE_COLUMNS = (
    "id",
    "url",
    "depth",
    "referrer",
    "attempts",
    "last_status",
    "last_error",
    "failed_at",
)
NO_RESPONSE = "no response"
# What a spreadsheet takes as the start of a formula (OWASP's list, tab and CR included).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CHUNK_ROWS = 2000
BUFFER_BYTES = 64 * 1024


class ExportError(CrawlActionError):
    """This crawl cannot be exported in this format; the message says why."""


def check(crawl: Crawl, fmt: str) -> None:
    if fmt not in FORMATS:
        raise ExportError(f"Unknown export format {fmt!r}; use one of: {', '.join(FORMATS)}.")
    if fmt in ARCHIVES and not crawl.keep_bodies:
        raise ExportError(
            f"This crawl does not keep response bodies, so there is nothing to put in a "
            f"{fmt.upper()} file. Export JSONL or CSV, or run a crawl with “keep bodies” on."
        )


def filename(crawl: Crawl, fmt: str) -> str:
    return f"crawl-{crawl.pk}.{FORMATS[fmt][1]}"


def counted(status: int | None, error: str) -> dict:
    """`counted_as`, `error` and `note` of a page with this status and stored error: the
    meaning of "error" the crawl page's counters and lists have."""
    if status is None:
        return {"counted_as": "errors", "error": error or NO_RESPONSE, "note": ""}
    return {"counted_as": "responses", "error": "", "note": error}


def _rows(pages: QuerySet[Page]) -> Iterator[dict]:
    """Each page as a dict of COLUMNS and EXTRA, in id order, a chunk of rows at a time."""
    names = (*STORED, *EXTRA)
    for values in pages.order_by("id").values_list(*names).iterator(chunk_size=CHUNK_ROWS):
        stored = dict(zip(names, values, strict=True))
        stored.update(counted(stored["status"], stored["error"]))
        stored["fetched_at"] = machine(stored["fetched_at"])
        yield {name: stored[name] for name in (*COLUMNS, *EXTRA)}


def pages_of(crawl: Crawl, flt: PageFilter | None = None) -> QuerySet[Page]:
    """The pages an export of the crawl holds: all, or those the filter selects."""
    return flt.apply(crawl.pages.all()) if flt is not None else crawl.pages.all()


def _buffered(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Join small pieces into buffers of about BUFFER_BYTES: fewer, larger writes."""
    buffer: list[bytes] = []
    size = 0
    for piece in pieces:
        buffer.append(piece)
        size += len(piece)
        if size >= BUFFER_BYTES:
            yield b"".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield b"".join(buffer)


def iter_jsonl(pages: QuerySet[Page]) -> Iterator[bytes]:
    """One JSON object per page and line, in fetch order; extracted values under "fields"."""

    def lines() -> Iterator[bytes]:
        for row in _rows(pages):
            row["fields"] = row.pop("extracted") or {}
            if row["structured_data"] is None:
                del row["structured_data"]
            yield (json.dumps(row, ensure_ascii=False) + "\n").encode()

    return _buffered(lines())


class _Line:
    """A file that hands back what csv.writer writes, so each row becomes one string."""

    def write(self, value: str) -> str:
        return value


def neutralised(value):
    """A text cell that a spreadsheet would run as a formula, read as text instead: a page
    title "=HYPERLINK(...)" is written "'=HYPERLINK(...)" (OWASP, CSV injection). Numbers and
    empty cells are left as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _cell(value):
    """An extracted value in a CSV cell: text as it is, a list or a JSON value as JSON."""
    if value is None or isinstance(value, str | int | float):
        return "" if value is None else value
    return json.dumps(value, ensure_ascii=False)


def iter_csv(pages: QuerySet[Page], field_names: list[str] = ()) -> Iterator[bytes]:
    """A header row, then one row per page; redirects (the URLs that redirected the crawl to
    the page) as a JSON list; a column per extracted field (named field:<name>). Text cells
    are quoted, so that a spreadsheet splitting on ";" keeps each whole, and a text cell that
    starts like a formula starts with a single quote (neutralised); JSONL keeps every value
    as fetched."""
    header = csv.writer(_Line())
    writer = csv.writer(_Line(), quoting=csv.QUOTE_NONNUMERIC)

    def lines() -> Iterator[bytes]:
        yield header.writerow([*COLUMNS, *(f"field:{n}" for n in field_names)]).encode()
        for row in _rows(pages):
            row["redirects"] = json.dumps(row["redirects"]) if row["redirects"] else ""
            fields = row["extracted"] or {}
            cells = [row[c] for c in COLUMNS] + [_cell(fields.get(n)) for n in field_names]
            yield writer.writerow([neutralised(cell) for cell in cells]).encode()

    return _buffered(lines())


def iter_failures(crawl: Crawl, fmt: str) -> Iterator[bytes]:
    """The crawl's failure queue, oldest first, as JSONL or CSV of FAILURE_COLUMNS."""
    if fmt not in ("jsonl", "csv"):
        raise ExportError(f"Unknown failure export format {fmt!r}; use jsonl or csv.")
    rows = (
        dict(zip(FAILURE_COLUMNS, values, strict=True))
        for values in crawl.failures.order_by("failed_at", "id")
        .values_list(*FAILURE_COLUMNS)
        .iterator(chunk_size=CHUNK_ROWS)
    )

    def lines() -> Iterator[bytes]:
        if fmt == "csv":
            yield csv.writer(_Line()).writerow(FAILURE_COLUMNS).encode()
            writer = csv.writer(_Line(), quoting=csv.QUOTE_NONNUMERIC)
        for row in rows:
            row["failed_at"] = machine(row["failed_at"])
            if fmt == "jsonl":
                yield (json.dumps(row, ensure_ascii=False) + "\n").encode()
            else:
                cells = ["" if row[c] is None else row[c] for c in FAILURE_COLUMNS]
                yield writer.writerow([neutralised(c) for c in cells]).encode()

    return _buffered(lines())


def failures_filename(crawl: Crawl, fmt: str) -> str:
    return f"crawl-{crawl.pk}-failures.{FORMATS[fmt][1]}"


def csv_of(pages: QuerySet[Page]) -> Iterator[bytes]:
    """Any set of pages as CSV (a comparison's), without extracted-field columns."""
    return iter_csv(pages)


def write_warc(crawl: Crawl, fileobj: BinaryIO) -> int:
    """Write a gzipped WARC/1.1 file (one gzip member per record) of every page with a kept
    body: a warcinfo record, then a request and a response (or revisit) record per page
    (crawls/archives.py). Returns the number of pages written."""
    check(crawl, "warc")
    count = 0
    writer = archives.WarcWriter(crawl, fileobj, filename=filename(crawl, "warc"))
    for count in writer.steps():  # noqa: B007
        pass
    return count


class _Pipe:
    """A write-only file whose content is taken out piece by piece."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.pieces.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self.pieces = b"".join(self.pieces), []
        return data


def iter_warc(crawl: Crawl) -> Iterator[bytes]:
    """write_warc as a stream: what each record wrote, as soon as it is written."""
    check(crawl, "warc")
    pipe = _Pipe()
    writer = archives.WarcWriter(crawl, pipe, filename=filename(crawl, "warc"))  # type: ignore[arg-type]

    def pieces() -> Iterator[bytes]:
        for _ in writer.steps():
            if data := pipe.take():
                yield data

    return _buffered(pieces())


def iter_export(crawl: Crawl, fmt: str, flt: PageFilter | None = None) -> Iterator[bytes]:
    """The crawl's pages in a format: all of them, or those `flt` selects (JSONL, CSV)."""
    check(crawl, fmt)
    if fmt == "warc":
        return iter_warc(crawl)
    if fmt == "wacz":
        return archives.iter_wacz(crawl, warc_name=filename(crawl, "warc"))
    pages = pages_of(crawl, flt)
    if fmt == "jsonl":
        return iter_jsonl(pages)
    names = [r["name"] for r in crawl.effective_extract_rules() if isinstance(r, dict)]
    return iter_csv(pages, [n for n in names if isinstance(n, str)])


async def aiter_export(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A sync export as an async stream, for ASGI: Django would otherwise read a sync
    streaming iterator to the end into memory before sending. Each step runs in the thread
    that owns the request's database connection."""
    step = sync_to_async(next, thread_sensitive=True)
    while True:
        chunk = await step(chunks, None)
        if chunk is None:
            return
        yield chunk
