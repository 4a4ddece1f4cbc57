"""A fetch's heads as text (crawlhub/http/wire.py): the request's Host as http.client writes it,
values that could break a head made harmless, and a bound on what one head keeps. That the text
is what went and came on the wire, byte for byte, is checked against a raw socket in
tests/integrations/test_warc_export.py."""

from __future__ import annotations

import pytest

from crawlhub.http.wire import MASK, MAX_HEAD_CHARS, Exchange, split


def exchange(url: str = "http://a.test/", *, sent=None, received=()) -> Exchange:
    return Exchange(
        method="GET",
        url=url,
        sent=sent or {},
        version="HTTP/1.1",
        status=200,
        reason="OK",
        received=tuple(received),
    )


@pytest.mark.parametrize(
    ("url", "line", "host"),
    [
        ("http://Example.test:8080/a", "GET /a HTTP/1.1", "example.test:8080"),
        ("http://example.test:80/a?", "GET /a HTTP/1.1", "example.test"),
        ("https://u:p@example.test:443/", "GET / HTTP/1.1", "example.test"),
        ("https://example.test:80/", "GET / HTTP/1.1", "example.test:80"),
        ("http://[::1]:80/x?y=1", "GET /x?y=1 HTTP/1.1", "[::1]"),
        ("http://[::1]:8080", "GET / HTTP/1.1", "[::1]:8080"),
    ],
)
def test_the_request_line_and_host_are_those_http_client_sends(url, line, host):
    head = exchange(url, sent={"Accept": "*/*"}).request_head()
    assert head == f"{line}\r\nHost: {host}\r\nAccept: */*\r\n\r\n"


def test_a_host_header_that_was_sent_is_kept_in_its_place():
    head = exchange(sent={"Accept": "*/*", "Host": "other.test"}).request_head()
    assert head == "GET / HTTP/1.1\r\nAccept: */*\r\nHost: other.test\r\n\r\n"


def test_values_keep_no_line_break_or_nul_and_secrets_are_masked():
    received = [("X-Folded", "a\r\n b"), ("X-Nul", "c\x00d"), ("Set-Cookie", "sid=1")]
    head = exchange(received=received).response_head(secret=frozenset({"set-cookie"}))
    assert head == (f"HTTP/1.1 200 OK\r\nX-Folded: a b\r\nX-Nul: cd\r\nSet-Cookie: {MASK}\r\n\r\n")


def test_a_head_keeps_what_fits_and_drops_the_headers_past_it():
    received = [(f"X-{n}", "v" * 1000) for n in range(100)]
    head = exchange(received=received).response_head()
    assert len(head) <= MAX_HEAD_CHARS + 4 and head.endswith("\r\n\r\n")
    kept = head.count("\r\nX-")
    assert 60 <= kept < 100, kept  # whole headers only, up to the bound
    assert f"X-{kept - 1}: " in head and f"X-{kept}: " not in head


def test_the_two_heads_split_apart_again():
    both = exchange(received=[("A", "1")]).text()
    request, response = split(both)
    assert request.startswith("GET / HTTP/1.1\r\n") and request.endswith("\r\n\r\n")
    assert response == "HTTP/1.1 200 OK\r\nA: 1\r\n\r\n"
    assert split("") == ("", "") and split(None) == ("", "")
