"""Sitemaps: finding them (robots.txt, /sitemap.xml, indexes), reading every form they come in,
and staying safe and small with the hostile ones. Real local sites, fetched by a real Fetcher.
"""

from __future__ import annotations

import gzip
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlhub.http.client import Fetcher
from crawlhub.http.urls import is_http_url
from crawls.engine.sitemaps import (
    MAX_SITEMAP_BYTES,
    MAX_URLS,
    Found,
    discover,
    parse,
    robots_sitemaps,
)
from tests.support.fuzzing import PROPERTY
from tests.support.sites import LocalSite, Response, free_port, pages_site

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
MiB = 1024 * 1024


@dataclass
class Site:
    """A local site whose pages can be added once its URL is known."""

    local: LocalSite
    pages: dict[str, str | Response]

    @property
    def url(self) -> str:
        return self.local.url

    def paths(self) -> list[str]:
        return self.local.paths()


@pytest.fixture
def new_site(make_site) -> Callable[[], Site]:
    def make() -> Site:
        pages: dict[str, str | Response] = {}
        return Site(make_site(pages_site(pages)), pages)

    return make


@pytest.fixture
def site(new_site) -> Site:
    return new_site()


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(timeout=5, max_bytes=60 * MiB)
    yield f
    f.close()


def read(
    fetcher: Fetcher,
    *seeds: str,
    allows: Callable[[str], bool] = lambda url: True,
    robots_text: Callable[[str], str | None] = lambda origin: None,
    max_sitemaps: int = 500,
) -> list[Found]:
    found = discover(
        seeds=list(seeds), get=fetcher.get, robots_text=robots_text, allows=allows,
        max_sitemaps=max_sitemaps,
    )  # fmt: skip
    return list(found)


def xml(body: str | bytes, content_type: str = "application/xml") -> Response:
    return Response(body=body, content_type=content_type)


