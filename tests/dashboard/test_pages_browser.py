"""The pages of a crawl, server side: the browser's filters, sorts and paging by key (forwards
and back, NULL statuses included), the same on the API and the exports, one page's detail with
a hostile body shown as text, the raw body as a download, the comparison of two crawls, and the
rules preview."""

from __future__ import annotations

import csv
import io
import json
import random
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import lxml.html
import pytest
from django.utils import timezone

from crawls import pages as pages_module
from crawls import services
from crawls.engine.rows import url_hash
from crawls.models import Change, Page
from crawls.page_filters import PageFilter
from crawls.pages import page_slice
from tests.support.crawling import drive, start_site_crawl
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db

TYPES = ["text/html; charset=utf-8", "application/pdf", "image/png", "application/json"]


def make_pages(crawl, n: int, *, seed: int = 3) -> list[Page]:
    rng = random.Random(seed)
    now = timezone.now()
    pages = []
    for i in range(n):
        status = rng.choice([200, 200, 200, 301, 404, 500, None])
        url = f"http://site{i % 3}.test/{rng.choice(['docs', 'blog', 'shop'])}/{i:04d}"
        pages.append(
            Page(
                crawl=crawl,
                url=url,
                url_hash=url_hash(url),
                status=status,
                title=rng.choice(["Alpha", "Beta guide", "Gamma", ""]) + f" {i}",
                content_type=rng.choice(TYPES),
                bytes=rng.randrange(0, 50_000),
                elapsed_ms=rng.randrange(1, 3000),
                depth=rng.randrange(0, 6),
                fetched_at=now - timedelta(seconds=rng.randrange(0, 3600)),
                change=rng.choice(["", "new", "changed", "unchanged"]),
                fp=rng.getrandbits(63),
                extracted={"price": f"{rng.randrange(1, 99)}.00"} if i % 2 else {},
            )
        )
    Page.objects.bulk_create(pages)
    return list(crawl.pages.all())


@pytest.fixture
def crawl(user):
    crawl = services.crawl_create(
        user=user,
        name="browse",
        seeds=["http://site0.test/"],
        extract_rules=[{"name": "price", "kind": "css", "expr": ".price"}],
    )
    make_pages(crawl, 137)
    return crawl


def key_of(page: Page, sort: str):
    value = page.url[:200] if sort == "url" else getattr(page, sort)
    return value


def expected_order(pages: list[Page], sort: str, desc: bool, nulls_last: bool) -> list[int]:
    """What the database's own order is: NULLs last ascending on PostgreSQL, first on SQLite."""

    def key(page):
        value = key_of(page, sort)
        is_null = value is None
        # Within the direction: NULLs as the largest (PostgreSQL) or the smallest (SQLite).
        return ((is_null if nulls_last else not is_null), value if not is_null else 0, page.pk)

    ordered = sorted(pages, key=key)
    return [p.pk for p in (reversed(ordered) if desc else ordered)]


def walk(crawl, flt: PageFilter) -> list[int]:
    """Every row, screen after screen, by the `next` cursors; and checked back by `previous`:
    the same screens, or, when some were partial (a search read a window of the order at a
    time, whose edges differ going back), the same rows."""
    screens, cursor, partial = [], "", False
    while True:
        found = page_slice(crawl, flt, after=cursor)
        screens.append([p.pk for p in found.rows])
        partial |= bool(found.searched)
        if not found.next:
            break
        cursor = found.next
    # Back from the last screen, screen by screen, by the previous cursors.
    back = page_slice(crawl, flt, after=cursor) if len(screens) > 1 else None
    index, backwards = len(screens) - 1, []
    while back is not None and back.previous:
        back = page_slice(crawl, flt, before=back.previous)
        index -= 1
        backwards[:0] = [p.pk for p in back.rows]
        if not partial:
            assert [p.pk for p in back.rows] == screens[index]
    forwards = [pk for screen in screens for pk in screen]
    if partial:
        assert backwards == forwards[: len(backwards)] and len(backwards) >= len(forwards) - len(
            screens[-1]
        )
    return forwards


