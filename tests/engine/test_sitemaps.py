"""Sitemaps: reading every form they come in (sitemaps.parse), what a crawl's sitemap request
makes of a fetched file (sitemap_reads.read), staying safe and small with the hostile ones,
and a crawl that reads each sitemap once. Real local sites, fetched by a real Fetcher.
"""

from __future__ import annotations

import gzip
import struct
import time
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlhub.http import Fetcher
from crawlhub.http.urls import is_http_url, normalize
from crawls import services
from crawls.engine import sitemap_reads
from crawls.engine.frontier import Frontier
from crawls.engine.request import VIA_SITEMAP, VIA_SITEMAP_ROOT, Request
from crawls.engine.robots import RobotsCache
from crawls.engine.sitemap_reads import SitemapRead, sitemap_roots
from crawls.engine.sitemaps import MAX_SITEMAP_BYTES, MAX_URLS, parse, robots_sitemaps
from crawls.models import CrawlEvent, CrawlState
from crawls.page_filters import PageFilter
from tests.support.crawling import drive
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
    f = Fetcher(timeout=5, max_bytes=5 * MiB)
    yield f
    f.close()


def read(
    fetcher: Fetcher,
    url: str,
    *,
    via: str = VIA_SITEMAP,
    robots_listed: list[str] | None = None,
    max_bytes: int = sitemap_reads.FETCH_BYTES,
) -> SitemapRead:
    """What a slice makes of the sitemap request for `url`: fetched as it fetches one (Fetcher.get
    with FETCH_BYTES), then read."""
    fetch = fetcher.get(url, max_bytes=max_bytes)
    return sitemap_reads.read(Request(url=url, via=via), fetch, robots_listed=robots_listed or [])


def read_root(fetcher: Fetcher, site: Site, **options) -> SitemapRead:
    """The request a crawl starts a seed's site with: its /sitemap.xml."""
    return read(fetcher, f"{site.url}/sitemap.xml", via=VIA_SITEMAP_ROOT, **options)


def xml(body: str | bytes, content_type: str = "application/xml") -> Response:
    return Response(body=body, content_type=content_type)


