"""What a rendered page may not make the browser do: reach addresses over WebRTC (STUN over UDP,
TURN over TCP) past the private-network guard, or make the worker hold more than max_bytes of
any one answer its scripts ask for, or of its DOM."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import socket
import threading
import time
import tracemalloc

import pytest

from crawlhub.http import FetchResult, chromium, netguard, rendering
from tests.support.sites import raw_head

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("needs_chromium")]

MB = 1024 * 1024


@pytest.fixture(autouse=True)
def close_browsers():
    yield
    rendering.close_pool()


def handed(url: str, html: str) -> FetchResult:
    """A page as the client fetched it: the browser is handed this answer."""
    body = html.encode()
    return FetchResult(
        url=url,
        final_url=url,
        status=200,
        content_type="text/html; charset=utf-8",
        body=body,
        nbytes=len(body),
        truncated=False,
        elapsed_ms=0,
        redirects=[],
        error="",
        error_kind="",
        headers={"content-type": "text/html; charset=utf-8"},
    )


class Listeners:
    """A UDP socket and a TCP listener on loopback, noting every datagram and connection."""

    def __init__(self) -> None:
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp.settimeout(0.05)
        self.tcp.settimeout(0.05)
        self.udp_port = self.udp.getsockname()[1]
        self.tcp_port = self.tcp.getsockname()[1]
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                _, sender = self.udp.recvfrom(4096)
                self.seen.append(f"a UDP datagram from {sender}")
            except OSError:
                pass
            try:
                conn, peer = self.tcp.accept()
                conn.close()
                self.seen.append(f"a TCP connection from {peer}")
            except OSError:
                pass

    def __enter__(self) -> Listeners:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.udp.close()
        self.tcp.close()


# The page tries a peer connection in its own window and in a frame it makes (a fresh window),
# with a STUN server on the UDP socket and a TURN server over TCP on the TCP listener; its title
# says what it could do, and body[data-done] when it is through.
WEBRTC_PAGE = """<!doctype html><html><head><title>-</title></head><body><script>
const said = [];
function attempt(where, w) {
  try {
    const pc = new w.RTCPeerConnection({iceServers: [
      {urls: 'stun:127.0.0.1:UDP_PORT'},
      {urls: 'turn:127.0.0.1:TCP_PORT?transport=tcp', username: 'u', credential: 'p'}]});
    pc.createDataChannel('x');
    pc.createOffer().then(offer => pc.setLocalDescription(offer));
    said.push(where + ': made');
    return new Promise(done => {
      pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && done();
      setTimeout(done, 4000);
    });
  } catch (error) {
    said.push(where + ': ' + error.name);
    return Promise.resolve();
  }
}
const frame = document.createElement('iframe');
document.body.appendChild(frame);
Promise.all([attempt('page', window), attempt('frame', frame.contentWindow)]).then(() => {
  document.title = said.join(', ');
  document.body.setAttribute('data-done', 'yes');
});
</script></body></html>"""


def test_a_page_reaches_nothing_over_webrtc(settings):
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    with Listeners() as heard:
        page = WEBRTC_PAGE.replace("UDP_PORT", str(heard.udp_port))
        page = page.replace("TCP_PORT", str(heard.tcp_port))
        rendered = rendering.shared_pool().render(
            handed("http://example.com/", page),
            proxy=None,
            options=rendering.RenderOptions(
                timeout=15, max_bytes=10**6, wait_selector="body[data-done]"
            ),
        )
        time.sleep(1)  # what the page sent last is on its way
    assert rendered.error == ""
    assert rendered.title.startswith("page: "), rendered.title  # its script ran to the end
    assert heard.seen == [], f"the page ({rendered.title}) reached {heard.seen}"


def sent_and_counted(size: int):
    """A RawServer play sending `size` bytes of text, made as they go, counted in sent[0]; the
    client hanging up ends it."""
    sent = [0]
    block = b"a" * 65536

    def play(conn: socket.socket, server) -> None:
        conn.sendall(raw_head(Content_Type="text/plain", Connection="close"))
        while sent[0] < size and server.alive():
            conn.sendall(block)
            sent[0] += len(block)

    return play, sent


ASKS_FOR_BIG = """<!doctype html><html><head><title>-</title></head><body><script>
fetch('/big').then(answer => answer.text()).then(
  text => { document.title = 'got ' + text.length; },
  error => { document.title = 'refused: ' + error.name; },
).finally(() => document.body.setAttribute('data-done', 'yes'));
</script></body></html>"""


def test_a_script_answer_over_max_bytes_is_cut_off_as_it_streams(raw_server):
    play, sent = sent_and_counted(64 * MB)
    server = raw_server(play, lifetime=60)
    rendered = rendering.shared_pool().render(
        handed(server.url + "/", ASKS_FOR_BIG),
        proxy=None,
        options=rendering.RenderOptions(
            timeout=30, max_bytes=1 * MB, wait_selector="body[data-done]"
        ),
    )
    assert rendered.error == ""
    assert rendered.title == "refused: TypeError"  # the script got no answer, not a cut one
    # Read up to max_bytes, then hung up on: what the server got out is that and the sockets'
    # buffers, not the 64 MB it had to send.
    assert sent[0] < 16 * MB, f"{sent[0] / MB:.0f} MB sent"


# A DOM of 40 million characters, built by the page's script from a short string.
BIG_DOM = """<!doctype html><html><head><title>big</title></head><body><script>
const text = 'x'.repeat(40 * 1000 * 1000);
const p = document.createElement('p');
p.hidden = true;  // no layout: a big DOM, not a slow page
p.textContent = text;
document.body.appendChild(p);
document.body.setAttribute('data-done', 'yes');
</script><a href="/next">next</a></body></html>"""


def test_a_dom_over_max_bytes_is_refused_without_being_read():
    tracemalloc.start()
    try:
        rendered = rendering.shared_pool().render(
            handed("http://127.0.0.1:9/", BIG_DOM),
            proxy=None,
            options=rendering.RenderOptions(
                timeout=30, max_bytes=1 * MB, wait_selector="body[data-done]"
            ),
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rendered.truncated
    assert rendered.error.startswith(
        "the rendered page is over the size limit: its DOM is more than 1,048,576 bytes"
    ), rendered.error
    assert rendered.error_kind == "render"
    assert rendered.links == []
    # This process never held the DOM (page.content() would bring its 40 MB, several times).
    assert peak < 8 * MB, f"{peak / MB:.0f} MB allocated at the peak"


# -- a page's WebSockets -------------------------------------------------------------------
# The browser opens them itself (its requests go through crawlhub's client; a WebSocket cannot),
# so they go through a CONNECT proxy of the worker's own (crawlhub/http/guard_proxy.py) that
# resolves the name once and asks the guard about the very address it connects to.

WEBSOCKET_PAGE = """<!doctype html><html><head><title>-</title></head><body><script>
const ws = new WebSocket('ws://HOST:PORT/feed');
function said(what) {  // the first thing that happened
  if (document.body.hasAttribute('data-done')) return;
  document.title = what;
  document.body.setAttribute('data-done', 'yes');
}
ws.onmessage = (event) => said('got: ' + event.data);
ws.onerror = () => said('error');
ws.onclose = (event) => said('closed ' + event.code);
</script></body></html>"""


def render_websocket_page(host: str, port: int) -> FetchResult:
    page = WEBSOCKET_PAGE.replace("HOST", host).replace("PORT", str(port))
    return rendering.shared_pool().render(
        handed("http://example.com/", page),
        proxy=None,
        options=rendering.RenderOptions(
            timeout=15, max_bytes=10**6, wait_selector="body[data-done]"
        ),
    )


class WebSocketSite:
    """A WebSocket server on loopback: each connection gets the handshake's answer and one
    text frame, and is noted."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.05)
        self.port = self.server.getsockname()[1]
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.server.accept()
            except OSError:
                continue
            self.seen.append(f"a TCP connection from {peer}")  # noqa: PERF401

            with conn:
                conn.settimeout(5)
                head = b""
                while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
                    head += chunk
                keys = [
                    line.split(b":", 1)[1].strip()
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"sec-websocket-key:")
                ]
                if not keys:  # a connection that asked nothing (a browser's spare one)
                    continue
                key = keys[0]
                accept = base64.b64encode(
                    hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()
                )
                conn.sendall(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
                    + accept
                    + b"\r\n\r\n"
                    + b"\x81\x10hi from the site"
                )
                time.sleep(1)

    def __enter__(self) -> WebSocketSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.server.close()


