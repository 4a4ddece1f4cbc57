"""A page's links resolved to the URLs the client fetches: against the page's base, as urljoin
does (several times faster), in the form the client sends them (urls.normalize); None for what
is not an http(s) URL. crawlhub.http.links reads the links; this says where they lead."""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

from w3lib.url import safe_url_string

from crawlhub.http.urls import (
    MAX_URL_LENGTH,
    SCHEMES,
    URLError,
    URLTooLong,
    is_normal_path,
    normalize,
    without_dot_segments,
)

# Browsers strip these from both ends of an attribute URL, and drop tabs/newlines inside it.
_WHITESPACE = " \t\n\r\f"
# A URL scheme as urlsplit recognizes one: a letter, then letters, digits, "+", "-" or ".".
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+\-.]*")
# The shape of most links, read by one match: whitespace around it, maybe an http(s) origin
# (the scheme in any case), an absolute path and query of characters nothing escapes (none a
# ";", which urljoin reads in an "HTTP:" URL), maybe a fragment. Resolver.absolute then needs
# only to compare the origin with the page's and to look for dot segments.
_PLAIN_CHARS = r"A-Za-z0-9\-._~!$&'()*+,=:@/"
_PLAIN_LINK = re.compile(
    rf"[{_WHITESPACE}]*((?i:https?)://[^/?#]*)?"
    rf"(/(?!/)[{_PLAIN_CHARS}]*(?:\?[{_PLAIN_CHARS}?]+)?)(?:#.*|[{_WHITESPACE}]*)",
    re.DOTALL,
)
# The shape of most relative links: "path", "./path" or "../path" of characters nothing escapes
# (no ":", which could start a scheme, and no ";"), a query maybe, a fragment maybe. The path
# starts with no "." or "/" (a dot segment or an empty one, which urljoin reads apart).
_PLAIN_RELATIVE = re.compile(
    rf"[{_WHITESPACE}]*(?:(\.\.?/)|(?=[A-Za-z0-9\-_~!$&'()*+,=@]))"
    r"((?:[A-Za-z0-9\-_~!$&'()*+,=@][A-Za-z0-9\-._~!$&'()*+,=@/]*)?"
    rf"(?:\?[A-Za-z0-9\-._~!$&'()*+,=@/?]+)?)(?:#.*|[{_WHITESPACE}]*)",
    re.DOTALL,
)
# An href that names a scheme other than http(s) ("mailto:", "javascript:", "tel:"), whitespace
# before it maybe: never a URL the client fetches, told by one match (absolute() otherwise
# strips it, compares it with the origin and splits it first: 2.3 us each against 0.8 for a
# plain link, a sixth of a bench page's resolving).
_OTHER_SCHEME = re.compile(rf"[{_WHITESPACE}]*([A-Za-z][A-Za-z0-9+\-.]*):")
# A page URL as most are, "http(s)://host[:port]/path?query", with no character urlsplit
# removes or checks (tab, newline, a bracket or non-ASCII in the authority): its scheme,
# authority and path as urlsplit reads them, by one match (urlsplit's parse of each page's
# new URL was a third of making its Resolver).
_PLAIN_BASE = re.compile(
    r"(https?)://([A-Za-z0-9\-._~!$&'()*+,;=:@%]+)(/[^?#\t\n\r]*)?(?:\?[^#\t\n\r]*)?"
)


