"""The fast paths of the frontier and the scope give exactly what the slow ones give.

canonicalize() skips w3lib for URLs it can tell are canonical already; a packed request leaves
out its host and its referrer's prefix, which Python and the Lua scripts read back alike, and
complete() packs the requests of links in Lua; hosts are cached per scheme://netloc. Each is
checked here against the plain computation on a large generated corpus (the links as
complete() queues them in Redis).
"""

import functools
import json
import random
from collections import Counter
from dataclasses import replace
from urllib.parse import urlsplit

import pytest
from w3lib.url import canonicalize_url

from crawlhub.sample_site import SampleSite
from crawls.engine import frontier, scope
from crawls.engine.frontier import Frontier
from crawls.engine.frontier_scripts import _outcome_args
from crawls.engine.request import (
    VIA_REDIRECT,
    Outcome,
    Request,
    _plain,
    _split_host,
    canonicalize,
    fingerprint,
    request_host,
)
from crawls.engine.scope import Scope

# No database here: .ci/run runs it on SQLite only.
pytestmark = pytest.mark.once


HOSTS = [
    "example.com",
    "a.b.c",
    "127.0.0.1",
    "127.1",
    "0x7f.1",
    "a---b",
    "xn--bcher-kva.example",
    "EXAMPLE.com",
    "ex_ample.com",
    "[::1]",
    "[::0:1]",
    "bücher.example",
    "a..b",
    ".a",
    "a.",
    "user@example.com",
    "u:p@example.com",
    "1.2.3.4.5",
    "999.1.1.1",
    "012.1.1.1",
    "-a.com",
    "",
]
PORTS = ["", ":80", ":443", ":8080", ":0", ":00", ":080", ":65535", ":65536", ":99999", ":", ":x"]
PATH_CHARS = list("abcXYZ019-._~!$'()*,=:@/;+&%|[]{}\"<>^` \t\\#") + ["é", "%41", "%7e", "%2F"]
SEGMENTS = ["", ".", "..", "p", "P", "a.b", "%2e", "%2E%2E", "~u", "x y", "a;b=c"]
QUERY_CHARS = list("abcAB019-._~=&+;%/?:@ ") + ["%20", "%41", "é", "=="]