@pytest.mark.parametrize(
    "sort",
    [
        "id",
        "url",
        "status",
        "title",
        "content_type",
        "bytes",
        "elapsed_ms",
        "depth",
        "fetched_at",
        "change",
    ],
)
@pytest.mark.parametrize("desc", [False, True])
def test_every_sort_pages_through_every_row_once_in_order_both_ways(crawl, sort, desc):
    from django.db import connection

    pages = list(crawl.pages.all())
    flt = PageFilter(sort=sort, desc=desc, size=25)
    assert walk(crawl, flt) == expected_order(
        pages, sort, desc, nulls_last=connection.vendor == "postgresql"
    )


# How page_slice reads a filtered screen: (SORT_LIMIT, WALK_LIMIT). As they are (every test
# filter keeps few pages: read through the filters' indexes and sorted); every filter keeping
# "many" (tested along the sort's index, the walk bounded by a window past every row); and
# a window of 7 rows (a screen is seldom in it: read through the filters' indexes after all).
PLANS = {"sorted": None, "walked": (3, 10_000), "walked, then sorted": (3, 7)}


@pytest.mark.parametrize(
    "query",
    [
        "status_class=2xx&sort=bytes&order=desc",
        "depth_min=2&sort=url",
        "change=new&sort=fetched_at",
        "status=404&sort=title&order=desc",
        "content_type=image/png&sort=id",
        "q=guide&depth_max=3&sort=depth",
        "q=GUIDE&sort=bytes",
        "q=shop&sort=url&order=desc",
        "status_class=none&sort=status",
        "q=/0&sort=elapsed_ms",
    ],
)
@pytest.mark.parametrize("plan", PLANS)
def test_a_filter_gives_the_same_screens_whichever_way_it_is_read(crawl, query, plan, monkeypatch):
    """Few matches are read through the filter's index and sorted; many, by walking a window
    of the sort's index (pages.page_slice chooses by the bounded count), then as few when the
    window holds less than a screen: the same rows, screen by screen, forwards and back."""
    params = {k: v[0] for k, v in parse_qs(query).items()}
    flt = PageFilter.from_params({**params, "size": "25"})
    if PLANS[plan]:
        monkeypatch.setattr(pages_module, "SORT_LIMIT", PLANS[plan][0])
        monkeypatch.setattr(pages_module, "TEXT_LIMIT", PLANS[plan][0])
        monkeypatch.setattr(pages_module, "WALK_LIMIT", PLANS[plan][1])
    from django.db import connection

    wanted = flt.apply(crawl.pages.all())
    expected = expected_order(list(wanted), flt.sort, flt.desc, connection.vendor == "postgresql")
    assert walk(crawl, flt) == expected and expected


def test_a_filter_whose_pages_sit_at_the_far_end_of_the_order_is_found(crawl, monkeypatch):
    """4xx pages are the smallest: sorted by size descending, none is in the first rows of the
    sort's index, and a walk along it finds them only at its end."""
    for rank, page in enumerate(crawl.pages.filter(status=404)):
        Page.objects.filter(pk=page.pk).update(bytes=rank)
    crawl.pages.exclude(status=404).update(bytes=1_000_000)
    monkeypatch.setattr(pages_module, "SORT_LIMIT", 3)
    monkeypatch.setattr(pages_module, "WALK_LIMIT", 20)
    flt = PageFilter(status_class="4xx", sort="bytes", desc=True, size=25)
    expected = list(
        crawl.pages.filter(status=404).order_by("-bytes", "-id").values_list("id", flat=True)
    )
    assert walk(crawl, flt) == expected and len(expected) > 3


