"""What a crawl yields, end to end against local sites (slices driven in this process): the
fields its rules extract, the pages its sitemaps list, the links between its pages, and what
changed since the run before (conditional requests, 304s, digests)."""

from __future__ import annotations

import gzip
import hashlib
from collections import Counter

import pytest
from django.core.exceptions import ValidationError

from crawls import changes, schedules, services, webhooks
from crawls.engine.frontier import Frontier
from crawls.engine.request import Request
from crawls.models import Change, CrawlEvent, CrawlState, Link, Page, WebhookDelivery
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db

RULES = [
    {"name": "title", "kind": "css", "expr": "h1"},
    {"name": "price", "kind": "css", "expr": ".price", "url_pattern": "/product/"},
    {"name": "sku", "kind": "regex", "expr": r"SKU-(\d+)", "url_pattern": "/product/"},
    {"name": "tags", "kind": "xpath", "expr": "//li[@class='tag']", "many": True},
    {"name": "image", "kind": "css", "expr": "img.main", "get": "attr", "attr": "src"},
]


def product(n: int, price: str, *links: str) -> str:
    anchors = "".join(f'<a href="{href}">{text}</a>' for href, text in links)
    return (
        f"<html><head><title>Product {n}</title></head><body><h1>Product {n}</h1>"
        f'<p class="price">{price}</p><p>SKU-{1000 + n}</p>'
        f'<ul><li class="tag">red</li><li class="tag">big</li></ul>'
        f'<img class="main" src="/img/{n}.png">{anchors}</body></html>'
    )


start = start_site_crawl


def pages_by_path(crawl) -> dict[str, Page]:
    return {"/" + p.url.split("/", 3)[-1]: p for p in crawl.pages.all()}


# Extraction ------------------------------------------------------------------------------------


def test_a_crawl_extracts_each_rules_fields_from_the_pages_they_apply_to(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": '<html><body><h1>Home</h1><a href="/product/1">one</a>'
                '<a href="/product/2">two</a><a href="/about">about</a></body></html>',
                "/product/1": product(1, "$10"),
                "/product/2": product(2, "$20"),
                "/about": (
                    "<html><body><h1>About us</h1><p>SKU-9 is not a product</p></body></html>"
                ),
            }
        )
    )
    crawl = drive(start(user, site, extract_rules=RULES))
    assert crawl.state == CrawlState.FINISHED
    pages = pages_by_path(crawl)
    assert pages["/product/1"].extracted == {
        "title": "Product 1",
        "price": "$10",
        "sku": "1001",
        "tags": ["red", "big"],
        "image": site.url + "/img/1.png",  # made absolute, as links are
    }
    assert pages["/product/2"].extracted["price"] == "$20"
    # The product rules do not apply to /about; a rule that finds nothing gives None.
    assert pages["/about"].extracted == {"title": "About us", "tags": [], "image": None}
    assert pages["/"].extracted["title"] == "Home"
    assert all(p.extract_errors == {} for p in pages.values())


def test_a_rule_that_fails_on_a_page_is_recorded_there_and_the_crawl_goes_on(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": '<h1>Home</h1><a href="/data.json">data</a><a href="/b">b</a>',
                "/data.json": Response(
                    body='{"items": [{"price": 3}]}', content_type="application/json"
                ),
                "/b": Response(body="not json at all", content_type="application/json"),
            }
        )
    )
    rules = [{"name": "price", "kind": "json", "expr": "items[0].price"}]
    crawl = drive(start(user, site, extract_rules=rules))
    assert crawl.state == CrawlState.FINISHED and crawl.stats["responses"] == 3
    pages = pages_by_path(crawl)
    assert pages["/data.json"].extracted == {"price": 3}
    assert pages["/b"].extracted == {"price": None}
    assert "not JSON" in pages["/b"].extract_errors["price"]


def test_structured_data_is_kept_with_one_switch(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": (
                    '<html><head><meta property="og:title" content="OG title">'
                    '<script type="application/ld+json">'
                    '{"@type": "Product", "name": "Lamp"}</script>'
                    "</head><body></body></html>"
                )
            }
        )
    )
    crawl = drive(start(user, site, keep_structured_data=True))
    data = crawl.pages.get().structured_data
    assert data["json-ld"][0]["name"] == "Lamp"
    assert data["opengraph"][0]["og:title"] == "OG title"


