"""What a page costs, counted rather than timed (so that it holds on a busy machine): the SQL
statements a written batch takes, the Redis round trips and bytes of its completion and of its
fetch, and the Python-level work that scales with pages. A change that adds a statement or a
round trip per page fails here, not in a benchmark weeks later (bench/speed_guard.py measures
the pages/s these counts stand for)."""

from __future__ import annotations

import contextlib
import http.client
import io
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis.connection
import urllib3
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from crawlhub.http import heads
from crawlhub.http.client import Fetcher, FetchResult
from crawlhub.http.links import extract_with_texts
from crawlhub.http.wire import MASK
from crawlhub.sample_site import HTML, SampleSite
from crawls import services
from crawls.engine import slices
from crawls.engine.crawl_settings import scope_of
from crawls.engine.frontier import Frontier
from crawls.engine.recording import Result
from crawls.engine.request import Request, fingerprint
from crawls.engine.scope import Scope
from crawls.engine.slices import Slice
from crawls.models import Link, Page
from tests.support.sites import Response, pages_site

pytestmark = pytest.mark.django_db

SITE = "http://a.test"
# A batch's statements, whatever its pages and links: the Page rows, the Link rows and the
# savepoint or transaction around them; on SQLite also the text index fed with the batch's
# pages (crawls.engine.rows.PageInsert: the last id, then one insert).
STATEMENTS_PER_BATCH = 6
# Completion sends, per link, its bucket, fingerprint, host (none on the page's own host) and
# URL: about this much at most for links of ~30 characters; per page its request's fields and
# the end of its links' JSON; per call the script's keys.
COMPLETE_BYTES_PER_LINK = 70
COMPLETE_BYTES_PER_PAGE = 200
COMPLETE_BYTES_PER_CALL = 700


@dataclass
class Traffic:
    round_trips: int = 0
    sent: int = 0


@contextlib.contextmanager
def redis_traffic(monkeypatch) -> Iterator[Traffic]:
    """What this process sends Redis meanwhile: round trips (a pipeline is one) and bytes."""
    counted = Traffic()
    send = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        counted.round_trips += 1
        parts = [command] if isinstance(command, (bytes, str, memoryview)) else command
        counted.sent += sum(len(part) for part in parts)
        return send(self, command, check_health)

    with monkeypatch.context() as patch:
        patch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
        yield counted


@pytest.fixture
def crawl(user):
    crawl = services.crawl_create(
        user=user,
        name="budgets",
        seeds=[SITE + "/"],
        obey_robots=False,
        max_depth=100,
        max_pages=1_000_000,
    )
    services.crawl_start(crawl=crawl, user=user)
    Frontier(crawl.pk).claim(10, lease_seconds=60)  # its seed, out of the way
    return crawl


def fetched(n: int, links: int) -> FetchResult:
    urls = [f"{SITE}/p/{n}-{k}-{links}" for k in range(links)]
    return FetchResult(
        url=f"{SITE}/p/{n}",
        final_url=f"{SITE}/p/{n}",
        status=200,
        content_type="text/html; charset=utf-8",
        body=b"",
        nbytes=4000,
        truncated=False,
        elapsed_ms=3,
        redirects=[],
        error="",
        error_kind="",
        title=f"Page {n}",
        links=urls,
        link_texts=[f"link {k}" for k in range(links)],
        headers={"content-type": "text/html; charset=utf-8", "server": "nginx"},
        request_headers={"user-agent": "crawlhub", "accept": "*/*"},
    )


def claimed(frontier: Frontier, pages: int) -> list[Request]:
    """`pages` requests queued and claimed, as a slice holds them before it writes them."""
    frontier.add_seeds([f"{SITE}/q/{pages}/{n}" for n in range(pages)], depth=1)
    requests: list[Request] = []
    while len(requests) < pages and (more := frontier.claim(pages, lease_seconds=60)):
        requests += more
    assert len(requests) == pages
    return requests


def results_of(requests: list[Request], links: int) -> list[Result]:
    return [
        Result(request=request, fetch=fetched(n, links), digest="d" * 64)
        for n, request in enumerate(requests)
    ]


def statements_to_write(slice_: Slice, pages: int, links: int) -> int:
    done = results_of(claimed(slice_.frontier, pages), links)
    with CaptureQueriesContext(connection) as queries:
        assert slice_.recorder.write(done) == pages
    return len(queries.captured_queries)