class Resolver:
    """Resolves many hrefs against one base URL, as urljoin does but several times faster.

    urljoin re-parses the base for every link, which is most of the cost on a page with 100,000
    links. The common shapes ("/path", "path", "?q", "//host/x", "https://...", "../path",
    "mailto:...") are joined with string operations here. Those with dot segments or a scheme
    give exactly what urljoin gives (compared on thousands of generated hrefs in
    tests/http/test_link_extraction.py); the rare rest ("HTTP:", ";params", a base that is not
    plain) goes to urljoin.
    """

    def __init__(self, base: str, encoding: str = "utf-8") -> None:
        self.base = base.partition("#")[0]
        # Browsers send queries of UTF-16/32 pages as UTF-8; the page's encoding otherwise.
        self.encoding = "utf-8" if encoding.lower().startswith(("utf-16", "utf-32")) else encoding
        self.scheme, netloc, path = _split(self.base)
        self.origin = f"{self.scheme}://{netloc}"
        self.path = path or "/"
        self.directory = self.path[: self.path.rfind("/") + 1]
        self.plain = self.scheme in ("http", "https") and bool(netloc) and ";" not in self.path
        # An origin the client sends as it is: "/path" links then need no normalize().
        self.normal_origin = _http_only(self.origin + "/", self.encoding) == self.origin + "/"
        # The origin's scheme with its "://", and what follows it: an href that names the
        # origin with its scheme in capitals ("HTTP://host/x") is read like "http://host/x".
        self.scheme_end = len(self.scheme) + 3
        self.authority = self.origin[self.scheme_end :]
        self._resolved_base: list[str | None] = []  # the base itself ("", "#top"), once asked
        # The base's directory as urljoin splits it (for hrefs with dot segments), "./" and
        # "../" resolved (the start of every "./x" and "../x", x a plain path), and where
        # "path", "./path" and "../path" start: the same for every page of a directory.
        self.directory_segments, self.here, self.up, self.starts = _directory_parts(
            self.directory, self.plain
        )

    def join(self, href: str) -> str:
        if href.startswith(("http://", "https://")):
            return href
        if href.startswith("//"):
            return f"{self.scheme}:{href}"
        path = href.partition("?")[0]
        if ":" in path:
            scheme = path.partition(":")[0]
            if _SCHEME.fullmatch(scheme) and scheme.lower() not in ("http", "https"):
                return href  # "mailto:", "javascript:": urljoin returns them as they are
            return urljoin(self.base, href)  # "HTTP:", or a colon later in the path
        if "/." in f"/{path}":
            if not self.plain or ";" in path:
                return urljoin(self.base, href)
            return self.origin + self._join_dots(path, href[len(path) :])
        if href.startswith("/"):
            return self.origin + href
        if href.startswith("?"):
            return self.origin + self.path + href
        return self.origin + self.directory + href

    def _join_dots(self, path: str, query: str) -> str:
        return _join_dots(self.directory_segments, path, query)

    def absolute(self, href: str) -> str | None:
        """`href` resolved, fragment dropped; None unless it is an http(s) URL."""
        if self.normal_origin and (plain := _PLAIN_LINK.fullmatch(href)) is not None:
            origin, path = plain.groups()
            if (
                (origin is None or origin == self.origin or self._is_origin(origin))
                and "/." not in path
                and len(self.origin) + len(path) <= MAX_URL_LENGTH
            ):
                return self.origin + path
        if self.normal_origin and (relative := _PLAIN_RELATIVE.fullmatch(href)) is not None:
            prefix, path = relative.groups()
            start = self.starts[prefix]
            if start and "/." not in path and "//" not in path:
                url = self.origin + start + path
                if len(url) <= MAX_URL_LENGTH:
                    return url
        if (scheme := _OTHER_SCHEME.match(href)) is not None and scheme[1].lower() not in SCHEMES:
            return None
        href = href.strip(_WHITESPACE)
        if "\t" in href or "\n" in href or "\r" in href:
            href = href.replace("\t", "").replace("\n", "").replace("\r", "")
        href = href.partition("#")[0]
        if self.normal_origin and (url := self._on_normal_origin(href)):
            return url
        if not href:  # "#top": the base, on most pages
            if not self._resolved_base:
                self._resolved_base.append(_http_only(self.base, self.encoding))
            return self._resolved_base[0]
        scheme, colon, _ = href.partition(":")
        if colon and scheme.lower() not in SCHEMES and _SCHEME.fullmatch(scheme):
            return None  # "mailto:", "javascript:": join() gives them as they are, not http(s)
        try:
            url = self.join(href)
        except ValueError:  # e.g. a malformed IPv6 literal
            return None
        return _http_only(url, self.encoding)

    def _is_origin(self, given: str) -> bool:
        """`given` is the page's origin, its scheme in capitals maybe ("HTTP://host")."""
        end = self.scheme_end
        return given[:end].lower() == self.origin[:end] and given[end:] == self.authority

    def _on_normal_origin(self, href: str) -> str | None:
        """`href` (whitespace and fragment gone) resolved without normalize(), when it resolves
        to the page's origin (in normal form) and a path in normal form: the path alone says
        whether the URL is. absolute()'s fallback for the links its two matches leave ("/path",
        "path", "../path", "?q", the origin and a path, with a ";" in the query, inner tabs or
        newlines, its scheme in capitals or not). None for the others, which
        absolute() joins and normalizes as ever (the same URL: tests/http/test_link_extraction)."""
        origin = self.origin
        if href.startswith(origin):
            path = href[len(origin) :]
        elif href[:1] == "/":
            path = href
        elif href[:1] == "?":
            path = self.path + href
        elif ":" not in href:
            if not href:
                return None
            before_query = href.partition("?")[0]
            if "/." not in f"/{before_query}":
                path = self.directory + href
            elif not self.plain or ";" in before_query:
                return None
            elif before_query[:2] == "./" and _plain_segments(before_query[2:]):
                path = self.here + href[2:]
            elif before_query[:3] == "../" and _plain_segments(before_query[3:]):
                path = self.up + href[3:]
            else:
                path = self._join_dots(before_query, href[len(before_query) :])
        elif self._is_origin(href[: len(origin)]) and ";" not in href:
            path = href[len(origin) :]  # urljoin, which reads "HTTP:", rewrites ";params"
        else:
            return None
        if path[:1] != "/" or path[1:2] == "/" or not is_normal_path(path):
            return None
        url = origin + path
        return url if len(url) <= MAX_URL_LENGTH else None