def test_bad_rules_are_refused_when_the_crawl_is_saved_naming_each_rule(user):
    with pytest.raises(ValidationError) as refused:
        services.crawl_create(
            user=user,
            name="x",
            seeds=["http://example.com/"],
            extract_rules=[
                {"name": "price", "kind": "css", "expr": ".price["},
                {"name": "sku", "kind": "regex", "expr": "(a"},
                {"name": "t", "kind": "xpath", "expr": "//h1["},
            ],
        )
    problems = refused.value.message_dict["extract_rules"]
    assert len(problems) == 3
    assert problems[0].startswith("Rule 1 (price): ") and "CSS selector" in problems[0]
    assert problems[1].startswith("Rule 2 (sku): ")
    assert problems[2].startswith("Rule 3 (t): ") and "XPath" in problems[2]


# Links -----------------------------------------------------------------------------------------


def test_a_page_keeps_its_links_with_why_each_was_not_followed_and_its_in_links(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": '<a href="/a">Alpha page</a><a href="/skip/x">x</a><a href="http://elsewhere.test/">out</a>',
                "/a": '<a href="/">Home</a><a href="/b">Bee</a>',
                "/b": '<a href="/a">back to alpha</a>',
            }
        )
    )
    crawl = drive(start(user, site, exclude_patterns=["/skip/"], max_depth=1))
    pages = pages_by_path(crawl)
    home = pages["/"]
    notes = {
        url.split("/", 3)[-1] if "127.0.0.1" in url else url: (text, note)
        for url, text, note in home.links
    }
    assert notes["a"] == ("Alpha page", "")
    assert notes["skip/x"] == ("x", "matches an exclude pattern")
    assert notes["http://elsewhere.test/"] == ("out", "other site (elsewhere.test)")
    assert home.links_total == 3
    # /a is at depth 1 = max_depth: its links are kept, and not followed for the depth.
    assert [note for _u, _t, note in pages["/a"].links] == ["depth limit", "depth limit"]
    assert "/b" not in pages
    # In-links: / and (through its kept link) nothing else points at /a.
    found = changes.inlinks(pages["/a"], limit=10)
    assert found.total == 1 and found.shown[0].text == "Alpha page"
    assert changes.found_by(pages["/a"]).text == "Alpha page"
    assert changes.inlinks(pages["/"], limit=10).total == 1  # from /a, "Home"
    assert Link.objects.filter(crawl_id=crawl.pk).count() == 3  # /->a, a->/, a->b


def test_a_page_of_20000_links_keeps_1000_and_10000_in_link_rows(user, make_site):
    links = "".join(f'<a href="/p{n}">{n}</a>' for n in range(20_000))
    site = make_site(pages_site({"/": links}))
    crawl = drive(start(user, site, max_depth=0))
    home = crawl.pages.get()
    assert home.links_total == 20_000 and len(home.links) == 1000
    assert home.links[0] == [site.url + "/p0", "0", "depth limit"]
    assert Link.objects.filter(crawl_id=crawl.pk).count() == 10_000


def test_a_page_records_what_was_sent_and_what_came_back(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": '<a href="/old">old</a>',
                "/old": Response(status=301, headers={"Location": "/new"}),
                "/new": Response(
                    body="<h1>new</h1>", headers={"X-Served-By": "test", "Set-Cookie": "s=1"}
                ),
            }
        )
    )
    crawl = drive(start(user, site, user_agent_mode="fixed", user_agent="crawlhub-test/1"))
    # The redirect is a page of its own, and where it points is another, found through it.
    moved = crawl.pages.get(url=site.url + "/old")
    assert (moved.status, moved.redirect_to, moved.redirects) == (301, site.url + "/new", [])
    assert moved.headers["location"] == "/new" and moved.depth == 1
    assert moved.links == [[site.url + "/new", "HTTP 301 redirect", ""]]
    assert moved.request_headers["User-Agent"] == "crawlhub-test/1"
    new = crawl.pages.get(url=site.url + "/new")
    assert (new.status, new.final_url, new.redirects) == (200, new.url, [site.url + "/old"])
    assert (new.depth, new.referrer, new.redirect_to) == (1, moved.url, "")
    assert new.headers["x-served-by"] == "test"
    assert new.headers["set-cookie"] == "••••••"  # a site's cookie is the crawl's session
    assert new.request_headers["User-Agent"] == "crawlhub-test/1"
    assert new.digest == hashlib.sha256(b"<h1>new</h1>").hexdigest()
    assert moved.source == "link" and crawl.pages.get(url=site.url + "/").source == "seed"
    assert new.source == "redirect"
    assert changes.found_by(new).page == moved
    assert [i.text for i in changes.inlinks(new, limit=5).shown] == ["HTTP 301 redirect"]
    assert sorted(site.paths()) == ["/", "/new", "/old"]