def test_a_written_batch_takes_the_same_statements_whatever_its_pages_and_links(crawl):
    slice_ = Slice(crawl, "s1")
    small = statements_to_write(slice_, pages=2, links=3)
    large = statements_to_write(slice_, pages=60, links=25)
    assert small == large <= STATEMENTS_PER_BATCH
    assert Page.objects.filter(crawl=crawl).count() == 62
    assert Link.objects.filter(crawl_id=crawl.pk).count() == 2 * 3 + 60 * 25


def test_writing_a_batch_builds_no_model_instance_per_page(crawl, monkeypatch):
    """Rows are made as the database takes them: no Page (or Link) object, with its per-field
    preparation, for each page written."""
    slice_ = Slice(crawl, "s1")
    done = results_of(claimed(slice_.frontier, 40), links=10)
    built = []
    init = Model.__init__

    def counting(self, *args, **kwargs):
        built.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Model, "__init__", counting)
    assert slice_.recorder.write(done) == 40
    assert len(built) <= 1, built


def test_completing_a_batch_is_one_round_trip_and_a_bounded_size_per_link(crawl, monkeypatch):
    slice_ = Slice(crawl, "s1")
    sizes = {}
    # The first batch loads the script into Redis: not a page's cost.
    for pages, links in ((1, 1), (2, 3), (50, 20)):
        done = results_of(claimed(slice_.frontier, pages), links)
        for result in done:
            slice_.recorder.decide(result, {})
        with redis_traffic(monkeypatch) as traffic:
            slice_.frontier.complete([r.outcome for r in done])
        if pages > 1:
            assert traffic.round_trips == 1
            sizes[pages, links] = traffic.sent
    for (pages, links), sent in sizes.items():
        budget = pages * (COMPLETE_BYTES_PER_PAGE + links * COMPLETE_BYTES_PER_LINK)
        assert sent <= budget + COMPLETE_BYTES_PER_CALL, (pages, links)
    stats = slice_.frontier.stats()
    assert stats["requests"] == 53 + 1 + 2 * 3 + 50 * 20 + 1  # and the crawl's seed


def test_claiming_is_one_round_trip_for_the_whole_batch(crawl, monkeypatch):
    frontier = Frontier(crawl.pk)
    frontier.add_seeds([f"{SITE}/p/{n}" for n in range(80)], depth=1)
    with redis_traffic(monkeypatch) as traffic:
        assert len(frontier.claim(64, lease_seconds=60)) == 64
    assert traffic.round_trips == 1


def test_a_page_fetched_without_a_delay_costs_no_redis_round_trip(user, make_site, monkeypatch):
    """No host delay, no cap, no robots.txt: the fetch path asks Redis nothing (a host that has a
    delay of its own or pushes back takes turns: crawls/engine/fetching.py)."""
    site = make_site(pages_site({"/": "<a href='/x'>x</a>"}))
    crawl = services.crawl_create(
        user=user, name="fetch", seeds=[site.url + "/"], obey_robots=False
    )
    services.crawl_start(crawl=crawl, user=user)
    slice_ = Slice(crawl, "s1")
    request = slice_.frontier.claim(1, lease_seconds=60)[0]
    with redis_traffic(monkeypatch) as traffic:
        result = slice_.fetching.fetch(request)
    assert result.fetch.status == 200
    assert traffic.round_trips == 0


