"""Fetching: User-Agents, redirects, statuses, limits in size and time, and every way a network
or a server can fail. Real local servers only: LocalSite for well-behaved HTTP, RawServer (below)
for servers that misbehave on purpose at the socket level (both in tests/support/sites.py).
"""

from __future__ import annotations

import base64
import gzip
import os
import random
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from email.utils import formatdate

import pytest
import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3 import HTTPHeaderDict

from crawlhub.http.client import Fetcher, FetchResult
from crawlhub.http.session import PreparedHeaders, _Adapter, case_insensitive
from crawlhub.http.useragents import DEFAULT_USER_AGENT, USER_AGENTS, pick_user_agent
from tests.support.sites import RawServer, Request, Response, pages_site, raw_head

# No database here: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


MB = 1024 * 1024


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(timeout=0.5, max_bytes=MB, user_agent_mode="random")
    yield f
    f.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def peak_memory(fn: Callable[[], FetchResult]) -> tuple[FetchResult, int]:
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- User-Agents ---------------------------------------------------------------------------


def test_user_agent_pool_is_realistic_and_distinct():
    assert 25 <= len(USER_AGENTS) == len(set(USER_AGENTS))
    assert all(ua.startswith("Mozilla/5.0 (") for ua in USER_AGENTS)
    assert any("Mobile" in ua for ua in USER_AGENTS) and any("Windows" in ua for ua in USER_AGENTS)


def test_pick_user_agent_modes():
    assert pick_user_agent("fixed", "MyBot/2.0 ") == "MyBot/2.0"
    assert pick_user_agent("fixed") == DEFAULT_USER_AGENT == "crawlhub/0.1 (+self-hosted crawler)"
    assert pick_user_agent("random") in USER_AGENTS
    with pytest.raises(ValueError, match="user_agent_mode: 'sometimes'"):
        pick_user_agent("sometimes")


def test_random_user_agent_varies_per_request_and_comes_from_the_pool(make_site, fetcher):
    site = make_site(pages_site({"/": "<p>hi</p>"}))
    for _ in range(20):
        assert fetcher.fetch(site.url + "/").status == 200
    seen = [r.headers["User-Agent"] for r in site.log]
    assert set(seen) <= set(USER_AGENTS)
    assert len(set(seen)) >= 3


def test_fixed_user_agent_is_sent_with_accept_headers(make_site):
    site = make_site(pages_site({"/": "<p>hi</p>"}))
    with Fetcher(timeout=0.5, max_bytes=MB, user_agent_mode="fixed", user_agent="Bot/1") as f:
        f.fetch(site.url + "/")
    with Fetcher(timeout=0.5, max_bytes=MB, user_agent_mode="fixed") as f:
        f.fetch(site.url + "/")
    first, second = site.log
    assert first.headers["User-Agent"] == "Bot/1"
    assert second.headers["User-Agent"] == DEFAULT_USER_AGENT
    assert first.headers["Accept-Encoding"] == "gzip, deflate"
    assert first.headers["Accept"].startswith("text/html")


def test_bad_settings_fail_when_the_fetcher_is_made():
    with pytest.raises(ValueError, match="user_agent_mode"):
        Fetcher(timeout=1, max_bytes=MB, user_agent_mode="rotating")
    with pytest.raises(ValueError, match="single line"):
        Fetcher(timeout=1, max_bytes=MB, user_agent_mode="fixed", user_agent="a\r\nX-Evil: 1")


# -- pages, statuses, redirects --------------------------------------------------------------


def test_html_page_gives_title_links_and_timing(make_site, fetcher):
    site = make_site(pages_site({"/": "<title> Home </title><a href='/a#x'>a</a><a href='b'>"}))
    result = fetcher.fetch(site.url + "/")
    assert (result.status, result.error, result.error_kind) == (200, "", "")
    assert result.title == "Home"
    assert result.links == [site.url + "/a", site.url + "/b"]
    assert result.content_type == "text/html; charset=utf-8"
    assert result.nbytes == len(result.body) > 0
    assert result.final_url == result.url == site.url + "/"
    assert result.redirects == [] and not result.truncated and result.elapsed_ms >= 0