def random_path(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "/" + "/".join(rng.choice(SEGMENTS) for _ in range(rng.randint(0, 4)))
    return "/" + "".join(rng.choice(PATH_CHARS) for _ in range(rng.randint(0, 12)))


def random_query(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.3:
        return ""
    if roll < 0.7:  # key=value pairs, sorted or not, with repeats and blanks
        pairs = [
            (rng.choice("abAB_~"), rng.choice(["", "1", "0", "x", "1.5", "~", "-"]))
            for _ in range(rng.randint(1, 4))
        ]
        if rng.random() < 0.5:
            pairs.sort()
        return "?" + "&".join(f"{k}={v}" if rng.random() < 0.9 else k for k, v in pairs)
    return "?" + "".join(rng.choice(QUERY_CHARS) for _ in range(rng.randint(0, 10)))


def random_url(rng: random.Random) -> str:
    scheme = rng.choice(["http", "https", "http", "https", "HTTP", "ftp", "Https"])
    url = f"{scheme}://{rng.choice(HOSTS)}{rng.choice(PORTS)}"
    if rng.random() < 0.95:
        url += random_path(rng)
    url += random_query(rng)
    if rng.random() < 0.2:
        url += "#" + rng.choice(["", "x", "a b", "#", "é"])
    return url


@functools.cache
def corpus() -> list[str]:
    """Built when a test first asks (not on import: collection, in every worker, needs none)."""
    rng = random.Random(20240601)
    urls = [random_url(rng) for _ in range(60_000)]
    # What crawls produce: the sample site's links in all their equivalent forms.
    from crawlhub.http import links

    site = SampleSite(pages=400, seed=3)
    origin = "http://127.0.0.1:8123"
    for n in range(site.pages):
        path = site.path_for(n)
        _, found = links.extract(site.render(path, origin=origin)[2], origin + path, "text/html")
        urls += found
    return urls


def outcome(url):
    try:
        return "ok", canonicalize_url(url, keep_fragments=False)
    except Exception as exc:  # noqa: BLE001 - both must fail the same way
        return "error", type(exc)


@pytest.mark.slow
def test_canonicalize_equals_w3lib_on_a_large_corpus():
    plain = 0
    for url in corpus():
        try:
            ours = "ok", canonicalize(url)
        except Exception as exc:  # noqa: BLE001
            ours = "error", type(exc)
        assert ours == outcome(url), url
        plain += _plain(url.partition("#")[0])
    # The fast path is actually taken, and not for everything.
    assert 0.1 * len(corpus()) < plain < 0.9 * len(corpus())


@pytest.mark.parametrize(
    "url",
    [
        "http://a/p?b=1&a=2",
        "http://A/",
        "http://a",
        "http://a/?",
        "http://a/p?a",
        "http://a/..",
        "http://a/p/./q",
        "http://a//b",
        "http://a:99999/",
        "http://xn--a/",
        "http://a/%7e",
        "http://a/p?a=1&a=0",
        "http://a/p?a=b=c",
        "HTTP://a/",
        "http://a/b;c",
        "http://a/b+c",
    ],
)
def test_urls_w3lib_would_change_are_not_taken_as_canonical(url):
    assert not _plain(url)


@pytest.mark.slow
def test_hosts_cached_per_origin_equal_urlsplit():
    for url in corpus() + ["http:\t//a/b://c/d", "http://a\n/b", " http://a/", "http://a?b/c"]:
        try:
            expected = "ok", _split_host(url)
        except ValueError:
            expected = "error", None
        try:
            got = "ok", request_host(url)
        except ValueError:
            got = "error", None
        assert got == expected, url
        assert scope._url_host(url) == scope._split_url_host(url), url


def test_scope_allows_is_unchanged_by_the_host_cache():
    allowed = Scope(seeds=["http://example.com/"], allowed_domains=[], include=[], exclude=[])
    for url in corpus():
        host = scope._split_url_host(url)
        assert allowed.allows(url) == bool(host and allowed._allows_ascii_host(host)), url


def reference_json(request: Request) -> str:
    """The JSON object a request was queued as before packing (what a queue written then
    holds)."""
    data = {"f": str(request.fp), "h": request.host, "u": request.url, "d": request.depth}
    if request.priority:
        data["p"] = request.priority
    if request.attempts:
        data["a"] = request.attempts
    if request.referrer:
        data["r"] = request.referrer
    if request.via:
        data["v"] = request.via
    if request.history:
        data["y"] = list(request.history)
    if request.redirects:
        data["c"] = list(request.redirects)
    if request.crashes:
        data["x"] = request.crashes
    if request.crash_error:
        data["e"] = request.crash_error
    return json.dumps(data, separators=(",", ":"))


def valid(url: str) -> bool:
    try:
        urlsplit(url).port  # noqa: B018
    except ValueError:
        return False
    return True


def odd_requests(count: int) -> list[Request]:
    rng = random.Random(5)
    urls = [url for url in corpus() if valid(url)]
    urls += ["http://a.test/x\ny", "http://a.test/\n", "http://a.test", "a.test/x", "/x"]
    requests = []
    for url in [*rng.sample(urls[:-5], count - 5), *urls[-5:]]:
        requests.append(
            Request(
                url=url,
                depth=rng.choice([0, 1, 7, 4095]),
                referrer=rng.choice(
                    ["", 'http://r.example/é"\\\n', url, url + "/up", "/x", "x\ny", "http://r/"]
                ),
                attempts=rng.choice([0, 0, 2]),
                priority=rng.choice([0, 0, 3, -5]),
                via=rng.choice(["", "", "m", "s", "r"]),
                history=rng.choice([(), (), ("HTTP 503",), ('timed out\n"\u00e9"', "HTTP 500")]),
                redirects=rng.choice([(), (), (url,), ('http://r.example/é"\\', url)]),
                crashes=rng.choice([0, 0, 1]),
                crash_error=rng.choice(["", "", "killed\n"]),
            )
        )
    return requests


@pytest.mark.slow
def test_a_packed_request_unpacks_equal_with_its_fingerprint_and_host():
    for request in odd_requests(20_000):
        raw = request.pack()
        back = Request.unpack(raw)
        assert back == request, raw
        assert (back.fp, back.host) == (request.fp, request.host), raw
        assert Request.unpack(raw.encode()) == request


def test_a_request_queued_as_json_before_packing_still_reads():
    for request in odd_requests(2_000):
        back = Request.unpack(reference_json(request).encode())
        assert (back, back.fp, back.host) == (request, request.fp, request.host)


def test_a_packed_link_takes_under_two_thirds_of_the_bytes_of_its_json():
    parent = "http://www.example.com/catalogue/page-12.html"
    link = Request("http://www.example.com/catalogue/item-345.html", 3, referrer=parent)
    assert len(link.pack()) * 3 < len(reference_json(link)) * 2  # 94 bytes, 160 as JSON


def queued_by(crawl_id: int, outcome: Outcome) -> list[str]:
    """The packed requests complete() queues for `outcome`, in a crawl of its own that claimed
    the outcome's request (complete.lua packs each link's request from _link_args' lines)."""
    crawl = Frontier(crawl_id)
    crawl.configure(max_pages=0, max_depth=-1, host_delay=0)
    crawl.set_state("running")
    crawl.add_seeds([outcome.request.url])
    assert [r.fp for r in crawl.claim(1, lease_seconds=60)] == [outcome.request.fp]
    crawl.complete([outcome])
    return [member.decode() for member in crawl.redis.zrange(crawl.key("queue"), 0, -1)]


def first_of_each(requests: list[Request]) -> list[str]:
    """Each request packed, the first of those with one fingerprint only."""
    seen = {}
    for request in requests:
        seen.setdefault(request.fp, request.pack())
    return sorted(seen.values())


def test_links_are_queued_as_the_requests_of_links_would_be():
    urls = [url for url in corpus() if valid(url)]
    for n in range(0, 4000, 40):
        parent = Request(url=urls[n], depth=n % 5, priority=(n % 3) - 1, attempts=n % 2)
        links = [url for url in urls[n + 1 : n + 41] if fingerprint(url) != parent.fp]
        args = _outcome_args(Outcome(request=parent, kind="done", status=200, links=links))
        assert args[1] == parent.host and args[9] == 0  # none a sitemap listed
        queued = queued_by(n + 1, Outcome(request=parent, kind="done", status=200, links=links))
        expected = [
            Request(url, parent.depth + 1, referrer=parent.url, priority=parent.priority)
            for url in links
        ]
        assert sorted(queued) == first_of_each(expected)


def test_a_redirects_target_is_queued_as_its_request_would_be():
    urls = [url for url in corpus() if valid(url)]
    for n in range(0, 400, 4):
        chain = tuple(urls[n + 1 : n + 1 + n % 3])
        parent = Request(urls[n], depth=n % 5, priority=(n % 3) - 1, redirects=chain)
        if fingerprint(urls[n + 3]) == parent.fp:
            continue
        outcome = Outcome(
            request=parent, kind="done", status=301, links=[urls[n + 3]], links_via=VIA_REDIRECT
        )
        assert _outcome_args(outcome)[6] == parent.depth  # the child depth: no step deeper
        target = Request(
            urls[n + 3],
            parent.depth,
            referrer=parent.url,
            priority=parent.priority,
            via=VIA_REDIRECT,
            redirects=(*chain, parent.url),
        )
        assert queued_by(n + 1, outcome) == [target.pack()]


def test_bucket_names_are_the_top_bits_in_hex():
    for fp in [0, 1, -1, 2**63 - 1, -(2**63), 0x123 << 52, -(0x123 << 52)]:
        expected = format((fp >> 52) & 0xFFF, "03x")
        assert frontier._bucket(fp) == expected


def test_the_scripts_read_each_packed_requests_host_as_python_does():
    """Per host queued counts (hostq) are kept by the scripts from the host they read in a
    packed request (its field, or its URL's prefix): they match Request.host when links and
    seeds are queued, fall to nothing when all are claimed, and match again when they are
    handed back or come back with one more crash."""
    requests = [r for r in odd_requests(3_000) if "\n" not in r.url]
    crawl = Frontier(9001)
    crawl.delete()
    crawl.configure(max_pages=0, max_depth=-1, host_delay=0)
    crawl.set_state("running")
    crawl.add_seeds([requests[1500].url])
    [parent] = crawl.claim(1, lease_seconds=60)
    links = [r.url for r in requests[1501:]]
    crawl.complete([Outcome(request=parent, kind="done", status=200, links=links)])
    crawl.add_seeds([r.url for r in requests[:1500]])
    queued = [Request.unpack(m) for m in crawl.redis.zrange(crawl.key("queue"), 0, -1)]
    expected = Counter(r.host for r in queued)

    def hostq() -> Counter:
        found = crawl.redis.hgetall(crawl.key("hostq"))
        return Counter({host.decode(): int(n) for host, n in found.items()})

    assert hostq() == expected and len(queued) > 2000
    claimed = crawl.claim(5000, lease_seconds=60)
    assert len(claimed) == len(queued) and hostq() == Counter()
    assert crawl.release(claimed[: len(claimed) // 2]) == len(claimed) // 2
    crawl.redis.zadd(crawl.key("leases"), {str(r.fp): 0 for r in claimed[len(claimed) // 2 :]})
    assert crawl.requeue_expired() == len(claimed) - len(claimed) // 2
    assert hostq() == expected
    again = {r.fp: r for r in crawl.claim(5000, lease_seconds=60)}
    for request in claimed:
        crashes = 0 if request in claimed[: len(claimed) // 2] else 1
        assert again[request.fp] == replace(request, crashes=request.crashes + crashes)
        assert again[request.fp].host == request.host
    crawl.delete()