def test_with_a_queue_to_claim_from_a_slice_completes_in_batches_not_per_page(
    user, make_site, monkeypatch
):
    """Written at once only while the queue is empty (FLUSH_STARVING_SECONDS): a page whose
    links fill the queue, then 60 pages claimed from it, make a handful of completion calls,
    not one per page or per short wait. Flushes by time are off (an hour) so that only the
    queue running empty and the slice's end write."""
    monkeypatch.setattr(slices, "FLUSH_EVERY_SECONDS", 3600.0)
    links = [f"/p{i}" for i in range(60)]
    pages = {"/": "".join(f"<a href='{link}'>x</a>" for link in links)}
    site = make_site(pages_site(pages | {link: "<p>leaf</p>" for link in links}))
    crawl = services.crawl_create(
        user=user, name="batches", seeds=[site.url + "/"], obey_robots=False, threads=2
    )
    services.crawl_start(crawl=crawl, user=user)
    calls = []
    complete = Frontier.complete

    def counting(self, outcomes, *args, **kwargs):
        calls.append(len(outcomes))
        return complete(self, outcomes, *args, **kwargs)

    monkeypatch.setattr(Frontier, "complete", counting)
    report = slices.run_slice(crawl.pk, "s1", budget_seconds=120)
    assert (report["reason"], report["pages"]) == ("done", 61)
    assert sum(calls) == 61
    # The root alone; the pages fetched while the queue held more, once it ran empty; then
    # the last ones in flight (2 threads claim at most 4), each alone on a slow machine; the
    # slice's end: at most 7, whatever the machine's speed.
    assert len(calls) <= 8, calls


def test_sorting_a_pages_links_parses_each_link_once_for_scope(crawl, monkeypatch):
    """out_links reads each link's scope once; a second reading per link would double the
    main thread's share of a page."""
    scope = scope_of(crawl)
    asked = []
    why_not = type(scope).why_not

    def counting(self, url):
        asked.append(url)
        return why_not(self, url)

    monkeypatch.setattr(type(scope), "why_not", counting)
    slice_ = Slice(crawl, "s1")
    done = results_of(claimed(slice_.frontier, 5), links=12)
    for result in done:
        slice_.recorder.decide(result, {})
    assert len(asked) == 5 * 12


def test_reading_a_body_far_from_the_deadline_sets_no_socket_timeout_per_read(
    make_site, monkeypatch
):
    """The whole-fetch deadline shrinks the socket's timeout only when it is nearer than the
    usual timeout: settimeout is a system call, and a body of many reads made one per read."""
    site = make_site(pages_site({"/small": "<p>small</p>", "/large": "<p>x</p>" * 100_000}))
    calls = []
    settimeout = socket.socket.settimeout

    def counting(self, value):
        calls.append(value)
        return settimeout(self, value)

    monkeypatch.setattr(socket.socket, "settimeout", counting)
    counts = {}
    with Fetcher(timeout=10, max_bytes=10_000_000) as fetcher:
        fetcher.fetch(site.url + "/small")  # connected: the next fetches reuse the socket
        for path in ("/small", "/large"):
            calls.clear()
            result = fetcher.fetch(site.url + path)
            assert result.status == 200 and not result.error
            counts[path] = len(calls)
    assert len(result.body) == 800_000  # 13 reads of 64 KiB, at least
    assert counts["/large"] == counts["/small"] <= 2, counts


def test_a_page_with_no_cookie_to_send_or_keep_costs_no_cookie_jar_work(make_site):
    """The jar is asked for a Cookie header only when it holds cookies, and reads an answer
    only when it sets one: each asks the cookie policy under the jar's lock, per page."""
    site = make_site(
        pages_site(
            {
                "/plain": "<p>plain</p>",
                "/sets": Response(body="<p>sets</p>", headers={"Set-Cookie": "s=1; Path=/"}),
            }
        )
    )
    asked = []

    def counted(jar, name: str) -> None:
        method = getattr(jar, name)

        def counting(*args):
            asked.append(name)
            return method(*args)

        setattr(jar, name, counting)

    with Fetcher(timeout=10, max_bytes=100_000) as fetcher:
        counted(fetcher.session.cookies, "add_cookie_header")
        counted(fetcher.session.cookies, "extract_cookies")
        for _ in range(3):
            assert fetcher.fetch(site.url + "/plain").status == 200
        assert asked == []
        assert fetcher.fetch(site.url + "/sets").status == 200  # the jar keeps s=1
        assert asked == ["extract_cookies"]
        fetched = fetcher.fetch(site.url + "/plain")
        assert fetched.request_headers.get("Cookie") == MASK  # sent, and masked as it is
        assert asked == ["extract_cookies", "add_cookie_header"]


# What a plain fetch may cost in Python bytecode, against urllib3's own request of the same
# page in the same process: requests, the deadline and the recording of the exchange on top.
# 9,815 against 7,955 a fetch here (1.23) now; 10,730 (1.35) before its headers were copied
# and prepared at once (crawlhub/http/session.py: case_insensitive, PreparedHeaders) and its
# URL read once. A little room: how a body arrives (reads per page) moves both by a few tens.
FETCH_OPCODES_OVER_URLLIB3 = 1.27


