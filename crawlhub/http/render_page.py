"""What crawlhub runs inside a page it renders (rendering.py): the script every document of the
page runs first, which takes WebRTC away, and the bounded read of the rendered DOM.

WebRTC. Every request a page's scripts make goes through render_routing.Router, by the rules of a
fetch; WebRTC does not: Chromium opens its sockets itself (STUN over UDP, TURN over TCP, to any
address a script names), past the private-network guard. Chromium is started with non-proxied
UDP disabled (rendering.CHROMIUM_ARGS), which leaves TURN over TCP; so no document has
RTCPeerConnection (nor the constructors that come with it), the frames a page makes included
(the script runs in each new document, before the page's own).

Settling. A page is read once its wait selector is in the DOM, or once its network is idle;
at the deadline the DOM is taken as it is (a page that polls forever never settles).

The DOM. page.content() would serialize the DOM in the page and carry it whole, however big, to
Playwright's driver and on to this process. read_dom() measures first, in the page: a walk of the
DOM that stops as soon as its size passes max_bytes, so a DOM of hundreds of megabytes costs the
walk of max_bytes of it; only a DOM within max_bytes is serialized and read.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

_WEBRTC = (
    "RTCPeerConnection",
    "webkitRTCPeerConnection",
    "RTCDataChannel",
    "RTCIceCandidate",
    "RTCSessionDescription",
    "RTCRtpSender",
    "RTCRtpReceiver",
    "RTCRtpTransceiver",
    "RTCIceTransport",
    "RTCDtlsTransport",
    "RTCSctpTransport",
    "RTCCertificate",
    "RTCDTMFSender",
    "RTCPeerConnectionIceEvent",
    "RTCPeerConnectionIceErrorEvent",
    "RTCTrackEvent",
    "RTCDataChannelEvent",
    "RTCStatsReport",
)

NO_WEBRTC = (
    "(() => { for (const name of "
    + repr(list(_WEBRTC)).replace("'", '"')
    + ") { try { delete globalThis[name]; } catch (error) {} } })();"
)

# In the page: null when the DOM passes `limit` (UTF-16 code units, each at least a byte of
# UTF-8), walked node by node and stopped there; else its serialization (page.content()'s).
# Walked, a node counts at least what it adds to the serialization: a tag's name twice and its
# brackets, each attribute's name and value, each text's, comment's or CDATA's characters.
_READ_DOM = """(limit) => {
  let size = 0;
  const walker = document.createTreeWalker(document, NodeFilter.SHOW_ALL);
  for (let node = walker.currentNode; node !== null && size <= limit; node = walker.nextNode()) {
    if (node.nodeType === Node.ELEMENT_NODE) {
      size += 2 * node.localName.length + 5;
      for (const attribute of node.attributes) {
        size += attribute.name.length + attribute.value.length + 4;
      }
    } else if (typeof node.data === 'string') {
      size += node.data.length;
    }
  }
  if (size > limit) return {size, html: null};
  let html = document.doctype ? new XMLSerializer().serializeToString(document.doctype) : '';
  if (document.documentElement) html += document.documentElement.outerHTML;
  return html.length > limit ? {size: html.length, html: null} : {size: html.length, html};
}"""


@dataclass(frozen=True)
class DomRead:
    html: str | None  # None: the DOM is over the limit, and was not read
    size: int  # its size in characters; when over the limit, at least this


async def read_dom(page: Any, *, max_bytes: int) -> DomRead:
    """The page's DOM as HTML (page.content()), unless it is over max_bytes: then only that it
    is, and how much it is at least. Serialized within max_bytes characters, the HTML may still
    pass max_bytes in UTF-8 (three times at most): the caller cuts it as it cuts a fetch."""
    found = await page.evaluate(_READ_DOM, max_bytes)
    return DomRead(html=found["html"], size=int(found["size"]))


async def settle(page: Any, *, wait_selector: str, deadline: float) -> None:
    """Wait for `wait_selector`, or for the network to settle, until `deadline`
    (time.monotonic()); at the deadline the DOM is taken as it is."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        if wait_selector:
            await page.wait_for_selector(wait_selector, state="attached", timeout=ms_left(deadline))
        else:
            await page.wait_for_load_state("networkidle", timeout=ms_left(deadline))


def ms_left(deadline: float) -> float:
    """Milliseconds to `deadline` (time.monotonic()), for Playwright's timeouts: 1 at least."""
    return max(1.0, (deadline - time.monotonic()) * 1000)
