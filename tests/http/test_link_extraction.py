"""Link extraction: which links a page yields, resolved how, from which encodings and markup."""

from __future__ import annotations

import contextlib
import random
import sys
import time
from pathlib import Path
from urllib.parse import urljoin

import pytest

from crawlhub.http import link_urls
from crawlhub.http.links import MAX_LINKS, Resolver, extract
from crawls import services
from tests.support import processes
from tests.support.crawling import drive
from tests.support.sites import Response, pages_site

ROOT = Path(__file__).resolve().parents[2]

PAGE = "http://example.com/dir/page.html"


def links_of(html: str, base: str = PAGE, content_type: str = "text/html") -> list[str]:
    return extract(html.encode("utf-8"), base, content_type)[1]


def test_links_come_from_a_area_link_frame_and_iframe_in_document_order():
    html = """<html><head>
        <link rel="stylesheet" href="/style.css"><link rel="icon" href="/favicon.ico">
        <link rel="alternate" hreflang="de" href="/de/"><link rel="NEXT" href="?page=2">
        <link rel="prev start" href="?page=0">
    </head><body>
        <a href="one.html">1</a><map><area href="/area"></map>
        <iframe src="/embed"></iframe><frameset><frame src="frame.html"></frameset>
        <img src="/img.png"><script src="/app.js"></script><form action="/post"></form>
        <a>no href</a><a href="">self</a>
    </body></html>"""
    assert links_of(html) == [
        "http://example.com/de/",
        "http://example.com/dir/page.html?page=2",
        "http://example.com/dir/page.html?page=0",
        "http://example.com/dir/one.html",
        "http://example.com/area",
        "http://example.com/embed",
        "http://example.com/dir/frame.html",
    ]


def test_repeated_links_are_all_returned_and_fragments_dropped():
    html = '<a href="/x">1</a><a href="/x#top">2</a><a href="#section">3</a><a href="/x">4</a>'
    assert links_of(html) == [
        "http://example.com/x",
        "http://example.com/x",
        "http://example.com/dir/page.html",
        "http://example.com/x",
    ]


def test_nofollow_links_are_kept():
    assert links_of('<a rel="nofollow" href="/n">n</a>') == ["http://example.com/n"]


def test_only_http_and_https_links_are_kept():
    html = """
        <a href="mailto:someone@example.com">m</a><a href="javascript:void(0)">j</a>
        <a href=" JavaScript:alert(1)">j2</a><a href="data:text/html,<p>x</p>">d</a>
        <a href="tel:+15551234">t</a><a href="ftp://example.com/f">f</a>
        <a href="file:///etc/passwd">file</a><a href="news:comp.lang">n</a>
        <a href="https://secure.example.com/s">ok</a><a href="//cdn.example.com/c">ok2</a>
    """
    assert links_of(html) == ["https://secure.example.com/s", "http://cdn.example.com/c"]


def test_whitespace_around_and_inside_hrefs_is_removed():
    html = '<a href="  \n /spaced \t ">1</a><a href="/li\nne\tbreak">2</a>'
    assert links_of(html) == ["http://example.com/spaced", "http://example.com/linebreak"]


def test_relative_links_resolve_like_a_browser():
    html = """<a href="../up">1</a><a href="./same">2</a><a href="/abs">3</a>
              <a href="?q=1">4</a><a href="HTTP://Other.example.com/X">5</a>"""
    assert links_of(html) == [
        "http://example.com/up",
        "http://example.com/dir/same",
        "http://example.com/abs",
        "http://example.com/dir/page.html?q=1",
        "http://other.example.com/X",  # the host as browsers send it: lowercase
    ]


@pytest.mark.parametrize(
    "base", ["http://a.com/d1/d2/p.html?x=1", "https://a.com:8443/dir/", "http://a.com/"]
)
def test_resolver_agrees_with_urljoin(base):
    resolver = Resolver(base)
    for href in ["/a", "b/c?d=1", "//h.org/x", "https://h.org/", "../u", "./s", ".", "/./x", "y"]:
        assert resolver.absolute(href) == urljoin(base, href)


