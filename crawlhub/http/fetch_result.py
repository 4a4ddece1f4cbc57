"""What a fetch gives back (FetchResult): the answer, or what went wrong and its kind, never an
exception; whether it is worth retrying, and when (Retry-After). Made by the client
(crawlhub/http/client.py) and by rendering (crawlhub/http/rendering.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from requests.utils import get_encoding_from_headers

from crawlhub.http import charsets
from crawlhub.http.errors import PROXY_REFUSED, PROXY_TIMED_OUT
from crawlhub.http.wire import Exchange

# "browser": the browser rendering the page died under it (rendering.py).
RETRYABLE_KINDS = frozenset({"timeout", "refused", "connection", "proxy", "browser"})
MAX_RETRY_AFTER = 3600.0


@dataclass
class FetchResult:
    url: str
    final_url: str  # the URL that answered last (the last redirect target, or `url`)
    status: int | None  # None when no response
    content_type: str  # the Content-Type header as sent, charset included
    body: bytes  # at most max_bytes, decoded from gzip/deflate
    nbytes: int  # body bytes received on the wire (compressed size when compressed)
    truncated: bool  # body hit max_bytes (not parsed then)
    elapsed_ms: int
    redirects: list[str]  # each redirect target followed, in order (the last is final_url)
    error: str  # "" when a full response came; else what went wrong, for people
    error_kind: str  # "" | "timeout" | "refused" | "dns" | "connection" | "redirects" | ...
    title: str = ""
    links: list[str] = field(default_factory=list)
    link_texts: list[str] = field(default_factory=list)  # each link's text, as links go
    headers: dict[str, str] = field(default_factory=dict)  # final response, lowercase names
    # What the last request sent: its headers (secrets masked, see wire.SECRET_HEADERS), and the
    # proxy it went through ("scheme://host:port", no credentials; set by whoever chose it).
    request_headers: dict[str, str] = field(default_factory=dict)
    proxy: str = ""
    # A redirect that was not followed (fetch(follow_redirects=False)): the absolute http(s)
    # URL its Location points at; "" for any other answer.
    redirect_to: str = ""
    # The last request and its answer as they went on the wire (wire.py); None when no answer
    # came, or when the body is not the one that came (a page rendered in a browser).
    exchange: Exchange | None = None

    @property
    def retryable(self) -> bool:
        if self.error_kind in RETRYABLE_KINDS:
            return True
        return self.status is not None and (self.status >= 500 or self.status == 429)

    @property
    def refused(self) -> bool:
        """Nothing listened: the server, or the proxy in between, refused the connection."""
        return self.error_kind == "refused" or (
            self.error_kind == "proxy" and self.error == PROXY_REFUSED
        )

    @property
    def timed_out(self) -> bool:
        """No answer in time, from the server or from the proxy in between."""
        return self.error_kind == "timeout" or (
            self.error_kind == "proxy" and self.error == PROXY_TIMED_OUT
        )

    @property
    def retry_after(self) -> float | None:
        """Seconds from a Retry-After header (delay or HTTP date), when present and <= 1 h."""
        value = self.headers.get("retry-after", "").strip()
        if not value:
            return None
        if value.isascii() and value.isdigit():  # "²" is a digit to isdigit(), not to float()
            seconds = float(value)
        else:
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = max(0.0, (when - datetime.now(UTC)).total_seconds())
        return seconds if seconds <= MAX_RETRY_AFTER else None

    def json(self) -> Any:
        """The body parsed as JSON; ValueError when it is not JSON."""
        return json.loads(self.body)

    def text(self) -> str:
        """The body in the charset the response declared (for text/* without one, HTTP/1.1's
        ISO-8859-1, as requests reads it; else, or when it names no charset, UTF-8),
        undecodable bytes replaced."""
        return charsets.decode(self.body, get_encoding_from_headers(self.headers))
