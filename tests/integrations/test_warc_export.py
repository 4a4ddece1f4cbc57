"""WARC export of a crawl that keeps bodies: archive quality, checked by warcio's own checker and
by reading the records back. Each page is a request record and a response (or revisit) record,
with the heads as they went and came on the wire; a 304 of a run with change detection is a
revisit of the run before; a body already in the file under another URL is a revisit of it."""

from __future__ import annotations

import gzip
import hashlib
import io
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone
from warcio.archiveiterator import ArchiveIterator

from crawlhub import tokens
from crawls import exports, schedules, services
from crawls.models import Page
from tests.support.crawling import drive
from tests.support.sites import RawServer, Response, free_port, pages_site

pytestmark = pytest.mark.django_db

BINARY = bytes(range(256)) * 40
SAME = "<title>Same</title>the same body under two URLs"
WARCIO = str(Path(sys.executable).parent / "warcio")


class ArchivedSite:
    """A site with a redirect, a 404, a 500, a binary file, two URLs with one body, and ETags so
    that a second run gets 304s."""

    def __init__(self) -> None:
        self.pages: dict[str, str | Response] = {
            "/": '<title>Home</title><a href="/a">a</a> <a href="/logo.bin">logo</a> '
            '<a href="/gone">gone</a> <a href="/moved">moved</a> <a href="/copy">copy</a> '
            '<a href="/broken">broken</a>',
            "/a": SAME,
            "/copy": SAME,
            "/logo.bin": Response(body=BINARY, content_type="application/octet-stream"),
            "/gone": Response(status=404, body="<title>Nope</title>not here"),
            "/broken": Response(status=500, body="oops"),
            "/moved": Response(status=301, headers={"Location": "/a?from=moved"}),
            "/a?from=moved": "<title>A again</title>",
        }

    def __call__(self, request):
        page = self.pages.get(request.path)
        if page is None:
            return Response(status=404, body="<h1>Not found</h1>")
        page = page if isinstance(page, Response) else Response(body=page)
        if page.status != 200:
            return page
        body = page.body.encode() if isinstance(page.body, str) else page.body
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        if request.headers.get("If-None-Match") == etag:
            return Response(status=304, headers={"ETag": etag})
        return Response(body=body, content_type=page.content_type, headers={"ETag": etag})


def read_warc(data: bytes) -> list[dict]:
    records = []
    for record in ArchiveIterator(io.BytesIO(data)):
        http = record.http_headers
        records.append(
            {
                "type": record.rec_type,
                "version": record.rec_headers.protocol,
                "id": record.rec_headers.get_header("WARC-Record-ID"),
                "uri": record.rec_headers.get_header("WARC-Target-URI"),
                "date": record.rec_headers.get_header("WARC-Date"),
                "warc": dict(record.rec_headers.headers),
                "status": http.get_statuscode() if http and record.rec_type != "request" else None,
                "http": list(http.headers) if http else [],
                "first_line": (http.protocol + " " + http.statusline) if http else "",
                "content_type": http.get_header("Content-Type") if http else None,
                "body": record.content_stream().read(),
            }
        )
    return records