def generated_hrefs(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    segments = ["..", ".", "", "a", "b.html", "c;p=1", "%2e%2e", "...", "d.", ".e"]
    starts = ["", "/", "./", "../", "mailto:", "javascript:", "HTTP:", "x:y/", "1a:"]
    tails = ["", "?", "?q=1", "?a=../b", "??x", "?x=:y"]
    hrefs = []
    while len(hrefs) < count:
        href = rng.choice(starts) + "/".join(rng.choices(segments, k=rng.randint(1, 5)))
        path = href.partition("?")[0]
        # The hrefs a Resolver once sent to urljoin: dot segments, or a colon (a scheme).
        if not href.startswith("//") and ("/." in f"/{path}" or ":" in path):
            hrefs.append(href + rng.choice(tails))
    return hrefs


@pytest.mark.parametrize(
    "base",
    [
        "http://a.com/d1/d2/p.html?x=1",
        "https://a.com:8443/dir/",
        "http://a.com/",
        "http://a.com",
        "http://a.com/d1//d2/",
        "http://a.com/p;v=1/q",
        "http://a.com/..",
    ],
)
def test_resolver_joins_thousands_of_generated_hrefs_like_urljoin(base):
    resolver = Resolver(base)
    for href in generated_hrefs(3000, seed=len(base)):
        assert resolver.join(href) == urljoin(base, href), href


def test_base_href_is_honoured():
    html = '<head><base href="/other/dir/"></head><a href="rel">r</a><a href="/root">a</a>'
    assert links_of(html) == ["http://example.com/other/dir/rel", "http://example.com/root"]


def test_absolute_base_href_on_another_host_and_only_the_first_counts():
    html = '<base href="https://cdn.example.net/b/"><base href="/ignored/"><a href="x">x</a>'
    assert links_of(html) == ["https://cdn.example.net/b/x"]


def test_javascript_base_href_is_ignored():
    assert links_of('<base href="javascript:x"><a href="y">y</a>') == ["http://example.com/dir/y"]


def test_idn_host_becomes_punycode_and_non_ascii_paths_are_percent_encoded():
    html = '<a href="http://bücher.example/straße?q=ü">b</a><a href="/ünïcode path">u</a>'
    assert links_of(html) == [
        "http://xn--bcher-kva.example/stra%C3%9Fe?q=%C3%BC",
        "http://example.com/%C3%BCn%C3%AFcode%20path",
    ]


def test_title_is_stripped_collapsed_and_capped():
    title, _ = extract(b"<title>\n  Hello \t  <b>wide</b>\n world  </title>", PAGE, "text/html")
    assert title == "Hello <b>wide</b> world"  # <title> is text: tags inside are not markup
    long_title = "word " * 300
    title, _ = extract(f"<title>{long_title}</title>".encode(), PAGE, "text/html")
    assert len(title) == 500 and title.startswith("word word")


def test_page_without_title():
    assert extract(b"<p>no title</p>", PAGE, "text/html") == ("", [])


@pytest.mark.parametrize(
    ("content_type", "parsed"),
    [
        ("text/html", True),
        ("TEXT/HTML; charset=utf-8", True),
        ("application/xhtml+xml", True),
        ("text/plain", False),
        ("application/json", False),
        ("application/pdf", False),
        ("", False),
    ],
)
def test_only_html_content_types_are_parsed(content_type, parsed):
    result = extract(b"<title>T</title><a href='/x'>x</a>", PAGE, content_type)
    assert result == (("T", ["http://example.com/x"]) if parsed else ("", []))


def test_meta_charset_windows_1251():
    html = '<html><head><meta charset="windows-1251"><title>Привет, мир</title></head></html>'
    assert extract(html.encode("cp1251"), PAGE, "text/html")[0] == "Привет, мир"


def test_http_equiv_content_type_shift_jis():
    html = (
        '<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
        "<title>日本語のページ</title><a href='/検索?q=東京'>s</a>"
    )
    title, links = extract(html.encode("shift_jis"), PAGE, "text/html")
    assert title == "日本語のページ"
    # The path is UTF-8 percent-encoded; the query in the page's encoding, as browsers send it.
    assert links == ["http://example.com/%E6%A4%9C%E7%B4%A2?q=%93%8C%8B%9E"]


def test_content_type_charset_wins_over_meta():
    html = '<meta charset="utf-8"><title>Überschrift</title>'.encode("latin-1")
    assert extract(html, PAGE, "text/html; charset=ISO-8859-1")[0] == "Überschrift"


def test_byte_order_mark_and_xml_declaration():
    body = '\ufeff<?xml version="1.0" encoding="utf-8"?><html><title>BOM é</title></html>'
    assert extract(body.encode("utf-8"), PAGE, "application/xhtml+xml")[0] == "BOM é"


def test_undeclared_non_utf8_falls_back_to_windows_1252():
    assert extract("<title>café</title>".encode("cp1252"), PAGE, "text/html")[0] == "café"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   \n ",
        b"<",
        b"<!-- never closed",
        b"\x00\x01\x02\xff\xfe\xfd",
        b"<html><body><div><a href='/a'>unclosed <b><i><table><tr><td>",
        b"<a href='http://[::1/x'>bad ipv6</a><a href='/fine'>ok</a>",
        b"<title>\x00bell\x07</title>",
        b"<a href='/x'" + b"<div>" * 5000,
        "<title>broken ",
    ],
)
def test_malformed_markup_never_raises(body):
    data = body.encode() if isinstance(body, str) else body
    title, links = extract(data, PAGE, "text/html")
    assert isinstance(title, str) and title.isprintable()
    assert all(link.startswith("http://example.com/") for link in links)