def test_a_field_sorts_only_pages_few_enough(crawl, user_client, monkeypatch):
    found = page_slice(crawl, PageFilter(sort="field:price", desc=True, size=200))
    prices = [p.extracted.get("price") for p in found.rows]
    assert (
        prices[: prices.index(None)]
        == sorted([p for p in prices if p is not None], key=str, reverse=True)
        or prices[0] is None
    )
    monkeypatch.setattr(pages_module, "COUNT_LIMIT", 10)
    response = user_client.get(f"/crawls/{crawl.pk}/pages/?sort=field:price")
    assert response.status_code == 400
    assert "Sorting by an extracted field needs filters that leave at most 10 pages" in (
        lxml.html.fromstring(response.content).text_content()
    )
    ok = user_client.get(f"/crawls/{crawl.pk}/pages/?sort=field:price&status=301&depth_max=0")
    assert ok.status_code == 200


def test_filters_select_what_they_say(crawl):
    pages = list(crawl.pages.all())
    cases = {
        "q=guide": lambda p: "guide" in p.title.lower() or "guide" in p.url.lower(),
        "status_class=4xx": lambda p: p.status is not None and 400 <= p.status < 500,
        "status_class=none": lambda p: p.status is None,
        "status=301": lambda p: p.status == 301,
        "content_type=application/pdf": lambda p: p.content_type.startswith("application/pdf"),
        "depth_min=2&depth_max=3": lambda p: 2 <= p.depth <= 3,
        "change=changed": lambda p: p.change == "changed",
        "q=/shop/&status_class=2xx": lambda p: "/shop/" in p.url and p.status == 200,
    }
    for query, wanted in cases.items():
        params = {k: v[0] for k, v in parse_qs(query).items()}
        flt = PageFilter.from_params({**params, "size": "200"})
        found = page_slice(crawl, flt)
        expected = sorted(p.pk for p in pages if wanted(p))
        assert [p.pk for p in found.rows] == expected, query
        assert found.count == len(expected) and not found.count_capped, query
        assert expected, f"{query}: the test data should match some pages"


def test_the_browser_page_shows_the_rows_fields_and_links_to_each_page(crawl, user_client):
    response = user_client.get(f"/crawls/{crawl.pk}/pages/?status_class=2xx&sort=bytes&order=desc")
    assert response.status_code == 200
    html = lxml.html.fromstring(response.content)
    rows = html.cssselect("table.pages-table tbody tr")
    expected = list(crawl.pages.filter(status__gte=200, status__lt=300).order_by("-bytes", "-id"))
    assert len(rows) == min(50, len(expected))
    first = rows[0]
    link = first.cssselect("td.url a")[0]
    assert link.get("href") == f"/crawls/{crawl.pk}/pages/{expected[0].pk}/"
    assert first.cssselect("td.url a.live")[0].get("href") == expected[0].url
    assert first.cssselect("td.url a.live")[0].get("rel") == "noopener noreferrer nofollow"
    headings = [th.text_content().strip(" ▲▼") for th in html.cssselect("table.pages-table th")]
    assert headings[-1] == "price"  # a column per extraction rule
    assert html.cssselect("th[aria-sort=descending]")[0].text_content().startswith("Size")
    heading = html.cssselect("#h-pages")[0].text_content()
    assert heading.startswith(f"{len(expected)} pages")


def test_bad_filters_are_a_400_naming_each_one(crawl, user_client):
    response = user_client.get(
        f"/crawls/{crawl.pk}/pages/?status=abc&status_class=6xx&size=7&sort=nope&depth_min=-1"
    )
    assert response.status_code == 400
    text = lxml.html.fromstring(response.content).text_content()
    for message in (
        "The status is a whole number, not 'abc'.",
        "The status class is one of",
        "The page size is one of 25, 50, 100, 200.",
        "Sort by one of",
        "The minimum depth is from 0 to 4000, not -1.",
    ):
        assert message in text, message
    broken = user_client.get(f"/crawls/{crawl.pk}/pages/?after=not-a-cursor")
    assert broken.status_code == 400
    assert "This link to a page of results is broken: start again." in broken.content.decode()
    assert page_slice(crawl, PageFilter()).rows  # and every page is shown under the message
    other = page_slice(crawl, PageFilter(sort="bytes")).next
    wrong_sort = user_client.get(f"/crawls/{crawl.pk}/pages/?sort=depth&after={other}")
    assert "for another order" in wrong_sort.content.decode()