def test_connections_are_pooled_across_fetches(make_site, fetcher):
    site = make_site(pages_site({"/a": "a", "/b": "b"}))
    fetcher.fetch(site.url + "/a")
    fetcher.fetch(site.url + "/b")
    assert site.log[0].client == site.log[1].client  # same client port: one kept-alive socket


def test_each_origin_is_fetched_through_its_own_pool_with_more_origins_than_pools(make_site):
    """The adapter remembers each origin's pool (session.py), at most as many as its manager
    keeps: with more origins than that, every fetch still reaches its own server, and within
    one origin the connection is kept."""
    sites = [make_site(pages_site({"/": "<title>t</title>"})) for _ in range(4)]
    fetcher = Fetcher(timeout=2, max_bytes=MB, pool_size=2)  # the manager keeps 2 pools
    try:
        for round_ in range(3):
            for site in sites:
                result = fetcher.fetch(site.url + "/")
                assert (result.status, result.error) == (200, ""), (round_, site.url)
        assert all(len(site.log) == 3 for site in sites)
        # Within one origin, the connection is kept: two fetches in a row, one socket.
        fetcher.fetch(sites[0].url + "/")
        fetcher.fetch(sites[0].url + "/")
        assert sites[0].log[-1].client == sites[0].log[-2].client
    finally:
        fetcher.close()


def test_the_request_line_names_what_requests_would_name():
    """The adapter's request_url (session.py) skips requests' parses of the URL for a direct
    request: on 20,000 generated URLs, odd ones included, it names what requests names."""
    ours, theirs = _Adapter(), HTTPAdapter()
    rng = random.Random(3)
    pieces = [*"ab/?#:@.%=&;~", "//", "[::1]", ":8080", "é", "\\"]
    for _ in range(20_000):
        url = (
            rng.choice(["http://", "https://", "HTTP://", "ftp://"])
            + rng.choice(["h.example", "a", "127.0.0.1:80", "x.y:8080", ""])
            + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        )
        prepared = requests.PreparedRequest()
        prepared.url = url
        for proxies in ({}, {"http": "http://proxy.example:3128"}):
            assert ours.request_url(prepared, proxies) == theirs.request_url(prepared, proxies), url


def test_redirects_are_followed_and_each_hop_recorded(make_site, fetcher):
    site = make_site(
        pages_site(
            {
                "/old": Response(status=301, headers={"Location": "/middle"}),
                "/middle": Response(status=302, headers={"Location": "/sub/new?x=1#frag"}),
                "/sub/new?x=1": Response(status=303, headers={"Location": "final"}),
                "/sub/final": "<title>Final</title><a href='../up'>up</a>",
            }
        )
    )
    result = fetcher.fetch(site.url + "/old")
    assert result.status == 200 and result.error == ""
    assert result.redirects == [
        site.url + "/middle",
        site.url + "/sub/new?x=1",
        site.url + "/sub/final",
    ]
    assert result.final_url == site.url + "/sub/final"
    assert result.url == site.url + "/old"
    assert result.links == [site.url + "/up"]  # resolved against the final URL
    assert site.paths() == ["/old", "/middle", "/sub/new?x=1", "/sub/final"]


def test_redirect_loop_is_capped_with_a_clear_error(make_site):
    site = make_site(pages_site({"/loop": Response(status=302, headers={"Location": "/loop"})}))
    with Fetcher(timeout=0.5, max_bytes=MB, max_redirects=3) as f:
        result = f.fetch(site.url + "/loop")
    assert result.error == "too many redirects (over 3)"
    assert result.error_kind == "redirects" and not result.retryable
    assert result.redirects == [site.url + "/loop"] * 3
    assert len(site.log) == 4


def test_endless_redirect_chain_on_a_raw_socket_stops_at_the_default_cap(raw_server, fetcher):
    counter = iter(range(1000))

    def play(conn: socket.socket, server: RawServer) -> None:
        hop = f"/hop{next(counter)}"
        conn.sendall(raw_head("302 Found", Location=hop, Content_Length="0", Connection="close"))

    server = raw_server(play)
    result = fetcher.fetch(server.url + "/")
    assert result.error == "too many redirects (over 10)"
    assert len(result.redirects) == 10 and len(server.heads) == 11


