"""Response headers read without the email package (crawlhub/http/heads.py) give what
http.client's parse_headers gives, for every header block: the same message, field by field,
the same bytes left in the stream, the same exception on the same input. Blocks generated at
random (plain ones and every form the plain path leaves to http.client) and those the test
sites really send are read both ways."""

from __future__ import annotations

import http.client
import io
import random
import socket
import sys
from collections.abc import Callable

import pytest
import urllib3.exceptions
from urllib3.util.response import assert_header_parsing

from crawlhub.http import heads, session
from crawlhub.sample_site import SampleSite, serve
from tests.support.sites import LoginSite, Response, basic_auth_site, pages_site

MAXLINE = http.client._MAXLINE
MAXHEADERS = http.client._MAXHEADERS

# What nginx sends for the bench site's pages (bench/crawl_bench.py), status line aside.
NGINX_HEAD = (
    b"Server: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 13:19:11 GMT\r\n"
    b"Content-Type: text/html; charset=utf-8\r\nContent-Length: 4472\r\n"
    b"Last-Modified: Fri, 27 Nov 2026 13:19:11 GMT\r\nConnection: keep-alive\r\n"
    b'ETag: "6b09834f-1178"\r\nAccept-Ranges: bytes\r\n\r\n'
)
NGINX_REDIRECT_HEAD = (
    b"Server: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 13:19:11 GMT\r\n"
    b"Content-Type: text/html\r\nContent-Length: 169\r\n"
    b"Location: http://127.0.0.1:41463/p/49\r\nConnection: keep-alive\r\n\r\n"
)


def described(message: http.client.HTTPMessage) -> dict:
    """Everything a reader of the message can see (defects and the parts of a message/* or
    multipart/* payload by what they hold: they compare by identity), and what urllib3 makes
    of it."""
    names = set(message.keys()) | {"content-type", "set-cookie", "x-absent"}
    state = vars(message).copy()
    state["defects"] = [(type(d), str(d)) for d in message.defects]
    payload = message.get_payload()
    if isinstance(payload, list):
        state["_payload"] = payload = [described(part) for part in payload]
    try:
        assert_header_parsing(message)
        urllib3_says = None
    except urllib3.exceptions.HeaderParsingError as exc:
        urllib3_says = str(exc)
    return {
        "type": type(message),
        "state": state,
        "policy": message.policy,
        "items": message.items(),
        "raw_items": list(message.raw_items()),
        "keys": message.keys(),
        "values": message.values(),
        "get_all": {
            variant: message.get_all(variant)
            for name in names
            for variant in (name, name.lower(), name.upper())
        },
        "get": {name: message.get(name) for name in names},
        "as_string": message.as_string(),
        "payload": payload,
        "unixfrom": message.get_unixfrom(),
        "content_type": message.get_content_type(),
        "multipart": message.is_multipart(),
        "urllib3": urllib3_says,
    }


def read_by(parse: Callable, block: bytes) -> dict:
    """What parse(fp) makes of a stream holding `block`: its message, or what it raised; and
    what it left unread."""
    fp = io.BytesIO(block)
    try:
        outcome = described(parse(fp))
    except Exception as exc:  # compared with what http.client raises, whatever it is
        outcome = {"raised": (type(exc), exc.args)}
    return {**outcome, "left": fp.read()}


def email_parser_ran(call: Callable[[], object]) -> bool:
    """Whether any function of the email package's feed parser ran during call()."""
    ran = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("feedparser.py"):
            ran.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return bool(ran)


def assert_read_alike(block: bytes) -> str:
    """heads.parse_headers reads `block` as http.client does. By which path: "plain" (its own),
    "email" (http.client's, through the email package) or "raised" (a limit, either way)."""
    ours = read_by(heads.parse_headers, block)
    assert ours == read_by(http.client.parse_headers, block), block[:300]
    if "raised" in ours:
        return "raised"
    return "email" if email_parser_ran(lambda: heads.parse_headers(io.BytesIO(block))) else "plain"


NAME_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if c != ord(":"))
COMMON_NAMES = ["Set-Cookie", "set-cookie", "Content-Type", "Server", "X-A", "x-a", "Vary"]
VALUE_CHARS = (
    "abcXYZ019 \t;=,/\"'()<>@[]?{}~" + "".join(chr(c) for c in range(0x80, 0x100)) + "\x00\x7f"
)
# Each breaks the plain form: http.client's own path must read the block.
ODD_VALUE_CHARS = ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\r\r"]
ODD_LINES = [
    " folded continuation\r\n",
    "\tfolded\r\n",
    "no colon at all\r\n",
    ":no name\r\n",
    "From someone\r\n",
    "Name with space: v\r\n",
    "Na\xe9me: latin-1 name\r\n",
    "X-Bare-LF: v\n",
    "X-CR: v\r\r\n",
    "Content-Type: multipart/mixed; boundary=x\r\n",
    "Content-Type: Message/rfc822\r\n",
    "content-type:  message/delivery-status\r\n",
]


