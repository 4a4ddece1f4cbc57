"""How a slice records what it fetched: each result becomes rows (a page and its links, or
a failure) and an outcome for the frontier; the rows are written in one transaction per batch,
and a batch the database refuses is written again one result at a time.

Also what the crawl's baseline (a schedule's previous run) knew of each URL held: the
validators of conditional requests, and the page a 304 stands for.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from itertools import chain

from django.db import transaction
from django.utils import timezone

from crawlhub.http import FetchResult
from crawlhub.redis.connections import REDIS_ERRORS
from crawls.engine import crawl_log, results, retry, sitemap_reads
from crawls.engine.baseline import Baseline, Known, change_of
from crawls.engine.crawl_log import SliceLog
from crawls.engine.request import VIA_LISTED, VIA_REDIRECT, VIA_SITEMAP_ROOT, Outcome, Request
from crawls.engine.rows import (
    LINK_COLUMNS,
    LINK_ROWS,
    PAGE_ROWS,
    PageExtras,
    crash_failure_row,
    database_answers,
    failure_row,
    link_rows,
    page_row,
)
from crawls.engine.scope import Scope
from crawls.models import Crawl, CrawlEvent, FailedRequest

log = logging.getLogger(__name__)

# A result holds its body and links until it is written; a link counts about this much.
LINK_BYTES = 100
# A Link row's target fingerprint (rows.LINK_COLUMNS).
_LINK_TARGET = operator.itemgetter(LINK_COLUMNS.index("target_fp"))


@dataclass
class Result:
    """A finished fetch, waiting to be written and completed."""

    request: Request
    fetch: FetchResult | None = None
    blocked: str = ""  # why the request was not fetched (the guard, robots.txt)
    # Not fetched, back to the queue: the slice is stopping, or the host's robots.txt was
    # asked for in this request's turn.
    handed_back: bool = False
    given_up: bool = False  # not fetched: it crashed too many slices (retry.gave_up)
    digest: str = ""  # of the body (results.body_digest), taken before the body is dropped
    extracted: results.Extracted | None = None
    sitemap: sitemap_reads.SitemapRead | None = None  # for a sitemap request
    page: tuple | None = None  # the Page row, as PAGE_ROWS writes it
    links: list[tuple] = field(default_factory=list)  # its Link rows, as LINK_ROWS writes them
    failure: FailedRequest | None = None
    outcome: Outcome | None = None

    @property
    def held_bytes(self) -> int:
        """About what the result holds in memory until it is written: body and links."""
        if self.fetch is None:
            return 0
        return len(self.fetch.body) + LINK_BYTES * len(self.fetch.links)


class Recorder:
    """A slice's writing side. Used from the slice's main thread only (the database)."""

    def __init__(
        self, crawl: Crawl, scope: Scope, *, max_redirects: int = 10, log: SliceLog | None = None
    ) -> None:
        self.crawl = crawl
        self.scope = scope
        self.log = log  # the slice's log: its lines go with the batch's rows
        # A redirect chain longer than this (the Fetcher's) ends with an error on its last page.
        self.max_redirects = max_redirects
        self.baseline = Baseline(crawl.baseline_id)
        self.known: dict[int, Known] = {}  # what the baseline knew of the requests held

    def look_up(self, fps: list[int]) -> None:
        """What the baseline knew of these claimed requests (one query), for their fetches."""
        if self.baseline and fps:
            self.known.update(self.baseline.lookup(fps))

    def conditional_headers(self, request: Request) -> dict[str, str] | None:
        """If-None-Match / If-Modified-Since for a page the baseline fetched whole."""
        known = self.known.get(request.fp)
        return known.conditional_headers() if known else None

    def decide(self, result: Result, carried: dict[int, dict]) -> None:
        """The result's rows (page and links, or failure) and the outcome the frontier
        records. `carried`: the baseline's pages of this batch's 304s (Baseline.pages)."""
        request, fetch = result.request, result.fetch
        now = timezone.now()
        if result.given_up:
            result.failure = crash_failure_row(self.crawl, request, now)
            result.outcome = Outcome(request=request, kind="failed")
            return
        kind = retry.decide(fetch, attempts=request.attempts, max_retries=self.crawl.max_retries)
        if result.sitemap is not None:
            # A sitemap is read once, whatever came: what it lists (a root's robots.txt
            # sitemaps too) goes on, and what went wrong is a note on the crawl.
            kind = retry.DONE
        if result.sitemap is not None and result.sitemap.absent:
            # No page of the site: no row, no status class; the log says so (write).
            result.outcome = Outcome(
                request=request,
                kind="absent",
                status=fetch.status,
                nbytes=fetch.nbytes,
                sitemaps=result.sitemap.sitemaps,
            )
        elif kind == retry.RETRY:
            delay = retry.retry_delay(request.attempts, fetch.retry_after)
            error = fetch.error or f"HTTP {fetch.status}"
            result.outcome = Outcome(request=request, kind="retry", retry_delay=delay, error=error)
        elif kind == retry.FAILED:
            result.failure = failure_row(self.crawl, request, fetch, now)
            # Its last answer's status (a 500 that used up its retries) counts in its class.
            result.outcome = Outcome(request=request, kind="failed", status=fetch.status)
        elif fetch is None:
            result.page = page_row(self.crawl, request, now, error=result.blocked)
            result.outcome = Outcome(request=request, kind="done")
        else:
            self._decide_page(result, carried.get(request.fp), now)

    def _decide_page(self, result: Result, carried: dict | None, now) -> None:
        request, fetch = result.request, result.fetch
        known = self.known.pop(request.fp, None)
        if fetch.redirect_to and len(request.redirects) >= self.max_redirects:
            fetch.error = f"too many redirects (over {self.max_redirects})"
            fetch.error_kind = "redirects"
        not_modified = fetch.status == 304 and carried is not None
        links = self._out_links(result, carried if not_modified else None)
        extras = PageExtras(
            digest=carried["digest"] if not_modified else result.digest,
            extracted=result.extracted,
            links=links,
            carried=carried if not_modified else None,
            change=change_of(
                known, digest=result.digest, not_modified=not_modified, baseline=bool(self.baseline)
            ),
        )
        if result.sitemap is not None:
            extras.extracted = results.Extracted(errors=_sitemap_errors(result.sitemap))
        result.page = page_row(self.crawl, request, now, fetch=fetch, extras=extras)
        result.links = link_rows(self.crawl, links)
        via = VIA_LISTED if result.sitemap else VIA_REDIRECT if fetch.redirect_to else ""
        result.outcome = Outcome(
            request=request,
            kind="done",
            status=fetch.status,
            nbytes=fetch.nbytes,
            links=links.follow,
            links_via=via,
            sitemaps=result.sitemap.sitemaps if result.sitemap else [],
        )

    def _out_links(self, result: Result, carried: dict | None) -> results.OutLinks:
        """The page's links, sorted: its own; a 304's, those of the page it stands for; a
        sitemap's, the pages it lists (which cost no depth); a redirect's, where it points
        first (which costs no depth either)."""
        request, fetch = result.request, result.fetch
        status, child_depth = fetch.status, request.depth + 1
        urls, texts = fetch.links, fetch.link_texts
        if carried is not None:
            (urls, texts), status = results.kept_links(carried.get("links") or []), 200
        elif result.sitemap is not None:
            urls, texts, child_depth = result.sitemap.pages, [], request.depth
        found = results.out_links(
            request,
            urls,
            texts,
            scope=self.scope,
            max_depth=self.crawl.max_depth,
            child_depth=child_depth,
            status=status,
        )
        if fetch.redirect_to:
            found = results.with_redirect(
                found,
                request,
                fetch.redirect_to,
                scope=self.scope,
                status=fetch.status,
                too_many=fetch.error if fetch.error_kind == "redirects" else "",
            )
        return found

    def write(self, done: list[Result]) -> int:
        """Decide each result and write its rows. Returns how many pages were written."""
        not_modified = [r.request.fp for r in done if r.fetch and r.fetch.status == 304]
        carried = self.baseline.pages(not_modified)
        for result in done:
            self.decide(result, carried)
        pages = [r.page for r in done if r.page is not None]
        failures = [r.failure for r in done if r.failure is not None]
        notes = [
            crawl_log.line(self.crawl.pk, CrawlEvent.Kind.SITEMAP, problem)
            for r in done
            if r.sitemap is not None and r.page is not None
            for problem in r.sitemap.problems
        ]
        notes += [_absent_line(self.crawl.pk, r) for r in done if r.sitemap and r.sitemap.absent]
        logged = self.log.take() if self.log is not None else []
        # A refused row gives up the whole transaction (write_one_by_one goes on from there),
        # so the inserts need no savepoints of their own.
        try:
            with transaction.atomic():
                PAGE_ROWS.write(pages, savepoint=False)
                # In the order of their index (crawl, target): each row goes next to the one
                # before it, not to a random place in the index (a quarter less CPU on SQLite).
                links = sorted(chain.from_iterable(r.links for r in done), key=_LINK_TARGET)
                LINK_ROWS.write(links, savepoint=False)
                if failures:
                    FailedRequest.objects.bulk_create(
                        failures, batch_size=500, ignore_conflicts=True
                    )
                if notes or logged:
                    CrawlEvent.objects.bulk_create(notes + logged)
        except BaseException:
            if logged:
                self.log.put_back(logged)
            raise
        return len(pages)

    def write_one_by_one(self, results: list[Result]) -> int:
        """After a batch failed: each result alone. One whose row still fails crashes (queued
        again, its error kept); if the database does not answer at all, the slice stops."""
        written, crashed = 0, []
        for result in results:
            try:
                written += self.write([result])
            except REDIS_ERRORS:
                raise
            except Exception as exc:
                crashed.append((result, " ".join(f"{type(exc).__name__}: {exc}".split())))
        if crashed and not database_answers():
            raise RuntimeError(
                "the database does not answer: the slice stops, its requests stay leased"
            )
        for result, error in crashed:
            log.error("could not record %s: %s", result.request.url, error)
            if result.given_up:  # not even its failure row: counted as failed, and it ends
                result.outcome = Outcome(request=result.request, kind="failed")
                continue
            result.outcome = Outcome(
                request=result.request, kind="crashed", retry_delay=retry.CRASH_DELAY, error=error
            )
        return written


def _absent_line(crawl_id: int, result: Result) -> CrawlEvent:
    """The log's line for a sitemap file that is not there: a note for the /sitemap.xml the
    crawl guessed (most sites have none), a warning for one the site listed."""
    guessed = result.request.via == VIA_SITEMAP_ROOT
    return crawl_log.line(
        crawl_id,
        CrawlEvent.Kind.SITEMAP,
        result.sitemap.absent,
        host=result.request.host,
        level=CrawlEvent.Level.INFO if guessed else CrawlEvent.Level.WARNING,
    )


def _sitemap_errors(read: sitemap_reads.SitemapRead) -> dict[str, str]:
    """What a sitemap page shows of its problems (they are also notes on the crawl)."""
    return {"sitemap": "; ".join(read.problems)[:2000]} if read.problems else {}