def test_redirect_to_a_non_http_url_is_an_error(make_site, fetcher):
    site = make_site(pages_site({"/": Response(status=302, headers={"Location": "ftp://x/f"})}))
    result = fetcher.fetch(site.url + "/")
    assert result.error == "redirect to a non-http URL: ftp://x/f"
    assert result.error_kind == "redirects"
    assert result.status == 302 and result.redirects == []


def test_a_crawl_fetch_answers_with_the_redirect_and_where_it_points(make_site, fetcher):
    body = "<title>Moved</title><a href='/elsewhere'>here</a>"
    site = make_site(
        pages_site(
            {
                "/old": Response(status=301, body=body, headers={"Location": "sub/new?x=1#frag"}),
                "/sub/new?x=1": "<title>New</title>",
                "/no-location": Response(status=302, body="no Location"),
            }
        )
    )
    result = fetcher.fetch(site.url + "/old", follow_redirects=False)
    assert (result.status, result.error, result.redirects) == (301, "", [])
    assert result.redirect_to == site.url + "/sub/new?x=1"  # absolute, fragment dropped
    assert result.final_url == site.url + "/old" and result.body == body.encode()
    assert result.title == "Moved"  # the redirect's own page, as any other answer's
    result = fetcher.fetch(site.url + "/no-location", follow_redirects=False)
    assert (result.status, result.error, result.redirect_to) == (302, "", "")
    assert site.paths() == ["/old", "/no-location"]  # the target was not fetched
    assert fetcher.fetch(site.url + "/old").redirect_to == ""  # followed: no target left


def test_headers_for_each_hop_are_asked_for_that_hop_s_url(make_site, fetcher):
    # robots.txt and sitemaps carry a crawl's credentials to its own hosts only: a redirect
    # elsewhere is followed without them.
    other = make_site(pages_site({"/robots.txt": "User-agent: *", "/map.xml": "<urlset/>"}))
    there = other.url.replace("127.0.0.1", "localhost")
    site = make_site(
        pages_site(
            {
                "/robots.txt": Response(status=301, headers={"Location": there + "/robots.txt"}),
                "/map.xml": Response(status=302, headers={"Location": there + "/map.xml"}),
            }
        )
    )

    def own(url: str) -> dict[str, str]:
        return {"Authorization": "Basic b3du"} if url.startswith(site.url) else {}

    assert fetcher.fetch_text(site.url + "/robots.txt", headers_for=own) == (200, "User-agent: *")
    result = fetcher.get(site.url + "/map.xml", headers_for=own, secret_headers=frozenset())
    assert (result.status, result.final_url) == (200, there + "/map.xml")
    assert [r.headers.get("Authorization") for r in site.log] == ["Basic b3du"] * 2
    assert [r.headers.get("Authorization") for r in other.log] == [None, None]
    sent = fetcher.get(
        site.url + "/map.xml",
        headers_for=lambda url: {"X-Token": "t0k"},
        secret_headers=frozenset({"x-token"}),
    )
    assert sent.request_headers["X-Token"] == "••••••"  # what the last hop sent, masked


def test_a_crawl_fetch_refuses_a_redirect_to_a_non_http_url_as_following_does(make_site, fetcher):
    site = make_site(pages_site({"/": Response(status=302, headers={"Location": "ftp://x/f"})}))
    result = fetcher.fetch(site.url + "/", follow_redirects=False)
    assert result.error == "redirect to a non-http URL: ftp://x/f"
    assert (result.error_kind, result.status, result.redirect_to) == ("redirects", 302, "")
    assert fetcher.fetch(site.url + "/", follow_redirects=False).status == 302  # still usable


