"""A crawl's request and what became of it: the URL's identity (canonical form, fingerprint,
host) and the packed form the frontier's queue holds and its Lua scripts read.

Plain values with no Redis in them: crawls/engine/frontier.py stores them, the slice runner
fetches them, the services add them. The fast paths here (canonical URLs found without w3lib,
hosts cached per origin) are checked against the slow ones by
tests/engine/test_canonical_urls.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url

from crawlhub.http.urls import url_origin

FINGERPRINT_VERSION = 1

OUTCOME_KINDS = ("done", "retry", "failed", "crashed", "absent")

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
# IPv4 address, no "xn--" anywhere, an optional port (1-65535, no leading zero), a path of
# characters it never escapes or unescapes (no "%", ";", "+", "&") with no "//" or dot segment
# (no "/." at all), and an optional query of plain key=value pairs (checked apart to be in
# sorted order). Anything else goes through canonicalize_url; tests/engine/test_canonical_urls.py
# checks the two agree on a large corpus. All but the query's order is the expression's: a link
# new to the crawl is read by it in the slice's main thread, where Python's checks after it
# were a third of the link's fingerprint.
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_SEGMENT = r"[A-Za-z0-9\-_~!$'()*,=:@][A-Za-z0-9\-._~!$'()*,=:@]*"  # starts with no "."
_PLAIN_URL = re.compile(
    r"(?!.*xn--)https?://(?:[a-z0-9]+(?:-+[a-z0-9]+)*)(?:\.[a-z0-9]+(?:-+[a-z0-9]+)*)*"
    rf"(?::{_PORT})?/(?:{_SEGMENT}(?:/{_SEGMENT})*/?)?"
    r"(?:\?([A-Za-z0-9\-._~]+=[A-Za-z0-9\-._~]*(?:&[A-Za-z0-9\-._~]+=[A-Za-z0-9\-._~]*)*))?",
    re.DOTALL,
)


def _plain(url: str) -> bool:
    """True when canonicalize_url(url) == url, by the rules above (False: not known)."""
    match = _PLAIN_URL.fullmatch(url)
    if match is None:
        return False
    query = match[1]
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


_SIGNED_64 = struct.Struct(">q").unpack_from
_sha1 = hashlib.sha1


# Links repeat a lot across pages (navigation, footers); the cache saves canonicalize + SHA-1.
@lru_cache(maxsize=65536)
def fingerprint(url: str, method: str = "GET", body: bytes = b"") -> int:
    """SHA-1 of method, canonical URL and body; the first 8 bytes as a signed 64-bit int, so
    that Redis stores it as an integer (intset) instead of a string."""
    data = f"{method.upper()} {canonicalize(url)}".encode() + body
    return _SIGNED_64(_sha1(data).digest())[0]  # its first 8 bytes, big-endian


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

    def pack(self) -> str:
        """The request as a queue holds it (see "Packed requests" below): deterministic, and
        about half the bytes of a JSON object. unpack() gives it back, equal."""
        url, host, referrer = self.url, self.host, self.referrer
        prefix = _prefix(url)
        extra: dict[str, object] = {}
        url_field = url
        if "\n" in url:
            url_field, extra["u"] = "", url
        host_field = "" if url_field and prefix_host(url) == host else host or "/"
        if referrer[:1] == "/" or "\n" in referrer:
            referrer, extra["r"] = "", referrer
        elif prefix and referrer.startswith(prefix + "/"):
            referrer = referrer[len(prefix) :]
        return f"{self.fp}\n{host_field}\n{url_field}" + packed_tail(
            self.depth,
            self.priority,
            self.attempts,
            referrer,
            self.crashes,
            self.crash_error,
            self.via,
            self.history,
            self.redirects,
            extra,
        )

    @classmethod
    def unpack(cls, raw: str | bytes) -> Request:
        """The request pack() wrote (or, from a queue written before packing, to_json's JSON
        object): the only reading of a queued or claimed request."""
        text = raw.decode() if isinstance(raw, bytes) else raw
        if text[:1] == "{":
            return cls._from_json(json.loads(text))
        fp, host, url_field, depth, priority, referrer, *rest = text.split("\n", 6)
        data = json.loads(rest[0]) if rest else {}
        url = url_field or data.get("u", "")
        if referrer[:1] == "/":
            referrer = _prefix(url) + referrer
        request = cls(
            url=url,
            depth=int(depth),
            referrer=referrer or data.get("r", ""),
            attempts=data.get("a", 0),
            priority=int(priority) if priority else 0,
            crashes=data.get("x", 0),
            crash_error=data.get("e", ""),
            via=data.get("v", ""),
            history=tuple(data.get("y", ())),
            redirects=tuple(data.get("c", ())),
        )
        # Keep the stored fp and host: the backup hash is keyed by that fp, so complete() must
        # use it even if fingerprinting changed since the request was queued.
        request.__dict__["fp"] = int(fp)
        request.__dict__["host"] = "" if host == "/" else host or prefix_host(url_field)
        return request

    @classmethod
    def _from_json(cls, data: dict) -> Request:
        """A request queued as a JSON object, before requests were packed (an upgrade finds
        them in a crawl's Redis; Lua's host_of and fp_of read both forms)."""
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
        if "f" in data:
            request.__dict__["fp"] = int(data["f"])
        if "h" in data:
            request.__dict__["host"] = data["h"]
        return request


# Packed requests. A queued request is text of six fields and a line break between each:
#
#     fp \n host \n url \n depth \n priority \n referrer [\n extra]
#
# fp in decimal (the scripts key backup and leases by it); host "" when it is what stands
# between the URL's "://" and the "/" after it (nearly always), "/" for no host (a host never
# holds a "/"); priority "" for 0; referrer
# from its "/" on when it starts with the URL's prefix (the URL up to that "/"), as a link's
# on the same site does. `extra` is a JSON object, only when needed, of what is not default:
# "a" attempts, "v" via, "y" history, "c" redirects, "x" crashes, "e" crash error, and, for a
# field a line break would split (or a referrer that starts with "/"), "u" or "r" (its line
# left empty; a host never holds one: urlsplit drops them). JSON escapes line breaks. Lua
# reads the same fields (lua/_lib.lua: fp_of, host_of, enqueue, crashed), and complete.lua
# writes a page's links in this form.


def _prefix(url: str) -> str:
    """url up to the first "/" after its "://" ("" when there is none): what a packed request's
    host and relative referrer are read against, the same rule as lua/_lib.lua's."""
    start = url.find("://")
    if start < 0:
        return ""
    end = url.find("/", start + 3)
    return url[:end] if end >= 0 else ""


