"""Bad input at every door: crawled content, forms, the API, the CLI and proxy lists.

Crawled content goes through a real crawl (tests.support.crawling.drive) against local servers: a
hub site links to two good pages and to the bad one; the crawl must finish, the bad page must be
recorded with a clear error (or a safe result), and every other page must be intact. Servers
that misbehave at the socket level are tests.support.sites' RawServer.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import os
import socket
import sys
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from crawls import services, webhooks
from crawls.models import Crawl, CrawlState
from proxies import services as proxy_services
from proxies.models import Proxy
from tests.support import processes
from tests.support.clients import form_data
from tests.support.crawling import ROOT, database_url, drive
from tests.support.proxy_jobs import import_by_api
from tests.support.sites import RawServer, Request, Response, pages_site, raw_head

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quick_slices")]

MB = 1024 * 1024
HAS_API = importlib.util.find_spec("crawls.api") is not None


def page(*links: str, title: str = "page") -> str:
    anchors = "".join(f'<a href="{link}">x</a>' for link in links)
    return f"<html><head><title>{title}</title></head><body>{anchors}</body></html>"


@pytest.fixture
def crawl_with(user, make_site):
    """crawl_with(bad_url or bad_path -> Response) runs a crawl of a hub site that links to
    /a, the bad URL and /b; returns (crawl, hub site)."""

    def run(bad: str | Response, *, limit: float = 60, **options) -> tuple[Crawl, object]:
        pages: dict[str, str | Response] = {"/a": page(title="A"), "/b": page(title="B")}
        if isinstance(bad, Response):
            pages["/bad"] = bad
            bad = "/bad"
        pages["/"] = page("/a", bad, "/b", title="Hub")
        hub = make_site(pages_site(pages))
        options = {
            "obey_robots": False,
            "threads": 4,
            "timeout": 1,
            "max_retries": 0,
            "max_bytes": MB,
            **options,
        }
        crawl = services.crawl_create(user=user, name="bad", seeds=[hub.url + "/"], **options)
        services.crawl_start(crawl=crawl, user=user)
        return drive(crawl, timeout=limit, budget=10), hub

    return run


def assert_nothing_lost(crawl: Crawl, hub, *, expect_pages: int = 4) -> None:
    """Finished; the hub and both good pages intact; every scheduled URL is a row."""
    assert crawl.state == CrawlState.FINISHED
    good = {p.url: p for p in crawl.pages.filter(url__startswith=hub.url)}
    for path, title in (("/", "Hub"), ("/a", "A"), ("/b", "B")):
        row = good[hub.url + path]
        assert (row.status, row.title, row.error) == (200, title, ""), path
    rows = crawl.pages.count() + crawl.failures.count()
    assert rows == crawl.stats["requests"] == expect_pages
    assert crawl.stats["in_flight"] == 0 if "in_flight" in crawl.stats else True


def bad_row(crawl: Crawl, hub):
    return crawl.pages.exclude(url__startswith=hub.url + "/").get()


# == crawled content ==========================================================================


def test_page_declared_utf8_with_invalid_bytes_is_decoded_with_replacement(crawl_with):
    body = b"<title>caf\xe9 \xff\xfe ok</title><a href='/b'>b</a>"
    crawl, hub = crawl_with(Response(body=body, content_type="text/html; charset=utf-8"))
    assert_nothing_lost(crawl, hub)
    row = crawl.pages.get(url=hub.url + "/bad")
    assert row.status == 200 and row.error == ""
    assert row.title == "caf\ufffd \ufffd\ufffd ok"


def test_windows_1251_page_without_charset_header_is_read_via_its_meta(crawl_with):
    body = '<meta charset="windows-1251"><title>Привет, мир</title>'.encode("cp1251")
    crawl, hub = crawl_with(Response(body=body, content_type="text/html"))
    assert_nothing_lost(crawl, hub)
    assert crawl.pages.get(url=hub.url + "/bad").title == "Привет, мир"


def test_page_with_an_unknown_charset_still_gives_title_and_links(crawl_with, make_site):
    body = "<title>Ünïcode</title><a href='/b'>b</a>".encode()
    crawl, hub = crawl_with(Response(body=body, content_type="text/html; charset=x-klingon"))
    assert_nothing_lost(crawl, hub)
    assert crawl.pages.get(url=hub.url + "/bad").title == "Ünïcode"


def test_binary_garbage_served_as_html_is_recorded_without_a_title(crawl_with):
    garbage = bytes(range(256)) * 64 + b"\x00<a href='/nowhere'>\x00"
    crawl, hub = crawl_with(Response(body=garbage, content_type="text/html"))
    assert_nothing_lost(crawl, hub, expect_pages=5)  # /nowhere (a 404) is a link like any
    row = crawl.pages.get(url=hub.url + "/bad")
    assert row.status == 200 and row.error == "" and row.title.isprintable()


def test_nul_and_control_characters_in_a_title_never_reach_the_database(crawl_with):
    crawl, hub = crawl_with(Response(body="<title>a\x00b\x07c\u202ed</title>"))
    assert_nothing_lost(crawl, hub)
    # The HTML parser turns NUL into U+FFFD (as browsers do); other controls are dropped.
    assert crawl.pages.get(url=hub.url + "/bad").title == "a\ufffdbcd"


def test_a_megabyte_title_is_cut_to_500_characters(crawl_with):
    crawl, hub = crawl_with(Response(body="<title>" + "word " * 200_000 + "</title>"))
    assert_nothing_lost(crawl, hub)
    title = crawl.pages.get(url=hub.url + "/bad").title
    assert len(title) == 500 and title.startswith("word word")


def test_a_50_mb_body_is_cut_at_max_bytes_and_its_links_not_followed(crawl_with, raw_server):
    chunk = b"<a href='/never'>x</a>".ljust(65536, b" ")

    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/html", Content_Length=str(50 * MB)))
        for _ in range(50 * MB // len(chunk)):
            if not server.alive():
                return
            conn.sendall(chunk)

    server = raw_server(play)
    started = time.monotonic()
    crawl, hub = crawl_with(server.url + "/huge", max_bytes=MB)
    assert time.monotonic() - started < 15
    assert_nothing_lost(crawl, hub)
    row = bad_row(crawl, hub)
    assert row.status == 200 and row.title == ""
    assert row.truncated
    assert MB <= row.bytes < 2 * MB  # what came over the wire before the cut, not 50 MB
    assert not any("never" in h for h in server.heads[1:])


def test_a_gzip_bomb_is_cut_on_decoded_bytes(crawl_with):
    bomb = gzip.compress(b"<a href='/never'>x</a>" + b" " * (20 * MB), 9)
    assert len(bomb) < 100_000
    crawl, hub = crawl_with(
        Response(body=bomb, headers={"Content-Encoding": "gzip"}), max_bytes=200_000
    )
    assert_nothing_lost(crawl, hub)
    row = crawl.pages.get(url=hub.url + "/bad")
    assert row.status == 200 and row.bytes <= len(bomb) and row.title == ""
    assert row.truncated
    assert not crawl.pages.filter(url__endswith="/never").exists()


def test_a_body_that_claims_gzip_but_is_not_is_a_clear_decode_error(crawl_with):
    crawl, hub = crawl_with(Response(body=b"plain text", headers={"Content-Encoding": "gzip"}))
    assert_nothing_lost(crawl, hub)
    row = crawl.pages.get(url=hub.url + "/bad")
    assert row.error.startswith("could not decode the body:") and row.status == 200


def test_an_endless_redirect_chain_stops_with_a_clear_error(crawl_with, raw_server):
    counter = iter(range(10_000))

    def play(conn: socket.socket, server: RawServer) -> None:
        hop = f"/hop{next(counter)}"
        conn.sendall(raw_head("302 Found", Location=hop, Content_Length="0", Connection="close"))

    server = raw_server(play, lifetime=30)
    crawl, hub = crawl_with(server.url + "/start")
    # Each hop is a page of its own, fetched once: /start and 10 redirects, the last of which
    # ends the chain (the Fetcher's max_redirects) instead of going on to an 11th.
    assert_nothing_lost(crawl, hub, expect_pages=3 + 11)
    hops = crawl.pages.exclude(url__startswith=hub.url + "/")
    assert hops.count() == len(server.heads) == 11
    row = hops.get(url=server.url + "/hop9")
    assert row.error == "too many redirects (over 10)" and row.status == 302
    assert len(row.redirects) == 10 and crawl.failures.count() == 0  # not retried
    assert hops.exclude(pk=row.pk).filter(error="").count() == 10


def test_a_redirect_to_a_non_http_scheme_is_a_clear_error(crawl_with):
    crawl, hub = crawl_with(Response(status=301, headers={"Location": "file:///etc/passwd"}))
    assert_nothing_lost(crawl, hub)
    assert crawl.pages.get(url=hub.url + "/bad").error == (
        "redirect to a non-http URL: file:///etc/passwd"
    )


@pytest.mark.slow
def test_a_trickling_server_hits_the_whole_fetch_deadline(crawl_with, raw_server):
    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/html", Content_Length="100000"))
        while server.alive():
            conn.sendall(b"<")
            time.sleep(0.1)

    server = raw_server(play)
    crawl, hub = crawl_with(server.url + "/slow", timeout=0.5)
    assert_nothing_lost(crawl, hub)
    failure = crawl.failures.get()  # a timeout is retryable: after max_retries, the queue
    assert failure.url == server.url + "/slow" and failure.attempts == 1
    assert failure.last_error == "timeout after 1.5 s (whole fetch)"


@pytest.mark.slow
def test_a_body_shorter_than_its_content_length_goes_to_the_failure_queue(crawl_with, raw_server):
    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/html", Content_Length="5000") + b"<title>Cut")

    server = raw_server(play)
    crawl, hub = crawl_with(server.url + "/cut", max_retries=1)
    assert_nothing_lost(crawl, hub)
    failure = crawl.failures.get()
    assert (failure.last_error, failure.attempts, failure.last_status) == (
        "incomplete body",
        2,
        200,
    )
    assert len(server.heads) == 2  # fetched, retried once, given up


def test_a_body_longer_than_its_content_length_is_cut_at_the_declared_length(
    crawl_with, raw_server
):
    body = b"<title>Short</title>" + b"<a href='/never'>x</a>" * 10

    def play(conn: socket.socket, server: RawServer) -> None:
        head = raw_head(Content_Type="text/html", Content_Length="20", Connection="close")
        conn.sendall(head + body)

    server = raw_server(play)
    crawl, hub = crawl_with(server.url + "/long")
    assert_nothing_lost(crawl, hub)
    row = bad_row(crawl, hub)
    assert (row.status, row.title, row.error) == (200, "Short", "")
    assert not crawl.pages.filter(url__endswith="/never").exists()


def test_a_server_that_speaks_no_http_is_a_connection_error(crawl_with, raw_server):
    server = raw_server(lambda conn, server: conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"))
    crawl, hub = crawl_with(server.url + "/ssh")
    assert_nothing_lost(crawl, hub)
    assert crawl.failures.get().last_error.startswith(("connection", "request failed"))


def test_odd_characters_in_links_are_encoded_or_dropped(user, make_site):
    links = [
        "/caf\u00e9 menu?q=\u00fc ber",  # non-ASCII and spaces: percent-encoded
        " \t/tab\nbed\r ",  # whitespace stripped, inner tabs/newlines dropped (as browsers)
        "/quote'&quot;&lt;&gt;",
        "/%zz%",  # a bad escape: the % itself is escaped
        "javascript:alert(1)",
        "mailto:x@y.z",
        "data:text/html,hi",
        "tel:123",
        "http://[::1",
        "http://127.0.0.1:99999/",
        "http://",  # malformed: dropped
        "#only-a-fragment",
    ]
    seen: list[str] = []

    def handler(request: Request) -> Response:
        seen.append(request.path)
        if request.path == "/":
            return Response(body=page(*links, title="Hub"))
        return Response(body=page(title="leaf"))

    site = make_site(handler)
    crawl = services.crawl_create(
        user=user, name="odd", seeds=[site.url + "/"], obey_robots=False, max_retries=0
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=30)
    assert crawl.state == CrawlState.FINISHED
    assert sorted(seen) == sorted(
        ["/", "/caf%C3%A9%20menu?q=%C3%BC%20ber", "/tabbed", "/quote'%22%3C%3E", "/%25zz%25"]
    )
    assert all(p.status == 200 and p.error == "" for p in crawl.pages.all())
    assert crawl.pages.count() == crawl.stats["requests"] == 5


def test_idn_hosts_are_punycoded_and_an_unknown_one_is_a_dns_error(user, make_site):
    site = make_site(pages_site({"/": page("http://BÜCHER.invalid/straße", title="Hub")}))
    crawl = services.crawl_create(
        user=user,
        name="idn",
        seeds=[site.url + "/"],
        obey_robots=False,
        max_retries=0,
        allowed_domains=["bücher.invalid", "127.0.0.1"],
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=30)
    assert crawl.state == CrawlState.FINISHED
    row = crawl.pages.exclude(url__startswith=site.url).get()
    assert row.url == "http://xn--bcher-kva.invalid/stra%C3%9Fe"
    assert row.error == "DNS lookup failed for xn--bcher-kva.invalid" and row.status is None
    assert crawl.pages.get(url=site.url + "/").title == "Hub"


def test_a_10000_character_link_is_recorded_with_a_clear_error(crawl_with):
    long_path = "/" + "a" * 10_000
    crawl, hub = crawl_with(long_path)
    assert_nothing_lost(crawl, hub)
    row = crawl.pages.get(url=hub.url + long_path)
    assert row.error.startswith(
        f"longer than 8000 characters ({len(hub.url + long_path)}): 'http://127.0.0.1"
    )
    assert row.status is None and len(row.error) < 300


@pytest.mark.slow
def test_a_page_with_100000_links_is_parsed_and_capped_by_max_pages(user, make_site):
    hub = "".join(f'<a href="/p/{i}">{i}</a>' for i in range(100_000))
    site = make_site(
        lambda r: Response(body=f"<title>Hub</title>{hub}" if r.path == "/" else page())
    )
    crawl = services.crawl_create(
        user=user, name="many", seeds=[site.url + "/"], obey_robots=False, max_pages=30, threads=8
    )
    services.crawl_start(crawl=crawl, user=user)
    # How long it takes is bench/'s to say; a parse that never ends fails drive's timeout.
    crawl = drive(crawl, timeout=120)
    assert crawl.state == CrawlState.FINISHED
    assert crawl.pages.get(url=site.url + "/").title == "Hub"
    assert crawl.pages.count() == crawl.stats["requests"] == 30
    assert len(site.log) == 30


@pytest.mark.parametrize(
    ("robots", "blocked"),
    [
        (Response(body=bytes(range(256)) * 100, content_type="text/plain"), []),
        (Response(body="<html><body>Disallow: / <b>User-agent: *</b></body></html>"), []),
        (
            Response(body="\x00\x00\ufffd junk\nUser-agent: *\nDisallow: /b\nCrawl-delay: lots\n"),
            ["/b"],
        ),
        (Response(status=302, headers={"Location": "/robots.txt"}), []),  # a loop
        (Response(body="User-agent: *\n" + "Disallow: /x*y*z*\n" * 20_000), []),  # 400 KB
    ],
    ids=["binary", "html", "junk-around-a-rule", "redirect-loop", "huge"],
)
def test_a_garbage_robots_txt_never_stops_the_crawl(user, make_site, robots, blocked):
    pages = {
        "/robots.txt": robots,
        "/": page("/a", "/b", title="Hub"),
        "/a": page(title="A"),
        "/b": page(title="B"),
    }
    site = make_site(pages_site(pages))
    crawl = services.crawl_create(
        user=user, name="robots", seeds=[site.url + "/"], obey_robots=True, max_retries=0
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=30)
    assert crawl.state == CrawlState.FINISHED
    rows = {p.url.removeprefix(site.url): (p.status, p.error) for p in crawl.pages.all()}
    assert rows == {
        path: (None, "blocked by robots.txt") if path in blocked else (200, "")
        for path in ("/", "/a", "/b")
    }


# == forms ====================================================================================


def crawl_form_errors(client, **overrides) -> dict:
    values = {"name": "t", "seeds": "http://example.com/", **overrides}
    data = form_data(client, "/crawls/new/", **values)
    response = client.post("/crawls/new/", data)
    assert response.status_code == 200, "the form was accepted"
    assert Crawl.objects.count() == 0
    return response.context["form"].errors


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        (
            {"seeds": "ftp://example.com/"},
            "seeds",
            "line 1: 'ftp://example.com/' is not an http(s) URL",
        ),
        (
            {"seeds": "http://example.com/\n\njavascript:alert(1)"},
            "seeds",
            "line 3: 'javascript:alert(1)' is not an http(s) URL",
        ),
        (
            {"seeds": "http://example.com/" + "a" * 10_000},
            "seeds",
            "line 1: 'http://example.com/" + "a" * 181 + "...' is longer than 8000 characters "
            "(10019)",
        ),
        (
            {"seeds": "http://exa mple.com/"},
            "seeds",
            "line 1: 'http://exa mple.com/' has a space or a control character",
        ),
        ({"seeds": "http://[::1/"}, "seeds", "line 1: 'http://[::1/' has a malformed IPv6 address"),
        ({"seeds": "http://example.com\x00/"}, "seeds", "Null characters are not allowed."),
        (
            {"include_patterns": "ok\n(unclosed"},
            "include_patterns",
            "line 2: '(unclosed' is not a valid regular expression: "
            "missing ), unterminated subpattern at position 0",
        ),
        (
            {"allowed_domains": "https://example.com/x"},
            "allowed_domains",
            "'https://example.com/x' is not a domain name (no scheme, path or port)",
        ),
        ({"max_pages": "0"}, "max_pages", "Ensure this value is greater than or equal to 1."),
        ({"threads": "100000"}, "threads", "Ensure this value is less than or equal to 128."),
        ({"timeout": "NaN"}, "timeout", "Enter a number."),
        ({"name": "   "}, "name", "This field is required."),
        ({"max_bytes": str(10**18)}, "max_bytes", "At most 50 MB (52,428,800 bytes)."),
        (
            {"max_bytes": str(50 * MB), "threads": "16"},
            "max_bytes",
            "Threads x max bytes is at most 256 MB, the memory one slice may hold in bodies: "
            "16 x 52428800 bytes is 800 MB. Lower one of them.",
        ),
    ],
    ids=[
        "ftp",
        "javascript-line-3",
        "10k-url",
        "space-in-host",
        "broken-ipv6",
        "nul",
        "bad-regex",
        "domain-with-scheme",
        "zero-pages",
        "too-many-threads",
        "nan",
        "blank-name",
        "10^18-bytes",
        "threads-x-bytes",
    ],
)
def test_the_new_crawl_form_names_the_bad_field(user_client, overrides, field, message):
    assert crawl_form_errors(user_client, **overrides)[field] == [message]


def test_bad_seeds_added_from_the_crawl_page_change_nothing(user, user_client):
    crawl = services.crawl_create(user=user, name="t", seeds=["http://example.com/"])
    response = user_client.post(
        f"/crawls/{crawl.pk}/add-seeds/", {"urls": "http://ok.example/\nnot a url"}, follow=True
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert shown == ["seeds: line 2: 'not a url' is not an http(s) URL"] or any(
        "line 2: 'not a url' is not an http(s) URL" in m for m in shown
    )
    crawl.refresh_from_db()
    assert crawl.seeds == ["http://example.com/"]


def test_the_proxy_import_form_refuses_a_file_that_is_not_utf8(staff_client):
    upload = SimpleUploadedFile("list.txt", "1.2.3.4:80\nprøxy:81\n".encode("latin-1"))
    response = staff_client.post("/proxies/import", {"file": upload})
    assert response.status_code == 200
    assert response.context["form"].non_field_errors() == ["the list is not UTF-8 text"]
    assert Proxy.objects.count() == 0


def test_the_proxy_import_form_refuses_a_url_with_another_scheme(staff_client):
    response = staff_client.post("/proxies/import", {"url": "file:///etc/passwd"})
    assert response.context["form"].errors["url"] == ["Enter a valid URL."]


def test_removing_proxies_without_a_reason_is_refused(staff, staff_client):
    proxy_services.import_proxies(text="1.2.3.4:80", source="t", user=staff)
    proxy = Proxy.objects.get()
    response = staff_client.post(
        "/proxies/action", {"action": "remove", "ids": [proxy.pk], "why": "  "}, follow=True
    )
    assert [str(m) for m in response.context["messages"]] == [
        "Say why the proxies are removed: it goes in the audit log."
    ]
    proxy.refresh_from_db()
    assert proxy.state != "removed"


# == proxy lists ==============================================================================


def test_a_proxy_list_of_odd_lines_reports_each_by_line_number(staff):
    text = "\r\n".join(
        [
            "1.2.3.4:8080",  # 1: fine
            "http://user:hunter2@h.example:99999",  # 2: port; the password is not echoed
            "bücher.example:80",  # 3: an IDN host must be given in punycode
            "h\x00st.example:80",  # 4: a NUL
            "http://" + "a" * 10_000 + ".example:80",  # 5: a 10,000-character host
            "1.2.3.4:8080",  # 6: a repeat of line 1
            "   ",  # 7: blank, skipped
            "http://xn--bcher-kva.example:81",  # 8: fine
        ]
    )
    report = proxy_services.import_proxies(text=text, source="paste", user=staff)
    assert [p.masked_url for p in report.added] == [
        "http://1.2.3.4:8080",
        "http://xn--bcher-kva.example:81",
    ]
    assert [(e.line, e.reason) for e in report.errors] == [
        (2, "port must be a number from 1 to 65535"),
        (3, "invalid host: a name with letters outside a-z is written in punycode (xn--...)"),
        (4, "invalid host: it has a control character"),
        (5, "invalid host: not an IP address or a host name (letters a-z, digits, - and .)"),
    ]
    assert "hunter2" not in json.dumps(report.as_dict())
    assert [(d.line, d.why) for d in report.duplicates] == [(6, "repeats line 1")]


def test_the_cli_refuses_a_binary_proxy_list(tmp_path):
    path = tmp_path / "list.bin"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(CommandError, match="^the list is not UTF-8 text$"):
        call_command("proxies", "import", str(path))


def test_the_cli_refuses_a_proxy_list_over_5_mb(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"1.2.3.4:80\n" * (600_000))
    with pytest.raises(CommandError, match="big.txt is larger than 5 MB"):
        call_command("proxies", "import", str(path))
    assert Proxy.objects.count() == 0


def test_the_cli_says_when_a_proxy_list_url_is_missing(make_site):
    site = make_site(pages_site({}))
    with pytest.raises(CommandError, match=f"^could not fetch {site.url}/list: HTTP 404$"):
        call_command("proxies", "import", site.url + "/list")


def test_the_cli_reads_a_proxy_file_with_a_bom_and_crlf_lines(tmp_path):
    path = tmp_path / "list.txt"
    path.write_bytes("\ufeff1.2.3.4:80\r\nhttp://5.6.7.8:3128\r\n".encode())
    out = io.StringIO()
    call_command("proxies", "import", str(path), stdout=out, stderr=io.StringIO())
    assert out.getvalue().strip() == "2 added, 0 duplicates, 0 bad lines"
    assert sorted(Proxy.objects.values_list("host", flat=True)) == ["1.2.3.4", "5.6.7.8"]


def test_the_cli_reports_bad_proxy_lines_with_numbers(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text("1.2.3.4:80\nsocks4://5.6.7.8:1080\n\n:80\n")
    err = io.StringIO()
    call_command("proxies", "import", str(path), stdout=io.StringIO(), stderr=err)
    assert err.getvalue().splitlines() == [
        "line 2: unsupported scheme 'socks4' (use http, https, socks5 or socks5h): socks4://5.6.7.8:1080",
        "line 4: missing host: :80",
    ]


# == the crawl CLI ============================================================================


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["create", "--name", "x", "--seed", "nope"],
            "invalid crawl:\n  seeds: line 1: 'nope' is not an http(s) URL",
        ),
        (
            ["create", "--name", "x", "--seed", "http://e.com/", "--include", "(("],
            "invalid crawl:\n  include_patterns: line 1: '((' is not a valid "
            "regular expression: missing ), unterminated subpattern at position 1",
        ),
        (
            ["create", "--name", "x", "--seed", "http://e.com/", "--max-pages", "0"],
            "invalid crawl:\n  max_pages: Ensure this value is greater than or equal to 1.",
        ),
        (
            ["create", "--name", "x", "--seed", "http://e.com/", "--timeout", "nan"],
            "invalid crawl:\n  timeout: Enter a finite number.",
        ),
        (
            ["create", "--name", "x", "--seed", "http://e.com/", "--channel", "nosuch"],
            "no channel with slug 'nosuch'",
        ),
        (
            ["create", "--name", "x", "--seed", "http://e.com/", "--user", "ghost"],
            "no user named 'ghost'",
        ),
        (["start", "999999"], "no crawl with id 999999"),
        (["add-seeds", "999999", "http://e.com/"], "no crawl with id 999999"),
        (
            ["create", "--name", "x", "--seed", "http://e.com/", "--max-bytes", "3000000000"],
            "invalid crawl:\n  max_bytes: At most 52428800 bytes (50 MB).",
        ),
    ],
    ids=[
        "bad-seed",
        "bad-regex",
        "zero-pages",
        "nan-timeout",
        "no-channel",
        "no-user",
        "no-crawl",
        "add-seeds-no-crawl",
        "3-gb",
    ],
)
def test_the_crawl_cli_says_what_is_wrong(args, message):
    with pytest.raises(CommandError) as caught:
        call_command("crawl", *args, stdout=io.StringIO())
    assert str(caught.value) == message
    assert Crawl.objects.count() == 0


def test_the_crawl_cli_refuses_an_action_the_state_does_not_allow(user):
    crawl = services.crawl_create(user=user, name="t", seeds=["http://example.com/"])
    with pytest.raises(CommandError, match="^A draft crawl cannot be paused.$"):
        call_command("crawl", "pause", str(crawl.pk))


# == the API ==================================================================================

api = pytest.mark.skipif(not HAS_API, reason="the REST API (crawls/api.py) is not there yet")


@api
@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (
            {"name": "x", "seeds": ["gopher://x/"]},
            "seeds",
            "line 1: 'gopher://x/' is not an http(s) URL",
        ),
        (
            {"name": "x", "seeds": "http://e.com/"},
            "seeds",
            'Expected a list of items but got type "str".',
        ),
        ({"name": "x", "seeds": [{"url": "http://e.com/"}]}, "seeds", None),
        ({"name": "x", "seeds": []}, "seeds", "This list may not be empty."),
        ({"name": "x", "seeds": ["http://e.com/"], "max_pages": -5}, "max_pages", None),
        (
            {"name": "x", "seeds": ["http://e.com/"], "threads": "many"},
            "threads",
            "A valid integer is required.",
        ),
        (
            {"name": "x", "seeds": ["http://e.com/"], "include_patterns": ["[z-a]"]},
            "include_patterns",
            None,
        ),
        (
            {"name": "x", "seeds": ["http://e.com/"], "max_bytes": 3 * 10**9},
            "max_bytes",
            "52428800",
        ),
        ({"name": "x", "seeds": ["http://e.com/"], "max_bytes": 10**18}, "max_bytes", "52428800"),
    ],
    ids=[
        "scheme",
        "string-not-list",
        "object-in-list",
        "empty",
        "negative",
        "word",
        "regex",
        "3-gb",
        "10^18-bytes",
    ],
)
def test_the_api_answers_400_naming_the_field(user_client, body, field, message):
    response = user_client.post("/api/crawls/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    if message is not None:
        assert any(message in str(m) for m in errors[field]), errors
    assert Crawl.objects.count() == 0


@api
@pytest.mark.parametrize(
    "payload",
    [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'"a string"', b"null"],
    ids=["broken", "binary", "list", "string", "null"],
)
def test_the_api_answers_400_to_a_body_that_is_not_a_json_object(user_client, payload):
    response = user_client.post("/api/crawls/", payload, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    assert Crawl.objects.count() == 0


@api
@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer a b", "Bearer \u00e9\u00e8", "Bearer " + "x" * 10_000, "Token nope"],
    ids=["no-token", "two-parts", "non-ascii", "10k", "unknown"],
)
def test_the_api_answers_401_to_a_malformed_token(client, header):
    response = client.get("/api/crawls/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401, response.content
    assert "detail" in response.json()


@api
def test_the_api_proxy_import_reports_bad_lines_by_number(staff_client):
    answer, response = import_by_api(
        staff_client, {"text": "1.2.3.4:80\nhttp://u:topsecret@h.example:0\n"}
    )  # the import runs as a job: its report once it ended
    assert response.status_code in (200, 201), response.content
    report = response.json()["report"]
    assert [(e["line"], e["reason"]) for e in report["errors"]] == [
        (2, "port must be a number from 1 to 65535")
    ]
    assert "topsecret" not in answer.content.decode() + response.content.decode()


# == hostile patterns and settings: refused where they are entered, never a stalled worker ====
# (docs/reliability.md, "Hostile input")

NESTED_5000 = "(" * 5000 + "a" + ")" * 5000
HOSTILE_PATTERNS = [
    # (lines, the message on include_patterns)
    (
        ["a" * MB],
        f"line 1: {'a' * 40!r}... is 1,048,576 characters long; a pattern has at most 1,000",
    ),
    (
        [NESTED_5000],
        f"line 1: {'(' * 40!r}... is 10,001 characters long; a pattern has at most 1,000",
    ),
    (
        ["/docs/", r"/(\w+)/\1/"],
        r"line 2: '/(\\w+)/\\1/' uses a backreference "
        r"(\1), which crawlhub's linear-time pattern engine does not support",
    ),
    ([f"/p{n}/" for n in range(101)], "101 patterns; at most 100"),
]
HOSTILE_IDS = ["1-mb", "5000-nested-groups", "backreference", "101-patterns"]


@pytest.mark.parametrize(("lines", "message"), HOSTILE_PATTERNS, ids=HOSTILE_IDS)
def test_hostile_patterns_are_refused_by_the_form_naming_the_field(user_client, lines, message):
    errors = crawl_form_errors(user_client, include_patterns="\n".join(lines))
    assert errors == {"include_patterns": [message]}


@api
@pytest.mark.parametrize(("lines", "message"), HOSTILE_PATTERNS, ids=HOSTILE_IDS)
def test_hostile_patterns_are_refused_by_the_api_with_a_json_400(user_client, lines, message):
    body = {"name": "x", "seeds": ["http://e.com/"], "include_patterns": lines}
    response = user_client.post("/api/crawls/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:500]
    assert response.json() == {"include_patterns": [message]}
    assert Crawl.objects.count() == 0


@pytest.mark.parametrize(("lines", "message"), HOSTILE_PATTERNS, ids=HOSTILE_IDS)
def test_hostile_patterns_are_refused_by_the_cli(lines, message):
    args = ["create", "--name", "x", "--seed", "http://e.com/"]
    for line in lines:
        args += ["--include", line]
    with pytest.raises(CommandError) as caught:
        call_command("crawl", *args, stdout=io.StringIO())
    # The command line names the field; the form shows the message by it, the API keys it.
    assert str(caught.value) == "invalid crawl:\n  include_patterns: " + message
    assert Crawl.objects.count() == 0


UA_ERROR = "must be a single line"


def test_a_user_agent_with_a_line_break_is_refused_by_the_form(user_client):
    errors = crawl_form_errors(user_client, user_agent_mode="fixed", user_agent="Bot/1\nX-Evil: 1")
    assert errors == {"user_agent": [UA_ERROR]}


@api
def test_a_user_agent_with_a_line_break_is_refused_by_the_api(user_client):
    body = {
        "name": "x",
        "seeds": ["http://e.com/"],
        "user_agent_mode": "fixed",
        "user_agent": "Bot/1\nX-Evil: 1",
    }
    response = user_client.post("/api/crawls/", body, content_type="application/json")
    assert (response.status_code, response.json()) == (400, {"user_agent": [UA_ERROR]})
    assert Crawl.objects.count() == 0


def test_a_user_agent_with_a_line_break_is_refused_by_the_cli():
    with pytest.raises(CommandError) as caught:
        call_command(
            "crawl",
            "create",
            "--name",
            "x",
            "--seed",
            "http://e.com/",
            "--user-agent",
            "Bot/1\rX-Evil: 1",
            stdout=io.StringIO(),
        )
    assert str(caught.value) == "invalid crawl:\n  user_agent: " + UA_ERROR
    assert Crawl.objects.count() == 0


@pytest.mark.timeout(120)  # on Python's re, the first link alone would take hours
def test_a_backtracking_include_pattern_does_not_stall_the_crawl(user, make_site):
    """The finding: `(a+)+$` against URLs of 40 "a"s and a "!" held a worker for 420 s."""
    attacks = ["/" + "a" * n + "!" for n in range(40, 60)]
    wanted = "/" + "a" * 40
    site = make_site(pages_site({"/": page(*attacks, wanted), wanted: page(*attacks, "/")}))
    crawl = services.crawl_create(
        user=user,
        name="attack",
        seeds=[site.url + "/"],
        include_patterns=["(a+)+$"],
        obey_robots=False,
        threads=4,
    )
    started = time.monotonic()
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=60)
    elapsed = time.monotonic() - started
    assert crawl.state == CrawlState.FINISHED
    assert sorted(site.paths()) == ["/", wanted]
    assert elapsed < 20, f"the crawl took {elapsed:.1f} s"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # a worker process reads the rows
def test_on_a_real_worker_a_crawl_whose_settings_broke_fails_and_says_why(user, make_site):
    """The finding: such a crawl stayed "running" with one queued request and no slice."""
    deliveries: list[Request] = []
    receiver = make_site(lambda request: deliveries.append(request) or Response(body="ok"))
    site = make_site(pages_site({"/": page("/a"), "/a": page()}))
    crawl = services.crawl_create(
        user=user, name="broken", seeds=[site.url + "/"], obey_robots=False
    )
    webhooks.webhook_create(user=user, url=receiver.url + "/hook", events=["failed"], crawl=crawl)
    services.crawl_start(crawl=crawl, user=user)
    # Past crawl_clean, as a row saved before an upgrade, or edited in the database, would be.
    Crawl.objects.filter(pk=crawl.pk).update(user_agent="Bot/1\nX-Evil: 1")
    started = time.monotonic()
    worker = processes.run(
        [sys.executable, "manage.py", "rqworker", "crawls", "control", "--burst"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url()},
        timeout=120,
        capture_output=True,
        text=True,
    )
    print(f"the worker ended the crawl and exited in {time.monotonic() - started:.1f} s")
    assert worker.returncode == 0, worker.stderr[-2000:]
    crawl.refresh_from_db()
    assert crawl.state == CrawlState.FAILED
    assert crawl.error == (
        "a slice cannot start with this crawl's settings: user_agent: must be a single line"
    )
    assert site.paths() == []
    assert [json.loads(d.body)["event"] for d in deliveries] == ["crawl.failed"]