@pytest.mark.parametrize(("status", "retryable"), [(404, False), (410, False), (500, True)])
def test_error_statuses_are_kept_as_responses(make_site, fetcher, status, retryable):
    site = make_site(lambda r: Response(status=status, body="<title>Oops</title>"))
    result = fetcher.fetch(site.url + "/")
    assert result.status == status and result.error == "" and result.error_kind == ""
    assert result.retryable is retryable
    assert result.title == "Oops"  # the caller decides whether links of error pages count


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        ("3601", None),
        ("soon", None),
        ("-5", None),
        (None, None),
        ("\u00b2", None),
    ],  # "²": a digit to str.isdigit(), not a number
)
def test_retry_after_in_seconds(make_site, fetcher, header, expected):
    headers = {"Retry-After": header} if header is not None else {}
    site = make_site(lambda r: Response(status=429, headers=headers))
    result = fetcher.fetch(site.url + "/")
    assert result.status == 429 and result.retryable
    assert result.retry_after == expected


def test_retry_after_as_http_date(make_site, fetcher):
    when = formatdate(time.time() + 90, usegmt=True)
    site = make_site(lambda r: Response(status=503, headers={"Retry-After": when}))
    result = fetcher.fetch(site.url + "/")
    assert 85 <= result.retry_after <= 91


# -- size limits -----------------------------------------------------------------------------


