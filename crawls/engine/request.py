"""A crawl's request and what became of it: the URL's identity (canonical form, fingerprint,
host) and the compact JSON the frontier's Lua scripts read.

Plain values with no Redis in them: crawls/engine/frontier.py stores them, the slice runner
fetches them, the services add them. The fast paths here (canonical URLs found without w3lib,
JSON built without json.dumps, hosts cached per origin) are checked against the slow ones by
tests/engine/test_canonical_urls.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from json.encoder import encode_basestring_ascii as _json_str
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url

from crawlhub.http.urls import url_origin

FINGERPRINT_VERSION = 1

OUTCOME_KINDS = ("done", "retry", "failed", "crashed")

# How a request came to be, besides a link or a seed (Request.via): a sitemap file to read, the
# root sitemap of a seed's site (its robots.txt's Sitemap: lines are read with it), a page
# a sitemap listed, or the target of a redirect (Request.redirects holds the chain).
VIA_SITEMAP = "m"
VIA_SITEMAP_ROOT = "M"
VIA_LISTED = "s"
VIA_REDIRECT = "r"
VIAS = ("", VIA_SITEMAP, VIA_SITEMAP_ROOT, VIA_LISTED, VIA_REDIRECT)
# What a request keeps of its earlier attempts' errors (Request.history).
HISTORY_ENTRIES = 5
HISTORY_CHARS = 200


# URLs that w3lib's canonicalize_url returns unchanged: http(s), a lowercase ASCII host name or
# IPv4 address, an optional port (1-65535, no leading zero), a path of characters it never escapes
# or unescapes (no "%", ";", "+", "&", no "//" or dot segments, checked apart), and an optional
# query of plain key=value pairs (checked apart to be in sorted order). Anything else goes
# through canonicalize_url; tests/engine/test_canonical_urls.py checks the two agree on a
# large corpus.
_PLAIN_URL = re.compile(
    r"https?://(?:[a-z0-9]+(?:-+[a-z0-9]+)*)(?:\.[a-z0-9]+(?:-+[a-z0-9]+)*)*(?::([1-9][0-9]{0,4}))?"
    r"(/[A-Za-z0-9\-._~!$'()*,=:@/]*)"
    r"(?:\?([A-Za-z0-9\-._~]+=[A-Za-z0-9\-._~]*(?:&[A-Za-z0-9\-._~]+=[A-Za-z0-9\-._~]*)*))?"
)


def _plain(url: str) -> bool:
    """True when canonicalize_url(url) == url, by the rules above (False: not known)."""
    match = _PLAIN_URL.fullmatch(url)
    if match is None:
        return False
    port, path, query = match.groups()
    if "/." in path or "//" in path or "xn--" in url or (port and int(port) > 65535):
        return False
    if query is not None and "&" in query:
        pairs = [pair.split("=", 1) for pair in query.split("&")]
        return pairs == sorted(pairs)
    return True


def canonicalize(url: str) -> str:
    """The URL dedup works on: fragment dropped, query sorted, escapes normalised."""
    # Most links are already canonical; w3lib takes ~10 us a URL to find that out.
    plain = url.partition("#")[0] if "#" in url else url
    if _plain(plain):
        return plain
    return canonicalize_url(url, keep_fragments=False)


# Links repeat a lot across pages (navigation, footers); the cache saves canonicalize + SHA-1.
@lru_cache(maxsize=65536)
def fingerprint(url: str, method: str = "GET", body: bytes = b"") -> int:
    """SHA-1 of method, canonical URL and body; the first 8 bytes as a signed 64-bit int, so
    that Redis stores it as an integer (intset) instead of a string."""
    data = f"{method.upper()} {canonicalize(url)}".encode() + body
    return int.from_bytes(hashlib.sha1(data).digest()[:8], "big", signed=True)


def request_host(url: str) -> str:
    """Lowercased hostname[:port] of url: the unit of politeness (Request.host)."""
    # The host depends only on what comes before the path: cached per "scheme://netloc".
    origin = url_origin(url)
    return _origin_host(origin) if origin else _split_host(url)


@lru_cache(maxsize=4096)
def _origin_host(origin: str) -> str:
    return _split_host(origin)


def _split_host(url: str) -> str:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal: keep it apart from the port
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port is not None else host


@dataclass(frozen=True)
class Request:
    url: str
    depth: int = 0
    referrer: str = ""
    attempts: int = 0  # fetched before, each time with a retryable failure
    priority: int = 0
    # Slices that failed to finish it: it could not be written, or the slice ended (its worker
    # died, it was stopped or ran out of time) while holding it; and the last error said.
    crashes: int = 0
    crash_error: str = ""
    via: str = ""  # one of VIAS: "" for a seed or a link
    # What went wrong in the attempts before this one (retries), oldest first, bounded.
    history: tuple[str, ...] = ()
    # A redirect's target (via VIA_REDIRECT): the URLs that redirected to it, the first one
    # first (the last one is its referrer). At most the Fetcher's max_redirects of them.
    redirects: tuple[str, ...] = ()

    @cached_property
    def fp(self) -> int:
        return fingerprint(self.url)

    @property
    def reads_sitemap(self) -> bool:
        """A sitemap file to read, not a page: what it lists goes to the frontier."""
        return self.via in (VIA_SITEMAP, VIA_SITEMAP_ROOT)

    @cached_property
    def host(self) -> str:
        """Lowercased hostname[:port]: the unit of politeness."""
        return request_host(self.url)

    def to_json(self) -> str:
        """Compact and deterministic. Carries fp (as a string: a double would round it) and host
        for the Lua scripts, which neither hash nor parse URLs; default fields are left out."""
        # What json.dumps(separators=(",", ":")) gives for {"f", "h", "u", "d", "p", "a", "r",
        # "v", "y", "c", "x", "e"} (in this order: the Lua scripts find "h" right after "f",
        # and add "x" at the end), built directly: this runs once per link.
        # tests/engine/test_canonical_urls.py checks it against json.dumps.
        return (
            f'{{"f":"{self.fp}","h":{_json_str(self.host)},"u":{_json_str(self.url)}'
            + json_tail(
                self.depth, self.priority, self.attempts, self.referrer,
                self.crashes, self.crash_error, self.via, self.history, self.redirects,
            )
        )  # fmt: skip

    @classmethod
    def from_json(cls, raw: str | bytes) -> Request:
        data = json.loads(raw)
        request = cls(
            url=data["u"],
            depth=data.get("d", 0),
            referrer=data.get("r", ""),
            attempts=data.get("a", 0),
            priority=data.get("p", 0),
            crashes=data.get("x", 0),
            crash_error=data.get("e", ""),
            via=data.get("v", ""),
            history=tuple(data.get("y", ())),
            redirects=tuple(data.get("c", ())),
        )
        # Keep the stored fp and host: the backup hash is keyed by that fp, so complete() must
        # use it even if fingerprinting changed since the request was queued.
        if "f" in data:
            request.__dict__["fp"] = int(data["f"])
        if "h" in data:
            request.__dict__["host"] = data["h"]
        return request


def with_history(history: tuple[str, ...], error: str) -> tuple[str, ...]:
    """history with one more attempt's error, keeping the last HISTORY_ENTRIES, each cut."""
    return (*history, error[:HISTORY_CHARS])[-HISTORY_ENTRIES:]


