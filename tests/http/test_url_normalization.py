"""One reading of a URL (crawlhub/http/urls.py): the form the client sends, which every check
reads. The properties, on generated hostile authorities: requests and urllib3 send the normal
form unchanged and read the same host from it as urllib.parse does; and, on real sockets, the
host the guard saw is the host the socket reached."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
from hypothesis import event, given, settings
from hypothesis import strategies as st
from urllib3.util import parse_url

from crawlhub.http.client import Fetcher
from crawlhub.http.links import Resolver
from crawlhub.http.urls import URLError, normalize
from tests.support.fuzzing import PROPERTY

# -- examples ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("http://10.0.0.5:80\\@public.example/../secret", "http://10.0.0.5/secret"),
        ("http://a.example\\b.example/", "http://a.example/b.example/"),
        ("HTTP://Example.COM", "http://example.com/"),
        ("http://example.com./a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/%2e%2e/%2E/x", "http://example.com/x"),
        ("http://ex%41mple.com/", "http://example.com/"),
        ("http://bücher.example/ü?q=é", "http://xn--bcher-kva.example/%C3%BC?q=%C3%A9"),
        ("http://ｅｘａｍｐｌｅ．ｃｏｍ/", "http://example.com/"),
        ("http://127.1/", "http://127.0.0.1/"),
        ("http://0x7f.0.0.1/", "http://127.0.0.1/"),
        ("http://0177.0.0.01/", "http://127.0.0.1/"),
        ("http://2130706433/", "http://127.0.0.1/"),
        ("http://[::FFFF:127.0.0.1]:8080/", "http://[::ffff:7f00:1]:8080/"),
        ("https://example.com:443/x?", "https://example.com/x"),
        ("http://example.com:0080/#frag", "http://example.com/"),
        ("http://example.com/a b|c", None),  # a space: a paste gone wrong
        ("http://example.com/%zz%7e[x]", "http://example.com/%25zz~%5Bx%5D"),
        ("http://example.com?q", "http://example.com/?q"),
    ],
)
def test_urls_are_read_into_the_form_the_client_sends(url, normal):
    if normal is None:
        with pytest.raises(URLError):
            normalize(url)
    else:
        assert normalize(url) == normal


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://user@evil.example@good.example/", "has a user name or password before its host"),
        ("http://good.example%2F@evil.example/", "has a user name or password before its host"),
        ("http://1.2.3.4.5/", "looks like an IPv4 address but is not one"),
        ("http://256.0.0.1/", "looks like an IPv4 address but is not one"),
        ("http://0x1g.1/", "looks like an IPv4 address but is not one"),
        ("http://[fe80::1%25eth0]/", "has an IPv6 address with a zone"),
        ("http://[::1/", "has a malformed IPv6 address"),
        ("http://a<b.example/", "has a host that is not a valid name"),
        ("http://example.com:0/", "has a port that is not a number from 1 to 65535"),
        ("http://example.com:65536/", "has a port that is not a number from 1 to 65535"),
        ("http:\\\\example.com/", "is not an http(s) URL"),
        ("http:/example.com/", "is not an http(s) URL"),
        ("ftp://example.com/", "is not an http(s) URL"),
        ("http:///x", "has no host"),
        ("http://" + "a" * 64 + ".example/", "has a host that is not a valid name"),
    ],
)
def test_what_readers_would_disagree_on_is_refused_saying_why(url, why):
    with pytest.raises(URLError, match=why.replace("(", r"\(").replace(")", r"\)")):
        normalize(url)


# -- the property, on text -----------------------------------------------------------------------

# Pieces of hostile authorities: the tricks that made parsers disagree (backslash, "@", escapes,
# brackets, odd IPv4 forms, Unicode that maps to ASCII, dots and ports) among plain parts.
_PIECES = st.sampled_from(
    [
        "\\",
        "/",
        "@",
        ":",
        "%40",
        "%5C",
        "%2F",
        "%2e",
        "%2E",
        ".",
        "..",
        "#",
        "?",
        "[",
        "]",
        "127.0.0.1",
        "127.1",
        "0x7f.1",
        "0177.0.0.1",
        "2130706433",
        "10.0.0.5",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "localhost",
        "public.example",
        "EXAMPLE.com",
        "ｅｘ．ｃｏｍ",
        "１２７.0.0.1",
        "bücher",
        "xn--bcher-kva",
        ":80",
        ":8080",
        ":0",
        ":99999",
        "%00",
        "%",
        "%zz",
        "user:pw",
        "\u200b",
        "\uff0e",
        "\u3002",
        ";",
        "&",
        "~",
        "_",
        "-",
        "*",
        "'",
        "a",
        "0",
    ]
)
authorities = st.lists(_PIECES, min_size=1, max_size=8).map("".join)
paths = st.lists(
    st.sampled_from(["/", "\\", "..", ".", "%2e", "a", "é", "%41", "?", "#", "=", "&", "%"]),
    max_size=6,
).map("".join)
hostile_urls = st.builds(
    "{}{}{}".format, st.sampled_from(["http://", "https://", "HTTP://"]), authorities, paths
)


def host_of(normal: str) -> str:
    """The host of a normal URL, as netguard.check_url reads it."""
    authority = normal.partition("://")[2].partition("/")[0].partition("?")[0].rpartition("@")[2]
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    return authority.partition(":")[0]


@pytest.mark.slow
@settings(PROPERTY, max_examples=3000)
@given(hostile_urls, st.booleans())
def test_every_reader_reads_the_normal_form_alike(url, userinfo):
    try:
        normal = normalize(url, userinfo=userinfo)
    except URLError as refused:
        assert str(refused) and len(str(refused)) < 100
        return
    assert normalize(normal, userinfo=userinfo) == normal
    assert normal.isascii() and "\\" not in normal and "#" not in normal
    assert normal.partition("://")[2].partition("/")[0].count("@") <= int(userinfo)
    prepared = requests.PreparedRequest()
    prepared.prepare_url(normal, None)
    assert prepared.url == normal  # sent as it is
    host = host_of(normal)
    assert (parse_url(normal).host or "").strip("[]") == host
    assert (urlsplit(normal).hostname or "") == host.lower()


# -- the property, on sockets ------------------------------------------------------------------


class Listeners:
    """One port on 127.0.0.1, 127.0.0.2 and 127.0.0.3, recording which address each connection
    came to; every request answered with an empty 200 and the connection closed."""

    ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")

    def __init__(self) -> None:
        self.reached: list[str] = []
        self.sockets = []
        port = 0
        for address in self.ADDRESSES:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            port = sock.getsockname()[1]
            sock.listen(64)
            sock.settimeout(0.2)
            self.sockets.append(sock)
        self.port = port
        self.running = True
        self.threads = [threading.Thread(target=self._serve, args=(s,)) for s in self.sockets]
        for thread in self.threads:
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        while self.running:
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                self.reached.append(conn.getsockname()[0])
                conn.settimeout(1)
                try:
                    conn.recv(65536)
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                except OSError:
                    pass

    def close(self) -> None:
        self.running = False
        for thread in self.threads:
            thread.join()
        for sock in self.sockets:
            sock.close()


@pytest.fixture(scope="module")
def listeners() -> Iterator[Listeners]:
    server = Listeners()
    try:
        yield server
    finally:
        server.close()


# The host part: loopback addresses in every spelling, and decoys that need no DNS server.
_TRUE_HOSTS = st.sampled_from(
    [
        "127.0.0.1",
        "127.1",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "2130706433",
        "127.0.0.1.",
        "%31%32%37.1",
        "１２７.0.0.1",
        "localhost",
        "LOCALHOST",
        "ｌｏｃａｌｈｏｓｔ",
        "127.0.0.2",
        "127.2",
        "0x7f.0.0.2",
        "2130706434",
        "127.0.0.3",
        "0177.0.0.03",
        "[::ffff:127.0.0.2]",
        "[::ffff:7f00:3]",
    ]
)
_TRICKS = st.sampled_from(["\\@", "\\", "@", "%40", "%5C@", "/..\\", "\\..\\", "#@", "?@", ""])


@pytest.fixture
def guard_on(settings, listeners):
    """The guard on, with only 127.0.0.1 on the listeners' port playing a public address."""
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    settings.CRAWLHUB_PRIVATE_NETWORKS_ALLOWED = [f"127.0.0.1:{listeners.port}"]
    return settings