@pytest.mark.parametrize("framing", ["content-length", "until-close"])
def test_huge_body_is_cut_at_max_bytes_quickly_with_bounded_memory(raw_server, framing):
    fifty_mb = 50 * MB
    chunk = b"x" * 65536
    sent, over = [0], threading.Event()

    def play(conn: socket.socket, server: RawServer) -> None:
        try:
            extra = {"Content_Length": str(fifty_mb)} if framing == "content-length" else {}
            conn.sendall(raw_head(Content_Type="text/html", Connection="close", **extra))
            for _ in range(fifty_mb // len(chunk)):
                if not server.alive():
                    return
                conn.sendall(chunk)
                sent[0] += len(chunk)
        finally:
            over.set()

    server = raw_server(play, lifetime=60)
    # A read timeout far longer than the bound below: a fetch that waited on the server once it
    # had its megabyte would show.
    with Fetcher(timeout=30, max_bytes=MB) as f:
        started = time.monotonic()
        result, peak = peak_memory(lambda: f.fetch(server.url + "/"))
        took = time.monotonic() - started
    # The client hung up after its megabyte: the server could not send the rest (what the
    # socket buffers held aside), so nothing read it to the end.
    assert over.wait(30) and sent[0] < fifty_mb // 2, sent
    assert took < 10, took
    assert result.status == 200 and result.truncated and result.error == ""
    assert result.body == b"x" * MB
    assert result.links == [] and result.title == ""  # a cut-off page is not parsed
    assert peak < 6 * MB


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compression_bomb_is_capped_on_decoded_bytes(make_site, encoding):
    zeros = b"\0" * (10 * MB)
    packed = gzip.compress(zeros, 9) if encoding == "gzip" else zlib.compress(zeros, 9)
    assert len(packed) < 20_000
    site = make_site(lambda r: Response(body=packed, headers={"Content-Encoding": encoding}))
    with Fetcher(timeout=10, max_bytes=100_000) as f:
        result, peak = peak_memory(lambda: f.fetch(site.url + "/"))
    assert result.truncated and result.error == ""
    assert result.body == b"\0" * 100_000
    assert result.nbytes <= len(packed)  # wire bytes, not decoded ones
    assert peak < 3 * MB


@pytest.mark.parametrize("wrapped", [True, False], ids=["zlib", "raw-deflate"])
def test_deflate_that_decodes_to_nothing_is_cut_by_its_raw_size_within_the_deadline(
    raw_server, wrapped
):
    """Empty stored blocks, endlessly: megabytes on the wire, not one byte of body. Each block
    must count against the limits, not only what it decodes to."""
    empty_blocks = b"\x00\x00\x00\xff\xff" * 13_000  # 65,000 bytes, decoding to nothing

    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/html", Content_Encoding="deflate"))
        conn.sendall(b"\x78\x9c" if wrapped else b"")
        while server.alive():
            conn.sendall(empty_blocks)

    server = raw_server(play, lifetime=20)
    with Fetcher(timeout=1, max_bytes=MB, total_timeout=5) as f:
        result, peak = peak_memory(lambda: f.fetch(server.url + "/"))
    # Cut by its size, within the deadline: a fetch the deadline ended would say so.
    assert result.status == 200 and result.error == "" and result.truncated
    assert result.body == b"" and MB <= result.nbytes < 2 * MB
    assert peak < 6 * MB


def test_compressed_page_is_decoded_and_parsed(make_site, fetcher):
    page = b"<title>Packed</title>" + b"<a href='/x'>x</a>" * 500
    packed = gzip.compress(page)
    site = make_site(lambda r: Response(body=packed, headers={"Content-Encoding": "gzip"}))
    result = fetcher.fetch(site.url + "/")
    assert result.body == page and result.nbytes == len(packed)
    assert result.title == "Packed" and len(result.links) == 500


def test_body_of_exactly_max_bytes_is_not_truncated(make_site):
    site = make_site(lambda r: Response(body=b"a" * 1000, content_type="text/plain"))
    with Fetcher(timeout=0.5, max_bytes=1000) as f:
        result = f.fetch(site.url + "/")
    assert not result.truncated and len(result.body) == 1000


# -- time limits and broken servers ---------------------------------------------------------


@pytest.mark.slow
def test_trickling_server_hits_the_fetch_deadline(raw_server):
    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/html", Content_Length="100000"))
        while server.alive():
            conn.sendall(b"<")  # one byte every 0.1 s: the read timeout alone never fires
            time.sleep(0.1)

    server = raw_server(play)
    with Fetcher(timeout=0.5, max_bytes=MB, total_timeout=1.0) as f:
        started = time.monotonic()
        result = f.fetch(server.url + "/")
    # Not before the deadline, and long before the server's 10 s are over (a deadline that did
    # not hold would wait for those): a margin of twice the deadline, for a busy machine.
    assert 0.9 <= time.monotonic() - started < 3
    assert result.error == "timeout after 1 s (whole fetch)"
    assert result.error_kind == "timeout" and result.retryable
    assert result.status == 200 and 0 < len(result.body) < 20


def _trickle_head(conn: socket.socket, server: RawServer) -> None:
    """A status line and then headers, one byte every 0.1 s, for as long as the test runs."""
    head = raw_head(Content_Type="text/html") + b"".join(
        f"X-Filler-{n}: {'y' * 60}\r\n".encode() for n in range(90)
    )
    for byte in head:
        if not server.alive():
            return
        conn.sendall(bytes([byte]))
        time.sleep(0.1)


@pytest.mark.parametrize("via", ["direct", "proxy"])
@pytest.mark.slow
def test_a_server_trickling_its_headers_hits_the_fetch_deadline(raw_server, via):
    # Each byte comes well inside the read timeout: only the whole-fetch deadline stops it.
    server = raw_server(_trickle_head)
    # Through a proxy, it is the proxy that trickles the head back.
    proxy = server.url if via == "proxy" else None
    url = server.url + "/" if via == "direct" else "http://example.invalid/"
    with Fetcher(timeout=0.5, max_bytes=MB, total_timeout=1.0) as f:
        started = time.monotonic()
        result = f.fetch(url, proxy=proxy)
        took = time.monotonic() - started
        # The connection was dropped, not handed back to the pool half-read.
        again = f.fetch(url, proxy=proxy)
    assert 0.9 <= took < 3, took  # the server trickles for 10 s; a margin for a busy machine
    assert (result.error, result.error_kind) == ("timeout after 1 s (whole fetch)", "timeout")
    assert result.retryable and result.status is None
    assert again.error == result.error
    assert len(server.heads) == 2


@pytest.mark.slow
def test_the_header_deadline_holds_in_a_forked_worker(raw_server):
    # RQ forks a work horse for each job: the watchdog thread of the parent is not there.
    server = raw_server(_trickle_head)
    with Fetcher(timeout=0.5, max_bytes=MB, total_timeout=1.0) as f:
        assert f.fetch(server.url + "/").error == "timeout after 1 s (whole fetch)"
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its own fetch was cut at the deadline
        ok = False
        try:
            with Fetcher(timeout=0.5, max_bytes=MB, total_timeout=1.0) as f:
                started = time.monotonic()
                result = f.fetch(server.url + "/")
                ok = result.error_kind == "timeout" and time.monotonic() - started < 3
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_silent_server_times_out(raw_server, fetcher):
    def play(conn: socket.socket, server: RawServer) -> None:
        while server.alive():
            time.sleep(0.05)

    server = raw_server(play)
    started = time.monotonic()
    result = fetcher.fetch(server.url + "/")
    # The server stays silent for 10 s: the 0.5 s timeout ended it, with a margin for a busy
    # machine.
    assert time.monotonic() - started < 3
    assert result.error == "timeout after 0.5 s (waiting for the response)"
    assert (result.status, result.error_kind, result.retryable) == (None, "timeout", True)


def test_body_that_stalls_times_out_and_keeps_what_came(raw_server, fetcher):
    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/html", Content_Length="1000") + b"<p>start")
        while server.alive():
            time.sleep(0.05)

    server = raw_server(play)
    result = fetcher.fetch(server.url + "/")
    assert result.error == "timeout after 0.5 s (reading the body)"
    assert result.status == 200 and result.body == b"<p>start" and result.links == []


def test_body_shorter_than_content_length_is_an_incomplete_body(raw_server, fetcher):
    page = b"<title>Cut</title><a href='/a'>a</a>"

    def play(conn: socket.socket, server: RawServer) -> None:
        conn.sendall(raw_head(Content_Type="text/html", Content_Length="5000") + page)

    server = raw_server(play)
    result = fetcher.fetch(server.url + "/")
    assert (result.error, result.error_kind) == ("incomplete body", "connection")
    assert result.status == 200 and result.body == page and result.retryable
    assert result.links == [] and result.title == ""


def test_server_hanging_up_without_a_response(raw_server, fetcher):
    server = raw_server(lambda conn, server: None)
    result = fetcher.fetch(server.url + "/")
    assert result.status is None and result.error_kind == "connection" and result.retryable
    assert "closed by the server" in result.error


def test_garbage_instead_of_http_is_a_connection_error(raw_server, fetcher):
    server = raw_server(lambda conn, server: conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"))
    result = fetcher.fetch(server.url + "/")
    assert result.status is None and result.error_kind == "connection"


def test_refused_port(fetcher):
    result = fetcher.fetch(f"http://127.0.0.1:{closed_port()}/")
    assert (result.status, result.error, result.error_kind) == (
        None,
        "connection refused",
        "refused",
    )
    assert result.retryable


def test_dns_failure(fetcher):
    result = fetcher.fetch("http://nosuch.invalid/page")
    assert result.error == "DNS lookup failed for nosuch.invalid"
    assert result.error_kind == "dns" and not result.retryable


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/", "not an http(s) URL"),
        ("/relative", "not an http(s) URL"),
        ("http://", "has no host"),
        ("http://[::1/x", "has a malformed IPv6 address"),
        ("", "not an http(s) URL"),
    ],
)
def test_invalid_url_is_reported_not_raised(fetcher, url, why):
    result = fetcher.fetch(url)
    assert result.error_kind == "invalid" and result.status is None
    assert result.error == f"{why}: {url!r}"