def test_malformed_page_still_yields_its_links():
    body = b"<html><body><p>text <a href='/a'>a<div><a href=/b>b</p></span><a href=\"/c\">"
    assert extract(body, PAGE, "text/html")[1] == [
        "http://example.com/a",
        "http://example.com/b",
        "http://example.com/c",
    ]


def test_100000_links_in_under_a_second():
    body = "<title>Many</title>" + "".join(
        f'<a href="/p/{i}?x=1#f">l{i}</a><a href="item{i}">r</a>' for i in range(50_000)
    )
    data = body.encode()
    # CPU time, not wall time: other test runs share this machine's cores.
    started = time.process_time()
    title, links = extract(data, PAGE, "text/html")
    assert time.process_time() - started < 1
    assert title == "Many" and len(links) == 100_000
    assert links[:2] == ["http://example.com/p/0?x=1", "http://example.com/dir/item0"]


# C0 and C1 controls, bidi embeddings, overrides and isolates, and the invisible marks that
# reorder or hide text: a title is shown in pages, terminals (the CLI) and spreadsheets.
HOSTILE_TITLE_CHARACTERS = (
    "\x1b"
    "\x07\x08\x7f"
    "\u0085\u009b\u008d"
    "\u202a\u202b\u202c\u202d\u202e"
    "\u2066\u2067\u2068\u2069"
    "\u200e\u200f\u061c"
    "\u2028\u2029"
    "\ufeff\u200b"
)


@pytest.mark.django_db
def test_a_crawled_title_keeps_no_control_or_bidi_characters(user, make_site):
    raw = "Invoice \u202eFDP.exe\u202c \x1b[2Jcleared\x1b[31m" + HOSTILE_TITLE_CHARACTERS + " end"
    referenced = "Ref&#x1b;&#27;&#x202E;&#x2067;&#x9B;&#8232;ok"
    site = make_site(
        pages_site(
            {
                "/": Response(body=f"<title>{raw}</title><a href='/ref'>r</a>".encode()),
                "/ref": Response(body=f"<title>{referenced}</title>".encode()),
                "/latin": Response(
                    body="<title>caf\xe9 \x1b</title>".encode("cp1252"),
                    content_type="text/html; charset=windows-1252",
                ),
            }
        )
    )
    crawl = services.crawl_create(
        user=user, name="titles", seeds=[site.url + "/", site.url + "/latin"], obey_robots=False
    )
    services.crawl_start(crawl=crawl, user=user)
    drive(crawl)
    titles = dict(crawl.pages.values_list("url", "title"))
    # Each control goes; a line or paragraph separator is a space like any other.
    assert titles[site.url + "/"] == "Invoice FDP.exe [2Jcleared[31m end"
    assert titles[site.url + "/ref"] == "Ref› ok"  # &#x9B; is "›" in HTML (as in Windows-1252)
    assert titles[site.url + "/latin"] == "café"
    for title in titles.values():
        assert not set(title) & set(HOSTILE_TITLE_CHARACTERS), repr(title)


def test_a_page_yields_at_most_max_links_the_first_ones():
    body = "".join(f'<a href="/p/{i}">{i}</a>' for i in range(MAX_LINKS + 20_000)).encode()
    links = extract(body, PAGE, "text/html")[1]
    assert len(links) == MAX_LINKS == 100_000
    assert links[-1] == f"http://example.com/p/{MAX_LINKS - 1}"