def opcodes_of(call) -> int:
    """The Python bytecode instructions call() executes: a count of interpreter work that holds
    on a busy machine (C code, system calls and waiting are not in it)."""
    count = 0

    def per_opcode(frame, event, arg):
        nonlocal count
        if event == "opcode":
            count += 1
        return per_opcode

    def per_frame(frame, event, arg):
        frame.f_trace_opcodes = True
        return per_opcode

    sys.settrace(per_frame)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def test_a_plain_fetch_costs_at_most_so_much_python_work_over_urllib3_s_own(make_site):
    """The fetch path's own Python work per page (bench/speed_guard.py measures the pages/s it
    stands for): a plain page fetched by the crawl's client, against the same page fetched
    with urllib3 alone, both on kept-alive connections. Links are parsed apart (not here)."""
    headers = {"Content-Type": "text/plain", "Server": "nginx"}
    site = make_site(
        pages_site({f"/p/{n}": Response(body="x" * 2000, headers=headers) for n in range(8)})
    )
    urls = [f"{site.url}/p/{n}" for n in range(8)]
    pool = urllib3.PoolManager()
    with Fetcher(timeout=10, max_bytes=100_000) as fetcher:
        for url in urls[:2]:  # connected, and every lazy import done
            assert fetcher.fetch(url, follow_redirects=False).status == 200
            assert pool.request("GET", url, redirect=False).status == 200
        ours = opcodes_of(lambda: [fetcher.fetch(url, follow_redirects=False) for url in urls])
        bare = opcodes_of(lambda: [pool.request("GET", url, redirect=False).data for url in urls])
    pool.clear()
    assert ours <= FETCH_OPCODES_OVER_URLLIB3 * bare, (ours / len(urls), bare / len(urls))


# What reading a link's scope may cost, in bytecode instructions: on the origin of the link
# before it (most of a page's links), and on an origin outside the crawl's domains, new to the
# scope (a broad crawl's directories and blog rolls link to such origins all the time): 64
# and 651 now; 64 and 9,025 when a pattern was compiled for every new origin (sre's compiler is
# Python; the crawl's own origins still get one each, once).
SCOPE_OPCODES_PER_LINK = {"same origin": 70, "new origin": 900}


def test_reading_a_links_scope_compiles_nothing_for_other_sites():
    scope = Scope(seeds=["http://example.com/"], allowed_domains=[], include=[], exclude=[])
    for n in range(3):  # every lazy import done, the caches warm
        scope.why_not(f"http://warm{n}.example.org/x")
    new = [f"http://site{n}.example.net/page/{n}" for n in range(200)]
    same = [f"http://example.com/page/{n}" for n in range(200)]
    cost = {
        "new origin": opcodes_of(lambda: [scope.why_not(url) for url in new]) / len(new),
        "same origin": opcodes_of(lambda: [scope.why_not(url) for url in same]) / len(same),
    }
    assert scope.why_not(new[0]) == "other site (site0.example.net)"
    assert scope.why_not(same[0]) == ""
    for kind, budget in SCOPE_OPCODES_PER_LINK.items():
        assert cost[kind] <= budget, (kind, cost)


# What reading a bench site page's title, links and link texts may cost (crawlhub/http/links.py:
# the parser's callbacks, each link resolved), in bytecode instructions per page of ~22 links:
# 6,850 now; 8,930 before a page URL was split by one match and its directory's parts read once
# (link_urls._split, _directory_parts), another scheme's links refused by one match, a UTF-8
# page fed as sent and the links filtered with their texts in C; 13,200 before the common links
# were resolved by one match and the callbacks made lean.
LINK_READING_OPCODES_PER_PAGE = 7_100


def test_reading_a_pages_links_costs_at_most_so_much_python_work():
    site = SampleSite(pages=20_000, seed=1)
    origin = "http://127.0.0.1:8080"
    pages = [
        (origin + site.path_for(n), site.render(site.path_for(n), origin=origin)[2])
        for n in range(100, 140)
    ]
    read = []
    extract_with_texts(pages[0][1], pages[0][0], HTML)  # every lazy import done
    cost = opcodes_of(lambda: [read.append(extract_with_texts(b, u, HTML)) for u, b in pages])
    assert sum(len(found) for _title, found, _texts in read) > 15 * len(pages)
    assert cost / len(pages) <= LINK_READING_OPCODES_PER_PAGE, cost / len(pages)