# -- content ---------------------------------------------------------------------------------


def test_non_html_is_not_parsed(make_site, fetcher):
    body = '{"html": "<title>No</title><a href=\'/x\'>x</a>"}'
    site = make_site(lambda r: Response(body=body, content_type="application/json"))
    result = fetcher.fetch(site.url + "/")
    assert result.status == 200 and result.body == body.encode()
    assert result.title == "" and result.links == []


def test_binary_content_never_crashes(make_site, fetcher):
    noise = random.Random(7).randbytes(200_000)
    site = make_site(
        lambda r: Response(body=noise, content_type="text/html" if r.path == "/h" else "image/png")
    )
    for path in ("/h", "/p"):
        result = fetcher.fetch(site.url + path)
        assert result.status == 200 and result.body == noise and result.error == ""


def test_windows_1251_page_with_meta_charset(make_site, fetcher):
    page = '<meta charset="windows-1251"><title>Новости дня</title><a href="/статья">a</a>'
    site = make_site(lambda r: Response(body=page.encode("cp1251"), content_type="text/html"))
    result = fetcher.fetch(site.url + "/")
    assert result.title == "Новости дня"
    assert result.links == [site.url + "/%D1%81%D1%82%D0%B0%D1%82%D1%8C%D1%8F"]


def test_shift_jis_page_with_charset_header(make_site, fetcher):
    page = "<title>東京の天気</title>".encode("shift_jis")
    site = make_site(lambda r: Response(body=page, content_type="text/html; charset=Shift_JIS"))
    assert fetcher.fetch(site.url + "/").title == "東京の天気"