@pytest.mark.slow
@settings(PROPERTY, max_examples=400)
@given(first=_TRUE_HOSTS, trick=_TRICKS, second=_TRUE_HOSTS, path=paths)
def test_the_host_the_guard_saw_is_the_host_the_socket_reached(
    listeners, guard_on, first, trick, second, path
):
    port = listeners.port
    url = f"http://{first}:{port}{trick}{second}:{port}/{path}"
    try:  # what the guard (netguard.check_url) and the client read
        seen = host_of(normalize(url, userinfo=True))
    except URLError:
        seen = None
    listeners.reached.clear()
    with Fetcher(timeout=10, max_bytes=1000, max_redirects=0) as f:
        result = f.get(url)
    reached = list(listeners.reached)
    event("refused" if seen is None else "reached" if reached else "blocked")
    if seen is None:
        assert reached == [] and result.error_kind == "invalid"
    elif reached:
        # The one address the guard lets through, and the one the guard was told of.
        assert reached == ["127.0.0.1"] and "127.0.0.1" in addresses(seen)
        assert result.status == 200
    else:
        assert result.error_kind == "blocked", result.error


def addresses(host: str) -> set[str]:
    """What `host` is, or resolves to, as IPv4 text where it is IPv4 (mapped or not)."""
    try:
        found = {ipaddress.ip_address(host)}
    except ValueError:
        found = {ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(host, None)}
    return {str(getattr(ip, "ipv4_mapped", None) or ip) for ip in found}


# -- links take a shortcut to the same normal form ----------------------------------------------

bases = st.sampled_from(
    [
        "http://example.com/dir/page.html",
        "https://example.com:8443/a/b?x=1",
        "http://127.0.0.1:8000/",
        "http://Example.com/",
        "http://example.com:80/d/",
        "http://[::1]:81/x",
    ]
)
hrefs = st.lists(
    st.sampled_from(
        ["/", "//", "a", "..", ".", "%2e", "?", "q=1", "é", "%41", "\\", ":", "@", "~"]
    ),
    max_size=8,
).map("".join)


@pytest.mark.slow
@settings(PROPERTY, max_examples=2000)
@given(bases, hrefs)
def test_a_link_resolves_to_the_normal_form_of_its_url(base, href):
    resolver = Resolver(base)
    slow = Resolver(base)
    slow.normal_origin = False  # every link through urljoin-like joining and normalize()
    assert resolver.absolute(href) == slow.absolute(href)
    if (found := resolver.absolute(href)) is not None:
        assert normalize(found) == found