# What reading a typical response's headers may cost on crawlhub's connections (heads.py),
# against http.client's own reading of them through the email package: 387 against 2,739
# bytecode instructions for nginx's head of a bench site page (bench/crawl_bench.py).
HEAD_OPCODES_OVER_HTTP_CLIENT = 0.2
NGINX_HEAD = (
    b"Server: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 13:19:11 GMT\r\n"
    b"Content-Type: text/html; charset=utf-8\r\nContent-Length: 4472\r\n"
    b"Last-Modified: Fri, 27 Nov 2026 13:19:11 GMT\r\nConnection: keep-alive\r\n"
    b'ETag: "6b09834f-1178"\r\nAccept-Ranges: bytes\r\n\r\n'
)


def modules_run(call) -> set[str]:
    """The file of every Python function call() ran."""
    files = set()

    def per_call(frame, event, arg):
        if event == "call":
            files.add(frame.f_code.co_filename)

    sys.setprofile(per_call)
    try:
        call()
    finally:
        sys.setprofile(None)
    return files


def test_a_plain_fetch_reads_its_response_headers_without_the_email_package(make_site):
    """crawlhub's connections read an ordinary head's headers themselves (heads.py): the email
    package's parser, which http.client hands them to, was a tenth of a fetch's Python work."""
    site = make_site(
        pages_site(
            {
                "/page": Response(body="<p>x</p>", headers={"Set-Cookie": "a=1; Path=/"}),
                "/moved": Response(status=301, headers={"Location": "/page"}),
            }
        )
    )
    paths = ["/page", "/moved", "/absent", "/page"]
    with Fetcher(timeout=10, max_bytes=100_000) as fetcher:
        fetcher.fetch(site.url + "/page")  # connected, and every lazy import done
        ran = modules_run(
            lambda: [fetcher.fetch(site.url + path, follow_redirects=False) for path in paths]
        )
    assert any(file.endswith("/http/heads.py") for file in ran)
    assert not any(file.endswith("/email/feedparser.py") for file in ran)
    for parse in (heads.parse_headers, http.client.parse_headers):  # nothing lazy counted
        parse(io.BytesIO(NGINX_HEAD))
    ours = opcodes_of(lambda: heads.parse_headers(io.BytesIO(NGINX_HEAD)))
    stdlib = opcodes_of(lambda: http.client.parse_headers(io.BytesIO(NGINX_HEAD)))
    assert ours <= HEAD_OPCODES_OVER_HTTP_CLIENT * stdlib, (ours, stdlib)


# A written page's Python work (rows, links sorted for scope, completion), in bytecode
# instructions per page of 25 links new to the process, by database: the driver's own per-row
# work is in it (psycopg adapts each value in Python). SQLite: 4,280 now; 4,320 before its
# headers were kept by map and zip (two of each here; a real page has more), 4,570 before a
# link's origin was matched by one expression, 4,700 before a row's adapters were looked up
# once, 5,330 before plain URLs were told by one regular expression, 8,630 before its links'
# lists were made by map and zip, 9,900 before its links' scope and rows were made lean.
# PostgreSQL: 16,650 before these (not measured since).
WRITE_OPCODES_PER_PAGE = {"sqlite": 4_450, "postgresql": 18_000}


def test_writing_and_completing_a_page_costs_at_most_so_much_python_work(crawl):
    slice_ = Slice(crawl, "s1")
    warm = results_of(claimed(slice_.frontier, 5), links=25)
    slice_.recorder.write(warm)
    slice_.frontier.complete([r.outcome for r in warm])
    done = results_of(claimed(slice_.frontier, 40), links=25)
    # Every link new to the process, whichever tests ran before (fingerprints are cached).
    fingerprint.cache_clear()

    def write() -> None:
        assert slice_.recorder.write(done) == 40
        slice_.frontier.complete([r.outcome for r in done])

    per_page = opcodes_of(write) / 40
    assert per_page <= WRITE_OPCODES_PER_PAGE[connection.vendor], per_page
