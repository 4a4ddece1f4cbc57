"""Sitemaps: the page URLs a site lists for crawlers, for a crawl that follows them.

parse() reads one sitemap file: a <urlset>, a <sitemapindex> or a plain list of URLs, gzipped
or not. robots_sitemaps() reads the Sitemap: lines of a robots.txt. Finding and following a
site's sitemaps is the frontier's work: crawls/engine/sitemap_reads.py turns a fetched file
into requests (the sitemaps an index lists, the pages a urlset lists), so each file is read
once, and max_pages bounds how many a crawl reads.

A sitemap is whatever a site sends, so reading one never raises and costs bounded memory:
- gzip is sniffed from its magic bytes (servers label .gz files every which way) and undone
  in CHUNK steps, never past MAX_SITEMAP_BYTES: a gzip bomb costs a chunk at a time;
- XML goes through lxml's push parser into a target that keeps only the <loc>s, never a tree;
  entities are not resolved, no DTD or network is loaded and libxml2's limits stay on, so an
  XXE cannot read a file and billion laughs stops at libxml2's amplification limit;
- at most MAX_URLS entries per file are kept (the protocol's limit).
What went wrong becomes a sentence naming the file, for the people running the crawl.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from lxml import etree
from protego import Protego

from crawlhub.http.urls import MAX_URL_LENGTH, URLError, normalize

MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # decompressed, per file (the protocol's limit)
MAX_URLS = 50_000  # entries per file (the protocol's limit)
CHUNK = 64 * 1024
# Text inside one <loc> kept at most: a URL is at most MAX_URL_LENGTH, padding aside.
LOC_TEXT_LIMIT = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_MB = MAX_SITEMAP_BYTES // (1024 * 1024)
# "<", or the byte order mark of UTF-16 XML (which libxml2 reads; the protocol wants UTF-8).
_XML_STARTS = (b"<", b"\xff\xfe", b"\xfe\xff")
# A line of a text with something on it, from its first non-space (matched in C: a text may
# have 25 million lines).
_LINE = re.compile(rb"\S[^\n]*")
_XML_POSITION = re.compile(r",? line \d+, column \d+$")


@dataclass
class Sitemap:
    url: str
    kind: str  # "urlset" | "index" | "text" | "none" (not a sitemap, or nothing in it)
    locs: list[str]  # absolute http(s) URLs in document order: pages, or sitemaps of an index
    problems: list[str] = field(default_factory=list)  # sentences that start with `url`


# -- one file -----------------------------------------------------------------------------------


def parse(body: bytes, url: str) -> Sitemap:
    """The URLs listed by a sitemap file (`url` only names it in problems). Never raises."""
    decoded = _Decoded(body)
    locs = _Locs()
    chunks = iter(decoded)
    first, newlines = _first_content(chunks)
    if not first:
        kind, problems = "none", ([] if decoded.problems() else ["empty"])
    elif first.startswith(_XML_STARTS):
        rest = itertools.chain([first], chunks)
        kind, problems = _read_xml(rest, locs, decoded=decoded, newlines=newlines)
    else:
        kind, problems = _read_text(itertools.chain([first], chunks), locs)
    unit = "line" if kind == "text" else "<loc>"
    problems += locs.problems(unit) if kind != "none" else []
    problems += decoded.problems()
    return Sitemap(url=url, kind=kind, locs=locs.urls, problems=[f"{url}: {p}" for p in problems])


class _Decoded:
    """A body in CHUNK steps, gunzipped when it starts with gzip's magic bytes, never more than
    MAX_SITEMAP_BYTES in all. Iterate once; then `cut` and `error` say how it ended."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.gzip = body.startswith(GZIP_MAGIC)
        self.cut = False
        self.error = ""

    def __iter__(self) -> Iterator[bytes]:
        budget = MAX_SITEMAP_BYTES
        try:
            for chunk in _gunzip(self.body) if self.gzip else _slices(self.body):
                if len(chunk) > budget:
                    if budget:
                        yield chunk[:budget]
                    self.cut = True
                    return
                budget -= len(chunk)
                yield chunk
        except zlib.error as exc:
            self.error = f"gzip data is corrupt ({exc}): read what came before"
        except EOFError:
            self.error = "gzip data ends early: read what came"

    @property
    def complete(self) -> bool:
        return not (self.cut or self.error)

    def problems(self) -> list[str]:
        if self.cut:
            once = " once decompressed" if self.gzip else ""
            return [f"more than {_MB} MB{once}: read the first {_MB} MB"]
        return [self.error] if self.error else []


