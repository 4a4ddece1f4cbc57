"""BulkInsert writes the same rows bulk_create would, and skips conflicting ones; a slice's
page and failure rows say what was fetched."""

import hashlib
import threading

import pytest
from django.utils import timezone

from crawlhub.http.client import Fetcher
from crawlhub.http.wire import MASK
from crawls import services
from crawls.engine.request import Request
from crawls.engine.results import Extracted, OutLinks
from crawls.engine.rows import (
    LINK_COLUMNS,
    LINK_ROWS,
    MAX_HEADER_CHARS,
    MAX_HEADERS,
    PAGE_ROWS,
    SECRET_RESPONSE_HEADERS,
    BulkInsert,
    PageExtras,
    failure_row,
    kept_headers,
    link_rows,
    page_row,
    source_of,
    url_hash,
)
from crawls.models import FailedRequest, Link, Page
from tests.support.sites import Response

pytestmark = pytest.mark.django_db

FIELDS = [f.name for f in Page._meta.concrete_fields if not f.primary_key]


def comparable(row: tuple) -> tuple:
    """A row's values with PostgreSQL's adapters opened (psycopg's Jsonb and Binary do not
    compare by value): each as its kind and what it holds, so a Jsonb is still no Json."""
    return tuple((type(v).__name__, v.obj) if hasattr(v, "obj") else v for v in row)


def page(crawl, n: int, **values) -> Page:
    return Page(
        crawl=crawl,
        url=f"http://a.test/{n}",
        url_hash=f"{n:040d}",
        fetched_at=timezone.now(),
        **values,
    )


@pytest.fixture
def crawl(user):
    return services.crawl_create(user=user, name="rows", seeds=["http://a.test/"])