# Sitemaps --------------------------------------------------------------------------------------


def urlset(*urls: str) -> str:
    entries = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'


def test_pages_only_the_sitemaps_list_are_crawled(user, make_site):
    holder = {}

    def handler(request):
        base = holder["url"]
        pages = {
            "/": '<a href="/linked">linked</a>',
            "/linked": "linked",
            "/robots.txt": Response(
                body=f"Sitemap: {base}/listed.xml.gz\n", content_type="text/plain"
            ),
            "/sitemap.xml": Response(
                body=(
                    '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                    f"<sitemap><loc>{base}/part1.xml</loc></sitemap></sitemapindex>"
                ),
                content_type="application/xml",
            ),
            "/part1.xml": Response(
                body=urlset(f"{base}/only-in-sitemap", f"{base}/linked", "http://elsewhere.test/x"),
                content_type="application/xml",
            ),
            "/listed.xml.gz": Response(
                body=gzip.compress(urlset(f"{base}/from-gzip").encode()),
                content_type="application/octet-stream",
            ),
            "/only-in-sitemap": "only here",
            "/from-gzip": "gz",
        }
        return pages_site(pages)(request)

    site = make_site(handler)
    holder["url"] = site.url
    crawl = drive(start(user, site, follow_sitemaps=True))
    paths = Counter(site.paths())
    for path in ("/only-in-sitemap", "/from-gzip", "/linked", "/sitemap.xml", "/part1.xml"):
        assert paths[path] == 1, (path, paths)
    pages = pages_by_path(crawl)
    assert pages["/only-in-sitemap"].source == "sitemap"
    assert pages["/only-in-sitemap"].referrer == site.url + "/part1.xml"
    assert pages["/part1.xml"].source == "sitemap_file"
    # Three listed pages came in through sitemaps; /linked was found by a link first or not.
    assert crawl.stats["sitemap_urls"] in (2, 3)
    notes = [n for _u, _t, n in pages["/part1.xml"].links]
    assert "other site (elsewhere.test)" in notes


def test_a_broken_sitemap_is_a_note_on_the_crawl_and_the_crawl_finishes(user, make_site):
    site = make_site(
        pages_site(
            {
                "/": "<h1>home</h1>",
                "/robots.txt": Response(
                    body="Sitemap: http://127.0.0.1:9/gone.xml\n", content_type="text/plain"
                ),
                "/sitemap.xml": Response(
                    body="<urlset><url><loc>/a</loc", content_type="application/xml"
                ),
            }
        )
    )
    crawl = drive(start(user, site, follow_sitemaps=True))
    assert crawl.state == CrawlState.FINISHED
    notes = list(crawl.events.filter(kind=CrawlEvent.Kind.SITEMAP).values_list("detail", flat=True))
    # Each said once: a sitemap is read once, whatever comes back.
    assert len(notes) == 2 and set(notes) == {
        "http://127.0.0.1:9/gone.xml: connection refused",
        f"{site.url}/sitemap.xml: XML error at line 1: expected '>'",
    }
    assert crawl.failures.count() == 0