# -- proxies ---------------------------------------------------------------------------------


def _forward_proxy(status: str = "200 OK") -> Callable[[socket.socket, RawServer], None]:
    def play(conn: socket.socket, server: RawServer) -> None:
        body = b"<title>via proxy</title>"
        conn.sendall(
            raw_head(status, Content_Type="text/html", Content_Length=str(len(body))) + body
        )

    return play


def test_proxy_is_used_with_its_credentials(raw_server, fetcher):
    proxy = raw_server(_forward_proxy())
    result = fetcher.fetch(
        "http://example.invalid/page?q=1", proxy=f"http://bob:s3cret@127.0.0.1:{proxy.port}"
    )
    assert result.status == 200 and result.title == "via proxy" and result.error == ""
    head = proxy.heads[0]
    assert head.startswith("GET http://example.invalid/page?q=1 HTTP/1.1\r\n")
    assert f"Proxy-Authorization: Basic {base64.b64encode(b'bob:s3cret').decode()}" in head


def test_proxy_asking_for_credentials_is_a_proxy_error(raw_server, fetcher):
    proxy = raw_server(_forward_proxy("407 Proxy Authentication Required"))
    result = fetcher.fetch("http://example.invalid/", proxy=f"http://127.0.0.1:{proxy.port}")
    assert result.error_kind == "proxy" and result.retryable
    assert "407" in result.error


def test_https_through_a_proxy_that_refuses_the_tunnel(raw_server, fetcher):
    proxy = raw_server(_forward_proxy("403 Forbidden"))
    result = fetcher.fetch("https://example.invalid/", proxy=f"http://127.0.0.1:{proxy.port}")
    assert proxy.heads[0].startswith("CONNECT example.invalid:443 HTTP/1.")
    assert result.status is None and result.error_kind == "proxy"
    assert "403" in result.error


def test_dead_proxy_is_a_proxy_error(fetcher):
    result = fetcher.fetch("http://example.invalid/", proxy=f"http://127.0.0.1:{closed_port()}")
    assert (result.error, result.error_kind) == ("proxy refused the connection", "proxy")


# -- POST, and GET without links -------------------------------------------------------------


def test_post_sends_its_body_and_headers_and_reads_at_most_max_bytes(make_site):
    # Connection: close, as the client hangs up on the rest of the answer.
    answer = Response(body=b"y" * 5000, content_type="text/plain", headers={"Connection": "close"})
    site = make_site(lambda r: answer)
    with Fetcher(timeout=10, max_bytes=1000, user_agent_mode="fixed", user_agent="Hook/1") as f:
        result = f.post(
            site.url + "/hook", body=b'{"a":1}', headers={"Content-Type": "application/json"}
        )
    assert (result.status, result.error) == (200, "")
    assert result.body == b"y" * 1000 and result.truncated
    assert result.text() == "y" * 1000
    [request] = site.log
    assert request.method == "POST" and request.body == b'{"a":1}'
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == "Hook/1" and request.headers["Accept"] == "*/*"


def test_a_post_answered_with_a_redirect_keeps_it_as_its_answer(make_site):
    elsewhere = make_site(pages_site({"/new": "<p>moved here</p>"}))
    moved = Response(status=307, headers={"Location": elsewhere.url + "/new"}, body="moved")
    site = make_site(pages_site({"/hook": moved}))
    with Fetcher(timeout=10, max_bytes=1000) as f:
        result = f.post(site.url + "/hook", body=b"{}", headers={})
    assert (result.status, result.error, result.redirects) == (307, "", [])
    assert result.final_url == site.url + "/hook" and result.text() == "moved"
    assert elsewhere.log == []


