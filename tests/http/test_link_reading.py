"""The link reader's callbacks (crawlhub/http/links.py's _Page), made cheaper per element, read
what they read before: each page's title, links and link texts, compared on thousands of
generated pages (misnested, unclosed, nested anchors and titles, image links, entities,
whitespace) and the bench site's pages with a plain reading of the same parser events; and the
whole reading of a page (its decoding, its links resolved) with the reading it replaced."""

from __future__ import annotations

import random
from urllib.parse import urlsplit

import pytest
from lxml import etree

from crawlhub.http import link_urls, links
from crawlhub.http.links import Resolver
from crawlhub.sample_site import HTML, SampleSite
from tests.http.test_link_extraction import the_long_way


class PlainReading:
    """The reading _Page does, written as plainly as it reads: told of every element and every
    piece of text, it keeps the first <title>'s text, the first <base href>, and each link with
    the text from its <a href> to the next </a> or <a href> (or its <img alt>, first)."""

    def __init__(self) -> None:
        self.hrefs: list[str] = []
        self.texts: dict[int, list[str]] = {}
        self.base: str | None = None
        self.title: list[str] | None = None
        self.in_title = 0
        self.anchor: int | None = None

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        value = None
        if tag in ("a", "area") and attrib.get("href"):
            value = attrib["href"]
            if tag == "a":
                self.anchor = len(self.hrefs)
                self.texts[self.anchor] = []
            else:
                self.texts[len(self.hrefs)] = [attrib.get("alt") or ""]
        elif tag == "img" and self.anchor is not None:
            if not self.texts[self.anchor] and attrib.get("alt"):
                self.texts[self.anchor].append(attrib["alt"])
        elif tag == "link":
            rels = (attrib.get("rel") or "").lower().split()
            if links.PAGE_RELS.intersection(rels):
                value = attrib.get("href")
        elif tag in ("frame", "iframe"):
            value = attrib.get("src")
        elif tag == "base" and self.base is None:
            self.base = attrib.get("href")
        elif tag == "title" and (self.in_title or self.title is None):
            self.title = self.title or []
            self.in_title += 1
        if value:
            self.hrefs.append(value)

    def end(self, tag: str) -> None:
        if tag == "title" and self.in_title:
            self.in_title -= 1
        elif tag == "a":
            self.anchor = None

    def data(self, text: str) -> None:
        if self.in_title:
            self.title.append(text)
        if self.anchor is not None:
            self.texts[self.anchor].append(text)

    def close(self) -> None:
        pass

    def read(self, body: bytes) -> tuple[str | None, list[str], list[str], str]:
        parser = etree.HTMLParser(target=self, encoding="utf-8")
        parser.feed(body)
        parser.close()
        return self.read_so_far()

    def read_so_far(self) -> tuple[str | None, list[str], list[str], str]:
        texts = [links._link_text("".join(self.texts.get(i, []))) for i in range(len(self.hrefs))]
        title = "".join(self.title or [])[: links.MAX_TITLE * 4]
        title = " ".join(links._visible(title).split())[: links.MAX_TITLE]
        return self.base, self.hrefs, texts, title


def read_by_page(body: bytes) -> tuple[str | None, list[str], list[str], str]:
    page, _encoding = links._parse(body, "text/html; charset=utf-8")
    return page.base, list(page.hrefs), page.texts(), page.title()


def generated_page(rng: random.Random) -> bytes:
    """Markup of the kinds the reader must tell apart, in any order, often misnested."""
    pieces = [
        '<a href="/a">', '<a href="b">', "<a>", '<a href="">', "</a>", "</a>", "<title>",
        "</title>", '<img alt="pic">', '<img alt="">', "<img>", '<area href="/m" alt="map">',
        '<area href="/n">', '<link rel="next" href="?p=2">', '<link rel="icon" href="/i">',
        '<iframe src="/f"></iframe>', '<frame src="/g">', '<base href="/base/">', "<base>",
        "<p>", "</p>", "<div>", "</div>", "<b>", "</b>", "<ul><li>", "</li></ul>", "<br>",
        "<script>var a = '<a href=x>';</script>", "<!-- <a href=/c> -->", "&amp;", "&lt;",
        "&eacute;", "&#8238;", " ", "\n", "\t", "  text  ", "word", "é", "\u202e", "\x0b",
        "<table><tr><td>", "</td></tr></table>", "<span>", "</span>", "<h1>", "</h1>",
    ]  # fmt: skip
    head = rng.choice(["", "<html><head>", "<!DOCTYPE html><html><head><title>T</title>"])
    body = "".join(rng.choices(pieces, k=rng.randint(1, 60)))
    if rng.random() < 0.1:
        body += "x" * rng.randint(500, 3000)  # a long text: the caps on what is kept
    return (head + body).encode("utf-8")


