"""Pages that name a charset Python does not know, or a codec that is no charset (base64, zlib,
rot13, idna, punycode...), or one that fails on their bytes: every place that decodes a body with
the site's charset (crawlhub/http/charsets.py) reads them, and a crawl of them ends with a
response for each, its body kept; the page detail, the rule preview and the exports show them.
"""

from __future__ import annotations

import csv
import gzip
import io
import json

import lxml.html
import pytest
from django.utils import timezone

from crawlhub.http import Fetcher
from crawlhub.http.charsets import decode, incremental_decoder, text_codec
from crawlhub.http.links import FEED_BYTES, extract
from crawls import services
from crawls.engine.extraction import Extractor, parse_rules
from crawls.models import Page
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, pages_site

# Names a site may put after charset= that name no charset Python can read a page with.
NOT_CHARSETS = [
    "utf-7",
    "x-user-defined",
    "uft-8",
    "idna",
    "punycode",
    "undefined",
    "unicode_escape",
    "raw_unicode_escape",
    "rot13",
    "rot_13",
    "base64",
    "zlib",
    "hex",
    "uu",
    "bz2",
    "quopri",
    "x" * 300,
    "utf-8\x00",
    "ütf-8",
]
TITLE = "Ünïcode ok"
BODY = (
    f"<html><head><title>{TITLE}</title></head><body><a href='/b'>b</a>"
    "<span class='v'>42</span> back\\slash \\u0041 +AGE-</body></html>"
).encode()
RULES = [{"name": "v", "kind": "css", "expr": ".v"}]


@pytest.mark.parametrize("label", NOT_CHARSETS)
def test_a_name_that_is_no_charset_is_read_as_none_at_every_decoder(label):
    content_type = f"text/html; charset={label}"
    assert text_codec(label) is None
    assert decode(BODY, label) == BODY.decode()
    assert extract(BODY, "http://site.test/p", content_type) == (TITLE, ["http://site.test/b"])
    found = Extractor(parse_rules(RULES)).extract(
        url="http://site.test/p", body=BODY, content_type=content_type
    )
    assert (found.fields, found.errors) == ({"v": "42"}, {})
    meta = f'<meta charset="{label}">'.encode() + BODY
    assert extract(meta, "http://site.test/p", "text/html")[0] == TITLE


def test_a_quoted_charset_and_real_charsets_are_read_as_named():
    assert text_codec('"utf-8"') == text_codec(" 'UTF-8' ") == "utf-8"
    assert text_codec("windows-1251") == "cp1251" and text_codec("Shift_JIS") == "shift_jis"
    assert decode("Привет".encode("cp1251"), "windows-1251") == "Привет"
    # A UTF-16 page of an odd length: the last byte is a replacement character, not an error.
    odd = "<title>hi</title>".encode("utf-16-le") + b"<"
    assert decode(odd, "utf-16-le").endswith("\ufffd")
    assert extract(odd, "http://site.test/", "text/html; charset=utf-16")[1] == []


def test_an_iso_2022_escape_cut_by_a_slice_of_the_parser_is_no_error():
    """ISO-2022's incremental decoders refuse an escape sequence cut by a slice's end, even
    with errors="replace" ("pending buffer overflow"): the page's links and title were lost."""
    japanese = "<title>日本語</title>".encode("iso2022_jp")
    # An escape sequence left open by 8 bytes at the end of the parser's first slice.
    cut = b"\x1b.z\x94\x98\xaa\xc5y\xac"
    body = (
        japanese + b" " * (FEED_BYTES - len(japanese) - len(cut)) + cut + b"<a href='/next'>n</a>"
    )
    title, links = extract(body, "http://site.test/", "text/html; charset=iso-2022-jp")
    assert (title, links) == ("日本語", ["http://site.test/next"])
    decoder = incremental_decoder("iso2022_jp")
    text = decoder.decode(b"a" + cut) + decoder.decode(b"b") + decoder.decode(b"", True)
    assert "\ufffd" in text


def test_a_fetch_results_text_reads_any_charset(make_site):
    """FetchResult.text: the login step reads its form with it, webhooks their answers."""
    pages = {
        f"/{i}": Response(body=BODY, content_type=f"text/html; charset={label}")
        for i, label in enumerate(NOT_CHARSETS)
        if "\x00" not in label
    }
    site = make_site(pages_site(pages))
    with Fetcher(timeout=5, max_bytes=100_000) as fetcher:
        for path in pages:
            assert fetcher.get(site.url + path).text() == BODY.decode(), path


