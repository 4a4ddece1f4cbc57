"""Local servers that play the sites crawls fetch. Real sockets on 127.0.0.1, no mocks.

LocalSite: a site is a function from a Request to a Response; the server logs every request it
saw (path, headers, client address, time), so tests can assert what reached the site and when.
RawServer: a TCP server whose play(conn, server) misbehaves on purpose at the socket level;
streaming() is one that sends gigabytes, or a compression bomb, without holding them.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from crawlhub.sample_site import QuietHTTPServer


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    client: tuple[str, int]
    at: float
    body: bytes = b""


@dataclass
class Response:
    status: int = 200
    body: bytes | str = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/html; charset=utf-8"
    delay: float = 0.0  # seconds to wait before answering


Handler = Callable[[Request], Response]


def free_port() -> int:
    """A loopback port nobody listens on (yet): for a server to start on, or to be refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LocalSite:
    """A threaded HTTP server on a free loopback port serving `handler` (on `host`: any
    address of 127.0.0.0/8 is loopback, so 127.0.0.2 plays another machine's address)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1") -> None:
        self.handler = handler
        self.log: list[Request] = []
        self._lock = threading.Lock()
        site = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(
                    method=self.command,
                    path=self.path,
                    headers={k: v for k, v in self.headers.items()},
                    client=self.client_address,
                    at=time.monotonic(),
                    body=self.rfile.read(length) if length else b"",
                )
                with site._lock:
                    site.log.append(request)
                response = site.handler(request)
                if response.delay:
                    time.sleep(response.delay)
                body = response.body.encode() if isinstance(response.body, str) else response.body
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _serve

            def log_message(self, *args) -> None:
                pass

        self.server = QuietHTTPServer((host, 0), _Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        # stop() waits for serve_forever to notice: every poll_interval (0.5 s by default).
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def start(self) -> LocalSite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.log]

    def __enter__(self) -> LocalSite:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def pages_site(pages: dict[str, str | Response]) -> Handler:
    """A site from a dict of path -> HTML (or a full Response); anything else is a 404."""

    def handler(request: Request) -> Response:
        page = pages.get(request.path)
        if page is None:
            return Response(status=404, body="<h1>Not found</h1>")
        return page if isinstance(page, Response) else Response(body=page)

    return handler


class LoginSite:
    """A site behind a form login. GET /login is a form with a CSRF token in a hidden input
    (and a cookie that must come back with it); POST /login with the right user and password
    sets a session cookie and redirects to /home. Every other page needs a live session and
    redirects to /login?next=... without one; a session expires after `expire_after` requests.
    Pages are `pages` (path -> HTML); logged-in pages show <a id="logout">, the success mark."""

    USER, PASSWORD = "alice", "s3cret-pass-XYZ"

    def __init__(self, pages: dict[str, str], *, expire_after: int = 1_000_000) -> None:
        self.pages = pages
        self.expire_after = expire_after
        self.sessions: dict[str, int] = {}  # session id -> requests served
        self.logins = 0
        self.served = 0  # pages served to a live session
        self._lock = threading.Lock()
        self._n = 0

    def _cookie(self, request: Request, name: str) -> str:
        for part in request.headers.get("Cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return ""

    def __call__(self, request: Request) -> Response:
        if request.path.split("?")[0] == "/login":
            return self._login(request)
        sid = self._cookie(request, "sid")
        with self._lock:
            alive = sid in self.sessions and self.sessions[sid] < self.expire_after
            if alive:
                self.sessions[sid] += 1
                self.served += 1
        if not alive:
            return Response(status=302, headers={"Location": f"/login?next={request.path}"})
        page = self.pages.get(request.path)
        if page is None:
            return Response(status=404, body="<h1>Not found</h1>")
        return Response(body=f'<a id="logout" href="/logout">out</a>{page}')

    def _login(self, request: Request) -> Response:
        if request.method == "GET":
            return Response(
                body='<form method="post" action="/login"><input type="hidden" name="csrf" '
                'value="tok-123"><input name="username"><input type="password" name="password">'
                '<input type="submit" value="Log in"></form>',
                headers={"Set-Cookie": "csrftoken=tok-123; Path=/"},
            )
        form = dict(pair.split("=", 1) for pair in request.body.decode().split("&") if "=" in pair)
        good = (
            form.get("csrf") == "tok-123"
            and self._cookie(request, "csrftoken") == "tok-123"
            and form.get("username") == self.USER
            and form.get("password") == self.PASSWORD
        )
        if not good:
            return Response(status=200, body="<p>Wrong user or password</p>")
        with self._lock:
            self._n += 1
            self.logins += 1
            sid = f"session-{self._n}-value"
            self.sessions[sid] = 0
        return Response(
            status=302, headers={"Location": "/home", "Set-Cookie": f"sid={sid}; Path=/; HttpOnly"}
        )


def basic_auth_site(pages: dict[str, str], *, user: str, password: str) -> Handler:
    """pages_site behind HTTP basic auth: 401 without the right Authorization."""
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    inner = pages_site(pages)

    def handler(request: Request) -> Response:
        if request.headers.get("Authorization") != expected:
            return Response(status=401, headers={"WWW-Authenticate": 'Basic realm="test"'})
        return inner(request)

    return handler


class RawServer:
    """A TCP server on loopback whose `play(conn, server)` misbehaves on purpose.

    The request head is read first (kept in `heads`). Every thread stops when the test leaves the
    `with` block or after `lifetime` seconds, whichever comes first.
    """

    def __init__(self, play: Callable[[socket.socket, RawServer], None], lifetime: float = 5):
        self.play = play
        self.heads: list[str] = []
        self._stop = threading.Event()
        self._until = time.monotonic() + lifetime
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def alive(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._until

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        self._listener.close()

    def _accept(self) -> None:
        while self.alive():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(2)
            try:
                self.heads.append(_read_head(conn))
                self.play(conn, self)
            except OSError:
                pass  # the client hung up, which is what most of these tests make it do


def _read_head(conn: socket.socket) -> str:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode("latin-1")


def raw_head(status: str = "200 OK", **headers: str) -> bytes:
    """An HTTP/1.1 status line and headers (Content_Type= gives Content-Type:), for a RawServer."""
    lines = [f"HTTP/1.1 {status}"] + [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def streaming(
    size: int, *, content_encoding: str = ""
) -> Callable[[socket.socket, RawServer], None]:
    """A RawServer play answering with `size` bytes of HTML body, made while they are sent and
    never held whole: plain, or ("gzip", "deflate") a compression bomb that decodes to `size`
    bytes from about a thousandth of that on the wire. Until-close framing, as big files often
    come; the client hanging up ends it."""
    block = b"<p>" + b"a" * (64 * 1024 - 3)

    def plain() -> Iterator[bytes]:
        for start in range(0, size, len(block)):
            yield block[: size - start]

    def body() -> Iterator[bytes]:
        if not content_encoding:
            yield from plain()
            return
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}[content_encoding]
        packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
        for part in plain():
            if packed := packer.compress(part):
                yield packed
        yield packer.flush()

    def play(conn: socket.socket, server: RawServer) -> None:
        extra = {"Content_Encoding": content_encoding} if content_encoding else {}
        conn.sendall(raw_head(Content_Type="text/html", Connection="close", **extra))
        for part in body():
            if not server.alive():
                return
            conn.sendall(part)

    return play


def script_site(pages: int, *, api_delay: float = 0.0) -> Handler:
    """A site built by JavaScript: every page is the same empty shell, whose script asks the
    site's JSON API (fetch) for the page's title, text and links and writes them into the DOM.
    Without running the script, a page has no link and no content. api_delay slows each API
    answer (to keep pages open in a browser for a while)."""
    shell = (
        "<!doctype html><html><head><title>Loading</title></head><body><main id=app></main>"
        "<script>"
        "fetch('/api' + location.pathname).then(r => r.json()).then(data => {"
        " document.title = data.title;"
        " const app = document.getElementById('app');"
        " app.innerHTML = '<h1 class=title>' + data.title + '</h1><p class=text>' + data.text"
        "  + '</p>' + data.links.map(l => '<a href=\"' + l + '\">' + l + '</a>').join(' ');"
        " app.setAttribute('data-ready', 'yes');"
        "});"
        "</script></body></html>"
    )

    def handler(request: Request) -> Response:
        path = request.path.split("?")[0]
        if path.startswith("/api/"):
            page = path[len("/api") :]
            if page == "/":
                data = {"title": "Home", "text": "home", "links": [f"/p/{n}" for n in range(pages)]}
            elif page.startswith("/p/") and page[3:].isdigit() and int(page[3:]) < pages:
                n = int(page[3:])
                data = {"title": f"Item {n}", "text": f"text {n}", "links": ["/"]}
            else:
                return Response(status=404, body="{}", content_type="application/json")
            return Response(body=json.dumps(data), content_type="application/json", delay=api_delay)
        if path == "/" or (path.startswith("/p/") and path[3:].isdigit()):
            return Response(body=shell)
        return Response(status=404, body="<h1>Not found</h1>")

    return handler