def test_a_failing_root_sitemap_still_leads_to_the_sitemaps_robots_txt_lists(user, make_site):
    holder = {}

    def handler(request):
        base = holder["url"]
        return pages_site(
            {
                "/": "<h1>home</h1>",
                "/robots.txt": Response(
                    body=f"Sitemap: {base}/listed.xml\n", content_type="text/plain"
                ),
                "/sitemap.xml": Response(status=503, body="busy"),
                "/listed.xml": Response(
                    body=urlset(f"{base}/deep", "http://127.0.0.2:9/x"),
                    content_type="application/xml",
                ),
                "/deep": "deep",
            }
        )(request)

    site = make_site(handler)
    holder["url"] = site.url
    crawl = drive(start(user, site, follow_sitemaps=True))
    paths = Counter(site.paths())
    assert (paths["/sitemap.xml"], paths["/listed.xml"], paths["/deep"]) == (1, 1, 1)
    notes = list(crawl.events.filter(kind=CrawlEvent.Kind.SITEMAP).values_list("detail", flat=True))
    assert notes == [f"{site.url}/sitemap.xml: HTTP 503"]
    assert crawl.failures.count() == 0  # a sitemap is read once, not retried
    assert crawl.pages.get(url=site.url + "/listed.xml").digest != ""


def test_an_index_lists_sitemaps_of_the_crawl_s_sites_only(user, make_site):
    holder = {}

    def handler(request):
        base = holder["url"]
        index = (
            '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<sitemap><loc>{base}/own.xml</loc></sitemap>"
            "<sitemap><loc>http://elsewhere.test/theirs.xml</loc></sitemap></sitemapindex>"
        )
        return pages_site(
            {
                "/": "<h1>home</h1>",
                "/sitemap.xml": Response(body=index, content_type="application/xml"),
                "/own.xml": Response(body=urlset(f"{base}/p"), content_type="application/xml"),
                "/p": "p",
            }
        )(request)

    site = make_site(handler)
    holder["url"] = site.url
    crawl = drive(start(user, site, follow_sitemaps=True))
    assert Counter(site.paths())["/p"] == 1
    assert not crawl.pages.filter(url__contains="elsewhere").exists()
    notes = list(crawl.events.filter(kind=CrawlEvent.Kind.SITEMAP).values_list("detail", flat=True))
    assert notes == [
        f"{site.url}/sitemap.xml: 1 sitemaps on other sites than the crawl's: not read"
    ]


# What changed since the last run ---------------------------------------------------------------


class ChangingSite:
    """Pages whose bodies change between runs; ETags so that an unchanged page can be a 304."""

    def __init__(self) -> None:
        self.bodies = {
            "/": '<a href="/same">same</a><a href="/edited">edited</a><a href="/removed">r</a>',
            "/same": "<h1>same</h1>",
            "/edited": "<h1>v1</h1>",
            "/removed": "<h1>soon gone</h1>",
        }

    def __call__(self, request):
        path = request.path
        if path not in self.bodies:
            return Response(status=404, body="no")
        body = self.bodies[path]
        etag = '"' + hashlib.md5(body.encode()).hexdigest() + '"'
        if request.headers.get("If-None-Match") == etag:
            return Response(status=304, headers={"ETag": etag})
        return Response(body=body, headers={"ETag": etag})


