"""A real SOCKS5 server on loopback for tests (RFC 1928, user/password auth of RFC 1929).

    with SocksServer(auth=("u", "p")) as socks:
        requests.get(site.url, proxies={"http": socks.url_with_auth})
        socks.relays  # every CONNECT it relayed: client, target as asked, upstream address

It takes CONNECT only (what an HTTP client through a SOCKS proxy sends), to an IPv4 address, an
IPv6 address or a domain name (which it resolves itself: that is socks5h), and answers each
failure with its SOCKS reply code. `relays` logs every CONNECT, with the HTTP request line that
went through it when the client spoke plain HTTP, so a test can tell which pages came through;
`refused_auth` counts the user/password logins it turned down.
"""

from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import socketserver
import struct
import threading
import time
from dataclasses import dataclass, field

VERSION = 5
NO_AUTH, USER_PASSWORD, NO_ACCEPTABLE = 0x00, 0x02, 0xFF
CONNECT = 0x01
IPV4, DOMAIN, IPV6 = 0x01, 0x03, 0x04
# Reply codes.
SUCCEEDED, GENERAL_FAILURE, HOST_UNREACHABLE, REFUSED = 0x00, 0x01, 0x04, 0x05
COMMAND_NOT_SUPPORTED, ADDRESS_NOT_SUPPORTED = 0x07, 0x08


@dataclass
class Relay:
    client: tuple[str, int]  # who asked the SOCKS server
    kind: str  # how the target was named: "ipv4", "ipv6" or "domain"
    target: tuple[str, int]  # as the client named it
    upstream: tuple[str, int] | None  # the server's own end of the connection to the target
    user: str  # who logged in ("" without auth)
    reply: int  # the SOCKS reply code sent
    at: float
    requests: list[str] = field(default_factory=list)  # HTTP request lines relayed, in order


class SocksServer:
    def __init__(self, *, auth: tuple[str, str] | None = None, timeout: float = 10.0) -> None:
        self.auth, self.timeout = auth, timeout
        self.relays: list[Relay] = []
        self.refused_auth = 0
        self._lock = threading.Lock()
        server = self

        class _Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(server.timeout)
                with contextlib.suppress(OSError, ValueError):  # a client that went away
                    server._serve(self.request, self.client_address)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- what tests use ----------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, scheme: str = "socks5") -> str:
        return f"{scheme}://{self.address}"

    def url_with_auth(self, scheme: str = "socks5", password: str | None = None) -> str:
        user, right = self.auth or ("", "")
        return f"{scheme}://{user}:{right if password is None else password}@{self.address}"

    def requests_relayed(self) -> list[str]:
        """Every HTTP request line relayed, e.g. "GET /a HTTP/1.1", in the order they came."""
        with self._lock:
            return [line for relay in self.relays for line in relay.requests]

    def start(self) -> SocksServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> SocksServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the protocol ------------------------------------------------------------------------

    def _serve(self, conn: socket.socket, client: tuple[str, int]) -> None:
        version, count = _read(conn, 2)
        if version != VERSION:
            return
        methods = set(_read(conn, count))
        wanted = USER_PASSWORD if self.auth else NO_AUTH
        if wanted not in methods:
            conn.sendall(bytes([VERSION, NO_ACCEPTABLE]))
            return
        conn.sendall(bytes([VERSION, wanted]))
        user = self._log_in(conn) if self.auth else ""
        if user is None:
            return
        version, command, _, kind = _read(conn, 4)
        host, named = _read_address(conn, kind)
        (port,) = struct.unpack("!H", _read(conn, 2))
        relay = Relay(client, named, (host, port), None, user, SUCCEEDED, time.time())
        with self._lock:
            self.relays.append(relay)
        if command != CONNECT:
            return self._reply(conn, relay, COMMAND_NOT_SUPPORTED)
        try:
            upstream = socket.create_connection((host, port), timeout=self.timeout)
        except ConnectionRefusedError:
            return self._reply(conn, relay, REFUSED)
        except OSError:
            return self._reply(conn, relay, HOST_UNREACHABLE)
        relay.upstream = upstream.getsockname()[:2]
        self._reply(conn, relay, SUCCEEDED, bound=relay.upstream)
        _pipe(conn, upstream, self.timeout, relay)

    def _log_in(self, conn: socket.socket) -> str | None:
        """RFC 1929: the user name when it and the password are right; None after a refusal."""
        _, size = _read(conn, 2)
        user = _read(conn, size).decode("utf-8", "replace")
        (size,) = _read(conn, 1)
        password = _read(conn, size).decode("utf-8", "replace")
        if (user, password) == self.auth:
            conn.sendall(b"\x01\x00")
            return user
        with self._lock:
            self.refused_auth += 1
        conn.sendall(b"\x01\x01")
        return None

    def _reply(
        self,
        conn: socket.socket,
        relay: Relay,
        code: int,
        bound: tuple[str, int] = ("0.0.0.0", 0),
    ) -> None:
        relay.reply = code
        address = ipaddress.ip_address(bound[0])
        kind = IPV4 if address.version == 4 else IPV6
        conn.sendall(bytes([VERSION, code, 0, kind]) + address.packed + struct.pack("!H", bound[1]))


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ValueError("the client closed the connection mid-handshake")
        data += chunk
    return data


def _read_address(conn: socket.socket, kind: int) -> tuple[str, str]:
    if kind == IPV4:
        return str(ipaddress.IPv4Address(_read(conn, 4))), "ipv4"
    if kind == IPV6:
        return str(ipaddress.IPv6Address(_read(conn, 16))), "ipv6"
    if kind == DOMAIN:
        (size,) = _read(conn, 1)
        return _read(conn, size).decode("idna"), "domain"
    raise ValueError(f"unknown address type {kind}")


def _pipe(a: socket.socket, b: socket.socket, timeout: float, relay: Relay) -> None:
    """Relay bytes both ways until either side closes or nothing moves for `timeout`, noting
    the request line of each plain HTTP request the client sends."""
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [], timeout)
            if not ready:
                return
            for src in ready:
                data = src.recv(65536)
                if not data:
                    return
                if src is a:
                    relay.requests += _request_lines(data)
                (b if src is a else a).sendall(data)
    except OSError:
        return
    finally:
        b.close()


def _request_lines(data: bytes) -> list[str]:
    """The request lines that start HTTP requests in a chunk the client sent (a keep-alive
    connection carries several requests, each beginning a chunk of its own)."""
    line = data.split(b"\r\n", 1)[0].decode("latin-1")
    method = line.split(" ", 1)[0]
    is_http = method in ("GET", "HEAD", "POST") and line.endswith(("HTTP/1.1", "HTTP/1.0"))
    return [line] if is_http else []