def test_a_pages_websocket_to_an_allowed_address_goes_through(settings):
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    with WebSocketSite() as site:
        settings.CRAWLHUB_PRIVATE_NETWORKS_ALLOWED = [f"127.0.0.1:{site.port}"]
        rendered = render_websocket_page("127.0.0.1", site.port)
    assert rendered.title == "got: hi from the site", rendered.error
    assert len(site.seen) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_pages_websocket_reaches_no_private_address_even_when_dns_rebinds(
    settings, monkeypatch, host
):
    """The guard's own lookup answers a public address (what a rebinding DNS server does the
    first time); the connection's lookup is the machine's, where localhost is 127.0.0.1. For
    127.0.0.1 itself: Chromium sends loopback past a proxy unless told not to."""
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    monkeypatch.setattr(netguard, "_resolve", lambda name: [ipaddress.ip_address("8.8.8.8")])
    monkeypatch.setattr(netguard, "_refused", refused_but_for_the_rebound(netguard._refused))
    netguard._cache.clear()
    with WebSocketSite() as site:
        rendered = render_websocket_page(host, site.port)
        time.sleep(0.5)
    netguard._cache.clear()
    assert rendered.title in ("error", "closed 1006", "closed 1008"), rendered.title
    assert site.seen == [], f"the page's WebSocket reached {site.seen}"


