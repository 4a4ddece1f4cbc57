"""Why a crawl ended, in one line: the words its page, the list, the API and webhooks show.

Decided where a crawl ends (lifecycle.finish_if_done and fail, services.crawl_cancel) from its
final counters, and saved with it (Crawl.end_reason, Crawl.end_line), never per page. A crawl
still running is "stalled" while it has work queued that no slice is fetching, or waits for
Redis memory (live.py, crawls/engine/sharing.py).
Pure functions of their arguments: the migration that fills in crawls ended before reads them.
"""

from __future__ import annotations

from crawlhub.redis.connections import RedisMemory
from crawls.models import EndReason

# The longest line kept (Crawl.end_line): a failure's error is cut to fit.
MAX_LINE = 500


def left_undone(stats: dict) -> int:
    """Requests scheduled and never done: dropped (cancel, a host dropped) or still waiting."""
    return sum(int(stats.get(name, 0)) for name in ("cancelled", "queued", "delayed", "in_flight"))


def finished_reason(stats: dict, *, max_pages: int) -> str:
    """A crawl whose every scheduled request was done: finished, or stopped by max pages when
    it reached the cap and links past it were refused. A sitemap file found missing is taken
    back out of the requests (freeing its place) after it held one: it counts here."""
    requests, dropped = int(stats.get("requests", 0)), int(stats.get("dropped", 0))
    held = requests + int(stats.get("sitemaps_missing", 0))
    if max_pages > 0 and held >= max_pages and dropped > 0:
        return EndReason.MAX_PAGES
    return EndReason.FINISHED


def end_line(
    *, reason: str, stats: dict, max_pages: int = 0, by: str | None = None, error: str = ""
) -> str:
    """The one line that says why a crawl ended. `by`: who cancelled it (a user name), None
    when no user was named (a command run without --user)."""
    requests = int(stats.get("requests", 0))
    answered, errors = int(stats.get("responses", 0)), int(stats.get("errors", 0))
    done, left = answered + errors, left_undone(stats)
    of = f"{done:,} of {requests:,} requests done"
    if reason == EndReason.MAX_PAGES:
        line = (
            f"Max pages reached: {requests:,} URLs scheduled, the cap of {max_pages:,}; "
            f"{int(stats.get('dropped', 0)):,} links were not followed (past the cap or the "
            "max depth)."
        )
    elif reason == EndReason.CANCELLED:
        who = f"by {by}" if by else "with no user named"
        line = f"Cancelled {who} with {left:,} requests left undone ({of})."
    elif reason == EndReason.FAILED:
        why = error.strip().rstrip(".") or "no reason recorded"
        tail = f"{left:,} requests left undone ({of})" if left else of
        line = f"Failed: {why}; {tail}."
    else:
        counts = f"{answered:,} answered, {errors:,} errors"
        if left:
            counts += f"; {left:,} dropped by an operator"
        line = f"Finished: every URL it scheduled was done ({counts})."
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def stalled_line(stats: dict) -> str:
    """A running crawl with work queued that no slice is fetching (live.waiting_for_worker)."""
    waiting = int(stats.get("queued", 0)) + int(stats.get("delayed", 0))
    return (
        f"Stalled: {waiting:,} requests wait and no worker is fetching them (every worker is "
        "busy with other jobs, or none is running: see Workers)."
    )


def memory_line(memory: RedisMemory, *, held: int, share: int, running: int) -> str:
    """A running crawl that waits for Redis memory (its slices claim nothing): Redis holds its
    budget and the crawl at least the average of the `running` crawls (`held` bytes against
    `share`, that average), or Redis holds its stop mark (crawls.engine.sharing)."""
    percent = round(memory.budget * 100 / max(1, memory.maxmemory))
    if memory.stopped:
        why = "every crawl waits past the mark halfway to its maxmemory"
    elif running <= 1:
        why = "this crawl runs alone and waits at the budget"
    else:
        why = (
            f"this crawl holds about {held / 2**20:,.1f} MB of it, at least the average of the "
            f"{running:,} running crawl{'' if running == 1 else 's'} ({share / 2**20:,.1f} MB); "
            "crawls holding less go on"
        )
    return (
        f"Waiting for Redis memory: it holds {memory.used / 2**20:,.1f} MB, crawlhub's budget "
        f"is {memory.budget / 2**20:,.1f} MB ({percent}% of its maxmemory, "
        f"{memory.maxmemory / 2**20:,.1f} MB); {why}. Nothing is lost; fetching goes "
        "on by itself once memory frees (a crawl cancelled or deleted, a larger maxmemory)."
    )