def random_value(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.1:
        return ""
    if kind < 0.2:
        return rng.choice([" ", "\t", "  \t "]) + "padded" + rng.choice(["", " ", "\t", " \t"])
    value = "".join(rng.choice(VALUE_CHARS) for _ in range(rng.randint(1, 40)))
    if kind > 0.95:
        spot = rng.randrange(len(value) + 1)
        value = value[:spot] + rng.choice(ODD_VALUE_CHARS) + value[spot:]
    return value


def random_name(rng: random.Random) -> str:
    if rng.random() < 0.4:
        return rng.choice(COMMON_NAMES)
    return "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(1, 12)))


def random_block(rng: random.Random) -> bytes:
    count = rng.choice([0, 1, 2, 3, 5, 8, 12, MAXHEADERS - 1, MAXHEADERS, MAXHEADERS + 1])
    lines = [f"{random_name(rng)}:{random_value(rng)}\r\n" for _ in range(count)]
    if rng.random() < 0.3:
        lines.insert(rng.randint(0, len(lines)), rng.choice(ODD_LINES))
    if rng.random() < 0.05:
        name = random_name(rng)
        room = MAXLINE - len(name) - 3  # "Name:" + value + CRLF is exactly MAXLINE
        lines.insert(0, f"{name}:{'v' * (room + rng.choice([-1, 0, 1]))}\r\n")
    end = rng.choices(["\r\n", "\n", "", "\r\nbody bytes"], weights=[85, 5, 5, 5])[0]
    return ("".join(lines) + end).encode("latin-1")


def test_generated_header_blocks_are_read_as_http_client_reads_them():
    rng = random.Random(20261127)
    by_path = {"plain": 0, "email": 0, "raised": 0}
    for _ in range(1500):
        by_path[assert_read_alike(random_block(rng))] += 1
    # Every path was taken, each many times.
    assert min(by_path.values()) > 100, by_path


@pytest.mark.parametrize(
    ("block", "path"),
    [
        (NGINX_HEAD, "plain"),
        (NGINX_REDIRECT_HEAD, "plain"),
        (b"\r\n", "plain"),  # a status line followed by no headers
        (b"", "email"),  # ... and by the end of the stream
        (b"\n", "email"),
        (b"X-Empty:\r\nX-Spaces:  \t \r\nX-Tab:\tv\t\r\n\r\n", "plain"),
        (b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nset-cookie: c=3\r\n\r\n", "plain"),
        (b"X-Latin: caf\xe9 \xff\x80\r\n\r\n", "plain"),
        (b"X-Folded: a\r\n b\r\n\tc\r\n\r\n", "email"),
        (b" Leading: space\r\nX: 1\r\n\r\n", "email"),
        (b"X: 1\r\nno colon\r\nY: 2\r\n\r\n", "email"),
        (b"X: 1\nY: 2\n\n", "email"),
        (b"X: a\rb\r\n\r\n", "email"),
        (b"X: 1\r\n\r\nthe body, not read", "plain"),
        (b"Content-Type: multipart/form-data; boundary=b\r\n\r\n", "email"),
        (b"Content-Type: text/plain\r\nContent-Type: message/rfc822\r\n\r\n", "email"),
        (b"X: 1\r\n" * MAXHEADERS + b"\r\n", "raised"),  # the empty line is one too many
        (b"X: 1\r\n" * (MAXHEADERS - 1) + b"\r\n", "plain"),
        (b"X: 1\r\n" * (MAXHEADERS + 1) + b"\r\n", "raised"),
        (b"X:" + b"v" * (MAXLINE - 4) + b"\r\n\r\n", "plain"),  # a line of exactly MAXLINE
        (b"X:" + b"v" * (MAXLINE - 3) + b"\r\n\r\n", "raised"),  # a byte over: LineTooLong
    ],
)
def test_chosen_header_blocks_are_read_as_http_client_reads_them(block, path):
    assert assert_read_alike(block) == path


def test_the_limits_raise_what_http_client_raises():
    with pytest.raises(http.client.HTTPException, match=f"got more than {MAXHEADERS} headers"):
        heads.parse_headers(io.BytesIO(b"X: 1\r\n" * MAXHEADERS + b"\r\n"))
    with pytest.raises(http.client.LineTooLong, match="header line"):
        heads.parse_headers(io.BytesIO(b"X:" + b"v" * MAXLINE + b"\r\n\r\n"))


def head_of(url: str, path: str) -> bytes:
    """The header block a site answers `path` with (its status line left out), from a socket."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
    head = data.partition(b"\r\n\r\n")[0] + b"\r\n\r\n"
    return head.partition(b"\r\n")[2]


def test_the_test_sites_answers_are_read_as_http_client_reads_them(make_site):
    pages = {
        "/": "<a href='/x'>x</a>",
        "/cookies": Response(body="c", headers={"Set-Cookie": "a=1; Path=/", "X-Caf": "caf\xe9"}),
        "/moved": Response(status=301, headers={"Location": "/"}),
        "/empty": Response(status=204),
        "/plain": Response(body="x" * 2000, content_type="text/plain"),
    }
    sites = [
        (make_site(pages_site(pages)).url, [*pages, "/absent"]),
        (make_site(LoginSite({"/home": "<p>home</p>"})).url, ["/login", "/home"]),
        (make_site(basic_auth_site({"/": "hi"}, user="u", password="p")).url, ["/"]),
    ]
    server, origin = serve(SampleSite(pages=50, seed=1))
    try:
        sites.append((origin, ["/", "/p/7", "/robots.txt", "/nope"]))
        for url, paths in sites:
            for path in paths:
                assert assert_read_alike(head_of(url, path)) == "plain", (url, path)
    finally:
        server.shutdown()
        server.server_close()


def test_every_connection_of_the_session_reads_heads_with_heads_response():
    """Direct, through an HTTP proxy or through SOCKS: the pools' connections all answer with
    heads.Response, whose begin() reads headers with heads.parse_headers."""
    pools = [*session._DIRECT_POOLS.values(), *session._PROXIED_POOLS.values()]
    pools += session._SOCKS_POOLS.values()
    for pool in pools:
        assert pool.ConnectionCls.response_class is heads.Response, pool
    assert heads.Response.begin.__globals__["parse_headers"] is heads.parse_headers
