"""The pages browser's text search: "contains" in a URL or a title whatever the case, with %, _
and quotes taken literally and searches shorter than the trigram index's reach still answered;
the index follows the rows as the engine inserts them and as they are renamed and deleted, and
its migration goes back and forth."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from crawls import pages as pages_module
from crawls import services
from crawls.engine.rows import PAGE_ROWS, url_hash
from crawls.models import Page
from crawls.page_filters import PageFilter
from crawls.page_search import TEXT_TABLE
from crawls.pages import page_slice

pytestmark = pytest.mark.django_db

TITLES = [
    "Pricing Plans",
    "pricing for teams",
    "100% Cotton_Shirt",
    "1000 cotton shirts",
    "CottonXShirt sale",
    'Say "hello" to us',
    "Straße und Weg",
    "",
    "ab initio",
    "Docs home",
]
URLS = [
    "https://shop.test/pricing",
    "https://shop.test/teams",
    "https://shop.test/p/1",
    "https://shop.test/p/2",
    "https://shop.test/p/3",
    "https://shop.test/PRICING-old",
    "https://de.test/strasse",
    "https://shop.test/docs/ab",
    "https://shop.test/x",
    "https://shop.test/docs/",
]


def add_pages(crawl, urls: list[str], titles: list[str]) -> None:
    """Pages written as the engine writes them (crawls.engine.rows.PAGE_ROWS)."""
    now = timezone.now()
    PAGE_ROWS.write(
        [
            PAGE_ROWS.row(
                Page(
                    crawl=crawl,
                    url=url,
                    url_hash=url_hash(url),
                    status=200,
                    title=title,
                    fetched_at=now,
                    bytes=len(title),
                )
            )
            for url, title in zip(urls, titles, strict=True)
        ]
    )


@pytest.fixture
def crawl(user):
    crawl = services.crawl_create(user=user, name="search", seeds=["https://shop.test/"])
    add_pages(crawl, URLS, TITLES)
    # Another crawl's page that matches every search below is never shown.
    other = services.crawl_create(user=user, name="other", seeds=["https://shop.test/"])
    add_pages(other, ["https://shop.test/pricing-100%-cotton_shirt-ab-x"], ['"hello" Straße'])
    return crawl


def search(crawl, q: str, **params: str) -> tuple[list[int], int]:
    found = page_slice(crawl, PageFilter.from_params({"q": q, "size": "200", **params}))
    assert not found.count_capped
    return [p.pk for p in found.rows], found.count


def containing(crawl, q: str) -> list[int]:
    low = q.lower()
    return [
        p.pk for p in crawl.pages.order_by("id") if low in p.url.lower() or low in p.title.lower()
    ]


@pytest.mark.parametrize(
    "q",
    [
        "pricing",
        "PRICING",
        "PrIcInG pLaNs",
        "cotton_shirt",
        "100%",
        '"hello"',
        "Straße",
        "/docs/",
        "ab",
        "x",
        "zzqx",
        "zq",
    ],
)
def test_a_search_finds_the_pages_whose_url_or_title_contains_it_whatever_the_case(crawl, q):
    ids, count = search(crawl, q)
    assert ids == containing(crawl, q) and count == len(ids)
    if q not in ("zzqx", "zq"):
        assert ids, f"{q}: the test data should match some pages"


def test_wildcards_and_quotes_in_a_search_are_taken_literally(crawl):
    titles = lambda q: {Page.objects.get(pk=pk).title for pk in search(crawl, q)[0]}  # noqa: E731
    assert titles("100%") == {"100% Cotton_Shirt"}  # not "1000 cotton shirts"
    assert titles("cotton_shirt") == {"100% Cotton_Shirt"}  # not "CottonXShirt sale"
    assert titles('say "hello"') == {'Say "hello" to us'}
    assert titles('"') == {'Say "hello" to us'}


def test_a_search_combines_with_filters_and_sorts(crawl):
    ids, count = search(crawl, "cotton", sort="bytes", order="desc")
    expected = crawl.pages.filter(title__icontains="cotton").order_by("-bytes", "-id")
    assert ids == [p.pk for p in expected] and count == 3
    assert search(crawl, "pricing", status="404") == ([], 0)


def test_the_index_follows_rows_as_they_are_written_renamed_and_deleted(crawl):
    add_pages(crawl, ["https://shop.test/new"], ["A zebra crossing"])
    (zebra,) = search(crawl, "zebra")[0]
    assert Page.objects.get(pk=zebra).url == "https://shop.test/new"
    Page.objects.filter(pk=zebra).update(title="An okapi", url="https://shop.test/okapi-page")
    assert search(crawl, "zebra") == ([], 0)
    assert search(crawl, "okapi")[0] == [zebra]
    # A page saved alone (the admin) is indexed too.
    Page.objects.create(
        crawl=crawl,
        url="https://shop.test/z",
        url_hash="z",
        title="Zebras again",
        fetched_at=timezone.now(),
    )
    assert len(search(crawl, "zebra")[0]) == 1
    crawl.pages.filter(title__startswith="Zebras").delete()
    Page.objects.filter(pk=zebra).delete()
    assert search(crawl, "zebra") == ([], 0) and search(crawl, "okapi") == ([], 0)
    if connection.vendor == "sqlite":  # the FTS5 index agrees with the rows it indexes
        with connection.cursor() as cur:
            cur.execute(
                f"INSERT INTO {TEXT_TABLE}({TEXT_TABLE}, rank) VALUES ('integrity-check', 1)"
            )


def index_is_whole() -> None:
    """SQLite's FTS5 index holds exactly the rows it indexes (a row missing from it, or there
    twice, fails the check; taking such a row out breaks the index)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cur:
            cur.execute(
                f"INSERT INTO {TEXT_TABLE}({TEXT_TABLE}, rank) VALUES ('integrity-check', 1)"
            )


