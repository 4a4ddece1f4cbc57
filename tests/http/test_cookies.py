"""Cookies a site sets go back only to the origin that set it: its scheme, host and port
(crawlhub/http/session.py), as browsers that bind cookies to origins send them. Another port
of the same host is another service, perhaps another owner's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crawlhub.http import Fetcher
from crawls import services
from tests.support.crawling import drive
from tests.support.sites import Response, pages_site


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    with Fetcher(timeout=2, max_bytes=10_000) as client:
        yield client


def cookie_setter(path_body: str) -> dict:
    return {
        "/": Response(body=path_body, headers={"Set-Cookie": "sid=s3cret; Path=/"}),
        "/again": "again",
    }


def test_a_cookie_goes_back_to_its_port_and_never_to_another(make_site, fetcher):
    a = make_site(pages_site(cookie_setter("a")))
    b = make_site(pages_site({"/": "b"}))
    for url in (a.url + "/", b.url + "/", a.url + "/again"):
        assert fetcher.fetch(url).status == 200
    assert [r.headers.get("Cookie") for r in a.log] == [None, "sid=s3cret"]
    assert [r.headers.get("Cookie") for r in b.log] == [None]


@pytest.mark.django_db
def test_a_crawl_of_two_ports_of_one_host_keeps_each_site_s_cookies_to_itself(user, make_site):
    b = make_site(pages_site({"/": "b", "/b2": "b2"}))
    a = make_site(
        pages_site(
            {
                "/": Response(
                    body=f'<a href="{b.url}/">b</a> <a href="/again">a</a>',
                    headers={"Set-Cookie": "sid=s3cret; Path=/"},
                ),
                "/again": f'<a href="{b.url}/b2">b2</a>',
            }
        )
    )
    crawl = services.crawl_create(
        user=user,
        name="t",
        seeds=[a.url + "/"],
        obey_robots=False,
        threads=1,
        allowed_domains=["127.0.0.1"],
    )
    services.crawl_start(crawl=crawl, user=user)
    crawl = drive(crawl, timeout=30)
    assert sorted(b.paths()) == ["/", "/b2"] and "/again" in a.paths()
    assert all("Cookie" not in r.headers for r in b.log)
    assert [r.headers.get("Cookie") for r in a.log if r.path == "/again"] == ["sid=s3cret"]