@pytest.mark.parametrize("seed", range(4))
def test_the_reader_reads_thousands_of_generated_pages_as_plainly_read(seed):
    rng = random.Random(seed)
    for _ in range(1000):
        body = generated_page(rng)
        assert read_by_page(body) == PlainReading().read(body), body


def test_the_reader_reads_the_bench_sites_pages_as_plainly_read():
    site = SampleSite(pages=2000, seed=3)
    for n in range(0, 2000, 7):
        _status, _headers, body = site.render(site.path_for(n), origin="http://127.0.0.1:8080")
        assert read_by_page(body) == PlainReading().read(body), n


# What a page is read whole for (crawlhub/http/links.py's extract_with_texts), made cheaper per
# page: a page of valid UTF-8 fed to the parser as it is rather than decoded and encoded again
# (_as_sent), the links' texts kept beside their hrefs and filtered in C, a page URL split by one
# match and its directory's parts read once (link_urls._split, _directory_parts), another
# scheme's links refused by one match. Each is compared below with the reading it replaced,
# written plainly: the body always decoded a slice at a time, the parser's events read by
# PlainReading, each link resolved the long way (joined, then normalize()).

BASES = [
    "http://127.0.0.1:8080/p/5",
    "https://a.com/d1/d2/p.html?x=1",
    "http://a.com",
    "http://a.com/p;v=1/q",
    "HTTP://A.com/x/",
    "http://[::1]:81/x?y",
    "http://a.com/d\t1/p",
]
CONTENT_TYPES = [
    "text/html; charset=utf-8",
    "text/html",
    "text/html; charset=windows-1252",
    "application/xhtml+xml; charset=UTF-8",
    "text/html; charset=utf-16",
    "text/html; charset=base64",
]


def read_plainly(body: bytes, url: str, content_type: str) -> tuple[str, list[str], list[str]]:
    """extract_with_texts as it read pages before, written plainly."""
    if not body or not links.is_html(content_type):
        return "", [], []
    encoding, start = links._encoding(body, content_type)
    encoding, decoder = links._decoder(encoding)
    fed = [
        decoder.decode(body[offset : offset + links.FEED_BYTES]).encode("utf-8")
        for offset in range(start, len(body), links.FEED_BYTES)
    ]
    fed.append(decoder.decode(b"", final=True).encode("utf-8"))
    reading = PlainReading()
    parser = etree.HTMLParser(target=reading, encoding="utf-8")
    try:
        for text in fed:
            parser.feed(text)
        parser.close()
    except (etree.ParserError, etree.LxmlError, ValueError):
        return "", [], []
    base, hrefs, texts, title = reading.read_so_far()
    try:
        resolver = Resolver(links._base_url(base, url), encoding)
    except ValueError:
        return title, [], []
    urls = [the_long_way(resolver, href) for href in hrefs]
    kept = [n for n, url in enumerate(urls) if url]
    return title, [urls[n] for n in kept], [texts[n] for n in kept]