@pytest.mark.parametrize(
    "sort", ["field:-1", "field:0", "field:é", "field:a b", "field:a.b", "field:$", "field:[0]"]
)
def test_a_field_sort_that_names_no_possible_rule_is_a_400_on_every_door(crawl, user_client, sort):
    """A field sort is `field:` and a rule's name (crawls.engine.extraction_rules). Other shapes
    were written into a JSON path: `field:-1` was a 500 on SQLite ("JSON path error")."""
    page = user_client.get(f"/crawls/{crawl.pk}/pages/", {"sort": sort})
    assert page.status_code == 400
    assert "Sort by one of id, url," in lxml.html.fromstring(page.content).text_content()
    api = user_client.get(f"/api/crawls/{crawl.pk}/pages/", {"sort": sort})
    assert api.status_code == 400 and list(api.json()) == ["sort"], api.content[:300]
    export = user_client.get(f"/crawls/{crawl.pk}/export.csv", {"sort": sort})
    assert export.status_code == 400 and b"Sort by one of" in export.content


def test_a_field_sort_reads_the_rules_own_name_even_with_double_underscores(user, user_client):
    """A rule may be named `a__b`: its sort reads the key "a__b", not a key b inside a key a."""
    crawl = services.crawl_create(
        user=user,
        name="fields",
        seeds=["http://site0.test/"],
        extract_rules=[{"name": "a__b", "kind": "css", "expr": ".x"}],
    )
    for value in ("2", "3", "1"):
        url = f"http://site0.test/{value}"
        Page.objects.create(
            crawl=crawl,
            url=url,
            url_hash=url_hash(url),
            status=200,
            fetched_at=timezone.now(),
            extracted={"a__b": value},
        )
    found = page_slice(crawl, PageFilter.from_params({"sort": "field:a__b"}))
    assert [p.extracted["a__b"] for p in found.rows] == ["1", "2", "3"]
    api = user_client.get(f"/api/crawls/{crawl.pk}/pages/", {"sort": "field:a__b", "order": "desc"})
    assert [row["fields"]["a__b"] for row in api.json()["results"]] == ["3", "2", "1"]


def test_the_api_pages_filter_sort_and_page_by_cursor(crawl, user_client):
    url = f"/api/crawls/{crawl.pk}/pages/?status_class=2xx&sort=depth&size=25"
    seen = []
    while url:
        answer = user_client.get(url).json()
        seen += [row["id"] for row in answer["results"]]
        url = answer["next"]
        if url:
            parts = urlsplit(url)
            url = f"{parts.path}?{parts.query}"
    expected = crawl.pages.filter(status__gte=200, status__lt=300).order_by("depth", "id")
    assert seen == [p.pk for p in expected]
    assert answer["count"] == len(seen) and answer["count_capped"] is False
    bad = user_client.get(f"/api/crawls/{crawl.pk}/pages/?size=0&change=maybe")
    assert bad.status_code == 400
    assert set(bad.json()) == {"size", "change"}
    one = crawl.pages.exclude(extracted={}).first()
    detail = user_client.get(f"/api/crawls/{crawl.pk}/pages/{one.pk}/").json()
    assert detail["url"] == one.url and detail["fields"] == one.extracted
    assert "body" not in detail


