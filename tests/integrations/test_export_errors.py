"""The exports and the API mean by "error" what the crawl page means (docs/results.md, "Exports"): a
request that ended with no usable answer. Checked on a real crawl of a local site with a 404, a
500 every time, a page robots.txt forbids and a link to a host nobody answers (its robots.txt
unreachable too: retried, then a failure that says so): every row of
the pages and failures exports is in the counter its columns name, and every moment is written
one way, ISO 8601 in UTC with the offset."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from crawls.engine.frontier import Frontier
from crawls.models import CrawlState
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, free_port, pages_site

pytestmark = pytest.mark.django_db

MACHINE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$")


def site_pages(dead: str) -> dict:
    links = ["/ok", "/missing", "/broken", "/private/x", dead]
    anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
    return {
        "/": f"<html><head><title>home</title></head><body>{anchors}</body></html>",
        "/ok": "<html><head><title>ok</title></head><body>fine</body></html>",
        "/broken": Response(status=500, body="<h1>boom</h1>"),
        "/robots.txt": Response(
            body="User-agent: *\nDisallow: /private\n", content_type="text/plain"
        ),
    }


@pytest.fixture
def crawl(user, make_site):
    dead = f"http://127.0.0.1:{free_port()}/gone"
    site = make_site(pages_site(site_pages(dead)))
    crawl = drive(start_site_crawl(user, site, obey_robots=True, max_retries=1), timeout=120)
    assert crawl.state == CrawlState.FINISHED
    crawl.site_url, crawl.dead_url = site.url, dead
    return crawl


def download(client, url: str) -> bytes:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return b"".join(response.streaming_content)


def jsonl(body: bytes) -> list[dict]:
    return [json.loads(line) for line in body.decode().splitlines()]


def test_every_exported_row_is_in_the_counter_its_columns_name(crawl, user_client):
    stats = crawl.stats
    pages = jsonl(download(user_client, f"/crawls/{crawl.pk}/export.jsonl"))
    by_path = {p["url"].removeprefix(crawl.site_url): p for p in pages}
    failures = jsonl(download(user_client, f"/crawls/{crawl.pk}/failures.jsonl"))

    # The 404 is a response, with no error; the 200s too.
    assert by_path["/missing"]["status"] == 404
    assert by_path["/missing"]["counted_as"] == "responses" and by_path["/missing"]["error"] == ""
    assert by_path["/ok"]["counted_as"] == "responses"
    # The page robots.txt forbids got no answer: an error, with why.
    private = by_path["/private/x"]
    assert private["status"] is None and private["counted_as"] == "errors"
    assert "robots" in private["error"] and private["note"] == ""
    # The dead host's link got no answer, robots.txt included: retried like any fetch that got
    # none (not "blocked by robots.txt", a site's rule), then a failure with why.
    assert crawl.dead_url not in [p["url"] for p in pages]
    dead, broken = sorted(failures, key=lambda f: f["url"] != crawl.dead_url)
    assert dead["url"] == crawl.dead_url and dead["last_status"] is None
    assert dead["last_error"].startswith("robots.txt could not be fetched: ")
    assert dead["attempts"] == 2
    # The 500 used up its retries: no page, a failure with its last status.
    assert "/broken" not in by_path
    assert broken["url"] == crawl.site_url + "/broken"
    assert broken["last_status"] == 500 and broken["last_error"] == "HTTP 500"
    assert broken["attempts"] == 2

    # The rows add up to the counters the crawl page shows.
    page_errors = [p for p in pages if p["counted_as"] == "errors"]
    responses = [p for p in pages if p["counted_as"] == "responses"]
    assert stats["errors"] == len(page_errors) + len(failures) == 3
    assert stats["responses"] == len(responses) == 3  # /, /ok, /missing
    assert stats["failed"] == len(failures) == 2
    assert stats["failed_http"] == sum(1 for f in failures if f["last_status"]) == 1
    assert stats["status_5xx"] == 1 and stats["status_4xx"] == 1
    assert Frontier(crawl.pk).stats()["errors"] == stats["errors"]


def test_csv_and_jsonl_say_the_same_and_every_moment_is_iso_8601_utc(crawl, user_client):
    lines = jsonl(download(user_client, f"/crawls/{crawl.pk}/export.jsonl"))
    rows = list(
        csv.DictReader(
            io.StringIO(download(user_client, f"/crawls/{crawl.pk}/export.csv").decode())
        )
    )
    assert len(rows) == len(lines) == 4  # /, /ok, /missing, /private/x (the dead link failed)
    for row, line in zip(rows, lines, strict=True):
        assert row["counted_as"] == line["counted_as"] and row["error"] == line["error"]
        assert row["fetched_at"] == line["fetched_at"]
        assert MACHINE.match(line["fetched_at"]), line["fetched_at"]
    failures_csv = download(user_client, f"/crawls/{crawl.pk}/failures.csv").decode()
    header, *rest = list(csv.reader(io.StringIO(failures_csv)))
    assert header == [
        "id",
        "url",
        "depth",
        "referrer",
        "attempts",
        "last_status",
        "last_error",
        "failed_at",
    ]
    assert len(rest) == 2 and all(MACHINE.match(row[-1]) for row in rest)
    assert sorted(row[5] for row in rest) == ["", "500"]  # the dead link's got no status


def test_the_api_names_and_writes_them_as_the_exports(crawl, user_client):
    exported = {
        p["id"]: p for p in jsonl(download(user_client, f"/crawls/{crawl.pk}/export.jsonl"))
    }
    answer = user_client.get(f"/api/crawls/{crawl.pk}/pages/").json()["results"]
    assert {p["id"] for p in answer} == set(exported)
    for page in answer:
        for column in ("counted_as", "error", "note", "fetched_at", "status"):
            assert page[column] == exported[page["id"]][column], (column, page)
    failures = user_client.get(f"/api/crawls/{crawl.pk}/failures/").json()["results"]
    exported_failures = jsonl(download(user_client, f"/crawls/{crawl.pk}/failures.jsonl"))
    assert sorted(failures, key=lambda f: f["id"]) == sorted(
        exported_failures, key=lambda f: f["id"]
    )
    detail = user_client.get(f"/api/crawls/{crawl.pk}/").json()
    for key in ("created_at", "started_at", "finished_at"):
        assert MACHINE.match(detail[key]), (key, detail[key])


def test_a_failure_export_in_an_unknown_format_is_refused(crawl, user_client):
    response = user_client.get(f"/crawls/{crawl.pk}/failures.warc")
    assert response.status_code == 404
    assert "use jsonl or csv" in response.content.decode()
