"""The link reader's callbacks (crawlhub/http/links.py's _Page), made cheaper per element, read
what they read before: each page's title, links and link texts, compared on thousands of
generated pages (misnested, unclosed, nested anchors and titles, image links, entities,
whitespace) and the bench site's pages with a plain reading of the same parser events."""

from __future__ import annotations

import random

import pytest
from lxml import etree

from crawlhub.http import links
from crawlhub.sample_site import SampleSite


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

    def read(self, body: bytes) -> tuple[str | None, list[str], list[str]]:
        parser = etree.HTMLParser(target=self, encoding="utf-8")
        parser.feed(body)
        parser.close()
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