def test_exports_hold_what_is_filtered_with_a_column_per_field(crawl, user_client):
    response = user_client.get(f"/crawls/{crawl.pk}/export.csv?status=404")
    body = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    expected = crawl.pages.filter(status=404).order_by("id")
    assert [int(r["id"]) for r in rows] == [p.pk for p in expected]
    assert "field:price" in rows[0]
    assert [r["field:price"] for r in rows] == [p.extracted.get("price", "") for p in expected]
    jsonl = b"".join(
        user_client.get(f"/crawls/{crawl.pk}/export.jsonl?change=new").streaming_content
    ).decode()
    lines = [json.loads(line) for line in jsonl.splitlines()]
    assert {line["change"] for line in lines} == {"new"}
    assert len(lines) == crawl.pages.filter(change="new").count()
    assert user_client.get(f"/crawls/{crawl.pk}/export.csv?depth_min=x").status_code == 400


# One page --------------------------------------------------------------------------------------

HOSTILE = (
    b"<html><head><title>x</title><script>document.title='owned'</script></head>"
    b'<body><img src=x onerror="alert(1)"><iframe src="javascript:alert(2)"></iframe></body></html>'
)


def test_a_hostile_body_is_shown_as_text_and_downloaded_as_bytes(user, user_client):
    crawl = services.crawl_create(user=user, name="k", seeds=["http://x.test/"], keep_bodies=True)
    page = Page.objects.create(
        crawl=crawl,
        url="http://x.test/<b>",
        url_hash="h",
        status=200,
        fetched_at=timezone.now(),
        content_type="text/html; charset=utf-8",
        body=HOSTILE,
        title="<script>alert(3)</script>",
        headers={"content-type": "text/html", "set-cookie": "••••••"},
        request_headers={"User-Agent": "ua/1", "Accept": "*/*"},
        links=[["http://x.test/a", "<i>A</i>", ""], ["http://y.test/", "", "other site (y.test)"]],
        links_total=2,
        extracted={"t": "<em>v</em>"},
        attempts=3,
        history=["HTTP 503", "timed out"],
    )
    response = user_client.get(f"/crawls/{crawl.pk}/pages/{page.pk}/")
    assert response.status_code == 200
    html = lxml.html.fromstring(response.content)
    # Nothing of the body became markup of this page: no script but ours, no iframe, no img.
    assert [s.get("src") for s in html.iter("script")] == [
        "/static/js/nav.js",
        "/static/js/dates.js",
        "/static/js/live.js",
        "/static/js/health.js",
    ]
    assert not html.cssselect("iframe") and not html.cssselect("main img")
    assert html.cssselect("pre.body")[0].text_content() == HOSTILE.decode()
    text = html.text_content()
    for shown in (
        "<script>alert(3)</script>",
        "<i>A</i>",
        "<em>v</em>",
        "HTTP 503",
        "other site (y.test)",
        "ua/1",
        "Fetches3",
    ):
        assert shown in text.replace("\n", "").replace(" ", "") or shown in text, shown
    raw = user_client.get(f"/crawls/{crawl.pk}/pages/{page.pk}/body")
    assert raw.content == HOSTILE
    assert raw["Content-Type"] == "application/octet-stream"
    assert raw["Content-Disposition"].startswith("attachment;")
    assert raw["X-Content-Type-Options"] == "nosniff"
    assert raw["Content-Security-Policy"].endswith("; sandbox")


@pytest.mark.parametrize(
    ("content_type", "extension"),
    [
        ("text/html; charset=utf-8", "html"),
        ("application/json", "json"),
        ("image/png", "png"),
        ("image/jpeg", "jpg"),
        ("application/pdf", "pdf"),
        ("text/plain", "txt"),
        ("application/xml", "xml"),
        ("text/xml; charset=utf-8", "xml"),
        ("TEXT/CSS", "css"),
        ("text/javascript", "js"),
        ("image/svg+xml", "svg"),
        ("image/webp", "webp"),
        ("application/xhtml+xml", "xhtml"),
        ("application/rss+xml", "xml"),
        ("application/x-unheard-of", "bin"),
        ("", "bin"),
        ('text/html"; x=<y>', "bin"),
    ],
)
def test_a_kept_body_downloads_with_the_extension_of_its_type(
    user, user_client, content_type, extension
):
    crawl = services.crawl_create(user=user, name="k", seeds=["http://x.test/"], keep_bodies=True)
    page = Page.objects.create(
        crawl=crawl,
        url="http://x.test/",
        url_hash="h",
        status=200,
        fetched_at=timezone.now(),
        content_type=content_type,
        body=HOSTILE,
    )
    raw = user_client.get(f"/crawls/{crawl.pk}/pages/{page.pk}/body")
    name = f"crawl-{crawl.pk}-page-{page.pk}.{extension}"
    assert raw["Content-Disposition"] == f'attachment; filename="{name}"'
    # Whatever its name, it stays a download of bytes that no browser runs here.
    assert raw["Content-Type"] == "application/octet-stream"
    assert raw["X-Content-Type-Options"] == "nosniff"
    assert raw.content == HOSTILE