def urlset(*urls: str) -> Response:
    entries = "".join(f"<url><loc>{escape(url)}</loc></url>" for url in urls)
    return xml(f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{NS}">{entries}</urlset>')


def index(*urls: str, namespace: str = NS) -> Response:
    entries = "".join(f"<sitemap><loc>{escape(url)}</loc></sitemap>" for url in urls)
    xmlns = f' xmlns="{namespace}"' if namespace else ""
    return xml(f"<sitemapindex{xmlns}>{entries}</sitemapindex>")


def robots(*sitemaps: str) -> str:
    return "User-agent: *\nDisallow: /private/\n" + "".join(f"Sitemap: {u}\n" for u in sitemaps)


# -- finding the sitemaps -----------------------------------------------------------------------


def test_a_urlset_at_sitemap_xml_is_found_without_robots_txt(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<urlset xmlns="{NS}">\n  <url>\n    <loc>\n      {u}/a\n    </loc>\n'
        f"    <lastmod>2024-05-01</lastmod>\n  </url>\n"
        f"  <url><loc>{u}/b?x=1&amp;y=2</loc></url>\n  <url><loc>{u}/c</loc></url>\n</urlset>"
    )
    assert read(fetcher, f"{u}/start") == [
        Found(sitemap=f"{u}/sitemap.xml", urls=[f"{u}/a", f"{u}/b?x=1&y=2", f"{u}/c"], problems=[])
    ]
    assert site.paths() == ["/robots.txt", "/sitemap.xml"]


def test_robots_txt_sitemaps_are_read_in_order_before_sitemap_xml(fetcher, site):
    u = site.url
    site.pages["/robots.txt"] = robots(f"{u}/one.xml", f"{u}/two.xml")
    site.pages["/one.xml"] = urlset(f"{u}/1")
    site.pages["/two.xml"] = urlset(f"{u}/2")
    site.pages["/sitemap.xml"] = urlset(f"{u}/3")
    assert read(fetcher, u) == [
        Found(sitemap=f"{u}/one.xml", urls=[f"{u}/1"], problems=[]),
        Found(sitemap=f"{u}/two.xml", urls=[f"{u}/2"], problems=[]),
        Found(sitemap=f"{u}/sitemap.xml", urls=[f"{u}/3"], problems=[]),
    ]


def test_a_sitemap_xml_that_robots_txt_lists_is_read_once_in_its_place(fetcher, site):
    u = site.url
    site.pages["/robots.txt"] = robots(f"{u}/sitemap.xml", f"{u}/other.xml", f"{u}/sitemap.xml")
    site.pages["/sitemap.xml"] = urlset(f"{u}/1")
    site.pages["/other.xml"] = urlset(f"{u}/2")
    assert [found.sitemap for found in read(fetcher, u)] == [f"{u}/sitemap.xml", f"{u}/other.xml"]
    assert site.paths() == ["/robots.txt", "/sitemap.xml", "/other.xml"]


def test_the_crawls_own_copy_of_robots_txt_is_used_when_it_has_one(fetcher, site):
    u = site.url
    site.pages["/listed.xml"] = urlset(f"{u}/1")
    asked: list[str] = []

    def robots_text(origin: str) -> str | None:
        asked.append(origin)
        return robots(f"{u}/listed.xml")

    found = read(fetcher, f"{u}/a/b?c", robots_text=robots_text)
    assert found == [Found(sitemap=f"{u}/listed.xml", urls=[f"{u}/1"], problems=[])]
    assert asked == [u]
    assert site.paths() == ["/listed.xml", "/sitemap.xml"]


def test_each_site_of_the_seeds_is_read_once(fetcher, new_site):
    one, two = new_site(), new_site()
    one.pages["/sitemap.xml"] = urlset(f"{one.url}/1")
    two.pages["/sitemap.xml"] = urlset(f"{two.url}/2")
    seeds = [f"{one.url}/a", "mailto:x@example.com", f"{one.url}/b?q=1", f"{two.url}/", one.url]
    assert read(fetcher, *seeds) == [
        Found(sitemap=f"{one.url}/sitemap.xml", urls=[f"{one.url}/1"], problems=[]),
        Found(sitemap=f"{two.url}/sitemap.xml", urls=[f"{two.url}/2"], problems=[]),
    ]
    assert one.paths() == two.paths() == ["/robots.txt", "/sitemap.xml"]


def test_an_index_leads_to_its_urlsets_and_nested_indexes_breadth_first(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = index(f"{u}/pages-1.xml", f"{u}/nested.xml")
    site.pages["/nested.xml"] = index(f"{u}/pages-2.xml", namespace="")  # no namespace works too
    site.pages["/pages-1.xml"] = urlset(f"{u}/a", f"{u}/b")
    site.pages["/pages-2.xml"] = urlset(f"{u}/c")
    assert read(fetcher, u) == [
        Found(sitemap=f"{u}/sitemap.xml", urls=[], problems=[]),
        Found(sitemap=f"{u}/pages-1.xml", urls=[f"{u}/a", f"{u}/b"], problems=[]),
        Found(sitemap=f"{u}/nested.xml", urls=[], problems=[]),
        Found(sitemap=f"{u}/pages-2.xml", urls=[f"{u}/c"], problems=[]),
    ]


def test_an_index_that_lists_itself_is_read_once(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = index(f"{u}/sitemap.xml", f"{u}/again.xml")
    site.pages["/again.xml"] = index(f"{u}/sitemap.xml", f"{u}/again.xml", f"{u}/pages.xml")
    site.pages["/pages.xml"] = urlset(f"{u}/a")
    assert [(found.sitemap, found.urls) for found in read(fetcher, u)] == [
        (f"{u}/sitemap.xml", []),
        (f"{u}/again.xml", []),
        (f"{u}/pages.xml", [f"{u}/a"]),
    ]
    assert site.paths() == ["/robots.txt", "/sitemap.xml", "/again.xml", "/pages.xml"]


def test_indexes_are_followed_three_levels_deep(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = index(f"{u}/level-1.xml")
    site.pages["/level-1.xml"] = index(f"{u}/level-2.xml")
    site.pages["/level-2.xml"] = index(f"{u}/level-3.xml", f"{u}/pages-3.xml")
    site.pages["/level-3.xml"] = index(f"{u}/level-4.xml")
    site.pages["/pages-3.xml"] = urlset(f"{u}/deep")
    site.pages["/level-4.xml"] = urlset(f"{u}/too-deep")
    found = read(fetcher, u)
    assert found[-2:] == [
        Found(
            sitemap=f"{u}/level-3.xml", urls=[],
            problems=[
                f"{u}/level-3.xml: 1 sitemap it lists not read: indexes are followed 3 levels "
                "deep at most"
            ],
        ),
        Found(sitemap=f"{u}/pages-3.xml", urls=[f"{u}/deep"], problems=[]),
    ]  # fmt: skip
    assert "/level-4.xml" not in site.paths()


def test_reading_stops_at_max_sitemaps(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = index(*(f"{u}/pages-{n}.xml" for n in range(1, 6)))
    for n in range(1, 6):
        site.pages[f"/pages-{n}.xml"] = urlset(f"{u}/{n}")
    assert read(fetcher, u, max_sitemaps=3) == [
        Found(
            sitemap=f"{u}/sitemap.xml", urls=[],
            problems=[f"{u}/sitemap.xml: 3 sitemaps not read: the limit of 3 sitemaps was reached"],
        ),
        Found(sitemap=f"{u}/pages-1.xml", urls=[f"{u}/1"], problems=[]),
        Found(sitemap=f"{u}/pages-2.xml", urls=[f"{u}/2"], problems=[]),
    ]  # fmt: skip
    assert site.paths() == ["/robots.txt", "/sitemap.xml", "/pages-1.xml", "/pages-2.xml"]


def test_a_site_past_max_sitemaps_gets_one_problem(fetcher, new_site):
    one, two = new_site(), new_site()
    one.pages["/sitemap.xml"] = urlset(f"{one.url}/1")
    two.pages["/robots.txt"] = robots(f"{two.url}/listed.xml")
    assert read(fetcher, one.url, two.url, max_sitemaps=1) == [
        Found(sitemap=f"{one.url}/sitemap.xml", urls=[f"{one.url}/1"], problems=[]),
        Found(
            sitemap=two.url, urls=[],
            problems=[f"{two.url}: 2 sitemaps not read: the limit of 1 sitemap was reached"],
        ),
    ]  # fmt: skip
    assert two.paths() == ["/robots.txt"]


# -- what is in scope ---------------------------------------------------------------------------


def test_urls_outside_the_scope_are_left_out_and_counted(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = urlset(f"{u}/blog/1", f"{u}/shop/1", f"{u}/blog/2", f"{u}/shop/2")
    found = read(fetcher, u, allows=lambda url: "/blog/" in url)
    assert found == [
        Found(
            sitemap=f"{u}/sitemap.xml", urls=[f"{u}/blog/1", f"{u}/blog/2"],
            problems=[f"{u}/sitemap.xml: 2 URLs outside the crawl's scope: left out"],
        )
    ]  # fmt: skip


def test_a_sitemap_on_another_host_is_read_and_its_urls_still_scoped(fetcher, new_site):
    home, elsewhere = new_site(), new_site()
    home.pages["/robots.txt"] = robots(f"{elsewhere.url}/for-home.xml")
    elsewhere.pages["/for-home.xml"] = urlset(f"{home.url}/a", f"{elsewhere.url}/b")
    found = read(fetcher, home.url, allows=lambda url: url.startswith(home.url + "/"))
    assert found == [
        Found(
            sitemap=f"{elsewhere.url}/for-home.xml", urls=[f"{home.url}/a"],
            problems=[f"{elsewhere.url}/for-home.xml: 1 URL outside the crawl's scope: left out"],
        )
    ]  # fmt: skip
    assert elsewhere.paths() == ["/for-home.xml"]  # not a seed: its own sitemaps are not looked for


def test_only_the_locs_of_url_entries_are_pages(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<urlset xmlns="{NS}" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
        f"<url><loc>{u}/page</loc><image:image><image:loc>{u}/photo.jpg</image:loc>"
        f"</image:image><extra><loc>{u}/nested</loc></extra></url>"
        f"<loc>{u}/stray</loc><other><loc>{u}/other</loc></other></urlset>"
    )
    assert read(fetcher, u) == [Found(sitemap=f"{u}/sitemap.xml", urls=[f"{u}/page"], problems=[])]


# -- the forms a sitemap comes in ---------------------------------------------------------------


def test_a_gzipped_sitemap_is_read_whatever_it_is_labelled(fetcher, site):
    u = site.url
    site.pages["/robots.txt"] = robots(f"{u}/pages.xml.gz", f"{u}/download", f"{u}/encoded.xml")
    site.pages["/pages.xml.gz"] = Response(
        body=gzip.compress(urlset(f"{u}/1").body.encode()), content_type="application/gzip"
    )
    site.pages["/download"] = Response(
        body=gzip.compress(urlset(f"{u}/2").body.encode()),
        content_type="application/octet-stream",
    )
    site.pages["/encoded.xml"] = Response(  # gzip as a Content-Encoding: the Fetcher undoes it
        body=gzip.compress(urlset(f"{u}/3").body.encode()),
        content_type="application/xml", headers={"Content-Encoding": "gzip"},
    )  # fmt: skip
    assert read(fetcher, u) == [
        Found(sitemap=f"{u}/pages.xml.gz", urls=[f"{u}/1"], problems=[]),
        Found(sitemap=f"{u}/download", urls=[f"{u}/2"], problems=[]),
        Found(sitemap=f"{u}/encoded.xml", urls=[f"{u}/3"], problems=[]),
    ]


def test_a_gzip_file_that_ends_early_keeps_what_came(fetcher, site):
    u = site.url
    text = "".join(f"{u}/{n}\n" for n in range(1000)).encode()
    site.pages["/sitemap.xml"] = Response(body=gzip.compress(text)[:-100])
    (found,) = read(fetcher, u)
    assert found.urls[:3] == [f"{u}/0", f"{u}/1", f"{u}/2"] and len(found.urls) < 1000
    assert found.problems == [f"{u}/sitemap.xml: gzip data ends early: read what came"]


def test_a_plain_text_sitemap_lists_one_url_per_line(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = Response(
        body=f"\ufeff{u}/a\r\n\n   {u}/b  \n/relative\n\n{u}/c", content_type="text/plain"
    )
    assert read(fetcher, u) == [
        Found(
            sitemap=f"{u}/sitemap.xml", urls=[f"{u}/a", f"{u}/b", f"{u}/c"],
            problems=[f"{u}/sitemap.xml: 1 line is not an absolute http(s) URL: skipped"],
        )
    ]  # fmt: skip


def test_blank_lines_and_a_bom_before_the_xml_declaration_are_fine(fetcher, site):
    u = site.url
    body = urlset(f"{u}/a").body
    site.pages["/sitemap.xml"] = xml(b"\xef\xbb\xbf\n\n  " + body.encode())
    assert read(fetcher, u) == [Found(sitemap=f"{u}/sitemap.xml", urls=[f"{u}/a"], problems=[])]


def test_locs_that_are_not_absolute_http_urls_are_skipped_and_counted(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = urlset(
        f"{u}/ok", "/relative", "page.html", "ftp://example.com/f", "javascript:alert(1)",
        f"{u}/with space", "", f"{u}/ok-too",
    )  # fmt: skip
    assert read(fetcher, u) == [
        Found(
            sitemap=f"{u}/sitemap.xml", urls=[f"{u}/ok", f"{u}/ok-too"],
            problems=[f"{u}/sitemap.xml: 6 <loc>s are not absolute http(s) URLs: skipped"],
        )
    ]  # fmt: skip


@pytest.mark.slow
def test_a_sitemap_of_60000_urls_is_read_up_to_50000(fetcher, site):
    u = site.url
    urls = [f"{u}/p/{n}" for n in range(60_000)]
    site.pages["/sitemap.xml"] = urlset(*urls)
    (found,) = read(fetcher, u)
    assert found.urls == urls[:MAX_URLS]
    assert found.problems == [f"{u}/sitemap.xml: 60,000 URLs, only the first 50,000 read"]


# -- what goes wrong ----------------------------------------------------------------------------


def test_malformed_xml_keeps_the_urls_before_the_error(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<urlset xmlns="{NS}">\n<url><loc>{u}/a</loc></url>\n'
        f"<url><loc>{u}/b</lo></url>\n<url><loc>{u}/c</loc></url>\n</urlset>"
    )
    (found,) = read(fetcher, u)
    assert found.urls == [f"{u}/a"]
    (problem,) = found.problems
    assert problem.startswith(f"{u}/sitemap.xml: XML error at line 3: ")
    assert "mismatch" in problem


def test_an_html_page_at_sitemap_xml_is_not_a_sitemap(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = "<!DOCTYPE html><html><body><p>Home&nbsp;page<br></body></html>"
    assert read(fetcher, u) == [
        Found(
            sitemap=f"{u}/sitemap.xml", urls=[],
            problems=[f"{u}/sitemap.xml: not a sitemap (root element <html>)"],
        )
    ]  # fmt: skip


def test_a_listed_sitemap_that_is_missing_is_a_problem_an_unlisted_one_is_not(fetcher, site):
    u = site.url
    site.pages["/robots.txt"] = robots(f"{u}/gone.xml")
    assert read(fetcher, u) == [
        Found(sitemap=f"{u}/gone.xml", urls=[], problems=[f"{u}/gone.xml: HTTP 404"])
    ]
    assert site.paths() == ["/robots.txt", "/gone.xml", "/sitemap.xml"]


def test_a_server_error_at_sitemap_xml_is_a_problem(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = Response(status=503, body="busy")
    assert read(fetcher, u) == [
        Found(sitemap=f"{u}/sitemap.xml", urls=[], problems=[f"{u}/sitemap.xml: HTTP 503"])
    ]


def test_a_robots_txt_that_is_not_there_lists_no_sitemaps(fetcher, site):
    u = site.url
    site.pages["/robots.txt"] = Response(status=500, body=robots(f"{u}/listed.xml"))
    site.pages["/listed.xml"] = urlset(f"{u}/a")
    assert read(fetcher, u) == []
    assert site.paths() == ["/robots.txt", "/sitemap.xml"]


def test_an_unreachable_sitemap_is_a_problem(fetcher, site):
    nowhere = f"http://127.0.0.1:{free_port()}/sitemap.xml"
    site.pages["/robots.txt"] = robots(nowhere)
    assert read(fetcher, site.url) == [
        Found(sitemap=nowhere, urls=[], problems=[f"{nowhere}: connection refused"])
    ]


def test_a_download_cut_at_the_size_limit_is_a_problem(site):
    u = site.url
    site.pages["/sitemap.xml"] = urlset(*(f"{u}/{n}" for n in range(100)))
    with Fetcher(timeout=5, max_bytes=500) as small:
        (found,) = read(small, u)
    assert found.urls[:2] == [f"{u}/0", f"{u}/1"] and len(found.urls) < 100
    assert found.problems[0].startswith(f"{u}/sitemap.xml: XML error at line 1: ")
    assert found.problems[1:] == [f"{u}/sitemap.xml: cut at the download size limit (500 bytes)"]


# -- hostile files ------------------------------------------------------------------------------


def gzip_of(head: bytes, block: bytes, count: int) -> bytes:
    """gzip of `head` then `count` times `block`, in well under a second for a gigabyte: after
    a full flush deflate starts afresh, so each further `block` compresses to the same bytes,
    made once and repeated."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = packer.compress(head + block) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush()[:-8]  # the trailer counts two blocks: written again for all of them
    crc = zlib.crc32(head + block)
    for _ in range(count - 1):
        crc = zlib.crc32(block, crc)
    size = (len(head) + count * len(block)) & 0xFFFFFFFF
    return first + again * (count - 1) + end + struct.pack("<II", crc, size)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("head", "block", "what_is_read"),
    [
        (b"", bytes(MiB), "not a sitemap (neither XML nor a list of URLs)"),
        (b"<urlset><url><loc>{u}/a</loc></url>", b" " * MiB, ""),
        (b"<urlset><url><loc>{u}/a</loc></url><url><loc>{u}/", b"a" * MiB, ""),
    ],
    ids=["zeros", "a-urlset-then-spaces", "a-loc-that-never-ends"],
)
def test_a_gzip_bomb_is_read_to_50_mb_in_bounded_memory(fetcher, site, head, block, what_is_read):
    u = site.url
    bomb = gzip_of(head.replace(b"{u}", u.encode()), block, 1024)  # 1 GiB decompressed
    assert len(bomb) < 2 * MiB
    site.pages["/sitemap.xml"] = Response(body=bomb, content_type="application/gzip")
    tracemalloc.start()
    try:
        found = read(fetcher, u)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    sitemap = f"{u}/sitemap.xml"
    problems = [f"{sitemap}: {what_is_read}"] if what_is_read else []
    problems.append(f"{sitemap}: more than 50 MB once decompressed: read the first 50 MB")
    assert found == [Found(sitemap=sitemap, urls=[f"{u}/a"] if head else [], problems=problems)]
    # The 50 MB go through a chunk at a time (about 2 MB at the peak here): holding them, or
    # a <loc> that never ends, would take 50.
    assert peak < 16 * MiB


@pytest.mark.slow
def test_a_plain_body_over_50_mb_is_read_to_50_mb(site):
    u = site.url
    body = f"{u}/a\n".encode() + b"\n" * MAX_SITEMAP_BYTES
    sitemap = parse(body, f"{u}/sitemap.xml")
    assert sitemap.locs == [f"{u}/a"]
    assert sitemap.problems == [f"{u}/sitemap.xml: more than 50 MB: read the first 50 MB"]


def test_an_external_entity_does_not_read_a_local_file(fetcher, site, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-7f3a")
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x SYSTEM "file://{secret}">]>'
        f'<urlset xmlns="{NS}"><url><loc>&x;</loc></url><url><loc>{u}/a?&x;</loc></url>'
        "</urlset>"
    )
    found = read(fetcher, u)
    assert found == [
        Found(
            sitemap=f"{u}/sitemap.xml", urls=[f"{u}/a?"],
            problems=[f"{u}/sitemap.xml: 1 <loc> is not an absolute http(s) URL: skipped"],
        )
    ]  # fmt: skip
    assert "SECRET" not in repr(found)


def test_an_external_dtd_is_not_loaded(fetcher, site, tmp_path: Path):
    dtd = tmp_path / "local.dtd"
    dtd.write_text('<!ENTITY x "FROM-THE-DTD">')
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "file://{dtd}" '
        f'[<!ENTITY % remote SYSTEM "{u}/evil.dtd"> %remote;]>'
        f'<urlset xmlns="{NS}"><url><loc>{u}/a?&x;</loc></url></urlset>'
    )
    found = read(fetcher, u)
    assert found == [Found(sitemap=f"{u}/sitemap.xml", urls=[f"{u}/a?"], problems=[])]
    assert site.paths() == ["/robots.txt", "/sitemap.xml"]


def test_billion_laughs_does_not_expand(fetcher, site):
    u = site.url
    levels = "".join(
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10)
    )  # lol9 would be 10**9 "lol"s
    site.pages["/sitemap.xml"] = xml(
        f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY lol0 "lol">{levels}]>'
        f'<urlset xmlns="{NS}"><url><loc>{u}/&lol9;</loc></url></urlset>'
    )
    started = time.monotonic()
    tracemalloc.start()
    try:
        (found,) = read(fetcher, u)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 2 and peak < 10 * MiB
    assert found.urls == []
    (problem,) = found.problems
    assert problem.startswith(f"{u}/sitemap.xml: XML error at line 1: ")
    assert "lollol" not in problem


# -- the pieces, on their own -------------------------------------------------------------------


def test_robots_sitemaps_are_the_absolute_http_urls_in_order_without_repeats():
    text = (
        "User-agent: *\nDisallow: /x\nSitemap: https://a.example/one.xml\n"
        "sitemap:   http://b.example/two.xml.gz  \nSitemap: /relative.xml\n"
        "SITEMAP: ftp://a.example/three.xml\nSitemap: https://a.example/one.xml\n"
    )
    assert robots_sitemaps(text) == ["https://a.example/one.xml", "http://b.example/two.xml.gz"]
    assert robots_sitemaps("\x00\xff:::\nSitemap:\n" * 100) == []


@PROPERTY
@given(st.binary(max_size=300), st.booleans())
def test_parse_never_raises_and_names_the_sitemap_in_each_problem(body, gzipped):
    if gzipped:
        body = gzip.compress(body)[: len(body) // 2 + 10]
    sitemap = parse(body, "https://x.example/s.xml")
    assert sitemap.kind in {"urlset", "index", "text", "none"}
    assert all(problem.startswith("https://x.example/s.xml: ") for problem in sitemap.problems)
    assert all(is_http_url(loc) for loc in sitemap.locs)


# Text an XML parser gives back as it was: no control characters (XML has none), no "\r" (XML
# turns it into "\n").
xml_text = st.text(
    st.characters(exclude_categories=("Cc", "Cs", "Cn"), include_characters="\t\n "),
    max_size=40,
)
url_like = st.from_regex(
    r"\A[ \t\n]?(?i:https?)://[a-zA-Z0-9.:\[\]@_-]{0,12}([/?#][!-~]{0,10})?[ \t\n]?\Z"
)


@pytest.mark.slow
@PROPERTY
@given(st.one_of(xml_text, url_like))
def test_a_loc_is_kept_exactly_when_the_crawl_could_fetch_it(text):
    sitemap = parse(f"<urlset><url><loc>{escape(text)}</loc></url></urlset>".encode(), "s.xml")
    url = text.strip()
    assert sitemap.locs == ([url] if is_http_url(url) else [])
