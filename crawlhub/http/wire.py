"""A fetch's exchange as it went on the wire: the request head as sent and the response head as
received, for the request and response records of a WARC file (crawls/archives.py).

The client keeps the pieces of each hop (FetchResult.exchange), which costs a small object; the
text is made only by a caller that keeps it (a crawl that keeps bodies, crawls/engine/rows.py):
- the request: its line (origin-form, HTTP/1.1, as urllib3 sends it to a site; through an
  HTTP proxy the line names the whole URL instead), the Host header that http.client adds
  first, then every header requests sent, in order, secrets masked (the same masked values as
  FetchResult.request_headers);
- the response: its status line as it came (version and reason phrase), then every header as
  http.client read it, in order, duplicates and case kept, the values of `secret` ones masked.
A header value keeps no line break (an obsolete folded line is unfolded) and no NUL, so that the
text is one head per blank line and any database stores it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from requests.structures import CaseInsensitiveDict

# Written for a secret value, here and everywhere else (FetchResult.request_headers, pages).
MASK = "••••••"
# Request headers whose values are never recorded (FetchResult.request_headers).
SECRET_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
# What may be kept of one head, whatever a server sends (http.client allows 100 lines of 64 KiB):
# past it, the remaining headers are left out.
MAX_HEAD_CHARS = 64 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}
SEPARATOR = "\r\n\r\n"


@dataclass(slots=True)  # one per fetch, made on the crawl's hot path: no frozen-init cost
class Exchange:
    method: str
    url: str  # as sent: requests' prepared URL (IDNA host, percent-encoded path)
    sent: Mapping[str, str]  # the headers requests sent, secrets masked
    version: str  # "HTTP/1.1"
    status: int
    reason: str
    received: tuple[tuple[str, str], ...]  # every response header, in order, as received

    def request_head(self) -> str:
        parts = urlsplit(self.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # As urllib3 and http.client write it: no user info, the host in lower case, no port
        # when it is the scheme's own.
        host = parts.netloc.rpartition("@")[2].lower()
        if parts.port is not None and parts.port == DEFAULT_PORTS.get(parts.scheme):
            host = host.rpartition(":")[0]
        headers = list(self.sent.items())
        if not any(name.lower() == "host" for name, _ in headers):
            headers.insert(0, ("Host", host))  # as http.client puts it, unless one was given
        return _head(f"{self.method} {target} HTTP/1.1", headers)

    def response_head(self, *, secret: frozenset[str] = frozenset()) -> str:
        return _head(
            f"{self.version} {self.status} {self.reason}".rstrip(),
            ((name, MASK if name.lower() in secret else value) for name, value in self.received),
        )

    def text(self, *, secret: frozenset[str] = frozenset()) -> str:
        """Both heads, each ending with its blank line: what Page.heads keeps."""
        return self.request_head() + self.response_head(secret=secret)


def _head(first_line: str, headers: Iterable[tuple[str, str]]) -> str:
    lines = [_clean(first_line)]
    size = len(lines[0])
    for name, value in headers:
        line = f"{_clean(name)}: {_clean(value)}"
        size += len(line) + 2
        if size > MAX_HEAD_CHARS:
            break
        lines.append(line)
    return "\r\n".join(lines) + SEPARATOR


def _clean(text: str) -> str:
    if "\r" in text or "\n" in text or "\x00" in text:
        text = " ".join(text.replace("\x00", "").split())
    return text


def split(heads: str) -> tuple[str, str]:
    """Page.heads as (request head, response head), each with its blank line; ("", "") for
    a page that kept none."""
    request, found, response = (heads or "").partition(SEPARATOR)
    if not found or not response:
        return "", ""
    return request + SEPARATOR, response


def recorded_headers(headers: Mapping[str, str], secret: frozenset[str]) -> dict[str, str]:
    """Headers a request sent, as they may be shown: the values of SECRET_HEADERS (and of
    `secret`) masked."""
    # A CaseInsensitiveDict's own (name, value) pairs: its items() looks each name up again.
    pairs = headers._store.values() if type(headers) is CaseInsensitiveDict else headers.items()
    hidden = SECRET_HEADERS | secret if secret else SECRET_HEADERS
    return {name: MASK if name.lower() in hidden else value for name, value in pairs}


def exchange_of(
    sent: requests.PreparedRequest, recorded: Mapping[str, str], response: requests.Response
) -> Exchange:
    """The hop as it went on the wire, its text left to whoever keeps it (Exchange.text)."""
    raw = response.raw
    # http.client's message has every header line in order (requests reads cookies from it
    # too); urllib3's own headers group repeated names.
    message = getattr(getattr(raw, "_original_response", None), "msg", None)
    return Exchange(
        method=sent.method or "GET",
        url=sent.url or "",
        sent=recorded,
        version=getattr(raw, "version_string", "HTTP/1.1"),
        status=response.status_code,
        reason=response.reason or "",
        received=tuple(message.raw_items() if message is not None else raw.headers.iteritems()),
    )