def test_a_schedule_run_says_what_is_new_changed_unchanged_and_gone(
    user, make_site, django_capture_on_commit_callbacks
):
    changing = ChangingSite()
    site = make_site(changing)
    template = services.crawl_create(
        user=user, name="t", seeds=[site.url + "/"], obey_robots=False, threads=2
    )
    schedule = schedules.schedule_create(user=user, template=template, cron="0 3 * * *")
    first = drive(schedules.schedule_run(schedule=schedule))
    assert first.baseline_id is None and first.state == CrawlState.FINISHED

    changing.bodies["/"] = (
        '<a href="/same">same</a><a href="/edited">edited</a><a href="/new">n</a>'
    )
    changing.bodies["/edited"] = "<h1>v2</h1>"
    del changing.bodies["/removed"]
    changing.bodies["/new"] = "<h1>new</h1>"
    before = len(site.log)
    webhooks.webhook_create(user=user, url=site.url + "/hook", events=["finished"], crawl=template)
    with django_capture_on_commit_callbacks(execute=True):
        second = drive(schedules.schedule_run(schedule=schedule))
    assert second.baseline_id == first.pk

    pages = pages_by_path(second)
    assert pages["/same"].status == 304 and pages["/same"].change == Change.UNCHANGED
    assert (
        pages["/same"].title == "" or pages["/same"].digest == pages_by_path(first)["/same"].digest
    )
    assert pages["/edited"].change == Change.CHANGED and pages["/edited"].status == 200
    assert pages["/new"].change == Change.NEW
    assert pages["/"].change == Change.CHANGED
    # The unchanged page's second fetch was conditional, and answered 304.
    second_requests = site.log[before:]
    same = [r for r in second_requests if r.path == "/same"]
    assert len(same) == 1 and same[0].headers.get("If-None-Match")
    assert second.stats["not_modified"] == 1

    counts = changes.counts(first, second)
    assert counts == {"new": 1, "changed": 2, "unchanged": 1, "gone": 1}
    assert changes.change_counts(second) == counts
    gone = changes.compared(first, second, "gone")
    assert [p.url for p in gone] == [site.url + "/removed"]
    payload = WebhookDelivery.objects.get(crawl=second).payload
    assert payload["crawl"]["changes"] == counts and payload["crawl"]["baseline"] == first.pk


def test_a_page_answered_304_still_leads_to_its_links(user, make_site):
    """An unchanged page's links are those it had: a 304 carries them over."""
    changing = ChangingSite()
    site = make_site(changing)
    template = services.crawl_create(
        user=user, name="t", seeds=[site.url + "/"], obey_robots=False, threads=2
    )
    schedule = schedules.schedule_create(user=user, template=template, cron="0 3 * * *")
    drive(schedules.schedule_run(schedule=schedule))
    second = drive(schedules.schedule_run(schedule=schedule))
    pages = pages_by_path(second)
    assert {p.status for p in pages.values()} == {304}
    assert set(pages) == {"/", "/same", "/edited", "/removed"}
    assert all(p.change == Change.UNCHANGED for p in pages.values())
    assert second.stats["not_modified"] == 4


def test_a_retried_page_keeps_the_errors_of_its_earlier_fetches(user, make_site):
    tries = Counter()

    def flaky(request):
        tries[request.path] += 1
        if request.path == "/" and tries["/"] < 3:
            return Response(status=503, body="busy")
        return Response(body="<h1>ok</h1>")

    site = make_site(flaky)
    crawl = drive(start(user, site, max_retries=3))
    page = crawl.pages.get()
    assert page.status == 200 and page.attempts == 3
    assert page.history == ["HTTP 503", "HTTP 503"]


def test_requests_carry_how_they_came_through_the_frontier(redis):
    frontier = Frontier(1)
    frontier.configure(max_pages=10, max_depth=2, host_delay=0)
    frontier.set_state("running")
    frontier.add_seeds(["http://a.test/sitemap.xml"], via="M")
    [claimed] = frontier.claim(1, lease_seconds=30)
    assert claimed == Request(url="http://a.test/sitemap.xml", via="M")
    assert claimed.reads_sitemap


def test_a_channel_s_rules_apply_to_its_crawls_that_have_none(user, make_site, staff_client):
    from crawls.models import Channel

    rule = {"name": "h", "kind": "css", "expr": "h1"}
    answer = staff_client.post(
        "/api/channels/",
        {
            "slug": "shop",
            "name": "Shop",
            "extract_rules": [rule],
        },
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content
    refused = staff_client.post(
        "/api/channels/",
        {
            "slug": "bad",
            "name": "Bad",
            "extract_rules": [{**rule, "expr": "h1["}],
        },
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert refused.json()["extract_rules"][0].startswith("Rule 1 (h): ")
    site = make_site(pages_site({"/": "<h1>Hello</h1>"}))
    channel = Channel.objects.get(slug="shop")
    own = [{"name": "t", "kind": "css", "expr": "title"}]
    plain = drive(start(user, site, channel=channel))
    assert plain.pages.get().extracted == {"h": "Hello"}
    with_own = drive(start(user, site, channel=channel, extract_rules=own))
    assert with_own.pages.get().extracted == {"t": None}
