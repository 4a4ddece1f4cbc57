"""The page as extraction's rules read it (crawls/engine/extraction.py): its encoding, text,
HTML or XML tree and JSON, each made at most once and only when a rule asks, and the bounds
on what the rules make of one page (MAX_PAGE_BYTES of values, MAX_READ characters read, pages
of at most MAX_PARSED_BYTES parsed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin

from lxml import etree
from parsel import Selector
from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, read_bom

from crawlhub.http import charsets

MAX_PAGE_BYTES = 256 * 1024  # of all the values of one page, in UTF-8
# A tree takes tens of times the page's size in memory, parsed JSON several times.
MAX_PARSED_BYTES = 8 * 1024 * 1024
# Characters of text made into values (before cutting) per page: a page of deeply nested
# elements makes each element's text nearly the whole page.
MAX_READ = 32_000_000

HTML_TYPES = ("text/html", "application/xhtml+xml")


class NoValue(Exception):
    """Why a rule gives no value on this page (the page is not JSON, the XPath failed)."""


class BoundReached(Exception):
    """A bound reached: the rule keeps the values it has, and says why there are no more."""


@dataclass(frozen=True)
class _Tree:
    root: etree._Element
    method: str  # "html" or "xml": how parts of it are written back


class Page:
    """One page as the rules read it: its encoding, text, tree and JSON, each made at most once
    and only when asked for (a failure is remembered too), and what its values have used of
    the page's bounds."""

    def __init__(self, *, url: str, body: bytes, content_type: str) -> None:
        self.url, self.body = url, body
        self.mime = content_type.split(";", 1)[0].strip().lower()
        self.content_type = content_type
        self.read = 0  # characters made into values
        self.spent = 0  # bytes of values kept
        self._made: dict[str, object] = {}

    def _once(self, what: str, make: Callable[[], object]):
        if what not in self._made:
            try:
                self._made[what] = make()
            except NoValue as exc:
                self._made[what] = exc
        made = self._made[what]
        if isinstance(made, NoValue):
            raise made
        return made

    def encoding(self) -> tuple[str, int]:
        """The page's encoding and where its text starts (after a byte order mark)."""
        return self._once("encoding", lambda: _encoding(self.body, self.content_type))

    def text(self) -> str:
        return self._once("text", self._decode)

    def utf8(self) -> bytes:
        return self._once("utf8", lambda: self.text().encode("utf-8", "replace"))

    def tree(self) -> _Tree:
        return self._once("tree", lambda: _parse_tree(self))

    def json(self) -> object:
        return self._once("json", lambda: _parse_json(self))

    def markup(self) -> str | None:
        """ "html" or "xml" as the content type says, else as the body starts; None for neither."""
        if self.mime in HTML_TYPES:
            return "html"
        if self.mime.endswith(("/xml", "+xml")):
            return "xml"
        encoding, start = self.encoding()
        head = self.body[start : start + 512].decode(encoding, "replace").lstrip()
        if head.startswith("<?xml"):
            return "xml"
        return "html" if head.startswith("<") else None

    def absolute(self, value: str) -> str:
        """A URL attribute's value made absolute, as a link of the page is: against the page's
        <base href> when it has one, else its URL. A value that is no URL stays as it is."""
        base = self._once("base", self._base)
        try:
            return urljoin(base, value.strip())
        except ValueError:
            return value

    def _base(self) -> str:
        found = self.tree().root.xpath("//base[@href][1]/@href")
        try:
            return urljoin(self.url, str(found[0]).strip()) if found else self.url
        except ValueError:
            return self.url

    def note_read(self, characters: int) -> None:
        self.read += characters
        if self.read > MAX_READ:
            raise BoundReached(
                f"the rules read {MAX_READ:,} characters of this page's text to make values; "
                "the rest are left out"
            )

    def spend(self, size: int) -> bool:
        """Whether `size` more bytes of values fit in the page's MAX_PAGE_BYTES (then taken)."""
        if self.spent + size > MAX_PAGE_BYTES:
            return False
        self.spent += size
        return True

    def _decode(self) -> str:
        encoding, start = self.encoding()
        return self.body[start:].decode(encoding, "replace")


def _encoding(body: bytes, content_type: str) -> tuple[str, int]:
    """As links.py finds it (and browsers): a byte order mark, the HTTP charset, <meta> or the
    XML declaration, else UTF-8; a name that is no charset (charsets.text_codec) as UTF-8."""
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return bom_encoding, len(bom)
    declared = http_content_type_encoding(content_type) or html_body_declared_encoding(body)
    encoding = charsets.text_codec(declared) or "utf-8"
    if encoding in ("utf-16", "utf-32"):
        encoding += "-be"  # without a byte order mark, as w3lib reads it
    return encoding, 0


def _parse_tree(page: Page) -> _Tree:
    if len(page.body) > MAX_PARSED_BYTES:
        raise NoValue(
            f"the page is {_mb(len(page.body))}; selectors run on pages of at most "
            f"{_mb(MAX_PARSED_BYTES)}"
        )
    markup = page.markup()
    if markup is None:
        raise NoValue(f"the page is not HTML or XML ({page.mime or 'no content type'})")
    encoding, start = page.encoding()
    body = page.body[start:] if start else page.body
    if not body or body.isspace():
        raise NoValue("the page is empty")
    try:
        selector = Selector(body=body, encoding=encoding, type=markup, base_url=page.url)
        if markup == "xml":
            # A feed's elements are in a namespace (Atom's, RSS modules'): "entry > title" and
            # //dc:creator would find nothing, or not compile, without the name alone.
            selector.remove_namespaces()
    except Exception as exc:  # lxml on whatever a site sends
        raise NoValue(f"the page could not be read as {markup.upper()}: {exc}") from None
    return _Tree(selector.root, markup)


def _parse_json(page: Page) -> object:
    declared = page.mime.endswith(("/json", "+json"))
    if len(page.body) > MAX_PARSED_BYTES:
        raise NoValue(
            f"the body is {_mb(len(page.body))}; JSON rules run on bodies of at most "
            f"{_mb(MAX_PARSED_BYTES)}"
        )
    try:
        # JSON has no NaN or Infinity; Python reads them unless told otherwise.
        return json.loads(page.text(), parse_constant=lambda _: None)
    except (ValueError, RecursionError) as exc:
        if declared:
            raise NoValue(f"the body is not JSON: {exc}") from None
        raise NoValue(f"the body is not JSON ({page.mime or 'no content type'})") from None


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):,.1f} MB"
