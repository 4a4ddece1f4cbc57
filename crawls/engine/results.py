"""What a fetched page yields besides its response: the digest of its body, the fields its
extraction rules pull out, and its out-links, each with why it was or was not followed (a
redirect's target first among them).

Runs in a slice's fetch threads (digest and extraction, on the body while it is in memory) and
in its main thread (links, once the page's row is decided). Plain values, no database.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from crawlhub.http.client import FetchResult
from crawls.engine.evaluator import Evaluator
from crawls.engine.request import Request, fingerprint
from crawls.engine.scope import Scope
from crawls.engine.structured import structured_data

# Out-links kept with a page (Page.links); links_total counts them all. A page whose links were
# cut is never fetched conditionally: a 304 would leave the cut ones unfollowed.
MAX_OUTLINKS = 1000
NOTE_DEPTH = "depth limit"
NOTE_LOOP = "a redirect loop: this chain was there already"
# A link row's text is cut to what the column holds (crawls.models.Link.text).
LINK_TEXT_CHARS = 200
# In-link rows a page writes at most (distinct targets, in document order): a page of
# nothing but links adds no more than this many rows.
MAX_LINK_ROWS = 10_000


def body_digest(body: bytes) -> str:
    """SHA-256 of a body, in hex: what "changed since the last run" compares."""
    return hashlib.sha256(body).hexdigest()


@dataclass
class Extracted:
    """What the crawl's rules (and its structured-data switch) found in one page."""

    fields: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    structured: dict | None = None


def extract(
    fetch: FetchResult, *, extractor: Evaluator | None, structured: bool
) -> Extracted | None:
    """The page's extracted fields: for a complete 2xx response only (an error page's fields
    would be noise, a cut one's a guess). None when there is nothing to do."""
    if extractor is None and not structured:
        return None
    if fetch.status is None or not 200 <= fetch.status < 300 or fetch.truncated:
        return None
    found = Extracted()
    if extractor is not None:
        extraction = extractor.extract(
            url=fetch.final_url, body=fetch.body, content_type=fetch.content_type
        )
        found.fields, found.errors = extraction.fields, extraction.errors
    if structured:
        found.structured = structured_data(
            url=fetch.final_url, body=fetch.body, content_type=fetch.content_type
        )
    return found


@dataclass
class OutLinks:
    """A page's links: those that go to the frontier, those kept with the page for people
    ([url, text, note], note "" for a followed one, but for a redirect back into its own
    chain: sent on, a repeat there, and noted as a loop), and the Link rows of its in-scope
    ones ((source fp, target fp, text), one per distinct target)."""

    follow: list[str] = field(default_factory=list)
    kept: list[list[str]] = field(default_factory=list)
    total: int = 0
    rows: list[tuple[int, int, str]] = field(default_factory=list)


def out_links(
    request: Request,
    urls: list[str],
    texts: list[str],
    *,
    scope: Scope,
    max_depth: int,
    child_depth: int,
    status: int | None,
) -> OutLinks:
    """Sort a page's links (urls, with texts by index) into followed and not, and why; the
    links would be requests at child_depth.

    Only a 2xx page's links are followed (as people's browsers do, not an error page's);
    in-scope links count as in-links of their targets whatever the depth."""
    found = OutLinks(total=len(urls))
    ok = status is not None and 200 <= status < 300
    deep = child_depth > max_depth
    page_note = "" if ok else f"not followed from an HTTP {status or 'error'} page"
    seen_targets: set[int] = set()
    # Once per link of every page: the lists' appends and the source held in locals.
    source, why_not = request.fp, scope.why_not
    add_row, follow, keep = found.rows.append, found.follow.append, found.kept.append
    if len(texts) < len(urls):
        texts = [*texts, *[""] * (len(urls) - len(texts))]
    for n, (url, text) in enumerate(zip(urls, texts, strict=False)):  # texts may run longer
        note = page_note or why_not(url)
        if not note:
            target = fingerprint(url)
            if target not in seen_targets and len(seen_targets) < MAX_LINK_ROWS:
                seen_targets.add(target)
                add_row((source, target, text[:LINK_TEXT_CHARS]))
            if deep:
                note = NOTE_DEPTH
            else:
                follow(url)
        if n < MAX_OUTLINKS:
            keep([url, text, note])
    return found


def with_redirect(
    found: OutLinks,
    request: Request,
    target: str,
    *,
    scope: Scope,
    status: int,
    too_many: str = "",
) -> OutLinks:
    """A redirect's links: where it points (`target`) first, then those of its own page (none
    followed, as from any page that is not 2xx).

    The target is followed when in scope and the chain is not too long (`too_many` says it
    is): it goes to the frontier at the page's own depth, carrying the chain, and the dedup set
    decides there, as for a link: a target already seen (linked, or a loop back into the
    chain) is a repeat and is not fetched again. One back into the chain is noted as a loop.
    An in-scope target is also an in-link of its page."""
    text, fp = f"HTTP {status} redirect", fingerprint(target)
    outside = scope.why_not(target)
    out = OutLinks(total=found.total + 1, rows=found.rows)
    if not outside:
        out.rows = [(request.fp, fp, text), *found.rows][:MAX_LINK_ROWS]
    note = outside or too_many
    if not note:
        out.follow = [target]
        if fp in {request.fp, *map(fingerprint, request.redirects)}:
            note = NOTE_LOOP
    out.kept = [[target, text, note], *found.kept][:MAX_OUTLINKS]
    return out


def kept_links(stored: list) -> tuple[list[str], list[str]]:
    """(urls, texts) of the links a page kept (Page.links), for a page answered 304 Not
    Modified: its links are those it had in the run it was compared with."""
    urls, texts = [], []
    for entry in stored:
        if isinstance(entry, list) and len(entry) >= 2 and isinstance(entry[0], str):
            urls.append(entry[0])
            texts.append(entry[1] if isinstance(entry[1], str) else "")
    return urls, texts
