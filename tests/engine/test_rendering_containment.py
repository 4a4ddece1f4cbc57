"""What a rendered page may not make the browser do: reach addresses over WebRTC (STUN over UDP,
TURN over TCP) past the private-network guard, or make the worker hold more than max_bytes of
any one answer its scripts ask for, or of its DOM."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import pytest

from crawlhub.http import FetchResult, rendering
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
        url=url, final_url=url, status=200, content_type="text/html; charset=utf-8", body=body,
        nbytes=len(body), truncated=False, elapsed_ms=0, redirects=[], error="", error_kind="",
        headers={"content-type": "text/html; charset=utf-8"},
    )  # fmt: skip


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
            handed("http://example.com/", page), proxy=None,
            options=rendering.RenderOptions(
                timeout=15, max_bytes=10**6, wait_selector="body[data-done]"
            ),
        )  # fmt: skip
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
        handed(server.url + "/", ASKS_FOR_BIG), proxy=None,
        options=rendering.RenderOptions(
            timeout=30, max_bytes=1 * MB, wait_selector="body[data-done]"
        ),
    )  # fmt: skip
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
            handed("http://127.0.0.1:9/", BIG_DOM), proxy=None,
            options=rendering.RenderOptions(
                timeout=30, max_bytes=1 * MB, wait_selector="body[data-done]"
            ),
        )  # fmt: skip
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
