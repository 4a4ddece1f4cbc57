"""A running or paused crawl's include and exclude patterns changed (services.editing): what no
longer fits is dropped, and what is found from then on obeys the new patterns.

How it holds, whatever the workers are doing when the change comes:
- The patterns are saved first, then the frontier's scope generation goes up
  (Frontier.scope_change). Every claim returns the generation (claim.lua), so a slice learns of
  the change with the next requests it takes, reads the patterns again (current_scope) and,
  from then on, checks what it claims against them (request_fits): a request that no longer
  fits is dropped there (Frontier.drop_claimed), never fetched. That catches what no drop of
  the queue could: links a slice queued under the old patterns just after the change.
- Requests already claimed when the change came (Frontier.scope_change lists them) were on
  their way: they are fetched, as pages being fetched finish when a crawl is paused; the
  links of each page a slice records after it took in the change obey the new patterns.
- The queue, the retries and the requests waiting in the database (the overflow:
  crawls/engine/overflow.py) are looked at in batches (drop_out_of_scope): the first budget
  while the person waits, the rest in a job on the control queue (drop_job), which stops if
  the patterns change again (the next change's job looks at the whole queue anew).
Each request dropped counts in "cancelled", so that the counters still add up, and in
"descoped".
"""

from __future__ import annotations

import logging

from crawls.engine.crawl_settings import scope_of
from crawls.engine.frontier import Frontier
from crawls.engine.overflow import Overflow
from crawls.engine.request import Request
from crawls.engine.scope import Scope
from crawls.models import Crawl, CrawlEvent

log = logging.getLogger(__name__)

# Queue entries looked at while the person who changed the scope waits (about 0.1 s a
# thousand); a bigger queue goes on in a job, this many at a time.
INLINE_BUDGET = 5_000
JOB_BUDGET = 20_000
# A cursor past the queue and the retries: the id of the last row of the overflow looked at.
SPILLED_CURSOR = "spilled:"


def request_fits(scope: Scope, request: Request) -> bool:
    """Whether the crawl would queue this request now: a page by its URL, a sitemap file by its
    site alone (as a sitemap listed by robots.txt or a seed's site is read whatever the
    patterns)."""
    if request.reads_sitemap:
        return scope.allows_site(request.url)
    return scope.allows(request.url)


def current_scope(crawl: Crawl) -> Scope:
    """The crawl's scope with its patterns as saved now (they may have changed since `crawl`
    was read; its fields are brought up to date). ScopeError if they cannot be used."""
    fresh = Crawl.objects.filter(pk=crawl.pk).values("include_patterns", "exclude_patterns")
    for row in fresh:
        crawl.include_patterns, crawl.exclude_patterns = (
            row["include_patterns"],
            row["exclude_patterns"],
        )
    return scope_of(crawl)


def drop_out_of_scope(
    crawl: Crawl, *, gen: int, cursor: str = "", budget: int | None = None
) -> tuple[int, str] | None:
    """Drop the queued requests, retries and requests waiting in the database the crawl's
    patterns refuse, looking at about `budget` entries (INLINE_BUDGET) from `cursor`.
    Returns (dropped, the cursor to go on from, "" when all was looked at), or None when the
    patterns changed again since change `gen` (the next change looks at everything
    itself)."""
    frontier = Frontier(crawl.pk)
    if frontier.scope_generation() != gen:
        return None
    scope = current_scope(crawl)
    budget = INLINE_BUDGET if budget is None else budget

    def fits(request: Request) -> bool:
        return request_fits(scope, request)

    dropped = 0
    if not cursor.startswith(SPILLED_CURSOR):
        dropped, cursor = frontier.drop_unfit(fits, cursor=cursor, budget=budget)
        if cursor:
            return dropped, cursor
    after = int(cursor.removeprefix(SPILLED_CURSOR) or 0)
    more, last = Overflow(frontier).drop_unfit(fits, after=after, budget=budget)
    return dropped + more, "" if last is None else f"{SPILLED_CURSOR}{last}"


def drop_job(crawl_id: int, gen: int, cursor: str, dropped_before: int) -> dict:
    """The rest of a change's drop, after the part done while the person waited: on to the end
    of the queue and the retries, then one event on the crawl saying how many in all."""
    crawl = Crawl.objects.filter(pk=crawl_id).first()
    if crawl is None:
        return {"reason": "crawl deleted"}
    dropped = 0
    while cursor:
        step = drop_out_of_scope(crawl, gen=gen, cursor=cursor, budget=JOB_BUDGET)
        if step is None:
            log.info("crawl %s: scope changed again; change %s's drop stops", crawl_id, gen)
            break
        more, cursor = step
        dropped += more
    total = dropped_before + dropped
    CrawlEvent.objects.create(
        crawl=crawl,
        kind=CrawlEvent.Kind.CHANGED,
        detail=f"scope change {gen}: {total:,} queued request(s) dropped in all, "
        f"{dropped:,} of them in the background" + (" (stopped: changed again)" if cursor else ""),
    )
    return {"dropped": dropped, "stopped": bool(cursor)}