def test_a_redirect_chain_shows_on_each_of_its_pages(user, user_client, make_site):
    site = make_site(
        pages_site(
            {
                "/": '<a href="/a">a</a><a href="/out">out</a>',
                "/a": Response(status=301, headers={"Location": "/b"}),
                "/b": Response(status=302, headers={"Location": "/c"}),
                "/c": "<title>C</title>",
                "/out": Response(status=302, headers={"Location": "http://elsewhere.test/"}),
            }
        )
    )
    crawl = drive(start_site_crawl(user, site))
    pages = {p.url.removeprefix(site.url): p for p in crawl.pages.all()}

    def detail(path: str) -> lxml.html.HtmlElement:
        response = user_client.get(f"/crawls/{crawl.pk}/pages/{pages[path].pk}/")
        assert response.status_code == 200
        return lxml.html.fromstring(response.content)

    def chain(html) -> list[str]:
        return [" ".join(li.text_content().split()) for li in html.cssselect("ol.chain li")]

    middle = detail("/b")
    assert chain(middle) == [site.url + "/a 301", site.url + "/b (this page)", site.url + "/c 200"]
    hrefs = [a.get("href") for a in middle.cssselect("ol.chain a")]
    assert hrefs == [f"/crawls/{crawl.pk}/pages/{pages[p].pk}/" for p in ("/a", "/c")]
    [dt] = [dt for dt in middle.cssselect("dl.facts dt") if dt.text_content() == "Redirects to"]
    assert dt.getnext().cssselect("a")[0].text_content() == site.url + "/c"
    last = detail("/c")
    assert chain(last)[-1] == site.url + "/c (this page)" and len(chain(last)) == 3
    found = " ".join(last.cssselect("section[aria-labelledby=h-found] p")[0].text_content().split())
    assert found == f"Redirected here from {site.url}/b."
    out = detail("/out")
    assert chain(out)[-1] == "http://elsewhere.test/ — other site (elsewhere.test)"
    listed = user_client.get(f"/crawls/{crawl.pk}/pages/?source=redirect")
    rows = lxml.html.fromstring(listed.content).cssselect("table.pages-table tbody tr")
    assert [r.cssselect("td.url a")[0].text_content() for r in rows] == [
        site.url + "/b",
        site.url + "/c",
    ]
    everything = lxml.html.fromstring(user_client.get(f"/crawls/{crawl.pk}/pages/").content)
    assert "→ http://elsewhere.test/" in everything.text_content()


def test_a_binary_body_is_not_shown_as_text(user, user_client):
    crawl = services.crawl_create(user=user, name="k", seeds=["http://x.test/"], keep_bodies=True)
    page = Page.objects.create(
        crawl=crawl,
        url="http://x.test/i.png",
        url_hash="i",
        status=200,
        body=b"\x89PNG\x00\x01",
        fetched_at=timezone.now(),
        content_type="image/png",
    )
    html = lxml.html.fromstring(user_client.get(f"/crawls/{crawl.pk}/pages/{page.pk}/").content)
    assert not html.cssselect("pre.body")
    assert "Binary content: not shown as text." in html.text_content()