NASTY = [
    # Anchors nested, unclosed, ended by another <a href> or by an </a> of an <a> without one.
    "<a href=/1>one<a href=/2>two</a>three</a>after",
    "<a href=/1><b><a href=/2>x</b>y</a>z",
    "<a href=/1>t<a>inner</a>after<a href=/2>",
    "<a href=/1><div><p><a href=/2>deep</p></div>tail",
    "<a href=/1>unclosed to the end" + " word" * 50,
    # Titles: anchors in them, in anchors, in the body, twice, unclosed, huge.
    "<title>T<a href=/t>in title</a> more</title><a href=/u>u</a>",
    "<body><a href=/x><title>Inner</title>text</a><title>second</title>",
    "<title>first</title><title>second</title>",
    "<title>never closed <a href=/n>n</a>",
    "<title>" + "Long title " * 400 + "</title><a href=/l>" + "long text " * 300 + "</a>",
    # Links inside what is no markup: comments, scripts, styles, textareas, CDATA.
    "<!-- <a href=/c>c</a> --><a href=/d>d</a>",
    "<script>document.write('<a href=\"/s\">s</a>')</script><a href=/t>t</a>",
    "<style>a[href]{}</style><textarea><a href=/ta>x</a></textarea>",
    "<noscript><a href=/ns>ns</a></noscript><![CDATA[<a href=/cd>cd</a>]]>",
    "<a href=/x><script>inside</script><!-- c -->text</a>",
    # Entities, controls, NUL, bidi, in texts, titles and hrefs.
    "<title>&amp; &lt;a href=x&gt; &#0; &#x110000; &nbsp;&notanentity;</title>",
    '<a href="/a?x=1&amp;y=2&copy=3&#10;z">&eacute;&#8238;txt&#x202e;</a>',
    "<title>a\x00b\x01\x1b[31m\x7f\x85\u202e\u200b</title><a href='/n\x00l'>x\x00y\x0b</a>",
    # Image links, areas, page rels, frames, bases.
    "<a href=/i><img alt='Logo'> Home</a><a href=/j> <img alt='x'></a><a href=/k><img alt=''>",
    "<a href=/i><img alt='one'><img alt='two'></a><img alt='out'>",
    "<map><area href=/m alt='map'><area href=/n><area alt='no href'></map>",
    "<link rel='NEXT' href=?p=2><link rel='icon next' href=/i><link rel=stylesheet href=/s>",
    "<frameset><frame src=/f><frame></frameset><iframe src='/g'></iframe>",
    "<base href=/b/><base href=/c/><a href=rel>r</a>",
    "<base href='javascript:x'><a href=rel>r</a>",
    "<base><base href=''><a href=rel>r</a>",
    # Links of other schemes, spelled every way.
    "<a href='HTTP://127.0.0.1:8080/x'>1</a><a href=' Mailto:x'>2</a><a href='java\tscript:y'>3",
    "<a href='https:x'>4</a><a href='x:y'>5</a><a href='1a:b'>6</a><a href='\n\fJavaScript:z'>7",
    "<a href='#top'>8</a><a href='?q'>9</a><a href='//h.org/x'>10</a><a href=':x'>11</a>",
    # Pages of almost nothing.
    "",
    " ",
    "\x00",
    "<",
    "<html></html>",
    "<a href=",
    "<!DOCTYPE html>",
]
NASTY_BYTES = [
    b"\xef\xbb\xbf<title>BOM</title><a href=/b>b</a>",
    b"\xef\xbb\xbf",
    b"\xff\xfe<\x00a\x00 \x00h\x00r\x00e\x00f\x00=\x00/\x00u\x00>\x00u\x00",
    b"<title>caf\xe9</title><a href='/caf\xe9'>caf\xe9</a>",  # not UTF-8 at all
    b"<meta charset='iso-8859-1'><title>caf\xc3\xa9</title><a href=/x>\xc3\xa9</a>",
    b"<meta charset='utf-8'><title>caf\xe9</title>",
    b"<title>surrogate \xed\xa0\x80 overlong \xc0\xaf cut \xe2\x82</title><a href=/s>\xf0\x9f</a>",
    b"<a href=/z>\x00\x00\x00</a>\x00<title>\x00</title>",
    b"\xfe\xff\x00<\x00t\x00i\x00t\x00l\x00e\x00>\x00T",
    # One slice and just over it, a character across the slice's end: fed as sent, or decoded.
    b"<title>\xc3\xa9</title>" + b"x" * (links.FEED_BYTES - 18) + b"\xc3\xa9<a href=/e>e</a>",
    b"<title>\xc3\xa9</title>" + b"x" * (links.FEED_BYTES - 17) + b"\xc3\xa9<a href=/e>e</a>",
]