def test_every_page_of_a_batch_is_indexed_once_when_some_of_its_rows_are_ignored(crawl):
    # An ignored row (a page written already) takes an id too: a batch's new rows are not the
    # ids just below the last one (crawls.engine.rows.PageInsert).
    urls = [f"https://shop.test/batch/{n}" for n in range(6)]
    add_pages(crawl, urls[1::2], ["Okapi one", "Okapi three", "Okapi five"])
    add_pages(crawl, urls, [f"Okapi {n} again" for n in range(6)])
    index_is_whole()
    assert sorted(search(crawl, "okapi")[0]) == sorted(
        crawl.pages.filter(url__in=urls).values_list("id", flat=True)
    )
    # Made by Django's bulk_create, with and without ignored conflicts, indexed alike.
    Page.objects.bulk_create(
        [
            Page(
                crawl=crawl,
                url="https://shop.test/bulk",
                url_hash="b1",
                title="Quagga bulk",
                fetched_at=timezone.now(),
            )
        ]
    )
    Page.objects.bulk_create(
        [
            Page(
                crawl=crawl,
                url=f"https://shop.test/bulk/{n}",
                url_hash=f"b{n}",
                title=f"Quagga {n}",
                fetched_at=timezone.now(),
            )
            for n in range(3)
        ],
        ignore_conflicts=True,
    )
    index_is_whole()
    assert len(search(crawl, "quagga")[0]) == 3
    crawl.pages.filter(title__startswith="Okapi").delete()
    crawl.pages.filter(title__startswith="Quagga").update(title="Renamed")
    index_is_whole()
    assert search(crawl, "okapi") == ([], 0) and search(crawl, "quagga") == ([], 0)


def text_index_exists() -> bool:
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'page_%_trgm'")
            return cur.fetchone()[0] == 2
        cur.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'crawls_page_text%'")
        return cur.fetchone()[0] > 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_text_index_migration_goes_back_and_forth(crawl):
    assert text_index_exists()
    call_command("migrate", "crawls", "0013", verbosity=0)
    assert not text_index_exists()
    # Written with the model as it was then: columns added since (Page.heads) are not there.
    then = (
        MigrationExecutor(connection)
        .loader.project_state(("crawls", "0013_webhook_test_delivery"))
        .apps
    )
    url = "https://shop.test/while-unindexed"
    then.get_model("crawls", "Page").objects.create(
        crawl_id=crawl.pk,
        url=url,
        url_hash=url_hash(url),
        status=200,
        title="Written while unindexed",
        fetched_at=timezone.now(),
        bytes=23,
    )
    call_command("migrate", "crawls", verbosity=0)
    assert text_index_exists()
    # Rows written before the index was made are in it.
    assert len(search(crawl, "while-unindexed")[0]) == 1
    assert search(crawl, "pricing")[0] == containing(crawl, "pricing")


# -- bounded searches: exact, or partial and saying so -------------------------------------------