def test_a_huge_body_shows_its_first_megabyte_as_text(user, user_client):
    crawl = services.crawl_create(user=user, name="k", seeds=["http://x.test/"], keep_bodies=True)
    body = b"<p>" + b"a" * (3 * 1024 * 1024) + b"</p>"
    page = Page.objects.create(
        crawl=crawl,
        url="http://x.test/big",
        url_hash="b",
        status=200,
        body=body,
        fetched_at=timezone.now(),
        content_type="text/html",
    )
    html = lxml.html.fromstring(user_client.get(f"/crawls/{crawl.pk}/pages/{page.pk}/").content)
    assert len(html.cssselect("pre.body")[0].text_content()) == 1024 * 1024
    assert "the first 1 MB" in html.text_content()


def test_someone_elses_pages_are_404(user, other_user, user_client):
    theirs = services.crawl_create(user=other_user, name="t", seeds=["http://x.test/"])
    page = Page.objects.create(
        crawl=theirs, url="http://x.test/", url_hash="x", fetched_at=timezone.now(), body=b"s"
    )
    for path in (
        f"/crawls/{theirs.pk}/pages/",
        f"/crawls/{theirs.pk}/pages/{page.pk}/",
        f"/crawls/{theirs.pk}/pages/{page.pk}/body",
        f"/api/crawls/{theirs.pk}/pages/{page.pk}/",
    ):
        assert user_client.get(path).status_code == 404, path


# Comparing two crawls --------------------------------------------------------------------------


