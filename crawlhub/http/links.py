"""Title and outgoing links of an HTML page. Never raises on what a site sends."""

from __future__ import annotations

import codecs
import re
import threading
from urllib.parse import urljoin, urlsplit

from lxml import etree
from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, read_bom
from w3lib.url import safe_url_string

from crawlhub.http import charsets
from crawlhub.http.urls import (
    MAX_URL_LENGTH,
    SCHEMES,
    URLError,
    URLTooLong,
    is_normal_path,
    normalize,
    without_dot_segments,
)

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_TITLE = 500
# <link rel=...> values that point at other pages (not stylesheets, icons or preloads).
PAGE_RELS = frozenset({"alternate", "next", "prev"})
# Browsers strip these from both ends of an attribute URL, and drop tabs/newlines inside it.
_WHITESPACE = " \t\n\r\f"

# Links kept of one page, in document order (Heritrix keeps 6,000): a page of nothing but
# links, at the largest max_bytes, would otherwise make millions of URLs in a worker's memory.
MAX_LINKS = 100_000
# What is kept of a link's text (the pages show it beside the link).
MAX_LINK_TEXT = 200
# The page is decoded and parsed this much at a time.
FEED_BYTES = 1024 * 1024
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


def is_html(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in HTML_TYPES


def extract(body: bytes, base_url: str, content_type: str) -> tuple[str, list[str]]:
    """(title, links) of an HTML page; links absolute http(s), in document order, repeats kept,
    at most MAX_LINKS.

    The frontier counts repeats, so duplicates are returned on purpose. Anything that is not HTML,
    or cannot be parsed at all, gives ("", []).
    """
    title, links, _texts = extract_with_texts(body, base_url, content_type)
    return title, links


def extract_with_texts(
    body: bytes, base_url: str, content_type: str
) -> tuple[str, list[str], list[str]]:
    """(title, links, texts): extract's title and links, and each link's text (an <a>'s or
    <area>'s visible text or alt, whitespace collapsed, at most MAX_LINK_TEXT characters; ""
    for other links), in the same order."""
    if not body or not is_html(content_type):
        return "", [], []
    parsed = _parse(body, content_type)
    if parsed is None:
        return "", [], []
    page, encoding = parsed
    try:
        resolver = Resolver(_base_url(page.base, base_url), encoding)
    except ValueError:  # a base URL that urlsplit rejects; the caller passed garbage
        return page.title(), [], []
    links, texts = _links(page.hrefs, page.texts(), resolver)
    return page.title(), links, texts


def _detect(body: bytes) -> str:
    """The encoding of a page that declares none: UTF-8 if it decodes, else Windows-1252."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(body)
    try:  # a slice at a time: decoding it whole would hold up to 4 times its size as text
        for offset in range(0, len(body), FEED_BYTES):
            decoder.decode(view[offset : offset + FEED_BYTES])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def _encoding(body: bytes, content_type: str) -> tuple[str, int]:
    """The page's encoding, found as w3lib's html_to_unicode finds it (as browsers do: a BOM,
    then the HTTP charset, then <meta>), and where its text starts (after the BOM)."""
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return bom_encoding, len(bom)
    encoding = http_content_type_encoding(content_type) or html_body_declared_encoding(body)
    if encoding is None:
        return _detect(body), 0
    if encoding in ("utf-16", "utf-32"):
        encoding += "-be"
    return encoding, 0


def _decoder(encoding: str) -> tuple[str, charsets.Decoder]:
    """An incremental decoder that replaces undecodable bytes, as w3lib's to_unicode decodes
    (gb18030 with the error handler w3lib registers for it); UTF-8 for a name that is no
    charset (charsets.text_codec: unknown, or a codec such as base64 or idna)."""
    name = charsets.text_codec(encoding) or "utf-8"
    errors = "w3lib_gb18030_replace" if name == "gb18030" else "replace"
    return name, charsets.incremental_decoder(name, errors)


_parsers = threading.local()  # .pair: this thread's (HTMLParser, _Page), reused page after page


def _parse(body: bytes, content_type: str) -> tuple[_Page, str] | None:
    """Feed the page to libxml2's HTML parser, which tells a _Page about each element; that
    _Page and the page's encoding, or None when it could not be parsed at all. The _Page is
    this thread's, read again by its next page: what is wanted of it is taken at once.

    The text is decoded a slice at a time and re-encoded as UTF-8 for a parser told so (an
    explicit encoding makes libxml2 ignore a now wrong <meta charset>), so that the page is
    never held twice in memory, and no tree is built: a tree takes ~45 times the page's size.
    One parser per thread, kept: making one inspects its target's methods (~100 us a page).
    """
    encoding, start = _encoding(body, content_type)
    encoding, decoder = _decoder(encoding)
    # Taken out while in use, and put back only once closed cleanly: a parser left mid-page
    # by any exception is never handed the next page.
    pair = _parsers.__dict__.pop("pair", None)
    if pair is None:
        page = _Page()
        pair = (etree.HTMLParser(target=page, encoding="utf-8"), page)
    parser, page = pair
    page.reset()
    view = memoryview(body)
    try:
        for offset in range(start, len(body), FEED_BYTES):
            parser.feed(decoder.decode(view[offset : offset + FEED_BYTES]).encode("utf-8"))
        parser.feed(decoder.decode(b"", final=True).encode("utf-8"))
        parser.close()
    except (etree.ParserError, etree.LxmlError, ValueError):
        return None  # "Document is empty" and friends
    _parsers.pair = pair
    return page, encoding


# The elements _Page.start reads; it returns at once for any other.
_TAGS_READ = frozenset(("a", "area", "img", "link", "frame", "iframe", "base", "title"))


class _Page:
    """What extract keeps of a page, told by the parser element by element (a parser target):
    the first <title>'s text, the first <base href>, and the URLs of links in document order."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.hrefs: list[str] = []
        self.base: str | None = None
        self._title: list[str] | None = None  # the first <title>'s text so far
        self._title_size = 0
        self._in_title = 0  # <title> elements open, inside the first one
        # Link texts by the index of their href; the <a> being read, and its text so far.
        self._texts: dict[int, str] = {}
        self._anchor: int | None = None
        self._anchor_text: list[str] = []
        self._anchor_size = 0
        # In the first <title> or in an <a>: data() keeps text. Most text is neither, and
        # data() is told of every piece of it: one test.
        self._reading = False

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if tag not in _TAGS_READ:  # most elements of a page: told of each, one test
            return
        if tag == "a":  # the most common by far
            value = attrib.get("href")
            if value and len(self.hrefs) < MAX_LINKS:
                if self._anchor is not None:
                    self._end_anchor()
                self._anchor = len(self.hrefs)
                self._reading = True
                self.hrefs.append(value)
            return
        if tag == "area":
            value = attrib.get("href")
            if value and len(self.hrefs) < MAX_LINKS:
                self._texts[len(self.hrefs)] = attrib.get("alt") or ""
        elif tag == "img":
            if self._anchor is not None and not self._anchor_text and attrib.get("alt"):
                self._anchor_text.append(attrib["alt"])  # an image link says what its alt says
            return
        elif tag == "link":
            rels = (attrib.get("rel") or "").lower().split()
            value = attrib.get("href") if PAGE_RELS.intersection(rels) else None
        elif tag == "frame" or tag == "iframe":
            value = attrib.get("src")
        else:
            if tag == "base" and self.base is None:
                self.base = attrib.get("href")  # the first one with an href, as browsers use
            elif tag == "title" and (self._in_title or self._title is None):
                self._title = self._title if self._title is not None else []
                self._in_title += 1
                self._reading = True
            return
        if value and len(self.hrefs) < MAX_LINKS:
            self.hrefs.append(value)

    def end(self, tag: str) -> None:
        if tag == "a":
            if self._anchor is not None:
                self._end_anchor()
        elif tag == "title" and self._in_title:
            self._in_title -= 1
            self._reading = self._in_title > 0 or self._anchor is not None

    def data(self, text: str) -> None:
        if not self._reading:
            return
        # A garbage title can be megabytes long; only the start is ever shown.
        if self._in_title and self._title_size < MAX_TITLE * 4:
            self._title.append(text)
            self._title_size += len(text)
        if self._anchor is not None and self._anchor_size < MAX_LINK_TEXT * 4:
            self._anchor_text.append(text)
            self._anchor_size += len(text)

    def close(self) -> _Page:
        if self._anchor is not None:
            self._end_anchor()
        return self

    def _end_anchor(self) -> None:
        """The open <a> ends (its </a>, the next <a href>, the page's end): its text is kept."""
        if self._anchor_text:
            self._texts[self._anchor] = "".join(self._anchor_text)
            self._anchor_text = []
        self._anchor, self._anchor_size = None, 0
        self._reading = self._in_title > 0

    def texts(self) -> list[str]:
        """Each href's link text, in the order of hrefs."""
        texts = [""] * len(self.hrefs)
        for index, text in self._texts.items():
            texts[index] = _link_text(text)
        return texts

    def title(self) -> str:
        if not self._title:
            return ""
        text = "".join(self._title)[: MAX_TITLE * 4]
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


def _base_url(base_href: str | None, page_url: str) -> str:
    """The page's <base href> (the first one with an href, as browsers use) or the page URL."""
    if base_href is None:
        return page_url
    url = absolute_url(base_href, page_url, "utf-8")
    return url or page_url  # a javascript: or garbage base is ignored, as browsers do


def _link_text(text: str) -> str:
    text = text[: MAX_LINK_TEXT * 4]
    if not text.isprintable():  # _visible's own test, without its call for most texts
        text = _visible(text)
    return " ".join(text.split())[:MAX_LINK_TEXT]


def _links(hrefs: list[str], texts: list[str], resolver: Resolver) -> tuple[list[str], list[str]]:
    # One flat loop: this runs once per link, 100,000 times on a big page.
    absolute = resolver.absolute
    links, kept_texts = [], []
    for value, text in zip(hrefs, texts, strict=True):
        url = absolute(value)
        if url:
            links.append(url)
            kept_texts.append(text)
    return links, kept_texts


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
        # An origin the client sends as it is: "/path" links then need no normalize().
        self.normal_origin = _http_only(self.origin + "/", self.encoding) == self.origin + "/"
        # The origin's scheme with its "://", and what follows it: an href that names the
        # origin with its scheme in capitals ("HTTP://host/x") is read like "http://host/x".
        self.scheme_end = len(self.scheme) + 3
        self.authority = self.origin[self.scheme_end :]
        # "./" and "../" resolved once: the start of every "./x" and "../x" (x a plain path).
        self.here = self._join_dots(".", "") if self.plain else ""
        self.up = self._join_dots("..", "") if self.plain else ""
        self._resolved_base: list[str | None] = []  # the base itself ("", "#top"), once asked
        # Where "path", "./path" and "../path" start, when each is a path in normal form that
        # a _PLAIN_RELATIVE path keeps in normal form ("" when not: those go the long way).
        self.starts = {
            None: _normal_start(self.directory),
            "./": _normal_start(self.here),
            "../": _normal_start(self.up),
        }

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
        """A path with "." or ".." segments resolved as urljoin (Python 3.11) does it: RFC 3986,
        plus its quirks (empty segments of a relative path dropped, ".." past the root ignored);
        the path and query that follow the origin."""
        if path.startswith("/"):
            segments = path.split("/")
        else:
            segments = self.directory_segments + path.split("/")
            segments[1:-1] = filter(None, segments[1:-1])
        joined = "/".join(without_dot_segments(segments)) or "/"
        if not joined.startswith("/"):
            joined = "/" + joined
        return joined + ("" if query == "?" else query)

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
        whether the URL is. Nearly every link of a page: "/path", "path", "../path", "?q", the
        origin and a path, with its scheme in capitals or not. None for the others, which
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