def warcio_check(data: bytes, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "checked.warc.gz"
    path.write_bytes(data)
    return subprocess.run(
        [WARCIO, "check", "-v", str(path)], capture_output=True, text=True, timeout=120
    )


def export(crawl) -> bytes:
    written = io.BytesIO()
    exports.write_warc(crawl, written)
    return written.getvalue()


def pairs(records: list[dict]) -> dict[str, tuple[dict, dict]]:
    """Each response or revisit with its request record, by target URI; asserts that every one
    has exactly one request naming it and that every request names one."""
    answers = {r["id"]: r for r in records if r["type"] in ("response", "revisit")}
    requests = [r for r in records if r["type"] == "request"]
    assert sorted(r["warc"]["WARC-Concurrent-To"] for r in requests) == sorted(answers)
    found = {}
    for request in requests:
        answer = answers[request["warc"]["WARC-Concurrent-To"]]
        assert (request["uri"], request["date"]) == (answer["uri"], answer["date"])
        assert answer["uri"] not in found, f"two answers for {answer['uri']}"
        found[answer["uri"]] = (request, answer)
    return found


def header(record: dict, name: str) -> list[str]:
    return [value for key, value in record["http"] if key.lower() == name.lower()]


@pytest.fixture
def site(make_site):
    return make_site(ArchivedSite())


def run_twice(user, site):
    """Two runs of a schedule: the second asks with the first one's validators."""
    refused = f"http://127.0.0.1:{free_port()}/"
    template = services.crawl_create(
        user=user,
        name="warc",
        seeds=[site.url + "/", refused],
        keep_bodies=True,
        obey_robots=False,
        max_retries=0,
        threads=2,
    )
    schedule = schedules.schedule_create(user=user, template=template, cron="0 3 * * *")
    first = drive(schedules.schedule_run(schedule=schedule))
    second = drive(schedules.schedule_run(schedule=schedule))
    assert second.baseline_id == first.pk
    return first, second


def test_warcio_checks_an_export_with_redirects_304s_and_errors(user, site, tmp_path):
    first, second = run_twice(user, site)
    # The errors are there: a 404 page, and a 500 and a refused connection in the failure queue.
    assert first.pages.get(url=site.url + "/gone").status == 404
    assert first.failures.count() == 2
    assert "refused" in first.failures.exclude(last_status=500).get().last_error
    assert second.pages.filter(status=304).count() >= 4
    for crawl in (first, second):
        data = export(crawl)
        checked = warcio_check(data, tmp_path)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "digest pass" in checked.stdout
        records = read_warc(data)
        assert {r["version"] for r in records} == {"WARC/1.1"}
        assert records[0]["type"] == "warcinfo"
        assert b"format: WARC File Format 1.1" in records[0]["body"]
        pairs(records)


def test_each_response_has_its_request_as_it_was_sent(user, site, tmp_path):
    first, _ = run_twice(user, site)
    found = pairs(read_warc(export(first)))
    kept = first.pages.filter(body__isnull=False, status__isnull=False)
    assert set(found) == {p.url for p in kept}
    for uri, (request, response) in found.items():
        path = uri.removeprefix(site.url)
        assert request["first_line"] == f"GET {path} HTTP/1.1"
        sent = [r for r in site.log if r.path == path][0]
        # Every header the site received, in its order, with its value (none is a secret here).
        assert request["http"] == list(sent.headers.items())
        assert response["first_line"].startswith("HTTP/1.1 ")


def test_a_redirect_keeps_its_location_so_it_can_be_replayed(user, site):
    first, second = run_twice(user, site)
    for crawl in (first, second):
        _, moved = pairs(read_warc(export(crawl)))[site.url + "/moved"]
        assert moved["type"] == "response"
        assert moved["first_line"] == "HTTP/1.1 301 Moved Permanently"
        assert header(moved, "Location") == ["/a?from=moved"]
        assert header(moved, "Server"), "every header the site sent, not only a few"


def test_a_304_is_a_revisit_of_the_run_before(user, site):
    first, second = run_twice(user, site)
    before = pairs(read_warc(export(first)))
    after = pairs(read_warc(export(second)))
    revisits = {uri: pair for uri, pair in after.items() if pair[1]["type"] == "revisit"}
    not_modified = {p.url for p in second.pages.filter(status=304)}
    assert set(revisits) == not_modified
    for uri, (request, revisit) in revisits.items():
        earlier = before[uri][1]
        warc = revisit["warc"]
        assert warc["WARC-Profile"] == (
            "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
        )
        assert warc["WARC-Refers-To-Target-URI"] == earlier["uri"]
        assert warc["WARC-Refers-To-Date"] == earlier["date"]
        if earlier["type"] == "response":
            assert warc["WARC-Payload-Digest"] == earlier["warc"]["WARC-Payload-Digest"]
        assert revisit["status"] == "304" and revisit["body"] == b""
        assert header(request, "If-None-Match"), "the request that got the 304 was conditional"


def test_a_body_already_in_the_file_is_a_revisit_of_its_first_response(user, site):
    first, _ = run_twice(user, site)
    found = pairs(read_warc(export(first)))
    a, copy = found[site.url + "/a"][1], found[site.url + "/copy"][1]
    original, duplicate = (a, copy) if a["type"] == "response" else (copy, a)
    assert (original["type"], duplicate["type"]) == ("response", "revisit")
    assert original["body"] == SAME.encode()
    warc = duplicate["warc"]
    assert (
        warc["WARC-Profile"] == "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
    )
    assert warc["WARC-Refers-To"] == original["id"]
    assert warc["WARC-Refers-To-Target-URI"] == original["uri"]
    assert warc["WARC-Refers-To-Date"] == original["date"]
    assert warc["WARC-Payload-Digest"] == original["warc"]["WARC-Payload-Digest"]
    assert duplicate["status"] == "200" and header(duplicate, "ETag")


def wire_site(conn: socket.socket, server: RawServer) -> None:
    """Answers with headers in an odd case and order, one of them twice, a session cookie, and
    a gzipped body sent in chunks."""
    body = gzip.compress(b"<title>Zipped</title>" + b"z" * 3000)
    head = (
        b"HTTP/1.1 200 Fine Thanks\r\nX-first: 1\r\nSet-Cookie: sid=site-secret-1\r\n"
        b"content-type: text/html; charset=utf-8\r\nX-Twice: a\r\nContent-Encoding: gzip\r\n"
        b"X-Twice: b\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 1000]), body[i : i + 1000])
        for i in range(0, len(body), 1000)
    )
    conn.sendall(head + chunks + b"0\r\n\r\n")


def test_the_heads_are_written_byte_for_byte_as_they_went_and_came(user, raw_server, tmp_path):
    server = raw_server(wire_site)
    crawl = services.crawl_create(
        user=user,
        name="wire",
        seeds=[server.url + "/page?q=1"],
        keep_bodies=True,
        obey_robots=False,
        max_retries=0,
        auth={"cookie": "token=user-secret-2"},
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    data = export(crawl)
    assert warcio_check(data, tmp_path).returncode == 0
    request, response = pairs(read_warc(data))[server.url + "/page?q=1"]
    raw = gzip.decompress(data)
    # The request head as the server read it off the socket, the cookie's value masked.
    sent = server.heads[0].replace("token=user-secret-2", "••••••").encode("utf-8")
    assert sent in raw, "the request record holds the request head as sent"
    assert request["first_line"] == "GET /page?q=1 HTTP/1.1"
    # The response head as it came: order, case and repeats kept; the framing headers that
    # described the gzipped, chunked bytes renamed, since the payload is the decoded body.
    assert response["first_line"] == "HTTP/1.1 200 Fine Thanks"
    assert response["http"] == [
        ("X-first", "1"),
        ("Set-Cookie", "••••••"),
        ("content-type", "text/html; charset=utf-8"),
        ("X-Twice", "a"),
        ("X-Orig-Content-Encoding", "gzip"),
        ("X-Twice", "b"),
        ("X-Orig-Transfer-Encoding", "chunked"),
        ("Connection", "close"),
    ]
    assert response["body"] == b"<title>Zipped</title>" + b"z" * 3000
    for secret in (b"user-secret-2", b"site-secret-1"):
        assert secret not in raw


def test_pages_without_kept_heads_get_heads_rebuilt_from_their_row(user, tmp_path):
    """Rows from before Page.heads, and pages rendered in a browser (whose body is the DOM),
    keep their headers as a dict only: their records are made from that."""
    crawl = services.crawl_create(
        user=user, name="old", seeds=["http://old.test/"], keep_bodies=True
    )
    Page.objects.create(
        crawl=crawl,
        url="http://old.test:8080/x?y=1",
        url_hash="h",
        status=301,
        fetched_at=timezone.now(),
        body=b"",
        redirect_to="http://old.test/",
        headers={"location": "http://old.test/", "set-cookie": "••••••"},
        request_headers={"User-Agent": "ua/1", "Cookie": "••••••"},
    )
    data = export(crawl)
    assert warcio_check(data, tmp_path).returncode == 0
    request, response = pairs(read_warc(data))["http://old.test:8080/x?y=1"]
    assert request["first_line"] == "GET /x?y=1 HTTP/1.1"
    # Host first; then the kept headers, in the order the database gives them back (jsonb on
    # PostgreSQL keeps no key order: the order as sent is known only to pages with heads).
    assert request["http"][0] == ("Host", "old.test:8080")
    assert sorted(request["http"][1:]) == [("Cookie", "••••••"), ("User-Agent", "ua/1")]
    assert response["first_line"] == "HTTP/1.1 301 Moved Permanently"
    assert header(response, "location") == ["http://old.test/"]


def test_a_body_cut_at_max_bytes_is_marked_truncated(user, make_site, tmp_path):
    big = "<title>Big</title>" + "y" * 5000
    site = make_site(pages_site({"/": '<a href="/big">big</a> small', "/big": big}))
    crawl = services.crawl_create(
        user=user,
        name="warc",
        seeds=[site.url + "/"],
        obey_robots=False,
        keep_bodies=True,
        max_retries=0,
        max_bytes=2048,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    assert crawl.pages.get(url=site.url + "/big").truncated, "the site's page was not cut"
    data = export(crawl)
    assert warcio_check(data, tmp_path).returncode == 0
    found = pairs(read_warc(data))
    cut = found[site.url + "/big"][1]
    assert cut["warc"]["WARC-Truncated"] == "length"
    assert cut["body"] == big.encode()[:2048]
    # The Content-Length the site sent is kept under another name: the payload is shorter.
    assert header(cut, "Content-Length") == ["2048"]
    assert header(cut, "X-Orig-Content-Length") == [str(len(big))]
    assert "WARC-Truncated" not in found[site.url + "/"][1]["warc"]


def test_the_cli_and_the_streamed_download_write_the_same_records(user, site, client, tmp_path):
    crawl = services.crawl_create(
        user=user,
        name="warc",
        seeds=[site.url + "/"],
        obey_robots=False,
        keep_bodies=True,
        max_retries=0,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
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
    written = target.read_bytes()
    assert written[:2] == b"\x1f\x8b", "gzipped"
    _, raw = tokens.token_create(user=user, name="t")
    response = client.get(
        f"/api/crawls/{crawl.pk}/export/?format=warc", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/warc"
    assert response["Content-Disposition"].endswith(f'filename="crawl-{crawl.pk}.warc.gz"')
    streamed = b"".join(response.streaming_content)
    # Record ids differ per export, and so does the warcinfo record's date (the export's).
    first, second = read_warc(streamed), read_warc(written)
    for records in (first, second):
        for record in records:
            for name in ("id", "warc"):
                record.pop(name)
        records[0].pop("date")
    assert first == second
    by_uri = {r["uri"]: r for r in first if r["type"] == "response"}
    assert by_uri[site.url + "/logo.bin"]["body"] == BINARY
    assert by_uri[site.url + "/logo.bin"]["content_type"] == "application/octet-stream"


def test_a_crawl_without_bodies_has_no_warc_and_says_why(user, site, user_client, client):
    crawl = services.crawl_create(
        user=user, name="warc", seeds=[site.url + "/"], obey_robots=False, max_retries=0
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
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