def test_the_comparison_page_counts_and_lists_each_kind(user, user_client):
    older = services.crawl_create(user=user, name="a", seeds=["http://x.test/"])
    newer = services.crawl_create(user=user, name="b", seeds=["http://x.test/"])
    now = timezone.now()

    def add(crawl, path, digest, status=200):
        Page.objects.create(
            crawl=crawl,
            url="http://x.test" + path,
            url_hash=path,
            fp=hash(path),
            digest=digest,
            status=status,
            fetched_at=now,
        )

    for path, digest in (("/same", "d1"), ("/edit", "d2"), ("/gone", "d3"), ("/nm", "d4")):
        add(older, path, digest)
    add(newer, "/same", "d1")
    add(newer, "/edit", "d2-new")
    add(newer, "/nm", "", status=304)
    add(newer, "/new", "d5")
    response = user_client.get(f"/crawls/compare/?a={older.pk}&b={newer.pk}&show=gone")
    html = lxml.html.fromstring(response.content)
    counts = {a.get("data-kind"): int(a.text) for a in html.cssselect("dl.counters a")}
    assert counts == {"new": 1, "changed": 1, "unchanged": 2, "gone": 1}
    assert [a.text for a in html.cssselect("#h-list ~ div td.url a")] == ["http://x.test/gone"]
    export = user_client.get(f"/crawls/compare/export.csv?a={older.pk}&b={newer.pk}&show=changed")
    rows = list(csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert [r["url"] for r in rows] == ["http://x.test/edit"]
    assert user_client.get(f"/crawls/compare/?a={older.pk}&b=999999").status_code == 400
    assert user_client.get(f"/crawls/compare/?a=x&b={newer.pk}").status_code == 400


# The rules preview -----------------------------------------------------------------------------


def preview(client, url, rules, **fields):
    data = {"preview_url": url, "extract_rules": json.dumps(rules), "timeout": "5", **fields}
    return client.post("/crawls/preview/", data, HTTP_ACCEPT="application/json")


def test_the_preview_fetches_one_page_and_shows_what_each_rule_yields(user_client, make_site):
    site = make_site(
        pages_site(
            {
                "/p": '<h1>Lamp</h1><span class="price">$12</span><a href="/x">x</a>',
                "/data": Response(body='{"a": {"b": [1, 2]}}', content_type="application/json"),
            }
        )
    )
    rules = [
        {"name": "name", "kind": "css", "expr": "h1"},
        {"name": "price", "kind": "regex", "expr": r"\$(\d+)"},
        {"name": "b", "kind": "json", "expr": "a.b", "url_pattern": "/data"},
        {"name": "links", "kind": "xpath", "expr": "//a/@href", "many": True},
    ]
    answer = preview(user_client, site.url + "/p", rules).json()
    assert answer["status"] == 200
    assert answer["fields"] == {"name": "Lamp", "price": "12", "links": [site.url + "/x"]}
    assert answer["skipped"] == ["b"]
    data = preview(user_client, site.url + "/data", rules[2:3]).json()
    assert data["fields"] == {"b": [1, 2]}
    assert [r.path for r in site.log] == ["/p", "/data"]


def test_the_preview_shows_no_fields_on_a_page_the_crawl_would_not_keep_them_of(
    user_client, make_site
):
    """It showed a 404's fields, which a crawl never keeps (results.extract: 2xx only)."""
    site = make_site(pages_site({}))  # every page a 404 with an <h1>
    answer = preview(
        user_client,
        site.url + "/gone",
        [
            {"name": "heading", "kind": "css", "expr": "h1"},
        ],
    ).json()
    assert answer["status"] == 404
    assert answer["fields"] == {} and answer["skipped"] == []
    assert answer["not_kept"] == (
        "The crawl keeps fields of complete 2xx responses only: this page answered HTTP 404."
    )


def test_the_preview_names_what_is_wrong(user_client, settings):
    bad = preview(user_client, "ftp://x", [{"name": "1x", "kind": "css", "expr": "h1["}])
    assert bad.status_code == 400
    errors = bad.json()["errors"]
    assert set(errors) == {"url", "extract_rules"}
    assert any("Rule 1" in e for e in errors["extract_rules"])
    settings.CRAWLHUB_BLOCK_PRIVATE_NETWORKS = True
    blocked = preview(
        user_client, "http://127.0.0.1:9/", [{"name": "t", "kind": "css", "expr": "h1"}]
    )
    assert blocked.json()["error"].startswith("blocked: 127.0.0.1 is")
    assert preview(user_client, "http://x.test/", "not a list").status_code == 400


def test_the_change_filter_lists_the_pages_of_each_kind(crawl, user_client):
    html = lxml.html.fromstring(
        user_client.get(f"/crawls/{crawl.pk}/pages/?change=new&size=200").content
    )
    shown = len(html.cssselect("table.pages-table tbody tr"))
    assert shown == crawl.pages.filter(change=Change.NEW).count() > 0


def test_each_screen_says_where_it_sits_in_the_list(crawl, user_client):
    """Page 2 used to say nothing of where it was ("51-100 of 137")."""
    url = f"/crawls/{crawl.pk}/pages/?sort=depth"
    seen = []
    while url:
        html = lxml.html.fromstring(user_client.get(url).content)
        seen.append(html.get_element_by_id("position").text_content())
        following = html.xpath('//nav[@class="pager"]/a[@rel="next"]/@href')
        url = f"/crawls/{crawl.pk}/pages/{following[0]}" if following else ""
    assert seen == ["1–50 of 137", "51–100 of 137", "101–137 of 137"]
    (back,) = html.xpath('//nav[@class="pager"]/a[@rel="prev"]/@href')
    html = lxml.html.fromstring(user_client.get(f"/crawls/{crawl.pk}/pages/{back}").content)
    assert html.get_element_by_id("position").text_content() == "51–100 of 137"


def test_the_api_next_link_has_no_stray_ampersand(crawl, user_client):
    answer = user_client.get(f"/api/crawls/{crawl.pk}/pages/").json()
    assert "next" in answer, answer
    query = urlsplit(answer["next"]).query
    assert not query.startswith("&") and "&&" not in query, answer["next"]
    assert query.startswith("after=")
    filtered = user_client.get(f"/api/crawls/{crawl.pk}/pages/?status_class=2xx&size=25").json()
    assert "&after=" in filtered["next"] and "?&" not in filtered["next"]