def test_post_failures_are_reported_not_raised():
    with Fetcher(timeout=0.5, max_bytes=1000) as f:
        result = f.post(f"http://127.0.0.1:{closed_port()}/hook", body=b"{}", headers={})
    assert (result.status, result.error, result.error_kind) == (
        None,
        "connection refused",
        "refused",
    )
    assert result.refused and not result.timed_out


def test_get_reads_json_without_looking_for_links(make_site):
    page = '<title>t</title><a href="/x">x</a>'
    site = make_site(lambda r: Response(body='{"origin": "1.2.3.4"}' if r.path == "/j" else page))
    with Fetcher(timeout=0.5, max_bytes=MB) as f:
        assert f.get(site.url + "/j").json() == {"origin": "1.2.3.4"}
        html = f.get(site.url + "/h")
    assert html.status == 200 and (html.title, html.links) == ("", [])
    with pytest.raises(ValueError):
        html.json()


def test_a_stalling_proxy_is_a_timeout_and_a_dead_one_refused(raw_server, fetcher):
    def stall(conn: socket.socket, server: RawServer) -> None:
        while server.alive():
            time.sleep(0.05)

    stalling = raw_server(stall)
    slow = fetcher.get("http://example.invalid/", proxy=stalling.url)
    assert slow.timed_out and not slow.refused
    dead = fetcher.get("http://example.invalid/", proxy=f"http://127.0.0.1:{closed_port()}")
    assert dead.refused and not dead.timed_out


# -- robots.txt text -------------------------------------------------------------------------


def test_fetch_text_reads_leniently_and_reports_failures(make_site, fetcher):
    def handler(request: Request) -> Response:
        if request.path == "/robots.txt":
            return Response(body=b"\xef\xbb\xbfUser-agent: *\nDisallow: /\xff\n", content_type="")
        return Response(status=404)

    site = make_site(handler)
    status, text = fetcher.fetch_text(site.url + "/robots.txt")
    assert status == 200 and text == "User-agent: *\nDisallow: /\ufffd\n"
    assert fetcher.fetch_text(site.url + "/other")[0] == 404
    assert fetcher.fetch_text(f"http://127.0.0.1:{closed_port()}/robots.txt") == (None, "")


def test_a_responses_headers_are_copied_as_requests_copies_them():
    """session.case_insensitive makes at once the CaseInsensitiveDict requests makes of
    urllib3's headers one by one: each name as first written, repeated values joined, in
    order."""
    rng = random.Random(5)
    names = ["Set-Cookie", "set-cookie", "X-A", "x-a", "Content-Type", "Vary", "vary", "ETag"]
    for _ in range(500):
        headers = HTTPHeaderDict()
        for _ in range(rng.randint(0, 12)):
            headers.add(rng.choice(names), rng.choice(["", "1", "a=b; Path=/", "x, y", " z "]))
        ours, requests_own = case_insensitive(headers), CaseInsensitiveDict(headers)
        assert list(ours.items()) == list(requests_own.items()), headers
        assert list(ours.lower_items()) == list(requests_own.lower_items())
    plain = {"Content-Type": "text/html", "X-B": "2"}
    assert list(case_insensitive(plain).items()) == list(CaseInsensitiveDict(plain).items())


def test_a_fetchers_own_headers_are_prepared_as_requests_prepares_them():
    """PreparedHeaders gives each request the headers prepare_headers makes (names, values,
    order), its own copy; a User-Agent requests refuses is refused every time."""
    own = {"User-Agent": "python-requests", "Accept-Encoding": "gzip", "Accept": "*/*"}
    prepared = PreparedHeaders(own)
    for agent in [*USER_AGENTS, "x", "x", DEFAULT_USER_AGENT]:
        expected = requests.PreparedRequest()
        expected.prepare_headers({**own, "User-Agent": agent})
        ours = prepared.with_user_agent(agent)
        assert list(ours.items()) == list(expected.headers.items())
        ours["Cookie"] = "a=1"  # a request's own copy: the next one has none
        assert "Cookie" not in prepared.with_user_agent(agent)
    for _ in range(2):
        for agent in (" leading", "two\nlines", "ends\r"):
            with pytest.raises(requests.exceptions.InvalidHeader):
                prepared.with_user_agent(agent)
