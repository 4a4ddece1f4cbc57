"""BulkInsert writes the same rows bulk_create would, and skips conflicting ones."""

import threading

import pytest
from django.utils import timezone

from crawls import services
from crawls.engine.rows import BulkInsert
from crawls.models import Page

pytestmark = pytest.mark.django_db

FIELDS = [f.name for f in Page._meta.concrete_fields if not f.primary_key]


def page(crawl, n: int, **values) -> Page:
    return Page(
        crawl=crawl, url=f"http://a.test/{n}", url_hash=f"{n:040d}", fetched_at=timezone.now(),
        **values,
    )  # fmt: skip


@pytest.fixture
def crawl(user):
    return services.crawl_create(user=user, name="rows", seeds=["http://a.test/"])


def test_rows_read_back_like_bulk_create_rows(crawl):
    full = dict(
        final_url="http://a.test/é?q=1", status=200, content_type="text/html; charset=utf-8",
        bytes=1234, elapsed_ms=56, depth=3, referrer="http://a.test/", title="Título ✓",
        error="", redirects=["http://a.test/x", "http://a.test/é"], truncated=True,
        body=b"\x00\xffbinary",
    )  # fmt: skip
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


def test_no_rows_is_no_statement(crawl, django_assert_num_queries):
    with django_assert_num_queries(0):
        BulkInsert(Page).write([])