def _slices(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), CHUNK):
        yield body[start : start + CHUNK]


def _gunzip(body: bytes) -> Iterator[bytes]:
    """Decompressed pieces of at most CHUNK bytes, each from at most CHUNK bytes of input (so
    no step copies the whole body); EOFError when the data stops before its end."""
    pending = memoryview(body)
    handed_back: list[bytes] = []  # what a finished member did not use, read before `pending`
    inflater = zlib.decompressobj(_GZIP_WBITS)
    while True:
        if inflater.unconsumed_tail:
            data: bytes | memoryview = inflater.unconsumed_tail
        elif handed_back:
            data = handed_back.pop()
        elif pending:
            data, pending = pending[:CHUNK], pending[CHUNK:]
        else:
            break
        if out := inflater.decompress(data, CHUNK):
            yield out
        if inflater.eof:
            if inflater.unused_data:
                handed_back.append(inflater.unused_data)
            following = handed_back[-1] if handed_back else pending
            # Concatenated gzip members are one valid file; anything else after one is junk.
            if bytes(following[:2]) != GZIP_MAGIC:
                return
            inflater = zlib.decompressobj(_GZIP_WBITS)
    if not inflater.eof:
        raise EOFError


def _first_content(chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """The first chunk with more than whitespace, leading whitespace and a UTF-8 BOM removed,
    and the newlines removed with it; (b"", n) when there is nothing else.

    The whitespace goes because libxml2 refuses an XML declaration that does not come first,
    and generated sitemaps often start with a blank line or two.
    """
    newlines = 0
    for index, chunk in enumerate(chunks):
        if index == 0:
            chunk = chunk.removeprefix(b"\xef\xbb\xbf")
        content = chunk.lstrip()
        newlines += chunk.count(b"\n", 0, len(chunk) - len(content))
        if content:
            return content, newlines
    return b"", newlines


class _Locs:
    """The entries of one file: the first MAX_URLS kept when they are http(s) URLs."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.entries = 0
        self.bad = 0

    def add(self, text: str) -> None:
        self.entries += 1
        if self.entries > MAX_URLS:
            return  # counted, for the problem, and no more
        url = _normal_url(text.strip())
        if url is not None:
            self.urls.append(url)
        else:
            self.bad += 1

    def problems(self, unit: str) -> list[str]:
        problems: list[str] = []
        if self.entries > MAX_URLS:
            problems.append(f"{self.entries:,} URLs, only the first {MAX_URLS:,} read")
        if self.bad == 1:
            problems.append(f"1 {unit} is not an absolute http(s) URL: skipped")
        elif self.bad:
            problems.append(f"{self.bad:,} {unit}s are not absolute http(s) URLs: skipped")
        return problems


def _normal_url(url: str) -> str | None:
    """`url` as the client will send it (urls.normalize), or None when it is no http(s) URL."""
    try:
        return normalize(url)
    except URLError:
        return None


def _read_xml(
    chunks: Iterable[bytes], locs: _Locs, *, decoded: _Decoded, newlines: int
) -> tuple[str, list[str]]:
    """(kind, problems) of an XML sitemap, its <loc>s added to `locs` as they come, those
    before an XML error included."""
    target = _Target(locs)
    parser = etree.XMLParser(
        target=target,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
    )
    error = ""
    try:
        for chunk in chunks:
            parser.feed(chunk)
            if target.root and not target.kind:
                break  # not a sitemap: no need to read on
        else:
            # A cut or broken body would only add "premature end of data" to what is known.
            if decoded.complete:
                parser.close()
    except etree.LxmlError as exc:
        line = (exc.lineno or 1) + newlines if isinstance(exc, etree.ParseError) else 1
        error = f"XML error at line {line}: {_XML_POSITION.sub('', str(exc.msg or exc))}"
    if target.root and not target.kind:
        return "none", [f"not a sitemap (root element <{target.root}>)"]
    return target.kind or "none", [error] if error else []


class _Target:
    """An lxml parser target that keeps the <loc>s of a <urlset>'s <url>s or a
    <sitemapindex>'s <sitemap>s, and nothing else (no tree): a big file costs its URLs.

    The root's namespace is not checked (sitemaps.org's, none, or Google's old ones all come
    up); the <loc> must be in the root's, so that <image:loc> and the like are not pages.
    """

    def __init__(self, locs: _Locs) -> None:
        self.locs = locs
        self.root = ""  # the root element's local name, once seen
        self.kind = ""  # "urlset" | "index", when the root is one
        self._entry = self._loc = ""  # the tags, in the root's namespace
        self._depth = 0
        self._in_entry = False
        self._text: list[str] | None = None  # inside a <loc>
        self._size = 0

    def start(self, tag: str, attrib: object) -> None:
        self._depth += 1
        if self._depth == 1:
            self._start_root(tag)
        elif self._depth == 2:
            self._in_entry = tag == self._entry
        elif self._depth == 3 and self._in_entry and tag == self._loc:
            self._text, self._size = [], 0

    def _start_root(self, tag: str) -> None:
        self.root = tag.rpartition("}")[2]
        namespace = tag[: len(tag) - len(self.root)]
        entries = {"urlset": ("urlset", "url"), "sitemapindex": ("index", "sitemap")}
        if self.root in entries:
            self.kind, entry = entries[self.root]
            self._entry, self._loc = namespace + entry, namespace + "loc"

    def data(self, text: str) -> None:
        if self._text is not None and self._depth == 3:
            self._size += len(text)
            if self._size <= LOC_TEXT_LIMIT:  # past it, not a URL whatever follows
                self._text.append(text)

    def end(self, tag: str) -> None:
        if self._depth == 3 and self._text is not None:
            self.locs.add("".join(self._text) if self._size <= LOC_TEXT_LIMIT else "")
            self._text = None
        self._depth -= 1

    def close(self) -> None:
        return None


def _read_text(chunks: Iterable[bytes], locs: _Locs) -> tuple[str, list[str]]:
    """(kind, problems) of a plain-text sitemap: one URL a line, blank lines ignored."""
    for block in _blocks(chunks):
        lines = _LINE.findall(block)
        if locs.entries >= MAX_URLS:
            locs.entries += len(lines)  # only counted: 50 MB of lines, one by one, take seconds
            continue
        for line in lines:
            locs.add(line.decode("utf-8", "replace"))
    if not locs.urls and locs.bad:
        return "none", ["not a sitemap (neither XML nor a list of URLs)"]
    return "text", []


def _blocks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """A text in blocks of whole lines (each ends at a newline, but the last). A line longer
    than any URL is cut to just over that length, so a text without newlines is never held
    whole."""
    rest = b""
    for chunk in chunks:
        block = rest + chunk
        end = block.rfind(b"\n") + 1
        if end:
            yield block[:end]
        rest = block[end : end + MAX_URL_LENGTH + 1]
    if rest:
        yield rest


# -- robots.txt ---------------------------------------------------------------------------------


def robots_sitemaps(robots_text: str) -> list[str]:
    """The absolute http(s) URLs of a robots.txt's Sitemap: lines, in order, without repeats."""
    try:
        listed = list(Protego.parse(robots_text).sitemaps)
    except Exception:  # a site's file must never break a crawl
        return []
    return usable_sitemaps(listed)


def usable_sitemaps(listed: list[str]) -> list[str]:
    """The absolute http(s) URLs among Sitemap: lines, in order, without repeats. Anything
    else (a relative path, garbage) is left out: the protocol wants full URLs."""
    stripped = (url.strip() for url in listed if isinstance(url, str))
    return [url for url in dict.fromkeys(map(_normal_url, stripped)) if url is not None]
