"""Title and outgoing links of an HTML page. Never raises on what a site sends."""

from __future__ import annotations

import codecs
import threading
from itertools import compress

from lxml import etree
from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, read_bom

from crawlhub.http import charsets
from crawlhub.http.link_urls import Resolver, absolute_url

__all__ = ["Resolver", "absolute_url", "extract", "extract_with_texts", "is_html"]

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_TITLE = 500
# <link rel=...> values that point at other pages (not stylesheets, icons or preloads).
PAGE_RELS = frozenset({"alternate", "next", "prev"})

# Links kept of one page, in document order (Heritrix keeps 6,000): a page of nothing but
# links, at the largest max_bytes, would otherwise make millions of URLs in a worker's memory.
MAX_LINKS = 100_000
# What is kept of a link's text (the pages show it beside the link).
MAX_LINK_TEXT = 200
# What is read of a link's text and of a title, at most, before it is cut: whitespace is
# collapsed after the cut, so a garbage text of megabytes is never held.
_READ_TEXT = MAX_LINK_TEXT * 4
_READ_TITLE = MAX_TITLE * 4
# The page is decoded and parsed this much at a time.
FEED_BYTES = 1024 * 1024


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
    # Each link resolved, and those that lead nowhere fetched (None) left out with their texts:
    # map, filter and compress loop in C (this runs 100,000 times on a big page).
    urls = list(map(resolver.absolute, page.hrefs))
    texts = list(map(_link_text, compress(page.read_texts, urls)))
    return page.title(), list(filter(None, urls)), texts


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


def _as_sent(body: bytes, start: int, name: str) -> bytes | None:
    """The page's text (from `start`) as the parser is fed it, when that is the body itself:
    a page in UTF-8 (most) whose bytes are all valid UTF-8 and that one slice holds. Decoding
    it and encoding it again gives the same bytes; that work (a fifth of its parse) is spared.
    None for any other page, which is decoded as ever."""
    if name != "utf-8" or len(body) - start > FEED_BYTES or start == len(body):
        return None
    text = body[start:] if start else body
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return text


_parsers = threading.local()  # .pair: this thread's (HTMLParser, _Page), reused page after page


def _parse(body: bytes, content_type: str) -> tuple[_Page, str] | None:
    """Feed the page to libxml2's HTML parser, which tells a _Page about each element; that
    _Page and the page's encoding, or None when it could not be parsed at all. The _Page is
    this thread's, read again by its next page: what is wanted of it is taken at once.

    The text is decoded a slice at a time and re-encoded as UTF-8 for a parser told so (an
    explicit encoding makes libxml2 ignore a now wrong <meta charset>), so that the page is
    never held twice in memory, and no tree is built: a tree takes ~45 times the page's size.
    A page of valid UTF-8 in one slice is fed as it is (_as_sent): the same bytes, the same
    feeds. One parser per thread, kept: making one inspects its target's methods (~100 us a
    page).
    """
    encoding, start = _encoding(body, content_type)
    name = charsets.text_codec(encoding) or "utf-8"
    as_sent = _as_sent(body, start, name)
    # Taken out while in use, and put back only once closed cleanly: a parser left mid-page
    # by any exception is never handed the next page.
    pair = _parsers.__dict__.pop("pair", None)
    if pair is None:
        page = _Page()
        pair = (etree.HTMLParser(target=page, encoding="utf-8"), page)
    parser, page = pair
    page.reset()
    try:
        if as_sent is not None:
            parser.feed(as_sent)
            parser.feed(b"")  # as the decoder's end feeds it: the parser told the same
        else:
            name, decoder = _decoder(encoding)
            view = memoryview(body)
            for offset in range(start, len(body), FEED_BYTES):
                parser.feed(decoder.decode(view[offset : offset + FEED_BYTES]).encode("utf-8"))
            parser.feed(decoder.decode(b"", final=True).encode("utf-8"))
        parser.close()
    except (etree.ParserError, etree.LxmlError, ValueError):
        return None  # "Document is empty" and friends
    _parsers.pair = pair
    return page, name


# The elements _Page.start reads; it returns at once for any other.
_TAGS_READ = frozenset(("a", "area", "img", "link", "frame", "iframe", "base", "title"))


class _Page:
    """What extract keeps of a page, told by the parser element by element (a parser target):
    the first <title>'s text, the first <base href>, and the URLs of links in document order
    with their texts."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.hrefs: list[str] = []
        # Each href's text as read (an <a>'s text so far, an <area>'s alt; "" for others).
        self.read_texts: list[str] = []
        self.base: str | None = None
        self._title: list[str] | None = None  # the first <title>'s text so far
        self._title_size = 0
        self._in_title = 0  # <title> elements open, inside the first one
        # The <a> being read (the index of its href), and its text so far.
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
                self.read_texts.append("")
            return
        text = ""
        if tag == "area":
            value = attrib.get("href")
            text = attrib.get("alt") or ""
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
            self.read_texts.append(text)

    def end(self, tag: str) -> None:
        if tag == "a":
            if self._anchor is not None:  # _end_anchor, inline: once a link
                if self._anchor_text:
                    self.read_texts[self._anchor] = "".join(self._anchor_text)
                    self._anchor_text = []
                self._anchor, self._anchor_size = None, 0
                self._reading = self._in_title > 0
        elif tag == "title" and self._in_title:
            self._in_title -= 1
            self._reading = self._in_title > 0 or self._anchor is not None

    def data(self, text: str) -> None:
        if not self._reading:
            return
        # A garbage title can be megabytes long; only the start is ever shown.
        if self._in_title and self._title_size < _READ_TITLE:
            self._title.append(text)
            self._title_size += len(text)
        if self._anchor is not None and self._anchor_size < _READ_TEXT:
            self._anchor_text.append(text)
            self._anchor_size += len(text)

    def close(self) -> _Page:
        if self._anchor is not None:
            self._end_anchor()
        return self

    def _end_anchor(self) -> None:
        """The open <a> ends (its </a>, the next <a href>, the page's end): its text is kept."""
        if self._anchor_text:
            self.read_texts[self._anchor] = "".join(self._anchor_text)
            self._anchor_text = []
        self._anchor, self._anchor_size = None, 0
        self._reading = self._in_title > 0

    def texts(self) -> list[str]:
        """Each href's link text, in the order of hrefs."""
        return list(map(_link_text, self.read_texts))

    def title(self) -> str:
        if not self._title:
            return ""
        text = "".join(self._title)[:_READ_TITLE]
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
    text = text[:_READ_TEXT]
    if not text.isprintable():  # _visible's own test, without its call for most texts
        text = _visible(text)
    return " ".join(text.split())[:MAX_LINK_TEXT]