def refused_but_for_the_rebound(refused):
    """The guard's answer, but 8.8.8.8 (the rebinding DNS server's first answer) is public
    whatever the machine's networks say."""
    return lambda address, port: "" if str(address) == "8.8.8.8" else refused(address, port)


def test_a_close_cut_short_leaves_no_driver_or_browser_running(monkeypatch):
    """A pool whose close does not end in time (a browser that would not close, on a loaded
    machine) still leaves neither Playwright's driver nor a browser behind in a process that
    goes on."""
    pool = rendering.shared_pool()
    page = handed("http://example.com/", "<title>one</title>")
    options = rendering.RenderOptions(timeout=30, max_bytes=MB)
    assert pool.render(page, proxy=None, options=options).title == "one"
    drivers, browsers = chromium.driver_processes(), pool.browser_pids()
    assert drivers and browsers

    async def never_closes() -> None:
        await asyncio.sleep(3600)

    monkeypatch.setattr(pool, "_close_all", never_closes)
    monkeypatch.setattr(rendering, "CLOSE_ALL_SECONDS", 0.5)
    pool.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        chromium.driver_processes() or any(_running(pid) for pid in browsers)
    ):
        time.sleep(0.1)
    assert not chromium.driver_processes()
    assert not [pid for pid in browsers if _running(pid)]


def _running(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("after", [0.05, 0.4, 1.0])
def test_a_page_given_up_while_its_browser_starts_leaves_nothing_running(after):
    """A worker told to stop while its first page's browser is still starting (give_up set on
    a loaded machine before the driver or Chromium is up) cancels the start mid-way: what was
    started by then is still ended by the pool's close."""
    pool = rendering.shared_pool()
    page = handed("http://example.com/", "<title>one</title>")
    options = rendering.RenderOptions(timeout=30, max_bytes=MB)
    give_up = threading.Event()
    threading.Timer(after, give_up.set).start()
    with pytest.raises(rendering.RenderingStopped):
        pool.render(page, proxy=None, options=options, give_up=give_up)
    seen_drivers = chromium.driver_processes()
    time.sleep(1.5)  # a start cancelled mid-way may still bring up its process
    seen_drivers |= chromium.driver_processes()
    seen_browsers = chromium.browser_processes()
    rendering.close_pool()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        chromium.driver_processes() or chromium.browser_processes()
    ):
        time.sleep(0.1)
    assert not chromium.driver_processes(), f"driver left (seen {seen_drivers})"
    assert not chromium.browser_processes(), f"browser left (seen {seen_browsers})"