def nasty_pages() -> list[bytes]:
    pages = [html.encode("utf-8") for html in NASTY] + NASTY_BYTES
    for html in NASTY[:10]:  # the same in other encodings, and cut anywhere
        pages.append(html.encode("cp1252", "replace"))
        pages.append(html.encode("utf-16"))
        pages.append(html.encode("utf-8")[: len(html) // 2])
    return pages


def nasty_generated_page(rng: random.Random) -> bytes:
    """generated_page's markup mixed with pieces of the nasty pages, in any encoding."""
    text = generated_page(rng).decode("utf-8") + "".join(rng.choices(NASTY, k=rng.randint(0, 4)))
    encoding = rng.choice(["utf-8", "utf-8", "utf-8", "cp1252", "utf-16", "latin-1"])
    body = text.encode(encoding, "replace")
    if rng.random() < 0.1:
        body = body[: rng.randint(0, len(body))]
    if rng.random() < 0.1:  # a stray byte: no longer valid UTF-8
        at = rng.randint(0, len(body))
        body = body[:at] + bytes([rng.choice([0x80, 0xC3, 0xE9, 0xFF, 0x00])]) + body[at:]
    return body


def assert_read_as_plainly(body: bytes, url: str, content_type: str) -> None:
    read = links.extract_with_texts(body, url, content_type)
    assert read == read_plainly(body, url, content_type), (body[:300], url, content_type)


def test_nasty_pages_are_read_whole_as_plainly_read_and_resolved_the_long_way():
    for body in nasty_pages():
        for url in BASES:
            for content_type in CONTENT_TYPES:
                assert_read_as_plainly(body, url, content_type)


@pytest.mark.parametrize("seed", range(4))
def test_generated_pages_are_read_whole_as_plainly_read_and_resolved_the_long_way(seed):
    rng = random.Random(seed)
    for _ in range(1000):
        body = nasty_generated_page(rng)
        assert_read_as_plainly(body, rng.choice(BASES), rng.choice(CONTENT_TYPES))


def test_the_bench_sites_pages_are_read_whole_as_plainly_read_and_resolved_the_long_way():
    site = SampleSite(pages=2000, seed=3)
    origin = "http://127.0.0.1:8080"
    for n in range(0, 2000, 7):
        path = site.path_for(n)
        _status, _headers, body = site.render(path, origin=origin)
        assert_read_as_plainly(body, origin + path, HTML)


def generated_base(rng: random.Random) -> str:
    schemes = ["http://", "https://", "HTTP://", "Https://", "ftp://", "", "http:", " http://"]
    hosts = ["a.com", "A.com", "127.0.0.1:8080", "a.com:80", "u:p@a.com", "[::1]", "[::1", "é.com"]
    hosts += ["a%41.com", "", "a;b", "a\tb", "a b", "a\\b", "ａ.com"]
    segments = ["", "d", "p.html", "p;v=1", "a b", "é", "\\", "..", ".", "%7e", "\t", "\n", "x:y"]
    tails = ["", "?", "?x=1", "?a/b", "?\n", "?é", "#f", "?q#f/g", "#"]
    path = "/".join(rng.choices(segments, k=rng.randint(0, 4)))
    return (
        rng.choice(schemes) + rng.choice(hosts) + rng.choice(["", "/"]) + path + rng.choice(tails)
    )


def split_plainly(base: str) -> tuple[str, str, str] | str:
    try:
        parts = urlsplit(base)
    except ValueError as exc:
        return str(exc)
    return parts.scheme.lower(), parts.netloc, parts.path


def test_page_urls_are_split_as_urlsplit_splits_them_and_their_directory_read_as_before():
    rng = random.Random(5)
    for _ in range(5000):
        base = generated_base(rng).partition("#")[0]
        try:
            split = link_urls._split(base)
        except ValueError as exc:
            split = str(exc)
        assert split == split_plainly(base), base
        if isinstance(split, str):
            continue
        resolver = Resolver(base)
        path = split[2] or "/"
        directory = path[: path.rfind("/") + 1]
        assert (resolver.origin, resolver.path, resolver.directory) == (
            f"{split[0]}://{split[1]}",
            path,
            directory,
        )
        assert resolver.directory_segments == directory.split("/")[:-1]
        here = resolver._join_dots(".", "") if resolver.plain else ""
        up = resolver._join_dots("..", "") if resolver.plain else ""
        assert (resolver.here, resolver.up) == (here, up), base
        starts = [link_urls._normal_start(start) for start in (directory, here, up)]
        assert list(resolver.starts.values()) == starts, base