def json_tail(
    depth: int, priority: int, attempts: int, referrer: str, crashes: int = 0,
    crash_error: str = "", via: str = "", history: tuple[str, ...] = (),
    redirects: tuple[str, ...] = (),
) -> str:  # fmt: skip
    """The end of a request's JSON after "u" (see Request.to_json). The frontier builds a
    page's link JSON from it without a Request per link."""
    tail = f',"d":{depth}'
    if priority:
        tail += f',"p":{priority}'
    if attempts:
        tail += f',"a":{attempts}'
    if referrer:
        tail += f',"r":{_json_str(referrer)}'
    if via:
        tail += f',"v":{_json_str(via)}'
    if history:
        tail += ',"y":[' + ",".join(map(_json_str, history)) + "]"
    if redirects:
        tail += ',"c":[' + ",".join(map(_json_str, redirects)) + "]"
    if crashes:
        tail += f',"x":{crashes}'
    if crash_error:
        tail += f',"e":{_json_str(crash_error)}'
    return tail + "}"


@dataclass
class Outcome:
    """What a slice reports for one claimed request."""

    request: Request
    # One of OUTCOME_KINDS: "done" | "retry" | "failed" | "crashed" (could not be recorded:
    # queued again with one more crash, after retry_delay).
    kind: str
    status: int | None = None  # HTTP status of the final response, None when there was none
    nbytes: int = 0  # body bytes received
    # Absolute URLs already filtered by scope; the frontier applies depth, max_pages and dedup.
    links: list[str] = field(default_factory=list)
    retry_delay: float = 0.0  # seconds, for kind == "retry" or "crashed"
    error: str = ""  # what went wrong, for kind == "retry" (kept in history) or "crashed"
    # How the links came (Request.via of each); a sitemap's links keep its depth instead of
    # going one deeper, so that reading sitemaps costs no depth. VIA_REDIRECT: the one link is
    # where a redirect points, at the same depth, with the chain (Request.redirects) carried.
    links_via: str = ""
    # Sitemap files a sitemap (or a site's robots.txt) lists: read in turn (via VIA_SITEMAP).
    sitemaps: list[str] = field(default_factory=list)
