"""A page's out-links, sorted by results.out_links (lists made by map, zip and compress, no
Python loop per link), are those the plain loop over the links makes: what is followed, what
the page keeps with each link's note, and its Link rows (one per distinct target, with the
text of its first link, at most MAX_LINK_ROWS)."""

from __future__ import annotations

import pytest

from crawls.engine import results
from crawls.engine.request import Request, fingerprint
from crawls.engine.results import (
    LINK_TEXT_CHARS,
    MAX_LINK_ROWS,
    MAX_OUTLINKS,
    NOTE_DEPTH,
    OutLinks,
    out_links,
)
from crawls.engine.scope import Scope

PAGE = Request("http://a.test/page", depth=2)


def looped(
    request: Request,
    urls: list[str],
    texts: list[str],
    *,
    scope: Scope,
    max_depth: int,
    child_depth: int,
    status: int | None,
) -> OutLinks:
    """out_links as a loop over the links, one at a time: the reference."""
    found = OutLinks(total=len(urls))
    ok = status is not None and 200 <= status < 300
    deep = child_depth > max_depth
    page_note = "" if ok else f"not followed from an HTTP {status or 'error'} page"
    seen: set[int] = set()
    texts = [*texts, *[""] * (len(urls) - len(texts))]
    for n, (url, text) in enumerate(zip(urls, texts, strict=False)):
        note = page_note or scope.why_not(url)
        if not note:
            target = fingerprint(url)
            if target not in seen and len(seen) < MAX_LINK_ROWS:
                seen.add(target)
                found.rows.append((request.fp, target, text[:LINK_TEXT_CHARS]))
            if deep:
                note = NOTE_DEPTH
            else:
                found.follow.append(url)
        if n < MAX_OUTLINKS:
            found.kept.append([url, text, note])
    return found


def scope(**patterns: list[str]) -> Scope:
    return Scope(
        seeds=["http://a.test/"],
        allowed_domains=[],
        include=patterns.get("include", []),
        exclude=patterns.get("exclude", []),
    )


def mixed_links(n: int) -> tuple[list[str], list[str]]:
    """Links on the page's site and off it, repeated targets (a fragment, the same URL),
    a long text, odd URLs; texts by index."""
    shapes = [
        "http://a.test/p/{k}",
        "http://a.test/p/{k}#top",
        "http://a.test/p/{k}",
        "http://other.test/x/{k}",
        "http://sub.a.test/q?b={k}&a=1",
        "https://a.test:8443/s/{k}",
        "mailto:someone{k}@a.test",
        "http://a.test/private/{k}",
        "http://a.test/caf\u00e9/{k}",
    ]
    urls = [shapes[k % len(shapes)].format(k=k // 3) for k in range(n)]
    texts = [("word " * (k % 60)).strip() for k in range(n)]
    return urls, texts


@pytest.mark.parametrize("status", [200, 204, 301, 404, None])
@pytest.mark.parametrize("child_depth", [3, 4])
@pytest.mark.parametrize(
    "patterns", [{}, {"include": [r"/p/"]}, {"exclude": [r"/private/"]}], ids=repr
)
def test_a_pages_links_are_sorted_as_the_loop_over_them_sorts_them(status, child_depth, patterns):
    urls, texts = mixed_links(200)
    for cut in (texts, texts[:50], [*texts, "extra"], []):
        kwargs = dict(scope=scope(**patterns), max_depth=3, child_depth=child_depth, status=status)
        assert out_links(PAGE, urls, cut, **kwargs) == looped(PAGE, urls, cut, **kwargs)


def test_a_page_of_only_its_own_links_or_none_is_sorted_as_the_loop_sorts_it():
    urls = [f"http://a.test/p/{k}" for k in range(30)]
    for links in (urls, [*urls, *urls[:5]], urls[:1], []):
        texts = [f"link {k}" for k in range(len(links))]
        kwargs = dict(scope=scope(), max_depth=3, child_depth=3, status=200)
        assert out_links(PAGE, links, texts, **kwargs) == looped(PAGE, links, texts, **kwargs)


def test_a_page_past_the_kept_links_and_the_link_rows_is_cut_as_the_loop_cuts_it():
    """Over MAX_LINK_ROWS distinct targets with repeats among them: the first ones in document
    order, each with its first link's text; over MAX_OUTLINKS kept: the first ones."""
    distinct = [f"http://a.test/p/{k}" for k in range(MAX_LINK_ROWS + 500)]
    urls = [url for k, url in enumerate(distinct) for _ in range(1 + (k % 7 == 0))]
    texts = [f"text {k}" for k in range(len(urls))]
    kwargs = dict(scope=scope(), max_depth=3, child_depth=3, status=200)
    found = out_links(PAGE, urls, texts, **kwargs)
    assert found == looped(PAGE, urls, texts, **kwargs)
    assert len(found.rows) == MAX_LINK_ROWS and len(found.kept) == MAX_OUTLINKS


def test_the_follow_list_is_the_pages_own_not_the_fetchs():
    urls = [f"http://a.test/p/{k}" for k in range(3)]
    found = results.out_links(PAGE, urls, [], scope=scope(), max_depth=3, child_depth=3, status=200)
    assert found.follow == urls and found.follow is not urls