def prefix_host(url: str) -> str:
    """What stands between url's "://" and the "/" after it: the host a packed request with
    no host field has ("" when url has no such "/")."""
    prefix = _prefix(url)
    return prefix[prefix.find("://") + 3 :]


def with_history(history: tuple[str, ...], error: str) -> tuple[str, ...]:
    """history with one more attempt's error, keeping the last HISTORY_ENTRIES, each cut."""
    return (*history, error[:HISTORY_CHARS])[-HISTORY_ENTRIES:]


def packed_tail(
    depth: int,
    priority: int,
    attempts: int,
    referrer: str,
    crashes: int = 0,
    crash_error: str = "",
    via: str = "",
    history: tuple[str, ...] = (),
    redirects: tuple[str, ...] = (),
    extra: dict[str, object] | None = None,
) -> str:
    """A packed request after its URL (Request.pack): `referrer` as its line holds it. The
    frontier builds the requests of a page's links from it without a Request per link."""
    extra = dict(extra or ())
    if attempts:
        extra["a"] = attempts
    if via:
        extra["v"] = via
    if history:
        extra["y"] = list(history)
    if redirects:
        extra["c"] = list(redirects)
    if crashes:
        extra["x"] = crashes
    if crash_error:
        extra["e"] = crash_error
    tail = f"\n{depth}\n{priority or ''}\n{referrer}"
    if extra:
        tail += "\n" + json.dumps(extra, separators=(",", ":"))
    return tail


def link_tail(
    depth: int, priority: int, referrer: str, via: str = "", redirects: tuple[str, ...] = ()
) -> str:
    """packed_tail for the links of the page at `referrer`, with the referrer absolute:
    complete.lua makes it relative for the links on the page's own prefix."""
    extra: dict[str, object] = {}
    if referrer[:1] == "/" or "\n" in referrer:
        referrer, extra["r"] = "", referrer
    return packed_tail(depth, priority, 0, referrer, via=via, redirects=redirects, extra=extra)


@dataclass
class Outcome:
    """What a slice reports for one claimed request."""

    request: Request
    # One of OUTCOME_KINDS: "done" | "retry" | "failed" | "crashed" (could not be recorded:
    # queued again with one more crash, after retry_delay) | "absent" (a sitemap file that is
    # not there: no page, taken back out of the requests; the sitemaps it brings are queued).
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
