"""WARC export of a crawl that keeps bodies: warcio reads back every response it fetched."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from warcio.archiveiterator import ArchiveIterator

from crawlhub import tokens
from crawls import exports, services
from tests.support.crawling import drive
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db

BINARY = bytes(range(256)) * 40


@pytest.fixture
def site(make_site):
    return make_site(
        pages_site(
            {
                "/": '<title>Home</title><a href="/a">a</a> <a href="/logo.bin">logo</a> '
                '<a href="/gone">gone</a> <a href="/moved">moved</a>',
                "/a": "<title>A</title>ünïcode body",
                "/logo.bin": Response(body=BINARY, content_type="application/octet-stream"),
                "/gone": Response(status=404, body="<title>Nope</title>not here"),
                "/moved": Response(status=301, headers={"Location": "/a?from=moved"}),
                "/a?from=moved": "<title>A again</title>",
            }
        )
    )


def crawl_with_bodies(user, site, *, keep_bodies: bool = True, **options):
    crawl = services.crawl_create(
        user=user,
        name="warc",
        seeds=[site.url + "/"],
        obey_robots=False,
        keep_bodies=keep_bodies,
        max_retries=0,
        **options,
    )
    services.crawl_start(crawl=crawl, user=user)
    return drive(crawl)


def read_warc(data: bytes) -> list:
    records = []
    for record in ArchiveIterator(io.BytesIO(data)):
        records.append(
            {
                "type": record.rec_type,
                "uri": record.rec_headers.get_header("WARC-Target-URI"),
                "date": record.rec_headers.get_header("WARC-Date"),
                "status": record.http_headers.get_statuscode() if record.http_headers else None,
                "content_type": record.http_headers.get_header("Content-Type")
                if record.http_headers
                else None,
                "truncated": record.rec_headers.get_header("WARC-Truncated"),
                "body": record.content_stream().read(),
            }
        )
    return records


def test_warcio_reads_back_every_fetched_response(user, site, tmp_path):
    crawl = crawl_with_bodies(user, site)
    pages = list(crawl.pages.filter(body__isnull=False).order_by("id"))
    assert len(pages) >= 5
    target = tmp_path / "crawl.warc.gz"
    call_command(
        "crawl",
        "export",
        str(crawl.pk),
        "--format",
        "warc",
        "--output",
        str(target),
        stdout=io.StringIO(),
    )
    data = target.read_bytes()
    assert data[:2] == b"\x1f\x8b", "gzipped"
    records = read_warc(data)
    assert records[0]["type"] == "warcinfo"
    responses = records[1:]
    assert [r["type"] for r in responses] == ["response"] * len(pages)
    for record, page in zip(responses, pages, strict=True):
        assert record["uri"] == (page.final_url or page.url)
        assert record["body"] == bytes(page.body)
        assert record["status"] == str(page.status)
        assert record["date"] == page.fetched_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    by_uri = {r["uri"]: r for r in responses}
    assert by_uri[site.url + "/logo.bin"]["body"] == BINARY
    assert by_uri[site.url + "/logo.bin"]["content_type"] == "application/octet-stream"
    assert by_uri[site.url + "/gone"]["status"] == "404"
    assert "ünïcode body".encode() in by_uri[site.url + "/a"]["body"]


def test_a_body_cut_at_max_bytes_is_marked_truncated(user, make_site):
    big = "<title>Big</title>" + "y" * 5000
    site = make_site(pages_site({"/": '<a href="/big">big</a> small', "/big": big}))
    crawl = crawl_with_bodies(user, site, max_bytes=2048)
    assert crawl.pages.get(url=site.url + "/big").truncated, "the site's page was not cut"
    written = io.BytesIO()
    exports.write_warc(crawl, written)
    by_uri = {r["uri"]: r for r in read_warc(written.getvalue())[1:]}
    cut = by_uri[site.url + "/big"]
    assert cut["truncated"] == "length", "a body cut at max_bytes must say WARC-Truncated"
    assert cut["body"] == big.encode()[:2048]
    assert by_uri[site.url + "/"]["truncated"] is None, "a whole body is not marked truncated"


def test_the_streamed_warc_is_the_same_file(user, site, client):
    crawl = crawl_with_bodies(user, site)
    written = io.BytesIO()
    count = exports.write_warc(crawl, written)
    assert count == crawl.pages.filter(body__isnull=False).count()
    _, raw = tokens.token_create(user=user, name="t")
    response = client.get(
        f"/api/crawls/{crawl.pk}/export/?format=warc", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/warc"
    assert response["Content-Disposition"].endswith(f'filename="crawl-{crawl.pk}.warc.gz"')
    streamed = b"".join(response.streaming_content)
    # Record ids differ per run; what read_warc keeps (uri, date, status, body) must not,
    # except the warcinfo record's date: the time of each export, which may be a second apart.
    first, second = read_warc(streamed), read_warc(written.getvalue())
    assert first[0]["type"] == second[0]["type"] == "warcinfo"
    for records in (first, second):
        records[0].pop("date")
    assert first == second


def test_a_crawl_without_bodies_has_no_warc_and_says_why(user, site, user_client, client):
    crawl = crawl_with_bodies(user, site, keep_bodies=False)
    page = user_client.get(f"/crawls/{crawl.pk}/export.warc")
    assert page.status_code == 409
    assert "does not keep response bodies" in page.content.decode()
    _, raw = tokens.token_create(user=user, name="t")
    api = client.get(
        f"/api/crawls/{crawl.pk}/export/?format=warc", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert api.status_code == 409
    assert api["Content-Type"] == "application/json"
    assert "does not keep response bodies" in api.json()["detail"]