def urlset(*urls: str) -> Response:
    entries = "".join(f"<url><loc>{escape(url)}</loc></url>" for url in urls)
    return xml(f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{NS}">{entries}</urlset>')


def index(*urls: str, namespace: str = NS) -> Response:
    entries = "".join(f"<sitemap><loc>{escape(url)}</loc></sitemap>" for url in urls)
    xmlns = f' xmlns="{namespace}"' if namespace else ""
    return xml(f"<sitemapindex{xmlns}>{entries}</sitemapindex>")


def robots(*sitemaps: str) -> Response:
    lines = "User-agent: *\nDisallow: /private/\n" + "".join(f"Sitemap: {u}\n" for u in sitemaps)
    return Response(body=lines, content_type="text/plain")


# -- what a sitemap lists -----------------------------------------------------------------------


def test_a_urlset_lists_its_pages(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<urlset xmlns="{NS}">\n  <url>\n    <loc>\n      {u}/a\n    </loc>\n'
        f"    <lastmod>2024-05-01</lastmod>\n  </url>\n"
        f"  <url><loc>{u}/b?x=1&amp;y=2</loc></url>\n  <url><loc>{u}/c</loc></url>\n</urlset>"
    )
    assert read_root(fetcher, site) == SitemapRead(pages=[f"{u}/a", f"{u}/b?x=1&y=2", f"{u}/c"])
    assert site.paths() == ["/sitemap.xml"]


def test_an_index_lists_sitemaps_to_read_with_or_without_a_namespace(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = index(f"{u}/pages-1.xml", f"{u}/nested.xml")
    site.pages["/nested.xml"] = index(f"{u}/pages-2.xml", namespace="")
    site.pages["/pages-1.xml"] = urlset(f"{u}/a", f"{u}/b")
    assert read_root(fetcher, site) == SitemapRead(sitemaps=[f"{u}/pages-1.xml", f"{u}/nested.xml"])
    assert read(fetcher, f"{u}/nested.xml") == SitemapRead(sitemaps=[f"{u}/pages-2.xml"])
    assert read(fetcher, f"{u}/pages-1.xml") == SitemapRead(pages=[f"{u}/a", f"{u}/b"])


def test_robots_txt_sitemaps_come_with_the_root_before_what_it_lists(fetcher, site):
    u = site.url
    listed = [f"{u}/one.xml", "/relative.xml", f"{u}/two.xml"]  # as robots.txt wrote them
    site.pages["/sitemap.xml"] = index(f"{u}/pages.xml")
    assert read_root(fetcher, site, robots_listed=listed) == SitemapRead(
        sitemaps=[f"{u}/one.xml", f"{u}/two.xml", f"{u}/pages.xml"]
    )
    site.pages["/sitemap.xml"] = urlset(f"{u}/a")
    assert read_root(fetcher, site, robots_listed=listed) == SitemapRead(
        pages=[f"{u}/a"], sitemaps=[f"{u}/one.xml", f"{u}/two.xml"]
    )


def test_only_the_locs_of_url_entries_are_pages(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<urlset xmlns="{NS}" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
        f"<url><loc>{u}/page</loc><image:image><image:loc>{u}/photo.jpg</image:loc>"
        f"</image:image><extra><loc>{u}/nested</loc></extra></url>"
        f"<loc>{u}/stray</loc><other><loc>{u}/other</loc></other></urlset>"
    )
    assert read_root(fetcher, site) == SitemapRead(pages=[f"{u}/page"])


def test_each_site_of_the_seeds_has_one_root_sitemap_in_the_seeds_order():
    seeds = [
        "http://a.test/x",
        "mailto:x@example.com",
        "http://a.test/y?q=1",
        "https://b.test:8443/",
        "http://a.test",
        "https://a.test/z",
        # The same sites written otherwise: a host in capitals, a default port, credentials.
        "http://A.Test:80/w",
        "https://u:p@a.test:443/",
        "http://[::1]:8080/v",
    ]
    assert sitemap_roots(seeds) == [
        "http://a.test/sitemap.xml",
        "https://b.test:8443/sitemap.xml",
        "https://a.test/sitemap.xml",
        "http://[::1]:8080/sitemap.xml",
    ]


# -- the forms a sitemap comes in ---------------------------------------------------------------


def test_a_gzipped_sitemap_is_read_whatever_it_is_labelled(fetcher, site):
    u = site.url
    site.pages["/pages.xml.gz"] = Response(
        body=gzip.compress(urlset(f"{u}/1").body.encode()), content_type="application/gzip"
    )
    site.pages["/download"] = Response(
        body=gzip.compress(urlset(f"{u}/2").body.encode()),
        content_type="application/octet-stream",
    )
    site.pages["/encoded.xml"] = Response(  # gzip as a Content-Encoding: the Fetcher undoes it
        body=gzip.compress(urlset(f"{u}/3").body.encode()),
        content_type="application/xml",
        headers={"Content-Encoding": "gzip"},
    )
    assert read(fetcher, f"{u}/pages.xml.gz") == SitemapRead(pages=[f"{u}/1"])
    assert read(fetcher, f"{u}/download") == SitemapRead(pages=[f"{u}/2"])
    assert read(fetcher, f"{u}/encoded.xml") == SitemapRead(pages=[f"{u}/3"])


def test_a_gzip_file_that_ends_early_keeps_what_came(fetcher, site):
    u = site.url
    text = "".join(f"{u}/{n}\n" for n in range(1000)).encode()
    site.pages["/sitemap.xml"] = Response(body=gzip.compress(text)[:-100])
    found = read_root(fetcher, site)
    assert found.pages[:3] == [f"{u}/0", f"{u}/1", f"{u}/2"] and len(found.pages) < 1000
    assert found.problems == [f"{u}/sitemap.xml: gzip data ends early: read what came"]


def test_a_plain_text_sitemap_lists_one_url_per_line(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = Response(
        body=f"\ufeff{u}/a\r\n\n   {u}/b  \n/relative\n\n{u}/c", content_type="text/plain"
    )
    assert read_root(fetcher, site) == SitemapRead(
        pages=[f"{u}/a", f"{u}/b", f"{u}/c"],
        problems=[f"{u}/sitemap.xml: 1 line is not an absolute http(s) URL: skipped"],
    )


def test_blank_lines_and_a_bom_before_the_xml_declaration_are_fine(fetcher, site):
    u = site.url
    body = urlset(f"{u}/a").body
    site.pages["/sitemap.xml"] = xml(b"\xef\xbb\xbf\n\n  " + body.encode())
    assert read_root(fetcher, site) == SitemapRead(pages=[f"{u}/a"])


def test_locs_that_are_not_absolute_http_urls_are_skipped_and_counted(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = urlset(
        f"{u}/ok",
        "/relative",
        "page.html",
        "ftp://example.com/f",
        "javascript:alert(1)",
        f"{u}/with space",
        "",
        f"{u}/ok-too",
    )
    assert read_root(fetcher, site) == SitemapRead(
        pages=[f"{u}/ok", f"{u}/ok-too"],
        problems=[f"{u}/sitemap.xml: 6 <loc>s are not absolute http(s) URLs: skipped"],
    )


@pytest.mark.slow
def test_a_sitemap_of_60000_urls_is_read_up_to_50000(fetcher, site):
    u = site.url
    urls = [f"{u}/p/{n}" for n in range(60_000)]
    site.pages["/sitemap.xml"] = urlset(*urls)
    found = read_root(fetcher, site)
    assert found.pages == urls[:MAX_URLS]
    assert found.problems == [f"{u}/sitemap.xml: 60,000 URLs, only the first 50,000 read"]


# -- what goes wrong ----------------------------------------------------------------------------


def test_malformed_xml_keeps_the_urls_before_the_error(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = xml(
        f'<urlset xmlns="{NS}">\n<url><loc>{u}/a</loc></url>\n'
        f"<url><loc>{u}/b</lo></url>\n<url><loc>{u}/c</loc></url>\n</urlset>"
    )
    found = read_root(fetcher, site)
    assert found.pages == [f"{u}/a"]
    (problem,) = found.problems
    assert problem.startswith(f"{u}/sitemap.xml: XML error at line 3: ")
    assert "mismatch" in problem


def test_an_html_page_at_sitemap_xml_is_not_a_sitemap(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = "<!DOCTYPE html><html><body><p>Home&nbsp;page<br></body></html>"
    assert read_root(fetcher, site) == SitemapRead(
        problems=[f"{u}/sitemap.xml: not a sitemap (root element <html>)"]
    )


def test_a_missing_sitemap_is_absent_not_a_problem_and_a_root_one_says_so_plainly(fetcher, site):
    u = site.url
    # Most sites have no /sitemap.xml: a note, not a problem; what robots.txt lists goes on.
    assert read_root(fetcher, site, robots_listed=[f"{u}/gone.xml"]) == SitemapRead(
        sitemaps=[f"{u}/gone.xml"], absent=f"no sitemap at {u}/sitemap.xml (404)"
    )
    assert read(fetcher, f"{u}/gone.xml") == SitemapRead(
        absent=f"{u}/gone.xml: listed in robots.txt or a sitemap index, but not there (HTTP 404)"
    )
    assert site.paths() == ["/sitemap.xml", "/gone.xml"]


def test_a_server_error_at_sitemap_xml_is_a_problem(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = Response(status=503, body="busy")
    assert read_root(fetcher, site) == SitemapRead(problems=[f"{u}/sitemap.xml: HTTP 503"])


def test_a_robots_txt_that_is_not_there_lists_no_sitemaps(fetcher, site, frontier: Frontier):
    u = site.url
    site.pages["/robots.txt"] = replace(robots(f"{u}/listed.xml"), status=500)
    cache = RobotsCache(frontier, fetcher, user_agent="crawlhub-test", host_delay=0)
    # What a slice passes to read() as robots_listed for the site's root request.
    assert cache.sitemaps(Request(url=f"{u}/sitemap.xml", via=VIA_SITEMAP_ROOT)) == []
    assert site.paths() == ["/robots.txt"]


def test_an_unreachable_sitemap_is_a_problem(fetcher):
    nowhere = f"http://127.0.0.1:{free_port()}/sitemap.xml"
    assert read(fetcher, nowhere) == SitemapRead(problems=[f"{nowhere}: connection refused"])


def test_a_download_cut_at_the_size_limit_is_a_problem(fetcher, site):
    u = site.url
    site.pages["/sitemap.xml"] = urlset(*(f"{u}/{n}" for n in range(100)))
    # A slice's limit is FETCH_BYTES (50 MB); a small one makes the same cut.
    found = read_root(fetcher, site, max_bytes=500)
    assert found.pages[:2] == [f"{u}/0", f"{u}/1"] and len(found.pages) < 100
    assert found.problems[0] == f"{u}/sitemap.xml: cut at the download size limit (500 bytes)"
    (problem,) = found.problems[1:]
    assert problem.startswith(f"{u}/sitemap.xml: XML error at line 1: ")


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
        found = read_root(fetcher, site)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    sitemap = f"{u}/sitemap.xml"
    problems = [f"{sitemap}: {what_is_read}"] if what_is_read else []
    problems.append(f"{sitemap}: more than 50 MB once decompressed: read the first 50 MB")
    assert found == SitemapRead(pages=[f"{u}/a"] if head else [], problems=problems)
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
    found = read_root(fetcher, site)
    assert found == SitemapRead(
        pages=[f"{u}/a"],
        problems=[f"{u}/sitemap.xml: 1 <loc> is not an absolute http(s) URL: skipped"],
    )
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
    assert read_root(fetcher, site) == SitemapRead(pages=[f"{u}/a"])
    assert site.paths() == ["/sitemap.xml"]


def test_billion_laughs_does_not_expand(fetcher, site):
    u = site.url
    levels = "".join(
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10)
    )  # lol9 would be 10**9 "lol"s
    site.pages["/sitemap.xml"] = xml(
        f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY lol0 "lol">{levels}]>'
        f'<urlset xmlns="{NS}"><url><loc>{u}/&lol9;</loc></url></urlset>'
    )
    # This thread's CPU time, not the clock: expanding would cost the parser seconds of CPU,
    # while a busy machine (other xdist workers) only makes the clock run on.
    started = time.thread_time()
    tracemalloc.start()
    try:
        found = read_root(fetcher, site)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.thread_time() - started < 2 and peak < 10 * MiB
    assert found.pages == [] and found.sitemaps == []
    (problem,) = found.problems
    assert problem.startswith(f"{u}/sitemap.xml: XML error at line 1: ")
    assert "lollol" not in problem


# -- a crawl that follows sitemaps --------------------------------------------------------------


@pytest.mark.django_db
def test_a_crawl_reads_each_sitemap_once_and_fetches_each_listed_page_once(user, new_site):
    home, elsewhere = new_site(), new_site()
    u = home.url
    # Another host for the crawl's scope (which goes by host name, whatever the port).
    e = elsewhere.url.replace("127.0.0.1", "localhost")
    home.pages.update(
        {
            "/": "<h1>home</h1>",
            "/robots.txt": robots(f"{u}/sitemap.xml", f"{e}/for-home.xml"),
            "/sitemap.xml": index(f"{u}/sitemap.xml", f"{u}/again.xml"),
            "/again.xml": index(f"{u}/sitemap.xml", f"{u}/again.xml", f"{u}/pages.xml"),
            "/pages.xml": urlset(f"{u}/a", f"{u}/b", f"{e}/off-site", f"{u}/a"),
            "/a": "a",
            "/b": "b",
            "/c": "c",
        }
    )
    elsewhere.pages["/for-home.xml"] = urlset(f"{u}/c", f"{u}/a", f"{e}/b")
    crawl = services.crawl_create(
        user=user,
        name="sitemaps",
        seeds=[f"{u}/"],
        obey_robots=False,
        follow_sitemaps=True,
        threads=4,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FINISHED
    assert Counter(home.paths()) == {
        "/": 1,
        "/robots.txt": 1,
        "/sitemap.xml": 1,
        "/again.xml": 1,
        "/pages.xml": 1,
        "/a": 1,
        "/b": 1,
        "/c": 1,
    }
    # A sitemap on another host is read; the pages it lists there are out of the crawl's scope.
    assert elsewhere.paths() == ["/for-home.xml"]
    assert not crawl.events.filter(kind=CrawlEvent.Kind.SITEMAP).exists()


def assert_counters_add_up(stats: dict[str, int]) -> None:
    """Every request in exactly one place, and every final status in one bar."""
    unfinished = stats["queued"] + stats["delayed"] + stats["in_flight"] + stats["cancelled"]
    assert stats["requests"] == stats["responses"] + stats["errors"] + unfinished, stats
    classes = ("status_2xx", "status_3xx", "status_4xx", "status_5xx")
    assert sum(stats[name] for name in classes) == stats["responses"] + stats["failed_http"]


def four_xx(crawl) -> list[str]:
    """The pages the pages browser lists under its 4xx filter."""
    pages = PageFilter.from_params({"status_class": "4xx"}).apply(crawl.pages.all())
    return sorted(pages.values_list("url", flat=True))


@pytest.mark.django_db
def test_a_site_without_a_sitemap_has_no_broken_page_for_the_one_the_crawl_guessed(user, new_site):
    site = new_site()
    u = site.url
    # A real broken link (/gone) beside the guessed /sitemap.xml the site does not have.
    site.pages.update({"/": '<a href="/a">a</a> <a href="/gone">gone</a>', "/a": "a"})
    crawl = services.crawl_create(
        user=user,
        name="no sitemap",
        seeds=[f"{u}/"],
        obey_robots=False,
        follow_sitemaps=True,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    assert crawl.state == CrawlState.FINISHED
    # robots.txt too: a site's root sitemap request reads its Sitemap: lines.
    assert Counter(site.paths()) == {
        "/": 1,
        "/robots.txt": 1,
        "/sitemap.xml": 1,
        "/a": 1,
        "/gone": 1,
    }
    stats = crawl.stats
    # Only the site's own broken page is a 4xx, in the bar and in the pages browser.
    assert stats["status_4xx"] == 1 and four_xx(crawl) == [f"{u}/gone"], stats
    assert stats["errors"] == 0 and stats["requests"] == stats["responses"] == 3, stats
    assert_counters_add_up(stats)
    assert not crawl.pages.filter(url=f"{u}/sitemap.xml").exists()
    # Told once, honestly: a counter, and a line of the log (not a warning).
    assert stats["sitemaps_missing"] == 1
    (told,) = crawl.events.filter(kind=CrawlEvent.Kind.SITEMAP)
    assert (told.detail, told.level) == (f"no sitemap at {u}/sitemap.xml (404)", "info")
    assert not crawl.events.filter(kind=CrawlEvent.Kind.ERROR).exists()  # not "no answer"
    assert services.crawl_progress(crawl, stats)["percent"] == 100


@pytest.mark.django_db
def test_a_sitemap_robots_txt_lists_that_is_missing_is_told_as_a_warning_not_a_page(user, new_site):
    site = new_site()
    u = site.url
    site.pages.update({"/": "<h1>home</h1>", "/robots.txt": robots(f"{u}/listed.xml")})
    crawl = services.crawl_create(
        user=user,
        name="listed",
        seeds=[f"{u}/"],
        obey_robots=False,
        follow_sitemaps=True,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    stats = crawl.stats
    assert stats["status_4xx"] == 0 and four_xx(crawl) == [] and stats["errors"] == 0, stats
    assert stats["sitemaps_missing"] == 2 and stats["requests"] == stats["responses"] == 1
    assert_counters_add_up(stats)
    assert not crawl.events.filter(kind=CrawlEvent.Kind.ERROR).exists()
    told = {e.detail: e.level for e in crawl.events.filter(kind=CrawlEvent.Kind.SITEMAP)}
    # The site said it has this one: worth a warning. The guessed one is only a note.
    assert told == {
        f"no sitemap at {u}/sitemap.xml (404)": "info",
        f"{u}/listed.xml: listed in robots.txt or a sitemap index, but not there (HTTP 404)": (
            "warning"
        ),
    }


@pytest.mark.django_db
def test_a_sitemap_the_user_gives_as_a_seed_that_is_missing_is_a_broken_page(user, new_site):
    site = new_site()
    u = site.url
    crawl = services.crawl_create(
        user=user,
        name="seed",
        seeds=[f"{u}/sitemap.xml"],
        obey_robots=False,
        follow_sitemaps=True,
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl)
    # The user asked for this URL: its 404 is one of the crawl's, in the bar and the browser.
    assert crawl.stats["status_4xx"] == 1 and four_xx(crawl) == [f"{u}/sitemap.xml"]
    assert crawl.stats["sitemaps_missing"] == 0
    assert_counters_add_up(crawl.stats)


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
def test_a_loc_is_kept_exactly_when_the_crawl_could_fetch_it_in_the_form_it_is_fetched(text):
    sitemap = parse(f"<urlset><url><loc>{escape(text)}</loc></url></urlset>".encode(), "s.xml")
    url = text.strip()
    assert sitemap.locs == ([normalize(url)] if is_http_url(url) else [])
