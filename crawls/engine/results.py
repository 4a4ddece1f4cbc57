"""What a fetched page yields besides its response: the digest of its body, the fields its
extraction rules pull out, and its out-links, each with why it was or was not followed (a
redirect's target first among them).

Runs in a slice's fetch threads (digest and extraction, on the body while it is in memory) and
in its main thread (links, once the page's row is decided). Plain values, no database.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from operator import getitem, not_

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
_LINK_TEXT = slice(LINK_TEXT_CHARS)
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
    in-scope links count as in-links of their targets whatever the depth.

    Runs for every link of every page in the slice's main thread: the lists are made by
    map, zip and compress (a loop in C) rather than a Python loop over the links, which
    cost ~75 bytecode instructions a link besides its scope and fingerprint."""
    found = OutLinks(total=len(urls))
    if len(texts) != len(urls):  # texts may run longer, or shorter: "" for the rest
        texts = [*texts[: len(urls)], *[""] * (len(urls) - len(texts))]
    ok = status is not None and 200 <= status < 300
    if not ok:  # nothing followed, no in-link
        notes = [f"not followed from an HTTP {status or 'error'} page"] * len(urls)
        found.kept = _kept(urls, texts, notes)
        return found
    notes = list(map(scope.why_not, urls))
    if any(notes):  # some out of scope: the others
        inside = list(compress(urls, map(not_, notes)))
        inside_texts = compress(texts, map(not_, notes))
    else:
        inside, inside_texts = urls, texts
    targets = list(map(fingerprint, inside))
    cut = map(getitem, inside_texts, repeat(_LINK_TEXT))
    distinct = dict.fromkeys(targets)
    if len(distinct) == len(targets):
        found.rows = list(zip(repeat(request.fp), targets, cut, strict=False))
    else:  # one row per target, in document order, with the text of its first link
        first_text = dict(zip(reversed(targets), reversed(list(cut)), strict=True))
        cut = map(first_text.__getitem__, distinct)
        found.rows = list(zip(repeat(request.fp), distinct, cut, strict=False))
    if len(found.rows) > MAX_LINK_ROWS:
        del found.rows[MAX_LINK_ROWS:]
    if child_depth > max_depth:
        notes = [note or NOTE_DEPTH for note in notes]
    else:
        found.follow = list(inside)
    found.kept = _kept(urls, texts, notes)
    return found


def _kept(urls: list[str], texts: list[str], notes: list[str]) -> list[list[str]]:
    """The links a page keeps: [url, text, note], the first MAX_OUTLINKS."""
    return list(map(list, islice(zip(urls, texts, notes, strict=True), MAX_OUTLINKS)))


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