def search_through(crawl, flt: PageFilter) -> tuple[list[int], list[int]]:
    """Every screen by the `next` cursors: (the ids, in order; each screen's `searched`)."""
    ids, searched, cursor = [], [], ""
    while True:
        found = page_slice(crawl, flt, after=cursor)
        ids += [p.pk for p in found.rows]
        searched.append(found.searched)
        if found.searched:  # partial: its rows are its count, and more may follow
            assert found.count == len(found.rows) and found.count_capped and found.next
        if not found.next:
            return ids, searched
        cursor = found.next


@pytest.mark.parametrize(
    ("q", "sort", "desc"),
    [
        ("ab", "id", False),
        ("ab", "bytes", True),
        ("x", "url", False),
        ("zq", "id", False),
        ("pricing", "id", False),
        ("shop.test/p", "title", True),
    ],
)
def test_a_search_reading_a_window_at_a_time_says_it_is_partial_and_misses_nothing(
    crawl, monkeypatch, q, sort, desc
):
    """A short search (no index), or a text search with more matches than it counts, reads
    at most SEARCH_LIMIT pages of the order for a screen: when they hold less than a screen,
    the screen is the matches among them, says how many pages it read, and `next` goes on.
    Screen after screen, that is every match once, in order."""
    monkeypatch.setattr(pages_module, "SEARCH_LIMIT", 4)
    monkeypatch.setattr(pages_module, "TEXT_LIMIT", 1)  # "pricing" has 3 matches: walked
    flt = PageFilter(q=q, sort=sort, desc=desc, size=25)
    ids, searched = search_through(crawl, flt)
    by = (f"-{sort}", "-id") if desc else (sort, "id")
    order = [p.pk for p in crawl.pages.order_by(*by)]
    assert ids == [pk for pk in order if pk in set(containing(crawl, q))]
    # 10 pages read 4 at a time: two partial screens, then the last 2 pages, read to the end.
    assert searched == [4, 4, 0]


def test_a_search_that_reads_to_the_end_is_exact(crawl, monkeypatch):
    """A window past the crawl's end (or a screen filled within it) is no partial answer."""
    monkeypatch.setattr(pages_module, "SEARCH_LIMIT", 10)
    for q in ("ab", "zq", "x", "pricing", "zzqx"):
        found = page_slice(crawl, PageFilter(q=q, size=25))
        assert not found.searched and not found.next
        assert [p.pk for p in found.rows] == containing(crawl, q)
        assert found.count == len(found.rows) and not found.count_capped
    # A screen filled within the window: exact rows; "more than" the screen, which is true.
    monkeypatch.setattr(pages_module, "SEARCH_LIMIT", 4)
    found = page_slice(crawl, PageFilter(q="s", size=2))  # "s" is in every URL
    assert [p.pk for p in found.rows] == containing(crawl, "s")[:2]
    assert not found.searched and found.count_capped and found.count == 2 and found.next


def test_a_common_word_is_counted_to_the_text_limit(crawl, monkeypatch):
    monkeypatch.setattr(pages_module, "TEXT_LIMIT", 2)
    found = page_slice(crawl, PageFilter(q="shop.test", size=25))
    assert found.count == 2 and found.count_capped and not found.searched
    assert [p.pk for p in found.rows] == containing(crawl, "shop.test")


def test_a_partial_search_says_so_on_the_page_and_in_the_api(crawl, user_client, monkeypatch):
    monkeypatch.setattr(pages_module, "SEARCH_LIMIT", 4)
    html = user_client.get(f"/crawls/{crawl.pk}/pages/?q=ab").content.decode()
    assert "0 pages found in the 4 searched" in html
    assert "Only the next 4 pages in this order were searched" in html
    assert "Search the next pages" in html and "No page matches" not in html
    api = user_client.get(f"/api/crawls/{crawl.pk}/pages/?q=ab").json()
    assert api["searched"] == 4 and api["results"] == [] and api["next"]
    # Searching on: the next window holds the page whose URL has "ab".
    further = user_client.get(api["next"]).json()
    assert [r["url"] for r in further["results"]] == ["https://shop.test/docs/ab"]
    assert further["searched"] == 4
    last = user_client.get(further["next"]).json()
    assert last["searched"] is None and [r["title"] for r in last["results"]] == ["ab initio"]
    exact = user_client.get(f"/api/crawls/{crawl.pk}/pages/?q=pricing").json()
    assert exact["searched"] is None and exact["count"] == 3 and not exact["count_capped"]
