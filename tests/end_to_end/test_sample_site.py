"""The generated sample site: deterministic, and expected() is what a real crawl fetches."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from urllib.parse import urljoin, urlsplit

import lxml.html
import pytest
import requests
from w3lib.url import canonicalize_url

from crawlhub.sample_site import SampleSite, serve


@pytest.fixture(scope="module")
def site() -> SampleSite:
    return SampleSite()


@pytest.fixture(scope="module")
def base_url(site) -> Iterator[str]:
    server, url = serve(site)
    yield url
    server.shutdown()
    server.server_close()


def in_scope(base_url: str, page_url: str, href: str) -> str | None:
    """The canonical path+query a link points to, or None when it is out of scope."""
    url = canonicalize_url(urljoin(page_url, href))
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.netloc != urlsplit(base_url).netloc:
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def reference_crawl(base_url: str, *, max_depth: int | None = None) -> dict[str, int]:
    """A plain BFS crawler: canonical path -> HTTP status, for every URL it fetched."""
    fetched: dict[str, int] = {}
    depth = {"/": 0}
    todo = deque(["/"])
    with requests.Session() as session:
        while todo:
            path = todo.popleft()
            url = base_url + path
            response = session.get(url, allow_redirects=False, timeout=10)
            fetched[path] = response.status_code
            if response.is_redirect:
                # A redirect does not add depth: the target is queued at the source's depth.
                found = [(in_scope(base_url, url, response.headers["Location"]), depth[path])]
            elif response.status_code == 200 and (max_depth is None or depth[path] < max_depth):
                hrefs = lxml.html.fromstring(response.content).xpath("//a/@href")
                found = [(in_scope(base_url, url, href), depth[path] + 1) for href in hrefs]
            else:
                found = []
            for link, link_depth in found:
                if link is not None and link not in depth:
                    depth[link] = link_depth
                    todo.append(link)
    return fetched


def test_same_arguments_same_site() -> None:
    one, two, other = SampleSite(pages=300), SampleSite(pages=300), SampleSite(pages=300, seed=2)
    paths = [one.path_for(n) for n in range(300)] + ["/moved/5", "/broken/11", "/nope"]
    assert [one.render(p, origin="http://h:1") for p in paths] == [
        two.render(p, origin="http://h:1") for p in paths
    ]
    assert one.expected() == two.expected()
    assert one.render("/p/3") != other.render("/p/3")


@pytest.mark.slow
def test_expected_is_what_a_crawler_fetches(site, base_url) -> None:
    fetched = reference_crawl(base_url)
    assert set(fetched) == site.expected()
    statuses = Counter(fetched.values())
    assert statuses[200] == site.pages
    assert statuses[404] == len([p for p in fetched if p.startswith("/missing/")]) > 0
    assert statuses[500] == len([p for p in fetched if p.startswith("/broken/")]) > 0
    assert statuses[301] > 0 and statuses[302] > 0
    assert any("?" in path for path in fetched)


# Depth 3 crawls most of the site with the reference crawler: a second of CPU and more.
@pytest.mark.parametrize("max_depth", [0, 1, 2, pytest.param(3, marks=pytest.mark.slow)])
def test_expected_with_max_depth(site, base_url, max_depth) -> None:
    expected = site.expected(max_depth=max_depth)
    assert set(reference_crawl(base_url, max_depth=max_depth)) == expected
    assert expected < site.expected(max_depth=max_depth + 1) or max_depth >= 5


def test_depth_semantics(site) -> None:
    assert site.expected(max_depth=0) == {"/"}
    assert site.expected(max_depth=1) == {"/", *site.links(0)}
    assert site.expected(max_depth=100) == site.expected()


def test_duplicate_forms_canonicalize_to_one_url(site, base_url) -> None:
    all_hrefs: list[str] = []
    with requests.Session() as session:
        for n in [0, 2, 5, 7, 11, 12, 42, 100, 777, 1999]:
            url = base_url + site.path_for(n)
            hrefs = lxml.html.fromstring(session.get(url, timeout=10).content).xpath("//a/@href")
            canonical = {in_scope(base_url, url, href) for href in hrefs} - {None}
            assert canonical == {*site.links(n), site.path_for(n)}  # "#top" links the page
            assert len(hrefs) > len(canonical)  # duplicates, in other forms
            all_hrefs += hrefs
    origin = base_url.partition("://")[2]
    for form in ["#section-", "#top", "../", "./", "?b=", "%3", "HTTP://" + origin, base_url]:
        assert any(form in href for href in all_hrefs), form
    for scheme in ["mailto:", "javascript:"]:
        assert any(href.startswith(scheme) for href in all_hrefs), scheme
    offsite = [site.render(site.path_for(n))[2] for n in range(6)]
    for form in [b"tel:", b"data:text/html", b"https://other.example/", b'"//other.example/']:
        assert any(form in body for body in offsite), form


def test_responses(site, base_url) -> None:
    with requests.Session() as session:
        robots = session.get(base_url + "/robots.txt", timeout=10)
        assert robots.status_code == 200 and "Disallow:" in robots.text
        page = session.get(base_url + "/p/7", timeout=10)
        assert page.status_code == 200 and "<title>Page 7" in page.text
        assert 2000 <= len(page.content) <= 6000
        assert int(page.headers["Content-Length"]) == len(page.content)
        assert session.get(base_url + "/p/%37", timeout=10).content == page.content
        moved = session.get(base_url + "/moved/5", allow_redirects=False, timeout=10)
        assert moved.status_code == 302
        assert moved.headers["Location"] == site.path_for(site.moved_target(5))
        assert session.get(base_url + "/moved/42", allow_redirects=False, timeout=10).is_redirect
        assert session.get(base_url + "/broken/11", timeout=10).status_code == 500
        for missing in ["/p/0", "/p/2000", "/p/07", "/p/7/", "/missing/7", "/broken/12", "/x"]:
            assert session.get(base_url + missing, timeout=10).status_code == 404, missing
        assert session.head(base_url + "/p/7", timeout=10).content == b""


def test_static_files_for_nginx(tmp_path) -> None:
    site = SampleSite(pages=120)
    site.served_from(directory=tmp_path, origin="http://127.0.0.1:8080")
    files = [p for p in (tmp_path / "htdocs").rglob("*") if p.is_file()]
    assert len(files) == site.pages + 1  # pages and robots.txt
    assert (tmp_path / "htdocs" / "p" / "7").read_bytes() == site.render(
        "/p/7", origin="http://127.0.0.1:8080"
    )[2]
    locations = (tmp_path / "locations.conf").read_text()
    assert "location = /broken/11 { return 500; }" in locations
    target = site.path_for(site.moved_target(42))
    assert f'location = /moved/42 {{ return 301 "{target}"; }}' in locations