def test_rows_read_back_like_bulk_create_rows(crawl):
    full = dict(
        final_url="http://a.test/é?q=1",
        status=200,
        content_type="text/html; charset=utf-8",
        bytes=1234,
        elapsed_ms=56,
        depth=3,
        referrer="http://a.test/",
        title="Título ✓",
        error="",
        redirects=["http://a.test/x", "http://a.test/é"],
        truncated=True,
        body=b"\x00\xffbinary",
    )
    empty = dict(status=None, error="timeout after 3 s", body=None)
    Page.objects.bulk_create([page(crawl, 1, **full), page(crawl, 2, **empty)])
    rows = BulkInsert(Page)
    # Rows made on other threads, as a slice's fetch threads make them.
    made = []
    threads = [
        threading.Thread(target=lambda n=n, v=v: made.append(rows.row(page(crawl, n, **v))))
        for n, v in ((11, full), (12, empty))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows.write(made)

    def stored(n: int) -> dict:
        values = Page.objects.filter(url_hash=f"{n:040d}").values(*FIELDS).get()
        values["body"] = None if values["body"] is None else bytes(values["body"])
        return {k: v for k, v in values.items() if k not in ("url", "url_hash", "fetched_at")}

    assert stored(11) == stored(1)
    assert stored(12) == stored(2)
    assert stored(11)["redirects"] == full["redirects"]
    assert abs(Page.objects.get(url_hash=f"{11:040d}").fetched_at - timezone.now()).seconds < 60


def test_conflicting_rows_are_skipped_and_the_rest_written(crawl):
    rows = BulkInsert(Page)
    rows.write([rows.row(page(crawl, 1, title="first"))])
    rows.write([rows.row(page(crawl, 1, title="again")), rows.row(page(crawl, 2))])
    assert dict(Page.objects.values_list("url_hash", "title")) == {
        f"{1:040d}": "first",
        f"{2:040d}": "",
    }


def test_link_rows_are_made_as_the_link_model_writes_them(crawl):
    assert tuple(f.attname for f in LINK_ROWS.fields) == LINK_COLUMNS
    big = 2**63 - 1
    links = OutLinks(rows=[(big, -big, "Café ✓"), (1, 2, "")])
    made = link_rows(crawl, links)
    assert made == [
        LINK_ROWS.row(Link(crawl=crawl, source_fp=s, target_fp=t, text=x)) for s, t, x in links.rows
    ]
    LINK_ROWS.write(made)
    stored = Link.objects.filter(crawl=crawl).order_by("target_fp")
    assert list(stored.values_list("source_fp", "target_fp", "text")) == [
        (big, -big, "Café ✓"),
        (1, 2, ""),
    ]


def test_no_rows_is_no_statement(crawl, django_assert_num_queries):
    with django_assert_num_queries(0):
        BulkInsert(Page).write([])


# -- what a slice writes ---------------------------------------------------------------------


@pytest.fixture
def fetcher():
    f = Fetcher(timeout=0.5, max_bytes=1024 * 1024, user_agent_mode="fixed")
    yield f
    f.close()


def test_a_page_row_holds_what_was_fetched_and_the_body_only_when_kept(crawl, make_site, fetcher):
    title = "T" * 600
    html = f"<html><title>{title}</title><a href='/next'>next</a></html>"
    site = make_site(lambda r: Response(body=html))
    request = Request(site.url + "/é?q=1", depth=2, referrer=site.url + "/")
    fetch = fetcher.fetch(request.url)
    now = timezone.now()
    PAGE_ROWS.write([page_row(crawl, request, now, fetch=fetch)])
    page = Page.objects.get(crawl=crawl)
    assert (page.url, page.depth, page.referrer) == (request.url, 2, site.url + "/")
    assert page.url_hash == hashlib.sha1(request.url.encode()).hexdigest()
    assert (page.status, page.bytes, page.final_url) == (200, len(html), fetch.final_url)
    assert page.title == "T" * 500
    assert page.fetched_at == now and page.error == "" and page.body is None
    crawl.keep_bodies = True
    page.delete()
    PAGE_ROWS.write([page_row(crawl, request, now, fetch=fetch)])
    assert bytes(Page.objects.get(crawl=crawl).body) == html.encode()


def test_a_page_not_fetched_says_why(crawl):
    request = Request("http://a.test/private", depth=1)
    PAGE_ROWS.write([page_row(crawl, request, timezone.now(), error="blocked by robots.txt")])
    page = Page.objects.get(crawl=crawl)
    assert (page.url, page.status, page.error) == (request.url, None, "blocked by robots.txt")


def test_a_failure_row_counts_the_last_attempt_and_names_the_status(crawl, make_site, fetcher):
    site = make_site(lambda r: Response(status=503))
    request = Request(site.url + "/busy", depth=1, referrer=site.url + "/", attempts=2)
    failure = failure_row(crawl, request, fetcher.fetch(request.url), timezone.now())
    failure.save()
    stored = FailedRequest.objects.get(crawl=crawl)
    assert (stored.url, stored.depth, stored.referrer) == (request.url, 1, site.url + "/")
    assert (stored.attempts, stored.last_status, stored.last_error) == (3, 503, "HTTP 503")
    assert stored.url_hash == hashlib.sha1(request.url.encode()).hexdigest()


def test_a_page_row_is_the_row_a_page_instance_would_write(crawl, make_site, fetcher):
    """page_row makes its row without a Page instance (crawls/engine/rows.py): column for column
    it is what the fields' own preparation gives, for a page with everything and for one with
    nothing but an error, a 304 carrying its baseline's fields, and a structured-data switch."""
    site = make_site(lambda r: Response(body="<title>Tí</title><a href='/n'>n</a>"))
    request = Request(
        site.url + "/é?q=1",
        depth=2,
        referrer=site.url + "/",
        attempts=1,
        history=("HTTP 503",),
        redirects=(site.url + "/old",),
    )
    fetch = fetcher.fetch(request.url)
    fetch.headers["set-cookie"] = "s=1"
    fetch.body = b"\x00body"
    crawl.keep_bodies = True
    now = timezone.now()
    links = OutLinks(kept=[["http://a.test/n", "n", ""]], total=1)
    full = PageExtras(
        digest="d" * 64,
        change="changed",
        links=links,
        extracted=Extracted(fields={"t": ["Tí"]}, errors={"x": "bad"}, structured={"a": 1}),
    )
    carried = PageExtras(
        digest="e" * 64,
        carried={"title": "Old", "extracted": {"t": "Old"}, "structured_data": None},
    )
    cases = [
        (request, {"fetch": fetch, "extras": full}),
        (request, {"fetch": fetch, "extras": carried}),
        (Request("http://a.test/x"), {"error": "blocked by robots.txt"}),
        (request, {"fetch": fetch, "extras": PageExtras(extracted=Extracted())}),
    ]
    for req, kwargs in cases:
        page = Page(
            crawl_id=crawl.pk,
            url=req.url,
            depth=req.depth,
            referrer=req.referrer,
            fetched_at=now,
            url_hash=url_hash(req.url),
            error=kwargs.get("error", ""),
            fp=req.fp,
            source=source_of(req),
            attempts=req.attempts + 1,
            history=list(req.history),
            redirects=list(req.redirects),
        )
        if "fetch" in kwargs:
            page.final_url, page.status = fetch.final_url, fetch.status
            page.content_type, page.bytes = fetch.content_type, fetch.nbytes
            page.elapsed_ms, page.title, page.error = fetch.elapsed_ms, fetch.title, fetch.error
            page.redirect_to, page.truncated = fetch.redirect_to, fetch.truncated
            page.headers = kept_headers(fetch.headers, secret=SECRET_RESPONSE_HEADERS)
            page.request_headers = kept_headers(fetch.request_headers)
            page.body = fetch.body
            page.heads = fetch.exchange.text(secret=SECRET_RESPONSE_HEADERS)
            extras = kwargs["extras"]
            page.digest, page.change = extras.digest, extras.change
            for name, value in (extras.carried or {}).items():
                setattr(page, name, value)
            if extras.extracted is not None:
                page.extracted = extras.extracted.fields
                page.extract_errors = extras.extracted.errors
                page.structured_data = extras.extracted.structured
            if extras.links is not None:
                page.links, page.links_total = extras.links.kept, extras.links.total
        assert comparable(page_row(crawl, req, now, **kwargs)) == comparable(PAGE_ROWS.row(page)), (
            kwargs
        )


def test_kept_headers_are_those_a_loop_over_them_keeps():
    """kept_headers (map and zip, no Python loop per header) against the loop it replaces:
    at most MAX_HEADERS, NULs dropped, names and values cut, secret names masked whatever
    their case, a later header of the same kept name taking its place."""

    def looped(headers: dict, secret: frozenset[str]) -> dict:
        kept = {}
        for name, value in list(headers.items())[:MAX_HEADERS]:
            clean = str(value).replace("\x00", "")[:MAX_HEADER_CHARS]
            kept[str(name).replace("\x00", "")[:200]] = MASK if name.lower() in secret else clean
        return kept

    many = {f"x-h{n}": f"v{n}" for n in range(MAX_HEADERS + 10)}
    odd = {
        "Set-Cookie": "s=1",
        "content-type": "text/html\x00",
        "x-\x00nul": "a\x00b",
        "x-nul": "later",  # the same kept name as the one before
        "n" * 300: "v" * 3000,
        "WWW-Authenticate": "Basic",
        "x-number": 7,
        "": "",
    }
    for headers in ({}, many, odd, {**odd, **many}, {"SET-COOKIE": "a"}):
        for secret in (frozenset(), SECRET_RESPONSE_HEADERS):
            assert kept_headers(headers, secret=secret) == looped(headers, secret), headers
            assert list(kept_headers(headers, secret=secret)) == list(looped(headers, secret))