def _split(base: str) -> tuple[str, str, str]:
    """The scheme (lowercase), authority and path of `base` (no fragment), as urlsplit reads
    them (raising its ValueError for a malformed authority)."""
    if (plain := _PLAIN_BASE.fullmatch(base)) is not None:
        return plain[1], plain[2], plain[3] or ""
    parts = urlsplit(base)
    return parts.scheme.lower(), parts.netloc, parts.path


@lru_cache(maxsize=1024)
def _directory_parts(directory: str, plain: bool) -> tuple[list[str], str, str, dict]:
    """What Resolver keeps of a base's directory, read once for all the pages in it: its
    segments as urljoin splits them, "./" and "../" resolved against it (when the base is
    plain), and where "path", "./path" and "../path" start (Resolver.starts). Nothing of it is
    ever changed: Resolvers of one directory share it."""
    segments = directory.split("/")[:-1]
    here = _join_dots(segments, ".", "") if plain else ""
    up = _join_dots(segments, "..", "") if plain else ""
    starts = {None: _normal_start(directory), "./": _normal_start(here), "../": _normal_start(up)}
    return segments, here, up, starts


def _join_dots(directory_segments: list[str], path: str, query: str) -> str:
    """A path with "." or ".." segments resolved as urljoin (Python 3.11) does it against a
    directory (its segments): RFC 3986, plus its quirks (empty segments of a relative path
    dropped, ".." past the root ignored); the path and query that follow the origin."""
    if path.startswith("/"):
        segments = path.split("/")
    else:
        segments = directory_segments + path.split("/")
        segments[1:-1] = filter(None, segments[1:-1])
    joined = "/".join(without_dot_segments(segments)) or "/"
    if not joined.startswith("/"):
        joined = "/" + joined
    return joined + ("" if query == "?" else query)


def _normal_start(directory: str) -> str:
    """`directory` (ending in "/") if a path in normal form (urls.is_normal_path) that gives
    one whatever plain path follows it; "" if not."""
    if directory[:1] != "/" or directory[1:2] == "/" or not is_normal_path(directory):
        return ""
    return directory


def _plain_segments(path: str) -> bool:
    """`path` (relative, no query) has no empty and no dot segment but maybe its last: after
    "./" or "../", it is only appended to where they lead (urljoin drops empty segments)."""
    return "//" not in f"/{path}" and "/." not in f"/{path}"


def _http_only(url: str, encoding: str) -> str | None:
    """`url` in the form the client sends it (urls.normalize), or None when it is not an http(s)
    URL the client would fetch: mailto:, javascript:, data:, a user name before the host..."""
    if not (url.isascii() and url.isprintable() and " " not in url):
        # Non-ASCII hosts become punycode and paths/queries are percent-encoded (the query in
        # the page's encoding, as a browser would send it) before the URL is read.
        try:
            url = safe_url_string(url, encoding=encoding)
        except (LookupError, ValueError):  # UnicodeError is a ValueError
            return None
    try:
        return normalize(url)
    except URLTooLong as exc:
        return exc.normal  # kept, to be recorded with its error rather than lost
    except URLError:
        return None


def absolute_url(href: str, base: str, encoding: str = "utf-8") -> str | None:
    """`href` resolved against `base`, fragment dropped; None unless it is an http(s) URL."""
    return Resolver(base, encoding).absolute(href)