@pytest.mark.django_db
@pytest.mark.parametrize("label", ["idna", "punycode", "undefined", "base64", "utf-7", '"utf-8"'])
def test_the_page_detail_shows_a_body_whose_charset_is_no_charset_as_utf_8(
    user, user_client, label
):
    """charset=idna (punycode, undefined) was a 500 on the page detail: Python knows them, and
    they fail on any body, whatever the error handler."""
    crawl = services.crawl_create(user=user, name="odd", seeds=["http://site.test/"])
    page = Page.objects.create(
        crawl=crawl,
        url="http://site.test/",
        url_hash="h",
        status=200,
        fetched_at=timezone.now(),
        content_type=f"text/html; charset={label}",
        body=BODY,
    )
    detail = user_client.get(f"/crawls/{crawl.pk}/pages/{page.pk}/")
    assert detail.status_code == 200
    shown = lxml.html.fromstring(detail.content).cssselect("pre")[0].text_content()
    assert shown == BODY.decode()


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.usefixtures("quick_slices")
def test_a_crawl_of_pages_in_every_odd_charset_ends_with_a_response_for_each(
    user, user_client, make_site
):
    labels = [label for label in NOT_CHARSETS if "\x00" not in label] + ['"utf-8"']
    pages: dict[str, str | Response] = {"/b": "<title>B</title>"}
    for i, label in enumerate(labels):
        pages[f"/header/{i}"] = Response(body=BODY, content_type=f"text/html; charset={label}")
        pages[f"/meta/{i}"] = Response(
            body=f'<meta charset="{label}">'.encode() + BODY, content_type="text/html"
        )
    pages["/utf16-odd"] = Response(body=BODY + b"!", content_type="text/html; charset=utf-16")
    hub = "".join(f"<a href='{path}'>x</a>" for path in pages)
    pages["/"] = f"<title>hub</title>{hub}"
    site = make_site(pages_site(pages))
    crawl = start_site_crawl(user, site, keep_bodies=True, extract_rules=RULES, max_retries=0)
    crawl = drive(crawl, timeout=120)
    assert crawl.state == "finished"
    rows = {page.url.removeprefix(site.url): page for page in crawl.pages.all()}
    assert set(rows) == set(pages) and not crawl.failures.exists()
    for path, row in rows.items():
        assert (row.status, row.error) == (200, ""), path
        if path.startswith(("/header/", "/meta/")):
            assert row.title == TITLE and row.extracted == {"v": "42"}, path
            assert bytes(Page.objects.get(pk=row.pk).body).endswith(BODY), path
    assert sum(1 for r in site.log if r.path == "/b") == 1

    for path, row in rows.items():  # the page detail shows each as text
        detail = user_client.get(f"/crawls/{crawl.pk}/pages/{row.pk}/")
        assert detail.status_code == 200, path
        if path.startswith("/header/"):
            shown = lxml.html.fromstring(detail.content).cssselect("pre")[0].text_content()
            assert TITLE in shown, path

    export = user_client.get(f"/crawls/{crawl.pk}/export.csv")
    table = list(csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert len(table) == len(pages)
    jsonl = b"".join(user_client.get(f"/crawls/{crawl.pk}/export.jsonl").streaming_content)
    assert len([json.loads(line) for line in jsonl.splitlines()]) == len(pages)
    warc = b"".join(user_client.get(f"/crawls/{crawl.pk}/export.warc").streaming_content)
    records = gzip.decompress(warc)
    # A body already archived under another URL is a revisit record (identical payload).
    assert records.count(b"WARC-Type: response") + records.count(b"WARC-Type: revisit") == len(
        pages
    )

    for i in range(len(labels)):  # the rule preview fetches and reads each
        for kind in ("header", "meta"):
            data = {
                "preview_url": f"{site.url}/{kind}/{i}",
                "extract_rules": json.dumps(RULES),
                "timeout": "5",
            }
            answer = user_client.post("/crawls/preview/", data)
            assert answer.status_code == 200, (kind, labels[i], answer.content[:300])
            assert answer.json()["fields"] == {"v": "42"}, (kind, labels[i])
