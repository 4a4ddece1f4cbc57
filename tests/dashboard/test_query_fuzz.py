"""Fuzzing the query strings of every dashboard page that reads them: no server error, ever.

Each page gets hypothesis-generated query strings: the names it reads and any others, with
values that are any text (non-ASCII, NUL and other control characters, bidi marks), numbers
in other scripts ('²', '٣'), JSON and cursor shapes, invalid UTF-8, 10,000 characters, and the
same name repeated. They go through the whole Django stack (every middleware, SQLite or
PostgreSQL, the session's Redis) as a superuser, who may open every page. The run is the same
every time (derandomized, no example database) and bounded: EXAMPLES query strings a page.
"""

from __future__ import annotations

import time
from urllib.parse import quote, quote_from_bytes

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawls import services
from crawls.models import CrawlEvent, FailedRequest
from proxies import services as proxy_services
from proxies.models import Proxy, ProxyJob
from tests.dashboard.test_pages_browser import make_pages

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

EXAMPLES = 60
HOSTILE = [
    "",
    " ",
    "\u00b2",
    "\u0663",
    "\U0001d7d9",
    "-1",
    "0",
    "9" * 30,
    "1e309",
    "nan",
    "Infinity",
    "field:-1",
    "field:a__b",
    "field:\u00e9",
    "field:" + "a" * 65,
    "field:$[0]",
    "%",
    "%%00",
    "\\",
    "'",
    '"',
    "<script>",
    "../..",
    "[]",
    "{}",
    "null",
    "\u202e",
    "\ufeff",
    "\r\n",
    "\x00",
    "a" * 10_000,
    "eyJ4IjoxfQ",
    "WyJpZCIsZmFsc2UsbnVsbCwtMV0",
    "desc",
    "asc",
    "new",
    "csv",
]
hostile = st.sampled_from(HOSTILE)
values = st.one_of(
    hostile,
    hostile,
    st.text(max_size=30),  # any code point but surrogates: NUL, controls, bidi, emoji
    # Digits of other scripts, superscripts, circled numbers: str.isdigit() takes many of
    # them, and int() refuses some ('²').
    st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=4),
    st.builds("{}{}".format, st.sampled_from(["field:", "#", "-", "0x"]), st.text(max_size=8)),
    st.integers().map(str),
    st.binary(max_size=12),  # sent as percent-escapes: invalid UTF-8 as often as not
)


def query_strings(known: list[str]) -> st.SearchStrategy[str]:
    """Query strings of up to 5 parameters, mostly of names the page reads (`known`), and
    sometimes one name repeated."""
    names = st.one_of(*[st.sampled_from(known)] * 3, st.text(max_size=12))
    pairs = st.lists(st.tuples(names, values), max_size=5)
    repeated = st.tuples(names, st.lists(values, min_size=2, max_size=4)).map(
        lambda found: [(found[0], value) for value in found[1]]
    )
    return st.tuples(pairs, st.one_of(st.just([]), repeated)).map(
        lambda parts: "&".join(f"{_escape(k)}={_escape(v)}" for k, v in parts[0] + parts[1])
    )


def _escape(text: str | bytes) -> str:
    if isinstance(text, bytes):
        return quote_from_bytes(text, safe="")
    return quote(text, safe="")


@pytest.fixture
def world(user, staff) -> dict:
    """Rows every page can show: two crawls with pages, a failure, an event, a proxy, a job."""
    staff.is_superuser = True
    staff.save()
    rules = [{"name": "price", "kind": "css", "expr": ".price"}]
    older = services.crawl_create(
        user=user, name="old", seeds=["http://site0.test/"], extract_rules=rules
    )
    newer = services.crawl_create(
        user=user, name="new", seeds=["http://site0.test/"], extract_rules=rules
    )
    pages = make_pages(newer, 60)
    make_pages(older, 20, seed=4)
    FailedRequest.objects.create(
        crawl=newer, url="http://site0.test/f", url_hash="f", failed_at=timezone.now()
    )
    CrawlEvent.objects.create(crawl=newer, user=user, kind=CrawlEvent.Kind.STARTED)
    proxy_services.import_proxies(text="127.0.0.1:9\n", source="fuzz", user=staff)
    client = Client()
    client.force_login(staff)
    return {
        "client": client,
        "crawl": newer.pk,
        "older": older.pk,
        "page": pages[0].pk,
        "proxy": Proxy.objects.get().pk,
        "job": ProxyJob.objects.get().pk,
    }


# Every page that reads its query string (and the admin's lists of crawls and of the proxy
# audit log), by a name for the test's id: its path, and the names it reads.
FILTERS = [
    "q",
    "status_class",
    "status",
    "content_type",
    "depth_min",
    "depth_max",
    "change",
    "source",
    "sort",
    "order",
    "size",
    "after",
    "before",
]
PAGES = {
    "crawl list": ("/", ["q", "state", "channel", "sort", "page"]),
    "pages browser": ("/crawls/{crawl}/pages/", FILTERS),
    "page detail": ("/crawls/{crawl}/pages/{page}/", FILTERS),
    "compare": ("/crawls/compare/", ["a", "b", "show"]),
    "compare export": ("/crawls/compare/export.csv", ["a", "b", "show"]),
    "hosts": ("/crawls/{crawl}/hosts/", ["host", "next"]),
    "crawl page": ("/crawls/{crawl}/", ["next", "page"]),
    "failures export": ("/crawls/{crawl}/failures.csv", ["page", "size"]),
    "pages export csv": ("/crawls/{crawl}/export.csv", FILTERS),
    "pages export jsonl": ("/crawls/{crawl}/export.jsonl", FILTERS),
    "proxies": (
        "/proxies/",
        ["state", "channel", "score", "anonymity", "source", "q", "sort", "page", "all"],
    ),
    "proxy": ("/proxies/{proxy}/", ["next", "page"]),
    "proxy job": ("/proxies/jobs/{job}.json", ["report"]),
    "schedules": ("/schedules/new/", ["template"]),
    "webhooks": ("/webhooks/", ["crawl", "channel"]),
    "crawl admin": (
        "/admin/crawls/crawl/",
        ["q", "o", "p", "e", "state__exact", "channel__id__exact", "_to_field"],
    ),
    "proxy audit": ("/admin/proxies/proxyevent/", ["q", "o", "p", "e", "kind__exact"]),
}


@pytest.mark.parametrize("name", PAGES)
def test_no_query_string_makes_a_page_answer_a_server_error(name, world):
    path, known = PAGES[name]
    path = path.format(**world)
    client = world["client"]
    sent = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(query=query_strings(known))
    def send(query: str) -> None:
        response = client.get(path, QUERY_STRING=query)
        if response.streaming:
            b"".join(response.streaming_content)  # an export's errors come while it streams
        sent.append(response.status_code)
        assert response.status_code < 500, (path, query)

    started = time.monotonic()
    send()
    statuses = {code: sent.count(code) for code in sorted(set(sent))}
    print(f"{name}: {len(sent)} requests in {time.monotonic() - started:.1f} s, {statuses}")
    assert len(sent) >= EXAMPLES // 2, statuses