# What a child process holds at its highest: Python, lxml and the page, then the extraction.
PARSE_IN_A_CHILD = """
import sys
from crawlhub.http.links import extract
from tests.support.slice_process import peak_rss_of_this_process
body = b"<title>T</title>" + sys.argv[1].encode() * (10 * 1024 * 1024 // len(sys.argv[1]))
before = peak_rss_of_this_process()
title, links = extract(body, "http://example.com/", "text/html; charset=utf-8")
assert title == "T", title
print((peak_rss_of_this_process() - before) // 2**20, len(links))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("element", "found"), [("<p>", 0), ("<a href=/a>x</a>", MAX_LINKS), ("<a href=/é>", MAX_LINKS)]
)
def test_a_10_mb_page_of_elements_is_parsed_in_bounded_memory(element, found):
    """A tree of its 2,600,000 <p> took 440 MB: the parser builds none."""
    result = processes.run(
        [sys.executable, "-c", PARSE_IN_A_CHILD, element],
        cwd=ROOT,
        timeout=120,
        capture_output=True,
        text=True,
        check=True,
    )
    grown_mb, links = map(int, result.stdout.split())
    assert links == found
    assert grown_mb < 40, f"extracting links from a 10 MB page took {grown_mb} MB more"


@pytest.mark.parametrize("base", ["http://a.com/d/p.html", "https://a.com:8443/", "http://a.com"])
def test_absolute_links_to_the_pages_own_origin_resolve_as_through_normalize(base):
    """Absolute links back to the page's own origin (most links of many sites) take the same
    shortcut as "/path" links: the same URL as normalize() gives, whatever follows the origin."""
    resolver = Resolver(base)
    origin = resolver.origin
    tails = [
        "/",
        "/x",
        "/a/b.html?q=1&r=2",
        "/a b",
        "/%7e",
        "/ü",
        "/./x",
        "/a/../b",
        "//x",
        "/x#f",
        "?q",
        "#f",
        "",
        ":8443/x",
        ":443/x",
        "@evil.com/",
        ".evil.com/",
        "/x?a=%2",
        "/" + "x" * 9000,
        "/X/Y?Z=1",
        "/a;b",
        "/a%2Fb",
        "/a\\b",
    ]
    for tail in tails:
        href = origin + tail
        expected = slow = urljoin(base, href.partition("#")[0])
        with contextlib.suppress(ValueError):
            expected = link_urls._http_only(slow, "utf-8")
        assert resolver.absolute(href) == expected, href


def test_absolute_links_to_the_pages_own_origin_are_not_normalized_one_by_one(monkeypatch):
    """A link that is the page's origin followed by a path in normal form is in normal form:
    normalize() (a parse of the whole URL) is not asked about it."""
    asked = []
    normalize = link_urls.normalize

    def counting(url, *args, **kwargs):
        asked.append(url)
        return normalize(url, *args, **kwargs)

    monkeypatch.setattr(link_urls, "normalize", counting)
    html = "".join(f'<a href="http://example.com/p/{n}?x={n}">{n}</a>' for n in range(20))
    found = links_of(html)
    assert found == [f"http://example.com/p/{n}?x={n}" for n in range(20)]
    assert asked == ["http://example.com/"]  # the page's origin, once (Resolver.normal_origin)


def the_long_way(resolver: Resolver, href: str) -> str | None:
    """What Resolver.absolute gives without a shortcut: each link joined by Resolver.join (which
    joins as urljoin does: the tests above), then put in the client's normal form (a query in
    the page's encoding)."""
    href = href.strip(" \t\n\r\f").replace("\t", "").replace("\n", "").replace("\r", "")
    href = href.partition("#")[0]
    try:
        url = resolver.join(href) if href else resolver.base
    except ValueError:
        return None
    return link_urls._http_only(url, resolver.encoding)


def shortcut_hrefs(origin: str, count: int, seed: int) -> list[str]:
    """Links of the shapes the shortcuts read (relative, "./", "../", "?q", the origin with its
    scheme in any case) and their near misses: empty and dot segments, ";", "%", "\\", spaces,
    non-ASCII, a fragment, another scheme or host."""
    rng = random.Random(seed)
    host = origin.partition("://")[2]
    starts = [
        "", "/", "./", "../", "../../", ".//", "..//", "?", "#", " ", "\n/", origin,
        origin.upper(), "HTTP://" + host, "Https://" + host, "http://" + host.upper(),
        "hTTp://" + host, "mailto:", "JavaScript:", "HTTP:", "//" + host, "x:",
    ]  # fmt: skip
    segments = [
        "a",
        "b.html",
        "p",
        "12",
        "",
        ".",
        "..",
        "c;p=1",
        "d;",
        "%41",
        "%2e",
        "é",
        "a b",
        "\\",
    ]
    tails = ["", "?", "?q=1", "?a=../b", "??x", "?x=:y", "#f", "#", "?q#f", "?é"]
    hrefs = []
    for _ in range(count):
        path = "/".join(rng.choices(segments, k=rng.randint(0, 4)))
        hrefs.append(rng.choice(starts) + path + rng.choice(tails))
    return hrefs


@pytest.mark.parametrize(
    "base",
    [
        "http://a.com/d1/d2/p.html?x=1",
        "https://a.com:8443/dir/",
        "http://a.com/",
        "http://127.0.0.1:8080/p/5",
        "http://a.com/d1//d2/",
        "http://a.com/p;v=1/q",
        "http://a.com/..",
        "http://a.com/%7e/x",
    ],
)
def test_links_resolve_through_the_shortcuts_as_the_long_way(base):
    """Resolver.absolute reads most links without urljoin or normalize() (the origin and a
    path, "/path", "path", "./path", "../path", "?q", "HTTP://host/path", "mailto:"): the same
    URL as joining and normalize() give, on thousands of links of those shapes and near misses."""
    resolver = Resolver(base)
    for href in shortcut_hrefs(resolver.origin, 4000, seed=len(base)):
        assert resolver.absolute(href) == the_long_way(resolver, href), (base, href)
