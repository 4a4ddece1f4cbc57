"""A real forward HTTP proxy on loopback for tests, plus a refused port and a stalling proxy.

    with ForwardProxy(auth=("u", "p"), mode="elite", source_ip="127.0.0.2") as proxy:
        requests.get(site.url, proxies={"http": proxy.url_with_auth})
        proxy.relays  # every connection it relayed: client, target, the upstream socket's address

It handles absolute-URI requests (GET, POST, HEAD) and CONNECT tunnels, optional Basic proxy
auth (407 otherwise), and a mode saying which headers it adds upstream:
"transparent" (X-Forwarded-For with the client's address, and Via), "anonymous" (Via only) or
"elite" (nothing). `source_ip` binds the upstream side to another loopback address, so a site
can tell the proxy's connection from a direct one (Linux routes all of 127/8 to lo).
"""

from __future__ import annotations

import base64
import http.client
import select
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from crawlhub.sample_site import QuietHTTPServer

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
}


@dataclass
class Relay:
    method: str
    target: str  # absolute URL, or host:port for CONNECT
    client: tuple[str, int]  # who asked the proxy
    upstream: tuple[str, int]  # the proxy's own end of the connection to the target
    at: float
    status: int = 0


class ForwardProxy:
    def __init__(
        self,
        *,
        auth: tuple[str, str] | None = None,
        mode: str = "elite",
        source_ip: str = "127.0.0.1",
        timeout: float = 10.0,
    ) -> None:
        if mode not in ("transparent", "anonymous", "elite"):
            raise ValueError(mode)
        self.auth, self.mode, self.source_ip, self.timeout = auth, mode, source_ip, timeout
        self.relays: list[Relay] = []
        self.refused_auth = 0
        self._lock = threading.Lock()
        proxy = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _authorized(self) -> bool:
                if proxy.auth is None:
                    return True
                expected = base64.b64encode(":".join(proxy.auth).encode()).decode()
                if self.headers.get("Proxy-Authorization", "") == f"Basic {expected}":
                    return True
                with proxy._lock:
                    proxy.refused_auth += 1
                self.send_response(407)
                self.send_header("Proxy-Authenticate", 'Basic realm="test proxy"')
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                return False

            def _upstream(self, host: str, port: int) -> socket.socket:
                return socket.create_connection(
                    (host, port), timeout=proxy.timeout, source_address=(proxy.source_ip, 0)
                )

            def _forward(self) -> None:
                self.close_connection = True
                if not self._authorized():
                    return
                parts = urlsplit(self.path)
                if parts.scheme != "http" or not parts.hostname:
                    self.send_error(400, "absolute http:// URL expected")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if proxy.mode == "transparent":
                    headers["X-Forwarded-For"] = self.client_address[0]
                if proxy.mode in ("transparent", "anonymous"):
                    headers["Via"] = "1.1 test-forward-proxy"
                headers["Connection"] = "close"
                try:
                    sock = self._upstream(parts.hostname, parts.port or 80)
                except OSError as exc:
                    self.send_error(502, f"upstream: {exc}")
                    return
                relay = Relay(
                    self.command,
                    self.path,
                    self.client_address,
                    sock.getsockname()[:2],
                    time.time(),
                )
                with proxy._lock:
                    proxy.relays.append(relay)
                conn = http.client.HTTPConnection(parts.hostname, parts.port or 80)
                conn.sock = sock
                path = parts.path or "/"
                if parts.query:
                    path += "?" + parts.query
                try:
                    conn.request(self.command, path, body=body, headers=headers)
                    response = conn.getresponse()
                    content = response.read()
                except OSError as exc:
                    self.send_error(502, f"upstream: {exc}")
                    return
                finally:
                    conn.close()
                relay.status = response.status
                self.send_response(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(content)

            do_GET = do_POST = do_HEAD = _forward

            def do_CONNECT(self) -> None:
                self.close_connection = True
                if not self._authorized():
                    return
                host, _, port = self.path.rpartition(":")
                try:
                    upstream = self._upstream(host.strip("[]"), int(port))
                except (OSError, ValueError) as exc:
                    self.send_error(502, f"upstream: {exc}")
                    return
                with proxy._lock:
                    proxy.relays.append(
                        Relay(
                            "CONNECT",
                            self.path,
                            self.client_address,
                            upstream.getsockname()[:2],
                            time.time(),
                            200,
                        )
                    )
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                _pipe(self.connection, upstream, proxy.timeout)

        self.server = QuietHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        # stop() waits for serve_forever to notice: every poll_interval (0.5 s by default).
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def url_with_auth(self) -> str:
        if not self.auth:
            return self.url
        return f"http://{self.auth[0]}:{self.auth[1]}@{self.address}"

    def upstream_addresses(self) -> set[tuple[str, int]]:
        with self._lock:
            return {r.upstream for r in self.relays}

    def start(self) -> ForwardProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ForwardProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _pipe(a: socket.socket, b: socket.socket, timeout: float) -> None:
    """Relay bytes both ways until either side closes or nothing moves for `timeout`."""
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [], timeout)
            if not ready:
                return
            for src in ready:
                data = src.recv(65536)
                if not data:
                    return
                (b if src is a else a).sendall(data)
    except OSError:
        return
    finally:
        b.close()


def refused_port() -> int:
    """A loopback port nobody listens on: connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class StallingProxy:
    """Accepts connections and never answers: a proxy that makes its clients time out."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted: list[socket.socket] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(conn)  # held open, never read or answered

    def start(self) -> StallingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        for conn in self.accepted:
            conn.close()
        self.listener.close()

    def __enter__(self) -> StallingProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
