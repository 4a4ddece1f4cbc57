"""Title and outgoing links of an HTML page. Never raises on what a site sends."""

from __future__ import annotations

import re
import threading
from urllib.parse import urljoin, urlsplit

import lxml.html
from lxml import etree
from w3lib.encoding import html_to_unicode
from w3lib.url import safe_url_string

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_TITLE = 500
# <link rel=...> values that point at other pages (not stylesheets, icons or preloads).
PAGE_RELS = frozenset({"alternate", "next", "prev"})
# Browsers strip these from both ends of an attribute URL, and drop tabs/newlines inside it.
_WHITESPACE = " \t\n\r\f"

_local = threading.local()
# A URL scheme as urlsplit recognizes one: a letter, then letters, digits, "+", "-" or ".".
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+\-.]*")


def is_html(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in HTML_TYPES


def extract(body: bytes, base_url: str, content_type: str) -> tuple[str, list[str]]:
    """(title, links) of an HTML page; links absolute http(s), in document order, repeats kept.

    The frontier counts repeats, so duplicates are returned on purpose. Anything that is not HTML,
    or cannot be parsed at all, gives ("", []).
    """
    if not body or not is_html(content_type):
        return "", []
    encoding, root = _parse(body, content_type)
    if root is None:
        return "", []
    try:
        resolver = Resolver(_base_url(root, base_url), encoding)
    except ValueError:  # a base URL that urlsplit rejects; the caller passed garbage
        return _title(root), []
    return _title(root), _links(root, resolver)


def _detect(body: bytes) -> str:
    """The encoding of a page that declares none: UTF-8 if it decodes, else Windows-1252."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def _parse(body: bytes, content_type: str) -> tuple[str, lxml.html.HtmlElement | None]:
    # w3lib picks the encoding as browsers do (BOM, then the HTTP charset, then <meta>) and
    # decodes with replacement, so broken bytes cannot stop us.
    try:
        encoding, text = html_to_unicode(content_type, body, auto_detect_fun=_detect)
    except (LookupError, ValueError):
        encoding, text = "utf-8", body.decode("utf-8", "replace")
    # Re-encoded as UTF-8 for a parser told so: lxml rejects str input with an XML encoding
    # declaration, and an explicit encoding makes libxml2 ignore a (now wrong) <meta charset>.
    try:
        return encoding, lxml.html.document_fromstring(text.encode("utf-8"), parser=_parser())
    except (etree.ParserError, etree.LxmlError, ValueError):
        return encoding, None  # "Document is empty" and friends


def _parser() -> lxml.html.HTMLParser:
    # One parser per thread: slices parse pages from several threads at once.
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)
    return parser


def _title(root: lxml.html.HtmlElement) -> str:
    title = next(root.iter("title"), None)
    if title is None:
        return ""
    # A garbage title can be megabytes long; only the start is ever shown. itertext gives what
    # text_content() gives, without its XPath object: one per process, behind a lock that the
    # fetch threads of a slice would queue on.
    text = "".join(title.itertext())[: MAX_TITLE * 4]
    return " ".join(_visible(text).split())[:MAX_TITLE]


def _visible(text: str) -> str:
    """text without the characters a title must not carry into a page, a terminal or a
    spreadsheet: C0 and C1 controls (ESC starts terminal sequences), bidi embeddings, overrides
    and isolates (RLO makes "FDP.exe" of "exe.PDF"), and other invisible format characters
    (zero-width, BOM). Whitespace among them (tab, newline, NEL, line separator) stays, to
    separate words. Done before the whitespace is collapsed, so none leaves a double space."""
    if text.isprintable():
        return text
    return "".join(ch for ch in text if ch.isprintable() or ch.isspace())


def _base_url(root: lxml.html.HtmlElement, page_url: str) -> str:
    """The page's <base href> (the first one with an href, as browsers use) or the page URL."""
    for base in root.iter("base"):
        href = base.get("href")
        if href is None:
            continue
        url = absolute_url(href, page_url, "utf-8")
        return url or page_url  # a javascript: or garbage base is ignored, as browsers do
    return page_url


def _links(root: lxml.html.HtmlElement, resolver: Resolver) -> list[str]:
    # One flat loop: this runs once per link, 100,000 times on a big page.
    absolute = resolver.absolute
    links = []
    for el in root.iter("a", "area", "link", "frame", "iframe"):
        tag = el.tag
        if tag == "a" or tag == "area":
            value = el.get("href")
        elif tag == "link":
            rels = (el.get("rel") or "").lower().split()
            value = el.get("href") if PAGE_RELS.intersection(rels) else None
        else:
            value = el.get("src")
        if value:
            url = absolute(value)
            if url:
                links.append(url)
    return links


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
        parts = urlsplit(self.base)
        self.scheme = parts.scheme.lower()
        self.origin = f"{self.scheme}://{parts.netloc}"
        self.path = parts.path or "/"
        self.directory = self.path[: self.path.rfind("/") + 1]
        # The base's directory as urljoin splits it, for hrefs with dot segments.
        self.directory_segments = self.directory.split("/")[:-1]
        self.plain = (
            self.scheme in ("http", "https") and bool(parts.netloc) and ";" not in self.path
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
            return self._join_dots(path, href[len(path) :])
        if href.startswith("/"):
            return self.origin + href
        if href.startswith("?"):
            return self.origin + self.path + href
        return self.origin + self.directory + href

    def _join_dots(self, path: str, query: str) -> str:
        """A path with "." or ".." segments resolved as urljoin (Python 3.11) does it: RFC 3986,
        plus its quirks (empty segments of a relative path dropped, ".." past the root ignored).
        """
        if path.startswith("/"):
            segments = path.split("/")
        else:
            segments = self.directory_segments + path.split("/")
            segments[1:-1] = filter(None, segments[1:-1])
        resolved: list[str] = []
        for segment in segments:
            if segment == "..":
                if resolved:
                    resolved.pop()
            elif segment != ".":
                resolved.append(segment)
        if segments[-1] in (".", ".."):
            resolved.append("")
        joined = "/".join(resolved) or "/"
        if not joined.startswith("/"):
            joined = "/" + joined
        return self.origin + joined + ("" if query == "?" else query)

    def absolute(self, href: str) -> str | None:
        """`href` resolved, fragment dropped; None unless it is an http(s) URL."""
        href = href.strip(_WHITESPACE)
        if "\t" in href or "\n" in href or "\r" in href:
            href = href.replace("\t", "").replace("\n", "").replace("\r", "")
        href = href.partition("#")[0]
        try:
            url = self.join(href) if href else self.base
        except ValueError:  # e.g. a malformed IPv6 literal
            return None
        return _http_only(url, self.encoding)


def _http_only(url: str, encoding: str) -> str | None:
    scheme, sep, rest = url.partition("://")
    # Keeping only http(s) drops mailto:, javascript:, data:, tel:, ftp: and the like.
    if not sep or scheme.lower() not in ("http", "https") or not rest or rest[0] in "/?#":
        return None
    if "[" in url:
        try:
            urlsplit(url).hostname  # noqa: B018 - rejects a malformed IPv6 literal
        except ValueError:
            return None
    if url.isascii() and url.isprintable() and " " not in url:
        return url
    # Non-ASCII hosts become punycode and paths/queries are percent-encoded (the query in the
    # page's encoding, as a browser would send it), so every link is a plain ASCII URL.
    try:
        return safe_url_string(url, encoding=encoding)
    except (LookupError, ValueError):  # UnicodeError is a ValueError
        return None


def absolute_url(href: str, base: str, encoding: str = "utf-8") -> str | None:
    """`href` resolved against `base`, fragment dropped; None unless it is an http(s) URL."""
    return Resolver(base, encoding).absolute(href)
