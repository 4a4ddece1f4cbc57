"""What a worker holds at its highest while a site sends gigabytes: a crawl's slices run in a
process of their own (tests.support.slice_process) against a local server that streams 2 GB, or
a gzip or deflate bomb of 2 GB, with keep_bodies on and the largest max_bytes a crawl may have.
The same measurement, printed: bench/worker_memory.py."""

from __future__ import annotations

import os

import pytest
from django.core.validators import MaxValueValidator

from crawls import services
from crawls.models import Crawl, CrawlState
from tests.support import slice_process
from tests.support.crawling import database_url
from tests.support.sites import streaming

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MB = 1024 * 1024
GB = 1024 * MB
PEAK_RSS_LIMIT = 300 * MB


def largest_max_bytes() -> int:
    """The largest max_bytes a crawl may be created with (the field's smallest upper bound)."""
    field = Crawl._meta.get_field("max_bytes")
    return min(v.limit_value for v in field.validators if isinstance(v, MaxValueValidator))


@pytest.mark.parametrize(
    "encoding", ["", "gzip", "deflate"], ids=["2-gb-stream", "gzip-bomb", "deflate-bomb"]
)
def test_a_worker_stays_under_300_mb_whatever_size_a_page_has(user, raw_server, encoding):
    server = raw_server(streaming(2 * GB, content_encoding=encoding), lifetime=60)
    max_bytes = largest_max_bytes()
    crawl = services.crawl_create(
        user=user,
        name="big",
        seeds=[server.url + "/"],
        keep_bodies=True,
        max_bytes=max_bytes,
        threads=1,
        max_retries=0,
        obey_robots=False,
        timeout=10,
    )
    services.crawl_start(crawl=crawl, user=user)
    measured = slice_process.peak_rss(crawl.pk, env={**os.environ, "DATABASE_URL": database_url()})
    crawl.refresh_from_db()
    assert measured["state"] == crawl.state == CrawlState.FINISHED
    page = crawl.pages.get()
    assert page.status == 200 and page.truncated and page.error == ""
    assert len(page.body) == max_bytes  # kept, cut at max_bytes
    print(f"peak RSS {encoding or 'plain'}: {measured['peak_rss'] / MB:.0f} MB")
    assert measured["peak_rss"] < PEAK_RSS_LIMIT, f"{measured['peak_rss'] / MB:.0f} MB"
